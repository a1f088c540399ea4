"""`rlhls experiment`: Table III configurations and the bit sweep, several seeds, summary + plot."""

import csv

import pytest

from rlhls.cli import main
from rlhls.host.experiments.heppo import configurations

TINY = ["--steps", "128", "--seeds", "2", "--env", "InvertedPendulum-v5", "--set", "num_envs=2",
        "--set", "num_steps=64", "--set", "num_minibatches=4", "--set", "update_epochs=1", "--quiet"]


def test_configurations():
    t3 = configurations("heppo-table3")
    assert [c["set"]["experiment"] for c in t3] == [1, 2, 3, 4, 5]
    bits = configurations("heppo-bits")
    assert [c["set"].get("quant_bits") for c in bits] == [None] + list(range(3, 11))


def test_table3_smoke_parallel_and_resumable(tmp_path, capsys):
    out = tmp_path / "t3"
    assert main(["experiment", "heppo-table3", "--out", str(out), "--jobs", "2", *TINY]) == 0
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert [r["config"] for r in rows] == [f"exp{k}" for k in range(1, 6)]
    assert all(r["seeds"] == "2" and float(r["final_return_mean"]) > 0 for r in rows)
    base = float(rows[0]["final_return_mean"])  # exp 1 is the baseline of the "×" column
    assert [float(r["vs_baseline"]) for r in rows] == [float(r["final_return_mean"]) / base for r in rows]
    assert (out / "comparison.png").stat().st_size > 1000 and "±" in (out / "summary.md").read_text()
    for k in range(1, 6):
        for s in (0, 1):
            assert (out / f"exp{k}-s{s}" / "checkpoint.npz").exists()
    # the two seeds differ, the same seed in a second invocation continues (here: already finished)
    r0 = (out / "exp5-s0" / "metrics.csv").read_text()
    assert r0 != (out / "exp5-s1" / "metrics.csv").read_text()
    assert main(["experiment", "heppo-table3", "--out", str(out), *TINY]) == 0
    assert (out / "exp5-s0" / "metrics.csv").read_text() == r0
    capsys.readouterr()
    assert main(["experiment", "heppo-table3", "--out", str(out), *TINY[:-1], "--env", "CartPole-v1", "--quiet"]) == 2
    assert "different env" in capsys.readouterr().err
    assert main(["experiment", "heppo-nope", "--out", str(tmp_path / "x")]) == 2


def test_an_unknown_param_is_refused_before_anything_runs(tmp_path, capsys):
    for name, msg in (("heppo-table3", "unrecognized arguments: --param nosuch=1"),
                      ("cpp-fig4", "--param nosuch: unknown for cpp-fig4 (known: samples")):
        out = tmp_path / name
        assert main(["experiment", name, "--out", str(out), "--param", "nosuch=1"]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and not out.exists()


def _help(name, capsys) -> str:
    with pytest.raises(SystemExit):
        main(["experiment", name, "--help"])
    return capsys.readouterr().out


def test_each_experiment_lists_its_own_options_and_refuses_another_s(tmp_path, capsys):
    """`rlhls experiment NAME --help` lists exactly that experiment's options (from the registry);
    an option of another experiment is refused in one line, exit 2, before anything is written."""
    import re

    from rlhls.host.experiments import experiment_names, get_experiment

    flags = {}
    for name in experiment_names():
        text = _help(name, capsys)
        listed = set(re.findall(r"^  (?:-[a-z], )?(--[a-z-]+)", text, re.M)) - {"--help"}  # -q, --quiet: --quiet
        declared = {f for o in get_experiment(name).all_options() for f in o.flags}
        assert listed == declared, name
        flags[name] = listed
    assert "--sizes" in flags["apdrl-table4"] and "--report" in flags["apdrl-table3"]
    assert {"--set", "--steps", "--jobs"} <= flags["heppo-table3"] and "--sizes" not in flags["heppo-table3"]
    assert "--param" in flags["cpp-fig4"] and "--param" not in flags["heppo-bits"]
    assert not {"--steps", "--jobs", "--set"} & flags["apdrl-table4"]
    for name, argv in (("heppo-table3", ["--sizes", "64x64"]), ("heppo-bits", ["--report"]),
                       ("apdrl-table4", ["--steps", "100"]), ("cpp-table2", ["--seeds", "2"])):
        out = tmp_path / name
        assert main(["experiment", name, *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"unrecognized arguments: {argv[0]}" in err and len(err.strip().splitlines()) == 1
        assert not out.exists()


def test_python_callers_are_held_to_the_experiment_s_options(tmp_path):
    from rlhls.core.errors import RlhlsError
    from rlhls.host.experiments import ExperimentOptions, run_experiment

    with pytest.raises(RlhlsError, match="--sizes: not an option of experiment heppo-table3"):
        run_experiment(ExperimentOptions("heppo-table3", sizes=((4, 4),), out=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()


def test_a_try_waits_for_an_earlier_try_still_writing_its_folder(tmp_path, monkeypatch):
    """An orphan of a killed driver may still write a run folder: the next try of that run waits
    for its lock before it reads the folder, and names the folder if the orphan never goes."""
    import subprocess
    import sys

    from rlhls.host import engine

    folder = tmp_path / "exp" / "exp1-s0"
    # the orphan holds the lock, sleeps, then leaves a mark just before it exits (and its lock goes)
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(float(sys.argv[2])); "
            "open(sys.argv[3], 'w').close()")
    lock = tmp_path / "exp" / ".exp1-s0.lock"
    lock.parent.mkdir()
    gone = tmp_path / "gone"
    seen = []
    run = engine.Run("exp1-s0", str(folder), fn=lambda: seen.append(gone.exists()) or "ran")
    orphan = subprocess.Popen([sys.executable, "-c", hold, str(lock), "1.5", str(gone)], stdout=subprocess.PIPE,
                              text=True)
    assert orphan.stdout.readline().strip() == "held"
    res = engine.execute(run)
    orphan.wait()
    assert res["result"] == "ran" and seen == [True]  # it ran once the orphan had gone
    # an orphan that never goes: the try fails with one line naming the folder, the lock is left to it
    monkeypatch.setattr(engine, "LOCK_WAIT_S", 0.5)
    orphan = subprocess.Popen([sys.executable, "-c", hold, str(lock), "30", str(gone)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert orphan.stdout.readline().strip() == "held"
        res = engine.execute(run)
    finally:
        orphan.kill()
        orphan.wait()
    assert "is being written by another rlhls process" in res["error"] and str(folder) in res["error"] and len(seen) == 1
    assert engine.execute(run)["result"] == "ran"  # the lock went with the orphan


def _square(width: int, seed: int) -> dict:
    return {"seed": seed, "value": width * width + seed}


def test_a_users_experiment_registers_with_its_own_options(tmp_path, capsys):
    """register_experiment from outside the package: the CLI gives it exactly its options (its own
    --width, --seeds, the engine's) and the skeleton runs, records and prints it."""
    import json

    from rlhls.host.experiments import (RUNS, Experiment, Summary, count, option, register_experiment,
                                        unregister_experiment)

    def runs(ctx):
        ctx.start({"name": ctx.opts.name, "width": ctx.value("width")})
        return [ctx.run(f"s{s}", width=ctx.value("width"), seed=s) for s in range(ctx.opts.seeds or 1)]

    def summarize(ctx, outcomes):
        rows = [o.result for o in outcomes]
        (ctx.out / "rows.json").write_text(json.dumps(rows))
        return Summary(rows, [f"{r['seed']}: {r['value']}" for r in rows], [ctx.out / "rows.json"])

    register_experiment(Experiment("user-squares", "a user's experiment", runs=runs, run=_square,
                                   summarize=summarize,
                                   options=(option("--width", type=count, default=2, help="the width"), "seeds",
                                            *RUNS)))
    try:
        text = _help("user-squares", capsys)
        assert "--width" in text and "--seeds" in text and "--steps" not in text and "--set" not in text
        out = tmp_path / "sq"
        assert main(["experiment", "user-squares", "--width", "3", "--seeds", "2", "--jobs", "1", "--out", str(out),
                     "--quiet", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == [{"seed": 0, "value": 9}, {"seed": 1, "value": 10}]
        assert json.loads((out / "experiment.json").read_text())["width"] == 3
        assert main(["experiment", "user-squares", "--resume", "--jobs", "1", "--out", str(out), "--quiet",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)[1] == {"seed": 1, "value": 10}  # the recorded --width, --seeds
        assert main(["experiment", "user-squares", "--width", "0"]) == 2
        assert "argument --width: 0 must be >= 1" in capsys.readouterr().err
        assert main(["experiment", "user-squares", "--steps", "5"]) == 2
    finally:
        unregister_experiment("user-squares")


def test_installed_packages_add_experiments_by_entry_points(tmp_path, monkeypatch):
    from rlhls.host import experiments as X

    (tmp_path / "plugexp.py").write_text(
        "from rlhls.host.experiments import Experiment, Summary\n"
        "plugged = Experiment('plugged-exp', 'from a package', runs=lambda ctx: [],\n"
        "                     summarize=lambda ctx, outcomes: Summary([]))\n")
    info = tmp_path / "plugexp-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugexp\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlhls.experiments]\nmine = plugexp:plugged\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _fresh(monkeypatch, X.EXPERIMENTS)
    assert X.experiment_names() == ["plugged-exp"]  # the package's own modules are imported already
    assert X.get_experiment("plugged-exp").summary == "from a package"


def test_a_workers_process_reloads_a_users_design_file(tmp_path):
    """A design from a user's file travels to a worker as its absolute path: another process, in
    another folder, loads the same design from it."""
    import subprocess
    import sys
    from pathlib import Path

    from rlhls.designs import registry
    from rlhls.host.experiments import design_ref

    f = Path(__file__).resolve().parents[1] / "examples" / "pendulum_ddpg" / "design.py"
    d = registry.get_design(str(f))
    try:
        ref = design_ref(d)
        assert ref == f"{f}:{d.name}" and design_ref(registry.get_design("heppo-ppo")) == "heppo-ppo"
        code = "import sys; from rlhls.designs.registry import get_design; print(get_design(sys.argv[1]).name)"
        p = subprocess.run([sys.executable, "-c", code, ref], cwd=tmp_path, capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.strip() == d.name, p.stderr
    finally:
        registry.unregister_design(d.name)
        registry._FILES.clear()


def test_an_experiment_that_never_reads_config_refuses_it(tmp_path, capsys):
    """--config is each design's values (ctx.config): an experiment that takes --set but never asks
    for them is refused in one line, never run without the file given."""
    from rlhls.host.experiments import (RUNS, TRAINS, Experiment, Summary, register_experiment,
                                        unregister_experiment)

    def runs(ctx):
        ctx.start({"name": ctx.opts.name, "overrides": ctx.opts.overrides})
        return [ctx.run("s0", width=2, seed=0)]

    register_experiment(Experiment("user-noconfig", "ignores --config", runs=runs, run=_square,
                                   summarize=lambda ctx, outcomes: Summary([]), options=(*TRAINS, *RUNS)))
    try:
        (tmp_path / "hp.yml").write_text("gamma: 0.9\n")
        out = tmp_path / "x"
        assert main(["experiment", "user-noconfig", "--config", str(tmp_path / "hp.yml"), "--jobs", "1",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--config: experiment user-noconfig takes no design's values" in err
        assert not out.exists()
        assert main(["experiment", "user-noconfig", "--set", "gamma=0.9", "--jobs", "1", "--out", str(out),
                     "--quiet"]) == 0
    finally:
        unregister_experiment("user-noconfig")


def _fresh(monkeypatch, registry):
    """`registry` empty and not loaded yet, as in a new process (its entries back after the test)."""
    monkeypatch.setattr(registry, "_items", {})
    monkeypatch.setattr(registry, "_origins", {})
    monkeypatch.setattr(registry._lazy, "done", False)
