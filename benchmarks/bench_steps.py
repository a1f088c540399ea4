"""A training run's environment steps/s, per AP-DRL MLP benchmark design and heppo-ppo, in each
precision: a fixed number of env steps from seed 0 with the design's demonstration settings
(``Design.demo['set']``; learning starts early so that gradient steps dominate), timed from the
first ``train_update`` to the last (plan solving and trainer construction excluded).

    python benchmarks/bench_steps.py [--only apdrl-dqn-cartpole,...] [--precisions fp32,mixed]
                                     [--steps-scale 1.0] [--set KEY=VALUE ...]

The same script runs on an older checkout (it asks nothing of the code but the trainer interface of
host/runner.py). ``--before PKG`` compares side by side in one run: each (design, precision) runs
in a subprocess once with ``PYTHONPATH=PKG`` (a folder whose ``rlhls`` package is the old code)
and once with this checkout, in turns for ``--rounds`` rounds (best kept), so that load from other
processes hits both alike. One BLAS thread. heppo-ppo runs in its own precision (fp64, HEPPO's
float64 path, untouched by the PS's float32 path) and in fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rlhls.designs.registry import get_design  # noqa: E402
from rlhls.host.algorithms import get_algorithm  # noqa: E402

# design -> (env steps, extra settings): learning from early on, every step pays its gradient steps
DESIGNS = {
    "apdrl-dqn-cartpole": (4000, {"learning_starts": 500, "train_frequency": 1}),
    "apdrl-a2c-invpendulum": (20000, {}),
    "apdrl-ddpg-lunarcont": (1000, {"learning_starts": 200}),
    "apdrl-ddpg-mntncarcont": (1000, {"learning_starts": 200}),
    "heppo-ppo": (4096, {}),
}
PRECISIONS = {"heppo-ppo": ("fp64", "fp32")}  # others: --precisions


def run(name: str, precision: str, steps: int, extra: dict) -> tuple:
    """(env steps done, seconds, steps/s) of one run."""
    design = get_design(name)
    alg = get_algorithm(design.algorithm)
    hp = {**design.demo.get("set", {}), **design.demo.get("probe", {}), **extra, "precision": precision}
    trainer = alg.trainer(design, seed=0, hyperparams=hp)  # mixed: the plan is solved here, untimed
    try:
        spu = trainer.steps_per_update
        updates = max(1, -(-steps // spu))
        t0 = time.perf_counter()
        for u in range(1, updates + 1):
            trainer.train_update(u, updates)
        dt = time.perf_counter() - t0
    finally:
        trainer.close()
    return updates * spu, dt, updates * spu / dt


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=",".join(DESIGNS), help="comma-separated designs")
    p.add_argument("--precisions", default="fp32,mixed", help="precisions of the AP-DRL designs")
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply every design's step count")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a hyperparameter for every run (e.g. ps_math=float64)")
    p.add_argument("--before", metavar="PKG", help="compare with the rlhls package under PKG (see above)")
    p.add_argument("--rounds", type=int, default=2, help="with --before: rounds, best kept")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one run's figures (subprocess)
    a = p.parse_args(argv)
    extra = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        extra[k] = v
    names = [s.strip() for s in a.only.split(",") if s.strip()]
    if a.json:
        name, prec = names[0], a.precisions
        steps, own = DESIGNS[name]
        print(json.dumps(run(name, prec, max(1, int(steps * a.steps_scale)), {**own, **extra})))
        return
    if a.before:
        return compare(a, names)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'design':<24} {'precision':<9} {'env steps':>9} {'seconds':>8} {'steps/s':>9}", flush=True)
    for name in names:
        steps, own = DESIGNS[name]
        for prec in PRECISIONS.get(name, a.precisions.split(",")):
            n, dt, sps = run(name, prec, max(1, int(steps * a.steps_scale)), {**own, **extra})
            print(f"{name:<24} {prec:<9} {n:>9} {dt:>8.2f} {sps:>9.0f}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _sub(pkg, name, prec, a) -> float:
    """steps/s of one run in a subprocess (pkg: the PYTHONPATH of the old code; None: this checkout)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if pkg:
        env.update(PYTHONPATH=pkg, PYTHONSAFEPATH="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--only", name, "--precisions", prec,
           "--steps-scale", str(a.steps_scale), *[f"--set={kv}" for kv in a.set]]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=os.path.dirname(pkg) if pkg else None)
    if out.returncode:
        raise SystemExit(f"{name} {prec} ({pkg or 'this checkout'}): {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])[2]


def compare(a, names):
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'design':<24} {'precision':<9} {'before steps/s':>14} {'after steps/s':>14} {'speed-up':>9}", flush=True)
    for name in names:
        for prec in PRECISIONS.get(name, a.precisions.split(",")):
            best = {"before": 0.0, "after": 0.0}
            for _ in range(a.rounds):
                best["before"] = max(best["before"], _sub(a.before, name, prec, a))
                best["after"] = max(best["after"], _sub(None, name, prec, a))
            print(f"{name:<24} {prec:<9} {best['before']:>14.0f} {best['after']:>14.0f} "
                  f"{best['after'] / best['before']:>8.2f}x", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
