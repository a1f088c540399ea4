"""The Python API under threads and hostile arguments: the registries' first look-up from several
threads at once, one writer per folder inside one process, numpy integers and hostile types in
``rlhls.Flow`` / ``train_design`` / ``rlhls.load`` / ``Policy``, and ``--quiet`` on every command."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import rlhls
from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import get_design
from rlhls.host.train import train_design

DQN = "apdrl-dqn-cartpole"
QUICK = {"learning_starts": 300, "steps_per_update": 500, "precision": "fp32"}


def _python(code: str, *, cwd, path=()) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (every registry cold), `path` before the package on sys.path."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def _files(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- registries and threads

THREADS = '''
import threading
import rlhls
from rlhls.designs.kernels import kernel_names
from rlhls.designs.registry import design_names
from rlhls.host.algorithms import algorithm_names
from rlhls.host.experiments import experiment_names

N = 4
barrier = threading.Barrier(N)
seen = [None] * N

def look(i):
    barrier.wait()  # all at once, on cold registries
    try:
        flow = rlhls.Flow("apdrl-dqn-cartpole", out=f"f{i}", quiet=True)
        flow.close()
        seen[i] = (design_names(), algorithm_names(), experiment_names(), kernel_names())
    except BaseException as e:
        seen[i] = f"{type(e).__name__}: {e}"

threads = [threading.Thread(target=look, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
whole = (design_names(), algorithm_names(), experiment_names(), kernel_names())
assert all(len(names) > 1 for names in whole), whole
for i, s in enumerate(seen):
    assert s == whole, f"thread {i}: {s}"
print("ok")
'''


@pytest.mark.parametrize("attempt", range(3))
def test_threads_looking_up_cold_registries_at_once_all_see_them_whole(tmp_path, attempt):
    r = _python(THREADS, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


def _dist(root, name: str, entry_points: str) -> None:
    """An installed distribution `name` on `root` with these entry points."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


BROKEN_PLUGINS = '''
import sys
import threading
from pathlib import Path
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import DESIGNS, design_names
from rlhls.host.experiments import EXPERIMENTS, experiment_names

def attempt(names):
    try:
        return names()
    except RlhlsError as e:
        return str(e)

for names, registry, mine in ((design_names, DESIGNS, "plugged-dqn"), (experiment_names, EXPERIMENTS, "plugged-exp")):
    errors = [None] * 4
    barrier = threading.Barrier(4)

    def look(i):
        barrier.wait()
        errors[i] = attempt(names)

    threads = [threading.Thread(target=look, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # every look-up, then and later, meets the broken plug-in: never a registry without it
    assert all(isinstance(e, str) and "entry point 'bad'" in e and "broken here" in e for e in errors), errors
    assert attempt(names) == errors[0], attempt(names)
    assert mine not in registry._items  # what the good entry point registered is out again
    Path("plugbad.py").write_text(Path("plugbad.py").read_text().replace("raise ImportError('broken here')", ""))
    whole = names()
    assert mine in whole and "mine-too" in " ".join(whole) and len(whole) > 2, whole
    Path("plugbad.py").write_text("raise ImportError('broken here')\\n" + Path("plugbad.py").read_text())
    sys.modules.pop("plugbad")  # broken again for the next registry
print("ok")
'''

PLUGGOOD = '''
import dataclasses


def designs():  # a new Design at each call
    from rlhls.designs.apdrl import designs as seed
    base = next(d for d in seed() if d.name == "apdrl-dqn-cartpole")
    return [dataclasses.replace(base, name="plugged-dqn")]


def experiment():  # a new Experiment at each call
    from rlhls.host.experiments import Experiment, Summary
    return Experiment("plugged-exp", "from a package", runs=lambda ctx: [], summarize=lambda ctx, o: Summary([]))
'''

PLUGBAD = '''raise ImportError('broken here')
import dataclasses


def designs():
    from rlhls.designs.apdrl import designs as seed
    base = next(d for d in seed() if d.name == "apdrl-dqn-cartpole")
    return [dataclasses.replace(base, name="mine-too")]


def experiment():
    from rlhls.host.experiments import Experiment, Summary
    return Experiment("mine-too", "from a package", runs=lambda ctx: [], summarize=lambda ctx, o: Summary([]))
'''


def test_a_plugin_that_fails_to_load_leaves_no_half_filled_registry(tmp_path):
    """A broken entry point: every look-up (from four threads at once, then again) is its one line, the
    good entry point's objects are taken out again; once it is mended the next look-up loads all."""
    (tmp_path / "pluggood.py").write_text(PLUGGOOD)
    (tmp_path / "plugbad.py").write_text(PLUGBAD)
    _dist(tmp_path, "plug", "[rlhls.designs]\ngood = pluggood:designs\nbad = plugbad:designs\n\n"
                            "[rlhls.experiments]\ngood = pluggood:experiment\nbad = plugbad:experiment\n")
    r = _python(BROKEN_PLUGINS, cwd=tmp_path, path=[tmp_path])
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


def test_threads_registering_the_environments_register_each_id_once(monkeypatch):
    from rlhls.host.envs import register_environments

    ids = register_environments()
    calls, real = [], gym.register

    def slow(env_id, **kwargs):  # a slower registration: threads overlap in it
        calls.append(env_id)
        time.sleep(0.05)
        real(env_id, **kwargs)

    for env_id in ids:
        gym.registry.pop(env_id)
    monkeypatch.setattr(gym, "register", slow)
    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=lambda: (barrier.wait(), register_environments())) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        monkeypatch.undo()
        register_environments()
    assert sorted(calls) == sorted(ids)  # each id once, no "overriding environment" warning


# ----------------------------------------------------------------------------- one writer per folder, in one process

def test_a_second_flow_into_an_open_flows_folder_is_refused_until_it_closes(tmp_path):
    out = tmp_path / "f"
    first = rlhls.Flow(DQN, out=out, quiet=True)
    first.graph()
    before = _files(tmp_path)
    for kw in (dict(resume=True), dict(resume=True, seed=0, quiet=False)):
        with pytest.raises(RlhlsError) as e:
            rlhls.Flow(DQN, out=out, **kw)
        msg = str(e.value)
        assert "is being written by this process already" in msg and str(out) in msg and "\n" not in msg
    refused = []  # from another thread alike
    t = threading.Thread(target=lambda: refused.append(pytest.raises(RlhlsError, rlhls.Flow, DQN, out=out,
                                                                    resume=True)))
    t.start()
    t.join()
    assert "by this process already" in str(refused[0].value)
    assert _files(tmp_path) == before  # nothing written
    first.close()
    again = rlhls.Flow(DQN, out=out, resume=True, quiet=True)
    again.close()
    # a Flow refused once it holds the folder (a resume with another seed) lets it go at once, not
    # when its traceback goes
    with pytest.raises(RlhlsError, match="was run with seed 0, now 3") as kept:
        rlhls.Flow(DQN, out=out, resume=True, seed=3, quiet=True)
    rlhls.Flow(DQN, out=out, resume=True, quiet=True).close()
    assert kept.value.__traceback__ is not None
    assert not (tmp_path / ".f.lock").exists()


def test_two_trainings_into_one_folder_from_two_threads_the_second_is_refused(tmp_path):
    out = tmp_path / "t"
    inside, done, second = threading.Event(), threading.Event(), []

    def on_update(update):  # the first training holds the folder: the second starts now
        inside.set()
        assert done.wait(600)

    def other():
        assert inside.wait(600)
        try:
            train_design(get_design(DQN), out=out, steps=1000, seed=1, overrides=QUICK, progress=False)
            second.append("trained")
        except RlhlsError as e:
            second.append(str(e))
        finally:
            done.set()

    t = threading.Thread(target=other)
    t.start()
    try:
        run = train_design(get_design(DQN), out=out, steps=1000, seed=0, overrides=QUICK, progress=False,
                           on_update=on_update)
    finally:
        done.set()
        t.join()
    assert "is being written by this process already" in second[0] and "\n" not in second[0], second
    assert run.env_steps == 1000 and json.loads((out / "config.json").read_text())["seed"] == 0
    assert not (tmp_path / ".t.lock").exists()


# ----------------------------------------------------------------------------- numpy integers and hostile types

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short DQN run folder (two updates)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    train_design(get_design(DQN), out=out, steps=1000, seed=2, overrides=QUICK, progress=False)
    return out


def _refused(fn, *args, **kwargs) -> str:
    """The one RlhlsError line `fn` raises (never another exception, never a raw NUL)."""
    with pytest.raises(RlhlsError) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and "\0" not in msg, msg
    return msg


def test_numpy_integers_are_integers_to_flow_and_train_design(tmp_path):
    flow = rlhls.Flow(DQN, out=tmp_path / "f", seed=np.int64(3), time_limit=np.int64(30), quiet=True,
                      overrides={**QUICK, "learning_starts": np.int64(300), "steps_per_update": np.int32(500)})
    assert flow.seed == 3 and type(flow.seed) is int
    run = flow.train(steps=np.int64(1000))
    flow.close()
    assert run.env_steps == 1000 and json.loads((tmp_path / "f" / "train" / "config.json").read_text())["seed"] == 3
    run = train_design(get_design(DQN), out=tmp_path / "t", steps=np.uint16(1000), seed=np.int32(2), overrides=QUICK,
                       progress=False)
    assert run.env_steps == 1000 and json.loads((tmp_path / "t" / "config.json").read_text())["seed"] == 2
    for seed in (np.int64(-1), np.float64(3.0), np.bool_(True), "3", 2 ** 32):
        assert "expected an integer 0 <= seed < 2**32" in _refused(rlhls.Flow, DQN, out=tmp_path / "x", seed=seed)


def test_hostile_paths_are_one_line_and_write_nothing(tmp_path, trained, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before, run_before = _files(tmp_path), _files(trained)
    for out in (str(tmp_path / "a\0b"), 3, bytes(tmp_path / "by"), [str(tmp_path / "l")], 2.5):
        msg = _refused(rlhls.Flow, DQN, out=out, quiet=True)
        assert msg.startswith("Flow(out=") and ("NUL" in msg or "expected a path" in msg), msg
    assert "NUL" in _refused(rlhls.Flow, "./my\0design.py", out=tmp_path / "x")
    assert _refused(rlhls.Flow, DQN, out=tmp_path / "x", reports=7).startswith("Flow(reports=7)")
    assert _refused(train_design, get_design(DQN), out=5, steps=1000, overrides=QUICK).startswith("train_design(out=5)")
    assert "train_design(design=3)" in _refused(train_design, 3, out=tmp_path / "x")
    for folder in (3, b"run", None, str(trained) + "\0", [str(trained)]):
        assert _refused(rlhls.load, folder).startswith("rlhls.load(folder=")
    assert _files(tmp_path) == before and _files(trained) == run_before


def test_policy_predict_and_evaluate_refuse_what_they_cannot_take_in_one_line(trained):
    policy = rlhls.load(trained)
    ok = np.zeros(4, np.float32)
    # numbers of any numeric dtype are observations (SB3 casts them); one or a batch
    for obs in (ok, ok.astype(np.float64), [0.0, 0.1, 0.0, 0.2], np.zeros(4, np.int64), np.zeros((3, 4), np.float64)):
        act, state = policy.predict(obs)
        assert state is None and np.shape(act) == np.shape(obs)[:-1]
    for obs in (np.zeros(3), np.zeros((2, 3, 5)), "abcd", None):
        assert "observation of shape" in _refused(policy.predict, obs) or "dtype" in _refused(policy.predict, obs)
    for obs in (np.array(["a"] * 4), np.array([object()] * 4, dtype=object), np.zeros(4, complex), {"x": 1},
                [[0.0, 1.0], [0.0]]):
        msg = _refused(policy.predict, obs)
        assert msg.startswith("predict: observation"), msg
    assert _refused(policy.predict, np.array([np.nan, 0, 0, 0])) == \
        "predict: the observation holds nan at [0]: expected finite numbers"
    batch = np.zeros((5, 4), np.float32)
    batch[3, 2] = -np.inf
    assert _refused(policy.predict, batch) == \
        "predict: observation 3 of the batch holds -inf at [2]: expected finite numbers"
    assert "deterministic" in _refused(policy.predict, ok, deterministic="no")
    # evaluate: its counts and seed as Flow's (numpy's integers are integers)
    res = policy.evaluate(episodes=np.int64(1), seed=np.int64(1))
    assert res["episodes"] == 1 and res["seed"] == 1
    assert "episodes '3'" in _refused(policy.evaluate, episodes="3")
    for seed in ("x", -1, 2.5):
        assert "seed" in _refused(policy.evaluate, episodes=1, seed=seed)
    assert "frames" in _refused(policy.evaluate, episodes=1, frames=3)


# ----------------------------------------------------------------------------- --quiet: errors only

QUICK_SETS = ["--set", "learning_starts=300", "--set", "steps_per_update=500"]
COMMANDS = {  # each command with a quick input; {run}: a trained run folder
    "graph": ["graph", DQN, "--csv", "g2.csv"],
    "profile": ["profile", DQN, "--out", "p2.csv", "--measure-ps", "--repeats", "1"],
    "partition": ["partition", "p.csv", "--graph", "g.csv", "--device", "zcu106", "--out", "plan"],
    "build": ["build", DQN, "--out", "b"],
    "build-weights": ["build", DQN, "--weights", "{run}", "--out", "w"],
    "train": ["train", DQN, "--out", "t", "--steps", "1000", "--precision", "fp32", *QUICK_SETS],
    "eval": ["eval", "{run}", "--episodes", "1"],
    "perf": ["perf", DQN, "--run", "{run}", "--out", "pf"],
    "run": ["run", DQN, "--out", "r", "--steps", "1000", "--set", "precision=fp32", *QUICK_SETS],
    "experiment": ["experiment", "apdrl-table3", "--design", DQN, "--steps", "100", "--seeds", "1", "--jobs", "1",
                   "--out", "e"],
}


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_quiet_commands_print_their_results_and_nothing_else(tmp_path, trained, capfd, monkeypatch, command, where):
    """-q before the command or --quiet after it: stderr stays empty (no progress, no warning), stdout
    holds the command's results alone."""
    monkeypatch.chdir(tmp_path)
    if command == "partition":
        assert main(["-q", "graph", DQN, "--csv", "g.csv"]) == 0 and main(["-q", "profile", DQN, "--out", "p.csv"]) == 0
        capfd.readouterr()
    argv = [a.replace("{run}", str(trained)) for a in COMMANDS[command]]
    assert main(["-q", *argv] if where == "before" else [*argv, "--quiet"]) == 0
    out, err = capfd.readouterr()
    assert err == "" and out.strip(), (out, err)
    assert not any(line.startswith(("[1/", "update ", "csim ")) for line in out.splitlines()), out
