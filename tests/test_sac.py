"""SAC (host/algorithms/sac.py): the squashed Gaussian's log-prob node and its backward against a float64
reference and finite differences, one gradient step against a hand-written numpy SAC step (critic target with
the entropy term, actor loss alpha logp - min Q by finite differences, alpha's loss, Polyak step), `rlhls run`,
csim == emu (AP-DRL's FP16 and a fixed-point PL), resume bit for bit, RL Zoo's sac.yml entries, bad input."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlhls.cli import main as cli_main
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.host.algorithms import get_algorithm
from rlhls.host.algorithms.sac import SAC, squash_backward, squash_sample
from rlhls.host.checkpoint import load_checkpoint
from rlhls.host.hyperparams import apply_config, read_config
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train
from rlhls.host.train import train_design

ZOO = Path(__file__).parent / "data" / "rlzoo" / "sac.yml"
PEND = get_design("sac-pendulum")
SMALL = PEND.with_net_arch({"actor": (8,), "critic": (8,)})  # the same design with tiny hidden layers


def _ref_logp(out, eps):
    """SB3's SquashedDiagGaussian log-prob, float64: Normal(mu, std).log_prob(u) - log(1 - tanh(u)^2 + 1e-6)."""
    A = eps.shape[1]
    mu, log_std = out[:, :A], np.clip(out[:, A:], -20.0, 2.0)
    std = np.exp(log_std)
    u = mu + std * eps
    a = np.tanh(u)
    normal = -((u - mu) ** 2) / (2 * std ** 2) - np.log(std) - 0.5 * math.log(2 * math.pi)
    return a, normal.sum(1) - np.log(1 - a ** 2 + 1e-6).sum(1)


def test_log_prob_node_and_its_backward():
    rng = np.random.default_rng(0)
    B, A, alpha = 5, 2, 0.3
    out = rng.normal(size=(B, 2 * A))
    out[0, A] = 3.0  # a log_std above the clip: no gradient there (torch.clamp)
    eps = rng.normal(size=(B, A))
    a, logp, cache = squash_sample(out, eps)
    ra, rlogp = _ref_logp(out, eps)
    np.testing.assert_allclose(a, ra, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(logp, rlogp, rtol=1e-5, atol=1e-5)
    c1, c2 = rng.normal(size=A), rng.normal(size=A)

    def loss(o):  # the actor's loss with two made-up critics: mean(alpha logp - min(Q1(a), Q2(a)))
        x, lp = _ref_logp(o, eps)
        return np.mean(alpha * lp - np.minimum(x @ c1, (x ** 2) @ c2))

    first = (a @ c1) <= ((a ** 2) @ c2)
    dq = np.where(first[:, None], c1, 2 * a * c2)  # d min / da
    g = squash_backward(cache, -dq / B, np.full(B, alpha / B))
    h, fd = 1e-6, np.zeros_like(out)
    for i in range(B):
        for j in range(2 * A):
            p, m = out.copy(), out.copy()
            p[i, j] += h
            m[i, j] -= h
            fd[i, j] = (loss(p) - loss(m)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=2e-4, atol=1e-6)
    assert g[0, A] == 0.0 and fd[0, A] == pytest.approx(0.0, abs=1e-9)


def _fwd(net, x):
    for layer in net.layers:
        x = layer.forward(x, None)
    return x


def _fd(f, arrays, h=1e-6):
    """Central differences of scalar f() w.r.t. every element of `arrays` (changed in place, restored)."""
    out = []
    for a in arrays:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + h
            p = f()
            a[idx] = old - h
            m = f()
            a[idx] = old
            g[idx] = (p - m) / (2 * h)
        out.append(g)
    return out


def test_one_gradient_step_equals_a_numpy_sac_step(monkeypatch):
    """Critic gradients, the actor's (alpha logp - min Q through the updated critics) and alpha's, each
    against finite differences of the loss written out here in float64; then the Polyak step."""
    hp = {"precision": "fp32", "batch_size": 6, "learning_starts": 0, "ent_coef": "auto_0.2", "tau": 0.1}
    tr = SAC(SMALL, env_id="Pendulum-v1", seed=1, hyperparams=hp)
    try:
        rng = np.random.default_rng(5)
        B, A = 6, 1
        s, s2 = rng.normal(size=(B, 3)), rng.normal(size=(B, 3))
        a, r, d = rng.uniform(-1, 1, size=(B, A)), rng.normal(size=B), (rng.random(B) < 0.3).astype(np.float64)
        import copy

        actor0, q10, q20 = (copy.deepcopy(n) for n in (tr.actor, tr.qf1, tr.qf2))
        t10, t20 = copy.deepcopy(tr.target_q1), copy.deepcopy(tr.target_q2)
        alpha = math.exp(math.log(0.2))
        noise = np.random.default_rng()
        noise.bit_generator.state = tr.rng.bit_generator.state
        eps_next, eps_pi = noise.standard_normal((B, A)), noise.standard_normal((B, A))  # the trainer's order
        seen = {}
        for name in ("opt_c", "opt_a", "opt_alpha"):
            opt = getattr(tr, name)

            def record(params, grads, opt=opt, name=name, step=opt.step):
                seen[name] = {k: np.array(g, dtype=np.float64) for k, g in grads.items()}
                step(params, grads)
            monkeypatch.setattr(opt, "step", record)
        tr.gradient_step(s, s2, a, r, d, {}, target=True)
        # critics: y = r + gamma (1 - d) (min Q' (s', a') - alpha logp'), a' from the actor on s'
        a2, logp2 = _ref_logp(_fwd(actor0, s2), eps_next)
        x2 = np.concatenate([s2, a2], 1)
        y = r + 0.99 * (1 - d) * (np.minimum(_fwd(t10, x2)[:, 0], _fwd(t20, x2)[:, 0]) - alpha * logp2)
        x = np.concatenate([s, a], 1)
        for q, key in ((q10, "qf1"), (q20, "qf2")):
            arrays = [l.params[k] for l in q.layers for k in l.params]
            fd = _fd(lambda q=q: 0.5 * np.mean((_fwd(q, x)[:, 0] - y) ** 2), arrays)
            got = [seen["opt_c"][f"{key}.{l.name}.{k}"] for l in q.layers for k in l.params]
            for g, f in zip(got, fd):
                np.testing.assert_allclose(g, f, rtol=2e-3, atol=2e-5)
        # actor: mean(alpha logp(a_pi) - min(Q1, Q2)(s, a_pi)) through the critics as updated
        q1n, q2n = tr.qf1, tr.qf2

        def actor_loss():
            a_pi, lp = _ref_logp(_fwd(actor0, s), eps_pi)
            xp = np.concatenate([s, a_pi], 1)
            return np.mean(alpha * lp - np.minimum(_fwd(q1n, xp)[:, 0], _fwd(q2n, xp)[:, 0]))
        arrays = [l.params[k] for l in actor0.layers for k in l.params]
        fd = _fd(actor_loss, arrays)
        got = [seen["opt_a"][f"actor.{l.name}.{k}"] for l in actor0.layers for k in l.params]
        for g, f in zip(got, fd):
            np.testing.assert_allclose(g, f, rtol=2e-3, atol=2e-5)
        # alpha: d/dlog_alpha of -mean(log_alpha (logp + target_entropy)), target_entropy = -dim(A)
        _, lp = _ref_logp(_fwd(actor0, s), eps_pi)
        assert seen["opt_alpha"]["log_alpha"][0] == pytest.approx(-np.mean(lp - A), rel=1e-4)
        assert tr.alpha != pytest.approx(alpha)  # stepped (this step's losses used the old one)
        # Polyak: target <- tau online + (1 - tau) target
        for t0, online, t in ((t10, tr.qf1, tr.target_q1), (t20, tr.qf2, tr.target_q2)):
            for l0, lo, lt in zip(t0.layers, online.layers, t.layers):
                for k in l0.params:
                    np.testing.assert_allclose(lt.params[k], 0.1 * lo.params[k] + 0.9 * l0.params[k], rtol=1e-6)
    finally:
        tr.close()


def test_graph_and_profile_nodes():
    g = build_graph(PEND)
    names = {n.name for n in g.nodes}
    for n in ("actor@next.fc1.fwd", "next_sample", "qf1.fc1.tfwd", "qf2.fc3.soft", "critic_loss", "policy_sample",
              "alpha_loss", "qf1@pi.fc1.bwd", "actor_loss", "policy_grad", "actor.fc3.upd"):
        assert n in names, n
    assert not any(n.startswith("actor") and n.endswith((".tfwd", ".soft")) or n.startswith("actor@next") and
                   n.endswith((".bwd", ".upd")) for n in names)  # no target actor; s' is a forward only
    carry = {(e.src, e.dst) for e in g.carry_edges}
    assert ("actor.fc1.upd", "actor@next.fc1.fwd") in carry and ("qf1.fc1.soft", "qf1.fc1.tfwd") in carry
    soft = get_design("sac-pendulum")
    soft = dataclasses.replace(soft, hyperparams={**soft.hyperparams, "target_update_interval": 4})
    assert build_graph(soft).node("qf1.fc1.soft").runs == 0.25


def test_rlhls_run(tmp_path):
    """The whole flow; hidden layers of 16 (RL Zoo's policy_kwargs) keep its build and csim short."""
    out, cfg = tmp_path / "run", tmp_path / "small.yml"
    cfg.write_text('sac-pendulum:\n  policy_kwargs: "dict(net_arch=[16])"\n')
    assert cli_main(["run", "sac-pendulum", "--out", str(out), "--quiet", "--steps", "60", "--config", str(cfg),
                     "--time-limit", "5", "--set", "learning_starts=40", "--set", "steps_per_update=20",
                     "--set", "batch_size=16"]) == 0
    rec = json.loads((out / "run.json").read_text())
    assert rec["ok"] and rec["algorithm"] == "sac" and rec["train"]["updates"] == 3
    plan = json.loads((out / "plan" / "plan.json").read_text())["assignment"]
    assert all(plan[n] == "PS" for n in ("next_sample", "policy_sample", "actor_loss", "policy_grad"))
    rows = read_metrics(out / "train" / "metrics.csv")
    assert int(rows[-1]["train_steps"]) == 20 and np.isfinite(float(rows[-1]["actor_loss"]))
    assert "every check passed" in (out / "report.md").read_text()


def _pl_everything(n):
    return "PL" if n.kind in ("mm.fwd", "mm.bwd", "act.fwd", "act.bwd", "upd") else "PS"


def _fixed(design):
    """The design with a fixed-point PL: F-DDPG's fixed<32,8> storage, a fixed<48,16> accumulator (the C ABI's
    53 bits at most)."""
    st, acc = "fixed<32,8,RND,SAT>", "fixed<48,16,RND,SAT>"
    kernels = tuple(dataclasses.replace(k, storage=st, acc=acc) if k.unit == "PL" and k.name != "weight_update"
                    else k for k in design.kernels)
    return dataclasses.replace(design, formats={**design.formats, "pl": st, "pl_acc": acc}, kernels=kernels)


@pytest.mark.parametrize("pl", ["fp16", "fixed"])
def test_csim_equals_emu(tmp_path, csim_calls, pl):
    design = SMALL if pl == "fp16" else _fixed(SMALL)
    hp = {"learning_starts": 30, "batch_size": 8, "steps_per_update": 20}
    plan = {n.name: _pl_everything(n) for n in build_graph(design, 8).nodes}
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(design, out=tmp_path / backend, steps=40, backend=backend, precision="mixed", plan=plan,
                           overrides=hp, progress=False)
        runs[backend] = [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")}
                         for r in read_metrics(run.folder / "metrics.csv")]
    assert runs["emu"] == runs["csim"] and int(runs["emu"][-1]["train_steps"]) == 10
    assert {"dense_forward", "dense_backward", "weight_gradient", "weight_update"} <= set(csim_calls)
    if pl == "fixed":  # no loss scaling in fixed point
        assert float(runs["emu"][-1]["critic_loss_scale"]) == 1.0 == float(runs["emu"][-1]["actor_loss_scale"])


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    """A Pendulum episode (200 steps) ends inside the run, the kill lands after training began."""
    monkeypatch.setattr("rlhls.host.runner.plot_rewards", lambda *a, **k: None)
    hp = {"learning_starts": 150, "steps_per_update": 60, "batch_size": 8, "precision": "fp32", "train_freq": 2,
          "gradient_steps": 3, "target_update_interval": 2}

    def make():
        return SAC(SMALL, env_id="Pendulum-v1", seed=3, hyperparams=hp)

    cfg = {"design": SMALL.name, "env": "Pendulum-v1"}
    ra = train(make, cfg, tmp_path / "a", steps=240, progress=False)

    def kill(update):
        if update == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(make, cfg, tmp_path / "b", steps=240, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=240, resume=True, progress=False)

    def drop(rows):  # repr: NaN == NaN
        return [{k: repr(v) for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]

    assert drop(ra["metrics"]) == drop(rb["metrics"]) and ra["episodes"] == rb["episodes"]
    assert [int(r["train_steps"]) for r in ra["metrics"]] == [0, 0, 45, 90]  # rounds of 3 every 2 steps after 150
    ta = load_checkpoint(tmp_path / "a" / "checkpoint.npz")["trainer"]
    tb = load_checkpoint(tmp_path / "b" / "checkpoint.npz")["trainer"]
    for net in ("actor", "qf1", "qf2", "target_qf1", "target_qf2"):
        for k, v in ta[net].items():
            assert np.array_equal(v, tb[net][k]), (net, k)
    assert np.array_equal(ta["log_alpha"], tb["log_alpha"]) and ta["rng"] == tb["rng"]
    assert ta["opt_alpha"]["t"] == tb["opt_alpha"]["t"] == 135


def test_rlzoo_entries_load_as_published():
    want = {"sac-pendulum": (20_000, {"learning_rate": 1e-3, "anneal_lr": False, "ent_coef": "auto",
                                      "learning_starts": 100, "batch_size": 256, "tau": 0.005}),
            "sac-lunarcont": (500_000, {"learning_rate": 7.3e-4, "anneal_lr": True, "ent_coef": "auto",
                                        "learning_starts": 10_000, "tau": 0.01, "buffer_size": 1_000_000})}
    for name, (budget, values) in want.items():
        base = get_design(name)
        design, config = apply_config(base, read_config(ZOO, base))
        hp = get_algorithm("sac").hyperparams(design, None, config)
        assert design.hyperparams["total_timesteps"] == budget and design.name == name  # net_arch: the design's
        assert {k: hp[k] for k in values} == values
        assert hp == get_algorithm("sac").hyperparams(base)  # the designs hold the published entries


def _refused(tmp_path, capsys, args, what):
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert what in err and len(err.strip().splitlines()) <= 2 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_bad_hyperparameters_are_one_line(tmp_path, capsys):
    out = str(tmp_path / "out")
    base = ["train", "sac-pendulum", "--steps", "10", "--out", out, "--quiet"]
    _refused(tmp_path, capsys, [*base, "--set", "ent_coef=bogus"], "ent_coef = 'bogus'")
    _refused(tmp_path, capsys, [*base, "--set", "ent_coef=auto_0"], "ent_coef = 'auto_0'")
    _refused(tmp_path, capsys, [*base, "--set", "use_sde=true"], "use_sde = True")
    _refused(tmp_path, capsys, [*base, "--set", "target_entropy=high"], "target_entropy = 'high'")
    _refused(tmp_path, capsys, [*base, "--set", "gradient_steps=0"], "gradient_steps = 0")
    cfg = tmp_path / "zoo.yml"
    cfg.write_text("Pendulum-v1:\n  use_sde: True\n  ent_coef: auto\n")
    _refused(tmp_path, capsys, [*base, "--config", str(cfg)], "use_sde: True")
    cfg.write_text("Pendulum-v1:\n  train_freq: [1, episode]\n")
    _refused(tmp_path, capsys, [*base, "--config", str(cfg)], "train_freq")
    _refused(tmp_path, capsys, [*base, "--env", "CartPole-v1"], "continuous")
    with pytest.raises(RlhlsError, match="SAC's node 'actor_loss' on the PL"):
        plan = {n.name: "PL" if n.name == "actor_loss" else "PS" for n in build_graph(SMALL, 8).nodes}
        SAC(SMALL, env_id="Pendulum-v1", hyperparams={"precision": "mixed", "batch_size": 8}, assignment=plan)
