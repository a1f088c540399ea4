"""A2C (host/algorithms/a2c.py): CLI smoke in fp32 and mixed precision, exact resume, n-step returns, loss
gradients, learning InvertedPendulum."""

import json

import numpy as np
import pytest

from rlhls.host.checkpoint import load_checkpoint
from rlhls.cli import main as cli_main
from rlhls.core.errors import RlhlsError
from rlhls.designs.network import Dense, Network, Tanh
from rlhls.designs.registry import get_design
from rlhls.host.algorithms.a2c import A2C, a2c_loss, resolve_hyperparams
from rlhls.host.gae import gae_reference
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train

DESIGN = get_design("apdrl-a2c-invpendulum")


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        hi = f()
        x[i] = old - eps
        lo = f()
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_cli_smoke(tmp_path, precision):
    out = tmp_path / precision
    argv = ["train", DESIGN.name, "--steps", "400", "--precision", precision, "--out", str(out), "--quiet",
            "--set", "rollouts_per_update=5"]
    assert cli_main(argv) == 0
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["200", "400"]
    for col in ("episodic_return", "policy_loss", "value_loss", "entropy", "grad_norm", "explained_variance", "loss_scale",
                "skipped_steps", "scale_shrinks", "scale_grows", "grad_overflows", "conv_overflows", "t_returns",
                "t_backprop"):
        assert col in rows[0]
    assert int(rows[-1]["rollouts"]) == 10 and np.isfinite(float(rows[-1]["value_loss"]))
    assert int(rows[0]["episodes"]) > 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == precision and cfg["hyperparams"]["optimizer"] == "rmsprop"
    if precision == "mixed":
        assert cfg["plan_source"] == "ilp" and {"returns", "loss", "policy.fc1.bwd", "value.fc3.upd"} <= set(cfg["plan"])
        assert float(rows[-1]["loss_scale"]) >= 1.0
    else:
        assert cfg["plan"] is None and float(rows[-1]["loss_scale"]) == 1.0
    assert (out / "reward.png").exists() and (out / "checkpoint.npz").exists()


def test_hyperparams_are_sb3_defaults():
    hp = resolve_hyperparams(DESIGN)
    assert (hp["n_steps"], hp["num_envs"], hp["learning_rate"], hp["gae_lambda"], hp["vf_coef"], hp["ent_coef"],
            hp["max_grad_norm"], hp["rmsprop_alpha"], hp["rmsprop_eps"]) == (5, 8, 7e-4, 1.0, 0.5, 0.0, 0.5, 0.99, 1e-5)
    assert hp["precision"] == "mixed" and hp["anneal_lr"] is True  # the AP-DRL design's choices
    with pytest.raises(RlhlsError, match="unknown A2C hyperparameter"):
        resolve_hyperparams(DESIGN, {"clip_coef": "0.2"})
    with pytest.raises(RlhlsError, match="optimizer"):
        resolve_hyperparams(DESIGN, {"optimizer": "sgd"})


def test_anneal_lr_is_rl_zoo_linear_schedule(tmp_path):
    """lr = lr0 * (1 - steps after the rollout / total steps), set before each rollout's gradient step."""
    hp = {"precision": "fp32", "rollouts_per_update": 5, "anneal_lr": True, "learning_rate": 1e-3}
    train(lambda: A2C(DESIGN, seed=0, hyperparams=hp), {"design": DESIGN.name}, tmp_path, steps=800,
          progress=False)  # 4 updates x 5 rollouts of 40 steps
    lrs = [float(r["learning_rate"]) for r in read_metrics(tmp_path / "metrics.csv")]
    assert lrs == pytest.approx([1e-3 * (1 - k / 20) for k in (5, 10, 15, 20)], abs=1e-15)
    const = A2C(DESIGN, seed=0, hyperparams={**hp, "anneal_lr": False})
    const.train_update(1, 4)
    assert const.opt.lr == 1e-3


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_resume_equals_uninterrupted(tmp_path, precision):
    hp = {"precision": precision, "rollouts_per_update": 5}

    def make():
        return A2C(DESIGN, seed=3, hyperparams=hp)

    cfg = {"design": DESIGN.name, "precision": precision}
    ra = train(make, cfg, tmp_path / "a", steps=600, progress=False)

    def kill(update):
        if update == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # killed during update 2
        train(make, cfg, tmp_path / "b", steps=600, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=600, resume=True, progress=False)
    a = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    b = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert ra["episodes"] == rb["episodes"] and len(ra["metrics"]) == 3
    strip = [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in ra["metrics"]]
    assert strip == [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rb["metrics"]]
    for net in ("policy", "value"):
        for k, v in a["trainer"][net].items():
            assert np.array_equal(v, b["trainer"][net][k])
    assert np.array_equal(a["trainer"]["log_std"], b["trainer"]["log_std"])
    assert a["trainer"]["mixed"] == b["trainer"]["mixed"]
    assert a["trainer"]["env"]["replay"]["seeds"] == b["trainer"]["env"]["replay"]["seeds"]


def _nstep_reference(r, v, d, boot, tv, gamma):
    """Explicit n-step returns: sum rewards forward from t until the first episode end or the rollout
    end, then add the discounted bootstrap (0 at a termination, V(final obs) at a truncation)."""
    T, N = r.shape
    R = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            acc, disc = 0.0, 1.0
            for k in range(t, T):
                acc += disc * r[k, n]
                disc *= gamma
                if d[k, n] == 1:
                    break
                if d[k, n] == 2:
                    acc += disc * tv[k, n]
                    break
            else:
                acc += disc * boot[n]
            R[t, n] = acc
    return R


def test_nstep_returns_with_termination_and_truncation():
    rng = np.random.default_rng(0)
    T, N, gamma = 5, 4, 0.9
    r, v, tv = rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N))
    boot = rng.normal(size=N)
    d = np.zeros((T, N), dtype=np.int64)
    d[1, 0] = 1            # terminated mid-rollout
    d[2, 1] = 2            # truncated mid-rollout: bootstrap V(final obs)
    d[4, 2] = 1            # terminated on the last step: no bootstrap
    d[0, 3], d[3, 3] = 2, 1
    ref = _nstep_reference(r, v, d, boot, tv, gamma)
    adv, ret = gae_reference(r, v, d, boot, gamma, 1.0, tv)  # SB3 gae_lambda = 1
    assert np.allclose(ret, ref, atol=1e-12) and np.allclose(adv, ref - v, atol=1e-12)
    # the trainer's returns node (fp32 plan: PS storage) is the same recurrence, rounded to fp32
    t = A2C(DESIGN, seed=0, hyperparams={"precision": "fp32", "gamma": gamma})
    try:
        a2, r2 = t.returns(r, v, d, tv, boot, {"returns": 0.0})
    finally:
        t.close()
    assert np.allclose(r2, ref, rtol=1e-6, atol=1e-6) and np.allclose(a2, ref - v, rtol=1e-6, atol=1e-6)
    assert np.array_equal(r2, r2.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("kind", ["gaussian", "logits", "probs"])
def test_loss_gradients_match_finite_differences(kind):
    rng = np.random.default_rng(1)
    B, A = 6, 3
    adv, ret, v = rng.normal(size=B), rng.normal(size=B), rng.normal(size=B)
    log_std = rng.normal(size=A) * 0.3 if kind == "gaussian" else None
    if kind == "gaussian":
        out, act = rng.normal(size=(B, A)), rng.normal(size=(B, A))
    else:
        z = rng.normal(size=(B, A))
        out = z if kind == "logits" else np.exp(z) / np.exp(z).sum(1, keepdims=True)
        act = rng.integers(0, A, size=B)
    kw = dict(softmax=kind == "probs", ent_coef=0.05, vf_coef=0.5)

    def loss():
        return a2c_loss(out, v, act, adv, ret, log_std=log_std, **kw)[0]

    _, st, g_out, g_v, g_ls = a2c_loss(out, v, act, adv, ret, log_std=log_std, **kw)
    assert np.isclose(st["value_loss"], np.mean((ret - v) ** 2))  # SB3: F.mse_loss, no 1/2
    assert np.allclose(g_out, _fd(loss, out), atol=1e-6)
    assert np.allclose(g_v, _fd(loss, v), atol=1e-6)
    if kind == "gaussian":
        assert np.allclose(g_ls, _fd(loss, log_std), atol=1e-6)


def test_loss_gradients_through_networks_match_finite_differences():
    rng = np.random.default_rng(2)
    pol = Network("policy", (4,), [Dense(8), Tanh(), Dense(2)], seed=0)
    val = Network("value", (4,), [Dense(8), Tanh(), Dense(1)], seed=1)
    obs, act = rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    adv, ret, log_std = rng.normal(size=5), rng.normal(size=5), np.array([0.1, -0.2])

    def loss():
        return a2c_loss(pol.forward(obs), val.forward(obs)[:, 0], act, adv, ret, log_std=log_std, ent_coef=0.01)[0]

    _, _, g_out, g_v, _ = a2c_loss(pol.forward(obs), val.forward(obs)[:, 0], act, adv, ret, log_std=log_std,
                                   ent_coef=0.01)
    pol.backward(g_out)
    val.backward(g_v[:, None])
    for net in (pol, val):
        for l in net.layers:
            for k, p in l.params.items():
                assert np.allclose(l.grads[k], _fd(loss, p), atol=1e-6), (net.name, l.name, k)


def test_a2c_learns_invertedpendulum():
    """fp32, seed 0, SB3 A2C defaults, 10k steps. Measured mean return of the last 10 episodes at
    10k steps, seeds 0/1/2: 130.6 / 119.6 / 73.4 (first 1000 steps: ~15; 40k steps: 154 / 87 / 305)."""
    t = A2C(DESIGN, seed=0, hyperparams={"precision": "fp32"})
    eps, U = [], LEARN_STEPS // t.steps_per_update
    try:
        for u in range(1, U + 1):
            eps += t.train_update(u, U)["_episodes"]
    finally:
        t.close()
    first = float(np.mean([e[1] for e in eps[:10]]))
    last10 = float(np.mean([e[1] for e in eps[-10:]]))
    assert last10 > LEARN_THRESHOLD and last10 > 3 * first, (first, last10)


LEARN_STEPS, LEARN_THRESHOLD = 10_000, 50.0
