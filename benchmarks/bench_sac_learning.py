"""SAC learning check: our SAC (fp32, and the design's AP-DRL mixed precision under its ILP plan, emu) beside
Stable-Baselines3's SAC at RL Zoo's hyperparameters and the same budget, on the same seeds.

Ours: the ``sac-pendulum`` / ``sac-lunarcont`` designs (RL Zoo's ``sac.yml`` entries as published: SB3's
defaults, Pendulum-v1 learning rate 1e-3; LunarLanderContinuous batch 256, lin_7.3e-4, tau 0.01, learning_starts
10,000, net_arch [400, 300], ent_coef auto). SB3: ``SAC('MlpPolicy')`` with the same entry's keyword arguments
(``lin_7.3e-4``: ``lambda progress: 7.3e-4 * progress``, as RL Zoo's linear_schedule), one env
(``make_vec_env``), torch on one thread. A budget below RL Zoo's ``n_timesteps`` is a fraction of it, the
same for both (the learning-rate schedule anneals over the run's own budget in both).

Score = the deterministic policy's mean return over 10 evaluation episodes after training, both through
rlhls's ``evaluate`` (SB3's ``evaluate_policy`` protocol: one fresh environment, seeds apart from training's).
Ratio = mean over seeds of ours / mean over seeds of SB3's, on the returns shifted so that a random
policy scores 0 (uniform random actions, 20 evaluation episodes, measured here: Pendulum-v1 -1213,
LunarLanderContinuous-v3 -163); raw means are shown too.

Each finished run is appended to ``<out>/results.jsonl`` (a rerun skips what is there); the table is
written from it to ``<out>/learning.md`` and, with ``--doc``, to docs/benchmarks/sac-learning.md.

    python benchmarks/bench_sac_learning.py [--env pendulum lunar] [--seeds 2] [--pendulum-steps 20000]
        [--lunar-steps 50000]
        [--jobs 2] [--out runs/sac-learning] [--precisions fp32 mixed] [--no-sb3] [--table] [--doc]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ENVS = {  # key -> (design, env id, RL Zoo's budget, SB3 keyword arguments of the RL Zoo entry, random return)
    "pendulum": ("sac-pendulum", "Pendulum-v1", 20_000, {"learning_rate": 1e-3}, -1213.0),
    "lunar": ("sac-lunarcont", "LunarLanderContinuous-v3", 500_000,
              {"batch_size": 256, "learning_rate": ("lin", 7.3e-4), "buffer_size": 1_000_000, "ent_coef": "auto",
               "gamma": 0.99, "tau": 0.01, "train_freq": 1, "gradient_steps": 1, "learning_starts": 10_000,
               "policy_kwargs": {"net_arch": [400, 300]}}, -163.0),
}
EVAL_EPISODES = 10


def ours(job: dict) -> dict:
    from rlhls.designs.registry import get_design
    from rlhls.host.train import train_design

    t0 = time.perf_counter()
    design, env_id = ENVS[job["env"]][:2]
    out = Path(job["out"]) / f"{job['env']}-{job['name']}-s{job['seed']}"
    run = train_design(get_design(design), out=out, steps=job["steps"], seed=job["seed"],
                       overrides={"precision": job["precision"], "eval_episodes": EVAL_EPISODES}, progress=False,
                       resume=(out / "checkpoint.npz").exists())
    ev = run.evaluations[-1]
    return {**job, "eval_return": float(ev["mean_return"]), "eval_std": float(ev["std_return"]),
            "seconds": time.perf_counter() - t0}


def sb3(job: dict) -> dict:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    from rlhls.host.evaluation import evaluate

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    env_id, kw = ENVS[job["env"]][1], dict(ENVS[job["env"]][3])
    lr = kw.get("learning_rate")
    if isinstance(lr, tuple):  # RL Zoo's linear_schedule
        kw["learning_rate"] = lambda progress, lr0=lr[1]: lr0 * progress
    model = SAC("MlpPolicy", make_vec_env(env_id, n_envs=1, seed=job["seed"]), seed=job["seed"], verbose=0, **kw)
    model.learn(job["steps"])
    res = evaluate(lambda obs: model.predict(obs, deterministic=True)[0], env_id, episodes=EVAL_EPISODES,
                   seed=job["seed"])
    return {**job, "eval_return": float(res["mean_return"]), "eval_std": float(res["std_return"]),
            "seconds": time.perf_counter() - t0}


def _run(fn_job):
    fn, job = fn_job
    return fn(job)


def table(res: list, cmd: str) -> str:
    lines = ["# SAC learning: rlhls against Stable-Baselines3", "",
             f"Measured {datetime.date.today().isoformat()} with `{cmd}` (2 shared CPU cores; emu backend; torch "
             "on one thread). Score: the deterministic policy's mean return over 10 evaluation episodes after "
             "training (SB3's evaluate_policy protocol, both through rlhls's `evaluate`). Ratio: ours / SB3 of the "
             "seed means, each shifted so that a random policy scores 0 (uniform random actions: Pendulum-v1 "
             "-1213, LunarLanderContinuous -163); the target is >= 0.8.", "",
             "| environment | budget (RL Zoo's) | run | return per seed | mean | ratio to SB3 | s per run |",
             "|---|---|---|---|---|---|---|"]
    for env in ENVS:
        rs = [r for r in res if r["env"] == env]
        if not rs:
            continue
        budget, rand = ENVS[env][2], ENVS[env][4]
        base = [r["eval_return"] for r in rs if r["name"] == "sb3"]
        for name in dict.fromkeys(r["name"] for r in sorted(rs, key=lambda r: r["name"] != "sb3")):
            rr = sorted((r for r in rs if r["name"] == name), key=lambda r: r["seed"])
            vals = [r["eval_return"] for r in rr]
            steps = rr[0]["steps"]
            ratio = ((np.mean(vals) - rand) / (np.mean(base) - rand)) if base and name != "sb3" else None
            per_seed = ", ".join(f"s{r['seed']}: {r['eval_return']:.1f}" for r in rr)
            lines.append(f"| {ENVS[env][1]} | {steps:,} ({steps / budget:.0%} of {budget:,}) | {name} | {per_seed} | "
                         f"{np.mean(vals):.1f} | {'' if ratio is None else f'{ratio:.2f}'} | "
                         f"{np.mean([r['seconds'] for r in rr]):.0f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", nargs="+", default=["pendulum", "lunar"], choices=list(ENVS))
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--pendulum-steps", type=int, default=20_000, help="Pendulum-v1 budget (RL Zoo: 20,000)")
    ap.add_argument("--lunar-steps", type=int, default=50_000, help="LunarLanderContinuous budget (RL Zoo: 500,000)")
    ap.add_argument("--mixed-seeds", type=int, default=None, help="seeds of the mixed-precision runs (default --seeds)")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "mixed"], choices=["fp32", "mixed"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="runs/sac-learning")
    ap.add_argument("--no-sb3", action="store_true")
    ap.add_argument("--table", action="store_true", help="only write the table of the results there are")
    ap.add_argument("--doc", action="store_true", help="also write docs/benchmarks/sac-learning.md")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.jsonl"
    res = [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []
    done = {(r["env"], r["name"], r["seed"], r["steps"]) for r in res}
    jobs = []
    for env in a.env:
        steps = a.pendulum_steps if env == "pendulum" else a.lunar_steps
        for s in range(a.seeds):
            if not a.no_sb3:
                jobs.append((sb3, {"name": "sb3", "env": env, "steps": steps, "seed": s}))
            for p in a.precisions:
                if p == "mixed" and a.mixed_seeds is not None and s >= a.mixed_seeds:
                    continue
                jobs.append((ours, {"name": f"rlhls-{p}", "precision": p, "env": env, "steps": steps, "seed": s,
                                    "out": str(out)}))
    jobs = [(fn, j) for fn, j in jobs if (j["env"], j["name"], j["seed"], j["steps"]) not in done]
    if not a.table and jobs:
        with ProcessPoolExecutor(max_workers=a.jobs) as pool:
            futs = [pool.submit(_run, fj) for fj in jobs]
            for f in as_completed(futs):
                r = f.result()
                res.append(r)
                with store.open("a") as fh:
                    fh.write(json.dumps(r, default=str) + "\n")
                print(f"{r['env']} {r['name']} s{r['seed']}: {r['eval_return']:.1f} ({r['seconds']:.0f} s)", flush=True)
    cmd = "python benchmarks/bench_sac_learning.py " + " ".join(sys.argv[1:])
    text = table(res, cmd.strip())
    (out / "learning.md").write_text(text)
    if a.doc:
        Path("docs/benchmarks/sac-learning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
