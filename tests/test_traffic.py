"""a2c-traffic (seed 004) end to end: the MAC array's training hooks (each layer operation of the
trunk as one stage program, emu == csim == the dense kernels), the plan's trunk on the compute
element inside training, A2C with the shared conv + fc trunk (emu == csim metrics, exact
--resume), and the traffic experiment's evaluation on held-out seeds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rlhls.designs.arith import im2col
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import get_kernel
from rlhls.designs.registry import get_design
from rlhls.host.algorithms import get_algorithm
from rlhls.host.backends import CsimBackend, PlanKernels, get_backend
from rlhls.host.runfolder import read_metrics
from rlhls.host.train import train_design

from cpp_util import CACHE

K = get_kernel("mac_array")
DESIGN = get_design("a2c-traffic")
# a short A2C: 8-step rollouts of the one SUMO env, one rollout per update (batch 8)
TINY = {"n_steps": 8, "rollouts_per_update": 1, "eval_episodes": 0}  # hour-long episodes: no evaluation


@pytest.fixture(scope="module")
def csim():
    return CsimBackend(cache_dir=CACHE / "csim-lib")


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _fp32(rng, shape, scale=1.0):
    return rng.standard_normal(shape).astype(np.float32).astype(np.float64) * scale


def test_layer_operations_run_as_stages_bit_exact_with_the_dense_kernels(csim):
    """PlanKernels' arrays (a Conv2d lowered by im2col) through the element at the training run's
    parameters: forward, input and
    weight gradients equal the generic kernels' models, emu == csim; the conv input gradient has no
    stage and goes to dense_backward; another batch than the node's resizes the element."""
    pk = PlanKernels(DESIGN, 8, get_backend("emu"))  # the parameters the training run below takes
    p = K.resolve(pk._kernel("trunk.fc1.bwd", "PL", "weight_grad")[1])
    g = K.geometry(p)
    assert g["B"] == 8
    rng = np.random.default_rng(3)
    x = _fp32(rng, (8, 1, 12, 12))
    cols = im2col(x, 2, 2, 1)  # (B*P, T) = (968, 4)
    h, dy, dz = _fp32(rng, (8, g["K"])), _fp32(rng, (8, g["M"])), _fp32(rng, (8 * g["P"], g["F"]))
    w_conv, b_conv = _fp32(rng, (g["T"], g["F"])), _fp32(rng, (g["F"],))
    w_fc, b_fc = _fp32(rng, (g["K"], g["M"])), _fp32(rng, (g["M"],))
    def ref(name, n, k, m, **arrays):
        kern = get_kernel(name)
        return kern.model(kern.resolve({"n": n, "k": k, "m": m, "storage": "fp32", "acc": "fp32"}), **arrays)

    cases = [
        ("forward", dict(x=cols, w=w_conv, b=b_conv), ref("dense_forward", 968, 4, 4, x=cols, w=w_conv, b=b_conv)["y"]),
        ("forward", dict(x=h, w=w_fc, b=b_fc), ref("dense_forward", 8, 484, 48, x=h, w=w_fc, b=b_fc)["y"]),
        ("input_grad", dict(dy=dy, w=w_fc), ref("dense_backward", 8, 484, 48, dy=dy, w=w_fc)["dx"]),
        ("weight_grad", dict(x=h, dy=dy), ref("weight_gradient", 8, 484, 48, x=h, dy=dy)["dw"]),
        ("weight_grad", dict(x=cols, dy=dz), ref("weight_gradient", 968, 4, 4, x=cols, dy=dz)["dw"]),
        ("input_grad", dict(dy=dz, w=w_conv), ref("dense_backward", 968, 4, 4, dy=dz, w=w_conv)["dx"]),
    ]
    stages = [K.op_stage(op, p, **a)[0] for op, a, _ in cases]
    assert stages == ["fwd_conv", "fwd_fc", "bwd_delta", "bwd_wgrad", "bwd_conv_wgrad", None]
    calls = []
    for backend in (get_backend("emu"), csim):
        call = backend.call
        backend.call = lambda name, q, **a: calls.append((backend.name, name)) or call(name, q, **a)  # noqa: B023
        try:
            for op, arrays, want in cases:
                got = K.run_op(op, backend, p, **arrays)
                if op == "weight_grad":
                    got, db = got
                    assert db is None  # the bias gradients stay on the PS
                assert np.array_equal(_bits(got), _bits(want)), (backend.name, op)
        finally:
            backend.call = call
    assert [n for b, n in calls if b == "csim"] == ["mac_array"] * 5 + ["dense_backward"]
    # a call at batch 2 with the node's parameters at batch 8: the element sized for 2
    y = K.run_op("forward", get_backend("emu"), p, x=h[:2], w=w_fc, b=b_fc)
    assert np.array_equal(_bits(y), _bits(ref("dense_forward", 2, 484, 48, x=h[:2], w=w_fc, b=b_fc)["y"]))
    with pytest.raises(RlhlsError, match=r"weights of shape \(5, 5\) are neither"):
        K.run_op("forward", csim, p, x=np.zeros((8, 5)), w=np.zeros((5, 5)))
    with pytest.raises(RlhlsError, match="not whole samples of 121 conv positions"):
        K.run_op("forward", csim, p, x=np.zeros((100, 4)), w=w_conv, b=b_conv)


def test_the_training_batch_gives_the_seeds_5808_iterations():
    alg = get_algorithm("a2c")
    hp = alg.hyperparams(DESIGN, {})
    assert (hp["num_envs"], hp["n_steps"], alg.batch(hp)) == (1, 32, DESIGN.batch_size)
    pk = PlanKernels(DESIGN, alg.batch(hp), get_backend("emu"))
    k, params = pk._kernel("trunk.fc1.bwd", "PL", "weight_grad")
    stages = {s["name"]: s for s in K.cost(K.resolve(params))["stages"]}
    assert k is K and stages["bwd_wgrad"]["iterations"] == 48 * 484 // 4 == 5808
    assert stages["bwd_wgrad"]["accumulations"] == 32  # the accumulation count is the batch
    # the heads are not the element's: the dense kernels where the plan puts them on the PL
    assert pk._kernel("policy.fc1.fwd", "PL", "forward")[0].name == "dense_forward"
    assert pk._kernel("trunk.conv1.fwd", "PL", "forward")[0] is K


def test_the_plan_keeps_all_but_the_mac_arrays_stages_on_the_ps():
    # the seed's PL is the compute element: heads, activations, loss, returns and RMSprop on the PS
    from rlhls.partition.design_plan import partition_design
    from rlhls.partition.profile import profile_design

    prof = profile_design(DESIGN)
    plan = partition_design(DESIGN, rows=prof)
    on_pl = {n for n, u in plan.assignment.items() if u != "PS"}
    assert on_pl == set(prof.own) == {f"trunk.{l}.{p}" for l in ("conv1", "fc1") for p in ("fwd", "bwd")}
    assert {r.unit for r in prof if r.node == "policy.fc1.fwd"} == {"PS"}
    unpinned = dataclasses.replace(DESIGN, pins={})
    assert {r.unit for r in profile_design(unpinned) if r.node == "policy.fc1.fwd"} == {"PS", "PL"}
    with pytest.raises(RlhlsError, match="pin 'policy.*' names unit 'GPU'"):
        dataclasses.replace(DESIGN, pins={"policy.*": "GPU"})


def _comparable(rows):
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def test_a2c_traffic_trains_the_same_on_emu_and_csim_and_resumes_exactly(tmp_path, monkeypatch, csim_calls):
    monkeypatch.setenv("RLHLS_CACHE_DIR", str(CACHE))
    calls = csim_calls
    # the seed's partition: the trunk's matrix multiplies on the compute element, the rest on the PS
    graph = build_graph(DESIGN, 8)
    asg = {n.name: "PL" if n.name.startswith("trunk.") and n.kind in ("mm.fwd", "mm.bwd") else "PS"
           for n in graph.nodes}
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(DESIGN, out=tmp_path / backend, steps=24, backend=backend, plan=asg, overrides=TINY,
                           progress=False)
        runs[backend] = read_metrics(run.folder / "metrics.csv")
    assert len(runs["emu"]) == 3 and _comparable(runs["emu"]) == _comparable(runs["csim"])
    assert set(calls) == {"mac_array"} and len(calls) == 3 * 5  # per step: conv fwd, fc fwd, fc bwd (2), conv wgrad
    assert all(np.isfinite(float(r["policy_loss"])) and float(r["grad_norm"]) > 0 for r in runs["emu"])
    # killed after update 2 (mid-episode: 3600 s of traffic are ~110 steps), resumed: the same run
    def kill(update):
        if update == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_design(DESIGN, out=tmp_path / "cut", steps=24, plan=asg, overrides=TINY, progress=False,
                     on_update=kill)
    assert len(read_metrics(tmp_path / "cut" / "metrics.csv")) == 2
    run = train_design(DESIGN, out=tmp_path / "cut", steps=24, plan=asg, overrides=TINY, progress=False,
                       resume=True)
    assert _comparable(read_metrics(run.folder / "metrics.csv")) == _comparable(runs["emu"])


def test_evaluation_compares_policies_on_the_same_held_out_episodes(tmp_path):
    from rlhls.host.experiments import traffic as X

    rows = X.evaluate({"fixed-time": X.fixed_time_policy, "random": X.random_policy}, ["ns_heavy"], [7],
                      episode_seconds=900)
    assert [(r["policy"], r["demand"], r["seed"]) for r in rows] == [("fixed-time", "ns_heavy", 7),
                                                                    ("random", "ns_heavy", 7)]
    fixed, rand = rows
    assert fixed["vehicles"] == rand["vehicles"] > 0  # the same departures for both
    assert 0 < fixed["mean_wait"] < rand["mean_wait"] and 0 < fixed["mean_queue"] < rand["mean_queue"]
    assert fixed["steps"] == 33  # the 110 s cycle (4 steps): 880 s after 32 steps, then 35 s of EW
    with pytest.raises(RlhlsError, match="held-out"):
        X.check_held_out([X.training_episode_seed(0, 0, 3)], [(0, 10)])
