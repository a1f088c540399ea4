"""Profiles of the registered designs, the `rlhls profile` command, and AP-DRL's partitioning trends."""

import fnmatch
import json
import math

import pytest

from rlhls.designs.devices import get_device
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import design_names, get_design
from rlhls.partition.check import check_schedule
from rlhls.cli import build_parser
from rlhls.designs.kernels import KernelContext, kernels_for
from rlhls.partition.profile import device_capacity, device_links, profile_design, unit_formats
from rlhls.partition.profile_io import RESOURCES, read_profile


@pytest.mark.parametrize("name", design_names())
def test_every_design_profiles(name):
    design = get_design(name)
    device = get_device(design.device)
    rows = profile_design(design)
    graph = build_graph(design)
    mm = {n.name for n in graph.nodes if n.mm}
    by_node = {}
    for r in rows:
        by_node.setdefault(r.node, set()).add(r.unit)
        assert r.latency_us > 0 and math.isfinite(r.latency_us)
        assert all(r.resources.get(k, 0) >= 0 for k in RESOURCES)
        if r.unit == "AIE":
            assert r.node in mm, f"AIE row for non-MM node {r.node}"
    assert set(by_node) == {n.name for n in graph.nodes}
    ctx = KernelContext(design, graph)
    placed = set()  # nodes with one unit given: the design's own units, its pins
    whole = set()  # nodes of a design's whole-step kernel (F-DDPG's ddpg_gradient): one fixed architecture
    for node, units in by_node.items():
        n = graph.node(node)
        own = {u for u in ("PL", "AIE") if u in device.units
               for k, _ in kernels_for(n, ctx, u) if not k.generic and ctx.spec(k.name, u)}
        if any(getattr(k, "train_step", None) for k, _ in kernels_for(n, ctx, "PL")) and "PL" in own:
            whole.add(node)
        if own:  # the design's own unit implements it: there only
            assert units == own, (node, units)
            placed.add(node)
            continue
        pin = next((u for g, u in design.pins.items() if fnmatch.fnmatchcase(node, g)), None)
        if pin is not None:  # the seed's placement (Design.pins): there only
            assert units == {pin}, (node, units)
            placed.add(node)
            continue
        assert "PS" in units and ("PL" in units) == ("PL" in device.units)
        assert ("AIE" in units) == ("AIE" in device.units and n.kind in ("mm.fwd", "mm.bwd"))
    # a whole-step kernel is the design's one architecture: one point, the same on every node it takes
    assert len({r.point for r in rows if r.node in whole}) <= 1
    assert len([r for r in rows if r.node in whole]) == len(whole)
    free = mm - whole - placed  # MM nodes the partitioner places
    pts = [r.point for r in rows if r.unit == "PL" and r.node in free]
    assert not free or len(pts) > len(free)  # several PL design points per such node


def test_formats_per_unit():
    mixed = unit_formats(get_design("apdrl-ddpg-lunarcont"))
    assert [str(mixed[u][0]) for u in ("PS", "PL", "AIE")] == ["fp32", "fp16", "bf16"]
    assert str(mixed["PL"][1]) == "fp32" and str(mixed["AIE"][1]) == "fp32"
    cpp = unit_formats(get_design("cpp-trpo-ant"))
    assert {str(cpp[u][0]) for u in cpp} == {"fixed<27,4,RND,SAT>"}


def test_pl_points_grow_dsp_and_shrink_latency():
    rows = [r for r in profile_design("apdrl-ddpg-lunarcont", None, 256)
            if r.node == "critic.fc2.fwd" and r.unit == "PL"]
    rows.sort(key=lambda r: int(r.point[2:]))
    assert len(rows) >= 4
    for a, b in zip(rows, rows[1:]):
        assert b.resources["dsp"] > a.resources["dsp"] and b.latency_us < a.latency_us


def test_capacity_and_links():
    cap = device_capacity("vek280")
    assert cap[("PS", "cores")] == 2 and cap[("AIE", "aie_tiles")] == 304 and cap[("PL", "dsp")] == 1312
    max4 = device_capacity("max4")
    assert max4[("PL", "lut")] == 2 * 262_400 and ("PL", "bram36") in max4
    links = device_links("vek280")
    dev = get_device("vek280")
    assert links[("PS", "PL")] == (dev.link("PS", "PL").latency_us.value, dev.link("PS", "PL").bytes_per_us.value)
    assert links[("PL", "AIE")][0] == dev.link("PL", "AIE").latency_us.value
    assert set(device_links("zcu106")) == {("PS", "PL"), ("PL", "PS")}


def _args(argv):
    return build_parser().parse_args(["profile", *argv])


def run_profile(args):
    return args.func(args)


def test_cli_writes_csv_read_back(tmp_path, capsys):
    out = tmp_path / "profile.csv"
    assert run_profile(_args(["apdrl-dqn-cartpole", "--batch", "32", "--out", str(out), "--json"])) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = profile_design("apdrl-dqn-cartpole", None, 32)
    back = read_profile(out)
    assert len(back) == len(rows) == len(printed)
    for a, b in zip(rows, back):
        assert (a.node, a.unit, a.point) == (b.node, b.unit, b.point)
        assert a.latency_us == pytest.approx(b.latency_us, rel=1e-12)
        assert {k: v for k, v in a.resources.items() if v} == {k: v for k, v in b.resources.items() if v}
        assert a.cycles == b.cycles and a.flops == b.flops
    out2 = tmp_path / "max4.csv"
    assert run_profile(_args(["cpp-trpo-ant", "--device", "max4", "--out", str(out2)])) == 0
    assert {r.unit for r in read_profile(out2)} == {"PS", "PL"}


def test_cli_bad_input(tmp_path):
    with pytest.raises(RlhlsError, match="unknown design"):
        run_profile(_args(["nope", "--out", str(tmp_path / "p.csv")]))
    with pytest.raises(RlhlsError, match="unknown device"):
        run_profile(_args(["apdrl-dqn-cartpole", "--device", "zz", "--out", str(tmp_path / "p.csv")]))
    with pytest.raises(RlhlsError, match="does not exist"):
        run_profile(_args(["apdrl-dqn-cartpole", "--out", str(tmp_path / "no" / "p.csv")]))
    assert not list(tmp_path.iterdir())


# ---- AP-DRL's observations through the ILP (partition.ilp.solve, ILP stream) ----------------

def _plan(name, batch, time_limit=300):
    from rlhls.partition.ilp import solve

    design = get_design(name)
    rows = profile_design(design, None, batch)
    edges = build_graph(design, batch).all_edges()  # with the loop-carried weight edges
    cap, links = device_capacity(design.device), device_links(design.device)
    plan = solve(rows, edges, cap, links, ps_cores=2, solver="cbc", time_limit=time_limit)
    # the observations are of the optimum, proven in ~6 s (LunarLander): the limit only stops a hang
    # (20 s, 3x, let a loaded machine stop the solve early with another plan)
    assert plan.status == "Optimal" and check_schedule(plan, rows, edges, cap, links, 2) == []
    mm = [n.name for n in build_graph(design, batch).nodes if n.mm]
    return plan, mm


@pytest.mark.parametrize("batch", [32, 64])
def test_cartpole_small_batch_on_pl(batch):
    plan, mm = _plan("apdrl-dqn-cartpole", batch)
    assert set(plan.assignment.values()) == {"PL"}, {n: u for n, u in plan.assignment.items() if u != "PL"}


def test_capacity_has_plio_pairs():
    cap = device_capacity("vek280")
    aie = get_device("vek280").units["AIE"]
    # the routable budget: 3/4 of the 6 x 28 AIE->PL streams (designs/devices.py plio_routable_fraction)
    assert min(aie.perf["plio_count"].value, aie.perf["plio_count_out"].value) == 6 * 28
    assert cap[("AIE", "plio")] == int(6 * 28 * aie.perf["plio_routable_fraction"].value) == 126
    rows = [r for r in profile_design("apdrl-ddpg-lunarcont", None, 256) if r.unit == "AIE"]
    assert all(1 <= r.usage("plio") <= 2 * r.usage("aie_tiles") for r in rows)


def test_lunarcont_more_aie_nodes_as_batch_grows():
    counts = {}
    for b in (256, 512, 1024):
        plan, mm = _plan("apdrl-ddpg-lunarcont", b)
        counts[b] = sum(plan.assignment[n] == "AIE" for n in mm)
        # low-FLOP layers (the 300 -> 1 critic head) stay on the PL
        assert plan.assignment["critic.fc3.tfwd"] == "PL"
    # the seed (§V-C, Fig. 14-15): "progressively more layer nodes to the AIE" with the batch. With the AIE
    # latency model calibrated on AMD's published QoR (rlhls qor) it holds from 256 to 512; at 1024 thin
    # layers (the 300 -> 2 actor head, the 8-input actor fc1's weight gradient) go back to the PL, where
    # their operands' windows make the AIE PLIO-bound: one node fewer (docs/seeds/apdrl-speedup.md)
    assert counts[256] > 0 and counts[256] < counts[512] and counts[1024] >= counts[256], counts
