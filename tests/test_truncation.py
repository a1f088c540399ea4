"""Truncated episode ends (done = 2) bootstrap from V(final observation), in the numpy reference,
the quantized GAE stage (emu and csim backends bit for bit) and the PPO rollout."""

import numpy as np

from rlhls.designs.kernels.gae import textbook_gae
from rlhls.designs.quantizer import RunningStats
from rlhls.designs.registry import get_design
from rlhls.host.backends import get_backend
from rlhls.host.gae import EXPERIMENTS, gae_reference, gae_stage
from rlhls.host.algorithms.ppo import PPO


def _batch(rng, T=24, N=5):
    r, v = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    d = np.zeros((T, N), dtype=np.uint8)
    u = rng.random((T, N))
    d[u < 0.08] = 1
    d[(u >= 0.08) & (u < 0.16)] = 2
    return r, v, d, rng.normal(size=N), rng.normal(size=(T, N))


def test_reference_bootstraps_truncation_and_cuts_the_recursion():
    rng = np.random.default_rng(3)
    r, v, d, boot, tv = _batch(rng)
    adv, rtg = gae_reference(r, v, d, boot, 0.99, 0.95, tv)
    a2, _ = textbook_gae(r, v, d, tv, boot, 0.99, 0.95)  # the GAE kernel's own float64 reference
    np.testing.assert_allclose(adv, a2, rtol=0, atol=1e-12)
    t, j = np.argwhere(d == 2)[0]
    assert adv[t, j] == r[t, j] + 0.99 * tv[t, j] - v[t, j]  # one-step: nothing after a truncation
    # truncation differs from termination exactly by the bootstrap term
    a_term, _ = gae_reference(r, v, np.where(d == 2, 1, d), boot, 0.99, 0.95)
    assert not np.allclose(adv, a_term)
    np.testing.assert_allclose(rtg, adv + v)


def test_quantized_stage_emu_and_csim_agree_with_truncations():
    rng = np.random.default_rng(4)
    r, v, d, boot, tv = _batch(rng, T=16, N=4)
    for exp in (4, 5):
        outs = []
        for be in (get_backend("emu"), get_backend("csim")):
            a, g, info = gae_stage(be, r, v, d, boot, gamma=0.99, lam=0.95, mode=EXPERIMENTS[exp], bits=8,
                                   reward_stats=RunningStats(), trunc_values=tv)
            outs.append((a, g))
        np.testing.assert_array_equal(outs[0][0], outs[1][0])
        np.testing.assert_array_equal(outs[0][1], outs[1][1])
        # and the numpy path (no backend) computes the same recurrence within fp32 rounding
        a_np, _, _ = gae_stage(None, r, v, d, boot, gamma=0.99, lam=0.95, mode=EXPERIMENTS[exp], bits=8,
                               reward_stats=RunningStats(), trunc_values=tv)
        np.testing.assert_allclose(outs[0][0], a_np, atol=1e-4)


def test_ppo_rollout_marks_truncations_and_bootstraps_them():
    # Pendulum-v1 only truncates (200 steps): a 256-step rollout ends every env's first episode by truncation
    ppo = PPO(get_design("heppo-ppo"), env_id="Pendulum-v1", seed=0,
              hyperparams={"num_envs": 2, "num_steps": 256, "num_minibatches": 4, "update_epochs": 1})
    seen = {}
    import rlhls.host.algorithms.ppo as mod
    orig = mod.gae_stage

    def spy(backend, rewards, values, dones, bootstrap, **kw):
        seen.update(dones=dones.copy(), tv=kw["trunc_values"].copy())
        return orig(backend, rewards, values, dones, bootstrap, **kw)
    mod.gae_stage = spy
    try:
        row = ppo.train_update(1, 1)
    finally:
        mod.gae_stage = orig
        ppo.close()
    assert row["truncations"] == 2 and row["episodes"] == 2
    assert (seen["dones"][199] == 2).all() and (seen["dones"] != 1).all()
    assert np.all(seen["tv"][199] != 0) and np.all(seen["tv"][:199] == 0)


def test_the_shared_rollout_loop_bootstraps_or_keeps_final_observations():
    # the loop A2C, PPO and TRPO share: with a value hook the truncated steps get V(final observation)
    # (tval) and the bootstrap V(last observations); without one it keeps the final observations for
    # the trainer to value after the rollout
    from types import SimpleNamespace

    from rlhls.host.algorithms.rollout import collect_rollout, start_envs
    from rlhls.host.envs import EpisodeTracker, ReplayableVecEnv, space_info

    def value(obs):
        return obs.sum(axis=1) + 100.0  # never 0: any tval set shows

    rows = {}
    for hook in (value, None):
        envs = ReplayableVecEnv("Pendulum-v1", 2, 0)
        t = SimpleNamespace(envs=envs, obs=None, tracker=EpisodeTracker(2), space=space_info(envs),
                            _env_action=lambda a: np.clip(a, -2.0, 2.0))
        times = {}
        start_envs(t, times)
        ro = collect_rollout(t, 205, times, 1000, act=lambda o: (np.zeros((2, 1)), None, None), value=hook)
        envs.close()
        assert ro.done.shape == (205, 2) and (ro.done[199] == 2).all() and ro.truncations == 2
        assert [e[0] for e in ro.episodes] == [1000 + 200 * 2] * 2 and ro.logp is None
        assert set(times) == {"env_run", "dnn_inference", "storing_trajectories"}
        f_t, f_i, f_obs = ro.finals
        assert list(f_t) == [199, 199] and list(f_i) == [0, 1] and f_obs.shape == (2, 3)
        # the final observation is not the next episode's first one (stored at step 200)
        assert not np.array_equal(f_obs, ro.obs[200])
        rows[hook] = ro
    assert np.array_equal(rows[value].tval[199], value(rows[value].finals[2]))
    assert np.count_nonzero(rows[value].tval) == 2 and rows[value].boot.shape == (2,)
    assert not rows[None].tval.any() and rows[None].boot is None
    assert np.array_equal(rows[value].obs, rows[None].obs)  # the same seeded episodes either way
