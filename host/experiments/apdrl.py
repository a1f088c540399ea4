"""AP-DRL's experiments (seed 003 §V-B): Table III (fp32 vs mixed precision) and Table IV (modeled
FP32 vs BF16 training time against network size).

    rlhls experiment apdrl-table3 [--design D ...] [--steps N] [--seeds K] [--jobs J] [--full] [--out DIR]
    rlhls experiment apdrl-table3 --report [--design D ...] [--seeds K] --out DIR
    rlhls experiment apdrl-table4 [--sizes 64x64,400x300,4096x3072] [--repeats R] [--out DIR]

**apdrl-table3.** For each benchmark of Table III, ``--seeds`` runs (default 3) in ``fp32`` (every node
on the PS) and in ``mixed`` (every node in its unit's format under the design's ILP plan, computed
once and written to ``<out>/<design>/plan/``). Each run is an ordinary ``rlhls train`` run folder
``<out>/<design>/<precision>-s<seed>/``, trained in process by a Ray task (host/engine.py:
``--jobs`` at once, ``--address`` a cluster; ``--resume``, or the same command again, keeps finished
runs and continues the others from their checkpoints). Reported, as the seed does it:

* the moving average of episodic return over a 100-episode window (§V-B; over the episodes so far
  while fewer than 100 have ended);
* final return of a run = that moving average at its last episode; per precision mean +- std
  (sample) over seeds;
* reward error (Table III, which does not print its formula) = |R_mixed - R_fp32| / |R_fp32| * 100
  with R the mean final return over seeds;
* ``fig11.png``: one panel per benchmark, the moving average against environment steps, mean over
  seeds with a +-std band, fp32 and mixed (Fig. 11 style); ``table3.md`` / ``table3.csv``.

Budgets (environment steps per run). ``--full`` takes each design's own (CleanRL's / RL Zoo's) budget; the
default is a demonstration that shows the loop, the plan and the mixed precision working on 2 cores,
not converged agents: the demo column of ``BENCHMARKS`` (with its overrides, e.g. a smaller replay
buffer and an earlier ``learning_starts``). ``--config`` gives each design its own entry (as ``rlhls
train --config``): its values win over the demonstration's, its ``n_timesteps`` over both budgets,
its ``net_arch`` resizes the design (and its plan). ``--steps`` overrides every budget. Host speed
sets these (2 cores, measured): DQN-CartPole ~2000 env steps/s, A2C ~4000, DDPG (400-300 networks, one batch-256
gradient step per env step) ~20-45, DQN-Breakout and PPO-MsPacman (Nature CNN) a few per second in
fp32 and slower in mixed precision (every PL/AIE layer bit-exact) -- so the Atari benchmarks are a
demonstration of the loop, the plan and the mixed precision (run them with ``--seeds 1``); so are
the DDPG demo runs (8000 steps: 5000 gradient steps after a 3000-step warm-up), far from RL Zoo's 300k.

**apdrl-table4.** DQN-CartPole with hidden sizes (64, 64), (400, 300), (4096, 3072) (Table IV).
For each size the training graph at the design's batch (128) is profiled twice -- with every unit in
FP32 (the non-quantized baseline; AIE-ML runs FP32 emulated, PL uses its FP32 DSP figures) and with
AP-DRL's formats (PS FP32, PL FP16, AIE BF16) -- and partitioned by the ILP; the modeled hardware
time of one training step is the plan's makespan. Table IV's "training time in one episode" is read
as one training iteration (its 0.21 ms at (64, 64) is far below any 500-step CartPole episode); the
per-episode figure is also given for a 500-step episode with CleanRL's train_frequency 10 (50
training steps; acting runs on the PS and is left out because both precisions share it). Beside
them: the measured host time of one training step of our emulation (fp32 and mixed, best of
``--repeats``) and the seed's figures. Output ``table4.md`` / ``table4.csv``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlhls.core.errors import RlhlsError

from ..runfolder import episodes, evaluation, finished_steps
from . import (
    RUNS,
    Experiment,
    Summary,
    check_out,
    count,
    design_ref,
    option,
    read_object,
    register_experiment,
    solve_plan,
    train_run,
)

__all__ = ["BENCHMARKS", "TABLE4_SIZES", "runs_table3", "summary_table3", "runs_table4", "summary_table4",
           "summarize_table3",
           "moving_average", "reward_error", "cartpole_variant", "table4_rows"]

MA_WINDOW = 100  # §V-B: 100-episode sliding window
PRECISIONS = ("fp32", "mixed")

# design, demo steps, demo overrides, full steps (the design's / CleanRL's / RL Zoo's budget)
BENCHMARKS = {
    "apdrl-dqn-cartpole": (100_000, {}, 500_000),
    "apdrl-a2c-invpendulum": (100_000, {}, 1_000_000),
    "apdrl-ddpg-lunarcont": (8_000, {"learning_starts": 3_000}, 300_000),  # RL Zoo's n_timesteps
    "apdrl-ddpg-mntncarcont": (8_000, {"learning_starts": 3_000}, 300_000),
    "apdrl-dqn-breakout": (1_000, {"learning_starts": 200, "buffer_size": 1_000}, 10_000_000),
    # 2 envs x 128 steps: a game (all lives) ends within the budget; minibatch 256 = the design's batch
    "apdrl-ppo-mspacman": (2_048, {"num_envs": 2, "num_steps": 128, "num_minibatches": 1, "update_epochs": 1},
                           10_000_000),
}
MLP_BENCHMARKS = ("apdrl-dqn-cartpole", "apdrl-a2c-invpendulum", "apdrl-ddpg-lunarcont", "apdrl-ddpg-mntncarcont")
TABLE4_SIZES = ((64, 64), (400, 300), (4096, 3072))
SEED_TABLE4 = {"64x64": (0.21, 0.27), "400x300": (32.55, 28.81), "4096x3072": (2175.12, 729.91)}
EPISODE_STEPS, TRAIN_FREQUENCY = 500, 10


# ----------------------------------------------------------------------------- statistics

def moving_average(y, window: int = MA_WINDOW) -> np.ndarray:
    """Trailing mean over `window` episodes (over all so far for the first window-1)."""
    y = np.asarray(y, dtype=np.float64)
    if not len(y):
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    n = np.arange(1, len(y) + 1)
    lo = np.maximum(n - window, 0)
    return (c[n] - c[lo]) / (n - lo)


def reward_error(r_fp32: float, r_mixed: float) -> float:
    """Table III's reward error in percent: |R_mixed - R_fp32| / |R_fp32| * 100 (nan if R_fp32 == 0)."""
    if not (math.isfinite(r_fp32) and math.isfinite(r_mixed)) or r_fp32 == 0:
        return float("nan")
    return abs(r_mixed - r_fp32) / abs(r_fp32) * 100.0


def _untrained(run_dir: Path, steps: int) -> bool:
    """A run that never passed its learning_starts: its returns are an untrained agent's."""
    hp = read_object(run_dir / "config.json", default={}).get("hyperparams")
    ls = hp.get("learning_starts", 0) if isinstance(hp, dict) else 0
    return isinstance(ls, int) and ls >= steps


def _mean_std(v: list) -> tuple[float, float]:
    a = np.array([x for x in v if math.isfinite(x)])
    if not len(a):
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def summarize_table3(out, designs: list[str], seeds: int, title: str = "", failed: list | None = None) -> list[dict]:
    """table3.csv / table3.md / fig11.png from the run folders under `out`; returns the rows."""
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table, mean_std

    out = Path(out)
    rows, curves = [], {}
    for d in designs:
        r: dict[str, Any] = {"design": d}  # a row of the table
        for p in PRECISIONS:
            finals, per_seed, reached, evals = [], [], [], []
            for s in range(seeds):
                x, y = episodes(out / d / f"{p}-s{s}")
                e = evaluation(out / d / f"{p}-s{s}")
                if not math.isnan(e):
                    evals.append(e)
                if len(y):
                    ma = moving_average(y)
                    finals.append(float(ma[-1]))
                    per_seed.append((x, ma))
                    reached.append(max(finished_steps(out / d / f"{p}-s{s}"), int(x[-1])))
            r[f"{p}_mean"], r[f"{p}_std"] = _mean_std(finals)
            r[f"{p}_seeds"] = len(finals)
            r[f"{p}_steps"] = min(reached, default=0)  # the least-trained run: unfinished ones show here
            r[f"{p}_per_seed"] = " ".join(f"{f:.2f}" for f in finals)
            r[f"{p}_eval_mean"], r[f"{p}_eval_std"] = _mean_std(evals)  # the deterministic policy at the end
            r[f"{p}_eval_seeds"] = len(evals)
            curves[(d, p)] = per_seed
        r["untrained"] = any(_untrained(out / d / f"{p}-s{s}", r[f"{p}_steps"]) for p in PRECISIONS
                             for s in range(seeds) if (out / d / f"{p}-s{s}").is_dir())
        # no gradient step yet: both agents are the initial policy, their "error" means nothing
        r["reward_error_percent"] = float("nan") if r["untrained"] else reward_error(r["fp32_mean"], r["mixed_mean"])
        r["eval_reward_error_percent"] = (float("nan") if r["untrained"]
                                          else reward_error(r["fp32_eval_mean"], r["mixed_eval_mean"]))
        rows.append(r)

    cols = ["design", "fp32_mean", "fp32_std", "fp32_seeds", "fp32_steps", "fp32_per_seed", "mixed_mean",
            "mixed_std", "mixed_seeds", "mixed_steps", "mixed_per_seed", "reward_error_percent", "untrained",
            "fp32_eval_mean", "fp32_eval_std", "mixed_eval_mean", "mixed_eval_std", "eval_reward_error_percent"]
    atomic_write_text(out / "table3.csv", csv_text(rows, cols))

    from rlhls.designs.registry import get_design

    def seed_err(d):
        e = get_design(d).seed_figures.get("table_iii_reward_error_percent")
        return "" if e is None else f"{e:.2f}"

    md = [f"# {title or 'AP-DRL Table III'}", "",
          f"Final return = {MA_WINDOW}-episode moving average of episodic return at a run's last episode; "
          "mean ± std (sample) over seeds (the mean alone of one seed). Reward error = "
          "|R_mixed − R_fp32| / |R_fp32| × 100 of the means "
          "(the seed's definition). Beside it, evaluation = mean return of the deterministic policy at the end "
          "of a run (eval.csv: its eval_episodes episodes on an environment of its own), mean ± std over seeds, "
          "and the same error of those means.", "",
          markdown_table(["benchmark", "fp32 (mean ± std)", "mixed (mean ± std)", "seeds", "steps (least run)",
                          "reward error %", "seed's reward error %", "fp32 eval", "mixed eval", "eval error %"],
                         [[r["design"], mean_std(r["fp32_mean"], r["fp32_std"], r["fp32_seeds"]),
                           mean_std(r["mixed_mean"], r["mixed_std"], r["mixed_seeds"]),
                           f"{r['fp32_seeds']}/{r['mixed_seeds']}",
                           f"{r['fp32_steps']}/{r['mixed_steps']}",
                           "untrained (no gradient step yet)" if r["untrained"] else f"{r['reward_error_percent']:.2f}",
                           seed_err(r["design"]),
                           mean_std(r["fp32_eval_mean"], r["fp32_eval_std"], r["fp32_eval_seeds"]),
                           mean_std(r["mixed_eval_mean"], r["mixed_eval_std"], r["mixed_eval_seeds"]),
                           "-" if r["untrained"] else f"{r['eval_reward_error_percent']:.2f}"] for r in rows]),
          "", "![Fig. 11](fig11.png)", "", *(failed or [])]
    atomic_write_text(out / "table3.md", "\n".join(md))

    import matplotlib
    from matplotlib.figure import Figure

    from ..figures import mean_std_band, save_png

    n = len(designs)
    ncol = min(3, n)
    nrow = math.ceil(n / ncol)
    fig = Figure(figsize=(4.2 * ncol, 3.2 * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    for i, d in enumerate(designs):
        ax = axes[i // ncol][i % ncol]
        for p, col in zip(PRECISIONS, ("tab:blue", "tab:orange")):
            mean_std_band(ax, curves[(d, p)], col, p, points=200)
        ax.set_title(d.replace("apdrl-", ""), fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))  # 400k, not 400000 run together
        ax.set_ylabel(f"return ({MA_WINDOW}-ep. moving avg.)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no finished episode", ha="center", va="center", transform=ax.transAxes)
    for j in range(n, nrow * ncol):
        axes[j // ncol][j % ncol].axis("off")
    fig.tight_layout()
    save_png(fig, out / "fig11.png")
    return rows


# ----------------------------------------------------------------------------- table III runs

def runs_table3(ctx) -> list:
    """The (benchmark, precision, seed) training runs (module docstring); none with --report."""
    from rlhls.designs.registry import get_design

    from ..algorithms import get_algorithm
    from ..hyperparams import apply_config

    args, out, say = ctx.opts, ctx.out, ctx.say
    designs = list(dict.fromkeys(args.design or BENCHMARKS))
    for d in designs:
        if d not in BENCHMARKS:
            raise RlhlsError(f"--design {d}: not a Table III benchmark (expected one of {', '.join(BENCHMARKS)})")
    ctx.data["designs"] = designs
    if args.report:
        return []
    args.seeds = args.seeds or 3
    common = dict(args.overrides)
    settings = {"name": args.name, "full": args.full, "overrides": {k: str(v) for k, v in common.items()}}
    check_out(out, settings)
    jobs, sized = [], {}
    for d in designs:
        demo_steps, demo_set, full_steps = BENCHMARKS[d]
        sized[d], config = ctx.config(get_design(d))  # --config: this design's values, its entry's budget
        steps = ctx.steps(config, full_steps if args.full else demo_steps)
        config = {**({} if args.full else demo_set), **(config or {})}  # the file wins over the demonstration
        for s in range(args.seeds):  # seed-major: an interrupted experiment still has fp32/mixed pairs
            for p in PRECISIONS:
                jobs.append({"design": d, "precision": p, "seed": s, "steps": steps, "overrides": common,
                             "config": config, "out": str(out / d / f"{p}-s{s}"), "plan": None})
    ctx.start(settings, {"designs": designs, "seeds": args.seeds})
    for d in designs:  # one plan per design (as --config resizes it), shared by its mixed runs
        solve_plan(sized[d], folder=out / d / "plan")
        plan = out / d / "plan" / "plan.json"
        for j in jobs:
            if j["design"] == d and j["precision"] == "mixed":
                j["plan"] = str(plan)
        say(f"{d}: plan -> {plan}")
    for j in {j["design"]: j for j in jobs}.values():
        d, config = apply_config(get_design(j["design"]), j["config"])
        hp = get_algorithm(d.algorithm).hyperparams(d, j["overrides"], config)
        if hp.get("learning_starts", 0) >= j["steps"]:
            say(f"rlhls: warning: {d.name}: {j['steps']} steps do not pass learning_starts = {hp['learning_starts']}; "
                "its runs take no gradient step and its row is marked untrained")
    say(f"{args.name}: {len(designs)} benchmark(s) x 2 precisions x {args.seeds} seed(s) = {len(jobs)} run(s) "
        f"-> {out}")
    return [ctx.run(f"{j['design']}/{j['precision']}-s{j['seed']}", j["out"], steps=j["steps"],
                    design=design_ref(get_design(j["design"])), out=j["out"], seed=j["seed"],
                    precision=j["precision"], plan=j["plan"], overrides=j["overrides"], config=j["config"] or None)
            for j in jobs]


def _lines(rows) -> list:
    from ..figures import mean_std

    out = []
    for r in rows:
        err = ("untrained: no gradient step yet" if r["untrained"] else
               f"reward error {r['reward_error_percent']:.2f} %")
        fp32 = mean_std(r["fp32_mean"], r["fp32_std"], r["fp32_seeds"], "9.2f", "<8.2f", pad=True)
        mixed = mean_std(r["mixed_mean"], r["mixed_std"], r["mixed_seeds"], "9.2f", "<8.2f", pad=True)
        out.append(f"{r['design']:<24} fp32 {fp32} mixed {mixed} {err}  (least-trained run: "
                   f"fp32 {r['fp32_steps']}, mixed {r['mixed_steps']} steps)")
    return out


def summary_table3(ctx, outcomes) -> Summary:
    """table3.* and fig11.png of the runs; with --report, of the run folders as they stand (while,
    or after, they train)."""
    args, out, designs = ctx.opts, ctx.out, ctx.data["designs"]
    title = f"{args.name}: fp32 vs mixed precision, {args.seeds} seed(s)"
    if args.report:
        record = read_object(out / "experiment.json", default={})
        if args.design is None and record.get("designs"):  # the experiment's own list
            designs = record["designs"]
        args.seeds = args.seeds or int(record.get("seeds", 3))
        designs = [d for d in designs if (out / d).is_dir()]
        if not designs:
            raise RlhlsError(f"--report: no Table III run folders in {out}")
        title = f"{args.name}: fp32 vs mixed precision, {args.seeds} seed(s), as the runs stand"
    rows = summarize_table3(out, designs, args.seeds, title, failed=ctx.failed)
    return Summary(rows, _lines(rows), [out / "table3.md", out / "fig11.png"])


# ----------------------------------------------------------------------------- table IV

def cartpole_variant(h1: int, h2: int, formats: dict | None = None):
    """apdrl-dqn-cartpole with hidden sizes (h1, h2) (and optionally other unit formats)."""
    from rlhls.designs.design import NetSpec
    from rlhls.designs.nets import mlp
    from rlhls.designs.registry import get_design

    base = get_design("apdrl-dqn-cartpole")
    net = NetSpec("q", "q", lambda s: mlp("q", 4, (h1, h2), 2, seed=s), target=True)
    tag = "fp32" if formats else "mixed"
    return dataclasses.replace(base, name=f"{base.name}-{h1}x{h2}-{tag}", networks=(net,),
                               formats=dict(formats or base.formats))


FP32_EVERYWHERE = {"storage": "fp32", "acc": "fp32"}


def _modeled(design, time_limit: float) -> dict:
    plan = solve_plan(design, time_limit=time_limit)
    return {"makespan_us": plan.makespan_us, "status": plan.status, "units": plan.units,
            "assignment": dict(plan.assignment)}


def _host_step_seconds(design, precision: str, assignment, repeats: int) -> float:
    from ..algorithms.dqn import DQN, PHASES

    t = DQN(design, seed=0, hyperparams={"precision": precision, "learning_starts": 1, "steps_per_update": 1},
            assignment=assignment if precision == "mixed" else None)
    try:
        rng = np.random.default_rng(0)
        b = design.batch_size
        s, s2 = rng.standard_normal((b, 4)) * 0.5, rng.standard_normal((b, 4)) * 0.5
        a, r, d = rng.integers(0, 2, b), np.ones(b), np.zeros(b)
        times = {k: 0.0 for k in PHASES}
        t.train_step(s, s2, a, r, d, times)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            t.train_step(s, s2, a, r, d, times)
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        t.close()


def table4_rows(sizes=TABLE4_SIZES, repeats: int = 3, time_limit: float = 60.0, say=lambda m: None) -> list[dict]:
    rows = []
    for h1, h2 in sizes:
        key = f"{h1}x{h2}"
        mixed_design = cartpole_variant(h1, h2)
        fp32 = _modeled(cartpole_variant(h1, h2, FP32_EVERYWHERE), time_limit)
        mixed = _modeled(mixed_design, time_limit)
        say(f"{key}: modeled step fp32 {fp32['makespan_us']:.2f} us, mixed {mixed['makespan_us']:.2f} us; "
            "measuring the host emulation")
        host32 = _host_step_seconds(mixed_design, "fp32", None, repeats)
        hostmx = _host_step_seconds(mixed_design, "mixed", mixed["assignment"], repeats)
        per_ep = EPISODE_STEPS // TRAIN_FREQUENCY
        seed = SEED_TABLE4.get(key)
        rows.append({
            "hidden": key, "flops_per_step": None,
            "model_fp32_step_ms": fp32["makespan_us"] / 1e3, "model_bf16_step_ms": mixed["makespan_us"] / 1e3,
            "model_speedup": fp32["makespan_us"] / mixed["makespan_us"],
            "model_fp32_episode_ms": fp32["makespan_us"] * per_ep / 1e3,
            "model_bf16_episode_ms": mixed["makespan_us"] * per_ep / 1e3,
            "fp32_units": " ".join(f"{u}:{n}" for u, n in sorted(fp32["units"].items())),
            "bf16_units": " ".join(f"{u}:{n}" for u, n in sorted(mixed["units"].items())),
            "host_fp32_step_ms": host32 * 1e3, "host_mixed_step_ms": hostmx * 1e3,
            "seed_fp32_ms": seed[0] if seed else float("nan"), "seed_bf16_ms": seed[1] if seed else float("nan"),
            "seed_speedup": seed[0] / seed[1] if seed else float("nan"),
        })
        from rlhls.designs.graph import build_graph

        rows[-1]["flops_per_step"] = build_graph(mixed_design).summary()["flops"]
    return rows


def runs_table4(ctx) -> list:
    """No runs: the sizes are modeled and timed one after another in this process (summary_table4)."""
    ctx.opts.sizes = ctx.opts.sizes or TABLE4_SIZES
    ctx.data["settings"] = {"name": ctx.opts.name, "sizes": [list(s) for s in ctx.opts.sizes]}
    check_out(ctx.out, ctx.data["settings"])
    return []


def summary_table4(ctx, outcomes) -> Summary:
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table

    out = ctx.out
    rows = table4_rows(ctx.opts.sizes, repeats=ctx.opts.repeats, say=ctx.say)
    ctx.start(ctx.data["settings"])
    atomic_write_text(out / "table4.csv", csv_text(rows, list(rows[0])))
    md = ["# AP-DRL Table IV: DQN-CartPole training time against network size", "",
          "Modeled = the ILP plan's makespan of one training step (batch 128) on the VEK280 with every unit in FP32 "
          "vs AP-DRL's formats (PS FP32, PL FP16, AIE BF16); per episode = 50 training steps (a 500-step "
          "episode, train_frequency 10). Host = measured time of one training step of our emulation "
          "(fp32: every node on the PS; mixed: the BF16 plan's nodes bit-exact in their formats). "
          "Seed = Table IV's \"training time in one episode\".", "",
          markdown_table(["hidden", "FLOPs/step", "model FP32 ms", "model BF16 ms", "model speedup",
                          "FP32 plan units", "BF16 plan units", "host fp32 ms", "host mixed ms",
                          "seed FP32 ms", "seed BF16 ms", "seed speedup"],
                         [[r["hidden"], f"{r['flops_per_step']:.4g}", f"{r['model_fp32_step_ms']:.4g}",
                           f"{r['model_bf16_step_ms']:.4g}", f"{r['model_speedup']:.2f}×", r["fp32_units"],
                           r["bf16_units"], f"{r['host_fp32_step_ms']:.3g}", f"{r['host_mixed_step_ms']:.3g}",
                           f"{r['seed_fp32_ms']:g}", f"{r['seed_bf16_ms']:g}", f"{r['seed_speedup']:.2f}×"]
                          for r in rows]), ""]
    atomic_write_text(out / "table4.md", "\n".join(md))
    lines = [f"{r['hidden']:<10} model fp32 {r['model_fp32_step_ms']:9.4g} ms  bf16 {r['model_bf16_step_ms']:9.4g} ms "
             f"({r['model_speedup']:.2f}x; seed {r['seed_speedup']:.2f}x)  host fp32 {r['host_fp32_step_ms']:.3g} ms "
             f"mixed {r['host_mixed_step_ms']:.3g} ms" for r in rows]
    return Summary(rows, lines, [out / "table4.md"])


MAX_HIDDEN = 16384  # Table IV goes to 4096x3072; a 16384x16384 layer's float64 weights are 2 GiB


def parse_sizes(text: str) -> tuple:
    """'64x64,400x300' -> ((64, 64), (400, 300))."""
    out = []
    for part in text.split(","):
        try:
            a, b = (int(v) for v in part.strip().lower().split("x"))
        except ValueError:
            raise RlhlsError(f"--sizes {text!r}: expected H1xH2[,H1xH2...] (e.g. 64x64,400x300)") from None
        if a < 1 or b < 1:
            raise RlhlsError(f"--sizes {text!r}: hidden sizes must be >= 1")
        if a > MAX_HIDDEN or b > MAX_HIDDEN:  # the H1 x H2 weights are allocated: bounded before any work
            raise RlhlsError(f"--sizes {text!r}: hidden sizes must be <= {MAX_HIDDEN}")
        out.append((a, b))
    return tuple(out)


register_experiment(Experiment(
    "apdrl-table3", "AP-DRL Table III: fp32 vs mixed precision over seeds (Fig. 11)", runs=runs_table3,
    run=train_run, summarize=summary_table3,
    options=(option("--design", action="append", default=None,
                    help="a benchmark to run (repeatable; default all six)"),
             "steps", option("--seeds", type=count, default=None, help="seeds 0..K-1 (default 3)"), "full",
             "overrides", *RUNS,
             option("--report", action="store_true",
                    help="summarize the run folders in --out as they are (unfinished runs at their last episode) "
                         "and train nothing"))))
register_experiment(Experiment(
    "apdrl-table4", "AP-DRL Table IV: modeled FP32 vs BF16 step time by network size", runs=runs_table4,
    summarize=summary_table4,
    options=(option("--sizes", type=parse_sizes, default=None,
                    help="hidden sizes H1xH2,... (default 64x64,400x300,4096x3072)"),
             option("--repeats", type=count, default=3, help="host timing repeats, best of (default 3)"))))
