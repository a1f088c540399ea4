"""The plug-in points: a user's kernel registered from this file is profiled, built and
C-simulated; designs name only registered kernels; HEPPO's GAE unit is on the PL of its plan; the
algorithms are one registration each; the command line is the only place that parses arguments."""

import ast
import dataclasses
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import rlhls
from rlhls.designs.arith import dense
from rlhls.designs.design import KernelSpec
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import (Array, Kernel, KernelContext, Param, get_kernel, kernels_for, register_kernel,
                                   unregister_kernel)
from rlhls.designs.kernels.base import check_formats
from rlhls.designs.registry import design_names, get_design
from rlhls.flow.build import build_design
from rlhls.host.algorithms import ALGORITHMS, algorithm_names, get_algorithm
from rlhls.partition.profile import profile_design

TEMPLATE = """{% include "_top_head.j2" %}
  // a toy: y = S(A(b) + sum_k A(x w)) with 2 accumulators per row, then relu
rows:
  for (int r = 0; r < rows; ++r) {
#pragma HLS loop_tripcount min=1 max={{ ints.N }}
    for (int m = 0; m < M; ++m) {
      acc_t a = rl::cast<acc_t>(b[m]);
      for (int k = 0; k < K; ++k) a = rl::add<acc_t>(a, rl::mul<acc_t>(x[r * K + k], w[k * M + m]));
      const storage_t v = rl::cast<storage_t>(a);
      y[r * M + m] = v < storage_t(0) ? storage_t(0) : v;
    }
  }
}
"""


class ToyRelu(Kernel):
    """A user's kernel: a dense layer with its ReLU fused, for the forward nodes of the designs that name it."""

    name = "toy_relu_dense"
    summary = "y = relu(x @ W + b)"
    params = (Param("n", "int", 4, "rows N_MAX", min=1), Param("k", "int", 3, "inputs", min=1),
              Param("m", "int", 2, "outputs", min=1), Param("storage", "format", "fixed<16,6,RND,SAT>", "data"),
              Param("acc", "format", "fixed<32,12,RND,SAT>", "accumulator"),
              Param("pf", "int", 1, "unused", min=1), Param("ii", "int", 1, "unused", min=1))
    inputs, outputs = ("x", "w", "b"), ("y",)
    template = "toy_relu_dense.cpp.j2"
    rows_param = "n"
    implements = ("mm.fwd",)
    replaces = ("dense_forward",)
    component_suffix = "toy"

    def validate(self, p):
        check_formats(self.name, p)

    def arrays(self, p):
        n, k, m = p["n"], p["k"], p["m"]
        return ([Array("x", (n, k), "storage", True), Array("w", (k, m), "storage"), Array("b", (m,), "storage")],
                [Array("y", (n, m), "storage", True)])

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        y = dense(a["x"], a["w"], a["b"], in_fmt=fm["storage"], w_fmt=fm["storage"], acc_fmt=fm["acc"],
                  out_fmt=fm["storage"])
        return {"y": np.maximum(y, 0.0)}

    def random_inputs(self, p, rng, rows=None):
        s = self.formats(p)["storage"]
        return {"x": s.quantize(rng.standard_normal((rows or p["n"], p["k"]))),
                "w": s.quantize(rng.standard_normal((p["k"], p["m"]))), "b": s.quantize(rng.standard_normal(p["m"]))}

    def node_params(self, node, ctx):
        rows, k, m = ctx.dims(node)
        storage, acc = ctx.formats(self.name, "PL")
        return {"n": rows, "k": k, "m": m, "storage": storage, "acc": acc}

    def cost(self, p, unit="PL", device=None):
        cycles = p["n"] * p["k"] * p["m"] + 10
        return {"cycles": cycles, "latency_us": cycles / 200.0, "memory_bytes": 0,
                "resources": {"lut": 100.0, "ff": 100.0, "dsp": 1.0, "bram36": 0.0, "uram": 0.0, "aie_tiles": 0.0}}


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / ToyRelu.template).write_text(TEMPLATE)
    kernel = register_kernel(type("Toy", (ToyRelu,), {"template_dir": str(tmp_path / "templates")})())
    yield kernel
    unregister_kernel(kernel.name)


def test_a_users_kernel_is_profiled_built_and_csimulated(tmp_path, toy):
    # a fixed-point design without its whole-step gradient kernel (generic kernels: a 48-bit accumulator)
    base = get_design("fddpg-arm-m1")
    design = dataclasses.replace(base, name="toy-arm", formats={**base.formats, "acc": "fixed<48,16,RND,SAT>"},
                                 kernels=tuple(k for k in base.kernels if k.name != "ddpg_gradient")
                                 + (KernelSpec("toy_relu_dense", "PL", "fixed<32,8,RND,SAT>", "fixed<48,16,RND,SAT>"),))
    design.check_kernels()
    ctx = KernelContext(design)
    fwd = ctx.graph.node("actor.fc1.fwd")
    assert [k.name for k, _ in kernels_for(fwd, ctx, "PL")] == ["toy_relu_dense"]  # it replaces dense_forward
    rows = [r for r in profile_design(design) if r.node == "actor.fc1.fwd"]
    assert [r.unit for r in rows] == ["PL"] and rows[0].latency_us == toy.cost(toy.resolve(
        toy.node_params(fwd, ctx)))["latency_us"]  # its own unit: costed by its model, on the PL only
    res = build_design(design, tmp_path / "build", csim=True, hls4ml=True)
    toys = [c for c in res.components if c.kernel == "toy_relu_dense"]
    assert toys and all(c.csim["passed"] for c in toys) and res.passed
    assert not any(c.kind == "hls4ml" for c in res.components)  # no hls4ml project for its networks
    assert (tmp_path / "build" / toys[0].dir / "src" / f"{toys[0].top}.cpp").read_text().count("relu") >= 1


def test_a_broken_users_kernel_fails_its_csim(tmp_path, toy):
    (Path(toy.template_dir) / toy.template).write_text(TEMPLATE.replace("v < storage_t(0) ? storage_t(0) : v", "v"))
    from rlhls.flow.csim import run_csim
    from rlhls.flow.kernels import render_kernel

    r = run_csim(render_kernel(toy.name, {"n": 8}, seed=3), tmp_path / "w", tmp_path / "cache")
    assert not r.passed  # the model's ReLU is not in the C++


def test_registry_refuses_duplicates_and_designs_name_registered_kernels():
    with pytest.raises(RlhlsError, match="registered already"):
        register_kernel(type("Other", (ToyRelu,), {"name": "gae"})())
    for name in design_names():
        get_design(name).check_kernels()
        for spec in get_design(name).kernels:
            assert spec.unit in get_kernel(spec.name).units
    bad = dataclasses.replace(get_design("heppo-ppo"), name="bad",
                              kernels=(KernelSpec("no_such_unit", "PL", "fp32", "fp32"),))
    with pytest.raises(RlhlsError, match="design 'bad': kernel 'no_such_unit': .*unknown"):
        bad.check_kernels()
    typo = dataclasses.replace(get_design("apdrl-dqn-cartpole"), name="typo",
                               kernels=(KernelSpec("dense_forward", "PL", "fp16", "fp32", {"unroll": 8}),))
    with pytest.raises(RlhlsError, match="unknown parameter 'unroll'"):
        typo.check_kernels()


def test_design_parallelism_reaches_the_kernels():
    d = get_design("apdrl-dqn-cartpole")
    ctx = KernelContext(d)
    ps = {k.name: p for k, p in kernels_for(ctx.graph.node("q.fc2.bwd"), ctx, "PL")}
    assert ps["dense_backward"]["pf"] == 8 and ps["weight_gradient"]["pf"] == 8  # AP-DRL's unroll 8
    cpp = get_design("cpp-trpo-ant")
    ctx = KernelContext(cpp)
    (k, p), = kernels_for(ctx.graph.node("policy.fc1.fvp_fwd"), ctx, "PL")
    assert k.name == "fvp" and p["parallelism"] == [16, 8, 5, 8]


def test_heppo_plan_puts_gae_on_the_pl():
    from rlhls.partition.design_plan import partition_design

    plan = partition_design(get_design("heppo-ppo"))
    assert plan.assignment["gae"] == "PL" and plan.status == "Optimal"


def test_algorithms_list_alphabetically_whatever_registered_first():
    from rlhls.host.algorithms import register_algorithm
    from rlhls.host.algorithms.base import TrainerBase

    names = algorithm_names()
    assert {"a2c", "ddpg", "dqn", "ppo", "trpo"} <= set(names)
    before = ALGORITHMS.snapshot()  # its origin too: other tests list where each came from
    a2c = ALGORITHMS.pop("a2c")
    try:
        register_algorithm(a2c)  # now the dict's last entry
        assert list(ALGORITHMS)[-1] == "a2c" and algorithm_names() == sorted(names) == names
    finally:
        ALGORITHMS.restore(before)
    # the package's trainers share the base (PPO included)
    assert all(issubclass(get_algorithm(n).trainer, TrainerBase) for n in ("a2c", "ddpg", "dqn", "ppo", "trpo"))


def test_every_algorithm_is_one_registration():
    assert set(algorithm_names()) >= {"ppo", "dqn", "a2c", "ddpg"}
    for name in algorithm_names():
        alg = get_algorithm(name)
        assert ALGORITHMS[name] is alg and alg.trainer.__module__ == f"rlhls.host.algorithms.{name}"
        for f in alg.args.describe():
            assert f["doc"], f"{name}.{f['name']} has no documentation"
    design = get_design("apdrl-dqn-cartpole")
    alg = get_algorithm("dqn")
    for bad, msg in (({"gamma": "nan"}, "finite"), ({"learning_rate": "-1"}, "expected >= 0.0"),
                     ({"batch_size": "1.5"}, "integer"), ({"loss": "l3"}, "one of"),
                     ({"nope": "1"}, "unknown DQN hyperparameter")):
        with pytest.raises(RlhlsError, match=msg):
            alg.hyperparams(design, bad)


def test_yaml_config(tmp_path):
    from rlhls.host.hyperparams import read_config

    (tmp_path / "zoo.yml").write_text("apdrl-dqn-cartpole:\n  learning_rate: 1.0e-3\n  batch_size: 64\n"
                                      "other:\n  gamma: 0.5\n")
    cfg = read_config(tmp_path / "zoo.yml", "apdrl-dqn-cartpole")
    hp = get_algorithm("dqn").hyperparams(get_design("apdrl-dqn-cartpole"), {"batch_size": "32"}, cfg)
    assert hp["learning_rate"] == 1e-3 and hp["batch_size"] == 32  # --set wins over the file
    (tmp_path / "bad.yml").write_text("gamma: [1, 2]\n")
    with pytest.raises(RlhlsError, match="'gamma' holds a list"):
        read_config(tmp_path / "bad.yml")
    (tmp_path / "broken.yml").write_text("a: b: c\n")
    with pytest.raises(RlhlsError, match="not YAML"):
        read_config(tmp_path / "broken.yml")


def test_no_argparse_below_the_command_line():
    """designs/, partition/, flow/ and host/ import no argparse and no module of rlhls.cli."""
    root = Path(rlhls.__file__).resolve().parent.parent
    offenders = []
    for pkg in ("designs", "partition", "flow", "host"):
        for path in (root / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for n in ast.walk(tree):
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else (
                    [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
                if any(m == "argparse" or m.startswith("rlhls.cli") for m in names):
                    offenders.append(f"{path.relative_to(root)}: {names}")
    assert offenders == []
    assert {m.name for m in pkgutil.iter_modules(rlhls.cli.__path__)} >= {"train", "run", "build", "partition"}


import rlhls.cli  # noqa: E402  (the walk above needs the package's path)
