"""Checkpoints: arrays + JSON that load without running code; every broken resume is one line,
exit 2, and leaves the run folder exactly as it was; stale temp files of killed writes go away."""

import hashlib
import os
import pickle

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.designs.errors import RlhlsError
from rlhls.host.checkpoint import load_checkpoint, save_checkpoint

RUN = ["train", "apdrl-a2c-invpendulum", "--steps", "80", "--set", "rollouts_per_update=1", "--quiet"]


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_round_trip_keeps_every_bit(tmp_path):
    rng = np.random.default_rng(0)
    state = {"params": {"fc1.W": rng.standard_normal((3, 4)), "b": np.float32(1.5)},
             "rng": np.random.default_rng(7).bit_generator.state, "none": None, "nan": float("nan"),
             "ints": {3: np.arange(4, dtype=np.int16), 10: np.zeros(0)}, "tuple": (1, 2.5, "x"),
             "list": [np.array(1.0), -0.0, 1e-310, float("inf")], "__odd": True, "u8": np.arange(5, dtype=np.uint8)}
    save_checkpoint(tmp_path / "c.npz", state)
    back = load_checkpoint(tmp_path / "c.npz")
    assert back["rng"] == state["rng"] and back["tuple"] == (1, 2.5, "x") and back["none"] is None
    assert np.isnan(back["nan"]) and back["__odd"] is True
    assert back["params"]["fc1.W"].tobytes() == state["params"]["fc1.W"].tobytes()
    assert set(back["ints"]) == {3, 10} and back["ints"][3].dtype == np.int16
    assert back["u8"].dtype == np.uint8 and str(back["list"][1]) == "-0.0" and back["list"][2] == 1e-310
    with pytest.raises(TypeError, match="cannot store a"):
        save_checkpoint(tmp_path / "d.npz", {"f": lambda: 0})


def test_a_pickle_is_never_loaded(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "c.npz").write_bytes(pickle.dumps({"trainer": Evil()}))
    with pytest.raises(RlhlsError, match="is a pickle"):
        load_checkpoint(tmp_path / "c.npz")
    assert not marker.exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "a"
    assert main([*RUN, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("damage,message", [
    ("random", "not an rlhls checkpoint"), ("truncated", "not an rlhls checkpoint"),
    ("empty", "not an rlhls checkpoint"), ("other_design", "of design 'apdrl-dqn-cartpole'"),
    ("no_config", "config.json' is missing"), ("config_not_json", "config.json' is not JSON"),
    ("pickle", "is a pickle"), ("foreign_state", "checkpoint"),
])
def test_bad_resume_is_one_line_and_changes_nothing(tmp_path, trained, capsys, damage, message):
    import shutil

    out = tmp_path / "r"
    shutil.copytree(trained, out)
    ck = out / "checkpoint.npz"
    if damage == "random":
        ck.write_bytes(np.random.default_rng(0).bytes(4096))
    elif damage == "truncated":
        ck.write_bytes(ck.read_bytes()[:300])
    elif damage == "empty":
        ck.write_bytes(b"")
    elif damage == "other_design":
        s = load_checkpoint(ck)
        s["design"], s["algorithm"] = "apdrl-dqn-cartpole", "dqn"
        save_checkpoint(ck, s)
    elif damage == "no_config":
        (out / "config.json").unlink()
    elif damage == "config_not_json":
        (out / "config.json").write_text("{broken")
    elif damage == "pickle":
        ck.write_bytes(pickle.dumps({"trainer": {}}))
    else:
        s = load_checkpoint(ck)
        s["trainer"] = {"params": {}}
        save_checkpoint(ck, s)
    before = _snapshot(out)
    capsys.readouterr()
    assert main([*RUN, "--steps", "160", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert _snapshot(out) == before  # config.json and everything else untouched


def test_unreadable_checkpoint(tmp_path, trained):
    import shutil

    from test_fileio import _as_unprivileged

    out = tmp_path / "u"
    shutil.copytree(trained, out)
    (out / "checkpoint.npz").chmod(0o000)
    try:
        msg = _as_unprivileged(lambda: load_checkpoint(out / "checkpoint.npz"))
    finally:
        (out / "checkpoint.npz").chmod(0o644)
    assert msg.startswith("RlhlsError: cannot read") or "Permission denied" in msg


def test_resume_removes_stale_temp_files_of_its_own_writes(tmp_path, trained):
    import shutil

    out = tmp_path / "s"
    shutil.copytree(trained, out)
    stale = [out / ".checkpoint.npz.k3j2.tmp", out / ".episodes.csv.x1.tmp", out / ".metrics.csv.y.tmp"]
    for p in stale:
        p.write_bytes(b"half a write")
    (out / ".notes.txt.z.tmp").write_text("not ours")
    assert main([*RUN, "--steps", "160", "--out", str(out), "--resume"]) == 0
    assert not any(p.exists() for p in stale) and (out / ".notes.txt.z.tmp").exists()


def test_a_ppo_checkpoint_of_the_old_layout_is_refused_in_one_line(tmp_path, capsys):
    # before PPO moved onto TrainerBase its env state held next_obs and ret_acc
    run = ["train", "heppo-ppo", "--env", "Pendulum-v1", "--num-envs", "2", "--num-steps", "8",
           "--set", "num_minibatches=2", "--set", "update_epochs=1", "--quiet", "--out", str(tmp_path / "p")]
    assert main([*run, "--steps", "16"]) == 0
    ck = tmp_path / "p" / "checkpoint.npz"
    s = load_checkpoint(ck)
    env = s["trainer"]["env"]
    env["next_obs"], env["ret_acc"] = env.pop("obs"), s["trainer"].pop("ret_acc")
    save_checkpoint(ck, s)
    before = _snapshot(tmp_path / "p")
    capsys.readouterr()
    assert main([*run, "--steps", "32", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "does not fit this run" in err and err.count("\n") == 1, err
    assert _snapshot(tmp_path / "p") == before
