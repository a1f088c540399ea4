"""Bytes written and seconds spent per update on the run folder (checkpoint, replay files, CSVs),
DQN-Breakout and DDPG-LunarLander, fp32, seed 0:

    python benchmarks/bench_checkpoint.py [--steps 5000] [--designs apdrl-dqn-breakout,apdrl-ddpg-lunarcont]

Bytes: the process's ``wchar`` (/proc/self/io, bytes passed to write()) between one update's
start and the next, the update's own writes included (it writes nothing); seconds: the wall time
between those points less the update's ``wall_s`` (what the runner spends after the update:
checkpoint and CSVs; ``reward.png`` only after the last update, excluded here). Learning starts
late, so the figures are those of the run folder, not of gradient steps. The same script runs on
an older checkout (it uses only ``train_design`` and its ``on_update`` hook): ``--before PKG``
runs each design in a subprocess with ``PYTHONPATH=PKG`` (a folder whose ``rlhls`` package is the
old code) and then with this checkout, side by side in one run, as bench_steps.py does.

Before = main 26f4cb4 (the whole checkpoint with the replay buffer, metrics and episodes rebuilt
in memory and rewritten, both CSVs rewritten, after every update); after = this checkout (the
update's transitions and CSV lines appended, the small checkpoint streamed to disk). Side by side
in one run (``--before`` with 26f4cb4's package), 5000 steps, on the 2-core build machine shared
with other jobs (load average 9-11, so the times are noisy; the bytes are not):

    design                 code   updates  MB/update (mean, last)  ms/update (mean, last)  checkpoint MB  folder MB
    apdrl-dqn-breakout     before       5        99.9      144         3049.2   5324.6            173        173
    apdrl-dqn-breakout     after        5        56.3     56.4         1821.9   1977.5           27.1        173
    apdrl-ddpg-lunarcont   before       5        4.14     4.21          151.6    101.9           4.26       4.31
    apdrl-ddpg-lunarcont   after        5        4.05     4.05           85.7     78.9              4       4.29

Breakout's 1000 steps per update add 28 MB of frame stacks; the checkpoint left is the Q and
target networks with Adam's moments (27 MB, float32). Before, the bytes per update grew with the
buffer (by 28 MB per update, up to 5.6 GB at the 200 000-transition cap); after, they stay at the
checkpoint plus the update's transitions. DDPG's checkpoint is its four networks and two Adams
(4 MB); its transitions are 48 bytes each, so the buffer was a small part of it either way. An
earlier run of "before" alone at load ~2 gave Breakout 1358 / 1758 ms and DDPG 18 / 15 ms per
update.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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


def _sub(pkg, name: str, steps: int) -> dict:
    """measure() in a subprocess (pkg: the PYTHONPATH of the old code; None: this checkout)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if pkg:
        env.update(PYTHONPATH=pkg, PYTHONSAFEPATH="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--json", "--designs", name, "--steps",
                          str(steps)], env=env, capture_output=True, text=True,
                         cwd=os.path.dirname(pkg) if pkg else None)
    if out.returncode:
        raise SystemExit(f"{name} ({pkg or 'this checkout'}): {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(tag: str, r: dict) -> str:
    return (f"{r['design']:22s} {tag:6s} {r['updates']:7d}  {r['mb_mean']:10.3g} {r['mb_last']:8.3g}  "
            f"{r['ms_mean']:13.1f} {r['ms_last']:8.1f}  {r['ckpt_mb']:13.3g}  {r['folder_mb']:9.3g}")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5000, help="5 updates of 1000 steps")
    p.add_argument("--designs", default="apdrl-dqn-breakout,apdrl-ddpg-lunarcont")
    p.add_argument("--before", metavar="PKG", help="also run the rlhls package under PKG, in turns (see above)")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one design's figures (subprocess)
    a = p.parse_args(argv)
    names = [n.strip() for n in a.designs.split(",") if n.strip()]
    if a.json:
        print(json.dumps(measure(names[0], a.steps)))
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'design':22s} {'code':6s} {'updates':>7s}  MB/update (mean, last)  ms/update (mean, last)  "
          "checkpoint MB  folder MB")
    for name in names:
        if a.before:
            print(_line("before", _sub(a.before, name, a.steps)), flush=True)
        print(_line("after", _sub(None, name, a.steps) if a.before else measure(name, a.steps)), flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
