"""`rlhls run`: the whole flow (graph, profile, partition, build --csim, gae csim, train, report) in one command."""

import json
import re

import pytest

from rlhls.designs.registry import get_design

from rlhls.cli import main

TINY = ["--steps", "128", "--env", "InvertedPendulum-v5", "--set", "num_envs=2", "--set", "num_steps=64",
        "--set", "num_minibatches=4", "--set", "update_epochs=1", "--quiet"]


def test_run_smoke_writes_the_whole_folder_and_never_clobbers(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "heppo-ppo", "--out", str(out), *TINY]) == 0
    for f in ("graph.csv", "profile.csv", "plan/plan.json", "plan/gantt.png", "build/manifest.json",
              "build/pl/gae/hls_config.cfg", "train/metrics.csv", "train/reward.png", "report.md", "phases.png", "csim.png", "perf.png", "perf/perf.json"):
        assert (out / f).exists(), f
    rec = json.loads((out / "run.json").read_text())
    assert rec["ok"] and [s["stage"] for s in rec["stages"]][-3:] == ["train", "perf", "report"]
    csim = {c["name"]: c for c in rec["csim"]}
    assert csim["gae"]["passed"] and all(c["passed"] for c in csim.values())
    assert json.loads((out / "plan" / "plan.json").read_text())["assignment"]["gae"] == "PL"  # HEPPO's GAE unit
    report = (out / "report.md").read_text()
    for text in ("## Partition (ILP)", "## Build and checks", "| gae | gae | PL |", "GAE Computation",
                 "plan/gantt.png", "train/reward.png", "every check passed", "experiment 5 of HEPPO-GAE Table III",
                 "## Modeled run on the device", "this flow's run", "perf.png"):
        assert text in report, text
    assert rec["train"]["env_steps"] == 128 and rec["train"]["phases"]["env_run"] > 0
    assert rec["passed"] and rec["build"]["checks"] == len(rec["csim"]) > 0
    page = (out / "report.html").read_text()  # self-contained: every figure of report.md embedded
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)
    assert {"plan/gantt.png", "train/reward.png", "csim.png", "phases.png"} <= set(figures)
    assert not any(f'src="{f}"' in page for f in figures) and page.count('src="data:image/png;base64,') >= len(figures)
    # an existing run folder is refused without --resume; --resume continues it
    capsys.readouterr()
    assert main(["run", "heppo-ppo", "--out", str(out), *TINY]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["run", "heppo-ppo", "--out", str(out), "--resume", *TINY[:-1], "--steps", "256", "--quiet"]) == 0
    assert json.loads((out / "run.json").read_text())["train"]["env_steps"] == 256


def test_run_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["run", "heppo-ppo", "--out", str(out), "--set", "quant_bits=12"]) == 2
    assert "quant_bits" in capsys.readouterr().err and not out.exists()
    assert main(["run", "cpp-trpo-ant", "--out", str(out), "--set", "fvp=float32"]) == 2 and not out.exists()
    assert "fvp" in capsys.readouterr().err


@pytest.mark.parametrize("design,extra", [
    ("apdrl-dqn-cartpole", ["--steps", "600", "--set", "learning_starts=300", "--set", "steps_per_update=300",
                            "--set", "train_frequency=20"]),
    ("apdrl-a2c-invpendulum", ["--steps", "80", "--set", "rollouts_per_update=1"]),
    ("apdrl-ddpg-mntncarcont", ["--steps", "60", "--set", "learning_starts=40", "--set", "steps_per_update=20",
                                "--set", "batch_size=16"]),
])
def test_run_every_algorithm(tmp_path, design, extra):
    """`rlhls run` is the flow for every registered algorithm; the report speaks of the design's own seed."""
    out = tmp_path / "run"
    assert main(["run", design, "--out", str(out), "--quiet", *extra]) == 0
    rec = json.loads((out / "run.json").read_text())
    assert rec["ok"] and rec["algorithm"] == get_design(design).algorithm and rec["train"]["updates"] >= 2
    report = (out / "report.md").read_text()
    assert "AP-DRL" in report and "HEPPO" not in report and "every check passed" in report
    assert (out / "train" / "metrics.csv").is_file() and (out / "build" / "manifest.json").is_file()
