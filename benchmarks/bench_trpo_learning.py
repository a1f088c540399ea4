"""TRPO learning check: our TRPO with CPP's fixed-point FVP unit (fixed<27,4>, emu)
beside our float64 TRPO on the same seeds, and beside sb3-contrib's TRPO with RL Zoo's MuJoCo
settings where sb3-contrib imports (it is not a dependency: ``pip install torch sb3-contrib`` into
the venv for the measurement).

Ours: the ``cpp-trpo-ant`` design (tanh 64-32 policy, 64-64 value MLP; §IV-A's CG MaxIter 10,
damping 0.1, max KL 0.01; GAE 0.99 / 0.97) with ``--env`` (the networks and the FVP unit resized
to the environment) and ``num_steps`` = 1024 samples per iteration instead of the seed's 50,000.
sb3-contrib: ``TRPO('MlpPolicy')`` with RL Zoo's ``hyperparams/trpo.yml`` MuJoCo defaults (the
``Hopper-v4`` entry; RL Zoo has no InvertedPendulum entry for TRPO): VecNormalize (observations
and rewards), 2 envs x 1024 steps, batch 128, gamma 0.99, GAE 0.95, CG 25 steps, damping 0.1,
20 critic updates, learning rate 1e-3.

Final return = mean episodic return of the last 20 training episodes of a run (stochastic
policy, as the runs train); "steps to 950" = the first environment step at which the mean of the
last 20 episodes reaches 950 (InvertedPendulum's maximum is 1000).

    python benchmarks/bench_trpo_learning.py [--env InvertedPendulum-v5] [--steps 100000] [--seeds 3]
        [--jobs 2] [--out runs/trpo-learning] [--no-sb3]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

WINDOW = 20
TARGET = 950.0


def _summary(steps, rets) -> dict:
    steps, rets = np.asarray(steps, dtype=float), np.asarray(rets, dtype=float)
    final = float(np.mean(rets[-WINDOW:])) if len(rets) else float("nan")
    reach = None
    for i in range(WINDOW, len(rets) + 1):
        if np.mean(rets[i - WINDOW:i]) >= TARGET:
            reach = int(steps[i - 1])
            break
    return {"final_return": final, "episodes": int(len(rets)), "steps_to_950": reach}


def ours(job: dict) -> dict:
    from rlhls.designs.registry import get_design
    from rlhls.host.train import train_design

    t0 = time.perf_counter()
    out = Path(job["out"]) / f"{job['name']}-s{job['seed']}"
    run = train_design(get_design("cpp-trpo-ant"), out=out, steps=job["steps"], seed=job["seed"], env_id=job["env"],
                       overrides={"num_steps": 1024, "fvp": job["fvp"]}, progress=False,
                       resume=(out / "checkpoint.npz").exists() or (out / "checkpoint.pkl").exists())
    return {**job, **_summary([e[0] for e in run.episodes], [e[1] for e in run.episodes]),
            "seconds": time.perf_counter() - t0}


def sb3(job: dict) -> dict:
    import torch
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    env = VecNormalize(make_vec_env(job["env"], n_envs=2, seed=job["seed"]))
    model = TRPO("MlpPolicy", env, n_steps=1024, batch_size=128, gamma=0.99, gae_lambda=0.95,
                 sub_sampling_factor=1, cg_max_steps=25, cg_damping=0.1, n_critic_updates=20, learning_rate=1e-3,
                 seed=job["seed"], verbose=0)
    steps, rets = [], []

    from stable_baselines3.common.callbacks import BaseCallback

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    steps.append(self.num_timesteps)
                    rets.append(info["episode"]["r"])
            return True

    model.learn(job["steps"], callback=Episodes())
    return {**job, **_summary(steps, rets), "seconds": time.perf_counter() - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="InvertedPendulum-v5")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="runs/trpo-learning")
    ap.add_argument("--no-sb3", action="store_true")
    a = ap.parse_args()
    jobs = [(ours, {"name": f"ours-{m}", "fvp": m, "env": a.env, "steps": a.steps, "seed": s, "out": a.out})
            for m in ("fixed", "float64") for s in range(a.seeds)]
    if not a.no_sb3:
        try:
            import sb3_contrib  # noqa: F401

            jobs += [(sb3, {"name": "sb3-contrib", "env": a.env, "steps": a.steps, "seed": s}) for s in range(a.seeds)]
        except ImportError:
            print("sb3-contrib not installed: its column is left out")
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futs = [pool.submit(fn, j) for fn, j in jobs]
        res = [f.result() for f in futs]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "learning.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    lines = [f"{a.env}, {a.steps} steps per run, seeds 0..{a.seeds - 1}; final return = mean of the last "
             f"{WINDOW} episodes", "",
             "| run | final return per seed | mean | steps to 950 (20-ep. mean) | s per run |",
             "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["name"] for r in res):
        rs = sorted((r for r in res if r["name"] == name), key=lambda r: r["seed"])
        fin = [r["final_return"] for r in rs]
        lines.append(f"| {name} | {', '.join(f'{f:.1f}' for f in fin)} | {np.mean(fin):.1f} | "
                     f"{', '.join(str(r['steps_to_950']) if r['steps_to_950'] else 'never' for r in rs)} | "
                     f"{np.mean([r['seconds'] for r in rs]):.0f} |")
    text = "\n".join(lines) + "\n"
    (Path(a.out) / "learning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
