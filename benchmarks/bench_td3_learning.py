"""TD3 learning check: our TD3 (fp32, and the design's AP-DRL mixed precision under its ILP plan, emu)
beside Stable-Baselines3's TD3 at the same hyperparameters and the same budget (SB3 is not a dependency
of rlhls: ``pip install torch stable-baselines3`` into the venv for the measurement).

Hyperparameters: RL Zoo's ``hyperparams/td3.yml`` entries as published (the designs ``td3-pendulum`` and
``td3-lunarcont`` hold them: net_arch [400, 300], gamma 0.98, buffer 200,000, learning_starts 10,000,
normal action noise 0.1, learning rate 1e-3, one gradient step per env step; SB3's TD3 defaults for the
rest: batch 256, tau 0.005, policy_delay 2, target noise 0.2 clipped at 0.5). SB3 gets exactly these.

Score: the mean return of ``--eval-episodes`` deterministic episodes of the final policy (SB3's
``evaluate_policy``; ours: the run's end-of-run evaluation, host/evaluation.py), per seed; the ratio is
mean(ours) / mean(SB3) over seeds where SB3's mean is positive, and mean(SB3) / mean(ours) where both are
negative (Pendulum's returns are costs: 0.8 then means our cost is 1.25x SB3's).

    python benchmarks/bench_td3_learning.py [--env Pendulum-v1] [--steps 20000] [--seeds 3] [--jobs 2]
        [--eval-episodes 10] [--out runs/td3-learning] [--only fp32,mixed,sb3] [--md FILE]
    python benchmarks/bench_td3_learning.py --env E --steps N --collect DIR...   # the table of recorded runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread a run: the jobs are the parallelism
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

DESIGNS = {"Pendulum-v1": "td3-pendulum", "LunarLanderContinuous-v3": "td3-lunarcont"}
RLZOO_STEPS = {"Pendulum-v1": 20_000, "LunarLanderContinuous-v3": 300_000}


def ours(job: dict) -> dict:
    from rlhls.designs.registry import get_design
    from rlhls.host.runfolder import read_metrics
    from rlhls.host.train import train_design

    t0 = time.perf_counter()
    out = Path(job["out"]) / f"{job['name']}-{job['env']}-s{job['seed']}"
    run = train_design(get_design(DESIGNS[job["env"]]), out=out, steps=job["steps"], seed=job["seed"],
                       precision=job["precision"], overrides={"eval_episodes": job["eval_episodes"]},
                       progress=False, resume=(out / "checkpoint.npz").exists())
    ev = read_metrics(run.folder / "eval.csv")[-1]
    return {**job, "eval_return": float(ev["mean_return"]), "eval_std": float(ev["std_return"]),
            "seconds": time.perf_counter() - t0}


def sb3(job: dict) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import TD3
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    from rlhls.designs.registry import get_design

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    hp = get_design(DESIGNS[job["env"]]).hyperparams
    env = gym.make(job["env"])
    n = env.action_space.shape[0]
    model = TD3("MlpPolicy", env, learning_rate=hp["learning_rate"], buffer_size=hp["buffer_size"],
                learning_starts=hp["learning_starts"], batch_size=256, tau=hp["tau"], gamma=hp["gamma"],
                train_freq=1, gradient_steps=1, policy_delay=hp["policy_frequency"],
                target_policy_noise=hp["target_policy_noise"], target_noise_clip=hp["target_noise_clip"],
                action_noise=NormalActionNoise(np.zeros(n), hp["exploration_noise"] * np.ones(n)),
                policy_kwargs={"net_arch": [400, 300]}, seed=job["seed"], verbose=0, device="cpu")
    model.learn(job["steps"])
    eval_env = gym.make(job["env"])
    eval_env.reset(seed=10_000 + job["seed"])
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=job["eval_episodes"], deterministic=True)
    return {**job, "eval_return": float(mean), "eval_std": float(std), "seconds": time.perf_counter() - t0}


def table(res: list, env: str, steps: int, seeds: int, eval_episodes: int) -> list[str]:
    lines = [f"### {env}: {steps:,} steps per run ({steps / RLZOO_STEPS[env]:.3g} of RL Zoo's {RLZOO_STEPS[env]:,}), "
             f"seeds 0..{seeds - 1}, {eval_episodes} deterministic evaluation episodes", "",
             "| run | evaluation return per seed | mean | ratio to SB3 | s per run |", "|---|---|---|---|---|"]
    by = {name: sorted((r for r in res if r["name"] == name and r["env"] == env), key=lambda r: r["seed"])
          for name in dict.fromkeys(r["name"] for r in res if r["env"] == env)}
    ref = by.get("sb3")
    ref_mean = np.mean([r["eval_return"] for r in ref]) if ref else None
    for name, rs in by.items():
        m = float(np.mean([r["eval_return"] for r in rs]))
        if ref_mean is None or name == "sb3":
            ratio = "-" if ref_mean is not None else "(no SB3)"
        elif ref_mean > 0:
            ratio = f"{m / ref_mean:.2f}"
        elif m < 0:
            ratio = f"{ref_mean / m:.2f} (costs: SB3 / ours)"
        else:
            ratio = "> 1 (ours positive, SB3 not)"
        per_seed = ", ".join(f"{r['eval_return']:.1f}" for r in rs)
        lines.append(f"| {name} | {per_seed} | {m:.1f} | {ratio} | "
                     f"{np.mean([r['seconds'] for r in rs]):.0f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="Pendulum-v1", choices=list(DESIGNS))
    ap.add_argument("--steps", type=int, default=None, help="default: RL Zoo's budget")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--out", default="runs/td3-learning")
    ap.add_argument("--only", default="fp32,mixed,sb3", help="comma-separated: fp32, mixed, sb3")
    ap.add_argument("--md", default=None, help="append the table to this Markdown file")
    ap.add_argument("--collect", nargs="+", metavar="DIR", default=None,
                    help="run nothing: the table of the runs these --out folders recorded (their .jsonl lines)")
    a = ap.parse_args()
    steps = a.steps or RLZOO_STEPS[a.env]
    if a.collect:
        res = [json.loads(line) for d in a.collect for f in sorted(Path(d).glob(f"learning-{a.env}-{steps}.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
        res = list({(r["name"], r["seed"]): r for r in reversed(res)}.values())[::-1]  # a run recorded twice: once
        seeds = len({r["seed"] for r in res})
        text = "\n".join(table(res, a.env, steps, seeds, res[0]["eval_episodes"] if res else a.eval_episodes))
        print(text)
        return
    which = set(a.only.split(","))
    base = {"env": a.env, "steps": steps, "eval_episodes": a.eval_episodes, "out": a.out}
    jobs = [(ours, {**base, "name": f"rlhls-{p}", "precision": p, "seed": s})
            for p in ("fp32", "mixed") if p in which for s in range(a.seeds)]
    if "sb3" in which:
        try:
            import stable_baselines3  # noqa: F401

            jobs += [(sb3, {**base, "name": "sb3", "seed": s}) for s in range(a.seeds)]
        except ImportError:
            print("stable-baselines3 not installed: its column is left out")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    done = Path(a.out) / f"learning-{a.env}-{steps}.jsonl"  # one line a finished run (a long benchmark's partial)
    res = []
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futs = [pool.submit(fn, j) for fn, j in jobs]
        for f in as_completed(futs):
            res.append(f.result())
            with open(done, "a") as fh:
                fh.write(json.dumps(res[-1], default=str) + "\n")
    lines = table(res, a.env, steps, a.seeds, a.eval_episodes)
    lines += ["", f"`python {' '.join(sys.argv)}` ({datetime.date.today().isoformat()})", ""]
    text = "\n".join(lines)
    if a.md:
        with open(a.md, "a") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
