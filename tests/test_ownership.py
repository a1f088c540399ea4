"""Nothing deleted outside --out, nothing lost: ownership records are data, each command owns its
own kind of folder, one writer per run folder, every resume works (mixed precision included),
checkpoints are checked before they are used."""

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.designs.errors import RlhlsError
from rlhls.host.checkpoint import load_checkpoint, save_checkpoint
from rlhls.partition.fileio import OWNER, check_out, folder_lock, read_record, staged_folder

FP32 = ["--precision", "fp32", "--steps", "1000", "--set", "steps_per_update=500", "--quiet"]


def _partition_args(tmp_path):
    (tmp_path / "p.csv").write_text("node,unit,latency_us\na,PS,2\na,PL,1\nb,PS,3\nb,PL,1\n")
    (tmp_path / "g.csv").write_text("src,dst,bytes\na,b,8\n")
    (tmp_path / "c.csv").write_text("unit,resource,capacity\nPS,cores,1\n")
    return ["partition", str(tmp_path / "p.csv"), "--graph", str(tmp_path / "g.csv"),
            "--capacity", str(tmp_path / "c.csv")]


@pytest.mark.parametrize("command", ["build", "partition"])
def test_a_crafted_record_deletes_nothing_outside_the_folder(tmp_path, capsys, command):
    victim, victim_abs = tmp_path / "victim.txt", tmp_path / "elsewhere" / "victim_abs.txt"
    victim_abs.parent.mkdir()
    victim.write_text("v")
    victim_abs.write_text("w")
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "x").write_text("keep")
    (ev / OWNER).write_text(json.dumps({"command": command, "files": ["../victim.txt", str(victim_abs), "x"]}))
    argv = (["build", "apdrl-dqn-cartpole"] if command == "build" else _partition_args(tmp_path)) + ["--out", str(ev)]
    for extra in ([], ["--force"]):
        assert main(argv + extra) == 2
        err = capsys.readouterr().err
        assert "'../victim.txt', which is not a file inside" in err and err.count("\n") == 1
    assert victim.read_text() == "v" and victim_abs.read_text() == "w" and (ev / "x").read_text() == "keep"
    assert sorted(p.name for p in ev.iterdir()) == [OWNER, "x"]


def test_a_record_through_a_link_that_leads_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("mine")
    out = tmp_path / "out"
    with staged_folder(out, command="test") as tmp:
        (tmp / "a").write_text("a")
    (out / "sub").symlink_to(outside)
    (out / OWNER).write_text(json.dumps({"command": "test", "files": ["a", "sub/f"]}))
    with pytest.raises(RlhlsError, match="'sub/f', which is not a file inside"):
        read_record(out)
    with pytest.raises(RlhlsError, match="not a file inside"):
        with staged_folder(out, command="test") as tmp:
            (tmp / "b").write_text("b")
    assert (outside / "f").read_text() == "mine" and (out / "a").read_text() == "a"
    with pytest.raises(RlhlsError, match="not a file inside"):
        check_out(out, command="test", force=True)


def test_each_command_owns_its_own_kind_of_folder(tmp_path, capsys):
    t = tmp_path / "t"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), *FP32]) == 0
    (t / "graph.csv").write_text("mine")
    (t / "report.md").write_text("my notes")
    before = {p.name: p.read_bytes() for p in t.iterdir()}
    for argv, kind in ((["run", "apdrl-dqn-cartpole", "--steps", "100", "--quiet"], "run"),
                       (["build", "apdrl-dqn-cartpole"], "build"),
                       (["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "100",
                         "--seeds", "1", "--jobs", "1", "--quiet"], "experiment")):
        assert main(argv + ["--out", str(t)]) == 2, argv
        err = capsys.readouterr().err
        assert f"is a folder of 'rlhls train', not of 'rlhls {kind}'" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in t.iterdir()} == before
    # a build folder is not a run folder either; and --force over another command's folder keeps the user's files
    b = tmp_path / "b"
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(b), *FP32]) == 2
    assert "is a folder of 'rlhls build', not of 'rlhls train'" in capsys.readouterr().err
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(b)]) == 0  # the next build still works
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(t), "--force"]) == 0  # the training's files stay
    after = {p.name: p.read_bytes() for p in t.iterdir() if p.is_file()}
    assert {k: after[k] for k in before if k != OWNER} == {k: v for k, v in before.items() if k != OWNER}
    assert "manifest.json" in after and json.loads(after[OWNER])["command"] == "build"


def test_two_trainings_into_one_folder_one_is_refused(tmp_path, capsys):
    cc = tmp_path / "cc"
    with folder_lock(cc):  # another process's training holds it
        child = subprocess.run([sys.executable, "-m", "rlhls", "train", "apdrl-dqn-cartpole", "--out", str(cc),
                                "--seed", "1", *FP32], capture_output=True, text=True)
    assert child.returncode == 2 and child.stderr.count("\n") == 1
    assert "is being written by another rlhls process (pid" in child.stderr
    assert not cc.exists() and not any(tmp_path.iterdir())  # nothing written, the lock file removed
    # really side by side: the second of two trainings started together is refused, the first's run is whole
    first = subprocess.Popen([sys.executable, "-m", "rlhls", "train", "apdrl-dqn-cartpole", "--out", str(cc),
                              "--seed", "0", "--precision", "fp32", "--steps", "20000", "--quiet"],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / ".cc.lock").exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(cc), "--seed", "1", *FP32]) == 2
    assert "is being written by another rlhls process" in capsys.readouterr().err
    assert first.wait(timeout=600) == 0, first.stderr.read()
    cfg = json.loads((cc / "config.json").read_text())
    assert cfg["seed"] == 0 and load_checkpoint(cc / "checkpoint.npz")["env_steps"] == 20000
    assert not (tmp_path / ".cc.lock").exists()


def test_mixed_precision_resumes_through_run_and_train(tmp_path, capsys, monkeypatch):
    r2 = tmp_path / "r2"
    assert main(["run", "apdrl-dqn-cartpole", "--steps", "2000", "--out", str(r2), "--quiet"]) == 0
    assert json.loads((r2 / "train" / "config.json").read_text())["plan_source"] == "given"
    assert main(["run", "apdrl-dqn-cartpole", "--steps", "3000", "--out", str(r2), "--resume", "--quiet"]) == 0
    rec = json.loads((r2 / "run.json").read_text())
    assert rec["ok"] and rec["train"]["env_steps"] == 3000
    # train --resume of the run's training, from another working directory: the recorded plan and
    # hyperparameters (the demonstration's) are the run's own
    monkeypatch.chdir(r2)
    assert main(["train", "apdrl-dqn-cartpole", "--steps", "4000", "--out", "train", "--resume", "--quiet"]) == 0
    rows = list(csv.DictReader(open(r2 / "train" / "metrics.csv")))
    assert [r["env_steps"] for r in rows] == ["1000", "2000", "3000", "4000"]
    # a hyperparameter given on --resume that the run did not have: one short line naming it
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--steps", "5000", "--out", "train", "--resume", "--quiet",
                 "--set", "gamma=0.5"]) == 2
    err = capsys.readouterr().err
    assert "different hyperparams entry 'gamma' (0.99, now 0.5)" in err and len(err) < 200
    # fewer steps than the run has: the record keeps what it holds
    assert main(["train", "apdrl-dqn-cartpole", "--steps", "1000", "--out", "train", "--resume", "--quiet"]) == 0
    assert json.loads((r2 / "train" / "config.json").read_text())["steps"] == 4000


def test_a_failed_resume_leaves_the_record_saying_so(tmp_path, capsys):
    r = tmp_path / "r"
    assert main(["run", "apdrl-dqn-cartpole", "--steps", "1000", "--out", str(r), "--quiet",
                 "--set", "precision=fp32"]) == 0
    (r / "train" / "checkpoint.npz").write_bytes(b"not a checkpoint")
    assert main(["run", "apdrl-dqn-cartpole", "--steps", "2000", "--out", str(r), "--resume", "--quiet",
                 "--set", "precision=fp32"]) == 2
    assert "is not an rlhls checkpoint" in capsys.readouterr().err
    rec = json.loads((r / "run.json").read_text())
    assert rec["ok"] is False and rec["stages"][-1]["stage"] == "train"
    assert rec["stages"][-1]["status"] == "failed" and "not an rlhls checkpoint" in rec["failures"][-1]


def test_experiment_resumes_mixed_runs_from_another_spelling_of_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--seeds", "1", "--jobs", "1",
            "--set", "learning_starts=100", "--set", "steps_per_update=200", "--quiet"]
    assert main([*args, "--steps", "200", "--out", "t3"]) == 0
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main([*args, "--steps", "400", "--out", str(tmp_path / "t3")]) == 0
    for p in ("fp32", "mixed"):
        rows = list(csv.DictReader(open(tmp_path / "t3" / "apdrl-dqn-cartpole" / f"{p}-s0" / "metrics.csv")))
        assert [r["env_steps"] for r in rows] == ["200", "400"]
    runs = list(csv.DictReader(open(tmp_path / "t3" / "runs.csv")))
    assert {r["status"] for r in runs} == {"done"}, runs


def _edit_checkpoint(path, **changes):
    ck = load_checkpoint(path)
    ck.update(changes)
    save_checkpoint(path, ck)


@pytest.mark.parametrize("changes, what", [({"update": -5}, "update -5"), ({"update": "x"}, "update 'x'"),
                                           ({"update": 1e400}, "update inf"), ({"env_steps": "abc"}, "env_steps"),
                                           ({"update": 7}, "update 7 against its 2 metrics rows"),
                                           ({"metrics": {"a": 1}}, "metrics"), ({"episodes": 3}, "episodes"),
                                           ({"env_steps": 999}, "env_steps 999")])
def test_a_resume_checks_the_checkpoints_counters(tmp_path, capsys, changes, what):
    t = tmp_path / "t"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), *FP32]) == 0
    _edit_checkpoint(t / "checkpoint.npz", **changes)
    before = {p.name: p.read_bytes() for p in t.iterdir()}
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), "--resume", *FP32[:-3], "--steps", "2000",
                 "--set", "steps_per_update=500", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and what in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in t.iterdir()} == before


def _header_bomb(path):
    """A 600-byte checkpoint whose one array claims 8 TB."""
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    arr = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\x00" * 64
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("state.npy", arr)


def test_a_header_bomb_is_one_line(tmp_path, capsys):
    t = tmp_path / "t"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), *FP32]) == 0
    _header_bomb(t / "checkpoint.npz")
    assert os.path.getsize(t / "checkpoint.npz") < 1000
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), "--resume", *FP32]) == 2
    assert "claims 8000000000000 bytes" in capsys.readouterr().err
    assert main(["build", "apdrl-dqn-cartpole", "--weights", str(t), "--out", str(tmp_path / "w")]) == 2
    assert "claims 8000000000000 bytes" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_weights_of_another_design_are_refused_without_config(tmp_path, capsys):
    t = tmp_path / "t"
    assert main(["train", "apdrl-a2c-invpendulum", "--out", str(t), "--precision", "fp32", "--steps", "100",
                 "--quiet"]) == 0
    (t / "config.json").unlink()
    capsys.readouterr()
    assert main(["build", "apdrl-dqn-cartpole", "--weights", str(t), "--out", str(tmp_path / "w")]) == 2
    assert "checkpoint is of design 'apdrl-a2c-invpendulum', not 'apdrl-dqn-cartpole'" in capsys.readouterr().err
    (t / "config.json").write_text("[]")
    assert main(["build", "apdrl-a2c-invpendulum", "--weights", str(t), "--out", str(tmp_path / "w")]) == 2
    assert "config.json is not a run's config" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
