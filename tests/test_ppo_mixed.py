"""PPO with AP-DRL mixed precision (host/algorithms/ppo.py ``precision``): formats per node, loss scaling,
exact resume, learning CartPole in mixed precision about as well as in fp32, and ``rlhls train``
routing PPO designs (AP-DRL MsPacman with a plan file; HEPPO unchanged in fp64, mixed on request)."""

import json

import numpy as np
import pytest

from rlhls.host.checkpoint import load_checkpoint
from rlhls.cli import main as cli_main
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.host.algorithms.ppo import PPO, resolve_hyperparams
from rlhls.host.runfolder import read_metrics
from rlhls.host.runner import train

DESIGN = get_design("apdrl-a2c-invpendulum")  # separate 64-64 tanh policy and value MLPs, AP-DRL formats
FAST = {"num_envs": 4, "num_steps": 128, "num_minibatches": 4, "update_epochs": 4, "learning_rate": 2.5e-3,
        "anneal_lr": False, "optimizer": "adam", "gae_lambda": 0.95, "ent_coef": 0.0, "experiment": 0}


def _plan():
    """Policy matrix multiplies on the AIE (BF16), value and loss on the PL (FP16, loss scaling)."""
    asg = {}
    for n in build_graph(DESIGN).nodes:
        name = n.name
        if name.startswith("policy.") and n.mm and not name.endswith(".upd"):
            asg[name] = "AIE"
        elif name.startswith("value.") or name in ("loss", "returns"):
            asg[name] = "PL"
        else:
            asg[name] = "PS"
    return asg


def test_precision_validation_and_heppo_default():
    assert resolve_hyperparams(get_design("heppo-ppo"))["precision"] == "fp64"  # HEPPO: float64 as before
    assert resolve_hyperparams(get_design("apdrl-ppo-mspacman"))["precision"] == "mixed"
    with pytest.raises(RlhlsError, match="precision = 'fp8'"):
        resolve_hyperparams(DESIGN, {"precision": "fp8"})
    with pytest.raises(RlhlsError, match="update node"):
        PPO(DESIGN, env_id="CartPole-v1", hyperparams=dict(FAST, precision="mixed"),
            assignment={**_plan(), "policy.fc1.upd": "AIE"})


def test_mixed_formats_and_resume(tmp_path):
    hp = dict(FAST, precision="mixed", num_steps=32, loss_scale_growth_interval=3)

    def make():
        return PPO(DESIGN, env_id="CartPole-v1", seed=2, hyperparams=hp, assignment=_plan())

    ppo = make()
    assert ppo.mixed.mp_p.unit_of("fc1", "fwd") == "AIE" and ppo.mixed.mp_v.unit_of("fc1", "bwd") == "PL"
    row = ppo.train_update(1, 3)
    bf16 = parse_format("bf16")
    w = ppo.nets["policy"]["fc1"].params["W"]
    assert np.array_equal(bf16.quantize(w), w)  # AIE layer: BF16 weights, no FP32 master
    v = ppo.nets["value"]["fc1"].params["W"]
    assert not np.array_equal(bf16.quantize(v), v)  # PL layer: FP32 master weights
    # 16 steps, growth interval 3: the shared scale grows until the FP16 value gradients overflow
    assert ppo.mixed.mp_p.steps == ppo.mixed.mp_v.steps == 16 and row["scale_grows"] >= 1
    assert row["skipped_steps"] == row["scale_shrinks"] and row["grad_overflows"] >= row["skipped_steps"]
    assert row["loss_scale"] == 2.0 ** (15 + row["scale_grows"] - row["scale_shrinks"])
    ppo.close()

    def kill(update):
        if update == 2:
            raise KeyboardInterrupt

    cfg = {"design": DESIGN.name}
    ra = train(make, cfg, tmp_path / "a", steps=384, progress=False)
    with pytest.raises(KeyboardInterrupt):
        train(make, cfg, tmp_path / "b", steps=384, progress=False, on_update=kill)
    rb = train(make, cfg, tmp_path / "b", steps=384, resume=True, progress=False)
    a = load_checkpoint(tmp_path / "a" / "checkpoint.npz")
    b = load_checkpoint(tmp_path / "b" / "checkpoint.npz")
    assert ra["episodes"] == rb["episodes"] and a["trainer"]["mixed"] == b["trainer"]["mixed"]
    for n in a["trainer"]["params"]:
        for k, x in a["trainer"]["params"][n].items():
            assert np.array_equal(x, b["trainer"]["params"][n][k])
    with pytest.raises(RlhlsError, match="another"):  # a checkpoint of another plan
        other = PPO(DESIGN, env_id="CartPole-v1", seed=2, hyperparams=hp, assignment={**_plan(), "loss": "PS"})
        other.load_state_dict(a["trainer"])


def test_loss_scale_skips_and_shrinks_on_overflow():
    ppo = PPO(DESIGN, env_id="CartPole-v1", seed=0, hyperparams=dict(FAST, precision="mixed", num_steps=32,
                                                                      loss_scale_init=2.0 ** 24),
              assignment=_plan())
    before = {k: a.copy() for k, (_, a) in ppo.mixed.views.items()}
    row = ppo.train_update(1, 2)
    # returns near 10-30 at scale 2^24: the FP16 value gradient overflows -> skip + halve, until it fits
    assert row["skipped_steps"] >= 1 and row["scale_shrinks"] == row["skipped_steps"]
    assert row["loss_scale"] == 2.0 ** (24 - row["scale_shrinks"]) and row["grad_overflows"] > 0
    assert any(not np.array_equal(before[k], a) for k, (_, a) in ppo.mixed.views.items())  # later steps applied
    ppo.close()


def _final_return(precision, seed):
    ppo = PPO(DESIGN, env_id="CartPole-v1", seed=seed, hyperparams=dict(FAST, precision=precision),
              assignment=_plan() if precision == "mixed" else None)
    rets = []
    for u in range(1, 19):
        row = ppo.train_update(u, 18)
        rets += [e[1] for e in row["_episodes"]]
    ppo.close()
    return float(np.mean(rets[-20:]))


@pytest.mark.parametrize("seed", [1])
def test_mixed_learns_cartpole_like_fp32(seed):
    fp32, mixed = _final_return("fp32", seed), _final_return("mixed", seed)
    # random play returns ~22; both learn within 9k steps, mixed at least half as well as fp32
    assert fp32 > 80 and mixed > 80 and mixed > 0.5 * fp32, (fp32, mixed)


# ---------------------------------------------------------------- rlhls train (rlhls/cli/train.py, host/train.py)

TINY_CLI = ["--num-envs", "2", "--num-steps", "8", "--set", "num_minibatches=1", "--set", "update_epochs=1",
            "--quiet"]


def _write_plan(path, asg):
    plan = {"status": "Optimal", "makespan_us": 1.0, "gap": 0.0, "assignment": asg,
            "start_us": {n: 0.0 for n in asg}, "point": {n: "0" for n in asg}}
    path.write_text(json.dumps(plan))


def test_cli_mspacman_mixed_with_plan_file(tmp_path):
    d = get_design("apdrl-ppo-mspacman")
    # convolutions on the PS (fast on the host), fc1 on the AIE (BF16), fc2 / loss / GAE on the PL (FP16)
    asg = {}
    for n in build_graph(d).nodes:
        fc = ".fc1." in n.name or ".fc2." in n.name
        asg[n.name] = ("PL" if n.name.endswith(".upd") or ".fc2." in n.name else "AIE") if fc else \
            ("PL" if n.name in ("loss", "gae") else "PS")
    _write_plan(tmp_path / "plan.json", asg)
    out = tmp_path / "run"
    argv = ["train", d.name, "--precision", "mixed", "--plan", str(tmp_path / "plan.json"), "--steps", "16",
            "--out", str(out), "--set", "eval_episodes=0", *TINY_CLI]
    assert cli_main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == "mixed" and cfg["plan"] == asg and cfg["plan_source"] == "given"
    assert cfg["experiment"] == 0 and cfg["hyperparams"]["num_steps"] == 8  # PPO keeps num_steps
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 1 and rows[0]["loss_scale"] == "32768.0" and rows[0]["quantized"] == "1"
    ck = load_checkpoint(out / "checkpoint.npz")["trainer"]
    bf16 = parse_format("bf16")
    w, w2 = ck["params"]["policy"]["fc1.W"], ck["params"]["value"]["fc2.W"]
    assert np.array_equal(bf16.quantize(w), w) and not np.array_equal(bf16.quantize(w2), w2)
    assert ck["assignment"] == asg and ck["env"]["obs"].dtype == np.uint8


def test_cli_heppo_fp64_unchanged_and_mixed_on_cartpole(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["train", "heppo-ppo", "--env", "CartPole-v1", "--steps", "32", *TINY_CLI]
    assert cli_main(base) == 0  # HEPPO's float64 path, its folder and config as before
    out = tmp_path / "runs" / "heppo-ppo-CartPole-v1-s0-e5"
    cfg = json.loads((out / "config.json").read_text())
    assert "plan" not in cfg and cfg["hyperparams"]["precision"] == "fp64" and cfg["experiment"] == 5
    assert "loss_scale" not in read_metrics(out / "metrics.csv")[0]
    assert load_checkpoint(out / "checkpoint.npz")["trainer"]["mixed"] is None
    # --plan needs mixed; nothing is written
    assert cli_main(base + ["--plan", "plan.json", "--out", "nope"]) == 2
    assert "plan.json" in capsys.readouterr().err and not (tmp_path / "nope").exists()
    # --precision mixed on a HEPPO design: plan from profile + ILP at the minibatch (2 x 8 / 1), resumable
    assert cli_main(base + ["--precision", "mixed", "--experiment", "0"]) == 0
    out = tmp_path / "runs" / "heppo-ppo-CartPole-v1-s0-e0-mixed"
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == "mixed" and cfg["plan_source"] == "ilp" and cfg["experiment"] == 0
    assert {"gae", "loss", "policy.fc1.bwd", "value.fc3.upd"} <= set(cfg["plan"])
    rows = read_metrics(out / "metrics.csv")
    assert len(rows) == 2 and all(np.isfinite(float(r["policy_loss"])) for r in rows)
    assert cli_main(["train", "heppo-ppo", "--env", "CartPole-v1", "--steps", "48", *TINY_CLI,
                     "--precision", "mixed", "--experiment", "0", "--resume"]) == 0
    assert json.loads((out / "config.json").read_text())["plan"] == cfg["plan"]  # the ILP plan is reused
    assert len(read_metrics(out / "metrics.csv")) == 3
