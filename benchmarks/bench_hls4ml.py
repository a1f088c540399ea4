"""hls4ml C simulation side by side: hls4ml's own build (compile(): two translation units,
-O3 -std=c++23) vs ours (compile_csim: one unit, -O1 -std=c++14), and the full-size AP-DRL
convnet (4x84x84 -> convs 32/8/4, 64/4/2, 64/3/1 -> Dense 512 -> Dense 4) through
conversion + build + csim, with wall and CPU seconds per step.

    python benchmarks/bench_hls4ml.py [--io io_stream|io_parallel|both] [--skip-mlp]

Measured on the project machine (2 cores, shared, load average 7-11, 2025 run), CPU seconds
(wall in brackets; wall is inflated by the load):
    MLP (apdrl-ddpg-lunarcont actor, 8-400-300-2): hls4ml compile() 4.5-4.9 s CPU, ours
    1.6-2.4 s CPU; g++ -O0..-O3 barely differ (the time is parsing ap_types + nnet_utils,
    twice in hls4ml's build).
    Full convnet, fixed<16,6,RND,SAT> / fixed<32,12,RND,SAT>, bit-exact vs the emulator in both:
      io_stream   (-O1): convert 11.0 s CPU (77 s wall), build  4.7 s CPU (34 s wall),
                         csim of 2 inputs  1.8 s CPU -> ~18 s CPU: tests/test_hls4ml.py runs it.
      io_parallel (-O0): convert 10.9 s CPU (32 s wall), build 27.5 s CPU (87 s wall),
                         csim of 2 inputs 14.1 s CPU (38 s wall) -> ~52 s CPU.
      io_parallel at -O1 was still in g++ after 147 s CPU / 2.1 GB RSS (stopped): hls4ml
      unrolls its io_parallel convolutions over pixel partitions, which the optimiser chews on.
    Whole tests/test_hls4ml.py (27 tests, -n 2, load ~8): 163 s wall, 95 s CPU (was ~8 min).
The numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from rlhls.designs.network import Precision
from rlhls.designs.registry import get_design
from rlhls.flow.hls4ml_convert import check_hls4ml, compile_csim, convert_network

PART, CLOCK = "xczu7ev-ffvc1156-2-e", 5.0
CONV_PREC = Precision("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>")


def _cpu() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


class _Clock:
    """Wall and CPU (this process + finished children) seconds of a block."""

    def __enter__(self):
        self.t, self.c = time.perf_counter(), sum(_cpu())
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.t, sum(_cpu()) - self.c


def bench_mlp(tmp: Path) -> None:
    net = get_design("apdrl-ddpg-lunarcont").build_networks()["actor"]
    p = Precision("fp32", "fp32")
    x = np.random.default_rng(1).uniform(-1, 1, (8,) + net.input_shape)
    outs = {}
    print(f"{'build':<28}{'CPU s':>8}{'wall s':>9}")
    for label in ("hls4ml compile() -O3 x2", "compile_csim -O1 x1"):
        r = convert_network(net, p, tmp / label.split()[0], part=PART, clock_ns=CLOCK)
        with _Clock() as k:
            if label.startswith("hls4ml"):
                r["hls_model"].compile()
            else:
                compile_csim(r["hls_model"])
        outs[label] = r["hls_model"].predict(x)
        print(f"{label:<28}{k.cpu:>8.2f}{k.wall:>9.2f}")
    a, b = outs.values()
    print(f"same outputs: {np.array_equal(a, b)}")


def bench_convnet(tmp: Path, io_type: str) -> None:
    net = get_design("apdrl-dqn-breakout").build_networks()["q"]
    x = np.random.default_rng(2).uniform(0.0, 1.0, (2,) + net.input_shape)
    with _Clock() as kc:
        r = convert_network(net, CONV_PREC, tmp / f"cnn-{io_type}", part=PART, clock_ns=CLOCK, io_type=io_type)
    with _Clock() as kb:
        compile_csim(r["hls_model"])
    with _Clock() as kr:
        c = check_hls4ml(net, CONV_PREC, r["hls_model"], x)
    print(f"convnet {io_type}: convert {kc.cpu:.1f} s CPU ({kc.wall:.1f} wall), build {kb.cpu:.1f} s CPU"
          f" ({kb.wall:.1f} wall), csim of {len(x)} inputs {kr.cpu:.1f} s CPU ({kr.wall:.1f} wall);"
          f" exact={c['exact']} max_diff={c['max_diff_lsb']:.0f} LSB")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--io", choices=("io_stream", "io_parallel", "both"), default="io_stream")
    ap.add_argument("--skip-mlp", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not a.skip_mlp:
            bench_mlp(tmp)
        for io in (("io_stream", "io_parallel") if a.io == "both" else (a.io,)):
            bench_convnet(tmp, io)


if __name__ == "__main__":
    main()
