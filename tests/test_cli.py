"""The command line as a user runs it."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from rlhls.cli import main

SUBCOMMANDS = ["designs", "graph", "devices", "format", "kernels", "kernel", "algorithms", "profile", "partition",
               "build", "train", "eval", "run", "experiment"]


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rlhls", *args], capture_output=True, text=True, env=env)


def test_console_script_is_installed():
    exe = shutil.which("rlhls") or os.path.join(os.path.dirname(sys.executable), "rlhls")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for s in SUBCOMMANDS:
        assert s in r.stdout


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_on_each_subcommand(sub, capsys):
    with pytest.raises(SystemExit) as e:
        main([sub, "--help"])
    assert e.value.code == 0
    assert "usage: rlhls " + sub in capsys.readouterr().out


def test_designs_json_lists_everything(capsys):
    from rlhls.designs.registry import design_names

    assert main(["designs", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == design_names() and len(data) >= 13
    for d in data:
        assert {"seed_file", "algorithm", "env_id", "networks", "kernels", "formats", "device"} <= set(d)


def test_designs_text_shows_layers(capsys):
    assert main(["designs", "apdrl-dqn-breakout"]) == 0
    out = capsys.readouterr().out
    assert "conv1" in out and "fc2" in out and "vek280" in out


def test_graph_json_and_csv(tmp_path, capsys):
    csv_path = tmp_path / "g.csv"
    assert main(["graph", "apdrl-dqn-breakout", "--batch", "1", "--json", "--csv", str(csv_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"nodes", "edges"}
    assert set(data["nodes"][0]) == {"name", "layer", "phase", "kind", "flops", "bytes", "mm"}
    assert sum(n["mm"] for n in data["nodes"]) == 15
    plain = [e for e in data["edges"] if "carry" not in e]
    carry = [e for e in data["edges"] if "carry" in e]
    assert all(set(e) == {"src", "dst", "bytes"} for e in plain)
    # every parameterised layer's update feeds the next step's forward
    assert sorted((e["src"], e["dst"]) for e in carry) == sorted(
        (f"q.{l}.upd", f"q.{l}.fwd") for l in ("conv1", "conv2", "conv3", "fc1", "fc2"))
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "src,dst,bytes,carry" and len(lines) == len(data["edges"]) + 1
    from rlhls.partition.profile_io import read_graph
    assert len(read_graph(csv_path)) == len(data["edges"])


@pytest.mark.parametrize("args, needle", [
    (["graph", "no-such-design"], "unknown design 'no-such-design'"),
    (["graph", "apdrl-dqn-cartpole", "--batch", "0"], "--batch"),
    (["graph", "apdrl-dqn-cartpole", "--batch", "x"], "--batch"),
    (["format", "fixed<0,2>"], "fixed<0,2>"),
    (["format", "fixed<8,3,ROUND>"], "ROUND"),
    (["devices", "zcu999"], "zcu999"),
    (["nonsense"], "nonsense"),
    (["graph", "apdrl-dqn-cartpole", "--bogus"], "rlhls: error: unrecognized arguments: --bogus"),
    (["graph", "apdrl-dqn-cartpole", "--batch", "x"], "rlhls: error: rlhls graph: argument --batch"),
    (["graph", "apdrl-dqn-cartpole", "--csv", "/no/such/dir/g.csv"], "/no/such/dir"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["--env", "Pendulum-v1"], "environment 'Pendulum-v1' has continuous actions; DQN needs discrete actions"),
    (["--env", "NoSuchEnv-v0"], "unknown environment 'NoSuchEnv-v0'"),
    (["--backend", "cosim"], "cosim backend needs Vitis"),
    (["--resume"], "--resume: no checkpoint in"),
    (["--set", "buffer_size=1e30"], "the replay buffer needs"),
])
def test_train_fails_in_one_line_before_partitioning(tmp_path, args, needle):
    # mixed precision partitions in-process first ("partitioning ..."): what can fail fast fails before it
    out = tmp_path / "run"
    r = run("train", "apdrl-dqn-cartpole", "--precision", "mixed", "--out", str(out), *args,
            env={**os.environ, "PATH": str(tmp_path)} if "cosim" in args else None)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and needle in r.stderr, r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_out_that_cannot_be_created_fails_first(tmp_path):
    r = run("train", "apdrl-dqn-cartpole", "--precision", "mixed", "--out", "/proc/rlhls-run")
    assert r.returncode == 2 and r.stderr.strip() == "rlhls: error: cannot create folder '/proc/rlhls-run': " \
        "No such file or directory", r.stderr


@pytest.mark.parametrize("cmd", [["profile", "apdrl-dqn-cartpole", "--out"], ["graph", "apdrl-dqn-cartpole", "--csv"]])
def test_a_users_file_is_not_replaced_without_force(tmp_path, cmd):
    mine = tmp_path / "notes.csv"
    mine.write_text("my notes\n")
    r = run(*cmd, str(mine))
    assert r.returncode == 2 and "exists and is not a file rlhls wrote (pass --force" in r.stderr
    assert mine.read_text() == "my notes\n"
    ours = tmp_path / "ours.csv"
    assert run(*cmd, str(ours)).returncode == 0 and run(*cmd, str(ours)).returncode == 0  # ours: rewritten
    assert run(*cmd, str(mine), "--force").returncode == 0 and mine.read_text() != "my notes\n"


def test_failed_csv_writes_nothing(tmp_path):
    target = tmp_path / "g.csv"
    r = run("graph", "no-such-design", "--csv", str(target))
    assert r.returncode == 2
    assert list(tmp_path.iterdir()) == []


def test_cpp_graphs_partition_from_the_command_line(tmp_path):
    g, p = tmp_path / "g.csv", tmp_path / "p.csv"
    assert run("graph", "cpp-trpo-ant", "--csv", str(g)).returncode == 0
    assert run("profile", "cpp-trpo-ant", "--out", str(p)).returncode == 0
    r = run("partition", str(p), "--graph", str(g), "--device", "max4-5sgsd8", "--out", str(tmp_path / "plan"),
            "--solver", "highs", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)  # stdout is the JSON alone: no solver banner before it
    assert plan["status"] == "Optimal" and all(plan["assignment"][n] == "PL" for n in plan["assignment"]
                                               if n.endswith((".fvp_fwd", ".fvp_bwd")))  # CPP's FVP unit


def test_train_json_and_steps_rounded_up_said_once(tmp_path):
    r = run("train", "apdrl-a2c-invpendulum", "--steps", "300", "--set", "rollouts_per_update=2", "--out",
            str(tmp_path / "a"), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["env_steps"] == 320 and summary["updates"] == 4
    assert any("300 steps are 4 whole updates of 80 steps: training 320 steps" in n for n in summary["notes"])
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["steps"] == 300 and cfg["steps_trained"] == 320


def test_a_short_run_says_it_takes_no_gradient_step(tmp_path):
    r = run("train", "apdrl-dqn-cartpole", "--steps", "1000", "--out", str(tmp_path / "d"), "--precision", "fp32")
    assert r.returncode == 0 and "do not pass learning_starts = 10000" in r.stderr


def test_library_banners_stay_off_the_console(tmp_path):
    """hls4ml's and the ALE's banners: not on the console (unless --verbose)."""
    b = run("build", "heppo-ppo", "--out", str(tmp_path / "b"))  # two hls4ml forward networks
    assert b.returncode == 0, b.stderr
    assert any(c["kind"] == "hls4ml" for c in json.loads((tmp_path / "b" / "manifest.json").read_text())["components"])
    for banner in ("Interpreting", "Topology", "Creating HLS model", "Writing HLS project"):
        assert banner not in b.stdout + b.stderr
    t = run("train", "apdrl-dqn-breakout", "--steps", "40", "--set", "steps_per_update=40", "--set",
            "buffer_size=100", "--set", "eval_episodes=0", "--precision", "fp32", "--out", str(tmp_path / "t"), "--quiet")
    assert t.returncode == 0, t.stderr
    assert "A.L.E" not in t.stdout + t.stderr and len((t.stdout + t.stderr).splitlines()) <= 2
