"""The report of a flow run (``rlhls run``, ``rlhls.Flow.report``): ``write_report(path, record)``
writes report.md from a flow's record — the design and its seed, the training graph, the plan
(Gantt), build and checks, training (reward curve, phases), the modeled run on the device, then
the sections a seed's module adds (host/figures.py ``register_report_section``: the traffic seed's
compute element and its agent against the fixed-time plan). The experiment modules are imported
first (``experiment_names``), so their sections are there. Its figures and the HTML page are
host/figures.py's.
"""

from __future__ import annotations

import math
from pathlib import Path

from rlhls.core.fileio import atomic_write_text

from .experiments import experiment_names
from .figures import REPORT_SECTIONS, markdown_table
from .perf import report_lines

__all__ = ["write_report"]


def _g(x, spec=".4g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def _source_lines(rec: dict) -> list[str]:
    """Where the design comes from: its seed paper (title, file) where it names one, a design file's
    path; nothing for what a design leaves empty or '-' (a user's design)."""
    def given(key) -> str:
        v = rec.get(key)
        return str(v) if v not in (None, "", "-") else ""

    title, file = given("seed_title"), given("seed_file")
    out = []
    if title or file:
        out.append("Seed: " + " ".join(x for x in (f"*{title}*" if title else "", f"(`{file}`)" if file else "") if x)
                   + ".  ")
    src = rec.get("design_file")
    if isinstance(src, dict) and src.get("file"):
        out.append(f"Design file: `{src['file']}`.  ")
    return out


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
         *_source_lines(rec),
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
        L += report_lines(rec["perf"])
    try:
        experiment_names()  # imports the seeds' modules: their sections register
    except Exception as e:  # a seed's module that does not import costs its section, not the report
        L += [f"(a report section's module failed to import: {type(e).__name__}: {e})", ""]
    for fn in REPORT_SECTIONS:
        L += fn(rec, Path(path).parent)
    atomic_write_text(path, "\n".join(L).rstrip() + "\n")

