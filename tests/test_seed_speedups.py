"""The seeds' headline speed-ups (issue 33, part 1): heppo-table1, fddpg-table4's link model and its
C++ host glue, CPP's Table II model against the whole-run model, a design's declared host overlap."""

import csv
import json
from dataclasses import replace

import pytest

from rlhls.cli import main
from rlhls.designs.devices import get_device
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels.ddpg_gradient import transfer
from rlhls.designs.registry import get_design
from rlhls.host import perf
from rlhls.host.experiments.cpp import model_fvp_s, perf_fvp_s
from rlhls.host.experiments.fddpg import c_glue_seconds
from rlhls.host.experiments.heppo import gae_speedup
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


def _fake_measure(design, seed=0):
    """One update of the demonstration rollout (8 x 256 steps) with given phase seconds."""
    hp = {**design.hyperparams, **design.demo.get("set", {}), **design.demo.get("probe", {})}
    row = {"env_steps": "2048", "t_dnn_inference": "0.2", "t_env_run": "3.0", "t_storing_trajectories": "0.05",
           "t_gae_fetch": "0.4", "t_gae_compute": "0.1", "t_gae_write": "0.0", "t_update_forward": "0.5",
           "t_backprop": "0.75"}
    return [row], hp


def test_heppo_table1_tiny(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(perf, "measure_host", _fake_measure)
    monkeypatch.setattr(perf, "ps_factor", lambda dev: (10.0, "given"))
    out = tmp_path / "t1"
    assert main(["experiment", "heppo-table1", "--out", str(out), "--param", "repeats=1", "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "table1.csv")))
    assert [r["phase"] for r in rows][:3] == ["dnn_inference", "env_run", "storing_trajectories"]
    assert {"here_pct", "seed_cpu_pct", "seed_cpu_gpu_pct"} <= set(rows[0])
    env = next(r for r in rows if r["phase"] == "env_run")
    assert float(env["here_pct"]) == pytest.approx(100 * 3.0 / 5.0) and float(env["seed_cpu_pct"]) == 60.71
    sp = json.loads((out / "speedup.json").read_text())["speedup"]
    assert sp["gae_share_here"] == pytest.approx(0.5 / 5.0)
    assert sp["seed_gae_share_cpu_gpu"] == pytest.approx(0.2996)
    # the GAE PE: one element a cycle at 300 MHz, as the seed's 300 M el/s (pipeline fill aside: 1024-element
    # trajectories per PE on 64 PEs pay it once each)
    assert sp["pe_el_s"] == pytest.approx(300e6, rel=0.01) and sp["unit_el_s"] == pytest.approx(64 * 300e6, rel=0.05)
    assert sp["numpy_batched_el_s"] > 0 and sp["numpy_one_trajectory_el_s"] > 0
    md = (out / "table1.md").read_text()
    assert "no GPU on this machine" in md and "9000" in md and "1.43x" in md
    # the speed-up by hand: the plan with its GAE node, against the GAE measured here x the PS factor
    p = _perf_from(out)
    s = gae_speedup(p)
    plan = p.variants["plan"]
    assert s["gae_on_ps_s"] == pytest.approx(plan.total_s - plan.phases_s.get("gae", 0.0) + 10.0 * 0.5)
    assert s["speedup"] == pytest.approx(sp["model_speedup"])


def _perf_from(out):
    """A Perf with the variants the experiment modeled (from speedup.json)."""
    j = json.loads((out / "speedup.json").read_text())["perf"]
    vs = {k: perf.Variant(k, v["label"], v["graph_step_us"], v["phases_s"], total_s=v["total_s"])
          for k, v in j["variants"].items() if v is not None}
    return perf.Perf(j["design"], j["device"], j["steps"], j["ps_factor"], j["ps_factor_basis"], None, vs, {}, {}, [])


@pytest.mark.parametrize("args,what", [
    (["heppo-table1", "--design", "fddpg-arm-m1"], "uses DDPG; Table I profiles PPO"),
    (["heppo-table1", "--param", "repeats=0"], "repeats='0'"),
    (["fddpg-table4", "--design", "heppo-ppo"], "is not an F-DDPG arm design"),
    (["fddpg-table4", "--design", "nosuch"], "nosuch"),
])
def test_bad_input_one_line_exit_2_nothing_written(args, what, tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["experiment", *args, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and what in err[0] and "Traceback" not in err[0]
    assert not out.exists()
