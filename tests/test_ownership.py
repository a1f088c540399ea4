"""Nothing deleted outside --out, nothing lost: ownership records are data, each command owns its
own kind of folder, one writer per run folder, every resume works (mixed precision included),
checkpoints are checked before they are used."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.host.checkpoint import load_checkpoint, save_checkpoint
from rlhls.core.fileio import OWNER, check_out, folder_lock, read_record, staged_folder
from procs_util import alive, cmdline, descendants, freeze, thaw
from test_fileio import _partition_inputs as _partition_args
from test_half_published import one_component_plan

FP32 = ["--precision", "fp32", "--steps", "1000", "--set", "steps_per_update=500", "--quiet"]
WAIT_S = 600  # a bound against a hang, not a timing: a child process starts slowly on a loaded machine


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
    before = {p.name: p.read_bytes() for p in t.iterdir() if p.is_file()}
    for argv, kind in ((["run", "apdrl-dqn-cartpole", "--steps", "100", "--quiet"], "run"),
                       (["build", "apdrl-dqn-cartpole"], "build"),
                       (["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "100",
                         "--seeds", "1", "--jobs", "1", "--quiet"], "experiment")):
        assert main(argv + ["--out", str(t)]) == 2, argv
        err = capsys.readouterr().err
        assert f"is a folder of 'rlhls train', not of 'rlhls {kind}'" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in t.iterdir() if p.is_file()} == before
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
    lock = tmp_path / ".cc.lock"
    deadline = time.monotonic() + WAIT_S
    while not (lock.exists() and lock.read_text().split() == [str(first.pid)]):  # its holder writes its pid there
        assert first.poll() is None and time.monotonic() < deadline, "the first training took no lock"
        time.sleep(0.05)
    # it holds the lock, and cannot finish before the second has tried, however loaded the machine
    while not freeze([first.pid]):
        assert first.poll() is None and time.monotonic() < deadline, "the first training could not be stopped"
    try:
        assert main(["train", "apdrl-dqn-cartpole", "--out", str(cc), "--seed", "1", *FP32]) == 2
    finally:
        thaw([first.pid])
    assert "is being written by another rlhls process" in capsys.readouterr().err
    assert first.wait(timeout=WAIT_S) == 0, first.stderr.read()
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
    assert "'train' was run with gamma 0.99, now 0.5" in err and len(err) < 200
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
                                           ({"csv": {"metrics.csv": -1}}, "csv"),
                                           ({"csv": {"metrics.csv": 10 ** 9, "episodes.csv": 0}}, "counts 1000000000"),
                                           ({"env_steps": 999}, "env_steps 999")])
def test_a_resume_checks_the_checkpoints_counters(tmp_path, capsys, changes, what):
    t = tmp_path / "t"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), *FP32]) == 0
    _edit_checkpoint(t / "checkpoint.npz", **changes)
    before = {p.relative_to(t).as_posix(): p.read_bytes() for p in t.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), "--resume", *FP32[:-3], "--steps", "2000",
                 "--set", "steps_per_update=500", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and what in err and err.count("\n") == 1
    assert {p.relative_to(t).as_posix(): p.read_bytes() for p in t.rglob("*") if p.is_file()} == before


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


# ----------------------------------------------------------------------------- bounds before work

@pytest.mark.parametrize("argv, what", [
    (["train", "apdrl-dqn-cartpole", "--precision", "fp32", "--steps", "1000",
      "--set", "steps_per_update=1000000000000"], "one update is 1000000000000 environment steps"),
    (["train", "apdrl-dqn-cartpole", "--precision", "fp32", "--set", "batch_size=1000000000000"], "batch_size"),
    (["train", "heppo-ppo", "--set", "num_steps=1000000000"], "num_envs x num_steps"),
    (["train", "apdrl-a2c-invpendulum", "--set", "n_steps=1000000000000"], "num_envs x n_steps"),
    (["train", "cpp-trpo-ant", "--set", "num_steps=1000000000000"], "num_envs x num_steps"),
    (["experiment", "cpp-fig4", "--param", "bits=1-1000000000", "--jobs", "1"], "fraction bits in 1..48"),
    (["experiment", "apdrl-table4", "--sizes", "1000000000x1000000000"], "hidden sizes must be <= 16384"),
    (["experiment", "apdrl-table3", "--retries", "99999999999999999999"], "expected an integer 0..100"),
])
def test_sizes_are_bounded_before_any_work(tmp_path, capsys, argv, what):
    out = tmp_path / "out"
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert what in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and not any(tmp_path.iterdir())


def test_names_up_to_the_file_systems_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    long = "b" * 250  # a valid name whose temp and lock names would be longer than 255 bytes
    assert main(["train", "apdrl-dqn-cartpole", "--out", long, *FP32]) == 0
    assert main(["build", "apdrl-dqn-cartpole", "--out", "c" * 250]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([long, "c" * 250])
    capsys.readouterr()
    for argv in (["train", "apdrl-dqn-cartpole", *FP32], ["build", "apdrl-dqn-cartpole"],
                 ["run", "apdrl-dqn-cartpole", "--quiet"],
                 ["experiment", "apdrl-table3", "--jobs", "1", "--quiet"]):
        assert main(argv + ["--out", "a" * 300]) == 2, argv
        err = capsys.readouterr().err
        assert "is 300 bytes, longer than a file name may be (255)" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([long, "c" * 250])


def test_an_address_that_answers_but_is_not_ray(tmp_path, capsys, monkeypatch):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(100)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    out = tmp_path / "e"
    import ray

    inits = []  # refused before ray.init, which would wait out its handshake deadline
    monkeypatch.setattr(ray, "init", lambda *a, **k: inits.append(k))
    try:
        assert main(["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "100", "--seeds", "1",
                     "--jobs", "2", "--address", f"127.0.0.1:{srv.getsockname()[1]}", "--out", str(out),
                     "--quiet"]) == 2
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert "something answers there, but not a Ray cluster" in err and err.count("\n") == 1
    assert not inits and not out.exists()


def test_a_bad_set_in_an_experiment_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "e"
    args = ["experiment", "heppo-table3", "--steps", "100", "--seeds", "1", "--jobs", "1", "--quiet", "--out", str(out)]
    assert main(args + ["--set", "nope=1"]) == 2
    assert "--set nope: unknown PPO hyperparameter" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- malformed files, API arguments

@pytest.mark.parametrize("name, text", [("run.json", "[]"), ("run.json", '{"stages": 3}')])
def test_records_of_the_wrong_json_type(tmp_path, capsys, name, text):
    r = tmp_path / "r"
    r.mkdir()
    (r / OWNER).write_text(json.dumps({"command": "run", "files": []}))
    (r / name).write_text(text)
    capsys.readouterr()
    assert main(["run", "apdrl-dqn-cartpole", "--steps", "200", "--set", "precision=fp32", "--out", str(r), "--resume",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is not a run record" in err and err.count("\n") == 1


def test_an_experiment_record_of_the_wrong_json_type(tmp_path, capsys):
    out = tmp_path / "e"
    out.mkdir()
    (out / "experiment.json").write_text("[1, 2]")
    for extra in ([], ["--resume"]):
        assert main(["experiment", "heppo-table3", "--steps", "100", "--seeds", "1", "--jobs", "1", "--quiet",
                     "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert "not an experiment's record" in err and err.count("\n") == 1
    assert [p.name for p in out.iterdir()] == ["experiment.json"]


def test_the_python_api_checks_its_arguments(tmp_path):
    import rlhls

    for kw in (dict(design=None), dict(design=42), dict(design="apdrl-dqn-cartpole", overrides=["gamma=0.9"]),
               dict(design="apdrl-dqn-cartpole", config="x.yaml"), dict(design="apdrl-dqn-cartpole", time_limit="x"),
               dict(design="apdrl-dqn-cartpole", backend=3)):
        with pytest.raises(RlhlsError):
            rlhls.Flow(**kw, out=tmp_path / "api")
    for steps in ("x", 0, -1, 2.5, True):
        flow = rlhls.Flow("apdrl-dqn-cartpole", out=tmp_path / f"s{steps}", quiet=True)
        with pytest.raises(RlhlsError, match="expected a positive integer"):
            flow.train(steps=steps)
        with pytest.raises(RlhlsError, match="expected a positive integer"):
            flow.run(steps=steps)
        flow.close()
    assert not any(tmp_path.iterdir())  # nothing written, no lock left


def test_weights_that_cannot_be_exported_are_one_line(tmp_path, capsys):
    t = tmp_path / "t"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(t), *FP32]) == 0
    ck = load_checkpoint(t / "checkpoint.npz")
    key = next(k for k, v in ck["trainer"].items() if isinstance(v, dict) and any(
        isinstance(a, np.ndarray) and a.ndim == 2 for a in v.values()))
    good = ck["trainer"][key]
    for broken, what in (({k: (a[0] if isinstance(a, np.ndarray) and a.ndim == 2 else a) for k, a in good.items()},
                          "do not fit design"),
                         ({k: (np.full_like(a, np.nan) if isinstance(a, np.ndarray) else a) for k, a in good.items()},
                          "is not finite")):
        ck["trainer"][key] = broken
        save_checkpoint(t / "checkpoint.npz", ck)
        capsys.readouterr()
        assert main(["build", "apdrl-dqn-cartpole", "--weights", str(t), "--out", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert what in err and err.count("\n") == 1, err
    ck["trainer"][key] = good
    save_checkpoint(t / "checkpoint.npz", ck)
    (t / "policy_states.npz").write_bytes(b"PK\x03\x04 broken")
    assert main(["build", "apdrl-dqn-cartpole", "--weights", str(t), "--out", str(tmp_path / "w")]) == 2
    assert "is not a policy-states record" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


# ----------------------------------------------------------------------------- no orphans

def test_a_killed_build_leaves_no_compiler_running_and_its_temps_are_swept(tmp_path):
    env = dict(os.environ, RLHLS_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    p = subprocess.Popen([sys.executable, "-m", "rlhls", "build", "apdrl-dqn-cartpole", "--csim", "--out",
                          str(tmp_path / "b")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT_S
    while True:  # until a compiler's own child (cc1plus) runs
        assert p.poll() is None and time.monotonic() < deadline, "the build started no compiler"
        tree = descendants(p.pid)
        if any("cc1plus" in cmdline(k) for k in tree):
            # the compilers stopped (not the sh the build's death signals): none ends by itself
            # however long the kill takes to reach it, only the build's death ends them
            frozen = freeze([k for k in tree if not cmdline(k).startswith("/bin/sh")]) or []
            if any("cc1plus" in cmdline(k) and alive(k) for k in frozen):
                break
            thaw(frozen)
        time.sleep(0.01)
    try:
        p.kill()
        p.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(alive(k) for k in tree):
            time.sleep(0.05)
        still = [k for k in tree if alive(k)]
    finally:
        for k in tree:  # should the check below fail: no stopped compiler left behind
            if alive(k):
                os.kill(k, signal.SIGKILL)
    assert not still  # g++ and its cc1plus, not only the children
    # what the killed build left is swept by the next one (its first compile, the ap_types PCH that
    # every component includes, is the one it was killed in: a build of one component redoes it)
    stale = [q.name for q in (tmp_path / "cache").rglob("*") if ".tmp" in q.name or ".objs" in q.name]
    subprocess.run([sys.executable, "-m", "rlhls", "build", "apdrl-dqn-cartpole", "--csim", "--out",
                    str(tmp_path / "b2"), "--plan", str(one_component_plan(tmp_path / "plan.json"))],
                   env=env, check=True, capture_output=True)
    left = [q.name for q in (tmp_path / "cache").rglob("*") if ".tmp" in q.name or ".objs" in q.name]
    assert not left, (stale, left)
    assert not [q for q in (tmp_path / "tmp").iterdir() if q.name.startswith("rlhls-")]


@pytest.mark.parametrize("key, value", [("added", 10 ** 9), ("added", "x"), ("added", -1), ("finals_rows", {99: 1})])
def test_a_replay_buffer_position_out_of_range_is_one_line(tmp_path, capsys, key, value):
    t = tmp_path / "t"
    args = ["train", "apdrl-dqn-cartpole", "--out", str(t), "--precision", "fp32", "--set", "learning_starts=500",
            "--set", "steps_per_update=500", "--quiet"]
    assert main(args + ["--steps", "1000"]) == 0
    ck = load_checkpoint(t / "checkpoint.npz")
    ck["trainer"]["buffer"][key] = value
    save_checkpoint(t / "checkpoint.npz", ck)
    before = {p.relative_to(t).as_posix(): p.read_bytes() for p in t.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(args + ["--steps", "2000", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "replay buffer counts are damaged" in err and err.count("\n") == 1
    assert {p.relative_to(t).as_posix(): p.read_bytes() for p in t.rglob("*") if p.is_file()} == before


def _hard_partition(tmp_path, n: int = 120, seed: int = 0) -> list:
    """A layered random DAG whose ILP keeps CBC busy for a while (tests/test_partition_lns.py's)."""
    from rlhls.partition.profile_io import write_profile
    from test_partition_lns import layered_dag

    rows, edges, capacity, links, cores = layered_dag(n, seed)
    write_profile(rows, tmp_path / "p.csv")
    (tmp_path / "g.csv").write_text("src,dst,bytes\n" + "".join(f"{a},{b},{w}\n" for a, b, w in edges))
    (tmp_path / "c.csv").write_text("unit,resource,capacity\n" + f"PS,cores,{cores}\n"
                                    + "".join(f"{u},{r},{v:g}\n" for (u, r), v in capacity.items()))
    (tmp_path / "l.csv").write_text("src_unit,dst_unit,latency_us,bytes_per_us\n"
                                    + "".join(f"{a},{b},{lat:g},{bw:g}\n" for (a, b), (lat, bw) in links.items()))
    return ["partition", str(tmp_path / "p.csv"), "--graph", str(tmp_path / "g.csv"), "--capacity",
            str(tmp_path / "c.csv"), "--links", str(tmp_path / "l.csv"), "--solver", "cbc", "--time-limit", "120"]


def test_a_killed_partition_leaves_no_solver_and_its_model_files_are_swept(tmp_path):
    from rlhls.core.fileio import scratch_dir

    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    p = subprocess.Popen([sys.executable, "-m", "rlhls", *_hard_partition(tmp_path), "--out", str(tmp_path / "plan")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, solver = time.monotonic() + WAIT_S, []
    while not solver:
        assert p.poll() is None and time.monotonic() < deadline, "the partition started no CBC"
        solver = [k for k in descendants(p.pid) if "cbc" in cmdline(k).lower()]
        time.sleep(0.02)
    time.sleep(2.0)  # well into the solve (its time limit is 120 s)

    def solvers():  # any process still working on this test's models (CBC's command line names them)
        return [int(q) for q in os.listdir("/proc") if q.isdigit() and alive(int(q))
                and str(tmp_path / "tmp") in cmdline(int(q))]
    # the solvers stopped: none ends by itself however long the kill takes to reach it on a loaded machine
    while (frozen := freeze(solvers())) is None:
        assert time.monotonic() < deadline, "the solvers could not be stopped"
    try:
        assert p.poll() is None, "the partition ended before it could be killed"
        p.kill()
        p.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and solvers():
            time.sleep(0.05)
        still = solvers()
    finally:
        for k in frozen:  # should the check below fail: no stopped solver left behind
            if alive(k):
                os.kill(k, signal.SIGKILL)
    assert not still
    left = [q for q in (tmp_path / "tmp").iterdir() if q.name.startswith(f"rlhls-{p.pid}-")]
    assert left  # the killed solve's scratch folders (its model files, its solver's log)
    os.environ["TMPDIR"], old = str(tmp_path / "tmp"), os.environ.get("TMPDIR")
    import tempfile

    tempfile.tempdir = None
    try:
        with scratch_dir("next"):
            pass
    finally:
        tempfile.tempdir = None
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
    assert not [q for q in (tmp_path / "tmp").iterdir() if q.name.startswith("rlhls-")]
    assert not (tmp_path / "plan").exists()
