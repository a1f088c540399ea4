"""TD3 (host/algorithms/td3.py): its update against a numpy reference (clipped double-Q target with
target policy smoothing, the actor through critic 1 only, delayed actor and target updates), a short
run of its design through the CLI in fp32, mixed and fixed-point precision, csim == emu, an
interrupted run resumed bit for bit, RL Zoo's td3.yml as published, and bad hyperparameters as one line."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rlhls.cli import main as cli_main
from rlhls.designs.design import NetSpec
from rlhls.designs.graph import build_graph
from rlhls.designs.nets import mlp
from rlhls.designs.registry import get_design
from rlhls.host.algorithms import get_algorithm
from rlhls.host.algorithms.td3 import TD3
from rlhls.host.checkpoint import load_checkpoint
from rlhls.host.hyperparams import read_config
from rlhls.host.runfolder import read_metrics
from rlhls.host.train import train_design

DESIGN = get_design("td3-pendulum")
ZOO = Path(__file__).parent / "data" / "rlzoo"
SHORT = {"learning_starts": 40, "batch_size": 8, "steps_per_update": 30}


def _tiny(name="td3-tiny-ref"):
    """td3-pendulum with 8-unit networks (a fast reference)."""
    nets = (NetSpec("actor", "actor", lambda s: mlp("actor", 3, (8,), 1, out_act="tanh", seed=s), target=True),
            NetSpec("qf1", "critic", lambda s: mlp("qf1", 4, (8,), 1, seed=s), target=True, extra_inputs=1),
            NetSpec("qf2", "critic", lambda s: mlp("qf2", 4, (8,), 1, seed=s), target=True, extra_inputs=1))
    return dataclasses.replace(DESIGN, name=name, networks=nets)


def _fwd(params, x, out_tanh=False):
    """The 1-hidden-layer MLP in float64 -> (y, cache)."""
    z1 = x @ params["fc1.W"] + params["fc1.b"]
    h = np.maximum(z1, 0.0)
    z2 = h @ params["fc2.W"] + params["fc2.b"]
    return (np.tanh(z2) if out_tanh else z2), (x, z1, h, z2)


def _bwd(params, cache, dy, out_tanh=False):
    """Gradients of that MLP for output gradient dy -> ({param: grad}, dx)."""
    x, z1, h, z2 = cache
    dz2 = dy * (1.0 - np.tanh(z2) ** 2) if out_tanh else dy
    dh = dz2 @ params["fc2.W"].T
    dz1 = dh * (z1 > 0)
    g = {"fc2.W": h.T @ dz2, "fc2.b": dz2.sum(0), "fc1.W": x.T @ dz1, "fc1.b": dz1.sum(0)}
    return g, dz1 @ params["fc1.W"].T


def _p(net):
    return {k: np.asarray(v, dtype=np.float64) for k, v in net.get_params().items()}


def test_update_matches_a_numpy_reference():
    """One critic step and one actor step of the trainer (fp32) against float64 numpy: the target
    y = r + gamma (1 - done) min(Q1', Q2') at a' = clip(mu'(s') + clip(noise), box), both critics'
    MSE gradients, and the actor's gradient of -mean Q1(s, mu(s)) (critic 2 plays no part)."""
    t = TD3(_tiny(), seed=2, hyperparams={"precision": "fp32", "target_policy_noise": 0.6,
                                          "target_noise_clip": 0.5, "gamma": 0.9})
    try:
        rng = np.random.default_rng(0)
        B = 16
        s, s2 = rng.uniform(-1, 1, (B, 3)), rng.uniform(-1, 1, (B, 3))
        a = rng.uniform(-2, 2, (B, 1))
        r, d = rng.normal(size=B), (rng.uniform(size=B) < 0.3).astype(np.float64)
        t.target_actor["fc2"].params["W"] *= 40.0  # saturate mu'(s') near +-2: the box clip takes part
        t.target_qf2["fc2"].params["b"] += 0.3  # the two targets differ: the min picks each
        grads = {}

        def capture(opt, views, g, max_grad_norm=None):
            grads.update({k: np.asarray(v, dtype=np.float64).copy() for k, v in g.items()})
            return "ok"

        t.mp_c.apply, t.mp_a.apply = capture, capture
        t.rng = np.random.default_rng(7)
        noise = np.random.default_rng(7).normal(0.0, 1.0, size=(B, 1))
        times = {k: 0.0 for k in ("target_forward", "update_forward", "backprop", "weight_update")}
        out = t.critic_step(s, s2, a, r, d, times)
        # reference
        mu2, _ = _fwd(_p(t.target_actor), s2, out_tanh=True)
        smooth = np.clip(mu2 * 2.0 + np.clip(0.6 * noise, -0.5, 0.5) * 2.0, -2.0, 2.0)
        assert (np.abs(smooth) == 2.0).any() and (np.abs(0.6 * noise) > 0.5).any()
        x2 = np.concatenate([s2, smooth], axis=1)
        q1t, q2t = _fwd(_p(t.target_critic), x2)[0][:, 0], _fwd(_p(t.target_qf2), x2)[0][:, 0]
        assert (q1t < q2t).any() and (q2t < q1t).any()
        y = r + 0.9 * (1.0 - d) * np.minimum(q1t, q2t)
        x = np.concatenate([s, a], axis=1)
        losses = []
        for inst, net in (("qf1", t.critic), ("qf2", t.qf2)):
            q, cache = _fwd(_p(net), x)
            losses.append(np.mean((q[:, 0] - y) ** 2))
            g, _ = _bwd(_p(net), cache, 2.0 * (q - y[:, None]) / B)
            for k, v in g.items():
                np.testing.assert_allclose(grads[f"{inst}.{k}"], v, rtol=2e-4, atol=1e-6, err_msg=f"{inst}.{k}")
        np.testing.assert_allclose(out["qf1_loss"], losses[0], rtol=1e-5)
        np.testing.assert_allclose(t._q2[-1][0], losses[1], rtol=1e-5)
        # the actor through critic 1: d(-mean Q1(s, 2 tanh(...)))/d theta
        grads.clear()
        t.actor_step(s, times)
        pa, p1 = _p(t.actor), _p(t.critic)
        mu, ca = _fwd(pa, s, out_tanh=True)
        _, cq = _fwd(p1, np.concatenate([s, 2.0 * mu], axis=1))
        _, dx = _bwd(p1, cq, np.full((B, 1), -1.0 / B))
        ga, _ = _bwd(pa, ca, dx[:, 3:] * 2.0, out_tanh=True)
        assert set(grads) == {f"actor.{k}" for k in ga}
        for k, v in ga.items():
            np.testing.assert_allclose(grads[f"actor.{k}"], v, rtol=2e-4, atol=1e-7, err_msg=k)
    finally:
        t.close()


def test_actor_and_targets_step_every_policy_delay_critic_steps():
    t = TD3(_tiny("td3-tiny-delay"), seed=0, hyperparams={"precision": "fp32", "learning_starts": 4,
                                                           "batch_size": 4, "steps_per_update": 1,
                                                           "policy_delay": 3})
    try:
        changed = []
        for u in range(1, 13):
            before = [n.get_params() for n in (t.critic, t.qf2, t.actor, t.target_actor, t.target_critic,
                                               t.target_qf2)]
            g = t.global_step
            row = t.train_update(u, 12)
            after = [n.get_params() for n in (t.critic, t.qf2, t.actor, t.target_actor, t.target_critic,
                                              t.target_qf2)]
            moved = [any(not np.array_equal(b[k], a[k]) for k in b) for b, a in zip(before, after)]
            changed.append((g, moved, row["train_steps"], row["actor_steps"]))
        for g, moved, n_c, n_a in changed:
            learns, acts = g > 4, g > 4 and g % 3 == 0
            assert moved[:2] == [learns, learns] and n_c == int(learns), (g, moved)
            assert moved[2:] == [acts] * 4 and n_a == int(acts), (g, moved)
        assert sum(n_a for *_, n_a in changed) == 2  # steps 6 and 9
    finally:
        t.close()


def _fast_plan(design, batch=None, time_limit=None):
    """A mixed plan (matrix multiplies on the PL, the second layers' forward on the AIE, updates and Polyak
    steps on the PS) in place of the in-process ILP."""
    return {n.name: "PS" if n.name.endswith((".upd", ".soft")) else ("AIE" if n.name.endswith("fc2.fwd") else "PL")
            for n in build_graph(design, batch).nodes}


def _args(out, precision, steps=60, **extra):
    args = ["td3-pendulum", "--steps", str(steps), "--precision", precision, "--out", str(out), "--quiet"]
    for k, v in {**SHORT, **extra}.items():
        args += ["--set", f"{k}={v}"]
    return args


def test_cli_train_mixed(tmp_path, monkeypatch):
    monkeypatch.setattr("rlhls.host.mixed.default_plan", _fast_plan)
    out = tmp_path / "mixed"
    assert cli_main(["train", *_args(out, "mixed")]) == 0
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["30", "60"]
    assert [int(r["train_steps"]) for r in rows] == [0, 19]  # global steps 41..59
    assert [int(r["actor_steps"]) for r in rows] == [0, 9]  # 42, 44, ..., 58
    for col in ("qf1_loss", "qf2_loss", "critic_loss", "qf1_values", "qf2_values", "actor_loss"):
        assert np.isfinite(float(rows[-1][col])), col
    assert float(rows[-1]["qf1_loss"]) != float(rows[-1]["qf2_loss"])  # two critics, two initialisations
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm"] == "td3" and cfg["precision"] == "mixed"
    assert {"qf1@pi.fc1.bwd", "qf2.fc3.upd", "qf2.fc1.tfwd"} <= set(cfg["plan"])
    assert float(rows[-1]["critic_loss_scale"]) > 1.0  # FP16 gradients on the PL: loss scaling
    assert (out / "reward.png").exists() and (out / "checkpoint.npz").exists()


def test_graph_profile_and_plan_of_the_design():
    """What `rlhls graph / profile / partition / perf` read: the twin critics' nodes, the actor's every
    policy_delay critic steps, a profile row for every node."""
    from rlhls.partition.profile import profile_design

    g = build_graph(DESIGN)
    runs = {n.name: n.runs for n in g.nodes}
    assert runs["qf2.fc1.tfwd"] == runs["qf2.fc2.upd"] == runs["actor.fc1.tfwd"] == runs["critic_loss"] == 1.0
    assert runs["actor.fc1.fwd"] == runs["qf1@pi.fc1.bwd"] == runs["actor_loss"] == runs["qf2.fc1.soft"] == 0.5
    assert not any(n.startswith("qf2@pi") for n in runs)
    assert {e.src for e in g.edges if e.dst == "critic_loss"} == {"qf1.fc3.fwd", "qf1.fc3.tfwd", "qf2.fc3.fwd",
                                                                   "qf2.fc3.tfwd"}
    prof = profile_design(DESIGN)
    assert {r.node for r in prof} == set(runs)


def test_fixed_point_formats_train_without_loss_scaling():
    """F-DDPG's fixed<32,8> storage / fixed<64,16> accumulators on the PL: trained in them, loss scale 1."""
    from rlhls.designs.formats import FixedFormat

    d = dataclasses.replace(_tiny("td3-tiny-fixed"), formats={**DESIGN.formats, "pl": "fixed<32,8,RND,SAT>",
                                                              "pl_acc": "fixed<64,16,RND,SAT>"})
    hp = {**SHORT, "precision": "mixed"}
    ts = {k: TD3(d if k == "fixed" else _tiny("td3-tiny-fp16"), seed=0, hyperparams=hp,
                 assignment=_fast_plan(d, 8)) for k in ("fixed", "fp16")}
    try:
        rows = {k: [t.train_update(u, 2) for u in (1, 2)][-1] for k, t in ts.items()}
        assert isinstance(ts["fixed"].mp_c.precision("PL").storage, FixedFormat)
        assert rows["fixed"]["critic_loss_scale"] == 1.0 == rows["fixed"]["actor_loss_scale"]
        assert rows["fp16"]["critic_loss_scale"] > 1.0
        assert rows["fixed"]["train_steps"] == 19 and np.isfinite(rows["fixed"]["qf2_loss"])
        assert rows["fixed"]["qf1_loss"] != rows["fp16"]["qf1_loss"]
    finally:
        for t in ts.values():
            t.close()


def test_csim_equals_emu(tmp_path, csim_calls, monkeypatch):
    monkeypatch.setattr("rlhls.host.runner.plot_rewards", lambda *a, **k: None)  # not under test here

    def unit_of(n):  # every layer node and update on the PL; the second layers' matrix multiplies on the AIE
        if n.mm and ".fc2." in n.name and n.kind in ("mm.fwd", "mm.bwd"):
            return "AIE"
        return "PL" if n.kind in ("mm.fwd", "mm.bwd", "act.fwd", "act.bwd", "upd") else "PS"

    hp = {**SHORT, "steps_per_update": 25, "learning_starts": 30, "batch_size": 4}
    design = _tiny("td3-tiny-csim")
    alg = get_algorithm("td3")
    plan = {n.name: unit_of(n) for n in build_graph(design, alg.batch(alg.hyperparams(design, hp))).nodes}
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(design, out=tmp_path / backend, steps=50, backend=backend, precision="mixed", plan=plan,
                           overrides=hp, progress=False)
        runs[backend] = [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")}
                         for r in read_metrics(run.folder / "metrics.csv")]
    assert int(runs["emu"][-1]["train_steps"]) == 19 and int(runs["emu"][-1]["actor_steps"]) == 9
    assert runs["emu"] == runs["csim"]
    assert {"dense_forward", "dense_backward", "weight_gradient", "weight_update"} <= set(csim_calls)
    a, b = (load_checkpoint(tmp_path / k / "checkpoint.npz")["trainer"] for k in ("emu", "csim"))
    for net in ("actor", "qf1", "qf2", "target_qf2"):
        for k, v in a[net].items():
            assert np.array_equal(v, b[net][k]), (net, k)


def _same(x, y, where):
    """Nested checkpoint state equal bit for bit."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys(), where
        for k in x:
            _same(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f"{where}[{i}]")
    else:
        assert np.array_equal(np.asarray(x), np.asarray(y)), where


def _keys(x):
    return {k for k, v in x.items() for k in ([k] + (list(_keys(v)) if isinstance(v, dict) else []))}


def test_resume_in_two_halves_equals_one_run(tmp_path, monkeypatch):
    monkeypatch.setattr("rlhls.host.runner.plot_rewards", lambda *a, **k: None)  # not under test here
    d = _tiny("td3-tiny-resume")
    kw = dict(precision="mixed", overrides=SHORT, progress=False, seed=3, plan=_fast_plan(d, SHORT["batch_size"]))
    train_design(d, out=tmp_path / "one", steps=90, **kw)
    train_design(d, out=tmp_path / "two", steps=60, **kw)
    train_design(d, out=tmp_path / "two", steps=90, resume=True, **kw)
    a, b = (load_checkpoint(tmp_path / k / "checkpoint.npz")["trainer"] for k in ("one", "two"))
    assert a["global_step"] == b["global_step"] == 90
    for net in ("actor", "qf1", "qf2", "target_actor", "target_qf1", "target_qf2"):
        for k, v in a[net].items():
            assert np.array_equal(v, b[net][k]), (net, k)
    for opt in ("opt_actor", "opt_critic"):
        _same(a[opt], b[opt], opt)
    assert any(k.startswith("qf2.") for k in _keys(a["opt_critic"]))  # one Adam over both critics
    assert a["rng"] == b["rng"] and a["mixed"] == b["mixed"]
    drop = lambda rows: [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]  # noqa: E731
    assert drop(read_metrics(tmp_path / "one" / "metrics.csv")) == drop(read_metrics(tmp_path / "two" / "metrics.csv"))


def test_rlzoo_td3_entries_load_as_published():
    for name, steps in (("td3-pendulum", 20_000), ("td3-lunarcont", 300_000)):
        d = get_design(name)
        cfg = read_config(str(ZOO / "td3.yml"), d)
        assert cfg == {"total_timesteps": steps, "gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000,
                       "noise": "gaussian", "exploration_noise": 0.1, "learning_rate": 1e-3,
                       "net_arch": {"actor": (400, 300), "critic": (400, 300)}}
        hp = get_algorithm("td3").hyperparams(d, config={k: v for k, v in cfg.items() if k not in ("net_arch",
                                                                                                     "total_timesteps")})
        assert (hp["policy_frequency"], hp["target_policy_noise"], hp["target_noise_clip"], hp["tau"],
                hp["batch_size"]) == (2, 0.2, 0.5, 0.005, 256)  # SB3's TD3 defaults where the entry is silent
        # the design's own values are the entry's
        assert all(d.hyperparams[k] == v for k, v in cfg.items() if k not in ("net_arch",))


def test_td3_keys_are_honoured_not_ignored(tmp_path, caplog):
    yml = tmp_path / "td3.yml"
    yml.write_text("Pendulum-v1:\n  policy_delay: 3\n  target_policy_noise: 0.3\n  target_noise_clip: 0.4\n")
    with caplog.at_level("WARNING", logger="rlhls"):
        cfg = read_config(str(yml), DESIGN)
    assert cfg == {"policy_frequency": 3, "target_policy_noise": 0.3, "target_noise_clip": 0.4}
    assert not [r for r in caplog.records if "ignored" in r.getMessage()]


def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("bad, words", [
    ("policy_delay=0", ["policy_frequency = 0", ">= 1"]),
    ("target_noise_clip=-0.1", ["target_noise_clip = -0.1", ">= 0"]),
    ("target_policy_noise=nan", ["target_policy_noise", "finite"]),
])
def test_bad_hyperparameter_is_one_line_and_nothing_written(tmp_path, capsys, bad, words):
    (tmp_path / "keep.txt").write_text("mine")
    before = _files(tmp_path)
    out = tmp_path / "run"
    assert cli_main(["train", "td3-pendulum", "--steps", "10", "--out", str(out), "--set", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "Traceback" not in err and err.startswith("rlhls: error:"), err
    for w in words:
        assert w in err, err
    assert _files(tmp_path) == before and not out.exists()
