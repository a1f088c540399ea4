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
        time.sleep(0.01)  # published: its C simulations (a fresh cache: minutes of compiles) are under way
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
    from rlhls.designs.registry import get_design
    from rlhls.flow import paths
    from rlhls.flow.build import build_design
    from rlhls.flow.rules import check_build

    monkeypatch.setattr(paths, "_USABLE", {})
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
    # the next rlhls process that compiles sweeps what the killed one left
    r = _build(tmp_path, tmp_path / "b2", TMPDIR=str(tmp))
    assert r.wait(timeout=300) == 0, r.stderr.read()
    assert list(tmp.rglob("*.s")) == [] and not [q for q in tmp.iterdir() if q.name.startswith("rlhls-")]
