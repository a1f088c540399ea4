"""A training process killed with SIGKILL mid-run resumes to exactly the metrics of an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

from rlhls.host.runfolder import read_metrics
from procs_util import freeze, thaw

# Pendulum's 200-step episodes (TimeLimit truncation) span 64-step rollouts: the kill lands mid-episode
ARGS = ["heppo-ppo", "--steps", "768", "--env", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64",
        "--set", "num_minibatches=4", "--set", "update_epochs=8", "--quiet"]


WAIT_S = 600  # a bound against a hang, not a timing: the run takes ~10 s, several times that on a loaded machine


def _train(*extra):
    return subprocess.run([sys.executable, "-m", "rlhls", "train", *ARGS, *extra], capture_output=True, text=True,
                          timeout=WAIT_S)


def _comparable(rows):
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_sigkill_mid_update_then_resume(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert _train("--out", str(full)).returncode == 0
    p = subprocess.Popen([sys.executable, "-m", "rlhls", "train", *ARGS, "--out", str(cut)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the run is stopped (SIGSTOP) while its metrics are read, and killed stopped: it cannot
        # finish between the look and the kill however slowly this process runs
        deadline = time.monotonic() + WAIT_S
        while True:
            assert p.poll() is None, "the run finished before it could be killed"
            assert time.monotonic() < deadline, f"the run wrote no 2 updates within {WAIT_S} s"
            if freeze([p.pid]) and (cut / "metrics.csv").exists() and len(read_metrics(cut / "metrics.csv")) >= 2:
                break
            thaw([p.pid])
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)  # during update 3 (or while writing update 2's files)
        p.wait(timeout=WAIT_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    done = len(read_metrics(cut / "metrics.csv"))
    assert 2 <= done < 6
    r = _train("--out", str(cut), "--resume")
    assert r.returncode == 0, r.stderr
    a, b = read_metrics(full / "metrics.csv"), read_metrics(cut / "metrics.csv")
    assert len(a) == 6 and _comparable(a) == _comparable(b)
    assert (full / "episodes.csv").read_text() == (cut / "episodes.csv").read_text()
    eps = read_metrics(full / "episodes.csv")  # both envs' first episode: steps 1..200, updates 1-4
    assert [(e["env_step"], e["length"]) for e in eps] == [("400", "200"), ("400", "200")]


# a training that dies (SIGKILL) inside the first write of its run folder's record: the record's temp
# file is all the folder holds
_KILLED_IN_RECORD = """
import os, signal, sys, tempfile
from rlhls.host import runfolder
from rlhls.core.fileio import side_name

def write_json(path, obj, indent=1):
    fd, _ = tempfile.mkstemp(prefix=side_name(os.path.basename(path), "."), suffix=".tmp", dir=os.path.dirname(path))
    os.write(fd, b'{"command": "tr')
    os.kill(os.getpid(), signal.SIGKILL)

runfolder.write_json = write_json
from rlhls.cli import main
main(["train", *sys.argv[1:]])
"""


def test_a_run_killed_writing_its_first_record_trains_again(tmp_path):
    """An experiment's retry (or --resume) of a run killed that early trains it from the start, as
    for a folder it had not created yet."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert _train("--out", str(full)).returncode == 0
    p = subprocess.run([sys.executable, "-c", _KILLED_IN_RECORD, *ARGS, "--out", str(cut)], capture_output=True,
                       timeout=WAIT_S)
    assert p.returncode == -signal.SIGKILL and [q.name.endswith(".tmp") for q in cut.iterdir()] == [True]
    r = _train("--out", str(cut))
    assert r.returncode == 0, r.stderr
    files = lambda d: sorted(q.name for q in d.iterdir() if "tfevents" not in q.name)  # noqa: E731
    assert files(cut) == files(full)  # the temp file went
    assert _comparable(read_metrics(full / "metrics.csv")) == _comparable(read_metrics(cut / "metrics.csv"))
