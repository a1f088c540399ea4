"""GAE unit side by side, one run, one thread: a float64 textbook GAE loop, the bit-accurate numpy
model (``GaeKernel.model_numpy``), the compiled model (``flow/native_gae.py``, registered by
``native.install()``), the kernel's HLS C++ compiled by g++ (``CsimBackend``), this machine's
memory-bandwidth limit, and the cost model's PL rate (seed 000 §V-D: 64 PEs at 300 MHz).

    python benchmarks/bench_gae.py [--trajectories 64] [--steps 1024] [--csim-k 2] [--no-csim]

Rates are elements (timestep x trajectory) per second, best of several runs. The physical limit
is the bandwidth of a numpy copy (bytes read + written per second) divided by the bytes the model
must move per element: four float64 inputs (reward, value, bootstrap codes, done) and three
float64 outputs (advantages, returns, issue cycle) = 56 B; measured on a copy far larger than the
caches (DRAM) and on one of the model's own working-set size (caches). Also checks that the
compiled model, the numpy model and the C++ give the same bits.
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from rlhls.designs.kernels import gae as gae_mod  # noqa: E402
from rlhls.designs.kernels.gae import GaeKernel, level_values, textbook_gae  # noqa: E402
from rlhls.flow import native  # noqa: E402
from rlhls.flow.native_gae import same  # noqa: E402

BYTES_PER_ELEMENT = 4 * 8 + 3 * 8


def best(fn, reps=3, min_s=0.0):
    """Best time of ``reps`` runs (more while less than ``min_s`` seconds were spent)."""
    ts, spent = [], 0.0
    while len(ts) < reps or spent < min_s:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        spent += ts[-1]
    return min(ts)


def copy_bandwidth(nbytes: int) -> float:
    """Bytes moved (read + written) per second by np.copyto over ``nbytes``."""
    a = np.random.default_rng(0).random(max(1, nbytes // 8))
    b = np.empty_like(a)
    np.copyto(b, a)
    t = best(lambda: np.copyto(b, a), reps=5 if nbytes > 1 << 27 else 50, min_s=0.2)
    return 2 * a.nbytes / t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--csim-k", type=int, nargs="*", default=[2], help="lookaheads to run csim for")
    ap.add_argument("--no-csim", action="store_true", help="skip the g++ build of the HLS C++")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs); one thread")
    k = GaeKernel()
    native.install()
    have = bool(native._gae)
    prev = gae_mod.set_model_kernel(None)
    base = dict(trajectories=a.trajectories, steps=a.steps, pes=64, bits=8)
    n = a.trajectories * a.steps
    x = k.random_inputs(k.resolve(dict(base, lookahead=2)), np.random.default_rng(0))
    r = level_values(x["reward_codes"], 8)
    v = level_values(x["value_codes"], 8)
    t_ref = best(lambda: textbook_gae(r, v, x["done"], v, v[-1], 0.99, 0.95), reps=5)
    bw_dram = copy_bandwidth(256 << 20)
    bw_cache = copy_bandwidth(n * BYTES_PER_ELEMENT // 2)
    lim_dram, lim_cache = bw_dram / BYTES_PER_ELEMENT, bw_cache / BYTES_PER_ELEMENT
    print(f"{a.steps} x {a.trajectories} = {n} elements, 8-bit codes, fp32 datapath")
    print(f"textbook float64 loop          {n / t_ref / 1e6:9.2f} M el/s   (1x)")
    print(f"copy bandwidth: DRAM {bw_dram / 1e9:.1f} GB/s, caches ({n * BYTES_PER_ELEMENT / 2**20:.1f} MiB) "
          f"{bw_cache / 1e9:.1f} GB/s; {BYTES_PER_ELEMENT} B/element -> limit {lim_dram / 1e6:,.0f} M el/s "
          f"(DRAM), {lim_cache / 1e6:,.0f} M el/s (caches)")
    if not have:
        print("compiled model unavailable (no compiler, or RLHLS_NATIVE=0): numpy model only")
    backend = None
    if not a.no_csim:
        from rlhls.host.backends import CsimBackend
        backend = CsimBackend()
    hdr = (f"{'k':>2} {'numpy model':>12} {'x text':>7} {'compiled':>10} {'x text':>7} {'x numpy':>8} "
           f"{'% DRAM':>7} {'% cache':>7} {'csim C++':>10} {'x text':>7} {'PL model':>10} {'PL/comp':>8} same")
    print("rates in M el/s")
    print(hdr)
    for kk in (1, 2, 3, 4):
        p = k.resolve(dict(base, lookahead=kk))
        t_np = best(lambda: k.model_numpy(p, **x))
        ref = k.model_numpy(p, **x)
        row = f"{kk:>2} {n / t_np / 1e6:12.2f} {t_ref / t_np:7.2f} "
        ok = []
        t_c = None
        if have:
            checked = k.check_arrays(p, x)
            got = native._gae(k, p, checked)
            ok.append(got is not None and all(same(ref[o], got[o]) for o in ref))
            t_c = best(lambda: native._gae(k, p, k.check_arrays(p, x)), reps=20, min_s=0.3)
            row += (f"{n / t_c / 1e6:10.1f} {t_ref / t_c:7.1f} {t_np / t_c:8.0f} "
                    f"{100 * n / t_c / lim_dram:6.0f}% {100 * n / t_c / lim_cache:6.0f}% ")
        else:
            row += f"{'-':>10} {'-':>7} {'-':>8} {'-':>7} {'-':>7} "
        if backend is not None and kk in a.csim_k:
            t0 = time.perf_counter()
            cs = backend.call("gae", p, **x)
            t_build = time.perf_counter() - t0
            ok.append(all(same(ref[o], cs[o]) for o in ref))
            t_cs = best(lambda: backend.call("gae", p, **x), reps=5)
            row += f"{n / t_cs / 1e6:10.2f} {t_ref / t_cs:7.2f} "
            row += f"{k.cost(p)['throughput_el_per_s'] / 1e6:10,.0f} "
            tag = f"(first call {t_build:.1f} s incl. build)"
        else:
            row += f"{'-':>10} {'-':>7} {k.cost(p)['throughput_el_per_s'] / 1e6:10,.0f} "
            tag = ""
        pl = k.cost(p)["throughput_el_per_s"]
        row += f"{pl * t_c / n:8.0f} " if t_c else f"{'-':>8} "
        row += ("yes" if all(ok) else "NO") if ok else "-"
        print(row, tag)
    gae_mod.set_model_kernel(prev)
    print("x text: times the textbook loop; x numpy: compiled over the numpy model; % DRAM / % cache: "
          "compiled rate over the bandwidth limit; PL/comp: the cost model's PL rate over the compiled model's; "
          "same: compiled == numpy model (== csim C++ where run) bit for bit")


if __name__ == "__main__":
    main()
