"""Plots and the Markdown report of `rlhls run` (host/pipeline.py) and `rlhls experiment`.

* ``phase_totals(metrics)`` / ``plot_phases`` — the per-update phase times of a run folder's
  metrics.csv (``t_<phase>`` columns of host/ppo.py) under HEPPO-GAE Table I's names: stacked
  bars per update plus the share of the whole run (Table I / Fig. 1 style).
* ``plot_csim`` — one bar per kernel component: csim seconds, green pass / red fail.
* ``write_report`` — report.md from the pipeline's record (stages, plan, build, csim, training).
"""

from __future__ import annotations

import io
import math

import numpy as np

from .runner import atomic_write_bytes, atomic_write_text

__all__ = ["TABLE_I", "phase_totals", "plot_phases", "plot_csim", "write_report", "markdown_table"]

# host/ppo.py phase -> (Table I sub-phase, the seed's CPU-only share in %; None where it has none)
TABLE_I = {
    "dnn_inference": ("DNN Inference", 10.46),
    "env_run": ("Trajectory Environment Run", 60.71),
    "storing_trajectories": ("Storing Trajectories", 4.75),
    "gae_fetch": ("GAE Memory Fetch", 3.49),
    "gae_compute": ("GAE Computation", 11.23),
    "gae_write": ("GAE Memory Write", 0.32),
    "update_forward": ("Network Update (forward + losses)", 6.10),
    "backprop": ("Backpropagation", 2.95),
}


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def phase_totals(metrics: list[dict]) -> dict:
    """Seconds per phase summed over all updates (phases absent from the rows are skipped)."""
    out = {}
    for p in TABLE_I:
        col = f"t_{p}"
        if metrics and col in metrics[0]:
            out[p] = float(np.nansum([_float(r[col]) for r in metrics]))
    return out


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_phases(metrics: list[dict], path, title: str = "") -> None:
    plt = _plt()
    phases = [p for p in TABLE_I if metrics and f"t_{p}" in metrics[0]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    if not phases:
        ax1.text(0.5, 0.5, "no update yet", ha="center", va="center", transform=ax1.transAxes)
    else:
        x = np.array([int(_float(r["update"])) for r in metrics])
        bottom = np.zeros(len(metrics))
        colors = plt.get_cmap("tab10").colors
        for i, p in enumerate(phases):
            y = np.array([_float(r[f"t_{p}"]) for r in metrics])
            ax1.bar(x, y, bottom=bottom, color=colors[i % 10], label=TABLE_I[p][0])
            bottom += y
        ax1.set_xlabel("update")
        ax1.set_ylabel("seconds")
        ax1.set_title("time per PPO iteration by phase (Table I)")
        ax1.grid(alpha=0.3, axis="y")
        tot = phase_totals(metrics)
        s = sum(tot.values()) or 1.0
        ours = [100 * tot[p] / s for p in phases]
        seed = [TABLE_I[p][1] or 0.0 for p in phases]
        yy = np.arange(len(phases))
        ax2.barh(yy - 0.2, ours, 0.4, color="tab:blue", label="this run")
        ax2.barh(yy + 0.2, seed, 0.4, color="tab:gray", label="HEPPO-GAE Table I (CPU only)")
        ax2.set_yticks(yy, [TABLE_I[p][0] for p in phases], fontsize=8)
        ax2.invert_yaxis()
        ax2.set_xlabel("% of iteration time")
        ax2.legend(fontsize=8, loc="lower right")
        ax2.grid(alpha=0.3, axis="x")
        ax1.legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_csim(results: list[dict], path, title: str = "kernel C simulation") -> None:
    """results: [{'name', 'kernel', 'passed', 'seconds', 'cached'}]."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(3, len(results)) + 1))
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
        ax.text(0.5, 0.5, "no kernel simulated", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _g(x, spec=".4g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def write_report(path, rec: dict) -> None:
    """report.md from the pipeline record (host/pipeline.py ``run_pipeline``)."""
    d = rec["design"]
    L = [f"# rlhls run: {d}", "",
         f"{rec.get('seed_title', '')}  ", f"device {rec['device']}, training batch {rec['batch']}, "
         f"environment {rec['env']}, experiment {rec['experiment']} of HEPPO-GAE Table III, "
         f"backend `{rec['backend']}`, seed {rec['seed']}.", "",
         f"**Result: {'all kernel C simulations passed' if rec['ok'] else 'FAILED: ' + '; '.join(rec['failures'])}**",
         "", "## Stages", ""]
    L.append(markdown_table(["stage", "seconds", "status", "output"],
                            [[s["stage"], f"{s['seconds']:.1f}", s["status"], f"`{s['output']}`"]
                             for s in rec["stages"]]))
    g = rec.get("graph")
    if g:
        L += ["## Training graph", "",
              f"{g['nodes']} nodes, {g['edges']} edges, {g['mm_nodes']} matrix-multiply nodes; "
              f"{g['flops'] / 1e6:.2f} MFLOPs per training step (`graph.csv`, profile rows in `profile.csv`).", ""]
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
        L += ["", "![Gantt of the plan](plan/gantt.png)", ""]
    b = rec.get("build")
    if b:
        L += ["## Build and C simulation", ""]
        if b.get("error"):
            L += [f"The build failed: {b['error']}", ""]
        else:
            L += [f"{len(b['components'])} PL component(s) in `build/` (part {b['part']}), "
                  f"{len(b['aie'])} AIE node(s), {len(b['host'])} node(s) on the PS.", ""]
        rows = [[c["name"], c.get("kernel") or "hls4ml", ", ".join(c.get("nodes", [])) or "-",
                 "-" if c.get("passed") is None else ("pass" if c["passed"] else "**FAIL**"),
                 _g(c.get("seconds"), ".1f"), (c.get("detail") or "").replace("|", "\\|")[:120]]
                for c in rec.get("csim", [])]
        if rows:
            L.append(markdown_table(["component", "kernel", "graph nodes", "csim", "s", "detail"], rows))
            L += ["", "![csim results](csim.png)", ""]
        for w in b.get("notes", []):
            L.append(f"- {w}")
        L.append("")
    t = rec.get("train")
    if t:
        L += ["## Training", "",
              f"{t['updates']} update(s), {t['env_steps']} environment steps "
              f"({t['rollout']}), {t['episodes']} finished episode(s); final rolling-average return "
              f"**{_g(t['final_return'], '.2f')}**. Run folder `train/` (metrics.csv, episodes.csv, checkpoint; "
              "`rlhls train ... --out <this>/train --resume` continues it).", "",
              "![reward curve](train/reward.png)", "", "### Per-phase time (Table I)", ""]
        tot = t.get("phases", {})
        s = sum(tot.values()) or 1.0
        L.append(markdown_table(["phase (Table I)", "seconds", "% this run", "% seed, CPU only"],
                                [[TABLE_I[k][0], f"{v:.2f}", f"{100 * v / s:.1f}",
                                  "-" if TABLE_I[k][1] is None else f"{TABLE_I[k][1]:.2f}"]
                                 for k, v in tot.items()]))
        L += ["", "![phases](phases.png)", ""]
    atomic_write_text(path, "\n".join(L).rstrip() + "\n")
