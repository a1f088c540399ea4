"""One bound run: every command binds a design the same way (host/bound.py), and the demonstration
of `rlhls run` is a budget that never changes what is built."""

import json

import pytest
import yaml

import rlhls
from rlhls.cli import main
from rlhls.designs.registry import design_names, get_design
from rlhls.host.algorithms import ALGORITHMS
from rlhls.host.bound import bind, bind_recorded
from rlhls.host.train import train_design
from rlhls.partition.plan import load_plan


def _trained_designs():
    ALGORITHMS.load()
    return [n for n in design_names() if get_design(n).algorithm in ALGORITHMS]


@pytest.mark.parametrize("name", _trained_designs())
def test_the_demonstration_never_changes_what_is_built(name):
    demo, full = bind(name, demo=True), bind(name, demo=False)
    assert demo.design.kernels == full.design.kernels
    assert demo.batch == full.batch
    if "steps" in get_design(name).demo:
        assert demo.steps == get_design(name).demo["steps"]  # the demonstration's budget, its one override


def _components(build):
    m = json.loads((build / "manifest.json").read_text())
    return m, sorted((c["name"], c["kernel"], c["params_sha256"]) for c in m["components"])


def test_rlhls_build_and_rlhls_run_build_the_same_components(tmp_path):
    flow = rlhls.Flow("heppo-ppo", out=tmp_path / "run", quiet=True, time_limit=20)  # rlhls run's defaults
    try:
        flow.build(csim=False)
    finally:
        flow.close()
    plan = tmp_path / "run" / "plan" / "plan.json"
    assert main(["build", "heppo-ppo", "--plan", str(plan), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    run_m, run_c = _components(tmp_path / "run" / "build")
    cmd_m, cmd_c = _components(tmp_path / "b")
    assert run_c == cmd_c and run_m["batch"] == cmd_m["batch"] == 2048
    assert run_m["design_sha256"] == cmd_m["design_sha256"]
    assert run_m["binding"]["kernels"] == cmd_m["binding"]["kernels"]
    assert run_m["binding"]["demo"] and not cmd_m["binding"]["demo"]


def test_build_set_and_config_reach_the_kernels(tmp_path):
    small = ["--set", "num_envs=8", "--set", "num_steps=256", "--set", "num_minibatches=8"]
    assert main(["build", "heppo-ppo", "--out", str(tmp_path / "own"), "--quiet"]) == 0
    assert main(["build", "heppo-ppo", "--out", str(tmp_path / "set"), "--quiet", *small]) == 0
    cfg = tmp_path / "ppo.yml"
    cfg.write_text(yaml.safe_dump({"num_envs": 8, "num_steps": 256, "num_minibatches": 8}))
    assert main(["build", "heppo-ppo", "--out", str(tmp_path / "cfg"), "--quiet", "--config", str(cfg)]) == 0
    own, own_c = _components(tmp_path / "own")
    (by_set, set_c), (by_cfg, cfg_c) = _components(tmp_path / "set"), _components(tmp_path / "cfg")
    assert own["batch"] == 2048 and by_set["batch"] == by_cfg["batch"] == 256
    assert set_c == cfg_c and set_c != own_c  # the components sized by the batch given
    assert by_set["binding"]["overrides"] == {"num_envs": "8", "num_steps": "256", "num_minibatches": "8"}


def test_graph_and_profile_bind_as_build_does(tmp_path, capsys):
    assert main(["graph", "heppo-ppo", "--set", "num_steps=256", "--set", "num_envs=8",
                 "--set", "num_minibatches=8", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert main(["graph", "heppo-ppo", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert small["nodes"] != own["nodes"]
    out = tmp_path / "p.csv"
    assert main(["profile", "heppo-ppo", "--set", "gamma=2", "--out", str(out)]) == 2
    assert "gamma" in capsys.readouterr().err and not out.exists()


def test_a_bad_set_is_one_line_before_anything_is_written(tmp_path, capsys):
    for argv in (["build", "heppo-ppo", "--set", "no_such_key=1"], ["perf", "heppo-ppo", "--set", "gamma=7"],
                 ["graph", "heppo-ppo", "--set", "gamma"]):
        assert main([*argv, "--out" if argv[0] != "graph" else "--csv", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_records_its_binding_and_binds_again_from_it(tmp_path):
    out = tmp_path / "r"
    run = train_design(bind("apdrl-dqn-cartpole", overrides={"learning_starts": 100}), out=str(out),
                                        steps=200, progress=False)
    cfg = json.loads((out / "config.json").read_text())
    again = bind_recorded(cfg)
    assert again.hyperparams == run.config["hyperparams"]
    assert again.design.kernels == bind("apdrl-dqn-cartpole", overrides={"learning_starts": 100}).design.kernels


def test_rlhls_designs_shows_what_a_run_and_a_build_were_bound_to(tmp_path, capsys):
    out = tmp_path / "r"
    train_design(bind("apdrl-dqn-cartpole", overrides={"learning_starts": 100}), out=str(out), steps=200,
                 progress=False)
    assert main(["build", "apdrl-dqn-cartpole", "--set", "batch_size=64", "--out", str(tmp_path / "b"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["designs", str(out), str(tmp_path / "b"), "--json"]) == 0
    run, build = json.loads(capsys.readouterr().out)
    assert run["from"] == "config.json" and run["hyperparams"]["learning_starts"] == 100 and run["batch"] == 128
    assert build["from"] == "manifest.json" and build["batch"] == 64 and build["overrides"] == {"batch_size": "64"}
    assert main(["designs", str(out)]) == 0
    text = capsys.readouterr().out
    assert "batch 128" in text and "learning_starts=100" in text and "kernel     dense_forward on PL" in text
    assert main(["designs", str(tmp_path)]) == 2  # a folder rlhls did not write
    assert "no run.json, config.json or manifest.json" in capsys.readouterr().err


def test_run_until_build_is_the_flow_stopped_at_the_build(tmp_path, capsys):
    from rlhls.api import STAGES
    from rlhls.cli import run

    assert run.STAGES == STAGES  # --until's choices are the Flow's stages
    out = tmp_path / "f"
    assert main(["run", "apdrl-dqn-cartpole", "--until", "build", "--out", str(out), "--time-limit", "10"]) == 0
    assert "stopped after build" in capsys.readouterr().out
    rec = json.loads((out / "run.json").read_text())
    assert [s["stage"] for s in rec["stages"]] == ["training graph", "profile", "partition", "build --csim"]
    assert (out / "build" / "manifest.json").is_file() and not (out / "train").exists()
    assert rec["binding"]["batch"] == 128 and rec["binding"]["hyperparams"]["learning_starts"] == 1000
    plan = json.loads((out / "plan" / "plan.json").read_text())
    assert plan["binding"] == json.loads((out / "build" / "manifest.json").read_text())["binding"] == rec["binding"]
    assert load_plan(out / "plan").assignment == plan["assignment"]  # the record does not disturb its reader


def test_partition_takes_a_design_bound_as_every_command(tmp_path, capsys):
    assert main(["partition", "apdrl-dqn-cartpole", "--out", str(tmp_path / "p"), "--time-limit", "10",
                 "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(["partition", "apdrl-dqn-cartpole", "--set", "batch_size=64", "--out", str(tmp_path / "q"),
                 "--time-limit", "10", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert small["makespan_us"] < own["makespan_us"]  # the batch given reaches the graph and its costs
    assert json.loads((tmp_path / "q" / "plan.json").read_text())["binding"]["batch"] == 64
    flow = rlhls.Flow("apdrl-dqn-cartpole", out=tmp_path / "f", quiet=True, time_limit=10)
    try:
        assert flow.partition().assignment == load_plan(tmp_path / "p").assignment  # rlhls run's plan
    finally:
        flow.close()
    for argv in (["partition", "apdrl-dqn-cartpole", "--capacity", "c.csv"],
                 ["partition", "p.csv", "--device", "zcu106"]):
        assert main([*argv, "--out", str(tmp_path / "x")]) == 2 and not (tmp_path / "x").exists()


def test_a_run_from_before_the_binding_was_recorded_resumes(tmp_path):
    out = tmp_path / "old"
    bound = bind("apdrl-dqn-cartpole", overrides={"learning_starts": 100})
    train_design(bound, out=str(out), steps=200, progress=False)
    cfg = json.loads((out / "config.json").read_text())
    for key in ("batch", "kernels"):  # the layout of config.json before they were recorded
        cfg.pop(key)
    (out / "config.json").write_text(json.dumps(cfg))
    run = train_design(bound, out=str(out), steps=400, resume=True, progress=False)
    assert run.env_steps == 400 and json.loads((out / "config.json").read_text())["batch"] == 128
