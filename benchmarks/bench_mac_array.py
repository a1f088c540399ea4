"""mac_array (seed 004's compute element) side by side, one run: per stage of the a2c-traffic trunk
and per MAC count, the FSM's iterations and cycles on the PL (the cycle model, 100 MHz) beside the
time the host takes to emulate the same stage bit-accurately (the numpy model; with --csim also
the g++ build of the HLS C++ through the csim backend). The seed's remark on parallelism: more
MACs, fewer iterations.

    python benchmarks/bench_mac_array.py [--macs 1,2,4,8,16] [--csim] [--reps 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels.mac_array import STAGES
from rlhls.designs.registry import get_design


def best(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--macs", default="1,2,4,8,16", help="MAC counts to sweep")
    ap.add_argument("--csim", action="store_true", help="also time the csim backend (one g++ build per MAC count)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    k = get_kernel("mac_array")
    d = get_design("a2c-traffic")
    g = build_graph(d)
    base = k.node_params(g.node("trunk.fc1.fwd"), KernelContext(d, g))
    csim = None
    if a.csim:
        from rlhls.host.backends import CsimBackend
        csim = CsimBackend()
    ops = k.random_operands(k.resolve(base), np.random.default_rng(0))
    print(f"a2c-traffic trunk, batch {base['batch']}, {base['storage']}, PL {base['clock_mhz']:g} MHz")
    head = f"{'macs':>4} {'stage':<15} {'iters':>6} {'acc':>5} {'xfers':>5} {'cycles':>8} {'PL ms':>7} {'emu ms':>7}"
    print(head + (f" {'csim ms':>8}" if csim else "") + f" {'emu/PL':>7}")
    for macs in (int(m) for m in a.macs.split(",")):
        p = k.resolve({**base, "macs": macs})
        cost = {s["name"]: s for s in k.cost(p)["stages"]}
        if csim:
            csim.library("mac_array", p)  # build outside the timing
        tot = {"pl": 0.0, "emu": 0.0, "csim": 0.0}
        for stage in STAGES:
            one = {stage: ops[stage]}
            t_emu = best(lambda: k.run(p, one), a.reps)
            c = cost[stage]
            pl_ms = c["latency_us"] / 1e3
            tot["pl"] += pl_ms
            tot["emu"] += t_emu * 1e3
            line = (f"{macs:>4} {stage:<15} {c['iterations']:>6} {c['accumulations']:>5} {c['transfers']:>5} "
                    f"{c['cycles']:>8} {pl_ms:>7.3f} {t_emu * 1e3:>7.2f}")
            if csim:
                t_cs = best(lambda: k.run(p, one, call=csim.call), a.reps)
                tot["csim"] += t_cs * 1e3
                line += f" {t_cs * 1e3:>8.2f}"
            print(line + f" {t_emu * 1e3 / pl_ms:>7.2f}")
        c = k.cost(p)
        line = f"{macs:>4} {'all five':<15} {c['iterations']:>6} {'':>5} {'':>5} {c['cycles']:>8} {tot['pl']:>7.3f} " \
               f"{tot['emu']:>7.2f}"
        print(line + (f" {tot['csim']:>8.2f}" if csim else "") + f" {tot['emu'] / tot['pl']:>7.2f}   "
              f"DSP {c['resources']['dsp']:.0f}, BRAM36 {c['resources']['bram36']:.0f}")
    wg = next(s for s in k.cost(k.resolve({**base, "macs": 4}))["stages"] if s["name"] == "bwd_wgrad")
    print(f"seed check: fc1 weight gradient with 4 MACs = {wg['iterations']} iterations "
          f"(seed: 48 x 484 / 4 = {48 * 484 // 4}), {wg['accumulations']} accumulations (the batch)")


if __name__ == "__main__":
    main()
