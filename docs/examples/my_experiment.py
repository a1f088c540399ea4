"""An experiment of your own: DQN-CartPole at two learning rates over seeds, each run an ordinary
run folder, summarised in a table; the skeleton gives it --out, --resume, --jobs, runs.csv and
report.html.

    python docs/examples/my_experiment.py OUT_DIR
"""

import sys

import numpy as np

from rlhls.cli import main
from rlhls.host.experiments import RUNS, TRAINS, Experiment, Summary, design_ref, register_experiment, train_run
from rlhls.host.runfolder import episodes

RATES = (2.5e-4, 1e-3)


def runs(ctx):
    """Its configurations: one training run per (learning rate, seed)."""
    from rlhls.designs.registry import get_design

    opts = ctx.opts
    design = get_design("apdrl-dqn-cartpole")
    _, config = ctx.config(design)  # --config: the design's values (of an RL Zoo file: its entry)
    steps, seeds = ctx.steps(config, 2000), opts.seeds or 2
    demo = {**design.demo.get("set", {}), "learning_starts": 200}  # learn early: a short demo
    config = {**demo, **(config or {})}  # the file wins over the demo, --set (overrides) over both
    ctx.start({"name": opts.name, "design": design.name, "overrides": {k: str(v) for k, v in opts.overrides.items()}},
              {"steps": steps, "seeds": seeds})
    ctx.data["seeds"] = seeds
    return [ctx.run(f"lr{lr:g}-s{s}", ctx.out / f"lr{lr:g}-s{s}", steps=steps, design=design_ref(design),
                    out=str(ctx.out / f"lr{lr:g}-s{s}"), seed=s,
                    overrides={**opts.overrides, "learning_rate": lr}, config=config)
            for lr in RATES for s in range(seeds)]


def summarize(ctx, outcomes):
    """One row per learning rate: the mean return of each run's last 10 episodes, over seeds."""
    rows = []
    for lr in RATES:
        finals = [float(np.mean(episodes(ctx.out / f"lr{lr:g}-s{s}")[1][-10:])) for s in range(ctx.data["seeds"])]
        rows.append({"learning_rate": lr, "final_return": float(np.mean(finals)), "per_seed": finals})
    text = ["| learning rate | final return | per seed |", "|---|---|---|"]
    text += [f"| {r['learning_rate']:g} | {r['final_return']:.1f} | "
             f"{', '.join(f'{x:.1f}' for x in r['per_seed'])} |" for r in rows]
    (ctx.out / "summary.md").write_text("\n".join(text) + "\n")
    return Summary(rows, text, [ctx.out / "summary.md"])


register_experiment(Experiment("lr-sweep", "DQN-CartPole at two learning rates", runs=runs, run=train_run,
                               summarize=summarize, options=(*TRAINS, *RUNS)))

out = sys.argv[1] if len(sys.argv) > 1 else "runs/lr-sweep"
sys.exit(main(["experiment", "lr-sweep", "--steps", "2000", "--seeds", "2", "--jobs", "1", "--out", out,
               "--quiet"]))
