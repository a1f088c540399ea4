"""F-DDPG end to end: the designs' hyperparameters are valid DDPG ones; a short training run takes its
gradients from the ddpg_gradient kernel (emu and csim give the same metrics, and --resume continues
bit for bit); the trained actor exports as an hls4ml project whose C simulation equals the emulator's
actions recorded during the evaluation; the evaluation, snapshots, Table VII's summary, Table IV's
timing and the flow report's section."""

import csv
import json

import numpy as np
import pytest

from rlhls.cli import main as cli_main
from rlhls.designs.registry import get_design
from rlhls.flow.build import policy_network, policy_precision
from rlhls.flow.hls4ml_convert import table_precisions
from rlhls.host.checkpoint import load_checkpoint
from rlhls.host.algorithms.ddpg import DDPG, resolve_hyperparams
from rlhls.host.experiments import ExperimentOptions, run_experiment
from rlhls.host.experiments.fddpg import (TASKS, Snapshots, _first, evaluate, save_policy_record, seed_plan,
                                          summarize_table7, trained_actor)
from rlhls.host.runfolder import read_metrics

M1 = get_design("fddpg-arm-m1")
TIMING = ("wall_s",)


def _rows(folder):
    return [{k: v for k, v in r.items() if k not in TIMING and not k.startswith("t_")}
            for r in read_metrics(folder / "metrics.csv")]


def test_designs_hyperparameters_are_valid_ddpg_settings():
    for m in ("m1", "m2", "m3"):
        hp = resolve_hyperparams(get_design(f"fddpg-arm-{m}"))
        assert (hp["noise"], hp["optimizer"], hp["batch_size"], hp["precision"]) == ("ou", "adam", 32, "mixed")
        assert (hp["actor_learning_rate"], hp["critic_learning_rate"], hp["tau"]) == (1e-4, 1e-3, 0.001)
        assert hp["steps_per_update"] == 300 and hp["policy_frequency"] == 1
    d = get_design("fddpg-arm-m3")
    assert d.demo["steps"] > 0 and d.formats["ps"] == "fp32" and "fixed<32,8" in d.formats["storage"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 600-step run twice: emu in one go; csim in two halves (300, then --resume)."""
    root = tmp_path_factory.mktemp("fddpg")
    base = ["fddpg-arm-m1", "--set", "learning_starts=540", "--set", "buffer_size=5000", "--quiet"]
    assert cli_main(["train", *base, "--steps", "600", "--out", str(root / "emu")]) == 0
    assert cli_main(["train", *base, "--steps", "300", "--backend", "csim", "--out", str(root / "csim")]) == 0
    assert cli_main(["train", *base, "--steps", "600", "--backend", "csim", "--out", str(root / "csim"),
                     "--resume"]) == 0
    return root


def test_training_takes_its_gradients_from_the_kernel_and_csim_resume_equals_emu(runs):
    cfg = json.loads((runs / "emu" / "config.json").read_text())
    assert cfg["precision"] == "mixed" and cfg["plan"]["critic@pi.fc1.bwd"] == "PL"
    emu, csim = _rows(runs / "emu"), _rows(runs / "csim")
    assert emu == csim and len(emu) == 2
    assert int(emu[1]["train_steps"]) == 600 - 541 and float(emu[1]["critic_loss_scale"]) == 1.0
    assert np.isfinite(float(emu[1]["qf1_loss"])) and float(emu[1]["qf1_loss"]) > 0
    a = load_checkpoint(runs / "emu" / "checkpoint.npz")["trainer"]
    b = load_checkpoint(runs / "csim" / "checkpoint.npz")["trainer"]
    for key in ("actor", "critic", "target_critic"):
        assert all(np.array_equal(a[key][k], b[key][k]) for k in a[key])
    # the same run's trainer has the kernel hook; with precision fp32 it has none
    t = DDPG(M1, hyperparams={"learning_starts": 10}, assignment=cfg["plan"])
    assert t.step_kernel is not None and t.step_kernel[0].name == "ddpg_gradient"
    t.close()
    t = DDPG(M1, hyperparams={"precision": "fp32"})
    assert t.step_kernel is None
    t.close()


def test_exported_actor_csim_equals_the_emulators_recorded_actions(runs, tmp_path, capsys):
    design = M1
    ev = evaluate(design, trained_actor(design, runs / "emu"), "F-DDPG")
    assert set(ev["tasks"]) == set(TASKS) and len(ev["states"]) == sum(r["steps"] for r in ev["tasks"].values())
    save_policy_record(runs / "emu", ev)
    out = tmp_path / "policy"
    assert cli_main(["build", "fddpg-arm-m1", "--weights", str(runs / "emu"), "--csim", "--out", str(out),
                     "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["csim"]["exact"] and m["csim"]["equals_recorded"] and m["csim"]["passed"]
    assert m["states"] == len(ev["states"]) and m["formats"]["storage"] == "fixed<32,8,RND,SAT>"
    files = {f["path"] for f in m["files"]}
    assert "pl/actor_policy/states.npy" in files and any("firmware/weights/" in f for f in files)
    assert (out / "pl" / "actor_policy" / "hls_config.cfg").is_file()
    # a Vitis kernel top whose testbench replays the recorded states bit for bit; the rules hold
    assert m["csim"]["kernel_top"].startswith("PASS actor_policy:") and "bit-exact" in m["csim"]["kernel_top"]
    assert m["rules"]["passed"] and m["component"]["top"] == "actor_policy"
    # the recorded actions are the trained weights' (csim equal to them: the project holds those weights)
    assert np.array_equal(np.load(out / "pl" / "actor_policy" / "expected.npy"), ev["actions"])


def test_policy_network_finds_the_actor_and_takes_model_2s_unpadded_outputs():
    m2 = get_design("fddpg-arm-m2")
    t = DDPG(m2, hyperparams={"precision": "fp32"})
    assert t.actor.output_shape == (5,) and t.critic.output_shape == (1,)  # the 24-wide design, unpadded
    net = policy_network(m2, t.state_dict())
    t.close()
    assert net.output_shape == (5,) and np.array_equal(net["fc2"].params["W"], t.actor["fc2"].params["W"])
    dqn = get_design("apdrl-dqn-cartpole")
    q = dqn.build_networks(3)["q"]
    state = {"params": q.get_params(), "target": {k: v * 0 for k, v in q.get_params().items()}}
    assert np.array_equal(policy_network(dqn, state)["fc1"].params["W"], q["fc1"].params["W"])


def test_seed_plan_puts_the_kernel_on_the_pl_and_adam_on_the_host():
    plan = seed_plan(M1)
    assert plan["critic.fc1.fwd"] == plan["actor_loss"] == plan["actor.fc1.bwd"] == "PL"
    assert {u for n, u in plan.items() if n.endswith((".upd", ".soft"))} == {"PS"}


def test_snapshots_summary_and_table4(tmp_path):
    from rlhls.host.checkpoint import save_checkpoint

    folder = tmp_path / "F-DDPG-s0"
    folder.mkdir()
    actor = M1.build_networks(0)["actor"].get_params()
    snap = Snapshots(folder, (3, 4, 9))
    snap(1)  # no episode, no checkpoint yet: nothing to save
    for done, saved in ((1, []), (3, ["ep3.npz"]), (5, ["ep3.npz", "ep4.npz"])):
        save_checkpoint(folder / "checkpoint.npz", {"trainer": {"actor": {k: v + done for k, v in actor.items()}}})
        (folder / "episodes.csv").write_text("env_step,return,length\n" + "0,-1.0,300\n" * done)
        snap(done)
        assert sorted(p.name for p in (folder / "policies").iterdir()) == saved if saved else \
            not (folder / "policies").exists()
    with np.load(folder / "policies" / "ep3.npz") as z:  # the actor of the update that reached episode 3
        assert all(np.array_equal(z[k], v + 3) for k, v in actor.items())
    # first snapshot that completes a sub-task, with '*' for a put without lifting the box
    ok = {"attach": True, "put": True, "lifted": False}
    no = {"attach": False, "put": False, "lifted": False}
    evals = {"100": {"A": no}, "200": {"A": {**ok, "put": False}}, "300": {"A": ok}}
    assert (_first(evals, "A", "attach", (100, 200, 300)), _first(evals, "A", "put", (100, 200, 300))) == ("200",
                                                                                                          "300*")
    for v, s in (("DDPG", 0), ("F-DDPG", 0)):
        (tmp_path / f"{v}-s{s}").mkdir(exist_ok=True)
        (tmp_path / f"{v}-s{s}" / "eval.json").write_text(json.dumps({"snapshots": {e: {t: ok for t in TASKS}
                                                                                       for e in evals}}))
    summarize_table7(tmp_path, "fddpg-arm-m1", 1, (100, 200, 300))
    rows = list(csv.DictReader(open(tmp_path / "table7.csv")))
    assert [r["task"] for r in rows] == list(TASKS) and rows[0]["F-DDPG_put"] == "100*"
    assert (tmp_path / "fig7.png").stat().st_size > 1000
    out = tmp_path / "t4"
    assert run_experiment(ExperimentOptions("fddpg-table4", design=["fddpg-arm-m1"], out=str(out), quiet=True,
                                            params={"measure": "300"})) == 0
    r = list(csv.DictReader(open(out / "table4.csv")))[0]
    assert float(r["numpy_s"]) > 0 and float(r["emu_s"]) > 0 and int(r["cycles"]) == 5408
    assert float(r["fpga_kernel_s"]) == pytest.approx(5408 / 200e6 * 390_000)
    assert float(r["fpga_streamed_s"]) > 3 * float(r["fpga_kernel_s"])  # I/O-bound, as Tables III-IV
    # Tables III-VI's speed-ups: the NumPy gradient measured here over the streamed / bare kernel
    grad = float(r["numpy_grad_ms"])
    assert float(r["iii_speedup"]) == pytest.approx(grad / float(r["streamed_pcie_ms"]))
    assert float(r["vi_speedup"]) == pytest.approx(grad / float(r["kernel_ms"]))
    assert float(r["c_fpga_cglue_noenv_s"]) < float(r["c_fpga_cglue_s"]) < float(r["c_fpga_s"])
    md = (out / "table4.md").read_text()
    assert "Table III" in md and "normalized" in md and "| 4.08 |" in md and "| 23 |" in md and "| 47 |" in md
    # bands: the link latencies at the ends of their assumed range (slower at 50 us), the kernel at -/+ the PL
    # latency model's held-out error
    from rlhls.host.perf import model_error

    err = model_error()["PL"][0]
    assert float(r["iii_speedup_low"]) < float(r["iii_speedup"]) < float(r["iii_speedup_high"])
    assert float(r["vi_speedup_low"]) == pytest.approx(grad / (float(r["kernel_ms"]) * (1 + err)))
    assert f"({float(r['iii_speedup_low']):.3g}-{float(r['iii_speedup_high']):.3g})" in md


def test_flow_report_section_writes_the_task_table_and_gif(runs):
    from rlhls.host.experiments.fddpg import report_section

    rec = {"design": "fddpg-arm-m1", "precision": "fp32", "train": {"folder": str(runs / "emu")}}
    lines = report_section(rec, runs)
    text = "\n".join(lines)
    assert "Table VI" in text and "| A |" in text and "train/arm.gif" in text
    # the learning curve: the run's 2 training episodes (300-step limit: neither ended in 'put')
    assert "## Learning curve" in text and "| 1-1 |" in text and "| 2-2 |" in text and "| 0% |" in text
    assert (runs / "emu" / "arm.gif").read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    with np.load(runs / "emu" / "policy_states.npz") as z:
        assert "float_actions" in z.files and len(z["states"]) > 0
    assert report_section({"design": "apdrl-dqn-cartpole"}, runs) == []


def test_ddpg_replay_buffer_is_checked_against_this_machines_memory():
    from rlhls.core.errors import RlhlsError

    # 17 + 5 float32 values, DQN's int64 action slot, reward and done: 104 bytes a transition
    with pytest.raises(RlhlsError, match=r"buffer_size = 10000000000000: the replay buffer needs 9\.69e\+05 GiB"):
        resolve_hyperparams(M1, {"buffer_size": "10000000000000"})
    with pytest.raises(RlhlsError, match="buffer_size 1 is smaller than num_envs 2"):
        resolve_hyperparams(M1, {"buffer_size": "1", "num_envs": "2", "steps_per_update": "300"})
    assert resolve_hyperparams(M1)["buffer_size"] == 1_000_000  # the design's own fits


def test_experiments_declare_and_check_their_params(tmp_path):
    import re

    from rlhls.core.errors import RlhlsError
    from rlhls.host.experiments import EXPERIMENTS, experiment_names

    experiment_names()
    assert EXPERIMENTS["fddpg-table7"].params == {"episodes": 400, "snapshots": "100,200,300,400"}
    assert EXPERIMENTS["fddpg-table4"].params == {"measure": 900}
    out = tmp_path / "x"
    for name, params, msg in [("fddpg-table7", {"episode": "3"}, "--param episode: unknown for fddpg-table7 (known: "
                                                                  "episodes, snapshots)"),
                              ("fddpg-table7", {"episodes": "many"}, "--param episodes='many': expected an integer"),
                              ("fddpg-table7", {"episodes": "0"}, "--param episodes='0': expected >= 1"),
                              ("fddpg-table7", {"snapshots": "100,x"}, "--param snapshots='100,x': expected positive"),
                              ("fddpg-table4", {"measure": "1.5"}, "--param measure='1.5': expected an integer")]:
        with pytest.raises(RlhlsError, match=re.escape(msg)):
            run_experiment(ExperimentOptions(name, out=str(out), params=params, quiet=True))
    assert not out.exists()


@pytest.fixture(scope="module")
def other_runs(tmp_path_factory):
    """Short runs of a DQN and an A2C design (their policy networks: 'q' under 'params', 'policy')."""
    root = tmp_path_factory.mktemp("other")
    for d in ("apdrl-dqn-cartpole", "apdrl-a2c-invpendulum"):
        assert cli_main(["train", d, "--steps", "256", "--quiet", "--out", str(root / d)]) == 0
    return root


@pytest.mark.parametrize("design,net", [("apdrl-dqn-cartpole", "q"), ("apdrl-a2c-invpendulum", "policy")])
def test_every_designs_policy_network_exports_and_its_csim_passes(other_runs, tmp_path, capsys, design, net):
    run = other_runs / design
    out = tmp_path / "p"
    assert cli_main(["build", design, "--weights", str(run), "--csim", "--out", str(out), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["network"] == net and m["kind"] == "policy" and m["states"] == 64  # the env under seeded random actions
    assert m["csim"]["passed"] and m["csim"]["equals_recorded"] is None
    assert m["csim"]["kernel_top"].startswith(f"PASS {net}_policy:") and m["rules"]["passed"]
    # fp32: hls4ml's float sums in another order than numpy's; within its bound, not always bit for bit
    assert m["csim"]["exact"] or m["csim"]["max_diff_lsb"] <= 2.5
    trained = policy_network(get_design(design), load_checkpoint(run / "checkpoint.npz")["trainer"])
    fresh = get_design(design).build_networks(0)[net]
    assert not all(np.array_equal(trained[l.name].params["W"], l.params["W"]) for l in fresh.layers
                   if "W" in l.params)  # the trained weights, not a fresh network's
    # the project's reference outputs are the checkpoint's network on the states (the emulator, table mode)
    ref = np.load(out / "pl" / f"{net}_policy" / "expected.npy")
    states = np.load(out / "pl" / f"{net}_policy" / "states.npy")
    prec = table_precisions(trained, policy_precision(get_design(design))[0])
    assert np.array_equal(ref, trained.forward(states, prec))
    # the folder of `rlhls run`: its train/ run
    (tmp_path / "flow").mkdir()
    (tmp_path / "flow" / "train").symlink_to(run)
    assert cli_main(["build", design, "--weights", str(tmp_path / "flow"), "--out", str(tmp_path / "q"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"] == str(tmp_path / "flow" / "train")


def test_ppo_checkpoints_policy_is_found(tmp_path):
    from rlhls.host.algorithms import get_algorithm

    design = get_design("heppo-ppo")
    t = get_algorithm("ppo").trainer(design, hyperparams={"precision": "fp32"})
    for l in t.nets["policy"].layers:  # apart from the value network's and the optimizer's
        for v in l.params.values():
            v += 0.5
    got = policy_network(design, t.state_dict())  # under 'params/policy'
    want = t.nets["policy"]
    t.close()
    assert got.name == "policy" and got.output_shape == (design.action_dim,)
    assert all(np.array_equal(got[l.name].params[k], v) for l in want.layers for k, v in l.params.items())


@pytest.mark.parametrize("case", ["missing", "empty", "other design", "other network"])
def test_policy_export_refuses_bad_input_in_one_line(other_runs, tmp_path, capsys, case):
    import shutil

    if case == "missing":
        run, design, needle = tmp_path / "nothing", "fddpg-arm-m1", "no such folder"
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        run, design, needle = tmp_path / "empty", "fddpg-arm-m1", "no checkpoint.npz"
    elif case == "other design":
        run, design, needle = other_runs / "apdrl-dqn-cartpole", "fddpg-arm-m1", \
            "a run of design 'apdrl-dqn-cartpole', not 'fddpg-arm-m1'"
    else:  # its config gone: the checkpoint names its own design
        run = tmp_path / "anon"
        shutil.copytree(other_runs / "apdrl-dqn-cartpole", run)
        (run / "config.json").unlink()
        design, needle = "fddpg-arm-m1", "its checkpoint is of design 'apdrl-dqn-cartpole', not 'fddpg-arm-m1'"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli_main(["build", design, "--weights", str(run), "--csim", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err and err.startswith("rlhls: error: --weights")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
