"""Atari (host/envs/atari.py): CleanRL's wrapper stack, unclipped episodic returns, exact resume of
DQN-Breakout and PPO-MsPacman, and --precision mixed smoke on both designs."""

import json

import numpy as np
import pytest

from rlhls.host.checkpoint import load_checkpoint
from rlhls.cli import main as cli_main
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.host.algorithms.dqn import DQN, resolve_hyperparams as dqn_hyperparams
from rlhls.host.envs.atari import ATARI_BUFFER_CAP, is_atari, make_atari, replay_bytes
from rlhls.host.envs import EpisodeTracker, ReplayableVecEnv
from rlhls.host.algorithms.ppo import PPO
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train

DQN_SHORT = {"learning_starts": 30, "buffer_size": 300, "steps_per_update": 40, "train_frequency": 8,
             "target_network_frequency": 40, "batch_size": 4, "eval_episodes": 0}
PPO_SHORT = {"num_envs": 2, "num_steps": 16, "num_minibatches": 4, "update_epochs": 1, "experiment": 0}


def _dqn_args(out, precision, steps=120):
    args = ["train", "apdrl-dqn-breakout", "--steps", str(steps), "--precision", precision, "--out", str(out),
            "--quiet", "--seed", "1"]
    return args + [a for k, v in DQN_SHORT.items() for a in ("--set", f"{k}={v}")]


def _plan(design, mixed: dict) -> dict:
    """Every node on the PS except `mixed` ({node prefix: unit})."""
    asg = {}
    for n in build_graph(design).nodes:
        asg[n.name] = next((u for p, u in mixed.items() if n.name.startswith(p)), "PS")
    return asg


def test_wrapper_stack_and_unclipped_returns():
    assert is_atari("MsPacmanNoFrameskip-v4") and not is_atari("CartPole-v1")
    env = make_atari("BreakoutNoFrameskip-v4")
    assert type(env.unwrapped).__name__ == "AtariEnv"
    names = []
    e = env
    while e is not env.unwrapped:
        names.append(type(e).__name__)
        e = e.env
    assert names[:4] == ["FrameStackObservation", "ClipReward", "FireReset", "EpisodicLife"]
    assert "AtariPreprocessing" in names
    env.close()
    assert "FireReset" not in repr(make_atari("MsPacmanNoFrameskip-v4"))  # MsPacman has no FIRE to start

    envs = ReplayableVecEnv("MsPacmanNoFrameskip-v4", 2, seed=5)
    obs, _ = envs.reset()
    assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
    assert np.array_equal(obs[:, 0], obs[:, 3])  # the stack starts filled with the first frame
    tracker, rng = EpisodeTracker(2), np.random.default_rng(0)
    raw_sum, clipped, big = np.zeros(2), [], False
    for _ in range(120):
        obs, r, term, trunc, info = envs.step(rng.integers(0, 9, 2))
        assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
        assert np.array_equal(r, np.sign(info["raw_reward"]))  # learning sees sign(r)
        big |= bool(np.any(info["raw_reward"] > 1))
        raw_sum += info["raw_reward"]
        clipped.append(r)
        assert tracker.step(r, np.logical_or(term, trunc), info) == []  # no game over this early
    assert big and np.array_equal(tracker.ret, raw_sum)  # the running return is the game score
    assert set(np.unique(clipped)) <= {0.0, 1.0}
    envs.close()


def test_life_loss_ends_episode_not_game_and_replays():
    envs = ReplayableVecEnv("BreakoutNoFrameskip-v4", 1, seed=2)
    envs.reset()
    tracker, rng = EpisodeTracker(1), np.random.default_rng(1)
    lives_lost, games, state = 0, [], None
    for t in range(400):
        _, r, term, trunc, info = envs.step(rng.integers(0, 4, 1))
        if term[0] and not info["game_over"][0]:
            lives_lost += 1
            if lives_lost == 2 and state is None:
                state = envs.state()  # mid-game, after two life resets
        games += tracker.step(r, np.logical_or(term, trunc), info)
    assert lives_lost >= 4 and games  # a lost life is a terminal transition; the game is the episode
    assert all(length > 50 for _, length in games)
    assert state["life_resets"][0] and len(state["actions"][0]) > state["life_resets"][0][-1] - 1
    replay = ReplayableVecEnv("BreakoutNoFrameskip-v4", 1, seed=2)
    replay.restore(state)  # reset(seed) + actions + seedless life resets = the recorded observation
    assert np.array_equal(replay.obs, state["obs"])
    bad = dict(state, life_resets=[[]])
    with pytest.raises(Exception, match="not deterministic"):
        ReplayableVecEnv("BreakoutNoFrameskip-v4", 1, seed=2).restore(bad)
    assert replay_bytes(1_000_000) > 24 * 2 ** 30  # why the design's 1M buffer needs a cap here
    assert replay_bytes(1, next_obs=True) - replay_bytes(1) == 4 * 84 * 84


def _rows(run):
    """Metrics rows without times, NaN as None (NaN != NaN)."""
    return [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()
             if k != "wall_s" and not k.startswith("t_")} for r in run["metrics"]]


def _resume_equals_uninterrupted(tmp_path, make, steps, kill_at):
    def kill(update):
        if update == kill_at:
            raise KeyboardInterrupt

    cfg = {"design": "atari"}
    ra = train(make, cfg, tmp_path / "a", steps=steps, progress=False)
    with pytest.raises(KeyboardInterrupt):  # killed during update kill_at
        train(make, cfg, tmp_path / "b", steps=steps, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=steps, resume=True, progress=False)
    a = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    b = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert ra["episodes"] == rb["episodes"] and _rows(ra) == _rows(rb)
    pa, pb = a["trainer"]["params"], b["trainer"]["params"]
    flat = [(pa[k], pb[k]) for k in pa] if "fc1.W" in pa else [(pa[n][k], pb[n][k]) for n in pa for k in pa[n]]
    assert all(np.array_equal(x, y) for x, y in flat)
    files = sorted(p.name for p in (tmp_path / "a" / "replay").glob("*"))  # the same transitions appended
    assert files == sorted(p.name for p in (tmp_path / "b" / "replay").glob("*"))
    assert all((tmp_path / "a" / "replay" / f).read_bytes() == (tmp_path / "b" / "replay" / f).read_bytes()
               for f in files)
    return ra, a


def test_dqn_breakout_resume_exact(tmp_path):
    design = get_design("apdrl-dqn-breakout")

    def make():
        return DQN(design, seed=1, hyperparams=dict(DQN_SHORT, precision="fp32"))

    run, a = _resume_equals_uninterrupted(tmp_path, make, 120, kill_at=2)
    t = make()
    t.run_dir = tmp_path / "a"
    t.load_state_dict(a["trainer"])  # the buffer from replay/ at the counts the checkpoint holds
    buf, n = t.rb, t.rb.size
    assert buf.obs.dtype == np.uint8 and buf.obs.shape[1:] == (4, 84, 84) and n == 120
    assert set(np.unique(buf.rewards[:n])) <= {-1.0, 0.0, 1.0} and buf.dones[:n].any()  # lost lives end episodes
    assert buf.finals  # frames stored once; s' kept apart where lives were lost
    t.close()
    assert sum(r["train_steps"] for r in run["metrics"]) > 0


def test_ppo_mspacman_resume_exact(tmp_path):
    design = get_design("apdrl-ppo-mspacman")

    def make():
        return PPO(design, seed=4, hyperparams=dict(PPO_SHORT, precision="fp32"))

    _, a = _resume_equals_uninterrupted(tmp_path, make, 64, kill_at=2)
    assert a["trainer"]["env"]["obs"].dtype == np.uint8


def test_dqn_breakout_mixed_smoke(tmp_path):
    d = get_design("apdrl-dqn-breakout")
    asg = _plan(d, {"q.fc1.upd": "PL", "q.fc1.": "AIE", "q.fc2.fwd": "PL", "q.fc2.tfwd": "PL", "q.fc2.bwd": "PL", "loss": "PL"})
    plan = {"status": "Optimal", "makespan_us": 1.0, "gap": 0.0, "assignment": asg,
            "start_us": {n: 0.0 for n in asg}, "point": {n: "0" for n in asg}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "mixed"
    assert cli_main(_dqn_args(out, "mixed") + ["--plan", str(tmp_path / "plan.json")]) == 0
    rows = read_metrics(out / "metrics.csv")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == "mixed" and cfg["plan"]["q.fc1.fwd"] == "AIE" and cfg["plan"]["loss"] == "PL"
    # FP16 gradients: dynamic loss scaling from 2^15, halved at each overflow
    shrinks = sum(int(r["scale_shrinks"]) for r in rows)
    assert float(rows[-1]["loss_scale"]) == 2.0 ** (15 - shrinks) and int(rows[-1]["train_steps"]) > 0
    ck = load_checkpoint(out / "checkpoint.npz")["trainer"]["params"]
    bf16 = parse_format("bf16")
    assert np.array_equal(bf16.quantize(ck["fc1.W"]), ck["fc1.W"])  # AIE layer: BF16 weights
    assert not np.array_equal(bf16.quantize(ck["fc2.W"]), ck["fc2.W"])  # PL layer: FP32 master


def test_ppo_mspacman_mixed_smoke(tmp_path):
    d = get_design("apdrl-ppo-mspacman")
    asg = _plan(d, {"policy.fc1.upd": "PL", "value.fc1.upd": "PL", "policy.fc1.": "AIE", "value.fc1.": "AIE", "policy.fc2": "PL", "value.fc2": "PL",
                    "loss": "PL", "gae": "PL"})
    hp = dict(PPO_SHORT, precision="mixed")
    ppo = PPO(d, seed=0, hyperparams=hp, assignment=asg)
    assert ppo.mixed.mp_p.unit_of("fc1", "bwd") == "AIE" and ppo.mixed.mp_v.unit_of("fc2", "fwd") == "PL"
    row = ppo.train_update(1, 2)
    assert row["loss_scale"] == 2.0 ** 15 and row["quantized"] == 1 and row["skipped_steps"] == 0
    assert np.isfinite(row["policy_loss"]) and np.isfinite(row["value_loss"]) and np.isfinite(row["grad_norm"])
    bf16 = parse_format("bf16")
    w = ppo.nets["policy"]["fc1"].params["W"]
    assert np.array_equal(bf16.quantize(w), w)
    w2 = ppo.nets["value"]["fc2"].params["W"]
    assert not np.array_equal(bf16.quantize(w2), w2)
    ppo.close()


def test_dqn_breakout_records_game_scores_and_reads_frames_over_255():
    design = get_design("apdrl-dqn-breakout")
    assert dqn_hyperparams(design)["buffer_size"] == ATARI_BUFFER_CAP  # the design's 1M does not fit
    assert dqn_hyperparams(design, {"buffer_size": "300000"})["buffer_size"] == 300_000  # asked for: kept
    with pytest.raises(RlhlsError, match=r"buffer_size = 100000000: the replay buffer needs 2\.63e\+03 GiB"):
        dqn_hyperparams(design, {"buffer_size": "100000000"})  # ... unless no machine here holds it
    assert dqn_hyperparams(get_design("apdrl-dqn-cartpole"))["buffer_size"] == 10_000
    dqn = DQN(design, seed=0, hyperparams={"precision": "fp32", "learning_starts": 10_000, "steps_per_update": 400,
                                           "buffer_size": 400})
    raw, games, step = [], [], dqn.envs.step

    def recording_step(actions):  # the game score as the ALE gives it, summed per game
        out = step(actions)
        raw.append(float(out[4]["raw_reward"][0]))
        if out[4]["game_over"][0]:
            games.append((sum(raw), len(raw)))
            raw.clear()
        return out

    dqn.envs.step = recording_step
    row = dqn.train_update(1, 1)
    assert games and [(r, n) for _, r, n in row["_episodes"]] == games  # a game, not a life, unclipped
    # scored games, each over several lives (terminal transitions for learning, one episode recorded)
    assert sum(r for r, _ in games) > 0 and dqn.rb.dones.sum() > 2 * len(games)
    assert dqn.rb.obs.dtype == np.uint8
    # acting reads x / 255: the Q values equal a float64 forward of the scaled frames (to FP32 rounding)
    obs = dqn.obs
    q = dqn.q_values(obs)
    assert np.allclose(q, dqn.q.forward(obs / 255.0), rtol=1e-4, atol=1e-6)
    assert not np.allclose(q, dqn.q.forward(obs.astype(np.float64)), rtol=1e-2)
    # training too: the online and target forwards see the sampled frames / 255
    seen, fwd = [], dqn.mp.forward
    dqn.mp.forward = lambda x, phase="fwd", **kw: (seen.append((phase, np.array(x))), fwd(x, phase, **kw))[1]
    s, s2, a, r, d = dqn.rb.sample(np.random.default_rng(0), 4)
    dqn.train_step(s, s2, a, r, d, {p: 0.0 for p in ("target_forward", "update_forward", "backprop",
                                                       "weight_update")})
    assert [p for p, _ in seen] == ["tfwd", "fwd"]
    assert np.array_equal(seen[0][1], s2 / 255.0) and np.array_equal(seen[1][1], s / 255.0)
    dqn.close()
