"""The training runner: run folder, checkpoints, exact resume after a kill, CLI, Humanoid smoke."""

import json

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.cli import build_parser
from rlhls.host.runfolder import read_metrics
from rlhls.core.fileio import OWNER

TINY = ["--env", "InvertedPendulum-v5", "--num-envs", "2", "--num-steps", "64",
        "--set", "num_minibatches=4", "--set", "update_epochs=2", "--quiet"]


def _args(*argv):
    args = build_parser().parse_args(["train", *argv])
    args.quiet, args.verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)  # as main() does
    return args


def run_train(args):
    return args.func(args)


def _spanning(episodes_csv, num_envs, boundary):
    # episodes in progress at per-env step `boundary` (running before it, ended after it)
    rows = read_metrics(episodes_csv)
    return [r for r in rows if int(r["env_step"]) // num_envs - int(r["length"]) < boundary < int(r["env_step"]) // num_envs]


def _comparable(rows):
    # wall-clock columns differ between runs; everything else must be identical
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_killed_run_resumes_to_the_same_metrics(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    # 8-step rollouts: episodes run on across updates (CleanRL) and must resume exactly mid-episode
    tiny = ["--env", "InvertedPendulum-v5", "--num-envs", "2", "--num-steps", "8", "--set", "num_minibatches=4",
            "--set", "update_epochs=2", "--quiet"]
    assert run_train(_args("heppo-ppo", "--steps", "64", "--out", str(full), *tiny)) == 0
    from rlhls.host import train as T

    def kill(update):
        if update == 3:
            raise KeyboardInterrupt  # killed during update 3: updates 1-2 are checkpointed

    orig = T.train
    try:
        T.train = lambda *a, **k: orig(*a, **{**k, "on_update": kill})
        with pytest.raises(KeyboardInterrupt):
            run_train(_args("heppo-ppo", "--steps", "64", "--out", str(cut), *tiny))
    finally:
        T.train = orig
    assert len(read_metrics(cut / "metrics.csv")) == 2
    with pytest.raises(RlhlsError, match="--resume"):
        run_train(_args("heppo-ppo", "--steps", "64", "--out", str(cut), *tiny))
    assert run_train(_args("heppo-ppo", "--steps", "64", "--out", str(cut), "--resume", *tiny)) == 0
    a, b = read_metrics(full / "metrics.csv"), read_metrics(cut / "metrics.csv")
    assert len(a) == 4 and _comparable(a) == _comparable(b)
    assert (full / "episodes.csv").read_text() == (cut / "episodes.csv").read_text()
    assert _spanning(full / "episodes.csv", 2, 2 * 8)  # running when update 3 was interrupted
    with pytest.raises(RlhlsError, match="was run with seed 0, now 1"):
        run_train(_args("heppo-ppo", "--steps", "128", "--seed", "1", "--out", str(cut), "--resume", *tiny))


def test_run_folder_contents_and_bad_input(tmp_path):
    out = tmp_path / "run"
    assert run_train(_args("heppo-ppo", "--steps", "128", "--out", str(out), "--experiment", "1", *TINY)) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment"] == 1 and cfg["hyperparams"]["num_envs"] == 2 and cfg["env"] == "InvertedPendulum-v5"
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["128"]
    for col in ("episodic_return", "policy_loss", "value_loss", "entropy", "t_dnn_inference", "t_env_run",
                "t_storing_trajectories", "t_gae_fetch", "t_gae_compute", "t_gae_write", "t_update_forward",
                "t_backprop"):
        assert col in rows[0]
    assert (out / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoint.npz").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name != OWNER]  # no temp files left
    with pytest.raises(RlhlsError, match="unknown PPO hyperparameter"):
        run_train(_args("heppo-ppo", "--out", str(tmp_path / "x"), "--set", "nope=1", *TINY))
    with pytest.raises(RlhlsError, match="unknown TRPO hyperparameter"):
        run_train(_args("cpp-trpo-ant", "--out", str(tmp_path / "y"), "--set", "num_minibatches=4"))
    with pytest.raises(RlhlsError, match="no checkpoint"):
        run_train(_args("heppo-ppo", "--out", str(tmp_path / "z"), "--resume", *TINY))


def test_heppo_ppo_humanoid_smoke(tmp_path):
    out = tmp_path / "h"
    assert run_train(_args("heppo-ppo", "--steps", "2048", "--num-envs", "2", "--num-steps", "1024",
                           "--set", "update_epochs=1", "--out", str(out), "--quiet")) == 0
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 1 and rows[0]["env_steps"] == "2048"
    assert int(rows[0]["episodes"]) > 0 and float(rows[0]["episodic_return"]) > 0
    assert float(rows[0]["value_sigma"]) > 0  # exp 5: values block-standardized
