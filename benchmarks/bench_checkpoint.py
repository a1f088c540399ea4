"""Bytes written and seconds spent per update on the run folder (checkpoint, replay files, CSVs),
DQN-Breakout and DDPG-LunarLander, fp32, seed 0:

    python benchmarks/bench_checkpoint.py [--steps 5000] [--designs apdrl-dqn-breakout,apdrl-ddpg-lunarcont]

Bytes: the process's ``wchar`` (/proc/self/io, bytes passed to write()) between one update's
start and the next, the update's own writes included (it writes nothing); seconds: the wall time
between those points less the update's ``wall_s`` (what the runner spends after the update:
checkpoint and CSVs; ``reward.png`` only after the last update, excluded here). Learning starts
late, so the figures are those of the run folder, not of gradient steps. The same script runs on
an older checkout (it uses only ``train_design`` and its ``on_update`` hook).

Before (main 26f4cb4: the whole checkpoint with the replay buffer, metrics and episodes rebuilt in
memory and rewritten, both CSVs rewritten, after every update), measured with this script on the
2-core build machine (5000 steps; a Breakout transition is a 28 KB frame stack):

    design                 updates  MB/update (mean, last)  ms/update (mean, last)  checkpoint MB  folder MB
    apdrl-dqn-breakout           5        99.9      144         1358.1   1758.3            173        173
    apdrl-ddpg-lunarcont         5        4.14     4.21           18.0     15.1           4.26       4.31
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rlhls.designs.registry import get_design  # noqa: E402
from rlhls.host.train import train_design  # noqa: E402


def wchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(name: str, steps: int) -> dict:
    marks = []  # (update, wchar, perf_counter) at the start of each update
    out = Path(tempfile.mkdtemp(prefix="bench_ckpt_")) / "run"
    try:
        run = train_design(get_design(name), out=out, steps=steps, seed=0, precision="fp32", progress=False,
                           overrides={"learning_starts": 10 ** 9} if "dqn" in name or "ddpg" in name else {},
                           on_update=lambda u: marks.append((u, wchar(), time.perf_counter())))
        marks.append((None, wchar(), time.perf_counter()))
        rows = run.metrics if hasattr(run, "metrics") else run["metrics"]
        # the last update also draws reward.png: left out
        per_b = [b1 - b0 for (_, b0, _), (_, b1, _) in zip(marks, marks[1:])][:-1]
        per_s = [t1 - t0 - float(r["wall_s"]) for (_, _, t0), (_, _, t1), r in zip(marks, marks[1:], rows)][:-1]
        ck = out / "checkpoint.npz"
        return {"design": name, "updates": len(rows), "mb_mean": sum(per_b) / len(per_b) / 1e6,
                "mb_last": per_b[-1] / 1e6, "ms_mean": 1e3 * sum(per_s) / len(per_s), "ms_last": 1e3 * per_s[-1],
                "ckpt_mb": ck.stat().st_size / 1e6, "folder_mb": folder_bytes(out) / 1e6}
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5000, help="5 updates of 1000 steps")
    p.add_argument("--designs", default="apdrl-dqn-breakout,apdrl-ddpg-lunarcont")
    a = p.parse_args(argv)
    print(f"{'design':22s} {'updates':>7s}  MB/update (mean, last)  ms/update (mean, last)  checkpoint MB  folder MB")
    for name in a.designs.split(","):
        r = measure(name.strip(), a.steps)
        print(f"{r['design']:22s} {r['updates']:7d}  {r['mb_mean']:10.3g} {r['mb_last']:8.3g}  "
              f"{r['ms_mean']:13.1f} {r['ms_last']:8.1f}  {r['ckpt_mb']:13.3g}  {r['folder_mb']:9.3g}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
