"""Figures, tables and the one-page HTML view: the leaf every report and experiment draws with.

* ``csv_text`` — rows as CSV, floats exact (repr), NaN as an empty field; ``markdown_table``.
* ``reward_figure`` / ``plot_rewards`` — episodic return per episode and its rolling average
  (``rolling_window``: HEPPO-GAE Fig. 10 uses 1000 readings; here ``min(1000, max(1, n // 10))``
  so short runs still show a curve).
* ``phase_totals(metrics)`` / ``phases_figure`` — the per-update phase times (``t_<phase>``
  columns of metrics.csv; each algorithm times its own phases) as stacked bars per update, plus
  each phase's share beside the seed's own per-phase figures where the design keeps them
  (``seed_figures['phase_shares']``: HEPPO-GAE Table I).
* ``csim_figure`` — one bar per checked component (PL kernels, hls4ml projects, AIE kernels):
  seconds, green pass / red fail. ``mean_std_band`` — a curve over seeds with its band.
* ``register_report_section(fn)`` — a seed's own section of a flow's report (host/report.py reads
  ``REPORT_SECTIONS``): ``fn(record, folder) -> markdown lines``, [] where it has nothing to say.
* ``write_html(folder)`` — ``<folder>/report.html``: one self-contained page of an experiment's
  (or a flow's) Markdown summaries (tables, rendered by Python-Markdown) with its PNG figures embedded as data
  URIs, so it opens in any browser, mailed or copied, with no web server and no other file.

Figures are matplotlib ``Figure`` objects (the object API: a notebook's backend is left alone);
``save_png`` writes one atomically.
"""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from rlhls.core.fileio import _inside, atomic_write_bytes, atomic_write_text

__all__ = ["csv_text", "markdown_table", "rolling_window", "reward_figure", "plot_rewards", "phase_totals",
           "phases_figure", "csim_figure", "mean_std_band", "save_png", "register_report_section", "REPORT_SECTIONS",
           "write_html", "HTML_PAGE"]

def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def csv_text(rows: list[dict], columns: list[str]) -> str:
    """CSV with a header; floats as repr (exact), NaN as an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_fmt(r.get(c, "")) for c in columns])
    return buf.getvalue()


HTML_PAGE = "report.html"


REPORT_SECTIONS: list = []


def register_report_section(fn) -> None:
    """Add ``fn(record, folder) -> list of markdown lines`` to every flow report (module docstring)."""
    if fn not in REPORT_SECTIONS:
        REPORT_SECTIONS.append(fn)


def mean_std(mean: float, std: float, n: int, spec: str = ".2f", std_spec: str = ".2f", *, pad: bool = False) -> str:
    """'mean ± std' of `n` values; the mean alone where fewer than two give no spread (no '± 0.00' for
    one seed), padded to the same width with `pad` (aligned console lines)."""
    text = format(mean, spec)
    spread = f" ± {format(std, std_spec)}"
    if n >= 2:
        return text + spread
    return text + (" " * len(spread) if pad else "")


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def rolling_window(n: int) -> int:
    return min(1000, max(1, n // 10))


def reward_figure(episodes: list, title: str):
    """Episodic return per episode and its rolling average (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    if episodes:
        x = np.array([e[0] for e in episodes], dtype=float)
        y = np.array([e[1] for e in episodes], dtype=float)
        w = rolling_window(len(y))
        ax.plot(x, y, ".", ms=2, alpha=0.3, color="tab:blue", label="episode return")
        if len(y) >= w:
            c = np.cumsum(np.insert(y, 0, 0.0))
            ax.plot(x[w - 1:], (c[w:] - c[:-w]) / w, color="tab:red", label=f"rolling average ({w})")
        ax.legend(loc="best")
    else:
        ax.text(0.5, 0.5, "no finished episode yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_rewards(episodes: list, path, title: str) -> None:
    buf = io.BytesIO()
    reward_figure(episodes, title).savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


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

        tab10 = matplotlib.colormaps["tab10"]
        colors = [tab10(i) for i in range(tab10.N)]  # its colours (RGBA)
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
            ax.text(s, float(yi), f"  {'pass' if r['passed'] else 'FAIL'}{' (cached)' if r.get('cached') else ''}",
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


_CSS = ("body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}"
        "th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}img{max-width:100%}"
        "code{background:#f3f3f3;padding:0 3px}h1{font-size:1.6em}h2{font-size:1.3em}nav a{margin-right:1em}")


# the page: Jinja2 escapes every name and title; the Markdown's HTML and the data URIs go in as they are
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title><style>{{ css | safe }}</style></head>
<body>
<nav>{% for s in sections %}<a href="#{{ s.id }}">{{ s.name }}</a>{% if not loop.last %} {% endif %}{% endfor %}</nav>
{% for s in sections %}<section id="{{ s.id }}">
{{ s.body | safe }}
</section>
{% endfor %}{% if figures %}<section id="figures"><h2>Figures</h2>
{% for f in figures %}<figure><img alt="{{ f.name }}" src="data:image/png;base64,{{ f.data }}">\
<figcaption>{{ f.name }}</figcaption></figure>
{% endfor %}</section>
{% endif %}</body></html>
"""


def write_html(folder, title: str | None = None):
    """``<folder>/report.html`` from the Markdown files at the top of `folder` (their order by name)
    and its PNG figures: a figure a Markdown file shows (in `folder` or a folder inside it) is
    embedded where it stands, the top-level others after the text. Returns the page's path (None when
    the folder has neither)."""
    import base64
    import html
    import re
    from pathlib import Path

    import jinja2
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

    sections = []
    for p in mds:
        body = markdown.markdown(p.read_text(errors="replace"), extensions=["tables", "fenced_code"])
        sections.append({"id": p.stem, "name": p.name, "body": re.sub(r'(<img[^>]*\ssrc=")([^"]+)(")', embed, body)})
    figures = [{"name": p.name, "data": base64.b64encode(p.read_bytes()).decode("ascii")}
               for p in pngs if p.resolve() not in shown]
    page = jinja2.Environment(autoescape=True, keep_trailing_newline=True).from_string(_PAGE).render(
        title=title or folder.name, css=_CSS, sections=sections, figures=figures)
    path = folder / HTML_PAGE
    atomic_write_text(path, page)
    return path
