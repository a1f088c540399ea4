"""The console: no library banner in any command (the ALE's is the one the environments print),
the learning_starts warning before the first training output, the steps asked are the steps said,
--quiet / --verbose before or after the command."""

import json
import os
import subprocess
import sys

from rlhls.cli import main

BANNERS = ("A.L.E", "Arcade Learning Environment", "Powered by Stella", "pygame", "Retrying in")


def rlhls(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "rlhls", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


def test_train_atari_mixed_no_banner_warning_first_steps_as_asked(tmp_path):
    """Mixed precision without --plan checks the env's actions (an ALE env) before the partition."""
    # one evaluation episode of Breakout, not ten: the evaluation's environment is made all the same
    r = rlhls("train", "apdrl-dqn-breakout", "--steps", "200", "--out", "b", "--set", "eval_episodes=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not any(b in r.stdout + r.stderr for b in BANNERS), r.stdout + r.stderr
    err = r.stderr.splitlines()
    warn = next(i for i, l in enumerate(err) if "do not pass learning_starts" in l)
    first = next(i for i, l in enumerate(err) if l.startswith("update "))
    assert warn < first and err[warn].startswith("rlhls: warning: ")
    assert "steps 200 " in err[first] and "1000" not in r.stderr and "200 env steps" in r.stdout


def test_run_and_experiment_no_banner(tmp_path, capfd, monkeypatch):
    """`rlhls run`'s training (Flow.train: partition, then train) and an experiment's runs, on an
    Atari design, print nothing of the ALE on the console (file descriptors 1 and 2)."""
    import rlhls

    monkeypatch.chdir(tmp_path)
    flow = rlhls.Flow("apdrl-dqn-breakout", out=tmp_path / "run", precision="fp32", overrides={"buffer_size": 1000})
    flow.train(steps=100)
    flow.close()
    assert main(["experiment", "apdrl-table3", "--design", "apdrl-dqn-breakout", "--steps", "100", "--seeds", "1",
                 "--set", "buffer_size=1000", "--out", "exp", "--jobs", "1"]) == 0
    out, err = capfd.readouterr()
    assert not any(b in out + err for b in BANNERS), out + err
    assert "[2/2] apdrl-dqn-breakout/mixed-s0: done" in err  # the runs trained


def test_log_flags_before_or_after_the_command(tmp_path, capsys, monkeypatch):
    """Progress and warnings by default, neither with --quiet before or after the command (the
    notes stay in --json)."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "apdrl-dqn-cartpole", "--steps", "50", "--precision", "fp32"]
    assert main([*argv, "--out", "a"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("rlhls: warning: 50 steps do not pass learning_starts") and err[1].startswith("update 1/1")
    for flags in (["-q", *argv, "--out", "b"], [*argv, "--out", "c", "--quiet"]):
        assert main(flags) == 0
        assert capsys.readouterr().err == ""
    assert main(["-q", *argv, "--out", "d", "--json"]) == 0
    assert "do not pass learning_starts" in json.loads(capsys.readouterr().out)["notes"][0]
