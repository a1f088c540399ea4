"""Fixed-point dense layer: rlhls.designs.arith.dense (numpy int64 / BLAS) vs APyTypes; and the
fp32-accumulator float path with its numpy sequential sum vs the compiled one (rlhls.flow.native).

Run:  python benchmarks/bench_arith.py [--float-only]
Prints, per layer size and accumulator kind, the best-of-3 time of both and their ratio, and
checks whether both give the same bits. APyTypes' accumulator context casts products and sums
to the accumulator format, but once a partial sum saturates its result is not ap_fixed's
per-step ``acc += p`` (hls4ml's dense); ours is, as tests/test_arith.py checks against g++.

The three accumulator kinds take the three paths of arith._dense_fixed:
  exact     products exact in a wide accumulator, no overflow possible -> one float64 BLAS matmul
  rounding  products rounded to the accumulator, no overflow possible  -> int64, chunked sums
  overflow  products rounded, the accumulator may saturate            -> int64, one k at a time
"""

from __future__ import annotations

import os
import time

import apytypes as apy
import numpy as np

from rlhls.designs.arith import dense
from rlhls.designs.formats import parse_format

SIZES = [(64, 64, 64), (64, 256, 256), (256, 512, 256)]
IN = parse_format("fixed<16,6,RND,SAT>")
ACCS = {"exact": parse_format("fixed<48,16,RND,SAT>"),
        "rounding": parse_format("fixed<32,16,RND,SAT>"),
        "overflow": parse_format("fixed<24,8,RND,SAT>")}


def best(fn, reps=3):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        t.append(time.perf_counter() - t0)
    return min(t), out


def apy_dense(xm, wm, acc):
    xa = apy.APyFixedArray(xm, int_bits=IN.int_bits, frac_bits=IN.frac_bits)
    wa = apy.APyFixedArray(wm, int_bits=IN.int_bits, frac_bits=IN.frac_bits)
    with apy.APyFixedAccumulatorContext(int_bits=acc.int_bits, frac_bits=acc.frac_bits,
                                        quantization=apy.QuantizationMode.RND,
                                        overflow=apy.OverflowMode.SAT):
        return (xa @ wa).to_numpy()


FLOAT_SIZES = [(128, 64, 64), (32, 400, 300), (256, 400, 300), (256, 64, 2)]


def float_main():
    """dense(in fp16, acc fp32) with arith's numpy sequential sum vs the compiled kernel."""
    from rlhls.designs import arith
    from rlhls.flow import native

    have = native.install()
    kernel = arith.set_seq_sum_kernel(None)
    print(f"\nfp16 x fp16 -> fp32 accumulator (sequential float32 sums), best of 5; compiled kernel: "
          f"{'yes' if have else 'no (numpy only)'}")
    print(f"{'N x K x M':>16} {'numpy ms':>10} {'compiled ms':>12} {'numpy/compiled':>15} same")
    rng = np.random.default_rng(0)
    for (N, K, M) in FLOAT_SIZES:
        x, w = rng.normal(size=(N, K)), rng.normal(size=(K, M))
        arith.set_seq_sum_kernel(None)
        t_np, y = best(lambda: dense(x, w, in_fmt="fp16", acc_fmt="fp32"), 5)
        line = f"{f'{N}x{K}x{M}':>16} {t_np * 1e3:10.2f}"
        if have:
            arith.set_seq_sum_kernel(kernel)
            t_c, yc = best(lambda: dense(x, w, in_fmt="fp16", acc_fmt="fp32"), 5)
            line += f" {t_c * 1e3:12.2f} {t_np / t_c:15.1f} {np.array_equal(y, yc)}"
        print(line)
    arith.set_seq_sum_kernel(kernel)


def main():
    import sys

    if "--float-only" in sys.argv[1:]:
        float_main()
        return
    print(f"numpy {np.__version__}, apytypes {apy.__version__ if hasattr(apy, '__version__') else '?'}, "
          f"{os.cpu_count()} CPUs; input {IN}, times best of 3")
    print(f"{'N x K x M':>16} {'accumulator':>24} {'numpy ms':>10} {'apytypes ms':>12} {'apy/numpy':>10} same")
    rng = np.random.default_rng(0)
    for (N, K, M) in SIZES:
        x = rng.normal(0, 2, (N, K))
        w = rng.normal(0, 2, (K, M))
        xm, wm = IN.quantize_mantissa(x), IN.quantize_mantissa(w)
        for kind, acc in ACCS.items():
            t_np, y = best(lambda: dense(x, w, in_fmt=IN, acc_fmt=acc))
            t_apy, ya = best(lambda: apy_dense(xm, wm, acc))
            same = np.array_equal(y, ya)
            print(f"{f'{N}x{K}x{M}':>16} {f'{kind} {acc}':>24} {t_np * 1e3:10.1f} {t_apy * 1e3:12.1f} "
                  f"{t_apy / t_np:10.2f} {same}")
    print("same=False: APyTypes' accumulator context does not saturate every partial sum the way "
          "ap_fixed's acc += p does; rlhls.designs.arith equals the g++/ap_fixed result "
          "(tests/test_arith.py).")
    float_main()


if __name__ == "__main__":
    main()
