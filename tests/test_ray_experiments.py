"""The experiment engine (host/engine.py) on a real local Ray instance of 2 CPUs: failures stay in
their run, a worker killed mid-run is retried from its checkpoint (or recorded as failed and
resumed with --resume), a killed driver leaves run folders that --resume completes, and every way
ends in the tables of an uninterrupted experiment."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.host.engine import Run, map_runs, run_all
from rlhls.host.checkpoint import checkpoint_steps
from rlhls.host.runfolder import CHECKPOINT, finished_steps
from procs_util import alive, descendants, freeze, parent, thaw

STEPS = 2048  # 16 updates of 2 x 64 steps, a checkpoint after each: a run is killed mid-run while the workers are stopped
TINY = ["heppo-table3", "--steps", str(STEPS), "--seeds", "1", "--env", "InvertedPendulum-v5", "--set", "num_envs=2",
        "--set", "num_steps=64", "--set", "num_minibatches=4", "--set", "update_epochs=1", "--quiet"]
RUNS = [f"exp{k}-s0" for k in range(1, 6)]
JOIN_S = 900  # a bound on the experiment after a kill, not a timing: a loaded machine restarts workers slowly
WAIT_S = 600  # the same for a run to write its first checkpoint: Ray starts slowly on a loaded machine


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted experiment, in this process (--jobs 1): its summary table."""
    out = tmp_path_factory.mktemp("ref") / "t3"
    assert main(["experiment", *TINY, "--out", str(out), "--jobs", "1"]) == 0
    page = (out / "report.html").read_text()  # the experiment's one page: its table and its curves inside
    assert "<table>" in page and "exp 5: dynamic std + block values" in page and 'src="comparison.png"' not in page
    assert page.count('src="data:image/png;base64,') == 1 and "runs.csv" not in page
    return _table(out)


def _table(out: Path) -> list:
    return list(csv.DictReader(open(out / "summary.csv")))


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _ours(pid: int) -> bool:
    """pid descends from this test process (its Ray instance's workers do; another Ray's do not)."""
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        pid = _parent(pid)
    return False


def _workers(name: str = "ray::rlhls_run") -> list:
    """pids of this test's Ray workers running a run (their process title names the task): an
    experiment of the user's running beside the suite is left alone, and so is a worker's child
    not yet exec'd (it shows its parent's title)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().split(b"\0")[0].decode().startswith(name) and _ours(int(d.name)):
                    pids.append(int(d.name))
            except (OSError, ValueError):
                pass
    return [p for p in pids if parent(p) not in pids]


def _errors(out: Path) -> dict:
    """The failed runs' errors in runs.csv (what an assertion on an experiment's exit code shows)."""
    try:
        return {r["id"]: r["error"] for r in csv.DictReader(open(out / "runs.csv")) if r["status"] == "failed"}
    except OSError as e:
        return {"runs.csv": str(e)}


def _partial(out: Path) -> dict:
    """{run: steps} of the run folders whose checkpoint is short of STEPS (the checkpoint, not
    metrics.csv: its row is appended before the checkpoint that counts it is written)."""
    held = {r: checkpoint_steps(out / r / CHECKPOINT) or 0 for r in RUNS}
    return {r: k for r, k in held.items() if 0 < k < STEPS}


def _kill_workers_mid_run(out: Path, running, kill=None) -> dict:
    """SIGKILL this test's workers (or call `kill` with them) at a moment when a run holds a
    checkpoint short of its steps. The workers are stopped (SIGSTOP) while the run folders are read:
    none finishes a run, starts one or writes a checkpoint between the look and the kill, however
    slowly this process runs. `running()`: the experiment has not ended. Returns the partial runs
    {run: steps of their checkpoint}, each one's worker among those killed."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert running(), f"the experiment in {out} ended before a run could be killed mid-run"
        stopped, partial = [], {}
        try:
            while True:
                got = freeze([p for p in _workers() if p not in stopped])
                if got is None:  # one did not stop in time (it continued, as did this round's): look again
                    partial = {}
                    break
                stopped += got
                partial = _partial(out)
                # no run started meanwhile by a worker not stopped: every partial run's worker is stopped
                if all(p in stopped for p in _workers()):
                    break
            if partial:
                if kill is None:
                    for p in stopped:
                        os.kill(p, signal.SIGKILL)
                else:
                    kill(stopped)
                stopped = []
                return partial
        finally:
            thaw(stopped)
        time.sleep(0.05)
    raise AssertionError(f"no run of {out} held a partial checkpoint within {WAIT_S} s")


def test_failures_stay_in_their_run_and_map_keeps_the_order(local_ray, tmp_path):
    assert map_runs(math.sqrt, [4.0, 9.0, 16.0], jobs=2) == [2.0, 3.0, 4.0]
    outs = run_all([Run("a", fn=json.loads, kwargs={"s": "[1]"}), Run("b", fn=json.loads, kwargs={"s": "{"}),
                    Run("c", fn=json.loads, kwargs={"s": "2"})], jobs=2, progress=False, out=tmp_path)
    assert [(o.id, o.status, o.result) for o in outs] == [("a", "done", [1]), ("b", "failed", None), ("c", "done", 2)]
    assert outs[1].error.startswith("JSONDecodeError: Expecting property name") and "\n" not in outs[1].error
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert [r["status"] for r in rows] == ["done", "failed", "done"] and rows[1]["error"] == outs[1].error
    with pytest.raises(RlhlsError, match=r"1 of 2 run\(s\) failed; first sqrt\[1\]: ValueError"):
        map_runs(math.sqrt, [1.0, -1.0], jobs=2)
    with pytest.raises(RlhlsError, match="duplicate id 'a'"):
        run_all([Run("a", fn=abs, kwargs={"x": 1}), Run("a", fn=abs, kwargs={"x": 2})])


def test_a_killed_worker_is_retried_from_its_checkpoint(local_ray, reference, tmp_path):
    out = tmp_path / "t3"
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("rc", main(["experiment", *TINY, "--out", str(out),
                                                                    "--jobs", "2"])))
    th.start()
    partial = _kill_workers_mid_run(out, th.is_alive)
    th.join(JOIN_S)
    assert not th.is_alive(), f"the experiment did not end within {JOIN_S} s of the kill"
    assert res["rc"] == 0, _errors(out)
    runs = {r["id"]: r for r in csv.DictReader(open(out / "runs.csv"))}
    assert {r["status"] for r in runs.values()} == {"done"} and all(r["steps"] == str(STEPS) for r in runs.values())
    # each killed run's retry went on from the killed try's checkpoint, not from 0
    assert {r: int(runs[r]["resumed_at"]) for r in partial} == partial
    assert _table(out) == reference  # the retried runs continued bit for bit


def test_past_its_retries_a_run_fails_and_resume_completes_it(local_ray, reference, tmp_path, capsys):
    out = tmp_path / "t3"
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("rc", main(["experiment", *TINY, "--out", str(out),
                                                                    "--jobs", "2", "--retries", "0"])))
    th.start()
    partial = _kill_workers_mid_run(out, th.is_alive)
    th.join(JOIN_S)
    assert not th.is_alive(), f"the experiment did not end within {JOIN_S} s of the kill"
    assert res["rc"] == 1
    runs = {r["id"]: r for r in csv.DictReader(open(out / "runs.csv"))}
    failed = [r for r in runs.values() if r["status"] == "failed"]
    assert failed and all("the worker died" in r["error"] for r in failed)
    assert "## Failed runs" in (out / "summary.md").read_text()
    # each run killed mid-run failed and left its checkpoint behind
    assert {r: int(runs[r]["steps"]) for r in partial} == partial and all(runs[r] in failed for r in partial)
    mtimes = {r: (out / r / "metrics.csv").stat().st_mtime_ns for r in RUNS if runs[r]["status"] == "done"}
    capsys.readouterr()
    # --resume takes the recorded options: only the folder (and how to run) on the command line
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--jobs", "2"]) == 0, _errors(out)
    assert {r["status"] for r in csv.DictReader(open(out / "runs.csv"))} <= {"done", "skipped"}
    assert all((out / r / "metrics.csv").stat().st_mtime_ns == t for r, t in mtimes.items())  # kept, not rerun
    assert _table(out) == reference and "## Failed runs" not in (out / "summary.md").read_text()
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--steps", "64"]) == 2
    assert f"was started with steps {STEPS}, not 64" in capsys.readouterr().err


def test_a_killed_driver_leaves_runs_that_resume_completes(local_ray, reference, tmp_path):
    out = tmp_path / "t3"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "rlhls", "experiment", *TINY, "--out", str(out), "--jobs", "2"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ray_procs = []

    def kill_driver(workers):  # its workers stopped mid-run
        ray_procs.extend(descendants(p.pid))  # its Ray instance: gcs_server, raylet, agents, workers
        os.kill(p.pid, signal.SIGKILL)  # the driver alone: its Ray instance and workers go with it
    try:
        partial = _kill_workers_mid_run(out, lambda: p.poll() is None, kill=kill_driver)
        p.wait()
        deadline = time.monotonic() + 15  # Ray's own timeouts take a minute and more
        while time.monotonic() < deadline and [q for q in ray_procs if alive(q)]:
            time.sleep(0.1)
        left = [q for q in ray_procs if alive(q)]
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # should the check below fail: nothing left to the next tests
        for q in ray_procs:  # stopped workers included
            if alive(q):
                os.kill(q, signal.SIGKILL)
    assert len(ray_procs) > 3 and not left, left  # the watchdog of the driver's Ray instance killed them
    assert {r: finished_steps(out / r) for r in partial} == partial
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--jobs", "2", "--quiet"]) == 0, \
        _errors(out)
    assert _table(out) == reference


def test_bad_address_and_nothing_to_resume_are_one_line_errors(tmp_path, capsys):
    assert main(["experiment", *TINY, "--out", str(tmp_path / "a"), "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--address 127.0.0.1:1: no Ray cluster answers there" in err[0]
    assert main(["experiment", "heppo-table3", "--out", str(tmp_path / "b"), "--resume"]) == 2
    assert "holds no experiment" in capsys.readouterr().err
