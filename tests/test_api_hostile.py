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
