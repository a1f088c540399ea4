"""`rlhls experiment apdrl-table3|apdrl-table4`: statistics, run folders, summary files, modeled times."""

import csv

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.host.experiments.apdrl import (cartpole_variant, moving_average, parse_sizes, reward_error,
                                          summarize_table3, table4_rows)
from rlhls.core.errors import RlhlsError


def test_moving_average_matches_a_plain_loop():
    y = np.random.default_rng(1).normal(size=250)
    want = [np.mean(y[max(0, i - 99):i + 1]) for i in range(len(y))]
    np.testing.assert_allclose(moving_average(y), want, rtol=1e-12)
    np.testing.assert_allclose(moving_average(y, 3)[:4], [y[0], y[:2].mean(), y[:3].mean(), y[1:4].mean()])
    assert moving_average([]).size == 0


def test_reward_error():
    assert reward_error(500.0, 490.0) == pytest.approx(2.0)
    assert reward_error(-200.0, -210.0) == pytest.approx(5.0)
    assert np.isnan(reward_error(0.0, 1.0)) and np.isnan(reward_error(float("nan"), 1.0))


def _episodes(folder, returns):
    folder.mkdir(parents=True)
    with open(folder / "episodes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_step", "return", "length"])
        for i, r in enumerate(returns):
            w.writerow([(i + 1) * 10, r, 10])


def test_summary_of_synthetic_runs(tmp_path):
    d = "apdrl-dqn-cartpole"
    finals = {}
    for p, level in (("fp32", 100.0), ("mixed", 97.0)):
        for s in range(3):
            y = np.full(150, level + s)
            y[:50] = 0.0  # only the last 100 episodes count
            _episodes(tmp_path / d / f"{p}-s{s}", y)
            finals.setdefault(p, []).append(level + s)
            if s < 2:  # the deterministic policy's evaluation at the end of the run (eval.csv), two seeds
                (tmp_path / d / f"{p}-s{s}" / "eval.csv").write_text(
                    f"update,env_steps,mean_return,std_return\n1,750,1.0,0.0\n2,1500,{2 * level + s},0.0\n")
    rows = summarize_table3(tmp_path, [d], 3)
    r = rows[0]
    assert r["fp32_eval_mean"] == pytest.approx(200.5) and r["mixed_eval_mean"] == pytest.approx(194.5)
    assert r["fp32_eval_std"] == pytest.approx(np.std([200.0, 201.0], ddof=1))
    assert r["eval_reward_error_percent"] == pytest.approx(6.0 / 200.5 * 100)
    assert r["fp32_mean"] == pytest.approx(101.0) and r["mixed_mean"] == pytest.approx(98.0)
    assert r["fp32_std"] == pytest.approx(np.std(finals["fp32"], ddof=1))
    assert r["reward_error_percent"] == pytest.approx(3.0 / 101.0 * 100)
    assert (tmp_path / "fig11.png").stat().st_size > 1000
    text = (tmp_path / "table3.md").read_text()
    assert "2.97" in text and "1.60" in text  # ours and the seed's Table III error for CartPole
    assert r["fp32_steps"] == r["mixed_steps"] == 1500  # no metrics.csv: the last episode's step


def test_report_summarizes_runs_as_they_stand(tmp_path, capsys):
    d = "apdrl-dqn-cartpole"
    for p in ("fp32", "mixed"):
        for s in range(2):
            _episodes(tmp_path / d / f"{p}-s{s}", np.full(30 if (p, s) == ("mixed", 1) else 60, 50.0 + s))
    assert main(["experiment", "apdrl-table3", "--report", "--seeds", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "least-trained run: fp32 600, mixed 300 steps" in out  # the unfinished mixed seed shows
    rows = list(csv.DictReader(open(tmp_path / "table3.csv")))
    assert rows[0]["design"] == d and rows[0]["mixed_seeds"] == "2" and float(rows[0]["fp32_mean"]) == 50.5
    assert not (tmp_path / d / "plan").exists()  # nothing planned, nothing trained
    assert main(["experiment", "apdrl-table3", "--report", "--out", str(tmp_path / "none")]) == 2
    assert main(["experiment", "heppo-bits", "--report"]) == 2


def test_table3_cli_runs_resumes_and_refuses(tmp_path, capsys, local_ray):
    out = tmp_path / "t3"
    args = ["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "400", "--seeds", "1",
            "--set", "learning_starts=100", "--set", "steps_per_update=200", "--out", str(out), "--quiet"]
    # --jobs 2: the two training runs as Ray tasks (host/engine.py), each in its worker through train_design
    assert main([*args, "--jobs", "2"]) == 0
    for p in ("fp32", "mixed"):
        run = out / "apdrl-dqn-cartpole" / f"{p}-s0"
        rows = list(csv.DictReader(open(run / "metrics.csv")))
        assert rows[-1]["env_steps"] == "400"
    assert (out / "apdrl-dqn-cartpole" / "plan" / "plan.json").exists()
    cfg = (out / "apdrl-dqn-cartpole" / "mixed-s0" / "config.json").read_text()
    assert '"precision": "mixed"' in cfg and "q.fc1.bwd" in cfg
    assert (out / "table3.csv").exists() and (out / "fig11.png").exists()
    # again with a bigger budget: the runs continue from their checkpoints
    assert main([*args[:4], "--steps", "600", *args[6:], "--jobs", "1"]) == 0
    rows = list(csv.DictReader(open(out / "apdrl-dqn-cartpole" / "fp32-s0" / "metrics.csv")))
    assert [r["env_steps"] for r in rows] == ["200", "400", "600"]
    capsys.readouterr()
    assert main([*args[:3], "apdrl-nope", *args[4:]]) == 2
    assert "not a Table III benchmark" in capsys.readouterr().err
    assert main([*args[:-3], "--set", "learning_starts=50", "--out", str(out), "--quiet"]) == 2
    assert "different overrides" in capsys.readouterr().err


def test_table4_model_trend_and_host_times():
    rows = table4_rows(((64, 64), (1024, 768)), repeats=1)
    small, big = rows
    assert small["bf16_units"] == "PL:19"  # AP-DRL: a low-FLOP network stays on the PL
    assert "AIE" in big["bf16_units"]
    assert big["model_speedup"] > small["model_speedup"] and big["model_speedup"] > 1.2  # Table IV's trend
    assert big["flops_per_step"] > 50 * small["flops_per_step"]
    for r in rows:
        assert r["host_fp32_step_ms"] > 0 and r["host_mixed_step_ms"] > 0
        assert r["model_fp32_episode_ms"] == pytest.approx(50 * r["model_fp32_step_ms"])
    assert cartpole_variant(8, 4).build_networks()["q"].layers[0].params["W"].shape == (4, 8)


def test_sizes_argument(capsys):
    assert parse_sizes("64x64, 400X300") == ((64, 64), (400, 300))
    for bad in ("64", "0x5", "ax3"):
        with pytest.raises(RlhlsError):
            parse_sizes(bad)
    assert main(["experiment", "apdrl-table4", "--sizes", "64"]) == 2


def test_table3_marks_untrained_rows(tmp_path, capsys):
    """Runs that never pass learning_starts: a warning at launch, the row marked, no 'reward error'."""
    out = tmp_path / "t3"
    assert main(["experiment", "apdrl-table3", "--design", "apdrl-dqn-cartpole", "--steps", "200", "--seeds", "1",
                 "--set", "steps_per_update=200", "--out", str(out), "--jobs", "1"]) == 0
    cap = capsys.readouterr()
    assert "do not pass learning_starts = 10000" in cap.err
    assert "untrained: no gradient step yet" in cap.out and "reward error" not in cap.out
    rows = list(csv.DictReader(open(out / "table3.csv")))
    assert rows[0]["untrained"] == "True" and rows[0]["reward_error_percent"] == ""
    assert "untrained (no gradient step yet)" in (out / "table3.md").read_text()
