"""DQN (host/algorithms/dqn.py): CLI smoke in fp32 and mixed precision, exact resume, the replay buffer that
stores each observation once, learning CartPole."""

import json

import numpy as np
import pytest

from rlhls.host.checkpoint import load_checkpoint, save_checkpoint
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import get_design
from rlhls.cli import main as cli_main


def train_main(argv):
    return cli_main(["train", *argv])
from rlhls.host.algorithms.dqn import DQN, linear_schedule, resolve_hyperparams
from rlhls.host.algorithms.replay import ReplayBuffer
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train

DESIGN = get_design("apdrl-dqn-cartpole")
SHORT = {"learning_starts": 300, "steps_per_update": 500, "target_network_frequency": 200, "batch_size": 32}


def _short_args(out, precision, steps=1000):
    args = ["apdrl-dqn-cartpole", "--steps", str(steps), "--precision", precision, "--out", str(out), "--quiet"]
    for k, v in SHORT.items():
        args += ["--set", f"{k}={v}"]
    return args


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_cli_smoke(tmp_path, precision):
    out = tmp_path / precision
    assert train_main(_short_args(out, precision)) == 0
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 2 and rows[-1]["env_steps"] == "1000"
    for col in ("loss_scale", "skipped_steps", "scale_shrinks", "scale_grows", "grad_overflows", "conv_overflows",
                "td_loss", "epsilon", "t_backprop"):
        assert col in rows[0]
    assert int(rows[-1]["train_steps"]) > 0 and np.isfinite(float(rows[-1]["td_loss"]))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == precision
    if precision == "mixed":
        assert float(rows[-1]["loss_scale"]) >= 1.0 and cfg["plan_source"] == "ilp"
        assert set(cfg["plan"].values()) <= {"PS", "PL", "AIE"} and "q.fc1.bwd" in cfg["plan"]
    else:
        assert float(rows[-1]["loss_scale"]) == 1.0 and cfg["plan"] is None
    assert (out / "reward.png").exists() and (out / "checkpoint.npz").exists()


def test_cli_plan_file_and_errors(tmp_path, capsys):
    asg = {n: "PS" for n in json.loads(json.dumps(_all_nodes()))}
    asg.update({"q.fc2.fwd": "AIE", "q.fc2.tfwd": "AIE", "q.fc2.bwd": "AIE", "loss": "PL"})
    plan = {"status": "Optimal", "makespan_us": 1.0, "gap": 0.0, "assignment": asg,
            "start_us": {n: 0.0 for n in asg}, "point": {n: "0" for n in asg}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "planned"
    assert train_main(_short_args(out, "mixed", steps=500) + ["--plan", str(tmp_path / "plan.json")]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["plan"]["q.fc2.fwd"] == "AIE" and cfg["plan_source"] == "given"  # its content, not the path typed
    ck = load_checkpoint(out / "checkpoint.npz")
    w = ck["trainer"]["params"]["fc2.W"]
    from rlhls.designs.formats import parse_format
    assert np.array_equal(parse_format("bf16").quantize(w), w)  # AIE layer: weights kept in BF16
    assert train_main(_short_args(tmp_path / "x", "fp32", steps=500) + ["--plan", str(tmp_path / "plan.json")]) == 2
    assert "--plan" in capsys.readouterr().err
    assert train_main(["apdrl-dqn-cartpole", "--set", "loss=l1", "--out", str(tmp_path / "y"), "--quiet"]) == 2


def _all_nodes():
    from rlhls.designs.graph import build_graph

    return [n.name for n in build_graph(DESIGN).nodes]


def test_hyperparams_and_schedule():
    hp = resolve_hyperparams(DESIGN)
    assert hp["loss"] == "mse" and hp["batch_size"] == 128 and hp["train_frequency"] == 10
    assert hp["precision"] == "mixed" and hp["loss_scale_init"] == 2.0 ** 15
    with pytest.raises(RlhlsError, match="unknown DQN hyperparameter"):
        resolve_hyperparams(DESIGN, {"nope": 1})
    with pytest.raises(RlhlsError, match="smaller than num_envs"):
        resolve_hyperparams(DESIGN, {"buffer_size": 2, "num_envs": 4, "steps_per_update": 1000})
    assert linear_schedule(1.0, 0.05, 100, 0) == 1.0
    assert abs(linear_schedule(1.0, 0.05, 100, 50) - 0.525) < 1e-12
    assert linear_schedule(1.0, 0.05, 100, 1000) == 0.05


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_resume_equals_uninterrupted(tmp_path, precision):
    hp = dict(SHORT, precision=precision)

    def make():
        return DQN(DESIGN, seed=3, hyperparams=hp)

    cfg = {"design": DESIGN.name, "precision": precision}
    ra = train(make, cfg, tmp_path / "a", steps=1000, progress=False)

    def kill(update):
        if update == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # killed during update 2
        train(make, cfg, tmp_path / "b", steps=1000, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=1000, resume=True, progress=False)
    a = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    b = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert ra["episodes"] == rb["episodes"]
    assert (tmp_path / "b" / "metrics.csv").read_text().count("\n") == 1 + len(rb["metrics"]) == 3  # appended
    drop = ("wall_s",)
    assert [{k: v for k, v in r.items() if k not in drop and not k.startswith("t_")} for r in ra["metrics"]] == \
           [{k: v for k, v in r.items() if k not in drop and not k.startswith("t_")} for r in rb["metrics"]]
    for k, v in a["trainer"]["params"].items():
        assert np.array_equal(v, b["trainer"]["params"][k])
    assert a["trainer"]["buffer"]["added"] == b["trainer"]["buffer"]["added"]
    assert a["trainer"]["buffer"]["finals_rows"] == b["trainer"]["buffer"]["finals_rows"]
    files = sorted(p.name for p in (tmp_path / "a" / "replay").iterdir())  # the same transitions appended
    assert files and all((tmp_path / d / "replay" / f).read_bytes() == (tmp_path / "a" / "replay" / f).read_bytes()
                         for d in "ab" for f in files)
    assert a["trainer"]["env"]["replay"]["seeds"] == b["trainer"]["env"]["replay"]["seeds"]


def test_dqn_learns_cartpole():
    """fp32, seed 0, 20k steps, MSE (CleanRL's loss; the design's Huber diverges on CartPole, see
    host/algorithms/dqn.py), learning from step 1000 at lr 1e-3, else CleanRL's hyperparameters. Measured mean
    return of the last 10 episodes, seeds 0/1/2: 229.8 / 181.6 / 177.4 (random policy ~22)."""
    t = DQN(DESIGN, seed=0, hyperparams=dict(LEARN_HP, precision="fp32"))
    eps, U = [], LEARN_STEPS // 1000
    try:
        for u in range(1, U + 1):
            eps += t.train_update(u, U)["_episodes"]
    finally:
        t.close()
    last10 = float(np.mean([e[1] for e in eps[-10:]]))
    assert last10 > LEARN_THRESHOLD, last10


LEARN_STEPS, LEARN_THRESHOLD = 20_000, 100.0
LEARN_HP = {"loss": "mse", "learning_starts": 1000, "learning_rate": 1e-3}


@pytest.mark.parametrize("num_envs, capacity", [(1, 7), (2, 9), (3, 3), (2, 50)])
def test_replay_buffer_stores_obs_once_and_samples_what_was_added(tmp_path, num_envs, capacity):
    """s' is the same sub-env's following s except at episode ends: sampling returns exactly the
    (s, s') pairs added, through wrap-around, and a saved / loaded buffer samples the same."""
    rng = np.random.default_rng(capacity)
    rb = ReplayBuffer(capacity, (2,), np.float32)
    added = []  # (s, s') in the order added
    obs = rng.normal(size=(num_envs, 2)).astype(np.float32)
    for it in range(40):
        nxt = rng.normal(size=(num_envs, 2)).astype(np.float32)
        ended = rng.random(num_envs) < 0.3  # s' = final obs; the next s is a reset obs
        rb.add(obs, nxt, rng.integers(0, 4, num_envs), np.zeros(num_envs), ended)
        added += [(obs[i].copy(), nxt[i].copy()) for i in range(num_envs)]
        obs = np.where(ended[:, None], rng.normal(size=(num_envs, 2)).astype(np.float32), nxt)
        if it % 3 == 0:  # saved into a run folder now and then, as the runner does after an update
            small, snap = rb.save(tmp_path), rb.state()
        elif it % 3 == 1:  # appended, and "killed" before the checkpoint named it: `small` still loads
            rb.save(tmp_path)
            back = ReplayBuffer(capacity, (2,), np.float32)
            back.load(small, tmp_path)
            got = back.state()
            assert all(np.array_equal(got[k], snap[k]) for k in ("obs", "actions", "rewards", "dones", "tail"))
            assert (got["pos"], got["size"], got["added"]) == (snap["pos"], snap["size"], snap["added"])
            assert got["finals"].keys() == snap["finals"].keys()
            assert all(np.array_equal(got["finals"][p], snap["finals"][p]) for p in snap["finals"])
    assert rb.size == capacity
    live = added[-capacity:]
    pos = [(len(added) - capacity + k) % capacity for k in range(capacity)]
    assert all(np.array_equal(rb.obs[p], s) and np.array_equal(rb.next_obs_at([p])[0], s2)
               for p, (s, s2) in zip(pos, live))
    copy = ReplayBuffer(capacity, (2,), np.float32)
    save_checkpoint(tmp_path / "rb.npz", rb.state())  # through the checkpoint format: int keys, None, arrays
    copy.load(load_checkpoint(tmp_path / "rb.npz"))
    a, b = rb.sample(np.random.default_rng(1), 16), copy.sample(np.random.default_rng(1), 16)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    lean = ReplayBuffer(capacity, (2,), np.float32)  # from the run folder's files
    save_checkpoint(tmp_path / "small.npz", rb.save(tmp_path))
    lean.load(load_checkpoint(tmp_path / "small.npz"), tmp_path)
    c = lean.sample(np.random.default_rng(1), 16)
    assert all(np.array_equal(x, y) for x, y in zip(a, c)) and lean.finals.keys() == rb.finals.keys()
    with pytest.raises(RlhlsError, match="one per sub-env"):
        m = num_envs + 1
        rb.add(np.zeros((m, 2)), np.zeros((m, 2)), [0] * m, [0.0] * m, [False] * m)
