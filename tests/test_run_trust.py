"""A run folder, build or experiment record never makes rlhls import a file: a design file runs only
when the user names it on the command line, and only the file the record names (its sha256)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError

# a small DQN on CartPole as a user writes it; importing it appends a line to MARKER (every import is seen)
USER_DESIGN = '''
from pathlib import Path
with open({marker!r}, "a") as f:
    f.write("imported\\n")

from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU

def q(seed):
    return Network("q", (4,), [Dense(16), ReLU(), Dense(2)], seed=seed)

mine = Design(
    name="{name}", seed_file="-", seed_title="a user's design", algorithm="dqn", env_id="CartPole-v1",
    env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2, action_space="discrete",
    networks=(NetSpec("q", "q", q, target=True),), kernels=(KernelSpec("dense_forward", "PL", "fp32", "fp32", {{"pf": 2}}),),
    formats={{"storage": "fp32", "acc": "fp32"}}, device="zcu106", clocks_mhz={{"PL": 200.0}}, batch_size=8,
    hyperparams={{"learning_starts": 32, "train_frequency": 4, "steps_per_update": 64, "buffer_size": 1000}})
'''


def _rlhls(*args, cwd=None):
    """The command in a process of its own (a design file imported there is not registered here)."""
    return subprocess.run([sys.executable, "-m", "rlhls", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def _files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(p, *words):
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """A trained run of a user's design file: (design file, run folder, marker file)."""
    d = tmp_path_factory.mktemp("trust")
    marker = d / "imports.txt"
    f = d / "my_design.py"
    f.write_text(USER_DESIGN.format(marker=str(marker), name="trust-dqn"))
    run = d / "run"
    p = _rlhls("train", f, "--steps", "128", "--out", run, "--quiet")
    assert p.returncode == 0, p.stderr
    marker.unlink()
    return f, run, marker


def test_a_design_file_run_records_the_file_and_its_hash(file_run):
    import hashlib

    f, run, _ = file_run
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["design"] == "trust-dqn"
    assert cfg["design_file"] == {"file": str(f.resolve()), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}


def test_eval_of_a_design_file_run_needs_the_file_named(file_run):
    f, run, marker = file_run
    before = _files(run)
    p = _rlhls("eval", run, "--episodes", "1")
    _one_line(p, "from the file", str(f.resolve()), "--design FILE", "never makes rlhls import a file")
    assert not marker.exists() and _files(run) == before  # the file never ran, nothing written
    p = _rlhls("eval", run, "--episodes", "1", "--design", f, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["episodes"] == 1 and marker.read_text() == "imported\n"
    marker.unlink()


def test_a_changed_design_file_is_refused_naming_both_hashes(file_run, tmp_path):
    import hashlib

    f, run, marker = file_run
    changed = tmp_path / "my_design.py"
    changed.write_text(f.read_text() + "# edited\n")
    want, have = (hashlib.sha256(x.read_bytes()).hexdigest() for x in (f, changed))
    before = _files(run)
    for args in (["eval", run, "--episodes", "1", "--design", changed],
                 ["build", changed, "--weights", run, "--out", tmp_path / "b"],
                 ["perf", changed, "--run", run, "--out", tmp_path / "p"],
                 ["train", changed, "--steps", "192", "--out", run, "--resume"]):
        p = _rlhls(*args)
        _one_line(p, want, have)
    assert _files(run) == before and not (tmp_path / "b").exists() and not (tmp_path / "p").exists()
    marker.unlink()  # the user named `changed`: that one was imported


def test_the_python_api_loads_a_design_file_run_only_with_the_file(file_run):
    f, run, marker = file_run
    code = ("import sys, rlhls\n"
            "from rlhls.core.errors import RlhlsError\n"
            "try:\n    rlhls.load(sys.argv[1])\nexcept RlhlsError as e:\n    print('refused:', e)\n"
            "p = rlhls.load(sys.argv[1], design=sys.argv[2])\n"
            "print('loaded', p.predict(p.observation_space.sample())[0].shape)\n")
    p = subprocess.run([sys.executable, "-c", code, str(run), str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout and "never makes rlhls import a file" in p.stdout and "loaded ()" in p.stdout
    assert marker.read_text() == "imported\n"  # once: when design= named it
    marker.unlink()


@pytest.fixture
def crafted_run(tmp_path):
    """A copy of a real run folder whose config.json names an attacker's file as its design."""
    evil = tmp_path / "evil.py"
    pwned = tmp_path / "pwned"
    evil.write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    run = tmp_path / "run"
    assert main(["train", "apdrl-dqn-cartpole", "--steps", "64", "--out", str(run), "--quiet",
                 "--set", "learning_starts=64"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    return run, cfg, evil, pwned


def _craft(run, cfg, **changes):
    """config.json and the checkpoint both changed, as someone crafting a folder would."""
    from rlhls.host.checkpoint import load_checkpoint, save_checkpoint

    (run / "config.json").write_text(json.dumps({**cfg, **changes}))
    ck = load_checkpoint(run / "checkpoint.npz")
    save_checkpoint(run / "checkpoint.npz", {**ck, **{k: v for k, v in changes.items() if k in ck}})


@pytest.mark.parametrize("spec", ["{evil}", "{evil}:x", "../../{name}"])
def test_a_config_naming_a_file_never_runs_it(crafted_run, capsys, spec):
    import rlhls

    run, cfg, evil, pwned = crafted_run
    name = spec.format(evil=evil, name=evil.name)
    _craft(run, cfg, design=name)
    before = _files(run)
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names a file" in err and "never makes rlhls run code" in err
    with pytest.raises(RlhlsError, match="names a file"):
        rlhls.load(run)
    assert not pwned.exists() and _files(run) == before


def test_a_recorded_design_file_of_a_registered_name_needs_the_file(crafted_run, capsys):
    """A crafted design_file record beside a registered name: the record is believed (refused without
    the file), never acted on."""
    run, cfg, evil, pwned = crafted_run
    (run / "config.json").write_text(json.dumps({**cfg, "design_file": {"file": str(evil), "sha256": "0" * 64}}))
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    assert "give that file" in capsys.readouterr().err and not pwned.exists()


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"design": ' * 50_000 + "1" + "}" * 50_000,
                                  "[" + "9" * 5000 + "]"])
def test_a_config_of_nested_brackets_is_one_line(crafted_run, capsys, text):
    run, _, _, _ = crafted_run
    (run / "config.json").write_text(text)
    before = _files(run)
    for argv in (["eval", str(run)], ["train", "apdrl-dqn-cartpole", "--out", str(run), "--resume", "--steps", "128"],
                 ["build", "apdrl-dqn-cartpole", "--weights", str(run), "--out", str(run.parent / "w")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert _files(run) == before and not (run.parent / "w").exists()


def test_a_build_manifest_naming_a_file_is_not_imported(tmp_path):
    from rlhls.partition.calibrate import _calls

    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    with pytest.raises(RlhlsError, match="names a file"):
        _calls([{"kind": "hls4ml", "nodes": ["x"]}], [], None, {"design": str(evil), "batch": 4})
    assert not pwned.exists()


# ----------------------------------------------------------------------------- experiments

def _user_experiment(record):
    """An experiment taking --design that loads each design in this process (as the built-in ones do)."""
    from rlhls.designs.registry import get_design
    from rlhls.host.experiments import RUNS, TRAINS, Experiment, Summary, register_experiment

    def runs(ctx):
        names = [get_design(d).name for d in ctx.opts.design or ()]
        ctx.start({"name": ctx.opts.name, "designs": names})
        record.append(names)
        return []

    return register_experiment(Experiment("trust-exp", "loads its designs", runs=runs, run=None,
                                          summarize=lambda ctx, outcomes: Summary([]),
                                          options=("design", *TRAINS, *RUNS)), replace=True)


@pytest.fixture
def user_experiment():
    from rlhls.designs import registry
    from rlhls.host.experiments import unregister_experiment

    record = []
    _user_experiment(record)
    names = set(registry.design_names())
    yield record
    unregister_experiment("trust-exp")
    for n in set(registry.design_names()) - names:
        registry.unregister_design(n)
    registry._FILES.clear()


def test_an_experiment_resumes_a_design_file_only_when_given_it(tmp_path, capsys, user_experiment):
    import hashlib

    from rlhls.designs import registry

    marker = tmp_path / "imports.txt"
    f = tmp_path / "exp_design.py"
    f.write_text(USER_DESIGN.format(marker=str(marker), name="trust-exp-dqn"))
    out = tmp_path / "e"
    assert main(["experiment", "trust-exp", "--design", str(f), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    rec = json.loads((out / "experiment.json").read_text())
    assert rec["design_files"] == {str(f): hashlib.sha256(f.read_bytes()).hexdigest()}
    # a new process would import nothing: forget the file here
    registry.unregister_design("trust-exp-dqn")
    registry._FILES.clear()
    marker.unlink()
    before = _files(out)
    assert main(["experiment", "trust-exp", "--out", str(out), "--resume", "--jobs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"give it again (--design {f})" in err
    assert not marker.exists() and _files(out) == before
    old = hashlib.sha256(f.read_bytes()).hexdigest()
    f.write_text(f.read_text() + "# edited\n")
    assert main(["experiment", "trust-exp", "--design", str(f), "--out", str(out), "--resume", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and old in err and hashlib.sha256(f.read_bytes()).hexdigest() in err
    assert _files(out) == before


@pytest.mark.parametrize("key,value,expected", [
    ("design", 5, "expected list or null"), ("design", [1, 2], "expected list or null"),
    ("steps", "many", "expected int or null"), ("jobs", [1], "expected int"), ("full", 1, "expected bool"),
    ("overrides", ["gamma=0.9"], "expected dict"), ("steps", True, "expected int or null")])
def test_an_experiment_record_of_the_wrong_types_is_one_line(tmp_path, capsys, user_experiment, key, value, expected):
    out = tmp_path / "e"
    assert main(["experiment", "trust-exp", "--design", "heppo-ppo", "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    rec = json.loads((out / "experiment.json").read_text())
    rec["options"][key] = value
    (out / "experiment.json").write_text(json.dumps(rec))
    before = _files(out)
    assert main(["experiment", "trust-exp", "--out", str(out), "--resume", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"records option '{key}'" in err and expected in err, err
    assert _files(out) == before


def test_an_experiment_record_of_nested_brackets_is_one_line(tmp_path, capsys, user_experiment):
    out = tmp_path / "e"
    assert main(["experiment", "trust-exp", "--design", "heppo-ppo", "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    (out / "experiment.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["experiment", "trust-exp", "--out", str(out), "--resume", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "[1, 2]", "{", "\xff"])
def test_the_experiments_read_their_folders_as_untrusted(tmp_path, text):
    from rlhls.host.experiments import read_object
    from rlhls.host.experiments.cpp import _part_rows

    p = tmp_path / "config.json"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(RlhlsError, match="damaged experiment folder"):
        read_object(p)
    assert read_object(p, default={"x": 1}) == {"x": 1}
    if text != "[1, 2]":
        with pytest.raises(RlhlsError, match="cannot be read"):
            _part_rows(p)
    else:
        with pytest.raises(RlhlsError, match="not a list of rows"):
            _part_rows(p)


def test_a_run_resized_by_an_rl_zoo_entry_loads_again_from_its_folder(tmp_path, capsys):
    """RL Zoo's net_arch renames the design (apdrl-dqn-cartpole-q32x32): the run records how, so eval,
    load, build --weights and perf --run rebuild it from the registered design."""
    import rlhls

    cfg = tmp_path / "dqn.yml"
    cfg.write_text('CartPole-v1:\n  n_timesteps: 128\n  learning_starts: 64\n  policy_kwargs: "dict(net_arch=[32, 32])"\n')
    run = tmp_path / "run"
    assert main(["train", "apdrl-dqn-cartpole", "--config", str(cfg), "--precision", "fp32", "--out", str(run),
                 "--quiet"]) == 0
    rec = json.loads((run / "config.json").read_text())
    assert rec["design"] == "apdrl-dqn-cartpole-q32x32"
    assert rec["design_resized"] == {"from": "apdrl-dqn-cartpole", "net_arch": {"q": [32, 32]}, "activation": None}
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 1
    policy = rlhls.load(run)
    assert policy._trainer.design.name == "apdrl-dqn-cartpole-q32x32"
    assert [l.units for l in policy._trainer.q.layers if l.kind == "Dense"] == [32, 32, 2]
    assert main(["build", "apdrl-dqn-cartpole", "--weights", str(run), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    assert json.loads((tmp_path / "w" / "manifest.json").read_text())["design"] == "apdrl-dqn-cartpole-q32x32"
    assert main(["perf", "apdrl-dqn-cartpole", "--run", str(run), "--out", str(tmp_path / "p"), "--json"]) == 0
    # a damaged record is one line
    (run / "config.json").write_text(json.dumps({**rec, "design_resized": {**rec["design_resized"],
                                                                          "net_arch": {"q": [64]}}}))
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    assert "resized as recorded is 'apdrl-dqn-cartpole-q64'" in capsys.readouterr().err
