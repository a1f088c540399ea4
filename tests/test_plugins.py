"""Plug-in points from outside the package: a user's design file, a user's algorithm with its own
graph builder, a network brought as ONNX, entry points; bad files are one line and exit 2."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import GRAPH_BUILDERS, build_graph
from rlhls.designs.registry import DESIGNS, design_names, get_design, unregister_design
from rlhls.host.algorithms import ALGORITHMS, algorithm_names, unregister_algorithm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pendulum_ddpg"

# a small DQN on CartPole, written as a user would: nothing of rlhls edited
USER_DESIGN = '''
from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU

def q(seed):
    return Network("q", (4,), [Dense(16), ReLU(), Dense(2)], seed=seed)

mine = Design(
    name="{name}", seed_file="-", seed_title="a user's design", algorithm="{algorithm}", env_id="CartPole-v1",
    env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2, action_space="discrete",
    networks=(NetSpec("q", "q", q, target=True),), kernels=(KernelSpec("dense_forward", "PL", "fp32", "fp32", {{"pf": 2}}),),
    formats={{"storage": "fp32", "acc": "fp32"}}, device="zcu106", clocks_mhz={{"PL": 200.0}}, batch_size=8,
    hyperparams={{"learning_starts": 32, "train_frequency": 4, "steps_per_update": 64, "buffer_size": 1000}})
'''

# a user's algorithm in their own module: A2C's trainer with one more metric, and a graph builder
# of its own (A2C's graph plus a node of its own)
USER_ALGORITHM = '''
from rlhls.designs.graph import graph_builder
from rlhls.host.algorithms.a2c import A2C, A2CArgs, batch_size
from rlhls.host.algorithms import Algorithm, register_algorithm


class MyA2C(A2C):
    def train_update(self, update, total_updates):
        row = super().train_update(update, total_updates)
        row["my_metric"] = 1000 + update
        return row


def my_graph(bld, design, nets):
    graph_builder("a2c")(bld, design, nets)
    bld.node("my_clip", "my_clip", "returns", 3 * bld.batch, 3 * bld.batch * bld.B)


register_algorithm(Algorithm("my_a2c", MyA2C, A2CArgs, batch_size, summary="A2C with a metric", graph=my_graph))
'''

USER_AC_DESIGN = '''
import my_algorithm  # noqa: F401  (beside this file: registers my_a2c)
from rlhls.designs import Dense, Design, NetSpec, Network, Tanh

def net(name, out):
    return lambda seed: Network(name, (4,), [Dense(16), Tanh(), Dense(out)], seed=seed)

design = Design(
    name="user-my-a2c", seed_file="-", seed_title="a user's algorithm", algorithm="my_a2c", env_id="CartPole-v1",
    env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2, action_space="discrete",
    networks=(NetSpec("policy", "actor", net("policy", 2), optimizer="rmsprop"),
              NetSpec("value", "critic", net("value", 1), optimizer="rmsprop")),
    kernels=(), formats={"storage": "fp32", "acc": "fp32"}, device="zcu106", clocks_mhz={"PL": 200.0}, batch_size=8,
    hyperparams={"num_envs": 2, "n_steps": 4, "rollouts_per_update": 1, "optimizer": "rmsprop"})
'''


@pytest.fixture
def clean_registries():
    """What a test registers is gone after it (other tests list the registries)."""
    from rlhls.designs.kernels import KERNELS

    design_names(), algorithm_names()  # the package's own first: they stay
    designs, algs, builders, kernels = DESIGNS.snapshot(), ALGORITHMS.snapshot(), dict(GRAPH_BUILDERS), KERNELS.snapshot()
    mods = set(sys.modules)
    yield
    KERNELS.restore(kernels)
    DESIGNS.restore(designs)
    for name in set(ALGORITHMS._items) - set(algs[0]):
        unregister_algorithm(name)
    assert GRAPH_BUILDERS == builders
    for m in set(sys.modules) - mods:
        if m.startswith("rlhls_user_") or m in ("my_algorithm", "plugmod", "plugkernels"):
            del sys.modules[m]
    from rlhls.designs import registry
    registry._FILES.clear()


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_user_design_file_trains_end_to_end(tmp_path, capsys, clean_registries):
    f = tmp_path / "my_design.py"
    f.write_text(USER_DESIGN.format(name="user-dqn", algorithm="dqn"))
    assert main(["designs", str(f)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("user-dqn  [DQN]") and "Dense    (4,) -> (16,)" in out
    run = tmp_path / "run"
    assert main(["train", str(f), "--steps", "128", "--out", str(run), "--quiet"]) == 0
    rows = _rows(run / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows] == [64, 128]
    assert json.loads((run / "config.json").read_text())["design"] == "user-dqn"
    # the file's design is registered now, and a second load is the same object
    assert get_design("user-dqn") is get_design(str(f)) is get_design(f"{f}:user-dqn")


def test_flow_takes_a_design_object(tmp_path, clean_registries):
    import rlhls

    f = tmp_path / "my_design.py"
    f.write_text(USER_DESIGN.format(name="user-dqn-flow", algorithm="dqn"))
    design = get_design(str(f))
    by_path = rlhls.Flow(str(f), tmp_path / "by-path", quiet=True)
    # the registered design, at the run's hyperparameters and batch (what is built is what is trained)
    assert by_path.design == design.bind(by_path.hyperparams, batch=by_path.algorithm.batch(by_path.hyperparams))
    by_path.close()
    unregister_design(design.name)  # a Design the registry does not know works the same
    flow = rlhls.Flow(design, tmp_path / "flow", quiet=True)
    plan = flow.partition()
    assert set(plan.assignment) == {n.name for n in build_graph(design).nodes}
    assert "user-dqn-flow" not in design_names()


def test_user_algorithm_from_outside_the_package(tmp_path, capsys, clean_registries):
    (tmp_path / "my_algorithm.py").write_text(USER_ALGORITHM)
    f = tmp_path / "ac_design.py"
    f.write_text(USER_AC_DESIGN)
    design = get_design(str(f))
    assert "my_a2c" in algorithm_names() and design.algorithm == "my_a2c"
    graph = build_graph(design)  # dispatched to the user's builder
    a2c_like = {n.name for n in graph.nodes}
    assert "my_clip" in a2c_like and {"returns", "loss", "policy.fc1.fwd", "value.fc2.upd"} <= a2c_like
    assert main(["algorithms", "my_a2c"]) == 0 and "my_a2c" in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["train", str(f), "--steps", "16", "--out", str(run), "--quiet"]) == 0
    rows = _rows(run / "metrics.csv")
    assert len(rows) == 2 and [int(r["my_metric"]) for r in rows] == [1001, 1002]  # the user's trainer ran
    # unregistered, no design can name it any more
    unregister_algorithm("my_a2c")
    with pytest.raises(RlhlsError, match="my_a2c' has no training-graph builder"):
        build_graph(design)


def test_a_design_file_with_several_designs_needs_a_name(tmp_path, capsys, clean_registries):
    f = tmp_path / "two.py"
    f.write_text(USER_DESIGN.format(name="user-a", algorithm="dqn") + "\nimport dataclasses\n"
                 "other = dataclasses.replace(mine, name='user-b')\n")
    assert main(["train", str(f), "--steps", "64", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "several designs (user-a, user-b)" in err and f"{f}:NAME" in err
    assert not (tmp_path / "r").exists()
    assert get_design(f"{f}:user-b").name == "user-b"
    assert main(["designs", str(f)]) == 0 and "user-a  [DQN]" in (out := capsys.readouterr().out) and "user-b" in out


@pytest.mark.parametrize("text,expected", [
    (None, "no such file"),
    ("x = 1\n", "defines no Design"),
    ("import math\n\nraise RuntimeError('my bug')\n", ":3: RuntimeError: my bug"),
    ("def f(:\n", "SyntaxError"),
    ("from rlhls.designs.registry import get_design\nimport dataclasses\n"
     "d = dataclasses.replace(get_design('heppo-ppo'), name='heppo-ppo')\n", "'heppo-ppo' is registered already"),
    (USER_DESIGN.format(name="user-bad", algorithm="dqn").replace('"pf": 2', '"pf": 0'), "kernel 'dense_forward'"),
])
@pytest.mark.parametrize("command", ["run", "train", "build", "designs"])
def test_bad_design_files_are_one_line(tmp_path, capsys, clean_registries, text, expected, command):
    f = tmp_path / "bad_design.py"
    if text is not None:
        f.write_text(text)
    before = design_names()
    out = tmp_path / "out"
    args = [command, str(f)] + ([] if command == "designs" else ["--out", str(out)])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlhls: error: design file '{f}'") and err.count("\n") == 1, err
    assert expected in err and "Traceback" not in err
    assert design_names() == before and not out.exists()  # nothing registered, nothing written


def test_every_seed_design_resolves_as_before():
    # discovered from the package's modules, in the seeds' order, each the object its module makes
    from rlhls.designs import apdrl, cpp, fddpg, heppo, traffic

    expected = [d.name for m in (heppo, cpp, fddpg, apdrl, traffic) for d in m.designs()]
    # (designs/zoo.py's, on no seed paper, list after the seeds')
    assert design_names()[:len(expected)] == expected
    for name in expected:
        d = get_design(name)
        assert d.name == name and type(d).__module__ == "rlhls.designs.design"
        assert d.algorithm in algorithm_names() and d.algorithm in GRAPH_BUILDERS
        assert sys.modules[d.networks[0].factory.__module__].__name__.startswith("rlhls.designs.")


def test_onnx_import_round_trip_and_refusals(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from rlhls.designs.nets import mlp, nature_cnn
    from rlhls.designs.onnx_export import export_onnx
    from rlhls.designs.onnx_import import import_onnx

    for net, shape in ((mlp("a", 5, (8, 8), 3, out_act="softmax"), (4, 5)),
                       (nature_cnn("c", 2, seed=1), (2, 4, 84, 84))):
        back = import_onnx(export_onnx(net), net.name)
        assert [l.kind for l in back.layers] == [l.kind for l in net.layers]
        assert {d["init"] for d in back.describe() if "init" in d} == {"onnx"}
        x = np.random.default_rng(0).standard_normal(shape)
        assert np.allclose(back.forward(x), net.forward(x), rtol=1e-5, atol=1e-6)
    # a node outside the layer language is named
    model = export_onnx(mlp("a", 5, (8,), 3))
    model.graph.node[1].op_type = "Elu"  # (LeakyRelu is a layer now)
    with pytest.raises(RlhlsError, match=r"node 'fc1_relu' \(Elu\): not in the layer language"):
        import_onnx(model)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 4, 4])
    pool = helper.make_model(helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], name="pool1",
                                                                 kernel_shape=[2, 2])], "p", [x], [y]))
    with pytest.raises(RlhlsError, match=r"node 'pool1' \(MaxPool\)"):
        import_onnx(pool)
    (tmp_path / "junk.onnx").write_bytes(b"not onnx")
    with pytest.raises(RlhlsError, match="not an ONNX model"):
        import_onnx(tmp_path / "junk.onnx")
    assert isinstance(onnx.load(str(EXAMPLE / "actor.onnx")), onnx.ModelProto)


def test_onnx_example_is_the_users_export_and_runs(tmp_path, clean_registries):
    # the committed actor.onnx is what the user's script in that folder writes
    made = tmp_path / "actor.onnx"
    subprocess.run([sys.executable, str(EXAMPLE / "export_actor.py"), str(made)], check=True, capture_output=True)
    assert made.read_bytes() == (EXAMPLE / "actor.onnx").read_bytes()
    out = tmp_path / "run"
    assert main(["run", str(EXAMPLE / "design.py"), "--out", str(out), "--quiet", "--steps", "60",
                 "--set", "learning_starts=40", "--set", "steps_per_update=20", "--set", "batch_size=16"]) == 0
    rec = json.loads((out / "run.json").read_text())
    assert rec["ok"] and rec["design"] == "pendulum-ddpg-onnx" and rec["train"]["env_steps"] == 60
    design = get_design("pendulum-ddpg-onnx")
    assert design.env_id == "Pendulum-v1"
    # the actor trained is the user's network: its first weights are those of the ONNX file
    from onnx import numpy_helper
    import onnx
    w = numpy_helper.to_array(onnx.load(str(EXAMPLE / "actor.onnx")).graph.initializer[0])
    assert np.array_equal(design.build_networks(0)["actor"].get_params()["fc1.W"], w.T.astype(np.float64))


PLUGIN = '''
import dataclasses
from rlhls.designs.kernels.dense import DenseForward


class MyDense(DenseForward):
    name = "my_dense_forward"
    generic = False


def designs():
    from rlhls.designs.apdrl import designs as seed
    base = next(d for d in seed() if d.name == "apdrl-dqn-cartpole")
    return [dataclasses.replace(base, name="plugged-dqn")]
'''


def test_installed_packages_add_designs_and_kernels_by_entry_points(tmp_path, monkeypatch, clean_registries):
    from rlhls.designs import kernels, registry

    (tmp_path / "plugmod.py").write_text(PLUGIN)
    # an entry point naming a module: the kernels it defines
    (tmp_path / "plugkernels.py").write_text("from rlhls.designs.kernels.dense import DenseBackward\n\n\n"
                                             "class MyBackward(DenseBackward):\n    name = 'my_dense_backward'\n")
    info = tmp_path / "plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlhls.designs]\nmine = plugmod:designs\n\n"
                                           "[rlhls.kernels]\nmine = plugmod:MyDense\nall = plugkernels\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # loaded lazily: on the registries' first use in a process
    _fresh(monkeypatch, registry.DESIGNS)
    monkeypatch.setattr(kernels.KERNELS._lazy, "done", False)
    assert "plugged-dqn" in registry.design_names() and "heppo-ppo" in registry.design_names()
    assert registry.get_design("plugged-dqn").algorithm == "dqn"
    assert type(kernels.get_kernel("my_dense_forward")).__name__ == "MyDense"
    assert "my_dense_backward" in kernels.kernel_names() and "dense_backward" in kernels.kernel_names()
    sys.modules.pop("plugmod", None)
    # a broken plug-in is one line naming it
    (tmp_path / "plugmod.py").write_text("raise ImportError('no numpy here')\n")
    _fresh(monkeypatch, registry.DESIGNS)
    with pytest.raises(RlhlsError, match=r"entry point 'mine' of rlhls.designs \(package plug\): ImportError: no numpy"):
        registry.design_names()


def _fresh(monkeypatch, registry):
    """`registry` empty and not loaded yet, as in a new process (its entries back after the test)."""
    monkeypatch.setattr(registry, "_items", {})
    monkeypatch.setattr(registry, "_origins", {})
    monkeypatch.setattr(registry._lazy, "done", False)


def test_plugins_lists_every_registry_with_its_origin(tmp_path, capsys, clean_registries):
    (tmp_path / "my_algorithm.py").write_text(USER_ALGORITHM)
    f = tmp_path / "ac_design.py"
    f.write_text(USER_AC_DESIGN)
    # the CLI's graph takes the user's algorithm too (its builder registered with it, no run needed)
    assert main(["graph", str(f)]) == 0
    assert "my_clip" in capsys.readouterr().out
    assert main(["plugins", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {(r["kind"], r["name"]): r["origin"] for r in rows}
    assert {r["kind"] for r in rows} == {"kernel", "design", "algorithm", "environment", "experiment"}
    assert by[("algorithm", "a2c")] == "rlhls.host.algorithms.a2c"
    assert by[("algorithm", "my_a2c")] == "my_algorithm"
    assert by[("design", "user-my-a2c")] == f"design file {f}"
    assert by[("kernel", "gae")].startswith("rlhls.designs.kernels.")
    assert all(origin for origin in by.values())
    assert main(["plugins", "algorithm"]) == 0
    out = capsys.readouterr().out
    assert "my_a2c" in out and "dense_forward" not in out
    assert main(["plugins", "nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_a_users_algorithm_in_one_file_goes_through_every_command(tmp_path, capsys, clean_registries):
    """REINFORCE with a baseline, written in one file of the user's (tests/data/my_reinforce.py: its
    trainer, hyperparameters, batch rule and graph builder, and a design naming it), through graph,
    profile, partition, build --csim, train, run, perf and eval; each command loads the file itself."""
    f = tmp_path / "my_reinforce.py"
    shutil.copy(ROOT / "tests" / "data" / "my_reinforce.py", f)
    F = str(f)
    assert main(["graph", F, "--csv", str(tmp_path / "g.csv")]) == 0
    nodes = {line.split(",")[0] for line in (tmp_path / "g.csv").read_text().splitlines()[1:]}
    assert {"returns", "loss", "policy.fc1.fwd", "value.fc2.bwd", "policy.fc2.upd"} <= nodes
    assert main(["profile", F, "--out", str(tmp_path / "prof.csv"), "--quiet"]) == 0
    assert {r["node"] for r in _rows(tmp_path / "prof.csv")} == nodes
    assert main(["partition", str(tmp_path / "prof.csv"), "--graph", str(tmp_path / "g.csv"), "--device", "zcu106",
                 "--out", str(tmp_path / "plan"), "--quiet"]) == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert set(plan["assignment"]) == nodes and "PL" in plan["assignment"].values()
    assert main(["build", F, "--csim", "--out", str(tmp_path / "build"), "--quiet"]) == 0
    built = json.loads((tmp_path / "build" / "manifest.json").read_text())
    assert built["components"] and all(c["csim"]["passed"] for c in built["components"])
    train = tmp_path / "train"
    assert main(["train", F, "--steps", "96", "--out", str(train), "--quiet"]) == 0
    rows = _rows(train / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows] == [32, 64, 96] and json.loads(
        (train / "config.json").read_text())["algorithm"] == "reinforce"
    assert main(["run", F, "--steps", "64", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["ok"]
    assert main(["perf", F, "--run", str(train), "--out", str(tmp_path / "perf"), "--quiet"]) == 0
    assert json.loads((tmp_path / "perf" / "perf.json").read_text())
    assert "no gradient-step rule" not in (tmp_path / "perf" / "perf.txt").read_text()  # the file's grad_steps
    capsys.readouterr()
    assert main(["eval", str(train), "--design", F, "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2


def test_the_plugin_tests_pass_in_a_shuffled_order(tmp_path):
    """The registries hold no order: the plug-in and registry tests (the one-file REINFORCE through
    every command among them) pass shuffled, in a fresh process (pytest-random-order; another seed:
    ``pytest -p random_order --random-order-seed=N tests/test_plugins.py tests/test_registry.py``)."""
    slow = "onnx_example or no_argparse or shuffled_order"  # slow and order-free, or this test itself
    res = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "random_order",
                          "--random-order-seed=7", "-k", f"not ({slow})", "tests/test_plugins.py",
                          "tests/test_registry.py"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "test_a_users_algorithm_in_one_file_goes_through_every_command PASSED" in res.stdout
