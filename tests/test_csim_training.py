"""--backend csim runs every node the plan puts on the PL through its compiled C++ (and every AIE
node through the AIE kernel sources under the g++ shim), for every algorithm: a short run's
metrics equal --backend emu's in every non-timing column."""

import numpy as np
import pytest

from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.host import backends
from rlhls.host.algorithms import get_algorithm
from rlhls.host.runfolder import read_metrics
from rlhls.host.train import train_design


def _plan(design, batch, unit_of):
    return {n.name: unit_of(n) for n in build_graph(design, batch).nodes}


def _pl_everything(n):
    # every layer node and update on the PL (losses, returns, Polyak steps stay on the PS)
    return "PL" if n.kind in ("mm.fwd", "mm.bwd", "act.fwd", "act.bwd", "upd") else "PS"


CASES = {
    "apdrl-dqn-cartpole": (["--steps"], 400, {"learning_starts": 100, "train_frequency": 2, "batch_size": 16,
                                              "steps_per_update": 200}),
    "apdrl-a2c-invpendulum": ([], 80, {"num_envs": 2, "n_steps": 4, "rollouts_per_update": 5}),
    "apdrl-ddpg-mntncarcont": ([], 60, {"learning_starts": 30, "batch_size": 8, "steps_per_update": 30}),
    "apdrl-ppo-mspacman": ([], 16, {"num_envs": 2, "num_steps": 4, "num_minibatches": 1, "update_epochs": 1,
                                     "eval_episodes": 0}),  # a Nature-CNN game evaluated: ~45 s
}


def _comparable(rows):
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


@pytest.mark.parametrize("name", list(CASES))
def test_csim_equals_emu_for_every_algorithm(tmp_path, monkeypatch, name, csim_calls):
    design = get_design(name)
    _, steps, hp = CASES[name]
    alg = get_algorithm(design.algorithm)
    batch = alg.batch(alg.hyperparams(design, hp))
    plan = _plan(design, batch, _pl_everything)
    calls = csim_calls
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(design, out=tmp_path / backend, steps=steps, backend=backend, precision="mixed",
                           plan=plan, overrides=hp, progress=False)
        runs[backend] = read_metrics(run.folder / "metrics.csv")
    assert len(runs["emu"]) >= 2
    assert _comparable(runs["emu"]) == _comparable(runs["csim"])
    # the compiled kernels really ran: forward, both gradients and the optimizer of the PL nodes
    assert {"dense_forward", "dense_backward", "weight_gradient", "weight_update"} <= set(calls)
    assert any(float(r.get("skipped_steps") or 0) == 0 for r in runs["csim"])


def test_plan_kernels_follow_the_build(tmp_path):
    """The csim backend runs each node with the parameters the build gives its component."""
    from rlhls.designs.kernels import KernelContext, kernels_for

    design = get_design("apdrl-dqn-cartpole")
    pk = backends.PlanKernels(design, 128, backends.get_backend("emu"))
    ctx = KernelContext(design, build_graph(design, 128))
    node = ctx.graph.node("q.fc2.bwd")
    built = {k.name: k.resolve(p) for k, p in kernels_for(node, ctx, "PL")}
    for op, name in (("weight_grad", "weight_gradient"), ("input_grad", "dense_backward")):
        k, node_params = pk._kernel("q.fc2.bwd", "PL", op)
        sizes = k.op_sizes(op, x=np.zeros((128, 64)), dy=np.zeros((128, 64))) if op == "weight_grad" else \
            k.op_sizes(op, dy=np.zeros((128, 64)), w=np.zeros((64, 64)))
        assert k.name == name and pk.params(k, node_params, "q.fc2.bwd", **sizes) == built[name]
    assert built["dense_backward"]["pf"] == 8 and built["dense_backward"]["storage"] == "fp16"
    assert not pk.compiled  # emu leaves the layers' arithmetic to the numpy models
    # an input gradient the graph's node does not need (first layer): the PL's generic kernel for it
    k, _ = pk._kernel("q.fc1.bwd", "PL", "input_grad")
    assert k.name == "dense_backward"
    k, _ = pk._kernel("q.fc1.fwd", "AIE", "forward")
    assert k.name == "mm_aie"


@pytest.mark.parametrize("name", ["apdrl-dqn-cartpole", "apdrl-ddpg-mntncarcont"])
def test_csim_runs_aie_nodes_through_the_shim(tmp_path, monkeypatch, name):
    """Matrix multiplies on the AIE (forward and backward of the hidden layers) run through the AIE
    kernel sources compiled against the shim; the rest of the layers on the PL."""
    from rlhls.flow import aie

    design = get_design(name)
    _, steps, hp = CASES[name]
    alg = get_algorithm(design.algorithm)
    batch = alg.batch(alg.hyperparams(design, hp))

    def unit_of(n):
        if n.mm and ".fc2." in n.name and n.kind in ("mm.fwd", "mm.bwd"):
            return "AIE"
        return _pl_everything(n)

    plan = _plan(design, batch, unit_of)
    shapes = []
    real = aie.aie_gemm

    def counting(a, b, bias=None, **kw):
        shapes.append((a.shape, b.shape))
        return real(a, b, bias, **kw)

    monkeypatch.setattr(aie, "aie_gemm", counting)
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(design, out=tmp_path / backend, steps=steps, backend=backend, precision="mixed",
                           plan=plan, overrides=hp, progress=False)
        runs[backend] = read_metrics(run.folder / "metrics.csv")
    assert _comparable(runs["emu"]) == _comparable(runs["csim"])
    assert len(shapes) > 3  # forward, input and weight gradients of the AIE layers went through the shim
