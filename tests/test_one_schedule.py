"""One cost of a schedule: the partition ILP's objective (``makespan_us``) and the performance model's
graph step of the plan (``variants.plan.graph_step_us``) are the same quantity for every design:
node runs per training step (PPO's GAE once per rollout, TRPO's FVP and value-fit counts, DDPG's
actor every policy_frequency), link costs, loop-carried edges and the PS cores alike."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.host.perf import HostTimes, model_perf
from rlhls.partition.check import check_schedule
from rlhls.partition.design_plan import partition_design
from rlhls.partition.ilp import solve
from rlhls.partition.plan import load_plan
from rlhls.partition.profile import device_capacity, device_links, profile_design
from rlhls.partition.profile_io import ProfileRow

DESIGNS = ("apdrl-ddpg-lunarcont", "apdrl-ddpg-mntncarcont", "apdrl-dqn-breakout", "heppo-ppo", "cpp-trpo-ant")
LIMIT = 60.0  # each solves to optimality in a few seconds; the limit only stops a hang


def _no_host():
    """The graph alone: no host phase, one graph execution per environment step (nothing measured)."""
    return HostTimes({}, {}, 1.0, "given")


@pytest.mark.parametrize("name", DESIGNS)
def test_perf_times_the_plan_at_the_ilps_objective(name):
    """`rlhls partition`'s makespan and `rlhls perf`'s plan step, each solving its own plan, agree; and the
    model's step of a given plan is that plan's makespan exactly (DDPG-LunarCont's was 669.7 us against the
    ILP's 591.1: the model ran the PS nodes on one thread in the graph's topological order, the ILP in its
    own order on the device's cores)."""
    d = get_design(name)
    g = build_graph(d)
    rows = profile_design(d, graph=g)
    plan = partition_design(d, graph=g, rows=rows, time_limit=LIMIT)
    assert plan.status == "Optimal"
    assert check_schedule(plan, rows, g.all_edges(), device_capacity(d.device), device_links(d.device),
                          plan.ps_cores) == []
    solved = model_perf(d, rows=rows, graph=g, host=_no_host(), factor=1.0, steps=1, time_limit=LIMIT)
    assert solved.variants["plan"].step_us == pytest.approx(plan.makespan_us, rel=0.01)
    given = model_perf(d, plan=plan, rows=rows, graph=g, host=_no_host(), factor=1.0, steps=1)
    assert given.variants["plan"].step_us == pytest.approx(plan.makespan_us, rel=1e-9)
    # the nodes the algorithm runs other than once are weighed alike by both
    runs = {n.name: n.runs for n in g.nodes if n.runs != 1.0}
    assert plan.runs == runs and given.node_runs == runs
    if name == "heppo-ppo":  # GAE once per rollout of 10 epochs x 32 minibatches
        assert runs == {"gae": pytest.approx(1 / 320)}
    if name == "cpp-trpo-ant":
        assert len(set(runs.values())) == 3 and len(plan.loops) == 4


def test_the_ilp_weighs_each_node_by_its_runs():
    """Room on the PL for one of two nodes: a node run once per hundred steps saves 0.9 us a step there, one
    run every step 30 us. Weighed by runs the ILP gives the PL to the latter; counted once each it took the
    former, whose 90 us saved once shows in a single execution."""
    rows = [ProfileRow("gae", "PS", 100.0, runs=0.01), ProfileRow("gae", "PL", 10.0, "u", {"dsp": 10}, runs=0.01),
            ProfileRow("mm", "PS", 50.0), ProfileRow("mm", "PL", 20.0, "u", {"dsp": 10})]
    plan = solve(rows, [("gae", "mm", 0)], {("PL", "dsp"): 10}, {}, ps_cores=1, time_limit=LIMIT)
    assert plan.assignment == {"gae": "PS", "mm": "PL"} and plan.status == "Optimal"
    # two loops, one after the other: GAE's 100 us once per 100 steps, then the step's 20 us
    assert plan.makespan_us == pytest.approx(0.01 * 100.0 + 20.0) and plan.loops == {0.01: 100.0, 1.0: 20.0}
    once = solve([ProfileRow(r.node, r.unit, r.latency_us, r.point, r.resources) for r in rows],
                 [("gae", "mm", 0)], {("PL", "dsp"): 10}, {}, ps_cores=1, time_limit=LIMIT)
    assert once.assignment == {"gae": "PL", "mm": "PS"} and once.makespan_us == 60.0


def _rlhls(*args, cwd):
    return subprocess.run([sys.executable, "-m", "rlhls", *args], cwd=cwd, capture_output=True, text=True)


def test_the_profile_csv_carries_the_runs_to_rlhls_partition(tmp_path):
    """`rlhls profile` writes each node's runs; `rlhls partition` on that CSV solves the objective the model
    reports for its plan (`rlhls perf --plan`'s step)."""
    d = get_design("heppo-ppo")
    for argv in (["profile", d.name, "--out", "p.csv"], ["graph", d.name, "--csv", "g.csv"],
                 ["partition", "p.csv", "--graph", "g.csv", "--device", d.device, "--time-limit", "60", "--out",
                  "plan", "--quiet"]):
        r = _rlhls(*argv, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    header = (tmp_path / "p.csv").read_text().splitlines()[0].split(",")
    assert header[-1] == "runs"
    plan = load_plan(tmp_path / "plan")
    assert plan.runs == {"gae": pytest.approx(1 / 320)}
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["runs"] == plan.runs
    g = build_graph(d)
    p = model_perf(d, plan=plan, graph=g, host=_no_host(), factor=1.0, steps=1)
    assert p.variants["plan"].step_us == pytest.approx(plan.makespan_us, rel=1e-9)


def test_a_node_with_two_runs_is_one_line_and_nothing_written(tmp_path):
    (tmp_path / "p.csv").write_text("node,unit,latency_us,point,dsp,runs\na,PS,10,,,1\na,PL,3,u,5,0.5\nb,PS,4,,,\n")
    (tmp_path / "g.csv").write_text("src,dst,bytes\na,b,64\n")
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())
    r = _rlhls("partition", "p.csv", "--graph", "g.csv", "--device", "zcu106", "--out", "plan", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) <= 2 and "row 3: node 'a' runs 0.5 times per step, row 2 says 1" in lines[0]
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before
