"""HEPPO-GAE's experiments (seed 000), several seeds each, with a summary.

    rlhls experiment heppo-table3|heppo-bits [--steps N] [--seeds K] [--env ID] [--out DIR]
                     [--jobs J] [--backend emu|csim] [--full] [--set key=value ...] [--quiet]

* ``heppo-table3`` — Table III's experiments 1-5 (host/gae.py ``EXPERIMENTS``), 8-bit codes.
* ``heppo-bits`` — Fig. 8-9: experiment 5 (dynamic reward + block value standardization,
  n-bit uniform quantization) for n = 3..10, against the float baseline "PPO + DS"
  (experiment 2).
* ``heppo-table1 [--design D] [--steps N] [--param repeats=R]`` — Table I's PPO phases measured
  here (one update of the demonstration rollout; this machine has no GPU, the seed's CPU-GPU column
  stands beside), the whole-PPO speed-up of the GAE unit from the perf model (host/perf.py: the
  plan's run with GAE on its unit against GAE on the PS, i.e. the GAE seconds measured here x the PS
  factor), and GAE elements/s: the unit's cycle model (one PE, the design's PEs) against numpy here
  and the seed's 9,000 (CPU-GPU) and 300 M (one PE). No runs folder: ``table1.md``, ``table1.csv``,
  ``speedup.json``.

Each (configuration, seed) is a normal ``rlhls train`` run folder ``<out>/<config>-s<seed>/``
(resumable: ``--resume``, or the same command again, keeps finished runs and continues unfinished
ones from their checkpoints). Seeds are 0..K-1. The runs are Ray tasks (host/engine.py): ``--jobs``
at once (default every CPU; ``--jobs 1``: one after another in this process), ``--address`` a
cluster.
The summary: ``summary.csv`` and ``summary.md`` (per configuration: mean +- std over seeds of
the *final return* = mean return of the last ``rolling_window(n)`` episodes of a run, the
runner's rolling-average window) and ``comparison.png`` (per configuration the rolling-average
return against environment steps, mean over seeds with a +-std band; Fig. 8-10 style).

Budget. The defaults are a demonstration that finishes in minutes on 2 cores: the design's
environment with a short rollout (``DEMO_ROLLOUT``: 8 envs x 256 steps, 8 minibatches),
``--steps 4096`` and 2 seeds -- far too short to separate the configurations. The seed's
comparison needs millions of steps with its 64 x 1024 rollout; on a bigger machine:

    rlhls experiment heppo-table3 --full --steps 10000000 --seeds 5 --address auto --out runs/table3
    rlhls experiment heppo-bits   --full --steps 10000000 --seeds 5 --address auto --out runs/bits
    rlhls experiment heppo-bits --resume --address auto --out runs/bits   # after an interruption

Never clobbers: an existing non-empty ``--out`` must hold our ``experiment.json`` with the same
settings (then it is continued), else it is refused.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError

from ..runfolder import episodes, evaluation
from . import (
    RUNS,
    TRAINS,
    Experiment,
    Summary,
    count,
    design_ref,
    option,
    param,
    read_object,
    register_experiment,
    train_run,
)

__all__ = ["configurations", "runs", "summarize", "gae_rates", "gae_speedup", "summary_table1"]

DEMO_STEPS = 4096
DEMO_ROLLOUT = {"num_envs": 8, "num_steps": 256, "num_minibatches": 8}  # PPO's; --full: the design's own
DEMO_SEEDS = 2


def configurations(name: str) -> list[dict]:
    """[{'name', 'label', 'set': {hyperparameter: value}}] of an experiment set."""
    if name == "heppo-table3":
        labels = {1: "exp 1: CleanRL reward norm (baseline)", 2: "exp 2: dynamic std (PPO + DS)",
                  3: "exp 3: block std, quantized, de-std", 4: "exp 4: block std, quantized",
                  5: "exp 5: dynamic std + block values, quantized"}
        return [{"name": f"exp{k}", "label": labels[k], "set": {"experiment": k}} for k in range(1, 6)]
    if name == "heppo-bits":
        out = [{"name": "ds", "label": "PPO + DS (exp 2, float)", "set": {"experiment": 2}}]
        out += [{"name": f"bits{n}", "label": f"exp 5, {n}-bit", "set": {"experiment": 5, "quant_bits": n}}
                for n in range(3, 11)]
        return out
    raise RlhlsError(f"experiment {name!r}: not a HEPPO-GAE experiment (expected heppo-table3 or heppo-bits)")


def _rolling(y: np.ndarray) -> np.ndarray:
    from ..figures import rolling_window

    w = rolling_window(len(y))
    c = np.cumsum(np.insert(y, 0, 0.0))
    return np.concatenate([c[1:w] / np.arange(1, w), (c[w:] - c[:-w]) / w]) if len(y) else y


def summarize(out, configs: list[dict], seeds: int, title: str = "", failed: list | None = None) -> list[dict]:
    """summary.csv, summary.md and comparison.png of the run folders in `out`; returns the rows."""
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table, mean_std, rolling_window

    out = Path(out)
    rows, curves = [], {}
    for c in configs:
        finals, per_seed, max_step, evals = [], [], 0.0, []
        for s in range(seeds):
            d = out / f"{c['name']}-s{s}"
            if not (d / "episodes.csv").exists():
                continue
            x, y = episodes(d)
            cfg = read_object(d / "config.json")
            max_step = max(max_step, float(cfg.get("steps", 0)))
            f = float(np.mean(y[-rolling_window(len(y)):])) if len(y) else float("nan")
            finals.append(f)
            per_seed.append((x, _rolling(y)))
            evals.append(evaluation(d))
        curves[c["name"]] = (per_seed, max_step)
        v = np.array([f for f in finals if not math.isnan(f)])
        rows.append({"config": c["name"], "label": c["label"],
                     "settings": " ".join(f"{k}={x}" for k, x in c["set"].items()),
                     "seeds": len(finals), "final_return_mean": float(v.mean()) if len(v) else float("nan"),
                     "final_return_std": float(v.std(ddof=1)) if len(v) > 1 else (0.0 if len(v) else float("nan")),
                     "per_seed": " ".join("nan" if math.isnan(f) else f"{f:.2f}" for f in finals)})
        e = np.array([x for x in evals if not math.isnan(x)])  # the deterministic policy at the end of a run
        rows[-1].update(eval_seeds=len(e), eval_return_mean=float(e.mean()) if len(e) else float("nan"),
                        eval_return_std=float(e.std(ddof=1)) if len(e) > 1 else (0.0 if len(e) else float("nan")))
    base = rows[0]["final_return_mean"] if rows else float("nan")  # the first configuration: the baseline
    for r in rows:
        r["vs_baseline"] = r["final_return_mean"] / base if base and not math.isnan(base) else float("nan")
    cols = ["config", "label", "settings", "seeds", "final_return_mean", "final_return_std", "vs_baseline", "per_seed",
            "eval_return_mean", "eval_return_std"]
    atomic_write_text(out / "summary.csv", csv_text(rows, cols))
    md = [f"# {title}" if title else "# experiment summary", "",
          "Final return = mean episodic return of the last rolling-average window of episodes of a run; "
          "mean ± std (sample) over seeds (the mean alone of one seed); × = the mean over the first "
          "configuration's (the baseline). "
          "Evaluation = mean return of the deterministic policy at the end of a run (eval.csv), mean ± std over "
          "seeds.", "",
          markdown_table(["config", "what", "settings", "seeds", "final return (mean ± std)",
                          f"× {rows[0]['config'] if rows else 'baseline'}", "per seed", "evaluation (mean ± std)"],
                         [[r["config"], r["label"], r["settings"], r["seeds"],
                           mean_std(r["final_return_mean"], r["final_return_std"], r["seeds"]),
                           f"{r['vs_baseline']:.2f}", r["per_seed"],
                           mean_std(r["eval_return_mean"], r["eval_return_std"], r["eval_seeds"])] for r in rows]),
          "", "![comparison](comparison.png)", "", *(failed or [])]
    atomic_write_text(out / "summary.md", "\n".join(md))

    import matplotlib
    from matplotlib.figure import Figure

    from ..figures import mean_std_band, save_png

    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    tab10 = matplotlib.colormaps["tab10"]
    colors = [tab10(i) for i in range(tab10.N)]  # its colours (RGBA)
    for i, c in enumerate(configs):
        mean_std_band(ax, curves[c["name"]][0], colors[i % 10], c["label"])
    ax.set_xlabel("environment steps")
    ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    ax.set_ylabel("rolling-average episodic return")
    ax.set_title(title or "comparison")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no finished episode yet", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    save_png(fig, out / "comparison.png")
    return rows


def runs(ctx) -> list:
    """The (configuration, seed) training runs of heppo-table3 / heppo-bits (module docstring)."""
    from rlhls.designs.registry import get_design

    from ..algorithms import get_algorithm
    from ..hyperparams import apply_config

    args = ctx.opts
    args.seeds = args.seeds or DEMO_SEEDS
    configs = configurations(args.name)
    if args.design and len(args.design) > 1:
        raise RlhlsError(f"--design: {args.name} takes one PPO design")
    design = get_design(args.design[0] if args.design else "heppo-ppo")
    if design.algorithm != "ppo":
        raise RlhlsError(f"design '{design.name}' uses {design.algorithm.upper()}; the HEPPO experiments train PPO")
    demo = {} if args.full else {**design.demo.get("set", {}), **DEMO_ROLLOUT}
    env = args.env or design.env_id
    config = {**demo, **(ctx.config(design, env)[1] or {})}  # --config: the design's values, over the demo's
    sized, values = apply_config(design, config)
    alg = get_algorithm(design.algorithm)
    for c in configs:  # validate every configuration first
        alg.hyperparams(sized, {**args.overrides, **c["set"]}, values)
    steps = ctx.steps(config, DEMO_STEPS)
    out = ctx.out
    settings = {"name": args.name, "design": design.name, "env": env, "backend": args.backend, "full": args.full,
                "overrides": {k: str(v) for k, v in {**demo, **args.overrides}.items()}}
    ctx.start(settings, {"steps": steps, "seeds": args.seeds})
    ctx.data.update(configs=configs, title=f"{args.name}: {design.name} on {env}, {steps} steps per run")
    ctx.say(f"{args.name}: {len(configs)} configuration(s) x {args.seeds} seed(s) = {len(configs) * args.seeds} "
            f"run(s) of {steps} steps on {env} -> {out}")
    ref = design_ref(design)
    return [ctx.run(f"{c['name']}-s{s}", out / f"{c['name']}-s{s}", steps=steps, design=ref,
                    out=str(out / f"{c['name']}-s{s}"), seed=s, env=env, backend=args.backend,
                    overrides={**args.overrides, **c["set"]}, config=config or None)
            for c in configs for s in range(args.seeds)]


def summary(ctx, outcomes) -> Summary:
    rows = summarize(ctx.out, ctx.data["configs"], ctx.opts.seeds, ctx.data["title"], failed=ctx.failed)
    from ..figures import mean_std

    lines = [f"{r['config']:<6} {r['label']:<46} "
             f"{mean_std(r['final_return_mean'], r['final_return_std'], r['seeds'], '10.2f')} "
             f"({r['seeds']} seed(s))" for r in rows]
    return Summary(rows, lines, [ctx.out / "summary.md", ctx.out / "comparison.png"])


_OPTIONS = (option("--design", action="append", default=None, help="the PPO design (default heppo-ppo)"),
            "env", *TRAINS, *RUNS)
register_experiment(Experiment("heppo-table3", "HEPPO-GAE Table III experiments 1-5 (Fig. 10), several seeds",
                               runs=runs, run=train_run, summarize=summary, options=_OPTIONS))
register_experiment(Experiment("heppo-bits", "HEPPO-GAE Fig. 8-9: n = 3..10-bit codes against PPO + DS",
                               runs=runs, run=train_run, summarize=summary, options=_OPTIONS))


# ----------------------------------------------------------------------------- Table I and the speed-up

SEED_GAE_EL_S = 9000.0  # §V-D3: a standard GAE on the CPU-GPU system handles about 9,000 elements/s
SEED_PPO_GAIN = 0.30    # abstract, §I, §V-D3: PPO about 30 % faster with the GAE unit
GAE_PHASES = ("gae_fetch", "gae_compute", "gae_write")


def _table1_design(opts):
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design

    if opts.design and len(opts.design) > 1:
        raise RlhlsError("--design: heppo-table1 takes one PPO design")
    design = get_design((opts.design or ["heppo-ppo"])[0])
    if design.algorithm != "ppo":
        raise RlhlsError(f"heppo-table1: design '{design.name}' uses {design.algorithm.upper()}; Table I profiles PPO")
    if not any(n.phase == "gae" for n in build_graph(design).nodes):
        raise RlhlsError(f"heppo-table1: design '{design.name}' has no GAE node (a GAE unit is what Table I motivates)")
    return design


def runs_table1(ctx) -> list:
    """No runs: one short PPO run is measured in this process (summary_table1)."""
    _table1_design(ctx.opts)  # checked before anything is written
    param(ctx.opts, "repeats", 3, low=1)
    ctx.start({"experiment": "heppo-table1"})
    return []


def _el_per_s(fn, n: int, repeats: int) -> float:
    import time

    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def gae_rates(design, repeats: int = 3) -> dict:
    """Elements/s of GAE: the design's unit (its cycle model at its clock, one PE and the design's PEs)
    and the host's numpy GAE (host/gae.py ``gae_reference``) timed here, batched over the design's
    trajectories and one trajectory at a time (as the seed's CPU-GPU baseline iterates)."""
    from rlhls.designs.kernels import KernelContext, get_kernel

    from ..gae import gae_reference

    k = get_kernel("gae")
    ctx = KernelContext(design)
    node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
    p = k.resolve(k.node_params(node, ctx))
    T, N = p["steps"], p["trajectories"]
    unit = k.cost(p, device=ctx.device)
    one = k.cost({**p, "pes": 1}, device=ctx.device)
    rng = np.random.default_rng(0)
    r, v = rng.standard_normal((T, N)), rng.standard_normal((T, N))
    d = (rng.random((T, N)) < 0.01).astype(np.uint8)
    boot = rng.standard_normal(N)
    batched = _el_per_s(lambda: gae_reference(r, v, d, boot, 0.99, 0.95), T * N, repeats)
    single = _el_per_s(lambda: gae_reference(r[:, :1], v[:, :1], d[:, :1], boot[:1], 0.99, 0.95), T, repeats)
    return {"steps": T, "trajectories": N, "pes": p["pes"], "clock_mhz": p["clock_mhz"], "ii": unit["ii"],
            "unit_el_s": T * N / (unit["latency_us"] * 1e-6), "pe_el_s": T * N / (one["latency_us"] * 1e-6),
            "unit_peak_el_s": unit["throughput_el_per_s"], "numpy_batched_el_s": batched,
            "numpy_one_trajectory_el_s": single, "seed_cpu_gpu_el_s": SEED_GAE_EL_S,
            "seed_pe_el_s": design.seed_figures.get("pe_throughput_elements_per_s")}


def gae_speedup(perf) -> dict:
    """The whole-PPO speed-up from moving GAE to the unit, from one Perf: the plan's run (GAE on its
    unit) against the same run with the GAE phases on the PS (this machine's measured GAE seconds x
    the PS factor, as the model runs every host phase) instead of the unit's node."""
    plan, cpu = perf.variants["plan"], perf.variants["cpu"]
    gae_here = sum(cpu.phases_s.get(ph, 0.0) for ph in (*GAE_PHASES, "gae"))
    on_unit = plan.total_s
    on_ps = on_unit - plan.phases_s.get("gae", 0.0) + gae_here * perf.ps_factor
    return {"plan_s": on_unit, "gae_on_ps_s": on_ps, "gae_unit_s": plan.phases_s.get("gae", 0.0),
            "gae_ps_s": gae_here * perf.ps_factor, "speedup": on_ps / on_unit if on_unit > 0 else math.inf,
            "time_saved": 1.0 - on_unit / on_ps if on_ps > 0 else 0.0,
            "cpu_gae_share": gae_here / cpu.total_s if cpu.total_s > 0 else 0.0}


def summary_table1(ctx, outcomes) -> Summary:
    """table1.md / table1.csv: Table I measured here beside the seed's, the whole-PPO speed-up, GAE el/s."""
    from rlhls.core import fileio

    from ..figures import csv_text, markdown_table
    from ..perf import bind_run, host_times, measure_host, model_perf

    opts, out = ctx.opts, ctx.out
    design = _table1_design(opts)
    repeats = param(opts, "repeats", 3, low=1)
    ctx.say(f"heppo-table1: measuring {design.name} here (one update of its demonstration rollout) ...")
    metrics, hp = measure_host(design)
    host = host_times(metrics, design.algorithm, hp, f"one update of {design.name} here "
                      f"({hp.get('num_envs')} envs x {hp.get('num_steps')} steps)")
    steps = opts.steps or int(hp["num_envs"]) * int(hp["num_steps"])
    ctx.say("modeling the run on the device (plan, PS factor) ...")
    # the graph at the measured run's sizes (rollout, minibatch), as its host phases were timed
    perf = model_perf(bind_run(design, hp), host=host, steps=steps, time_limit=10.0)
    cpu = perf.variants["cpu"].phases_s
    total = sum(cpu.values()) or 1.0
    shares = design.seed_figures.get("phase_shares", {})
    gpu = design.seed_figures.get("table_i_cpu_gpu_percent", {})
    rows = []
    for ph in list(shares) + [p for p in cpu if p not in shares]:
        name = shares.get(ph, [ph])[0]
        rows.append({"phase": ph, "seed_name": name, "here_s": cpu.get(ph, 0.0),
                     "here_pct": 100 * cpu.get(ph, 0.0) / total,
                     "seed_cpu_pct": shares.get(ph, [None, None])[1], "seed_cpu_gpu_pct": gpu.get(ph)})
    sp = gae_speedup(perf)
    rates = gae_rates(design, repeats)
    seed_gae_cpu = sum(shares.get(p, [0, 0])[1] for p in GAE_PHASES) / 100
    seed_gae_gpu = sum(gpu.get(p) or 0.0 for p in GAE_PHASES) / 100

    def g(v, spec=".2f"):
        return "-" if v is None else format(v, spec)
    md = [f"# HEPPO-GAE Table I and the GAE unit: {design.name}", "",
          f"PPO phases measured here on this machine's CPU ({host.source}); no GPU on this machine, so the "
          "seed's CPU-GPU column stands alone ('-': a cell the seed's table leaves blank; its text gives the "
          "environment run 47 % of the CPU-GPU time).", "",
          markdown_table(["phase (seed's name)", "seconds here", "% here (CPU only)", "% seed CPU only",
                          "% seed CPU-GPU"],
                         [[r["seed_name"], f"{r['here_s']:.3f}", f"{r['here_pct']:.2f}", g(r["seed_cpu_pct"]),
                           g(r["seed_cpu_gpu_pct"])] for r in rows]), "",
          "## Whole-PPO speed-up from moving GAE to the unit", "",
          markdown_table(["", "GAE share of PPO", "PPO time saved", "PPO speed-up"],
                         [["seed, CPU-GPU (Table I: GAE removed)", f"{100 * seed_gae_gpu:.1f} %",
                           f"{100 * seed_gae_gpu:.1f} %", f"{1 / (1 - seed_gae_gpu):.3g}x"],
                          ["seed, CPU only (Table I: GAE removed)", f"{100 * seed_gae_cpu:.1f} %",
                           f"{100 * seed_gae_cpu:.1f} %", f"{1 / (1 - seed_gae_cpu):.3g}x"],
                          ["seed's claim (abstract, §V-D3)", "≈30 %", "≈30 %", f"{1 / (1 - SEED_PPO_GAIN):.3g}x"],
                          ["here, CPU only (measured: GAE removed)", f"{100 * sp['cpu_gae_share']:.2f} %",
                           f"{100 * sp['cpu_gae_share']:.2f} %", f"{1 / (1 - sp['cpu_gae_share']):.4g}x"],
                          [f"perf model, {perf.device}: GAE on the PS vs on the unit",
                           f"{100 * sp['gae_ps_s'] / sp['gae_on_ps_s']:.2f} %", f"{100 * sp['time_saved']:.2f} %",
                           f"{sp['speedup']:.4g}x"]]), "",
          f"Perf model ({steps:,} environment steps, PS factor {perf.ps_factor:.3g}): the plan {sp['plan_s']:.4g} s "
          f"with GAE on the unit ({sp['gae_unit_s']:.3g} s of it), {sp['gae_on_ps_s']:.4g} s with GAE on the PS "
          f"(measured GAE here x the PS factor: {sp['gae_ps_s']:.3g} s).", "",
          "## GAE elements per second", "",
          markdown_table(["", "elements/s", "source"],
                         [[f"GAE unit, one PE ({rates['clock_mhz']:g} MHz, II {rates['ii']})",
                           f"{rates['pe_el_s']:.4g}", "cycle model (designs/kernels/gae.py), one PE through "
                           f"{rates['trajectories']} x {rates['steps']}"],
                          [f"GAE unit, {rates['pes']} PEs", f"{rates['unit_el_s']:.4g}",
                           f"cycle model, {rates['trajectories']} x {rates['steps']} "
                           f"(peak {rates['unit_peak_el_s']:.4g})"],
                          ["seed, one PE", g(rates["seed_pe_el_s"], ".4g"), "§V-D1: 300 MHz, one element a cycle"],
                          ["numpy GAE here, batched over trajectories", f"{rates['numpy_batched_el_s']:.4g}",
                           f"measured (host/gae.py, {rates['trajectories']} x {rates['steps']}, best of {repeats})"],
                          ["numpy GAE here, one trajectory at a time", f"{rates['numpy_one_trajectory_el_s']:.4g}",
                           f"measured (1 x {rates['steps']})"],
                          ["seed, CPU-GPU", f"{SEED_GAE_EL_S:.4g}", "§V-D3"]]), "",
          "Why ours differs from the seed's 30 %: that is GAE's share of a CPU-GPU PPO (the GPU has shrunk the "
          "rest); on the SoC the rest runs on the PS, where GAE's share is the CPU-only one (the seed's own "
          f"Table I: {100 * seed_gae_cpu:.1f} %).", ""]
    text = "\n".join(md)
    summary_row = {"design": design.name, "device": perf.device, "steps": steps, "ps_factor": perf.ps_factor,
                   "gae_share_here": sp["cpu_gae_share"], "seed_gae_share_cpu": seed_gae_cpu,
                   "seed_gae_share_cpu_gpu": seed_gae_gpu, "model_speedup": sp["speedup"],
                   "model_time_saved": sp["time_saved"], "seed_time_saved": SEED_PPO_GAIN, **rates}
    fileio.atomic_write_text(out / "table1.md", text + "\n")
    fileio.atomic_write_text(out / "table1.csv", csv_text(rows, list(rows[0])))
    fileio.write_json(out / "speedup.json", {"speedup": summary_row, "perf": perf.to_json()})
    return Summary([*rows, summary_row], text.splitlines(),
                   [out / "table1.md", out / "table1.csv", out / "speedup.json"])


register_experiment(Experiment(
    "heppo-table1", "HEPPO-GAE Table I (PPO phases here), the whole-PPO speed-up of the GAE unit, GAE elements/s",
    runs=runs_table1, summarize=summary_table1,
    options=(option("--design", action="append", default=None, help="the PPO design (default heppo-ppo)"),
             option("--steps", type=count, default=None,
                    help="environment steps of the modeled run (default: one update of the demonstration)")),
    params={"repeats": 3}))
