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
from rlhls.designs.errors import RlhlsError
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
from rlhls.designs.errors import RlhlsError
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
    assert mine not in registry  # what the good entry point registered is out again
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
    with pytest.raises(RlhlsError, match="different seed") as kept:
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
