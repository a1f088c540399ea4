"""Seed 004 side by side, one run:

1. SUMO through TraCI vs libsumo: environment steps (signal decisions) per second and simulated
   seconds per second of rlhls/SumoIntersection-v0, the fixed-time and the random policy on the
   same hour of traffic (the two must give the same episode bit for bit: checked).
2. Resuming a long episode at decision k: re-seed and replay k actions (what ``--resume`` does,
   host/envs/vector.py) vs SUMO's saveState / loadState (``save_state`` / ``load_state`` of the
   env); whether each continues the episode exactly (the next steps' observations and rewards).
3. The compute element per stage of the a2c-traffic trunk at the training batch: modeled time on
   the PL (the FSM's cycle model, 4 MACs at 100 MHz), the PS roofline of the same MACs, and the
   host's time to emulate the stage (PlanKernels' layer operation through ``emu`` -- the numpy
   model -- and ``csim`` -- the compiled HLS C++ with its FSM).

    python benchmarks/bench_traffic.py [--demand balanced] [--seed 1000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlhls.designs import traffic as plan
from rlhls.designs.arith import im2col
from rlhls.designs.kernels import get_kernel
from rlhls.designs.registry import get_design
from rlhls.host.backends import CsimBackend, PlanKernels, get_backend
from rlhls.host.envs.sumo_intersection import SumoIntersection
from rlhls.host.experiments.traffic import fixed_time_policy, random_policy, stage_times


def episode(backend, policy, demand, seed):
    env = SumoIntersection(demand=demand, sumo=backend)
    act = policy(seed)
    t0 = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    trace, done, n = [obs], False, 0
    while not done:
        obs, r, te, tr, info = env.step(act(obs))
        trace += [obs, r]
        n, done = n + 1, te or tr
    dt = time.perf_counter() - t0
    env.close()
    return dt, n, info["sim_time"], trace


def same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def bench_sumo(demand, seed):
    print(f"1. SUMO: one hour of '{demand}' traffic (seed {seed}), the whole episode incl. reset")
    print(f"   {'policy':<11} {'backend':<8} {'steps':>5} {'s':>6} {'steps/s':>8} {'sim s/s':>8}   libsumo / TraCI")
    for name, pol in (("fixed-time", fixed_time_policy), ("random", random_policy)):
        res = {b: episode(b, pol, demand, seed) for b in ("traci", "libsumo")}
        for b, (dt, n, t, _) in res.items():
            ratio = f"   {res['traci'][0] / dt:.2f}x" if b == "libsumo" else ""
            print(f"   {name:<11} {b:<8} {n:>5} {dt:>6.2f} {n / dt:>8.1f} {t / dt:>8.0f}{ratio}")
        print(f"   {'':<11} the same episode with both: {same(res['traci'][3], res['libsumo'][3])}")


def bench_resume(demand, seed, points=(30, 60, 100), tail=5):
    print(f"\n2. Resuming at decision k of an hour of '{demand}' (random actions), then {tail} more steps")
    rng = np.random.default_rng(0)
    acts = [int(a) for a in rng.integers(len(plan.ACTIONS), size=max(points) + tail)]
    live = SumoIntersection(demand=demand, sumo="libsumo")
    live.reset(seed=seed)
    snaps, ref = {}, {}
    for k, a in enumerate(acts, 1):
        obs, r, *_ = live.step(a)
        if k in points:
            snaps[k] = live.save_state()
        for p in points:
            if p < k <= p + tail:
                ref.setdefault(p, []).extend([obs, r])
    live.close()
    print(f"   {'k':>4} {'replay s':>9} {'exact':>6} {'loadState s':>12} {'exact':>6} {'state KB':>9}")
    env = SumoIntersection(demand=demand, sumo="libsumo")
    for k in points:
        t0 = time.perf_counter()
        env.reset(seed=seed)
        for a in acts[:k]:
            env.step(a)
        t_replay = time.perf_counter() - t0
        cont = [x for a in acts[k:k + tail] for x in env.step(a)[:2]]
        ok_replay = same(cont, ref[k])
        t0 = time.perf_counter()
        env.load_state(snaps[k])
        t_load = time.perf_counter() - t0
        cont = [x for a in acts[k:k + tail] for x in env.step(a)[:2]]
        print(f"   {k:>4} {t_replay:>9.3f} {str(ok_replay):>6} {t_load:>12.3f} {str(same(cont, ref[k])):>6} "
              f"{len(snaps[k]['sumo']) / 1e3:>9.1f}")
    env.close()


def best(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench_stages(reps):
    d = get_design("a2c-traffic")
    batch = d.batch_size
    K = get_kernel("mac_array")
    emu, csim = get_backend("emu"), CsimBackend()
    pk = PlanKernels(d, batch, emu)
    p = K.resolve(pk._kernel("trunk.fc1.fwd", "PL", "forward")[1])
    g = K.geometry(p)
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32).astype(np.float64)  # noqa: E731
    cols = im2col(f(batch, *p["in_shape"]), *p["kernel"], p["stride"])
    ops = {"fwd_conv": ("forward", dict(x=cols, w=f(g["T"], g["F"]), b=f(g["F"]))),
           "fwd_fc": ("forward", dict(x=f(batch, g["K"]), w=f(g["K"], g["M"]), b=f(g["M"]))),
           "bwd_delta": ("input_grad", dict(dy=f(batch, g["M"]), w=f(g["K"], g["M"]))),
           "bwd_wgrad": ("weight_grad", dict(x=f(batch, g["K"]), dy=f(batch, g["M"]))),
           "bwd_conv_wgrad": ("weight_grad", dict(x=cols, dy=f(batch * g["P"], g["F"])))}
    K.run_op("forward", csim, p, **ops["fwd_fc"][1])  # the g++ build outside the timing
    print(f"\n3. The compute element per stage (a2c-traffic trunk, batch {batch}, {p['macs']} MACs at "
          f"{p['clock_mhz']:g} MHz) vs the PS model and the host's emulation")
    print(f"   {'stage':<15} {'iters':>6} {'MACs':>8} {'PL us':>8} {'PS us':>7} {'PS/PL':>6} {'emu us':>8} "
          f"{'csim us':>8} {'emu/PL':>7}")
    for t in stage_times(d, batch):
        op, arrays = ops[t["stage"]]
        t_emu = best(lambda: K.run_op(op, emu, p, **arrays), reps) * 1e6  # noqa: B023
        t_csim = best(lambda: K.run_op(op, csim, p, **arrays), reps) * 1e6  # noqa: B023
        print(f"   {t['stage']:<15} {t['iterations']:>6} {t['macs']:>8,} {t['pl_us']:>8.1f} {t['ps_us']:>7.1f} "
              f"{t['ps_us'] / t['pl_us']:>6.2f} {t_emu:>8.0f} {t_csim:>8.0f} {t_emu / t['pl_us']:>7.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--demand", default="balanced")
    ap.add_argument("--seed", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    bench_sumo(a.demand, a.seed)
    bench_resume(a.demand, a.seed)
    bench_stages(a.reps)


if __name__ == "__main__":
    main()
