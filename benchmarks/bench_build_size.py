"""Time, peak memory and bytes written of the builds and runs whose AIE data grew with the batch, and
`rlhls experiment`'s engine choice, measured side by side in one run: this checkout, and with
``--base REF`` the same commands on the code of git revision REF (exported to a temporary folder and
imported from there), command by command in turns so that load from other processes hits both.

    python benchmarks/bench_build_size.py [--base REF] [--rows run-mspacman,build-mspacman,run-breakout,
                                           build-lunar,experiment] [--json FILE]

Each command runs as a child process (``python -m rlhls ...``); its figures come from ``os.wait4``:
wall time, peak RSS (``ru_maxrss``: the largest of the command and the compilers and harnesses it
waited for) and the bytes it wrote (``ru_oublock`` x 512: every write that reached the file system,
temporary and staged files included), and the size of the folder it leaves. The rows:

  run-mspacman     rlhls run apdrl-ppo-mspacman (the ILP plan puts 15 conv / fc products on the AIE)
  build-mspacman   rlhls build apdrl-ppo-mspacman --plan P --csim (the plan of run-mspacman: the build alone)
  run-breakout     rlhls run apdrl-dqn-breakout
  build-lunar      rlhls build apdrl-ddpg-lunarcont --plan P --csim with its ILP plan (14 AIE nodes): cold (an
                   empty compile cache) and warm (best of 3); and warm without a plan (every node on the PL)
  experiment       rlhls experiment apdrl-table3 (DQN-CartPole, 2 precisions x 2 seeds of 400 steps: 4 short
                   runs) by default, with --jobs 1 and with --jobs 2

The run rows use the default compile cache (warm from earlier builds of the same kernels); build-lunar a
fresh one per code version.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the package's folders as setuptools' package-dir lays them out under rlhls/ (pyproject.toml)
SUBPACKAGES = ("core", "designs", "partition", "flow", "host", "vitis")
ROWS = ("run-mspacman", "build-mspacman", "run-breakout", "build-lunar", "experiment")


def export(ref: str, dest: Path) -> Path:
    """The code of git revision `ref` as an importable tree: dest/rlhls with its subpackages."""
    src = dest / "src"
    src.mkdir(parents=True)
    arc = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref], check=True, capture_output=True)
    tar = dest / "src.tar"
    tar.write_bytes(arc.stdout)
    with tarfile.open(tar) as t:
        t.extractall(src, filter="data")
    site = dest / "site"
    shutil.copytree(src / "rlhls", site / "rlhls")
    for sub in SUBPACKAGES:
        os.symlink(src / sub, site / "rlhls" / sub)
    return site


def measure(argv: list, env: dict, cwd: Path, out: Path | None = None) -> dict:
    """One command in a child process: wall s, peak RSS MB, MB written, MB of `out` it leaves. It runs in
    `cwd`, outside the checkout, whose rlhls/ folder would shadow a --base tree."""
    log = cwd / "stderr.txt"
    with open(log, "w") as fh:  # a file, not a pipe: a chatty command never blocks on it
        t = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "rlhls", *argv], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=fh)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    err = log.read_text(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out is not None and out.exists() else 0
    return {"rc": code, "s": round(wall, 2), "rss_mb": round(ru.ru_maxrss / 1024, 1),
            "written_mb": round(ru.ru_oublock * 512 / 1e6, 1), "folder_mb": round(size / 1e6, 1),
            "err": err.strip().splitlines()[-1:] if code not in (0, 1) else []}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", metavar="REF", help="also run the commands on the code of git revision REF")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"unknown row {bad[0]!r} (known: {', '.join(ROWS)})")
    tmp = Path(tempfile.mkdtemp(prefix="bench-build-size-"))
    results: list[dict] = []
    try:
        versions = {"this": dict(os.environ)}
        if args.base:
            site = export(args.base, tmp / "base")
            versions = {f"base {args.base}": {**os.environ, "PYTHONPATH": str(site)}, **versions}
        for env in versions.values():
            env.setdefault("OPENBLAS_NUM_THREADS", "1")
        print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f} at the start", flush=True)

        def row(name, what, argv, out=None, env_extra=None):
            for ver, env in versions.items():
                if out is not None and out.exists():
                    shutil.rmtree(out)
                r = measure(argv, {**env, **(env_extra or {})}, tmp, out)
                r.update(row=name, what=what, version=ver)
                results.append(r)
                print(f"{name:<15} {what:<34} {ver:<16} {r['s']:8.1f} s {r['rss_mb']:9.1f} MB RSS "
                      f"{r['written_mb']:9.1f} MB written {r['folder_mb']:9.1f} MB left (exit {r['rc']})"
                      + (f"  {r['err'][0]}" if r["err"] else ""), flush=True)

        if "run-mspacman" in rows or "build-mspacman" in rows:
            out = tmp / "mspacman"
            row("run-mspacman", "rlhls run", ["run", "apdrl-ppo-mspacman", "--out", str(out), "--quiet"], out)
            if "build-mspacman" in rows:
                plan = tmp / "mspacman-plan.json"
                if not plan.exists():
                    shutil.copyfile(out / "plan" / "plan.json", plan)
                b = tmp / "mspacman-build"
                row("build-mspacman", "build --csim (its plan)", ["build", "apdrl-ppo-mspacman", "--plan", str(plan),
                                                                   "--csim", "--out", str(b), "--force", "--quiet"], b)
        if "run-breakout" in rows:
            out = tmp / "breakout"
            row("run-breakout", "rlhls run", ["run", "apdrl-dqn-breakout", "--out", str(out), "--quiet"], out)
        if "build-lunar" in rows:
            pdir = tmp / "lunar-plan"
            subprocess.run([sys.executable, "-c", (
                "import sys; from rlhls.designs.registry import get_design; from rlhls.designs.graph import "
                "build_graph; from rlhls.partition.design_plan import partition_design; from rlhls.partition.plan "
                "import write_plan; d = get_design('apdrl-ddpg-lunarcont'); g = build_graph(d); "
                "write_plan(partition_design(d, graph=g), sys.argv[1], edges=g.all_edges())"), str(pdir)], check=True,
                cwd=tmp)
            b = tmp / "lunar-build"
            cmd = ["build", "apdrl-ddpg-lunarcont", "--plan", str(pdir / "plan.json"), "--csim", "--out", str(b),
                   "--force", "--quiet"]
            caches = {ver: tmp / f"cache-{i}" for i, ver in enumerate(versions)}
            for ver, env in versions.items():
                env["RLHLS_CACHE_DIR"] = str(caches[ver])
            row("build-lunar", "build --csim, plan, cold cache", cmd, b)
            for _ in range(3):
                row("build-lunar", "build --csim, plan, warm", cmd, b)
            nop = [a for a in cmd if a not in ("--plan", str(pdir / "plan.json"))]
            row("build-lunar", "build --csim, no plan, warm", nop, b)
            row("build-lunar", "build --csim, no plan, warm", nop, b)
            for env in versions.values():
                env.pop("RLHLS_CACHE_DIR")
        if "experiment" in rows:
            e = tmp / "exp"
            base = ["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "400", "--seeds", "2",
                    "--set", "learning_starts=100", "--set", "steps_per_update=200", "--out", str(e), "--quiet"]
            for jobs in ([], ["--jobs", "1"], ["--jobs", "2"]):
                row("experiment", "4 short runs, " + (" ".join(jobs) or "default"), base + jobs, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    # the summary: per row and version, the best time
    print("\nbest of each:")
    seen: dict = {}
    for r in results:
        k = (r["row"], r["what"], r["version"])
        if k not in seen or r["s"] < seen[k]["s"]:
            seen[k] = r
    for (name, what, ver), r in seen.items():
        print(f"  {name:<15} {what:<34} {ver:<16} {r['s']:8.1f} s {r['rss_mb']:9.1f} MB RSS "
              f"{r['written_mb']:9.1f} MB written {r['folder_mb']:9.1f} MB left")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
