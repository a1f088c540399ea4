"""csim side by side: cold vs cached build+run per kernel, and per-call cost of the csim
backend (ctypes into the g++ library) vs the emu backend (numpy model) on a dense layer.

    python benchmarks/bench_csim.py [--n 64 --k 256 --m 256] [--calls 20]

Cold builds use a fresh temporary cache; the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from rlhls.designs.kernels import get_kernel
from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel
from rlhls.host.backends import CsimBackend, EmuBackend

KERNELS = [("dense_forward", {}), ("dense_backward", {}), ("weight_gradient", {}),
           ("weight_update", {"optimizer": "adam"})]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"{'kernel':<18}{'cold s':>9}{'cached s':>10}{'ratio':>8}  result")
        for name, params in KERNELS:
            src = render_kernel(name, params)
            cold = run_csim(src, tmp / f"{name}-a", tmp / "cache")
            warm = run_csim(src, tmp / f"{name}-b", tmp / "cache")
            assert warm.cached
            print(f"{name:<18}{cold.seconds:9.2f}{warm.seconds:10.3f}{cold.seconds / warm.seconds:8.0f}x  "
                  f"{'PASS' if cold.passed and warm.passed else 'FAIL'}")

        print(f"\nper call, dense layer {a.n}x{a.k}x{a.m} (best of {a.calls}):")
        print(f"{'format':<36}{'emu ms':>9}{'csim ms':>9}{'emu/csim':>10}  same bits")
        csim, emu = CsimBackend(cache_dir=tmp / "lib"), EmuBackend()
        rng = np.random.default_rng(0)
        for fmt in [("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>"), ("fixed<16,6,RND,SAT>", "fixed<24,8,RND,SAT>"),
                    ("fp32", "fp32"), ("bf16", "fp32")]:
            k = get_kernel("dense_forward")
            p = k.resolve({"n": a.n, "k": a.k, "m": a.m, "storage": fmt[0], "acc": fmt[1]})
            x = {"x": rng.standard_normal((a.n, a.k)), "w": rng.standard_normal((a.k, a.m)) * 0.1,
                 "b": rng.standard_normal(a.m) * 0.1}
            ye, yc = emu.call("dense_forward", p, **x)["y"], csim.call("dense_forward", p, **x)["y"]
            te, tc = _best(lambda: emu.call("dense_forward", p, **x), a.calls), _best(
                lambda: csim.call("dense_forward", p, **x), a.calls)
            print(f"{fmt[0] + ' / ' + fmt[1]:<36}{te * 1e3:9.2f}{tc * 1e3:9.2f}{te / tc:10.2f}  "
                  f"{np.array_equal(ye.view(np.uint64), yc.view(np.uint64))}")


def _best(fn, n):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    main()
