"""GAE unit side by side, one run: the bit-accurate numpy model (k = 1..4) vs a float64
textbook GAE loop on the host CPU, vs the cost model's PL rate (seed 000 §V-D: 64 PEs at
300 MHz). Prints elements/s and ratios.  python benchmarks/bench_gae.py [--steps 1024]"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlhls.designs.kernels.gae import GaeKernel, level_values, textbook_gae


def best(fn, reps=3):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1024)
    a = ap.parse_args()
    k = GaeKernel()
    base = dict(trajectories=a.trajectories, steps=a.steps, pes=64, bits=8)
    p = k.resolve(dict(base, lookahead=2))
    x = k.random_inputs(p, np.random.default_rng(0))
    n = a.trajectories * a.steps
    r = level_values(x["reward_codes"], 8)
    v = level_values(x["value_codes"], 8)
    t_ref = best(lambda: textbook_gae(r, v, x["done"], v, v[-1], 0.99, 0.95))
    print(f"{n} elements; textbook float64 loop: {n / t_ref:,.0f} el/s")
    for kk in (1, 2, 3, 4):
        pk = k.resolve(dict(base, lookahead=kk))
        t = best(lambda: k.model(pk, **x))
        c = k.cost(pk)
        print(f"k={kk}: model {n / t:,.0f} el/s ({t_ref / t:.2f}x textbook); PL model "
              f"{c['throughput_el_per_s']:,.0f} el/s ({c['throughput_el_per_s'] * t:,.0f}x the numpy model), "
              f"{c['cycles']} cycles, {c['resources']}")


if __name__ == "__main__":
    main()
