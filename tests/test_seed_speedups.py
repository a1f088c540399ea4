"""The seeds' headline speed-ups (issue 33, part 1): fddpg-table4's link model and its
C++ host glue, CPP's Table II model against the whole-run model, a design's declared host overlap."""

from dataclasses import replace

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import get_device
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels.ddpg_gradient import transfer
from rlhls.designs.registry import get_design
from rlhls.host import perf
from rlhls.host.experiments.cpp import model_fvp_s, perf_fvp_s
from rlhls.host.experiments.fddpg import c_glue_seconds
from rlhls.partition.design_plan import partition_design
from rlhls.partition.profile import device_links, profile_design


def _ddpg_params(name):
    d = get_design(name)
    k = get_kernel("ddpg_gradient")
    ctx = KernelContext(d)
    node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
    return k.resolve(k.node_params(node, ctx)), ctx.device


def test_infiniband_and_pcie_transfer_arithmetic_by_hand():
    dev = get_device("max4")
    ib = dev.link("PS", "PL", "infiniband")
    assert ib.bytes_per_us.value == 194.9 and "Table III model 3" in ib.bytes_per_us.source
    p, _ = _ddpg_params("fddpg-arm-m1")
    # bytes: online + target parameters in, gradients out (3 x the padded parameters) and the minibatch,
    # 32 x (2 x 17 + 5 + 2) words, 4 bytes each
    w = transfer(p, dev)["words"]
    assert w["batch_in"] == 32 * 41 and w["params_in"] == 2 * w["grads_out"]
    assert transfer(p, dev)["bytes"] == 4 * (3 * w["grads_out"] + 32 * 41) == 145_792
    assert transfer(p, dev)["total_us"] == pytest.approx(5408 / 200 + 3 * 10 + 145_792 / 2000)  # PCIe 2.0 x4
    assert transfer(p, dev, link="infiniband")["total_us"] == pytest.approx(5408 / 200 + 3 * 10 + 145_792 / 194.9)
    p3, _ = _ddpg_params("fddpg-arm-m3")
    t3 = transfer(p3, dev, link="infiniband")  # the row the rate is fitted to
    assert t3["bytes"] == 428_320 and t3["total_us"] == pytest.approx(2311, abs=0.5)
    # the planner keeps the first path (PCIe); a card without the MAX4 system has no Infiniband
    assert device_links(dev)[("PS", "PL")] == (10.0, 2000.0)
    with pytest.raises(RlhlsError, match="no link PS->PL called 'nope'; it has: PS->PL, PL->PS, PS->PL"):
        dev.link("PS", "PL", "nope")
    assert not any(lk.name for lk in get_device("ku15p").links)


def test_c_glue_runs_and_scales_with_the_parameters():
    m1, m3 = (c_glue_seconds(get_design(n), steps=300) for n in ("fddpg-arm-m1", "fddpg-arm-m3"))
    # actor 17-108-5 + critic 22-108-1 (+ a 108-108 layer each for model 3)
    assert m1["params"] == (17 * 108 + 108 + 108 * 5 + 5) + (22 * 108 + 108 + 108 + 1)
    assert m3["params"] == m1["params"] + 2 * (108 * 108 + 108)
    assert 0 < m1["per_step_s"] < m3["per_step_s"] < 0.05


def test_cpp_table2_model_column_agrees_with_the_whole_run_model():
    for name in ("cpp-trpo-ant", "cpp-trpo-humanoid"):
        d = get_design(name)
        hp = d.hyperparams
        assert model_fvp_s(d, hp["num_steps"], hp["cg_iters"]) == pytest.approx(perf_fvp_s(d), rel=1e-12)
    assert model_fvp_s(get_design("cpp-trpo-ant"), 50_000, 10) == pytest.approx(0.1585, rel=1e-3)


def test_declared_host_overlap_hides_that_share_of_the_graph():
    d = get_design("apdrl-dqn-cartpole")
    with pytest.raises(RlhlsError, match="host_overlap 1.5: expected a fraction 0..1"):
        replace(d, host_overlap=1.5)
    g = build_graph(d)
    rows = profile_design(d, graph=g)
    plan = partition_design(d, graph=g, rows=rows, time_limit=5)
    hp = {**d.hyperparams, **d.demo.get("set", {})}
    host = perf.HostTimes({"env_run": 1e-4}, {"update_forward": 1e-3}, perf._graph_steps(d.algorithm, hp), "given")
    runs = [perf.model_perf(x, plan=plan, rows=rows, graph=g, host=host, factor=2.0, steps=1000)
            for x in (d, replace(d, host_overlap=0.25))]
    graph_s = [v.variants["plan"].total_s - v.variants["plan"].phases_s["env_run"] for v in runs]
    assert graph_s[1] == pytest.approx(0.75 * graph_s[0])
    assert any("25% of the graph hidden behind the host loop (declared by the design)" in a
               for a in runs[1].assumptions)
