"""HEPPO-GAE's experiments (seed 000), several seeds each, with a summary.

    rlhls experiment heppo-table3|heppo-bits [--steps N] [--seeds K] [--env ID] [--out DIR]
                     [--jobs J] [--backend emu|csim] [--full] [--set key=value ...] [--quiet]

* ``heppo-table3`` — Table III's experiments 1-5 (host/gae.py ``EXPERIMENTS``), 8-bit codes.
* ``heppo-bits`` — Fig. 8-9: experiment 5 (dynamic reward + block value standardization,
  n-bit uniform quantization) for n = 3..10, against the float baseline "PPO + DS"
  (experiment 2).

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
environment with the demo rollout of ``rlhls run`` (8 envs x 256 steps, 8 minibatches),
``--steps 4096`` and 2 seeds -- far too short to separate the configurations. The seed's
comparison needs millions of steps with its 64 x 1024 rollout; on a bigger machine:

    rlhls experiment heppo-table3 --full --steps 10000000 --seeds 5 --address auto --out runs/table3
    rlhls experiment heppo-bits   --full --steps 10000000 --seeds 5 --address auto --out runs/bits
    rlhls experiment heppo-bits --resume --address auto --out runs/bits   # after an interruption

Never clobbers: an existing non-empty ``--out`` must hold our ``experiment.json`` with the same
settings (then it is continued), else it is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rlhls.designs.errors import RlhlsError

from . import Experiment, RUNS, Summary, TRAINS, design_ref, episodes, evaluation, option, register_experiment, train_run

__all__ = ["configurations", "runs", "summarize"]

DEMO_STEPS = 4096
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
    from ..runner import rolling_window

    w = rolling_window(len(y))
    c = np.cumsum(np.insert(y, 0, 0.0))
    return np.concatenate([c[1:w] / np.arange(1, w), (c[w:] - c[:-w]) / w]) if len(y) else y


def summarize(out, configs: list[dict], seeds: int, title: str = "", failed: list | None = None) -> list[dict]:
    """summary.csv, summary.md and comparison.png of the run folders in `out`; returns the rows."""
    from ..report import markdown_table
    from ..runner import atomic_write_text, csv_text, rolling_window

    out = Path(out)
    rows, curves = [], {}
    for c in configs:
        finals, per_seed, max_step, evals = [], [], 0.0, []
        for s in range(seeds):
            d = out / f"{c['name']}-s{s}"
            if not (d / "episodes.csv").exists():
                continue
            x, y = episodes(d)
            cfg = json.loads((d / "config.json").read_text())
            max_step = max(max_step, float(cfg.get("steps", 0)))
            f = float(np.mean(y[-rolling_window(len(y)):])) if len(y) else float("nan")
            finals.append(f)
            per_seed.append((x, _rolling(y)))
            evals.append(evaluation(d))
        curves[c["name"]] = (per_seed, max_step)
        v = np.array([f for f in finals if not math.isnan(f)])
        rows.append({"config": c["name"], "label": c["label"], "settings": " ".join(f"{k}={x}" for k, x in c["set"].items()),
                     "seeds": len(finals), "final_return_mean": float(v.mean()) if len(v) else float("nan"),
                     "final_return_std": float(v.std(ddof=1)) if len(v) > 1 else (0.0 if len(v) else float("nan")),
                     "per_seed": " ".join("nan" if math.isnan(f) else f"{f:.2f}" for f in finals)})
        e = np.array([x for x in evals if not math.isnan(x)])  # the deterministic policy at the end of a run
        rows[-1].update(eval_return_mean=float(e.mean()) if len(e) else float("nan"),
                        eval_return_std=float(e.std(ddof=1)) if len(e) > 1 else (0.0 if len(e) else float("nan")))
    base = rows[0]["final_return_mean"] if rows else float("nan")  # the first configuration: the baseline
    for r in rows:
        r["vs_baseline"] = r["final_return_mean"] / base if base and not math.isnan(base) else float("nan")
    cols = ["config", "label", "settings", "seeds", "final_return_mean", "final_return_std", "vs_baseline", "per_seed",
            "eval_return_mean", "eval_return_std"]
    atomic_write_text(out / "summary.csv", csv_text(rows, cols))
    md = [f"# {title}" if title else "# experiment summary", "",
          "Final return = mean episodic return of the last rolling-average window of episodes of a run; "
          "mean ± std (sample) over seeds; × = the mean over the first configuration's (the baseline). "
          "Evaluation = mean return of the deterministic policy at the end of a run (eval.csv), mean ± std over "
          "seeds.", "",
          markdown_table(["config", "what", "settings", "seeds", "final return (mean ± std)",
                          f"× {rows[0]['config'] if rows else 'baseline'}", "per seed", "evaluation (mean ± std)"],
                         [[r["config"], r["label"], r["settings"], r["seeds"],
                           f"{r['final_return_mean']:.2f} ± {r['final_return_std']:.2f}", f"{r['vs_baseline']:.2f}",
                           r["per_seed"], f"{r['eval_return_mean']:.2f} ± {r['eval_return_std']:.2f}"] for r in rows]),
          "", "![comparison](comparison.png)", "", *(failed or [])]
    atomic_write_text(out / "summary.md", "\n".join(md))

    import matplotlib
    from matplotlib.figure import Figure

    from ..report import mean_std_band, save_png

    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    colors = matplotlib.colormaps["tab10"].colors
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

    args = ctx.opts
    args.seeds = args.seeds or DEMO_SEEDS
    configs = configurations(args.name)
    if args.design and len(args.design) > 1:
        raise RlhlsError(f"--design: {args.name} takes one PPO design")
    design = get_design(args.design[0] if args.design else "heppo-ppo")
    if design.algorithm != "ppo":
        raise RlhlsError(f"design '{design.name}' uses {design.algorithm.upper()}; the HEPPO experiments train PPO")
    base = {} if args.full else dict(design.demo.get("set", {}))
    base.update(args.overrides)
    alg = get_algorithm(design.algorithm)
    for c in configs:
        alg.hyperparams(design, {**base, **c["set"]})  # validate every configuration first
    env = args.env or design.env_id
    steps = args.steps or DEMO_STEPS
    out = ctx.out
    settings = {"name": args.name, "design": design.name, "env": env, "backend": args.backend, "full": args.full,
                "overrides": {k: str(v) for k, v in base.items()}}
    ctx.start(settings, {"steps": steps, "seeds": args.seeds})
    ctx.data.update(configs=configs, title=f"{args.name}: {design.name} on {env}, {steps} steps per run")
    ctx.say(f"{args.name}: {len(configs)} configuration(s) x {args.seeds} seed(s) = {len(configs) * args.seeds} "
            f"run(s) of {steps} steps on {env} -> {out}")
    ref = design_ref(design)
    return [ctx.run(f"{c['name']}-s{s}", out / f"{c['name']}-s{s}", steps=steps, design=ref,
                    out=str(out / f"{c['name']}-s{s}"), seed=s, env=env, backend=args.backend,
                    overrides={**base, **c["set"]})
            for c in configs for s in range(args.seeds)]


def summary(ctx, outcomes) -> Summary:
    rows = summarize(ctx.out, ctx.data["configs"], ctx.opts.seeds, ctx.data["title"], failed=ctx.failed)
    lines = [f"{r['config']:<6} {r['label']:<46} {r['final_return_mean']:10.2f} ± {r['final_return_std']:.2f} "
             f"({r['seeds']} seed(s))" for r in rows]
    return Summary(rows, lines, [ctx.out / "summary.md", ctx.out / "comparison.png"])


_OPTIONS = (option("--design", action="append", default=None, help="the PPO design (default heppo-ppo)"),
            "env", *TRAINS, *RUNS)
register_experiment(Experiment("heppo-table3", "HEPPO-GAE Table III experiments 1-5 (Fig. 10), several seeds",
                               runs=runs, run=train_run, summarize=summary, options=_OPTIONS))
register_experiment(Experiment("heppo-bits", "HEPPO-GAE Fig. 8-9: n = 3..10-bit codes against PPO + DS",
                               runs=runs, run=train_run, summarize=summary, options=_OPTIONS))
