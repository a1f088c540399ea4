"""AP-DRL's speed-up figures (seed 003 §III Fig. 4 and 6, §V-C Fig. 12-13) from the performance model.

    rlhls experiment apdrl-speedup [--design D ...] [--param scales=1,2,4] [--param time_limit=10] [--out DIR]

Model only (host/perf.py, no training, no PS measurement): one training step (one batch through the
training graph) on the VEK280.

* **Fig. 4**: one training step of three algorithm-env pairs with every node on the PS, every node
  on the PL (the design's 245 MHz, FP32, fastest design point that fits) and with the matrix
  multiplies on the AIE-ML (FP32, the rest on the PS), normalized to the fastest. The seed's text
  names neither the three pairs nor their batch; assumed: one per algorithm and FLOP decade of
  Table III (DQN-CartPole, DDPG-LunarCont, PPO-MsPacman) at the design's batch.
* **Fig. 6**: ``mm_crossover`` (an n x n GEMM on the PL against the AIE); the seed's bars are in its
  figure only, its text gives the direction (PL at low FLOPs, AIE at high).
* **Fig. 12-13**: every benchmark at three batch sizes (the design's batch x ``scales``; the seed
  gives 256/512/1024 for DDPG-LunarCont only, which is what 1,2,4 gives there): training time of one
  step and throughput (batches per second) of the plan against FIXAR-like (``PL_only``: every node
  on the PL at 164 MHz in fixed point) and AIE-only (``AIE_only``: CHARM-like, FP32 matrix
  multiplies on the AIE, the rest on the PS), normalized to FIXAR-like. The plan per (benchmark,
  batch) is the ILP's (``solve_plan``, kept in ``<out>/plans/``; ``time_limit`` seconds each). With
  one batch per training step, as the seed defines both metrics, throughput is the reciprocal of
  the step time: the two figures carry the same ratios. Each speed-up comes with its band
  (``band_vs_<baseline>_low/high``: ``model_perf(band=True)``, every assumed constant and the latency
  models' held-out error at the ends that make it smallest / largest) and, where the band crosses
  1.0x, a sentence saying it may flip.

Outputs in ``--out`` (default ``runs/apdrl-speedup``): ``speedup.md`` / ``speedup.csv``,
``fig4.png`` / ``fig4.csv``, ``fig6.png`` / ``fig6.csv``, ``fig12.png``, ``fig13.png``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlhls.core.errors import RlhlsError

from . import Experiment, Summary, check_out, option, register_experiment, solve_plan
from .apdrl import BENCHMARKS

__all__ = ["FIG4_PAIRS", "SEED_RANGES", "parse_scales", "fig4_rows", "speedup_rows", "trend"]

FIG4_PAIRS = ("apdrl-dqn-cartpole", "apdrl-ddpg-lunarcont", "apdrl-ppo-mspacman")  # assumed (module docstring)
SCALES = "1,2,4"
TIME_LIMIT = 10.0
# §V-C: the plan's speed-up over each baseline, smallest to largest over all benchmarks and batches
SEED_RANGES = {"PL_only": (0.98, 4.17), "AIE_only": (1.61, 3.82)}
# Table III "Train FLOPs (per batch size)"
SEED_FLOPS = {"apdrl-dqn-cartpole": 28.04e3, "apdrl-a2c-invpendulum": 2.31e3, "apdrl-ddpg-lunarcont": 2.25e6,
              "apdrl-ddpg-mntncarcont": 2.19e6, "apdrl-dqn-breakout": 68.17e6, "apdrl-ppo-mspacman": 106.23e6}
BASELINES = (("PL_only", "FIXAR-like"), ("AIE_only", "AIE-only"))


def parse_scales(text) -> tuple:
    try:
        out = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        out = ()
    if not out or any(x < 1 or x > 64 for x in out):
        raise RlhlsError(f"--param scales={text!r}: expected batch multipliers 1..64, comma-separated (e.g. 1,2,4)")
    return tuple(dict.fromkeys(out))


def _no_host():
    """Host phases left out (a training step only): zero seconds, one graph execution per step."""
    from ..perf import HostTimes

    return HostTimes({}, {}, 1.0, "none: one training step, the host loop left out")


def _perf(design, batch: int, plan, band: bool = False):
    from rlhls.designs.graph import build_graph

    from ..perf import model_perf

    graph = build_graph(design, batch)
    return graph, model_perf(design, plan=plan, graph=graph, host=_no_host(), factor=1.0, steps=1, band=band)


def fig4_rows(designs=FIG4_PAIRS, time_limit: float = TIME_LIMIT, folder=None) -> list[dict]:
    """One training step of each design on the PS, the PL and the AIE (module docstring), us."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.registry import get_design
    from rlhls.partition.profile import device_capacity, device_links, profile_design

    from ..perf import choose, schedule

    rows = []
    for name in designs:
        d = get_design(name)
        dev = get_device(d.device)
        plan = solve_plan(d, folder=None if folder is None else folder / f"{name}-b{d.batch_size}",
                          time_limit=time_limit)
        graph, p = _perf(d, d.batch_size, plan)
        fp32 = replace(d, formats={**d.formats, "pl": "fp32", "pl_acc": "fp32"}, pins={})
        pl, notes = choose(profile_design(fp32, dev, graph=graph), graph, "PL", device_capacity(dev))
        t = {"PS": p.variants["all_PS"].step_us, "PL": schedule(graph, pl, device_links(dev))["makespan_us"],
             "AIE": p.variants["AIE_only"].step_us}
        best = min(t.values())
        rows.append({"design": name, "batch": d.batch_size, "flops": graph.summary()["flops"],
                     **{f"{u}_us": v for u, v in t.items()}, **{f"{u}_norm": v / best for u, v in t.items()},
                     "fastest": min(t, key=t.__getitem__), "pl_fits": not notes})
    return rows


def speedup_rows(designs, scales, time_limit: float = TIME_LIMIT, folder=None, say=lambda m: None) -> list[dict]:
    """Fig. 12-13 rows: per (design, batch) the step time of the plan and the two baselines, us."""
    from rlhls.designs.registry import get_design

    rows = []
    for name in designs:
        d = get_design(name)
        for s in scales:
            b = d.batch_size * s
            plan = solve_plan(d, folder=None if folder is None else folder / f"{name}-b{b}", batch=b,
                              time_limit=time_limit)
            graph, p = _perf(d, b, plan, band=True)
            v = p.variants
            units = {u: sum(1 for x in plan.assignment.values() if x == u) for u in ("PS", "PL", "AIE")}
            r = {"design": name, "batch": b, "flops": graph.summary()["flops"],
                 "flops_per_sample": graph.summary()["flops"] / b, "seed_flops_per_sample": SEED_FLOPS.get(name),
                 "plan_us": v["plan"].step_us, "fixar_us": v["PL_only"].step_us, "aie_us": v["AIE_only"].step_us,
                 "plan_status": plan.status, "plan_units": " ".join(f"{u}:{n}" for u, n in units.items() if n),
                 "fixar_fits": not any(a.startswith("PL:") and "no design point" in a for a in p.assumptions)}
            for key, short in (("fixar", "fixar"), ("aie", "aie")):
                r[f"speedup_vs_{short}"] = r[f"{key}_us"] / r["plan_us"]
            # the band: every assumed constant at the end of its range that makes the speed-up least / most
            # (host/perf.py _Band: units and design points kept, the same schedules)
            for k, short in (("PL_only", "fixar"), ("AIE_only", "aie")):
                bd = p.band["speedups"][k]
                r[f"band_vs_{short}_low"], r[f"band_vs_{short}_high"] = bd["low"], bd["high"]
            r["flips"] = "; ".join(
                f"over {label} {r[f'speedup_vs_{s}']:.3g}x, band {lo:.3g}-{hi:.3g}x"
                for (_, label), s in zip(BASELINES, ("fixar", "aie"))
                for lo, hi in [(r[f"band_vs_{s}_low"], r[f"band_vs_{s}_high"])] if lo < 1.0 < hi)
            # normalized to FIXAR-like: training time (lower is better) and throughput (higher is better)
            for k in ("plan", "fixar", "aie"):
                r[f"{k}_time_norm"] = r[f"{k}_us"] / r["fixar_us"]
                r[f"{k}_tput_norm"] = r["fixar_us"] / r[f"{k}_us"]
            rows.append(r)
            say(f"  {name} batch {b}: plan {r['plan_us']:.4g} us ({plan.status}), FIXAR-like {r['fixar_us']:.4g} us, "
                f"AIE-only {r['aie_us']:.4g} us")
    return rows


def _ranks(x) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(x, dtype=float))).astype(float)


def trend(rows, key: str) -> float:
    """Spearman's rank correlation of `key` with the step's FLOPs (ties broken by order)."""
    if len(rows) < 2:
        return float("nan")
    a, b = _ranks([r["flops"] for r in rows]), _ranks([r[key] for r in rows])
    return float(np.corrcoef(a, b)[0, 1])


# ----------------------------------------------------------------------------- the experiment

def runs(ctx) -> list:
    opts = ctx.opts
    designs = list(dict.fromkeys(opts.design or BENCHMARKS))
    for d in designs:
        if d not in BENCHMARKS:
            raise RlhlsError(f"--design {d}: not an AP-DRL benchmark (expected one of {', '.join(BENCHMARKS)})")
    scales = parse_scales(opts.params.get("scales", SCALES))
    try:
        tl = float(opts.params.get("time_limit", TIME_LIMIT))
    except (TypeError, ValueError):
        tl = -1.0
    if not 0 < tl <= 3600:
        raise RlhlsError(f"--param time_limit={opts.params.get('time_limit')!r}: expected seconds 0 < t <= 3600")
    ctx.data.update(designs=designs, scales=scales, time_limit=tl,
                    settings={"name": opts.name, "designs": designs, "scales": list(scales), "time_limit": tl})
    check_out(ctx.out, ctx.data["settings"])
    return []


def _fig(rows, key: str, ylabel: str, title: str, path):
    from matplotlib.figure import Figure

    from ..figures import save_png

    rows = sorted(rows, key=lambda r: r["flops"])
    fig = Figure(figsize=(max(7.0, 0.55 * len(rows) + 2), 4.4))
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    w = 0.27
    for j, (k, label) in enumerate((("fixar", "FIXAR-like (PL, 164 MHz, fixed point)"),
                                    ("aie", "AIE-only (CHARM-like, FP32)"), ("plan", "AP-DRL plan (ILP)"))):
        ax.bar(x + (j - 1) * w, [r[f"{k}_{key}"] for r in rows], w, label=label)
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", linewidth=0.6)
    ax.set_xticks(x, [f"{r['design'].replace('apdrl-', '')}\nb{r['batch']}" for r in rows], fontsize=6.5,
                  rotation=60)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(fig, path)


def _fig4(rows, path):
    from matplotlib.figure import Figure

    from ..figures import save_png

    fig = Figure(figsize=(7, 3.8))
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    for j, u in enumerate(("PS", "PL", "AIE")):
        ax.bar(x + (j - 1) * 0.27, [r[f"{u}_norm"] for r in rows], 0.27, label=u)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r['design'].replace('apdrl-', '')}\n{r['flops']:.3g} FLOP/step" for r in rows], fontsize=8)
    ax.set_ylabel("time of one training step / fastest")
    ax.set_title("AP-DRL Fig. 4 (modeled): one training step on PS, PL and AIE-ML (VEK280)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(fig, path)


def _fig6(cross, path):
    from matplotlib.figure import Figure

    from ..figures import save_png

    rows = cross["rows"]
    fig = Figure(figsize=(7, 3.8))
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["pl_us"] or np.nan for r in rows], 0.4, label="PL")
    ax.bar(x + 0.2, [r["aie_us"] for r in rows], 0.4, label="AIE-ML")
    ax.set_yscale("log")
    ax.set_xticks(x, [str(r["n"]) for r in rows])
    ax.set_xlabel("GEMM size n (n x n x n)")
    ax.set_ylabel("modeled time (us)")
    ax.set_title(f"AP-DRL Fig. 6 (modeled, {cross['device']}, {cross['format']}): AIE faster from n = "
                 f"{cross['aie_from_n']}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(fig, path)


def summary(ctx, outcomes) -> Summary:
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table
    from ..perf import mm_crossover

    D, out, say = ctx.data, ctx.out, ctx.say
    ctx.start(D["settings"])
    plans = out / "plans"
    pairs = [d for d in FIG4_PAIRS if d in D["designs"]]
    say(f"apdrl-speedup: Fig. 4 ({len(pairs)} pair(s)), Fig. 6, Fig. 12-13 ({len(D['designs'])} benchmark(s) x "
        f"{len(D['scales'])} batch size(s))")
    f4 = fig4_rows(pairs, D["time_limit"], plans) if pairs else []
    cross = mm_crossover("vek280")
    rows = speedup_rows(D["designs"], D["scales"], D["time_limit"], plans, say)
    files = []
    if f4:
        atomic_write_text(out / "fig4.csv", csv_text(f4, list(f4[0])))
        _fig4(f4, out / "fig4.png")
        files.append(out / "fig4.png")
    atomic_write_text(out / "fig6.csv", csv_text(cross["rows"], list(cross["rows"][0])))
    _fig6(cross, out / "fig6.png")
    atomic_write_text(out / "speedup.csv", csv_text(rows, list(rows[0])))
    _fig(rows, "time_norm", "training time of one step / FIXAR-like", "AP-DRL Fig. 12 (modeled): normalized "
         "training time (lower is better)", out / "fig12.png")
    _fig(rows, "tput_norm", "batches per second / FIXAR-like", "AP-DRL Fig. 13 (modeled): normalized training "
         "throughput (higher is better)", out / "fig13.png")
    files += [out / "fig6.png", out / "fig12.png", out / "fig13.png", out / "speedup.md"]
    ranges = {k: (min(r[f"speedup_vs_{s}"] for r in rows), max(r[f"speedup_vs_{s}"] for r in rows))
              for k, s in (("PL_only", "fixar"), ("AIE_only", "aie"))}
    rho = {k: trend(rows, f"speedup_vs_{s}") for k, s in (("PL_only", "fixar"), ("AIE_only", "aie"))}
    bands = {k: (min(r[f"band_vs_{s}_low"] for r in rows), max(r[f"band_vs_{s}_high"] for r in rows))
             for k, s in (("PL_only", "fixar"), ("AIE_only", "aie"))}
    lines = [f"plan over {label}: {ranges[k][0]:.3g}-{ranges[k][1]:.3g}x, band {bands[k][0]:.3g}-{bands[k][1]:.3g}x "
             f"over the assumed constants' ranges (seed {SEED_RANGES[k][0]}-{SEED_RANGES[k][1]}x); rank correlation "
             f"with FLOPs {rho[k]:+.2f}" for k, label in BASELINES]
    flips = [f"{r['design']} batch {r['batch']}: the plan's speed-up may flip (its band crosses 1.0x): {r['flips']}"
             for r in rows if r["flips"]]
    fits = [r for r in rows if r["fixar_fits"]]
    if fits and len(fits) < len(rows):  # a node the fabric holds at no point takes its 1-lane point: not FIXAR
        sp = [r["speedup_vs_fixar"] for r in fits]
        lines[0] += (f"; {min(sp):.3g}-{max(sp):.3g}x "
                     f"over the {len(fits)} step(s) whose every node fits the PL (rank correlation "
                     f"{trend(fits, 'speedup_vs_fixar'):+.2f})")
    lines.append(f"Fig. 6: AIE faster than the PL from n = {cross['aie_from_n']} (the seed's direction: "
                 f"{'agrees' if cross['agrees'] else 'does not agree'})")
    lines += [f"Fig. 4 {r['design']}: PS {r['PS_norm']:.3g}, PL {r['PL_norm']:.3g}, AIE {r['AIE_norm']:.3g} x the "
              f"fastest ({r['fastest']})" for r in f4]
    md = ["# AP-DRL speed-ups (seed 003 Fig. 4, 6, 12-13), modeled", "",
          "One training step (one batch through the training graph) on the VEK280 from the performance model "
          "(host/perf.py); the plan is the ILP's per (benchmark, batch). FIXAR-like: every node on the PL at "
          "164 MHz in fixed point; AIE-only: FP32 matrix multiplies on the AIE, the rest on the PS.", "",
          "## Fig. 12-13", "", *[f"- {x}" for x in lines[:2]], *[f"- {x}" for x in flips], "",
          "Each speed-up is given with its band: every constant that stays assumed (designs/devices.py, each "
          "with its plausible range), the PS factor x0.5-x2 and the PL / AIE latency models' held-out error "
          "(rlhls qor) set to the ends that make it smallest and largest; the plan and the baselines keep "
          "their units and design points.", "",
          markdown_table(["benchmark", "batch", "FLOP/step", "FLOP/sample (seed's)", "plan us", "FIXAR-like us",
                          "AIE-only us", "plan / FIXAR-like speed-up (band)", "plan / AIE-only speed-up (band)",
                          "plan units", "ILP"],
                         [[r["design"], r["batch"], f"{r['flops']:.3g}",
                           f"{r['flops_per_sample']:.3g} ({r['seed_flops_per_sample']:.3g})", f"{r['plan_us']:.4g}",
                           f"{r['fixar_us']:.4g}" + ("" if r["fixar_fits"] else " (no PL point fits)"),
                           f"{r['aie_us']:.4g}",
                           f"{r['speedup_vs_fixar']:.3g}x ({r['band_vs_fixar_low']:.3g}-{r['band_vs_fixar_high']:.3g})",
                           f"{r['speedup_vs_aie']:.3g}x ({r['band_vs_aie_low']:.3g}-{r['band_vs_aie_high']:.3g})",
                           r["plan_units"], r["plan_status"]] for r in sorted(rows, key=lambda r: r["flops"])]),
          "", "![Fig. 12](fig12.png)", "", "![Fig. 13](fig13.png)", "", "## Fig. 4", ""]
    if f4:
        md += [markdown_table(["pair", "batch", "FLOP/step", "PS us", "PL us", "AIE us", "fastest"],
                              [[r["design"], r["batch"], f"{r['flops']:.3g}", f"{r['PS_us']:.4g}",
                                f"{r['PL_us']:.4g}" + ("" if r["pl_fits"] else " (no PL point fits)"),
                                f"{r['AIE_us']:.4g}", r["fastest"]] for r in f4]), "", "![Fig. 4](fig4.png)", ""]
    else:
        md += ["(none of the three pairs among --design)", ""]
    md += ["## Fig. 6", "", f"- {lines[2]}; the seed: {cross['seed']}", "",
           markdown_table(["n", "FLOPs", "PL us", "AIE us", "faster"],
                          [[r["n"], f"{r['flops']:.3g}", "-" if r["pl_us"] is None else f"{r['pl_us']:.4g}",
                            f"{r['aie_us']:.4g}", r["faster"]] for r in cross["rows"]]), "", "![Fig. 6](fig6.png)", ""]
    atomic_write_text(out / "speedup.md", "\n".join(md))
    return Summary(rows, lines, files)


register_experiment(Experiment(
    "apdrl-speedup", "AP-DRL Fig. 4, 6, 12-13: modeled PS/PL/AIE times and the plan's speed-up over FIXAR-like and "
    "AIE-only", runs=runs, summarize=summary,
    options=(option("--design", action="append", default=None,
                    help="a benchmark of Fig. 12-13 (repeatable; default all six)"),),
    params={"scales": SCALES, "time_limit": TIME_LIMIT}))
