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
from rlhls.core.errors import RlhlsError

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


# ----------------------------------------------------------------------------- 2. a build is published checked

def _build(tmp_path, out, *extra, **env):
    """`rlhls build apdrl-dqn-cartpole --csim` in a child process, its compile cache in tmp_path."""
    env = {**os.environ, "RLHLS_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.Popen([sys.executable, "-m", "rlhls", "build", "apdrl-dqn-cartpole", "--csim", "--out", str(out),
                             *extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _refused(capsys, argv, needle="is incomplete: its checks did not finish (interrupted?); build it again"):
    assert main(argv) == 2
    _one_line(capsys.readouterr().err, needle)


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "rlhls: interrupted"),
                                             (signal.SIGTERM, 143, "rlhls: terminated")])
def test_a_build_interrupted_in_its_checks_is_refused_until_built_again(tmp_path, capsys, sig, code, said):
    import rlhls
    from procs_util import alive, descendants

    out = tmp_path / "b"
    p = _build(tmp_path, out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and not (out / "manifest.json").exists():
        time.sleep(0.01)  # published: its C simulations (a fresh cache: a minute of compiles) are under way
    assert p.poll() is None, "the build ended before it could be interrupted"
    kids = descendants(p.pid)
    p.send_signal(sig)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == code and err.strip().splitlines()[-1] == said and "Traceback" not in err, err
    assert not [k for k in kids if alive(k)]  # its compilers ended with it
    assert sorted(q.name for q in tmp_path.iterdir()) == ["b", "cache"]  # no staging folder beside it
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False and "rules" not in manifest
    _refused(capsys, ["check", str(out)], f"build '{out}' is incomplete: its checks did not finish (interrupted?); "
                                           "build it again")
    _refused(capsys, ["profile", "apdrl-dqn-cartpole", "--reports", str(out), "--out", str(tmp_path / "p.csv")])
    _refused(capsys, ["run", "apdrl-dqn-cartpole", "--reports", str(out), "--out", str(tmp_path / "f")])
    with pytest.raises(RlhlsError, match="is incomplete"):
        rlhls.Flow("apdrl-dqn-cartpole", out=tmp_path / "f", reports=out)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["b", "cache"]
    # built again over it (an rlhls folder: no --force), it is complete and checked
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["complete"] is True
    assert main(["check", str(out)]) == 0


def _one_pl_node(design):
    """A plan with one small matrix multiply on the PL and the rest on the PS: one component to compile."""
    from rlhls.designs.graph import build_graph

    names = [n.name for n in build_graph(design).nodes]
    return {n: "PL" if n == "q.fc3.fwd" else "PS" for n in names}


@pytest.mark.parametrize("how", ["home is a file", "cache is a file"])
def test_an_unwritable_compile_cache_is_said_once_and_a_scratch_one_builds(tmp_path, monkeypatch, caplog, how):
    from rlhls.core import toolchain
    from rlhls.designs.registry import get_design
    from rlhls.flow.build import build_design
    from rlhls.flow.rules import check_build

    monkeypatch.setattr(toolchain, "_USABLE", {})
    (tmp_path / "file").write_text("not a folder")
    for var in ("RLHLS_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    if how == "home is a file":
        monkeypatch.setenv("HOME", str(tmp_path / "file"))
    else:
        monkeypatch.setenv("RLHLS_CACHE_DIR", str(tmp_path / "file"))
    design = get_design("apdrl-dqn-cartpole")
    caplog.set_level("WARNING", logger="rlhls")
    res = build_design(design, tmp_path / "b", plan=_one_pl_node(design), csim=True, hls4ml=False)
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1 and "compiling into a scratch folder" in said[0] and str(tmp_path / "file") in said[0]
    assert res.components and all(c.csim["passed"] for c in res.components) and res.passed
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["complete"] is True
    assert check_build(tmp_path / "b") == []
    assert (tmp_path / "file").read_text() == "not a folder"


def one_component_plan(path: Path) -> Path:
    """plan.json (rlhls build --plan) of ``_one_pl_node``: a build of apdrl-dqn-cartpole that compiles
    one small component (and the ap_types header it includes) instead of the whole design."""
    from rlhls.designs.registry import get_design

    asg = _one_pl_node(get_design("apdrl-dqn-cartpole"))
    path.write_text(json.dumps({"status": "given", "makespan_us": 0, "gap": 0, "assignment": asg,
                                "start_us": {n: 0 for n in asg}, "point": {n: "" for n in asg}}))
    return path


# ----------------------------------------------------------------------------- 3. a killed compiler's temps

def test_a_killed_compile_leaves_its_assembler_file_in_a_scratch_folder_that_is_swept(tmp_path):
    from procs_util import alive, descendants

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _build(tmp_path, tmp_path / "b", TMPDIR=str(tmp))
    deadline, found, kids = time.monotonic() + 120, [], []
    while time.monotonic() < deadline and p.poll() is None and not found:
        kids = descendants(p.pid)
        found = list(tmp.rglob("*.s"))  # cc1plus writes the assembly that `as` reads into $TMPDIR
        time.sleep(0.005)
    assert found, "no compile wrote its assembly file"
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(k) for k in kids):
        time.sleep(0.05)
    assert all(q.parent.name.startswith(f"rlhls-{p.pid}-cc-") for q in found), found
    # the next rlhls process that compiles sweeps what the killed one left (one component will do)
    r = _build(tmp_path, tmp_path / "b2", "--plan", str(one_component_plan(tmp_path / "plan.json")), TMPDIR=str(tmp))
    err = r.communicate(timeout=300)[1]
    assert r.returncode == 0, err
    assert list(tmp.rglob("*.s")) == [] and not [q for q in tmp.iterdir() if q.name.startswith("rlhls-")]


# ----------------------------------------------------------------------------- 4. a full disk mid-experiment

# the disk "fills up" before the given update's events are written: RLIMIT_FSIZE makes every write past the
# limit fail (EFBIG) in the code that writes, tensorboardX's writer thread and its exit handler included
_FULL_DISK = """
import resource, sys
from rlhls.host import metrics
real, n = metrics.Board.update, [0]
def update(self, *a, **k):
    n[0] += 1
    if n[0] == int(sys.argv[1]):
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
    return real(self, *a, **k)
metrics.Board.update = update
from rlhls.cli import main
raise SystemExit(main(sys.argv[3:]))
"""
TINY = ["--jobs", "1", "--steps", "384", "--seeds", "1", "--env", "InvertedPendulum-v5", "--set", "num_envs=2",
        "--set", "num_steps=64", "--set", "num_minibatches=4", "--set", "update_epochs=1", "--quiet"]


def _comparable(rows):
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_a_full_disk_mid_experiment_is_one_line_and_resume_continues_exactly(tmp_path):
    import csv

    from rlhls.host.runfolder import read_metrics

    full, ref = tmp_path / "full", tmp_path / "ref"
    r = subprocess.run([sys.executable, "-c", _FULL_DISK, "2", "2048", "experiment", "heppo-table3", "--out", str(full),
                        *TINY], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "Exception" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "file too large" in r.stderr, r.stderr
    runs = list(csv.DictReader(open(full / "runs.csv")))
    assert [x["status"] for x in runs] == ["failed"] * 5
    for x in runs:  # one line naming the file that could not be written, no errno
        assert x["error"].startswith("RlhlsError: cannot write '") and x["error"].endswith(
            "': file too large (file-size limit reached)"), x["error"]
    assert "events.out.tfevents" in runs[0]["error"]  # the first run's update 2: its event file first
    assert len(read_metrics(full / "exp1-s0" / "metrics.csv")) == 1
    # space freed: --resume continues the runs from their checkpoints, bit for bit
    r = subprocess.run([sys.executable, "-m", "rlhls", "experiment", "heppo-table3", "--out", str(full), "--resume",
                        "--jobs", "1", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in csv.DictReader(open(full / "runs.csv"))] == ["done"] * 5
    assert next(csv.DictReader(open(full / "runs.csv")))["resumed_at"] == "128"
    assert subprocess.run([sys.executable, "-m", "rlhls", "experiment", "heppo-table3", "--out", str(ref), *TINY],
                          capture_output=True, timeout=300).returncode == 0
    for k in range(1, 6):
        a, b = full / f"exp{k}-s0", ref / f"exp{k}-s0"
        assert _comparable(read_metrics(a / "metrics.csv")) == _comparable(read_metrics(b / "metrics.csv"))
        assert len(read_metrics(a / "metrics.csv")) == 3
        for name in ("episodes.csv", "eval.csv"):
            assert (a / name).read_bytes() == (b / name).read_bytes()


# ----------------------------------------------------------------------------- 5. a refused resume says why

def test_a_resume_with_another_hyperparameter_names_it_and_both_values(tmp_path, capsys):
    r = tmp_path / "r"
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(r), "--steps", "1000", "--precision", "fp32", *DQN]) == 0
    before = _tree(tmp_path)
    capsys.readouterr()
    assert main(["train", "apdrl-dqn-cartpole", "--out", str(r), "--steps", "2000", "--precision", "fp32", "--resume",
                 "--set", "gamma=0.5", *DQN]) == 2
    _one_line(capsys.readouterr().err, f"rlhls: error: --resume: '{r}' was run with gamma 0.99, now 0.5\n")
    assert _tree(tmp_path) == before


def test_a_flow_resume_with_another_set_names_it(tmp_path, capsys):
    import rlhls

    f = tmp_path / "f"
    flow = rlhls.Flow("apdrl-dqn-cartpole", out=f, quiet=True)
    flow.graph()  # a run.json
    flow.close()
    before = _tree(tmp_path)
    assert main(["run", "apdrl-dqn-cartpole", "--out", str(f), "--resume", "--set", "gamma=0.5", "--quiet"]) == 2
    _one_line(capsys.readouterr().err, f"--resume: '{f}' was run with no --set gamma, now --set gamma=0.5\n")
    with pytest.raises(RlhlsError, match=f"'{f}' was run with env 'CartPole-v1', now 'Acrobot-v1'$"):
        rlhls.Flow("apdrl-dqn-cartpole", out=f, env_id="Acrobot-v1", resume=True)
    assert _tree(tmp_path) == before


def test_an_experiment_resume_with_another_set_names_it(tmp_path, capsys):
    from rlhls.host.experiments import ExperimentOptions, _resume_options, write_record

    out = tmp_path / "ex"
    out.mkdir()
    write_record(out, {"name": "heppo-table3"}, ExperimentOptions(name="heppo-table3", overrides={"gamma": "0.9"}))
    for given, said in (({"gamma": "0.5"}, "--set gamma=0.9, not --set gamma=0.5"),
                        ({"gamma": "0.9", "lr": "1"}, "no --set lr, not --set lr=1")):
        with pytest.raises(RlhlsError) as e:
            _resume_options(ExperimentOptions(name="heppo-table3", out=str(out), resume=True, overrides=given))
        assert str(e.value) == f"--resume: '{out}' was started with {said} (drop the option, or choose another --out)"
