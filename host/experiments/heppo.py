"""HEPPO-GAE's experiments (seed 000), several seeds each, with a summary.

    rlhls experiment heppo-table3|heppo-bits [--steps N] [--seeds K] [--env ID] [--out DIR]
                     [--jobs J] [--backend emu|csim] [--full] [--set key=value ...] [--quiet]

* ``heppo-table3`` — Table III's experiments 1-5 (host/gae.py ``EXPERIMENTS``), 8-bit codes.
* ``heppo-bits`` — Fig. 8-9: experiment 5 (dynamic reward + block value standardization,
  n-bit uniform quantization) for n = 3..10, against the float baseline "PPO + DS"
  (experiment 2).
* ``heppo-table1 [--design D] [--param repeats=R]`` — Table I's PPO phases measured here (one
  warm-up and R timed updates of the demonstration rollout, CPU time, median and spread; this
  machine has no GPU, the seed's CPU-GPU column stands beside); the helper kernels' one-time build
  and the warm-up's extra reported apart; GAE's share of PPO and the whole-PPO speed-up with GAE on
  the modeled unit (Amdahl) for three GAEs on the update's rollout size: a batched numpy GAE, a
  per-trajectory Python-loop GAE (the seed's CPU baseline) and the trainer's own GAE stage, each
  with its band (the unit's assumed constants) and a settled check; GAE elements/s at the unit's
  size (the unit's cycle model, both software GAEs, the seed's 9,000 and 300 M). No runs folder:
  ``table1.md``, ``table1.csv``, ``speedup.json``.

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
    design_ref,
    option,
    param,
    read_object,
    register_experiment,
    train_run,
)

__all__ = ["configurations", "runs", "summarize", "gae_rates", "gae_per_trajectory", "random_rollout", "time_gae",
           "unit_time", "amdahl", "gae_headline", "phase_times", "measure_table1", "table1_headline",
           "summary_table1"]

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
TABLE1_REPEATS = 4  # timed updates and GAE calls (the settled check compares two halves of two)
ROLLOUT_ENDS = (0.02, 0.01)  # the timing rollout: shares of steps that end an episode (terminated, truncated)
# the assumed device figures (designs/devices.py, each with its range) the unit's time depends on
UNIT_CONSTANTS = ("PL.perf.launch_overhead_us", "link.PS->PL.latency_us", "link.PS->PL.bytes_per_us",
                  "link.PL->PS.latency_us", "link.PL->PS.bytes_per_us")
BASELINES = {  # the GAE baselines timed on the same rollout: key -> label
    "batched": "batched numpy GAE (host/gae.py gae_reference, all trajectories at once: the PS path)",
    "per_trajectory": "per-trajectory software GAE (the seed's CPU baseline: a Python loop per trajectory)",
    "trainer": "rlhls's GAE stage as trained (experiment 5: standardize, 8-bit codes, emulated unit)",
    "seed_rate": "a GAE at the seed's software rate (9,000 el/s, §V-D3; assumed, not measured here)",
}


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
    """No runs: a short PPO run is measured in this process (summary_table1)."""
    _table1_design(ctx.opts)  # checked before anything is written
    param(ctx.opts, "repeats", TABLE1_REPEATS, low=1)
    ctx.start({"experiment": "heppo-table1"})
    return []


def gae_per_trajectory(rewards, values, dones, bootstrap, gamma: float, lam: float, trunc_values=None):
    """GAE as the seed's CPU baseline computes it (§V-D3: "a standard GAE implementation", its ref. [17],
    a from-scratch PyTorch PPO, processing "one trajectory at a time not in batch form"): for each
    trajectory (a column of the (T, N) rollout) a plain Python loop backwards over its steps, on Python
    floats. The recurrence and done codes of ``gae_reference`` (0 continue, 1 terminated, 2 truncated:
    the next value is V(final observation) from `trunc_values`); returns (advantages, rewards-to-go)."""
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    d = np.asarray(dones).astype(np.int64)
    T, N = r.shape
    if (d == 2).any() and trunc_values is None:
        raise RlhlsError("gae_per_trajectory: dones mark truncations (2) but no trunc_values were given")
    tv = np.zeros((T, N)) if trunc_values is None else np.asarray(trunc_values, dtype=np.float64)
    boot = np.asarray(bootstrap, dtype=np.float64).reshape(-1)
    gl = gamma * lam
    adv = np.empty((T, N))
    for n in range(N):
        rew, val, done, trunc = r[:, n].tolist(), v[:, n].tolist(), d[:, n].tolist(), tv[:, n].tolist()
        out = [0.0] * T
        last, nxt_v = 0.0, float(boot[n])
        for t in range(T - 1, -1, -1):
            if done[t] == 1:
                nv, keep = 0.0, 0.0
            elif done[t] == 2:
                nv, keep = trunc[t], 0.0
            else:
                nv, keep = nxt_v, 1.0
            last = rew[t] + gamma * nv - val[t] + gl * keep * last
            out[t] = last
            nxt_v = val[t]
        adv[:, n] = out
    return adv, adv + v


def random_rollout(T: int, N: int, seed: int = 0) -> dict:
    """A (T steps, N trajectories) rollout to time GAE on: normal rewards and values, ROLLOUT_ENDS of the
    steps ending an episode (terminated 1, truncated 2), the bootstrap row and the truncations' values."""
    rng = np.random.default_rng(seed)
    u = rng.random((T, N))
    d = np.where(u < ROLLOUT_ENDS[0], 1, np.where(u < sum(ROLLOUT_ENDS), 2, 0)).astype(np.uint8)
    return {"rewards": rng.standard_normal((T, N)), "values": rng.standard_normal((T, N)), "dones": d,
            "bootstrap": rng.standard_normal(N), "trunc_values": rng.standard_normal((T, N))}


def time_gae(name: str, ro: dict, gamma: float, lam: float, repeats: int) -> list:
    """CPU seconds of `repeats` warm calls of the GAE baseline `name` ('batched', 'per_trajectory') on `ro`."""
    from ..gae import gae_reference
    from ..phases import cpu_times

    fn = {"batched": gae_reference, "per_trajectory": gae_per_trajectory}[name]
    return cpu_times(lambda: fn(ro["rewards"], ro["values"], ro["dones"], ro["bootstrap"], gamma, lam,
                                ro["trunc_values"]), repeats)


def unit_time(design, gp: dict, *, device=None, error=None) -> dict:
    """Seconds of the GAE unit on one rollout of its parameters `gp` (``host.gae.gae_units``): its cycles at
    its clock (designs/kernels/gae.py) + the PL launch overhead + the memory image in over PS->PL and the
    results out over PL->PS (latency + bytes / bandwidth each). {'central', 'low', 'high', 'cycles_s',
    'bytes', 'constants', 'error'}: the band puts every assumed figure it depends on (UNIT_CONSTANTS, their
    ranges in designs/devices.py) at the end that makes the unit faster / slower, and the cycle model at
    -/+ the PL latency model's held-out error (`error`: (fraction, why); default ``perf.model_error``)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels import get_kernel
    from rlhls.designs.kernels.gae import memory_layout
    from rlhls.partition.profile import device_links

    from ..perf import model_error

    dev = device if device is not None else get_device(design.device)
    cycles_s = get_kernel("gae").cost(gp)["latency_us"] * 1e-6
    nbytes = memory_layout(gp)["capacity_bytes"]
    err, why = error if error is not None else model_error().get("PL", (0.0, "no PL latency-model error known"))

    def at(d, e: float = 0.0) -> float:
        links = device_links(d)
        move = sum(lat + nbytes / bw for lat, bw in (links[k] for k in (("PS", "PL"), ("PL", "PS")) if links.get(k)))
        launch = d.unit("PL").perf.get("launch_overhead_us")
        return cycles_s * (1 + e) + ((launch.value if launch is not None else 0.0) + move) * 1e-6

    figs = dict(dev.assumed())
    consts, slow, fast = [], dev, dev
    for path in UNIT_CONSTANTS:
        f = figs.get(path)
        if f is None:
            continue
        lo, hi = at(dev.with_value(path, f.low)), at(dev.with_value(path, f.high))
        consts.append({"constant": path, "range": [f.low, f.high], "unit": f.unit, "low_s": lo, "high_s": hi,
                       "source": f.source})
        slow = slow.with_value(path, f.high if hi >= lo else f.low)
        fast = fast.with_value(path, f.low if hi >= lo else f.high)
    consts.append({"constant": "PL latency model (held-out error)", "range": [1 - err, 1 + err],
                   "unit": "x cycles", "low_s": at(dev, -err), "high_s": at(dev, err), "source": why})
    return {"central": at(dev), "low": at(fast, -err), "high": at(slow, err), "cycles_s": cycles_s,
            "bytes": nbytes, "constants": consts, "error": err}


def amdahl(rest_s: float, gae_s: float, unit_s: float) -> dict:
    """GAE's share of a PPO update (`rest_s` + `gae_s`) and the whole-PPO speed-up when that GAE runs on
    the unit (`unit_s`) instead: (rest + GAE) / (rest + unit)."""
    total, moved = rest_s + gae_s, rest_s + unit_s
    return {"share": gae_s / total if total > 0 else 0.0, "speedup": total / moved if moved > 0 else math.inf}


def gae_headline(rest: list, gae: list, unit: dict) -> dict:
    """Share and speed-up of one GAE baseline: per measurement (the i-th timed update's rest with the i-th
    timed GAE call) their median and spread (``phases.spread``), whether the repeats settled
    (``phases.settled``), and the speed-up's band: the medians with the unit at its slow and fast end."""
    from ..phases import settled, spread

    if len(rest) != len(gae) or not rest:
        raise RlhlsError(f"gae_headline: {len(rest)} update(s) against {len(gae)} GAE timing(s)")
    each = [amdahl(r, g, unit["central"]) for r, g in zip(rest, gae)]
    speeds = [a["speedup"] for a in each]
    rm, gm = spread(rest)["median"], spread(gae)["median"]
    return {"gae_s": spread(gae), "share": spread([a["share"] for a in each]), "speedup": spread(speeds),
            "settled": settled(speeds), "band": [amdahl(rm, gm, unit["high"])["speedup"],
                                                 amdahl(rm, gm, unit["low"])["speedup"]]}


def phase_times(rows: list, warm: int = 1) -> dict:
    """One metrics row per update (``t_<phase>`` CPU seconds) -> {'phases', 'timed': {phase: [s per timed
    update]}, 'total', 'gae', 'rest': [s per timed update], 'first': {phase: s of the warm-up},
    'one_time': {phase: the warm-up's seconds over `warm` x the timed median}}. The first `warm` updates
    (one-time compiles, caches, the environments' start) are kept out of the timed figures."""
    from ..phases import spread

    if len(rows) <= warm:
        raise RlhlsError(f"heppo-table1: {len(rows)} update(s) measured; {warm} warm-up and at least one timed needed")
    phases = [k[2:] for k in rows[0] if k.startswith("t_")]

    def num(r, p):
        try:
            return float(r.get(f"t_{p}") or 0.0)
        except (TypeError, ValueError):
            raise RlhlsError(f"heppo-table1: t_{p} = {r.get(f't_{p}')!r} is not a number") from None
    later = rows[warm:]
    timed = {p: [num(r, p) for r in later] for p in phases}
    total = [sum(num(r, p) for p in phases) for r in later]
    gae = [sum(num(r, p) for p in phases if p in GAE_PHASES) for r in later]
    first = {p: sum(num(r, p) for r in rows[:warm]) for p in phases}
    return {"phases": phases, "timed": timed, "total": total, "gae": gae, "rest": [t - g for t, g in zip(total, gae)],
            "first": first, "one_time": {p: first[p] - warm * spread(timed[p])["median"] for p in phases}}


def _install_helpers() -> None:
    from rlhls.flow import native

    native.install()


def measure_table1(design, repeats: int) -> dict:
    """The helper kernels' one-time build (or cache load) and self-check (flow/native.py) timed on its own
    (wall and CPU seconds: the compiler is a child process, its CPU time not counted), then one warm-up
    and `repeats` timed updates of the design's demonstration rollout here, the phases in CPU time."""
    import time

    from .. import perf
    from ..phases import cpu_clock

    w0, c0 = time.perf_counter(), time.process_time()
    _install_helpers()
    helpers = {"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0}
    with cpu_clock():
        rows, hp = perf.measure_host(design, updates=1 + repeats)
    return {"helpers": helpers, "rows": rows, "hp": hp}


def gae_rates(design, repeats: int = TABLE1_REPEATS) -> dict:
    """Elements/s of GAE at the design's unit size (the seed's 64 x 1024): the unit's cycle model at its
    clock (one PE and the design's PEs) and both software baselines timed here (warm, CPU time, the median
    of `repeats` with its spread) on one random rollout of that size."""
    from rlhls.designs.kernels import KernelContext, get_kernel

    from ..phases import spread

    k = get_kernel("gae")
    ctx = KernelContext(design)
    node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
    p = k.resolve(k.node_params(node, ctx))
    T, N = p["steps"], p["trajectories"]
    unit = k.cost(p, device=ctx.device)
    one = k.cost({**p, "pes": 1}, device=ctx.device)
    ro = random_rollout(T, N)
    out = {"steps": T, "trajectories": N, "pes": p["pes"], "clock_mhz": p["clock_mhz"], "ii": unit["ii"],
           "unit_el_s": T * N / (unit["latency_us"] * 1e-6), "pe_el_s": T * N / (one["latency_us"] * 1e-6),
           "unit_peak_el_s": unit["throughput_el_per_s"], "seed_cpu_gpu_el_s": SEED_GAE_EL_S,
           "seed_pe_el_s": design.seed_figures.get("pe_throughput_elements_per_s")}
    for name in ("batched", "per_trajectory"):
        s = spread(T * N / max(t, 1e-12) for t in time_gae(name, ro, p["gamma"], p["lam"], repeats))
        out.update({f"{name}_el_s": s["median"], f"{name}_el_s_min": s["min"], f"{name}_el_s_max": s["max"]})
    return out


def table1_headline(name: str, h: dict, seed_speedup: float) -> str:
    """One baseline's share and speed-up, printed as a result only when its repeats settled."""
    sp, sh = h["speedup"], h["share"]
    fig = (f"{sp['median']:.5g}x (repeats {sp['min']:.5g}-{sp['max']:.5g}x, band {h['band'][0]:.5g}-"
           f"{h['band'][1]:.5g}x)")
    share = f"GAE {100 * sh['median']:.3g} % of PPO ({100 * sh['min']:.3g}-{100 * sh['max']:.3g} %)"
    if h["settled"]:
        return f"{name}: {share}, whole-PPO speed-up with the unit {fig}; seed CPU only {seed_speedup:.3g}x"
    why = "one repeat" if h["settled"] is None else "the two halves of the repeats differ by more than 5 %"
    return f"{name}: speed-up not settled ({why}: {fig}; {share}; --param repeats=N more on a quieter machine)"


def _ms(s: dict, scale: float = 1.0, spec: str = ".3g") -> str:
    """'median (min-max)' of a spread."""
    return (f"{format(s['median'] * scale, spec)} ({format(s['min'] * scale, spec)}-"
            f"{format(s['max'] * scale, spec)})")


def summary_table1(ctx, outcomes) -> Summary:
    """table1.md / table1.csv / speedup.json: Table I measured here beside the seed's, GAE's share and the
    whole-PPO speed-up for each GAE baseline, GAE elements/s."""
    from rlhls.core import fileio

    from ..figures import csv_text, markdown_table
    from ..gae import gae_units
    from ..phases import spread

    opts, out = ctx.opts, ctx.out
    design = _table1_design(opts)
    repeats = param(opts, "repeats", TABLE1_REPEATS, low=1)
    ctx.say(f"heppo-table1: measuring {design.name} here (1 warm-up + {repeats} timed updates of its "
            "demonstration rollout, CPU time) ...")
    m = measure_table1(design, repeats)
    pt, hp = phase_times(m["rows"]), m["hp"]
    gp = gae_units(design, hp)["gae"]
    T, N = gp["steps"], gp["trajectories"]
    ctx.say(f"timing the GAE baselines on a {N} x {T} rollout and at the unit's size ...")
    unit = unit_time(design, gp)
    ro = random_rollout(T, N)
    gae = {"batched": time_gae("batched", ro, gp["gamma"], gp["lam"], repeats),
           "per_trajectory": time_gae("per_trajectory", ro, gp["gamma"], gp["lam"], repeats),
           "trainer": pt["gae"], "seed_rate": [T * N / SEED_GAE_EL_S] * len(pt["rest"])}
    heads = {k: gae_headline(pt["rest"], g, unit) for k, g in gae.items()}
    rates = gae_rates(design, repeats)

    shares = design.seed_figures.get("phase_shares", {})
    gpu = design.seed_figures.get("table_i_cpu_gpu_percent", {})
    tot = spread(pt["total"])["median"] or 1.0
    rows = []
    for ph in list(shares) + [p for p in pt["phases"] if p not in shares]:
        s = spread(pt["timed"].get(ph, [0.0]))
        rows.append({"phase": ph, "seed_name": shares.get(ph, [ph])[0], "here_s": s["median"],
                     "here_min_s": s["min"], "here_max_s": s["max"], "here_pct": 100 * s["median"] / tot,
                     "one_time_s": pt["one_time"].get(ph, 0.0),
                     "seed_cpu_pct": shares.get(ph, [None, None])[1], "seed_cpu_gpu_pct": gpu.get(ph)})
    seed_gae_cpu = sum(shares.get(p, [0, 0])[1] for p in GAE_PHASES) / 100
    seed_gae_gpu = sum(gpu.get(p) or 0.0 for p in GAE_PHASES) / 100
    seed_cpu_speedup = 1 / (1 - seed_gae_cpu)

    def g(v, spec=".2f"):
        return "-" if v is None else format(v, spec)
    one = sum(max(0.0, v) for v in pt["one_time"].values())
    big = max(pt["one_time"], key=lambda p: pt["one_time"][p])
    lines_head = [table1_headline(k, heads[k], seed_cpu_speedup) for k in heads]
    md = [f"# HEPPO-GAE Table I and the GAE unit: {design.name}", "",
          f"PPO phases measured here on this machine's CPU: {repeats} update(s) of {design.name}'s demonstration "
          f"rollout ({N} envs x {T} steps) after one warm-up update, in CPU time (time.process_time); the "
          "median (min-max) over the timed updates. No GPU on this machine: the seed's CPU-GPU column stands "
          "alone ('-': a cell the seed's table leaves blank; its text gives the environment run 47 % of the "
          "CPU-GPU time).", "",
          markdown_table(["phase (seed's name)", "CPU s here (min-max)", "% here (CPU only)", "% seed CPU only",
                          "% seed CPU-GPU", "warm-up's extra s"],
                         [[r["seed_name"], f"{r['here_s']:.4g} ({r['here_min_s']:.4g}-{r['here_max_s']:.4g})",
                           f"{r['here_pct']:.2f}", g(r["seed_cpu_pct"]), g(r["seed_cpu_gpu_pct"]),
                           f"{r['one_time_s']:+.3g}"] for r in rows]), "",
          "One-time costs, kept out of the timed figures: the helper kernels' build (or disk-cache load) and "
          f"self-check (flow/native.py) {m['helpers']['wall_s']:.3g} s wall ({m['helpers']['cpu_s']:.3g} s CPU "
          "in this process; a compiler's own CPU time is not counted), timed before the run; the warm-up "
          f"update's CPU time over the timed median: {one:.3g} s in all, most in {big} "
          f"({pt['one_time'][big]:+.3g} s).", "",
          "## GAE's share of PPO and the whole-PPO speed-up with the unit", "",
          f"Each GAE baseline timed warm on one random rollout of the measured update's size ({N} trajectories "
          f"x {T} steps, {100 * ROLLOUT_ENDS[0]:g} % of steps terminated and {100 * ROLLOUT_ENDS[1]:g} % "
          f"truncated), in CPU time, {repeats} time(s); the rest of the update (its phases other than GAE) as "
          "measured above. Share = GAE / (rest + GAE); speed-up = (rest + GAE) / (rest + unit) with the unit's "
          f"modeled time for that rollout: {1e6 * unit['central']:.3g} µs (band {1e6 * unit['low']:.3g}-"
          f"{1e6 * unit['high']:.3g} µs). Median (min-max) over the repeats; 'band': the speed-up with the "
          "unit at its fast and its slow end.", "",
          markdown_table(["GAE", "GAE CPU s per update", "GAE share of PPO (%)", "PPO speed-up with the unit",
                          "band", "settled"],
                         [[BASELINES[k], _ms(h["gae_s"], 1, ".3g"), _ms(h["share"], 100, ".3g"),
                           _ms(h["speedup"], 1, ".5g"), f"{h['band'][0]:.5g}-{h['band'][1]:.5g}",
                           {True: "yes", False: "no (halves differ > 5 %)", None: "one repeat"}[h["settled"]]]
                          for k, h in heads.items()]
                         + [["seed, CPU only (Table I: GAE removed)", "-", f"{100 * seed_gae_cpu:.1f}",
                             f"{seed_cpu_speedup:.3g}", "-", "-"],
                            ["seed, CPU-GPU (Table I: GAE removed)", "-", f"{100 * seed_gae_gpu:.1f}",
                             f"{1 / (1 - seed_gae_gpu):.3g}", "-", "-"],
                            ["seed's claim (abstract, §V-D3)", "-", "≈30", f"{1 / (1 - SEED_PPO_GAIN):.3g}",
                             "-", "-"]]), "",
          *[f"- {s}" for s in lines_head], "",
          "## GAE elements per second", "",
          markdown_table(["", "elements/s", "source"],
                         [[f"GAE unit, one PE ({rates['clock_mhz']:g} MHz, II {rates['ii']})",
                           f"{rates['pe_el_s']:.4g}", "cycle model (designs/kernels/gae.py), one PE through "
                           f"{rates['trajectories']} x {rates['steps']}"],
                          [f"GAE unit, {rates['pes']} PEs", f"{rates['unit_el_s']:.4g}",
                           f"cycle model, {rates['trajectories']} x {rates['steps']} "
                           f"(peak {rates['unit_peak_el_s']:.4g})"],
                          ["seed, one PE", g(rates["seed_pe_el_s"], ".4g"), "§V-D1: 300 MHz, one element a cycle"],
                          ["batched numpy GAE here", f"{rates['batched_el_s']:.4g} ({rates['batched_el_s_min']:.4g}-"
                           f"{rates['batched_el_s_max']:.4g})",
                           f"measured (host/gae.py, {rates['trajectories']} x {rates['steps']}, median of {repeats})"],
                          ["per-trajectory software GAE here", f"{rates['per_trajectory_el_s']:.4g} "
                           f"({rates['per_trajectory_el_s_min']:.4g}-{rates['per_trajectory_el_s_max']:.4g})",
                           f"measured (a Python loop per trajectory, {rates['trajectories']} x {rates['steps']}, "
                           f"median of {repeats})"],
                          ["seed, CPU-GPU (a standard per-trajectory GAE)", f"{SEED_GAE_EL_S:.4g}", "§V-D3"]]), "",
          "## Assumptions", "",
          "- Timing: CPU time of this process, warm (the warm-up update and a first untimed GAE call excluded, "
          "the one-time costs reported above), the median of the repeats with its min-max; a speed-up is printed "
          "as a result only when the medians of the first and second half of its repeats agree within 5 %.",
          "- The speed-up is Amdahl's on this machine's CPU (as the seed's CPU-only column): the rest of PPO as "
          "measured, GAE replaced by the unit's modeled time. No PS factor: the SoC's PS would slow the rest "
          "and the software GAE alike.",
          f"- The unit's time: its cycles at {gp['clock_mhz']:g} MHz ({1e6 * unit['cycles_s']:.3g} µs, "
          f"{gp['pes']} PEs) + the PL launch overhead + the rollout's memory image ({unit['bytes']:.4g} bytes) "
          "in over PS->PL and the results out over PL->PS; band: "
          + "; ".join(f"{c['constant']} {c['range'][0]:.3g}..{c['range'][1]:.3g} {c['unit']} "
                      f"({1e6 * c['low_s']:.3g}-{1e6 * c['high_s']:.3g} µs)" for c in unit["constants"]) + ".",
          "- The seed's software GAE walks one trajectory at a time (§V-D3, its ref. [17]); ours is a plain "
          "Python loop per trajectory with the same recurrence and episode ends as the batched one (equal "
          "results). The trainer's GAE stage is heppo-ppo's experiment 5 (host/gae.py gae_stage: the "
          "standardizer and GAE units emulated in numpy), timed inside the update. The seed's 9,000 el/s is "
          f"{rates['per_trajectory_el_s'] / SEED_GAE_EL_S:.3g}x below our per-trajectory loop here: its GAE "
          "share (15-30 %) needs a GAE that slow, which the row 'at the seed's software rate' assumes.", ""]
    text = "\n".join(md)
    summary_row = {"design": design.name, "device": design.device, "rollout": f"{N}x{T}", "repeats": repeats,
                   "helpers_one_time_wall_s": m["helpers"]["wall_s"], "warmup_extra_s": one,
                   "unit_s": unit["central"], "unit_s_low": unit["low"], "unit_s_high": unit["high"],
                   "seed_gae_share_cpu": seed_gae_cpu, "seed_gae_share_cpu_gpu": seed_gae_gpu,
                   "seed_speedup_cpu": seed_cpu_speedup, "seed_time_saved": SEED_PPO_GAIN, **rates}
    for k, h in heads.items():
        summary_row.update({f"{k}_gae_s": h["gae_s"]["median"], f"{k}_share": h["share"]["median"],
                            f"{k}_share_min": h["share"]["min"], f"{k}_share_max": h["share"]["max"],
                            f"{k}_speedup": h["speedup"]["median"], f"{k}_speedup_min": h["speedup"]["min"],
                            f"{k}_speedup_max": h["speedup"]["max"], f"{k}_band_low": h["band"][0],
                            f"{k}_band_high": h["band"][1], f"{k}_settled": h["settled"]})
    fileio.atomic_write_text(out / "table1.md", text + "\n")
    fileio.atomic_write_text(out / "table1.csv", csv_text(rows, list(rows[0])))
    fileio.write_json(out / "speedup.json", {"speedup": summary_row, "unit": unit,
                                             "measured": {"phases_cpu_s": pt["timed"], "first_update_s": pt["first"],
                                                          "gae_cpu_s": gae}})
    return Summary([*rows, summary_row], text.splitlines(),
                   [out / "table1.md", out / "table1.csv", out / "speedup.json"])


register_experiment(Experiment(
    "heppo-table1", "HEPPO-GAE Table I (PPO phases here), GAE's share and the whole-PPO speed-up of the GAE unit "
    "for a batched and a per-trajectory GAE, GAE elements/s",
    runs=runs_table1, summarize=summary_table1,
    options=(option("--design", action="append", default=None, help="the PPO design (default heppo-ppo)"),),
    params={"repeats": TABLE1_REPEATS}))
