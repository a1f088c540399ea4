"""Wall time of `rlhls build` per design (no csim; target < 15 s each), and csim cold vs cached.
The first build of a design per process includes its networks' orthogonal init (cached per
(design, seed) afterwards); the table lists each registered design once, in a fresh order.

    python benchmarks/bench_build.py [DESIGN ...] [--csim DESIGN]
Builds go to a temporary folder; the csim cache is a fresh temporary folder (cold), then reused (cached).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from rlhls.designs.registry import design_names
from rlhls.flow.build import build_design


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("designs", nargs="*")
    ap.add_argument("--csim", metavar="DESIGN", default="apdrl-dqn-cartpole")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'design':<26} {'build s':>8} {'components':>10}")
        for name in args.designs or design_names():
            t = time.perf_counter()
            try:
                with contextlib.redirect_stdout(sys.stderr):  # hls4ml's progress lines
                    r = build_design(name, Path(tmp) / name, force=True)
                n = len(r.components)
            except Exception as e:  # report and go on: one design must not hide the others
                n = f"error: {str(e)[:60]}"
            print(f"{name:<26} {time.perf_counter() - t:8.2f} {n!s:>10}", flush=True)
        os.environ["RLHLS_CACHE_DIR"] = str(Path(tmp) / "cache")
        times = []
        for label in ("cold", "cached"):
            t = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):
                r = build_design(args.csim, Path(tmp) / "csim", csim=True, force=True)
            times.append(time.perf_counter() - t)
            ok = sum(1 for c in r.components if c.csim and c.csim["passed"])
            print(f"csim {args.csim} {label}: {times[-1]:.2f} s, {ok}/{len(r.components)} passed", flush=True)
        print(f"csim cold / cached: {times[0] / times[1]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
