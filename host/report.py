"""The report of a flow run (``rlhls run``, ``rlhls.Flow.report``) and its plots.

* ``phase_totals(metrics)`` / ``phases_figure`` — the per-update phase times (``t_<phase>``
  columns of metrics.csv; each algorithm times its own phases) as stacked bars per update, plus
  each phase's share beside the seed's own per-phase figures where the design keeps them
  (``seed_figures['phase_shares']``: HEPPO-GAE Table I).
* ``csim_figure`` — one bar per checked component (PL kernels, hls4ml projects, AIE kernels):
  seconds, green pass / red fail.
* ``write_report(path, record)`` — report.md from a flow's record: the design and its seed, the
  training graph, the plan (Gantt), build and checks, training (reward curve, phases), then the
  sections a seed's module adds (``register_report_section(fn)``, ``fn(record, folder) -> markdown
  lines``, [] where it has nothing to say: the traffic seed's compute element and its agent
  against the fixed-time plan).
  The ``host/experiments/*.py`` modules are imported first, so theirs are there.
* ``write_html(folder)`` — ``<folder>/report.html``: one self-contained page of an experiment's
  (or a flow's) Markdown summaries (tables, rendered by Python-Markdown) with its PNG figures embedded as data
  URIs, so it opens in any browser, mailed or copied, with no web server and no other file.

Figures are matplotlib ``Figure`` objects (the object API: a notebook's backend is left alone);
``save_png`` writes one atomically.
"""

from __future__ import annotations

import io
import math

import numpy as np

from rlhls.partition.fileio import _inside, atomic_write_bytes, atomic_write_text

__all__ = ["phase_totals", "phases_figure", "csim_figure", "save_png", "write_report", "markdown_table",
           "mean_std_band", "register_report_section", "write_html", "HTML_PAGE"]

HTML_PAGE = "report.html"

REPORT_SECTIONS: list = []


def register_report_section(fn) -> None:
    """Add ``fn(record, folder) -> list of markdown lines`` to every flow report (module docstring)."""
    if fn not in REPORT_SECTIONS:
        REPORT_SECTIONS.append(fn)


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _phases(metrics: list[dict]) -> list[str]:
    return [k[2:] for k in (metrics[0] if metrics else {}) if k.startswith("t_")]


def phase_totals(metrics: list[dict]) -> dict:
    """Seconds per phase summed over all updates."""
    return {p: float(np.nansum([_float(r[f"t_{p}"]) for r in metrics])) for p in _phases(metrics)}


def save_png(fig, path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


def phases_figure(metrics: list[dict], title: str = "", seed_shares: dict | None = None):
    """Stacked phase seconds per update; shares of the run (beside the seed's, when given:
    {phase: [label, percent]})."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    phases = _phases(metrics)
    label = {p: (seed_shares or {}).get(p, [p])[0] for p in phases}
    if not phases:
        ax1.text(0.5, 0.5, "no update yet", ha="center", va="center", transform=ax1.transAxes)
    else:
        import matplotlib

        colors = matplotlib.colormaps["tab10"].colors
        x = np.array([int(_float(r["update"])) for r in metrics])
        bottom = np.zeros(len(metrics))
        for i, p in enumerate(phases):
            y = np.array([_float(r[f"t_{p}"]) for r in metrics])
            ax1.bar(x, y, bottom=bottom, color=colors[i % 10], label=label[p])
            bottom += y
        ax1.set_xlabel("update")
        ax1.set_ylabel("seconds")
        ax1.set_title("time per update by phase")
        ax1.grid(alpha=0.3, axis="y")
        ax1.legend(fontsize=7, loc="upper left")
        tot = phase_totals(metrics)
        s = sum(tot.values()) or 1.0
        yy = np.arange(len(phases))
        ax2.barh(yy - 0.2, [100 * tot[p] / s for p in phases], 0.4, color="tab:blue", label="this run")
        if seed_shares:
            ax2.barh(yy + 0.2, [(seed_shares.get(p, [p, None])[1] or 0.0) for p in phases], 0.4, color="tab:gray",
                     label="the seed's figure")
        ax2.set_yticks(yy, [label[p] for p in phases], fontsize=8)
        ax2.invert_yaxis()
        ax2.set_xlabel("% of update time")
        ax2.legend(fontsize=8, loc="lower right")
        ax2.grid(alpha=0.3, axis="x")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def csim_figure(results: list[dict], title: str = "C simulation"):
    """results: [{'name', 'kernel', 'passed', 'seconds', 'cached'}]."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 0.45 * max(3, len(results)) + 1))
    ax = fig.add_subplot()
    if results:
        y = np.arange(len(results))
        secs = [max(float(r.get("seconds") or 0.0), 1e-3) for r in results]
        ax.barh(y, secs, color=["tab:green" if r["passed"] else "tab:red" for r in results])
        ax.set_yticks(y, [f"{r['name']} ({r.get('kernel') or 'hls4ml'})" for r in results], fontsize=8)
        ax.invert_yaxis()
        for yi, r, s in zip(y, results, secs):
            ax.text(s, yi, f"  {'pass' if r['passed'] else 'FAIL'}{' (cached)' if r.get('cached') else ''}",
                    va="center", fontsize=8)
        ax.set_xlabel("seconds (g++ build + testbench; green = pass, red = fail)")
    else:
        ax.text(0.5, 0.5, "nothing simulated", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def mean_std_band(ax, per_seed: list, color, label: str, points: int = 100) -> bool:
    """Mean +- std over seeds of curves [(x, y)], on the x range they share; False when none has a point."""
    per_seed = [(x, y) for x, y in per_seed if len(x)]
    if not per_seed:
        return False
    lo, hi = max(x[0] for x, _ in per_seed), min(x[-1] for x, _ in per_seed)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.array([np.interp(grid, x, y) for x, y in per_seed])
    m, sd = ys.mean(axis=0), ys.std(axis=0)
    ax.plot(grid, m, color=color, label=f"{label} (n={len(per_seed)})", marker="." if len(grid) == 1 else None)
    ax.fill_between(grid, m - sd, m + sd, color=color, alpha=0.2)
    return True


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _g(x, spec=".4g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def write_report(path, rec: dict) -> None:
    """report.md from a flow record (rlhls/api.py ``Flow.record``)."""
    checks = (rec.get("build") or {}).get("checks", 0)
    if rec.get("failures"):
        verdict = "FAILED: " + "; ".join(rec["failures"])
    elif checks:
        verdict = f"every check passed ({checks} check(s))"
    else:  # nothing failed, and nothing was checked: not a pass
        verdict = "no check ran (no build with --csim, --synth or --cosim)"
    L = [f"# rlhls run: {rec['design']}", "",
         f"Seed: *{rec.get('seed_title', '')}* (`{rec.get('seed_file', '')}`).  ",
         f"Algorithm {rec.get('algorithm', '').upper()}, device {rec['device']}, training batch {rec['batch']}, "
         f"environment {rec.get('env', '-')}, backend `{rec.get('backend', 'emu')}`, seed {rec.get('seed', 0)}"
         + (f", precision {rec['precision']}" if rec.get("precision") else "")
         + (f", {rec['experiment_text']}" if rec.get("experiment_text") else "") + ".", "",
         f"**Result: {verdict}**", ""]
    for n in rec.get("notes", []):
        L.append(f"- {n}")
    L += ["", "## Stages", "",
          markdown_table(["stage", "seconds", "status", "output"],
                         [[s["stage"], f"{s['seconds']:.1f}", s["status"], f"`{s['output']}`"]
                          for s in rec.get("stages", [])])]
    g = rec.get("graph")
    if g:
        L += ["## Training graph", "",
              f"{g['nodes']} nodes, {g['edges']} edges, {g['mm_nodes']} matrix-multiply nodes; "
              f"{g['flops'] / 1e6:.2f} MFLOPs per training step (`graph.csv`; profile rows in `profile.csv`).", ""]
    p = rec.get("plan")
    if p:
        L += ["## Partition (ILP)", "",
              f"makespan **{p['makespan_us']:.6g} us**, status {p['status']}, gap {p['gap']:.2%}, "
              f"solved in {p['solve_seconds']:.2f} s. Nodes per unit: "
              + ", ".join(f"{u} {n}" for u, n in p["units"].items()) + ".", ""]
        rows = [[k, "n/a" if v is None else f"{v:.6g}",
                 "" if v is None or not p["makespan_us"] else f"x{v / p['makespan_us']:.2f}"]
                for k, v in p["baselines"].items()]
        L.append(markdown_table(["baseline", "makespan (us)", "vs plan"], rows))
        own = p.get("own_units") or {}
        if own:
            L += ["", "The design's own units: " + "; ".join(f"`{k}` ({', '.join(v)})" for k, v in own.items())
                  + " (rows on that unit only: the seed's accelerator is the design)."]
        L += ["", "![Gantt of the plan](plan/gantt.png)", ""]
    b = rec.get("build")
    if b:
        L += ["## Build and checks", ""]
        if b.get("error"):
            L += [f"The build failed: {b['error']}", ""]
        else:
            L += [f"{len(b['components'])} PL component(s) in `build/` (part {b['part']}), "
                  f"{len(b['aie'])} AIE node(s), {len(b['host'])} node(s) on the PS.", ""]
        rows = [[c["name"], c.get("kernel") or "hls4ml", c.get("unit", "PL"), ", ".join(c.get("nodes", [])) or "-",
                 "-" if c.get("passed") is None else ("pass" if c["passed"] else "**FAIL**"),
                 _g(c.get("seconds"), ".1f"), (c.get("detail") or "").replace("|", "\\|")[:120]]
                for c in rec.get("csim", [])]
        if rows:
            L.append(markdown_table(["component", "kernel", "unit", "graph nodes", "check", "s", "detail"], rows))
            L += ["", "![checks](csim.png)", ""]
        for w in b.get("notes", []):
            L.append(f"- {w}")
        L.append("")
    t = rec.get("train")
    if t:
        L += ["## Training", "",
              f"{t['updates']} update(s), {t['env_steps']} environment steps, {t['episodes']} finished episode(s); "
              f"final rolling-average return **{_g(t['final_return'], '.2f')}**. Run folder `train/` (metrics.csv, "
              "episodes.csv, checkpoint; `rlhls train ... --out <this>/train --resume` continues it).", ""]
        for n in t.get("notes", []):
            L.append(f"- {n}")
        L += ["", "![reward curve](train/reward.png)", "", "### Time per phase", ""]
        tot = t.get("phases", {})
        s = sum(tot.values()) or 1.0
        shares = rec.get("seed_phase_shares") or {}
        head = ["phase", "seconds", "% this run"] + (["% seed's figure"] if shares else [])
        L.append(markdown_table(head, [[shares.get(k, [k])[0], f"{v:.2f}", f"{100 * v / s:.1f}"]
                                       + ([_g(shares.get(k, [k, None])[1], ".2f")] if shares else [])
                                       for k, v in tot.items()]))
        L += ["", "![phases](phases.png)", ""]
    if rec.get("perf"):
        from .perf import report_lines

        L += report_lines(rec["perf"])
    from pathlib import Path

    from .experiments import experiment_names

    try:
        experiment_names()  # imports the seeds' modules: their sections register
    except Exception as e:  # a seed's module that does not import costs its section, not the report
        L += [f"(a report section's module failed to import: {type(e).__name__}: {e})", ""]
    for fn in REPORT_SECTIONS:
        L += fn(rec, Path(path).parent)
    atomic_write_text(path, "\n".join(L).rstrip() + "\n")


_CSS = ("body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}"
        "th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}img{max-width:100%}"
        "code{background:#f3f3f3;padding:0 3px}h1{font-size:1.6em}h2{font-size:1.3em}nav a{margin-right:1em}")


def write_html(folder, title: str | None = None):
    """``<folder>/report.html`` from the Markdown files at the top of `folder` (their order by name)
    and its PNG figures: a figure a Markdown file shows (in `folder` or a folder inside it) is
    embedded where it stands, the top-level others after the text. Returns the page's path (None when the folder has neither)."""
    import base64
    import html
    import re
    from pathlib import Path

    import markdown

    folder = Path(folder)
    mds = sorted(p for p in folder.glob("*.md") if p.is_file())
    pngs = sorted(p for p in folder.glob("*.png") if p.is_file())
    if not mds and not pngs:
        return None
    shown: set = set()

    def embed(m):
        src = html.unescape(m.group(2))
        f = folder / src
        if not _inside(folder, src) or f.suffix.lower() != ".png" or not f.is_file():
            return m.group(0)
        shown.add(f.resolve())
        data = base64.b64encode(f.read_bytes()).decode("ascii")
        return f'{m.group(1)}data:image/png;base64,{data}{m.group(3)}'

    parts = []
    for p in mds:
        body = markdown.markdown(p.read_text(errors="replace"), extensions=["tables", "fenced_code"])
        parts.append(f'<section id="{html.escape(p.stem)}">\n'
                     + re.sub(r'(<img[^>]*\ssrc=")([^"]+)(")', embed, body) + "\n</section>")
    rest = [p for p in pngs if p.resolve() not in shown]
    if rest:
        figs = "".join(f'<figure><img alt="{html.escape(p.name)}" src="data:image/png;base64,'
                       f'{base64.b64encode(p.read_bytes()).decode("ascii")}"><figcaption>{html.escape(p.name)}'
                       "</figcaption></figure>\n" for p in rest)
        parts.append(f'<section id="figures"><h2>Figures</h2>\n{figs}</section>')
    title = title or folder.name
    nav = " ".join(f'<a href="#{html.escape(p.stem)}">{html.escape(p.name)}</a>' for p in mds)
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body>\n<nav>{nav}</nav>\n" + "\n".join(parts) + "\n</body></html>\n")
    path = folder / HTML_PAGE
    atomic_write_text(path, page)
    return path
