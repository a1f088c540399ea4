"""The plug-in tutorials' code (docs/examples/, shown in docs/extending/) runs as the pages show it."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"


def _run(name, out):
    r = subprocess.run([sys.executable, str(EXAMPLES / name), str(out)], cwd=out.parent, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_kernel_example_registers_and_changes_the_plan(tmp_path):
    text = _run("my_kernel.py", tmp_path / "out")
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["dense_forward", "8193"] and lines[1].split()[:2] == ["dense_forward_2x", "4097"]
    steps = [float(line.split("step ")[1].split()[0]) for line in lines[2:]]
    assert steps[1] < steps[0]  # the design that names the faster kernel gets a shorter step


def test_algorithm_example_trains_with_its_own_metric_and_node(tmp_path):
    text = _run("my_algorithm.py", tmp_path / "run")
    assert "['return_clip']" in text
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["updates_done"] for r in rows] == ["1", "2", "3", "4"]


def test_environment_example_trains_on_the_users_env(tmp_path):
    _run("my_env.py", tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["env"] == "me/Corridor-v0"
    with open(tmp_path / "run" / "episodes.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) >= 1


def test_experiment_example_runs_and_summarises(tmp_path):
    text = _run("my_experiment.py", tmp_path / "sweep")
    out = tmp_path / "sweep"
    assert (out / "summary.md").read_text().startswith("| learning rate | final return | per seed |")
    assert "| 0.00025 |" in text and "| 0.001 |" in text
    with open(out / "runs.csv", newline="") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["done"] * 4
    assert (out / "report.html").is_file()


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_has_a_test(name):
    assert f'_run("{name}"' in Path(__file__).read_text(), f"docs/examples/{name} is shown but run by no test"
