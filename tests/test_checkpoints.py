"""Checkpoints: arrays + JSON that load without running code; every broken resume is one line,
exit 2, and leaves the run folder exactly as it was; stale temp files of killed writes go away."""

import hashlib
import os
import pickle

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.host.checkpoint import load_checkpoint, save_checkpoint
from rlhls.host.runfolder import read_metrics

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


# -- lean checkpoints: the replay buffer and the CSVs appended, the checkpoint counting them

# CartPole DQN, 25-step updates, a 60-transition ring (8-row chunks) that wraps: deletes, finals
LEAN = {"learning_starts": 40, "steps_per_update": 25, "buffer_size": 60, "batch_size": 8,
        "target_network_frequency": 50, "precision": "fp32"}


def _dqn(hp=LEAN):
    from rlhls.designs.registry import get_design
    from rlhls.host.algorithms.dqn import DQN

    return DQN(get_design("apdrl-dqn-cartpole"), seed=5, hyperparams=hp)


def _strip(rows):
    return [{k: repr(v) for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_checkpoint_bytes_per_update_do_not_grow_with_the_buffer(tmp_path):
    """Per update the checkpoint is rewritten at a size that does not grow with the buffer, and
    the replay files grow by the update's transitions alone, far below the whole buffer; a full
    chunk is never written again."""
    from rlhls.host.runner import train

    out, sizes = tmp_path / "r", []

    def measure(update):
        sizes.append({p.relative_to(out).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
                      for p in out.rglob("*") if p.is_file()})

    hp = dict(LEAN, buffer_size=1000)  # 125-row chunks; 24 updates of 25 transitions fill 600 rows
    res = train(lambda: _dqn(hp), {"design": "apdrl-dqn-cartpole"}, out, steps=25 * 24, progress=False,
                on_update=measure)
    measure(None)
    t = _dqn(hp)
    t.run_dir = out
    t.load_state_dict(load_checkpoint(out / "checkpoint.npz")["trainer"])
    (row, final), chunk = (d.itemsize for d in t.rb._rows()), t.rb.chunk
    whole = t.rb.size * row + len(t.rb.finals) * final  # what a whole-buffer checkpoint holds of it
    t.close()

    def grown(before, after, kind):
        return sum(after[f][0] - before.get(f, (0, 0))[0] for f in after if f.startswith(f"replay/{kind}"))
    for before, after in zip(sizes[1:], sizes[2:]):
        assert grown(before, after, "transitions") == 25 * row  # the update's transitions, appended
        assert grown(before, after, "finals") % final == 0  # and the final observations of its episodes
        assert all(after[f] == before[f] for f in before if f.startswith("replay/t") and before[f][0] == chunk * row)
    per_update = max(grown(b, a, "") for b, a in zip(sizes[1:], sizes[2:]))
    assert per_update <= whole / 15 and grown(sizes[0], sizes[-1], "") == whole
    ck = [s["checkpoint.npz"][0] for s in sizes[3:]]  # Adam's state is there from update 2 on
    assert ck[-1] - ck[0] < 0.1 * (len(ck) - 1) * 25 * row  # a whole-buffer checkpoint grows by that much
    assert len(res["metrics"]) == 24 and sum(r["train_steps"] for r in res["metrics"]) > 0


def test_kill_between_the_appends_and_the_checkpoint_then_torn_lines_resume_exactly(tmp_path, monkeypatch):
    """A kill after update 7's transitions and CSV lines were appended but before its checkpoint
    replaced update 6's, then half a line more in each CSV: the resume equals an uninterrupted run
    (the same metrics, episodes, parameters and replay files byte for byte)."""
    import rlhls.host.runner as runner

    cfg = {"design": "apdrl-dqn-cartpole"}
    full = runner.train(_dqn, cfg, tmp_path / "full", steps=25 * 10, progress=False)
    real, calls = runner.save_checkpoint, []

    def killed(path, state):
        calls.append(state["update"])
        if state["update"] == 7:
            raise KeyboardInterrupt  # the trainer's state_dict() has appended its transitions already
        real(path, state)

    monkeypatch.setattr(runner, "save_checkpoint", killed)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        runner.train(_dqn, cfg, cut, steps=25 * 10, progress=False)
    monkeypatch.setattr(runner, "save_checkpoint", real)
    assert load_checkpoint(cut / "checkpoint.npz")["update"] == 6
    assert len(read_metrics(cut / "metrics.csv")) == 7  # update 7's line is there, not counted
    assert (cut / "replay" / "transitions-21.bin").is_file()  # transition 174 appended; 150 counted
    for name in ("metrics.csv", "episodes.csv"):
        with open(cut / name, "a") as f:
            f.write("8,200,0.0")  # a torn line
    again = runner.train(_dqn, cfg, cut, steps=25 * 10, resume=True, progress=False)
    assert _strip(again["metrics"]) == _strip(full["metrics"]) and again["episodes"] == full["episodes"]
    assert _strip(read_metrics(cut / "metrics.csv")) == _strip(read_metrics(tmp_path / "full" / "metrics.csv"))
    assert (cut / "episodes.csv").read_bytes() == (tmp_path / "full" / "episodes.csv").read_bytes()
    a, b = (load_checkpoint(d / "checkpoint.npz")["trainer"] for d in (tmp_path / "full", cut))
    assert all(np.array_equal(a["params"][k], b["params"][k]) for k in a["params"]) and a["rng"] == b["rng"]
    files = sorted(p.name for p in (tmp_path / "full" / "replay").iterdir())
    assert files == sorted(p.name for p in (cut / "replay").iterdir()) and len(files) >= 2
    assert all((tmp_path / "full" / "replay" / f).read_bytes() == (cut / "replay" / f).read_bytes() for f in files)


DQN_RUN = ["train", "apdrl-dqn-cartpole", "--steps", "100", "--precision", "fp32", "--quiet",
           *[a for k, v in LEAN.items() if k != "precision" for a in ("--set", f"{k}={v}")]]


@pytest.fixture(scope="module")
def trained_dqn(tmp_path_factory):
    out = tmp_path_factory.mktemp("dqn") / "d"
    assert main([*DQN_RUN, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("damage,message", [
    ("chunk", "transitions-5.bin' holds"), ("no_chunk", "transitions-12.bin' is missing"),
    ("metrics", "metrics.csv' holds"), ("episodes_text", "episodes.csv' is not the CSV"),
    ("old_layout", "of an older rlhls"),
])
def test_damaged_lean_run_folder_is_one_line_and_changes_nothing(tmp_path, trained_dqn, capsys, damage, message):
    import shutil

    out = tmp_path / "r"
    shutil.copytree(trained_dqn, out)
    ck = out / "checkpoint.npz"
    if damage == "chunk":  # a chunk the checkpoint counts, cut short
        p = out / "replay" / "transitions-5.bin"  # the oldest live one: 40 of 100 transitions fell out
        p.write_bytes(p.read_bytes()[:-5])
    elif damage == "no_chunk":
        (out / "replay" / "transitions-12.bin").unlink()  # the newest
    elif damage == "metrics":
        p = out / "metrics.csv"
        p.write_bytes(p.read_bytes()[:-40])
    elif damage == "episodes_text":
        p = out / "episodes.csv"
        p.write_bytes(b"\xff\xfe" + p.read_bytes()[2:])
    else:  # the layout before: metrics, episodes and the whole buffer inside, no layout key
        s = load_checkpoint(ck)
        del s["layout"], s["csv"]
        s["metrics"], s["episodes"] = [], []
        save_checkpoint(ck, s)
    before = _snapshot(out)
    capsys.readouterr()
    assert main([*DQN_RUN, "--steps", "150", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert _snapshot(out) == before


def test_the_ownership_record_names_every_file_the_run_wrote_and_the_checkpoint_counts_its_steps(tmp_path):
    """.rlhls.json lists the replay chunks and event files too; an experiment counts a run's steps
    from its checkpoint, so a metrics.csv row appended before a kill is not a finished update."""
    import json

    from rlhls.host.checkpoint import checkpoint_steps
    from rlhls.host.runfolder import finished_steps
    from rlhls.host.runner import train
    from rlhls.core.fileio import OWNER

    out = tmp_path / "r"
    hp = dict(LEAN, buffer_size=1000)  # 125-row chunks: several replay files
    train(lambda: _dqn(hp), {"design": "apdrl-dqn-cartpole"}, out, steps=25 * 12, progress=False)
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {OWNER}
    record = set(json.loads((out / OWNER).read_text())["files"])
    assert any(f.startswith("replay/transitions-") for f in written) and any(f.startswith("events.") for f in written)
    assert written <= record
    assert checkpoint_steps(out / "checkpoint.npz") == finished_steps(out) == 25 * 12
    # a try goes on from the checkpoint; a copy without it trains from the start, and says so
    import shutil

    from rlhls.host.engine import Run, run_all

    bare = shutil.copytree(out, tmp_path / "bare", ignore=shutil.ignore_patterns("checkpoint.npz"))
    said = []
    kept, fresh = run_all([Run("kept", folder=out, fn=dict), Run("bare", folder=bare, fn=dict)], jobs=1,
                          progress=False, say=said.append)
    assert (kept.start_steps, fresh.start_steps) == (25 * 12, 0)
    assert any("kept: done" in s and "resumed at 300 steps" in s for s in said)
    assert any("bare: done" in s and "resumed" not in s for s in said), said
    lines = (out / "metrics.csv").read_text().splitlines()
    last = lines[-1].split(",")
    last[0], last[1] = str(int(last[0]) + 1), str(int(last[1]) + 25)  # the next update's row, its checkpoint lost
    with open(out / "metrics.csv", "a") as f:
        f.write(",".join(last) + "\n")
    assert finished_steps(out) == 25 * 12
    (out / "checkpoint.npz").write_bytes(b"not a zip")
    assert checkpoint_steps(out / "checkpoint.npz") is None and finished_steps(out) == 25 * 13
    # a state member whose header claims a terabyte is refused before anything is allocated
    import io
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False, "shape": (10 ** 12,)})
    with zipfile.ZipFile(out / "checkpoint.npz", "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("state.npy", head.getvalue() + b'{"format": "x"}')
    assert checkpoint_steps(out / "checkpoint.npz") is None
