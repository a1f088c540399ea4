"""Evaluation of the deterministic policy (host/evaluation.py), the TensorBoard event files
(host/metrics.py), rlhls.load(...).predict and ``rlhls eval``."""

import json
import types

import gymnasium as gym
import numpy as np
import pytest

import rlhls
from rlhls.cli import main
from rlhls.designs.registry import get_design
from rlhls.host.checkpoint import load_checkpoint
from rlhls.host.runfolder import read_metrics
from rlhls.host.train import train_design

# short runs: CartPole DQN learns from step 300 on, two 500-step updates
DQN = ("apdrl-dqn-cartpole", {"learning_starts": 300, "steps_per_update": 500, "precision": "fp32"}, 1000)
DQN_MIXED = ("apdrl-dqn-cartpole", {"learning_starts": 300, "steps_per_update": 500, "precision": "mixed"}, 1000)
DDPG = ("apdrl-ddpg-lunarcont", {"learning_starts": 170, "steps_per_update": 100, "batch_size": 16,
                                 "precision": "fp32"}, 300)
A2C = ("apdrl-a2c-invpendulum", {"num_envs": 2, "rollouts_per_update": 4}, 120)  # mixed (the design's)
PPO = ("heppo-ppo", {"num_envs": 2, "num_steps": 32, "num_minibatches": 4, "update_epochs": 2}, 192)
TRPO = ("cpp-trpo-humanoid", {"num_steps": 64, "value_minibatch": 32, "value_epochs": 2}, 128)
PPO_ENV = "InvertedPendulum-v5"


def _train(spec, out, *, env=None, **hp):
    name, over, steps = spec
    return train_design(get_design(name), out=out, steps=steps, env_id=env, overrides={**over, **hp}, progress=False)


def _comparable(rows):
    # wall-clock columns differ between runs; everything else must be identical
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def _same(a, b) -> bool:
    """Nested checkpoint states equal, arrays bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")
    return a == b or (a != a and b != b)


def test_dqn_evaluation_is_deterministic_and_rlhls_eval_gives_the_same(tmp_path, capsys):
    out = tmp_path / "dqn"
    run = _train(DQN, out, eval_every=500, eval_episodes=5)
    rows = read_metrics(out / "eval.csv")
    assert [r["env_steps"] for r in rows] == ["500", "1000"] and {r["episodes"] for r in rows} == {"5"}
    assert run.evaluations[-1]["mean_return"] == float(rows[-1]["mean_return"])
    policy = rlhls.load(out)
    res = policy.evaluate(episodes=5)
    assert res == policy.evaluate(episodes=5)  # deterministic
    assert res["mean_return"] == float(rows[-1]["mean_return"]) and res["std_return"] == float(rows[-1]["std_return"])
    assert res["mean_length"] == float(rows[-1]["mean_length"])
    assert main(["eval", str(out), "--episodes", "5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["returns"] == res["returns"] and cli["mean_return"] == res["mean_return"] and cli["seed"] == 0
    # the evaluation episodes are seeded apart from training: another seed plays other episodes
    other = policy.evaluate(episodes=5, seed=1)
    assert other["returns"] != res["returns"]
    # a GIF of the first episode
    gif = tmp_path / "cartpole.gif"
    assert main(["eval", str(out), "--episodes", "1", "--gif", str(gif)]) == 0
    from PIL import Image

    with Image.open(gif) as im:
        # one frame a step (Pillow merges frames that repeat the one before)
        assert im.format == "GIF" and res["lengths"][0] // 2 < im.n_frames <= res["lengths"][0]


def _scalars(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]
            if t != "charts/SPS" and not t.startswith("time/")}  # wall-clock tags differ between runs


@pytest.mark.parametrize("spec,env", [(DQN, None), (PPO, PPO_ENV)], ids=["dqn", "ppo"])
def test_evaluation_changes_no_training_bit_and_resumes_exactly(tmp_path, monkeypatch, spec, env):
    per = spec[2] // 3 if spec is PPO else 500
    steps = spec[2]
    on, off, cut = tmp_path / "on", tmp_path / "off", tmp_path / "cut"
    _train(spec, on, env=env, eval_every=per, eval_episodes=2)
    _train(spec, off, env=env, eval_episodes=0)
    assert not (off / "eval.csv").exists()
    assert len(read_metrics(on / "eval.csv")) == steps // per
    assert _comparable(read_metrics(on / "metrics.csv")) == _comparable(read_metrics(off / "metrics.csv"))
    assert (on / "episodes.csv").read_text() == (off / "episodes.csv").read_text()
    assert _same(load_checkpoint(on / "checkpoint.npz")["trainer"], load_checkpoint(off / "checkpoint.npz")["trainer"])

    from rlhls.host import runner

    evaluate = runner._evaluate

    def kill(trainer, update, *a):
        if update == 2:  # killed in update 2's evaluation: its TensorBoard scalars are written, its checkpoint not
            raise KeyboardInterrupt
        return evaluate(trainer, update, *a)

    with monkeypatch.context() as m:
        m.setattr(runner, "_evaluate", kill)
        with pytest.raises(KeyboardInterrupt):
            _train(spec, cut, env=env, eval_every=per, eval_episodes=2)
    assert len(read_metrics(cut / "eval.csv")) == 1 and len(read_metrics(cut / "metrics.csv")) == 1
    name, over, _ = spec
    train_design(get_design(name), out=cut, steps=steps, env_id=env, overrides={**over, "eval_every": per,
                                                                                 "eval_episodes": 2},
                 progress=False, resume=True)
    assert (cut / "eval.csv").read_text() == (on / "eval.csv").read_text()
    assert _comparable(read_metrics(cut / "metrics.csv")) == _comparable(read_metrics(on / "metrics.csv"))
    assert _same(load_checkpoint(cut / "checkpoint.npz")["trainer"], load_checkpoint(on / "checkpoint.npz")["trainer"])
    # two event files; the second hides what the first wrote past the checkpoint: no update shows twice
    assert len(list(cut.glob("events.out.tfevents.*"))) == 2
    assert _scalars(cut) == _scalars(on)


_TAGS = {
    "dqn": ["losses/td_loss", "losses/q_values", "charts/epsilon", "mixed/loss_scale", "time/backprop"],
    "ddpg": ["losses/qf1_loss", "losses/qf1_values", "losses/actor_loss", "mixed/critic_loss_scale",
             "mixed/grad_overflows", "time/soft_update"],
    "a2c": ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/explained_variance",
            "charts/learning_rate", "mixed/loss_scale", "mixed/conv_overflows"],
    "ppo": ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
            "charts/learning_rate"],
    "trpo": ["losses/value_loss", "losses/entropy", "time/value_fit"],
}


@pytest.mark.parametrize("spec,env", [(DQN, None), (DDPG, None), (A2C, None), (PPO, PPO_ENV), (TRPO, None)],
                         ids=["dqn", "ddpg", "a2c", "ppo", "trpo"])
def test_tensorboard_files_have_cleanrl_tags(tmp_path, spec, env):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = _train(spec, tmp_path / "run", env=env, eval_episodes=2)
    files = list((tmp_path / "run").glob("events.out.tfevents.*"))
    assert len(files) == 1
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    algo = get_design(spec[0]).algorithm
    want = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "time/env_run", "eval/mean_return",
            "eval/std_return", *_TAGS[algo]}
    assert want <= tags, sorted(want - tags)
    # the values are the run's: every finished episode at the step it ended, the losses of metrics.csv
    ret = [(e.step, e.value) for e in acc.Scalars("charts/episodic_return")]
    assert ret == [(int(s), float(np.float32(r))) for s, r, _ in run.episodes]
    col = {"dqn": "td_loss", "ddpg": "qf1_loss", "a2c": "value_loss", "ppo": "value_loss", "trpo": "value_loss"}[algo]
    logged = {e.step: e.value for e in acc.Scalars(f"losses/{col}")}
    assert logged and all(logged[int(r["env_steps"])] == float(np.float32(r[col]))
                          for r in run.metrics if np.isfinite(r[col]))
    assert acc.Scalars("eval/mean_return")[-1].value == float(np.float32(run.evaluations[-1]["mean_return"]))


@pytest.mark.parametrize("spec,env", [(DQN, None), (DQN_MIXED, None), (DDPG, None), (A2C, None)],
                         ids=["dqn", "dqn-mixed", "ddpg", "a2c-mixed"])
def test_load_predict_equals_the_runs_last_policy(tmp_path, monkeypatch, spec, env):
    from rlhls.host.algorithms.base import TrainerBase

    kept = []  # the trainer as the run leaves it: its last policy
    close = TrainerBase.close
    monkeypatch.setattr(TrainerBase, "close", lambda self: (kept.append(self), close(self))[1])
    _train(spec, tmp_path / "run", env=env, eval_episodes=0)
    last = kept[-1]
    policy = rlhls.load(tmp_path / "run")
    assert policy._trainer is not last
    space = policy.observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(32)])
    obs = np.clip(obs, -2.0, 2.0).astype(space.dtype)  # CartPole's box is unbounded
    act, state = policy.predict(obs)
    assert state is None and len(act) == 32
    assert np.array_equal(act, last.predict(obs)) and act.dtype == last.predict(obs).dtype
    one, _ = policy.predict(obs[3])  # one observation: a batch of one (float32 BLAS may round another size apart)
    assert np.array_equal(one, last.predict(obs[3:4])[0]) and np.shape(one) == np.shape(act[3])
    assert isinstance(one, np.ndarray)  # as SB3: a discrete action is a 0-d array, never a numpy scalar
    if hasattr(last, "q_values"):  # the Q values too, bit for bit (a greedy action hides small differences)
        assert np.array_equal(policy._trainer.q_values(obs), last.q_values(obs))
    if get_design(spec[0]).algorithm in ("ddpg", "a2c"):
        assert len(np.unique(act, axis=0)) > 1  # continuous actions of a real policy, not a constant
    with pytest.raises(rlhls.core.errors.RlhlsError, match="observation of shape"):
        policy.predict(np.zeros((2, 3, 5)))


class _NoRender(gym.Env):
    """CartPole's spaces without rgb_array rendering."""

    metadata = {"render_modes": []}

    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 1.0, bool(self.np_random.random() < 0.1), False, {}


@pytest.fixture
def no_render_env():
    """An environment without rgb_array rendering, registered for one test only (others list them)."""
    from rlhls.host.envs import register_module
    from rlhls.host.envs.registry import ENVIRONMENT_IDS

    ENVIRONMENT_IDS.load()
    before = ENVIRONMENT_IDS.snapshot()
    register_module(types.SimpleNamespace(__name__="test_evaluation", ENVIRONMENTS={
        "rlhls/NoRender-v0": {"entry_point": _NoRender, "max_episode_steps": 50}}))
    yield "rlhls/NoRender-v0"
    ENVIRONMENT_IDS.restore(before)
    gym.registry.pop("rlhls/NoRender-v0", None)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, no_render_env):
    out = tmp_path / "norender"
    _train(DQN, out, env="rlhls/NoRender-v0", eval_episodes=2)
    assert len(read_metrics(out / "eval.csv")) == 1
    before = sorted(p.name for p in tmp_path.rglob("*"))

    def fails(*argv, match):
        assert main(["eval", *map(str, argv)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and match in err, err

    fails(out, "--gif", tmp_path / "x.gif", match="does not render rgb_array")
    fails(tmp_path / "missing", match="no such folder")
    (tmp_path / "empty").mkdir()
    fails(tmp_path / "empty", match="no checkpoint.npz")
    fails(out, "--gif", tmp_path / "nofolder" / "x.gif", match="does not exist")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((out / "config.json").read_text())
    (broken / "checkpoint.npz").write_bytes(b"PK\x03\x04 not a zip")
    fails(broken, match="checkpoint")
    (broken / "checkpoint.npz").write_bytes((out / "checkpoint.npz").read_bytes())
    (broken / "config.json").write_text("{")
    fails(broken, match="config.json")
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(before + ["empty", "broken", "config.json",
                                                                           "checkpoint.npz"])


def test_a_run_from_before_evaluation_resumes_and_old_columns_read_as_todays(tmp_path):
    """A run whose config.json has no eval_* hyperparameters resumes (they change nothing it trains);
    an older folder's metrics.csv (pg_loss, v_loss) reads with today's names."""
    out = tmp_path / "old"
    name, over, _ = A2C
    train_design(get_design(name), out=out, steps=40, overrides={**over, "eval_episodes": 0}, progress=False)
    cfg = json.loads((out / "config.json").read_text())
    for k in ("eval_every", "eval_episodes"):
        del cfg["hyperparams"][k]
    (out / "config.json").write_text(json.dumps(cfg))
    run = train_design(get_design(name), out=out, steps=80, overrides=over, progress=False, resume=True)
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 2 and all(r["policy_loss"] and r["value_loss"] for r in rows)
    assert len(run.evaluations) == 1 and (out / "eval.csv").is_file()
    old = tmp_path / "old_metrics.csv"
    old.write_text((out / "metrics.csv").read_text().replace("policy_loss", "pg_loss").replace("value_loss", "v_loss"))
    assert [r["policy_loss"] for r in read_metrics(old)] == [r["policy_loss"] for r in rows]
