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
from rlhls.host.runfolder import finished_steps
from procs_util import alive, descendants

STEPS = 4096  # 32 updates of 2 x 64 steps: a run takes a few seconds, long enough to be killed mid-run
TINY = ["heppo-table3", "--steps", str(STEPS), "--seeds", "1", "--env", "InvertedPendulum-v5", "--set", "num_envs=2",
        "--set", "num_steps=64", "--set", "num_minibatches=4", "--set", "update_epochs=1", "--quiet"]
RUNS = [f"exp{k}-s0" for k in range(1, 6)]
JOIN_S = 900  # a bound on the experiment after a kill, not a timing: a loaded machine restarts workers slowly


@pytest.fixture(scope="module")
def ray2():
    """One local Ray instance (2 CPUs) for the module; the engine uses it as it finds it."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


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
    experiment of the user's running beside the suite is left alone."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().split(b"\0")[0].decode().startswith(name) and _ours(int(d.name)):
                    pids.append(int(d.name))
            except (OSError, ValueError):
                pass
    return pids


def _when_partial(out: Path, timeout: float = 60.0) -> None:
    """Wait until a run folder holds a checkpoint short of its steps."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if any(0 < finished_steps(out / r) < STEPS for r in RUNS):
            return
        time.sleep(0.05)
    raise AssertionError(f"no run of {out} became partial in {timeout} s")


def _kill_workers_mid_run(out: Path) -> list:
    _when_partial(out)
    pids = _workers()
    for p in pids:
        os.kill(p, signal.SIGKILL)
    return pids


def test_failures_stay_in_their_run_and_map_keeps_the_order(ray2, tmp_path):
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


def test_a_killed_worker_is_retried_from_its_checkpoint(ray2, reference, tmp_path):
    out = tmp_path / "t3"
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("rc", main(["experiment", *TINY, "--out", str(out),
                                                                    "--jobs", "2"])))
    th.start()
    killed = _kill_workers_mid_run(out)
    th.join(JOIN_S)
    assert not th.is_alive(), f"the experiment did not end within {JOIN_S} s of the kill"
    assert killed and res["rc"] == 0
    runs = list(csv.DictReader(open(out / "runs.csv")))
    assert {r["status"] for r in runs} == {"done"} and all(r["steps"] == str(STEPS) for r in runs)
    assert any(0 < int(r["resumed_at"]) < STEPS for r in runs)  # a retry went on from the killed try's checkpoint
    assert _table(out) == reference  # the retried runs continued bit for bit


def test_past_its_retries_a_run_fails_and_resume_completes_it(ray2, reference, tmp_path, capsys):
    out = tmp_path / "t3"
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("rc", main(["experiment", *TINY, "--out", str(out),
                                                                    "--jobs", "2", "--retries", "0"])))
    th.start()
    _kill_workers_mid_run(out)
    th.join(JOIN_S)
    assert not th.is_alive(), f"the experiment did not end within {JOIN_S} s of the kill"
    assert res["rc"] == 1
    runs = {r["id"]: r for r in csv.DictReader(open(out / "runs.csv"))}
    failed = [r for r in runs.values() if r["status"] == "failed"]
    assert failed and all("the worker died" in r["error"] for r in failed)
    assert "## Failed runs" in (out / "summary.md").read_text()
    partial = {r["id"] for r in failed if 0 < int(r["steps"]) < STEPS}
    assert partial  # a killed run left its checkpoint behind
    mtimes = {r: (out / r / "metrics.csv").stat().st_mtime_ns for r in RUNS if runs[r]["status"] == "done"}
    capsys.readouterr()
    # --resume takes the recorded options: only the folder (and how to run) on the command line
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--jobs", "2"]) == 0
    assert {r["status"] for r in csv.DictReader(open(out / "runs.csv"))} <= {"done", "skipped"}
    assert all((out / r / "metrics.csv").stat().st_mtime_ns == t for r, t in mtimes.items())  # kept, not rerun
    assert _table(out) == reference and "## Failed runs" not in (out / "summary.md").read_text()
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--steps", "64"]) == 2
    assert f"was started with steps {STEPS}, not 64" in capsys.readouterr().err


def test_a_killed_driver_leaves_runs_that_resume_completes(ray2, reference, tmp_path):
    out = tmp_path / "t3"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "rlhls", "experiment", *TINY, "--out", str(out), "--jobs", "2"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ray_procs = []
    try:
        _when_partial(out)
        ray_procs = descendants(p.pid)  # its Ray instance: gcs_server, raylet, agents, workers
        os.kill(p.pid, signal.SIGKILL)  # the driver alone: its Ray instance and workers go with it
        p.wait()
        deadline = time.monotonic() + 15  # Ray's own timeouts take a minute and more
        while time.monotonic() < deadline and [q for q in ray_procs if alive(q)]:
            time.sleep(0.1)
        left = [q for q in ray_procs if alive(q)]
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # should the check below fail: nothing left to the next tests
    assert len(ray_procs) > 3 and not left, left  # the watchdog of the driver's Ray instance killed them
    assert any(0 < finished_steps(out / r) < STEPS for r in RUNS)
    assert main(["experiment", "heppo-table3", "--out", str(out), "--resume", "--jobs", "2", "--quiet"]) == 0
    assert _table(out) == reference


def test_bad_address_and_nothing_to_resume_are_one_line_errors(tmp_path, capsys):
    assert main(["experiment", *TINY, "--out", str(tmp_path / "a"), "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--address 127.0.0.1:1: no Ray cluster answers there" in err[0]
    assert main(["experiment", "heppo-table3", "--out", str(tmp_path / "b"), "--resume"]) == 2
    assert "holds no experiment" in capsys.readouterr().err
