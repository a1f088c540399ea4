"""Cost of AP-DRL mixed precision on the host: one DQN gradient step (apdrl-dqn-cartpole, batch 128)
with every node on the PS (fp32) vs the ILP plan (all PL: FP16 bit-exact emulation + FP32 master
+ loss scaling) vs a plan with the matrix multiplies on the AIE (BF16), and the host loop's env
steps/s in each, measured side by side in one run.

    python benchmarks/bench_mixed.py [--repeats 20] [--env-steps 3000]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rlhls.designs.graph import build_graph  # noqa: E402
from rlhls.designs.registry import get_design  # noqa: E402
from rlhls.host.dqn import DQN, PHASES  # noqa: E402
from rlhls.host.mixed import default_plan  # noqa: E402


def _aie_plan(design):
    asg = {n.name: ("AIE" if n.mm else "PL") for n in build_graph(design).nodes}
    return asg


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--env-steps", type=int, default=3000)
    a = p.parse_args(argv)
    d = get_design("apdrl-dqn-cartpole")
    configs = [("fp32 (all PS)", "fp32", None), ("mixed, ILP plan", "mixed", default_plan(d)),
               ("mixed, MM on AIE", "mixed", _aie_plan(d))]
    rng = np.random.default_rng(0)
    s, s2 = rng.standard_normal((128, 4)) * 0.5, rng.standard_normal((128, 4)) * 0.5
    act, r, dn = rng.integers(0, 2, 128), np.ones(128), np.zeros(128)
    base = None
    print(f"{'configuration':<20} {'units':<14} {'ms / grad step':>15} {'ratio':>7} {'env steps/s':>12}")
    for name, prec, asg in configs:
        t = DQN(d, seed=0, hyperparams={"precision": prec, "learning_starts": 500, "steps_per_update": a.env_steps},
                assignment=asg)
        times = {k: 0.0 for k in PHASES}
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(a.repeats):
                t.train_step(s, s2, act, r, dn, times)
            best = min(best, (time.perf_counter() - t0) / a.repeats)
        t0 = time.perf_counter()
        t.train_update(1, 1)
        sps = a.env_steps / (time.perf_counter() - t0)
        t.close()
        base = base or best
        units = ",".join(sorted(set(t.mp.units().values())))
        print(f"{name:<20} {units:<14} {best * 1e3:>15.2f} {best / base:>7.1f} {sps:>12.0f}")


if __name__ == "__main__":
    main()
