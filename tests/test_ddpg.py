"""DDPG (host/algorithms/ddpg.py): CLI smoke in fp32 and mixed precision, exact resume, dQ/da and the actor
gradient against finite differences, Polyak math, per-instance plans, and a short learning check
(fp32 and mixed) that a broken actor gradient fails."""

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest

from rlhls.host.checkpoint import load_checkpoint
from rlhls.cli import main as cli_main
from rlhls.designs.formats import parse_format
from rlhls.designs.design import NetSpec
from rlhls.designs.graph import build_graph
from rlhls.designs.nets import mlp
from rlhls.designs.registry import get_design
from rlhls.host.algorithms.ddpg import DDPG, resolve_hyperparams, soft_update
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train

DESIGN = get_design("apdrl-ddpg-mntncarcont")
FP32 = parse_format("fp32")
TINY = {"learning_starts": 170, "steps_per_update": 100, "batch_size": 16}


def _args(out, precision, steps=200, **extra):
    args = ["apdrl-ddpg-mntncarcont", "--steps", str(steps), "--precision", precision, "--out", str(out), "--quiet"]
    for k, v in {**TINY, **extra}.items():
        args += ["--set", f"{k}={v}"]
    return args


def _fast_plan(design, batch=None, time_limit=None):
    """A mixed plan (matrix multiplies on the PL, the second layers' forward on the AIE, updates and
    soft updates on the PS) in place of the in-process ILP, which takes ~15 s for DDPG's graph."""
    return {n.name: "PS" if n.name.endswith((".upd", ".soft")) else ("AIE" if n.name.endswith("fc2.fwd") else "PL")
            for n in build_graph(design, batch).nodes}


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_cli_smoke(tmp_path, precision, monkeypatch):
    monkeypatch.setattr("rlhls.host.mixed.default_plan", _fast_plan)
    out = tmp_path / precision
    assert cli_main(["train", *_args(out, precision)]) == 0
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 2 and rows[-1]["env_steps"] == "200"
    for col in ("critic_loss_scale", "actor_loss_scale", "skipped_steps", "critic_skipped", "actor_skipped",
                "scale_shrinks", "scale_grows", "grad_overflows", "conv_overflows", "qf1_loss", "actor_loss",
                "t_backprop", "t_soft_update"):
        assert col in rows[0]
    assert rows[0]["train_steps"] == "0" and int(rows[1]["train_steps"]) == 200 - 171
    assert int(rows[1]["actor_steps"]) == 29  # policy_frequency 1 (SB3 / RL Zoo): every critic step
    assert np.isfinite(float(rows[-1]["qf1_loss"])) and np.isfinite(float(rows[-1]["actor_loss"]))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == precision and cfg["algorithm"] == "ddpg"
    if precision == "mixed":
        assert cfg["plan_source"] == "ilp" and "critic@pi.fc1.bwd" in cfg["plan"]
        assert float(rows[-1]["critic_loss_scale"]) >= 1.0 and int(rows[-1]["conv_overflows"]) >= 0
    else:
        assert cfg["plan"] is None
        assert float(rows[-1]["critic_loss_scale"]) == 1.0 == float(rows[-1]["actor_loss_scale"])
    assert (out / "reward.png").exists() and (out / "checkpoint.npz").exists()


def test_cli_errors(tmp_path, capsys):
    assert cli_main(["train", *_args(tmp_path / "a", "fp32"), "--set", "noise=pink"]) == 2
    assert "noise = 'pink'" in capsys.readouterr().err
    assert cli_main(["train", *_args(tmp_path / "b", "fp32"), "--plan", str(tmp_path / "none.json")]) == 2
    assert cli_main(["train", *_args(tmp_path / "c", "fp32"), "--set", "policy_frequency=0"]) == 2
    assert cli_main(["train", *_args(tmp_path / "d", "fp32"), "--env", "CartPole-v1"]) == 2
    hp = resolve_hyperparams(DESIGN)
    assert hp["tau"] == 0.005 and hp["batch_size"] == 256 and hp["policy_frequency"] == 1  # RL Zoo's config
    assert (hp["noise"], hp["exploration_noise"], hp["learning_starts"], hp["learning_rate"]) == ("ou", 0.5, 100, 1e-3)
    assert hp["precision"] == "mixed"
    lunar = resolve_hyperparams(get_design("apdrl-ddpg-lunarcont"))
    assert (lunar["gamma"], lunar["buffer_size"], lunar["learning_starts"], lunar["noise"]) == (0.98, 200_000, 10_000,
                                                                                                "gaussian")


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    """Pendulum's 200-step episode ends inside the run (OU reset, final_obs); the kill lands
    mid-episode (step 180) after training began (step 171), so Adam and the buffer are restored."""
    monkeypatch.setattr("rlhls.host.runner.plot_rewards", lambda *a, **k: None)  # not under test here
    hp = {"learning_starts": 170, "steps_per_update": 60, "batch_size": 16, "noise": "ou", "precision": "fp32"}

    def make():
        return DDPG(DESIGN, env_id="Pendulum-v1", seed=3, hyperparams=hp)

    cfg = {"design": DESIGN.name, "env": "Pendulum-v1"}
    ra = train(make, cfg, tmp_path / "a", steps=240, progress=False)

    def kill(update):
        if update == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(make, cfg, tmp_path / "b", steps=240, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=240, resume=True, progress=False)
    a = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    b = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert ra["episodes"] == rb["episodes"] and len(ra["episodes"]) == 1
    assert int(ra["metrics"][-1]["train_steps"]) == 60 and int(ra["metrics"][-2]["train_steps"]) == 9
    drop = lambda rows: [{k: repr(v) for k, v in r.items() if k != "wall_s" and not k.startswith("t_")}
                         for r in rows]  # repr: NaN == NaN
    assert drop(ra["metrics"]) == drop(rb["metrics"])
    ta, tb = a["trainer"], b["trainer"]
    for net in ("actor", "critic", "target_actor", "target_critic"):
        for k, v in ta[net].items():
            assert np.array_equal(v, tb[net][k]), (net, k)
    assert np.array_equal(ta["ou"], tb["ou"]) and ta["rng"] == tb["rng"]
    files = sorted(p.name for p in (tmp_path / "a" / "replay").iterdir())  # the same transitions appended
    assert files and all((tmp_path / d / "replay" / f).read_bytes() == (tmp_path / "a" / "replay" / f).read_bytes()
                         for d in "ab" for f in files) and ta["buffer"]["added"] == tb["buffer"]["added"] == 240
    assert ta["env"]["replay"]["seeds"] == tb["env"]["replay"]["seeds"]


def _float_actor(t, s):
    x = s
    for layer in t.actor.layers:
        x = layer.forward(x, None)
    return x * t.action_scale + t.action_bias


def test_dq_da_and_actor_gradient_match_finite_differences():
    """Pendulum: action scale 2, so the chain through the output scaling is checked too."""
    t = DDPG(DESIGN, env_id="Pendulum-v1", seed=1, hyperparams={"precision": "fp32", "learning_rate": 0.0})
    try:
        rng = np.random.default_rng(0)
        B = 8
        s = rng.uniform(-1, 1, size=(B, t.obs_dim))
        a = rng.uniform(-2, 2, size=(B, t.act_dim))
        # dQ/d(obs, a) of the critic at (s, a), through the mixed-precision backward (PS, FP32)
        x = np.concatenate([s, a], axis=1)
        t.mp_pi.forward(x, "fwd")
        dx = t.mp_pi.backward(np.ones((B, 1)), need_input_grad=True)
        assert t.mp_pi.unit("critic@pi.fc1.bwd") == "PS" and dx.shape == (B, t.obs_dim + t.act_dim)
        h = 1e-4
        for j in range(t.obs_dim + t.act_dim):
            e = np.zeros_like(x)
            e[:, j] = h
            fd = (t.critic.forward(x + e, None) - t.critic.forward(x - e, None))[:, 0] / (2 * h)
            np.testing.assert_allclose(dx[:, j], fd, rtol=1e-4, atol=1e-6)
        # the actor's gradient of -mean Q(s, mu(s)) (Adam at lr 0 leaves the weights as they are)
        before = t.actor.get_params()
        t.actor_step(s, {p: 0.0 for p in ("update_forward", "backprop", "weight_update")})
        assert all(np.array_equal(v, t.actor.get_params()[k]) for k, v in before.items())

        def loss():
            xa = np.concatenate([s, _float_actor(t, s)], axis=1)
            return -float(np.mean(t.critic.forward(xa, None)))

        checked = 0
        for name, idx in (("fc3", "W"), ("fc3", "b"), ("fc1", "b"), ("fc2", "W")):
            p, g = t.actor[name].params[idx], t.actor[name].grads[idx]
            flat = np.argsort(-np.abs(g).ravel())[:3]  # the largest entries: FD error is relative
            for i in flat:
                k = np.unravel_index(i, p.shape)
                old = p[k]
                hh = 1e-6  # small: a larger step crosses ReLU kinks
                p[k] = old + hh
                lp = loss()
                p[k] = old - hh
                lm = loss()
                p[k] = old
                np.testing.assert_allclose(g[k], (lp - lm) / (2 * hh), rtol=1e-3, atol=1e-8, err_msg=f"{name}.{idx}{k}")
                checked += 1
        assert checked == 10  # fc3.b has one entry
    finally:
        t.close()


def test_soft_update_math():
    t = DDPG(DESIGN, seed=0, hyperparams={"precision": "fp32", "tau": 0.25})
    try:
        rng = np.random.default_rng(1)
        for layer in t.actor.layers + t.critic.layers:
            for k, v in layer.params.items():
                v[...] = FP32.quantize(rng.normal(size=v.shape))
        online = {**{f"a.{k}": v for k, v in t.actor.get_params().items()},
                  **{f"c.{k}": v for k, v in t.critic.get_params().items()}}
        old = {**{f"a.{k}": v for k, v in t.target_actor.get_params().items()},
               **{f"c.{k}": v for k, v in t.target_critic.get_params().items()}}
        t.update_targets()
        t.update_targets()
        new = {**{f"a.{k}": v for k, v in t.target_actor.get_params().items()},
               **{f"c.{k}": v for k, v in t.target_critic.get_params().items()}}
        for k in online:  # two steps: t2 = o + (1 - tau)^2 (t0 - o), each rounded to FP32 (the masters)
            t1 = FP32.quantize(0.25 * online[k] + 0.75 * old[k])
            np.testing.assert_array_equal(new[k], FP32.quantize(0.25 * online[k] + 0.75 * t1))
            np.testing.assert_allclose(new[k], online[k] + 0.5625 * (old[k] - online[k]), rtol=1e-6, atol=1e-6)
    finally:
        t.close()
    net, tgt = DESIGN.build_networks(0)["actor"], DESIGN.build_networks(5)["actor"]
    ref = {k: v.copy() for k, v in net.get_params().items()}
    soft_update(net, tgt, 1.0)  # tau = 1: a hard copy
    assert all(np.array_equal(v, ref[k]) for k, v in tgt.get_params().items())


def test_mixed_plan_per_instance():
    """Every DDPG node of the graph is read; critic@pi's backward on the PL turns on the actor's loss scaling."""
    asg = {n.name: "PS" for n in build_graph(DESIGN, 16).nodes}
    asg["critic@pi.fc2.bwd"] = "PL"
    asg.update({"actor.fc2.fwd": "AIE", "actor.fc2.tfwd": "AIE", "actor.fc2.bwd": "AIE"})
    t = DDPG(DESIGN, seed=0, hyperparams={"precision": "mixed", "batch_size": 16}, assignment=asg)
    try:
        assert t.mp_a.scaler.enabled and t.mp_a.loss_scale() == 2.0 ** 15
        assert not t.mp_c.scaler.enabled and t.mp_c.loss_scale() == 1.0
        w = t.actor["fc2"].params["W"]
        assert np.array_equal(parse_format("bf16").quantize(w), w)  # AIE layer: BF16 master
        assert np.array_equal(t.target_actor["fc2"].params["W"], w)
        # The soft node keeps the target in FP32: a Polyak step far below BF16's spacing survives.
        before = t.target_actor["fc2"].params["W"].copy()
        t.actor["fc2"].params["W"][...] = parse_format("bf16").quantize(w + 0.01)
        t.update_targets()
        moved = t.target_actor["fc2"].params["W"] - before
        assert np.allclose(moved, 0.005 * (t.actor["fc2"].params["W"] - before), rtol=1e-3, atol=1e-7)
        assert np.count_nonzero(parse_format("bf16").quantize(t.target_actor["fc2"].params["W"]) != before) < moved.size // 2
        del asg["critic@pi.fc1.fwd"]
        with pytest.raises(Exception, match="critic@pi.fc1.fwd"):
            DDPG(DESIGN, seed=0, hyperparams={"precision": "mixed", "batch_size": 16}, assignment=asg)
    finally:
        t.close()


class _Bandit(gym.Env):
    """One-step task: s ~ U(-1, 1), reward -(a - 1.5 s)**2, so the best action 1.5 s lies inside the
    box [-2, 2] (action scale 2: the chain through the output scaling is exercised)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.s.copy(), {}

    def step(self, a):
        return self.s.copy(), -(float(a[0]) - 1.5 * float(self.s[0])) ** 2, True, False, {}


gym.register("RlhlsTestBandit-v0", entry_point=_Bandit)
_H = (32, 32)
BANDIT = dataclasses.replace(DESIGN, name="test-ddpg-bandit", env_id="RlhlsTestBandit-v0", obs_shape=(1,), networks=(
    NetSpec("actor", "actor", lambda s: mlp("actor", 1, _H, 1, out_act="tanh", out_gain=0.01, seed=s), target=True),
    NetSpec("critic", "critic", lambda s: mlp("critic", 2, _H, 1, seed=s), target=True, extra_inputs=1)))


def _bandit_mse(t):
    s = np.linspace(-1, 1, 41)[:, None]
    return float(np.mean((t.policy(s) - 1.5 * s) ** 2))


# Calibrated (600 steps, learning from step 200, batch 32, lr 1e-3, 32x32 networks), seeds 0/1/2:
# policy MSE to the best action 0.78 before, after fp32 0.027 / 0.019 / 0.017, mixed (PL + an
# AIE layer, loss scaling) 0.015 / 0.022 / 0.019; with the actor gradient's sign flipped 4.8.
LEARN_STEPS, LEARN_MSE = 600, 0.08


@pytest.mark.parametrize("precision, broken", [("fp32", False), ("mixed", False), ("fp32", True)])
def test_ddpg_learns_a_one_step_task(precision, broken):
    """Critic learns Q(s, a) = -(a - 1.5 s)^2 and the actor climbs dQ/da to mu(s) = 1.5 s; a
    sign-flipped actor gradient walks away from it, so the check can fail."""
    asg = None
    if precision == "mixed":  # matrix multiplies on the PL (FP16) but one on the AIE (BF16)
        asg = {n.name: "PS" if n.name.endswith((".upd", ".soft")) else ("AIE" if n.name.endswith("fc2.fwd") else "PL")
               for n in build_graph(BANDIT, 32).nodes}
    hp = {"learning_starts": 200, "steps_per_update": LEARN_STEPS, "batch_size": 32, "learning_rate": 1e-3,
          "precision": precision}
    t = DDPG(BANDIT, seed=0, hyperparams=hp, assignment=asg)
    try:
        if broken:
            orig = t.mp_a.backward
            t.mp_a.backward = lambda da, src=None, **kw: orig(-da, src, **kw)
        before = _bandit_mse(t)
        row = t.train_update(1, 1)
        after = _bandit_mse(t)
    finally:
        t.close()
    assert before > 0.7 and row["train_steps"] == LEARN_STEPS - 201
    if precision == "mixed":
        assert row["quantized"] == 1 and row["critic_loss_scale"] > 1.0
    if broken:
        assert after > 1.0, after
    else:
        assert after < LEARN_MSE, after
