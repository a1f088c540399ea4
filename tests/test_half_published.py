"""Nothing half-published: a command that fails leaves nothing it did not have before; a build is
published complete or marked incomplete (and refused) until its checks ran; a killed compiler's
temps are swept; a full disk ends in one line and a folder that resumes; a refused resume says
why in one short line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.designs.errors import RlhlsError

DQN = ["--set", "learning_starts=500", "--set", "steps_per_update=500", "--quiet"]


def _tree(root: Path) -> dict:
    """Every file under `root` (relative path -> bytes): what a refused command must leave as it was."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(err: str, needle: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and needle in err, err


def _no_gxx(tmp_path, monkeypatch) -> None:
    """PATH without g++ (an empty folder)."""
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))


# ----------------------------------------------------------------------------- 1. checked before the first file

@pytest.mark.parametrize("args, needle", [
    (["--env", "NoSuchEnv-v0"], "unknown environment 'NoSuchEnv-v0'"),
    (["--env", "Pendulum-v1"], "environment 'Pendulum-v1' has continuous actions; DQN needs discrete actions"),
    (["--backend", "csim"], "csim backend needs g++: 'g++' not found on PATH"),
    (["--set", "steps_per_update=5000", "--steps", "1000"], "one update is 5000 environment steps, more than"),
])
def test_rlhls_run_that_cannot_train_writes_nothing(tmp_path, capsys, monkeypatch, args, needle):
    if "csim" in args:
        _no_gxx(tmp_path, monkeypatch)
    out = tmp_path / "f"
    before = _tree(tmp_path)
    assert main(["run", "apdrl-dqn-cartpole", "--out", str(out), "--quiet", *args]) == 2
    _one_line(capsys.readouterr().err, needle)
    assert not out.exists() and _tree(tmp_path) == before and sorted(os.listdir(tmp_path)) == sorted(
        ["bin"] if "csim" in args else [])


def test_a_flow_that_cannot_train_writes_nothing_and_the_corrected_one_starts(tmp_path):
    import rlhls

    out = tmp_path / "f"
    with pytest.raises(RlhlsError, match="unknown environment 'NoSuchEnv-v0'"):
        rlhls.Flow("apdrl-dqn-cartpole", out=out, env_id="NoSuchEnv-v0")
    assert list(tmp_path.iterdir()) == []
    rlhls.Flow("apdrl-dqn-cartpole", out=out, env_id="CartPole-v1").close()  # not "holds a run"
    assert list(tmp_path.iterdir()) == []


def test_rlhls_train_with_csim_and_no_gxx_writes_nothing(tmp_path, capsys, monkeypatch):
    _no_gxx(tmp_path, monkeypatch)
    out = tmp_path / "runs" / "r"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(out), "--backend", "csim", "--steps", "1000",
                 "--precision", "fp32", *DQN]) == 2
    _one_line(capsys.readouterr().err, "csim backend needs g++: 'g++' not found on PATH")
    assert sorted(os.listdir(tmp_path)) == ["bin"]
