"""The whole-run performance model (host/perf.py) and `rlhls perf`."""

import csv
import json
from dataclasses import replace

import pytest

from rlhls.cli import main
from rlhls.designs.devices import get_device
from rlhls.designs.formats import FixedFormat, parse_format
from rlhls.designs.graph import Edge, Node, TrainingGraph, build_graph
from rlhls.designs.registry import design_names, get_design
from rlhls.core.errors import RlhlsError
from rlhls.host.algorithms import get_algorithm
from rlhls.host.perf import (FIXAR_CLOCK_MHZ, HostTimes, _fixar_design, _graph_steps, _ps_choice, host_times,
                             mm_crossover, model_perf, run_phases, schedule)
from rlhls.partition.design_plan import partition_design
from rlhls.partition.plan import Plan, write_plan
from rlhls.partition.profile import device_links, profile_design


def _probe(design) -> dict:
    """The sizes perf's short timing run takes (the demonstration's, with its probe)."""
    return {**design.demo.get("set", {}), **design.demo.get("probe", {})}


def _tiny_graph():
    g = TrainingGraph("tiny", 4)
    g.nodes = [Node("a.fwd", "a", "fwd", 100, 1000, True), Node("a.bwd", "a", "bwd", 100, 1000, True)]
    g.edges = [Edge("a.fwd", "a.bwd", 1000)]
    return g


def test_hand_computed_run_two_nodes_one_transfer_one_ps_phase():
    g = _tiny_graph()
    links = {("PL", "PS"): (1.0, 100.0)}  # 1 us + 1000 B / 100 B/us = 11 us
    sch = schedule(g, {"a.fwd": ("PL", 10.0), "a.bwd": ("PS", 5.0)}, links)
    assert sch["start"]["a.bwd"] == 21.0 and sch["makespan_us"] == 26.0
    assert sch["phase_us"] == {"update_forward": 10.0, "backprop": 5.0} and sch["transfer_us"] == {"backprop": 11.0}
    host = HostTimes({"env_run": 2e-6}, {}, graph_steps=0.5, source="given")
    ph = run_phases(host, sch, steps=1000, factor=3.0)
    # env: 2 us x 3 x 1000 steps; graph: 500 executions of 10 + 5 us of nodes and 11 us of transfer
    assert ph == pytest.approx({"env_run": 6e-3, "update_forward": 5e-3, "backprop": 2.5e-3, "transfers": 5.5e-3})
    # a 50 % overlap of host and graph hides half the graph's time
    half = run_phases(host, sch, steps=1000, factor=3.0, overlap=0.5)
    assert half["env_run"] == pytest.approx(6e-3) and half["transfers"] == pytest.approx(2.75e-3)
    # the same units on both ends: no transfer
    same = schedule(g, {"a.fwd": ("PS", 10.0), "a.bwd": ("PS", 5.0)}, links)
    assert same["makespan_us"] == 15.0 and same["transfer_us"] == {"backprop": 0.0}


def test_host_times_per_step_and_per_gradient_step():
    # on-policy (A2C: one gradient step per rollout of n_steps x num_envs): 1000 steps = 25 executions
    a2c = host_times([{"env_steps": "1000", "t_env_run": "0.2", "t_backprop": "0.5"}], "a2c",
                     {"n_steps": 5, "num_envs": 8}, "given")
    assert a2c.host == pytest.approx({"env_run": 2e-4}) and a2c.graph == pytest.approx({"backprop": 0.02})
    assert a2c.graph_steps == pytest.approx(1 / 40)
    # off-policy: the trainer's own count of gradient steps; updates before learning starts add none
    rows = [{"env_steps": "1000", "train_steps": "0", "t_env_run": "0.1", "t_backprop": "0"},
            {"env_steps": "2000", "train_steps": "100", "t_env_run": "0.1", "t_backprop": "0.5"}]
    dqn = host_times(rows, "dqn", {"train_frequency": 10}, "given")
    assert dqn.host == pytest.approx({"env_run": 1e-4}) and dqn.graph == pytest.approx({"backprop": 0.005})
    assert dqn.graph_steps == pytest.approx(0.1)
    with pytest.raises(RlhlsError, match="no gradient step"):
        host_times(rows[:1], "dqn", {"train_frequency": 10}, "given")
    # a user's algorithm without a rule: one gradient step per update, said in the source
    mine = host_times([{"env_steps": "64", "t_env_run": "0.1", "t_backprop": "0.3"},
                       {"env_steps": "128", "t_env_run": "0.1", "t_backprop": "0.3"}], "my_a2c", {}, "given")
    assert mine.graph_steps == pytest.approx(2 / 128) and mine.graph == pytest.approx({"backprop": 0.3})
    assert "one per update" in mine.source


def test_a_loop_that_runs_less_often_is_scheduled_on_its_own_and_weighed_by_its_runs():
    g = TrainingGraph("tiny", 4)
    g.nodes = [Node("gae", "gae", "gae", 10, 100, False), Node("a.fwd", "a", "fwd", 100, 1000, True),
               Node("loss", "loss", "loss", 10, 100, False)]
    g.edges = [Edge("gae", "loss", 1000), Edge("a.fwd", "loss", 1000)]
    links = {("PL", "PS"): (1.0, 100.0)}  # 11 us for the advantages
    choice = {"gae": ("PL", 8.0), "a.fwd": ("PS", 10.0), "loss": ("PS", 5.0)}
    sch = schedule(g, choice, links, {"gae": 0.25})
    # the minibatch loop: a.fwd 0-10; loss waits for the advantages (in memory from the start: 0 + 11), not
    # for GAE's finish (8 + 11); GAE's loop: 8 us, one run in four executions
    assert sch["start"]["loss"] == 11.0 and sch["loops"] == {1.0: 16.0, 0.25: 8.0}
    assert sch["makespan_us"] == pytest.approx(16.0 + 0.25 * 8.0)
    assert sch["phase_us"] == pytest.approx({"gae": 2.0, "update_forward": 15.0})
    assert sch["transfer_us"] == pytest.approx({"update_forward": 11.0})
    # every node once: one loop, GAE on the critical path as before
    once = schedule(g, choice, links)
    assert once["start"]["loss"] == 19.0 and once["makespan_us"] == 24.0 and once["loops"] == {1.0: 24.0}


def test_rules_count_each_node_as_often_as_the_trainers_run_it():
    # PPO: 10 epochs x 8 minibatches of a 2048-step rollout; a rollout that 8 does not divide keeps the
    # whole minibatches PPO._learn runs (2050 // 256 = 8)
    ppo = get_design("heppo-ppo")
    hp = {**ppo.hyperparams, **_probe(ppo)}
    runs = {n.name: get_algorithm("ppo").node_runs(n, hp) for n in build_graph(ppo).nodes}
    assert runs["gae"] == pytest.approx(1 / 80) and {r for n, r in runs.items() if n != "gae"} == {1.0}
    assert _graph_steps("ppo", hp) == pytest.approx(80 / 2048)
    assert _graph_steps("ppo", {**hp, "num_steps": 257, "num_envs": 8, "num_minibatches": 9}) == pytest.approx(
        10 * (2056 // 228) / 2056)
    # DQN: train_frequency counts vector-env steps, num_envs environment steps each
    assert _graph_steps("dqn", {"train_frequency": 4, "gradient_steps": 2, "num_envs": 8}) == pytest.approx(2 / 32)
    # DDPG: a critic step each vector-env step; the actor's step and the Polyak updates every policy_frequency
    ddpg = get_design("fddpg-arm-m1")
    hp = {**ddpg.hyperparams, "policy_frequency": 2, "num_envs": 4}
    assert _graph_steps("ddpg", hp) == 0.25
    runs = {n.name: get_algorithm("ddpg").node_runs(n, hp) for n in build_graph(ddpg).nodes}
    half = {n for n, r in runs.items() if r == 0.5}
    assert {n for n in runs if n.startswith(("critic@pi.", "actor_loss")) or n.endswith(".soft")} <= half
    assert all(runs[n] == 1.0 for n in runs if n.startswith("critic.") and not n.endswith(".soft"))
    assert runs["critic_loss"] == 1.0 and all(runs[n] == (1.0 if n.endswith(".tfwd") else 0.5)
                                              for n in runs if n.startswith("actor."))
    # TRPO: the value fit's epochs x whole minibatches; the FVP nodes (cg_iters inside) the line search's one more,
    # on the subsample; the policy's other nodes once
    trpo = get_design("cpp-trpo-ant")
    hp = {**trpo.hyperparams, "num_envs": 1, "num_steps": 1000, "value_epochs": 5, "value_minibatch": 64,
          "fvp_subsample": 1}
    runs = {n.name: get_algorithm("trpo").node_runs(n, hp) for n in build_graph(trpo).nodes}
    assert runs["value_loss"] == pytest.approx(5 * 15 * 64 / 1000) and runs["value.fc1.upd"] == 5 * 15
    fvp = {n: r for n, r in runs.items() if ".fvp_" in n}
    assert len(fvp) == 2 * 5 and all(r == pytest.approx(11 / 10) for r in fvp.values())  # CG's 10 + line search's 1
    assert all(r == 1.0 for n, r in runs.items() if not n.startswith("value") and n not in fvp)
    sub = {n.name: get_algorithm("trpo").node_runs(n, {**hp, "fvp_subsample": 3}) for n in build_graph(trpo).nodes}
    assert sub["policy.fc1.fvp_fwd"] == pytest.approx(11 / 10 * 334 / 1000)  # samples 0, 3, ..., 999
    none = {n.name: get_algorithm("trpo").node_runs(n, {**hp, "value_epochs": 0}) for n in build_graph(trpo).nodes}
    assert none["value_loss"] == 1.0 and none["value.fc1.upd"] == 0.0


@pytest.mark.parametrize("name, sets", [
    ("apdrl-dqn-cartpole", {"train_frequency": 5, "gradient_steps": 2}),
    ("apdrl-ddpg-mntncarcont", {"policy_frequency": 2, "batch_size": 16}),
])
def test_off_policy_rules_match_the_trainers_counts_with_several_envs(name, sets, tmp_path):
    from rlhls.host.train import train_design

    d = get_design(name)
    sets = {**sets, "num_envs": 4, "learning_starts": 0, "steps_per_update": 400}
    run = train_design(d, out=tmp_path / "run", steps=400, overrides=sets, progress=False)
    row, hp = run.metrics[-1], run.config["hyperparams"]
    # the trainers learn after the first vector step (g > learning_starts): the rules count its training too
    once = hp.get("gradient_steps", 1)
    assert float(row["train_steps"]) == pytest.approx(_graph_steps(d.algorithm, hp) * 400, abs=once)
    if d.algorithm == "ddpg":
        actor = next(n for n in build_graph(d).nodes if n.name.startswith("critic@pi."))
        runs = get_algorithm("ddpg").node_runs(actor, hp)
        assert float(row["actor_steps"]) == pytest.approx(runs * float(row["train_steps"]), abs=1)


def test_ppo_run_costs_gae_once_per_rollout_and_minibatch_nodes_epochs_x_minibatches():
    from rlhls.host.perf import bind_run

    hp = {**get_design("heppo-ppo").hyperparams, **_probe(get_design("heppo-ppo"))}  # 8 x 256 steps,
    d = bind_run(get_design("heppo-ppo"), hp)  # 10 epochs x 8 minibatches: the graph at the run's sizes
    g = build_graph(d)
    rows = profile_design(d, graph=g)
    host = host_times([{"env_steps": "2048", "t_env_run": "0", "t_backprop": "0"}], "ppo", hp, "given")
    ps = {r.node: r for r in rows if r.unit == "PS"}
    unit = next(r for r in rows if r.node == "gae" and r.unit == "PL")  # the GAE unit; the rest on the PS
    plan = Plan("given", 0.0, 0.0, {**{n: "PS" for n in ps}, "gae": "PL"},
                {}, {**{n: r.point for n, r in ps.items()}, "gae": unit.point}, {}, {}, 0.0)
    p = model_perf(d, plan=plan, rows=rows, graph=g, host=host, factor=2.0, steps=4 * 2048)
    # the hand sum of the model's own node costs over 4 rollouts: GAE once each, the rest 80 times (the plan
    # puts its PS nodes on one core, in turn; the GAE unit's advantages reach the PS while it runs the forwards)
    lat = {**{n: r.latency_us for n, r in ps.items()}, "gae": unit.latency_us}
    gae, rest = lat["gae"], sum(us for n, us in lat.items() if n != "gae")
    assert p.variants["plan"].total_s == pytest.approx(4 * (gae + 80 * rest) * 1e-6, rel=1e-12)
    # all on the PS, list-scheduled on the device's cores: GAE a loop of its own, once per rollout
    dev = get_device(d.device)
    ps_lat = {n: us for n, (_, us) in _ps_choice(g, dev).items()}
    sch = schedule(g, _ps_choice(g, dev), device_links(dev), {n.name: n.runs for n in g.nodes},
                   ps_cores=4)  # the ZCU106's 4 A53 cores
    assert set(sch["loops"]) == {1 / 80, 1.0} and sch["loops"][1 / 80] == ps_lat["gae"]
    assert sch["loops"][1.0] < sum(us for n, us in ps_lat.items() if n != "gae")  # the cores overlap
    assert p.variants["all_PS"].total_s == pytest.approx(4 * (ps_lat["gae"] + 80 * sch["loops"][1.0]) * 1e-6,
                                                         rel=1e-12)
    ps_run = p.variants["all_PS"].phases_s  # each phase its nodes' time x its runs, the overlap spread evenly
    bwd = sum(us for n, us in ps_lat.items() if n.endswith(".bwd"))
    assert ps_run["gae"] / ps_run["backprop"] == pytest.approx(ps_lat["gae"] / (80 * bwd), rel=1e-12)
    assert p.node_runs == {"gae": pytest.approx(1 / 80)} and "gae 0.0125" in p.assumptions[2]
    assert p.to_json()["node_runs_per_graph_execution"] == p.node_runs


def _given_host(design, env_s=1e-4, graph_s=1e-3):
    hp = {**design.hyperparams, **_probe(design)}
    return HostTimes({"env_run": env_s}, {"update_forward": graph_s}, _graph_steps(design.algorithm, hp), "given")


@pytest.fixture(scope="module")
def dqn():
    d = get_design("apdrl-dqn-cartpole")
    g = build_graph(d)
    rows = profile_design(d, graph=g)
    plan = partition_design(d, graph=g, rows=rows, time_limit=120)  # optimal in ~1 s: the limit only stops a hang
    return d, g, rows, plan


def _calibrated(rows, node, unit, point, delta):
    return [replace(r, latency_us=r.latency_us + delta, source="csynth")
            if (r.node, r.unit, str(r.point)) == (node, unit, str(point)) else r for r in rows]


def test_calibrated_row_on_the_critical_path_moves_the_step_by_its_difference(dqn):
    d, g, rows, plan = dqn
    host = _given_host(d)
    base = model_perf(d, plan=plan, rows=rows, graph=g, host=host, factor=2.0, steps=1000)
    sch = schedule(g, {n: (plan.assignment[n], next(r.latency_us for r in rows if r.node == n and r.unit ==
                                                     plan.assignment[n] and str(r.point) == str(plan.point[n])))
                       for n in plan.assignment}, device_links(d.device))
    assert sch["makespan_us"] == pytest.approx(base.variants["plan"].step_us)
    last = max(sch["finish"], key=sch["finish"].get)  # ends the step: on the critical path
    delta = 7.25
    cal = _calibrated(rows, last, plan.assignment[last], plan.point[last], delta)
    moved = model_perf(d, plan=plan, rows=cal, graph=g, host=host, factor=2.0, steps=1000)
    assert moved.variants["plan"].step_us - base.variants["plan"].step_us == pytest.approx(delta, abs=1e-9)
    # a node off it: not on the PS lane, with more slack than delta before each successor
    links = device_links(d.device)
    off = None
    for n in g.nodes:
        u = plan.assignment[n.name]
        succ = [e for e in g.edges if e.src == n.name]
        if u == "PS" or n.name == last:
            continue
        slack = min([sch["start"][e.dst] - sch["finish"][n.name]
                     - (links[(u, plan.assignment[e.dst])][0] + e.bytes / links[(u, plan.assignment[e.dst])][1]
                        if plan.assignment[e.dst] != u else 0.0) for e in succ]
                    + [sch["makespan_us"] - sch["finish"][n.name]])
        if slack > 2 * delta:
            off = n.name
            break
    assert off is not None, "the plan has a node off its critical path"
    cal = _calibrated(rows, off, plan.assignment[off], plan.point[off], delta)
    still = model_perf(d, plan=plan, rows=cal, graph=g, host=host, factor=2.0, steps=1000)
    assert still.variants["plan"].step_us == base.variants["plan"].step_us
    assert "csynth" in still.assumptions[3]


def test_baselines_are_the_plans_they_claim(dqn):
    d, g, rows, plan = dqn
    p = model_perf(d, plan=plan, rows=rows, graph=g, host=_given_host(d), factor=2.0, steps=1000)
    v = p.variants
    assert set(v["all_PS"].units.values()) == {"PS"}
    assert set(v["PL_only"].units.values()) == {"PL"}
    assert all(u == ("AIE" if g.node(n).mm else "PS") for n, u in v["AIE_only"].units.items())
    assert v["plan"].units == dict(plan.assignment)
    # FIXAR-like: the PL at 164 MHz in a fixed-point format; slower per node than the same design point at 245 MHz
    fx, _ = _fixar_design(d)
    assert fx.clocks_mhz["PL"] == FIXAR_CLOCK_MHZ and isinstance(parse_format(fx.formats["pl"]), FixedFormat)
    fx_rows = profile_design(fx, graph=g)
    fp_rows = {(r.node, r.point): r for r in profile_design(replace(fx, clocks_mhz=d.clocks_mhz), graph=g)
               if r.unit == "PL"}
    mm = next(r for r in fx_rows if r.unit == "PL" and g.node(r.node).mm)
    assert mm.cycles / mm.latency_us <= FIXAR_CLOCK_MHZ + 1e-9
    assert mm.latency_us > fp_rows[(mm.node, mm.point)].latency_us
    # a design with its own fixed format keeps it (F-DDPG's fixed<32,8>)
    fd, _ = _fixar_design(get_design("fddpg-arm-m1"))
    assert fd.formats["pl"] == "fixed<32,8,RND,SAT>"
    # speed-ups: the plan over each, per step and for the run, and the sensitivity to the PS factor
    assert p.speedups["all_PS"]["per_step"] == pytest.approx(v["all_PS"].step_us / v["plan"].step_us)
    assert p.speedups["cpu"]["run"] == pytest.approx(v["cpu"].total_s / v["plan"].total_s)
    assert p.sensitivity["x0.5"]["plan_s"] < p.total_s < p.sensitivity["x2"]["plan_s"]


def _synthetic_run(folder, design):
    """A run folder with given per-update phase times (the measurement is the tests below's own)."""
    folder.mkdir(parents=True)
    hp = {**design.hyperparams, **_probe(design)}
    (folder / "config.json").write_text(json.dumps({"design": design.name, "hyperparams": hp}))
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["update", "env_steps", "train_steps", "t_env_run", "t_dnn_inference", "t_update_forward",
                    "t_backprop"])
        w.writerow([1, 1000, 10, 0.2, 0.05, 0.01, 0.02])


@pytest.mark.parametrize("name", design_names())
def test_perf_runs_for_every_registered_design(name, tmp_path, capsys):
    d = get_design(name)
    _synthetic_run(tmp_path / "run", d)
    out = tmp_path / "perf"
    assert main(["perf", name, "--run", str(tmp_path / "run"), "--ps-factor", "4", "--steps", "10000",
                 "--time-limit", "1", "--out", str(out), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["design"] == name and p["steps"] == 10000 and p["ps_factor"] == 4.0
    assert p["variants"]["plan"]["total_s"] > 0 and p["variants"]["all_PS"]["total_s"] > 0
    # the host phases: given seconds per step x the factor x steps
    assert p["variants"]["plan"]["phases_s"]["env_run"] == pytest.approx(0.2 / 1000 * 4 * 10000)
    for f in ("perf.json", "perf.txt", "perf.png"):
        assert (out / f).is_file()


def test_perf_measures_a_short_run_here(tmp_path, capsys):
    out = tmp_path / "perf"
    assert main(["perf", "fddpg-arm-m1", "--steps", "1000", "--time-limit", "1", "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "a short run of fddpg-arm-m1 here" in text and "PS factor x2" in text and "fp32 GEMM" in text
    p = json.loads((out / "perf.json").read_text())
    assert p["measured"]["host_s_per_env_step"]["env_run"] > 0 and p["measured"]["graph_s_per_execution"]
    assert p["variants"]["AIE_only"] is None  # the MAX4 has no AI Engines


@pytest.mark.parametrize("args, what", [
    (["--ps-factor", "-2"], "--ps-factor"),
    (["--ps-factor", "fast"], "--ps-factor"),
    (["--device", "nosuch"], "nosuch"),
    (["--plan", "PLAN"], "not in the training graph"),
    (["--run", "RUN"], "not of 'apdrl-dqn-cartpole'"),
])
def test_perf_bad_input_one_line_exit_2_nothing_written(args, what, tmp_path, capsys):
    other = get_design("fddpg-arm-m1")
    if "PLAN" in args:
        g = build_graph(other)
        write_plan(partition_design(other, graph=g, time_limit=1), tmp_path / "plan")
        args = [a.replace("PLAN", str(tmp_path / "plan" / "plan.json")) for a in args]
    if "RUN" in args:
        _synthetic_run(tmp_path / "run", other)
        args = [a.replace("RUN", str(tmp_path / "run")) for a in args]
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["perf", "apdrl-dqn-cartpole", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and what in err and "Traceback" not in err
    assert not out.exists()


def test_mm_crossover_pl_wins_small_aie_wins_large_as_apdrl_fig6():
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_matmul, pl_matmul

    r = mm_crossover("vek280", sizes=(16, 128, 512))
    by = {x["n"]: x for x in r["rows"]}
    dev = get_device("vek280")
    assert by[16]["faster"] == "PL" and by[512]["faster"] == "AIE" and r["aie_from_n"] == 512 and r["agrees"]
    assert by[128]["aie_us"] == aie_matmul(128, 128, 128, "fp32", dev)["latency_us"]
    assert by[16]["pl_us"] == min(pl_matmul(16, 16, 16, "fp32", dev, pf=pf)["latency_us"] for pf in (1, 4, 16, 64, 256))
    with pytest.raises(RlhlsError, match="lacks a PL or an AIE"):
        mm_crossover("zcu106")


def test_the_model_schedules_the_graph_at_the_measured_runs_sizes():
    """bind_run: a run's rollout and minibatch (HEPPO's demonstration, 8 x 256, minibatch 256) give
    the graph the model schedules, not the design's 64 x 1024 with minibatch 2048."""
    from rlhls.host.perf import bind_run

    design = get_design("heppo-ppo")
    hp = _probe(design)
    full, run = build_graph(design), build_graph(bind_run(design, hp))
    gae = [n for n in full.nodes if n.phase == "gae"][0]
    gae_run = [n for n in run.nodes if n.phase == "gae"][0]
    assert (full.batch, run.batch) == (2048, hp["num_envs"] * hp["num_steps"] // hp["num_minibatches"])
    assert gae.flops / gae_run.flops == (64 * 1024) / (hp["num_envs"] * hp["num_steps"])
    assert build_graph(bind_run(design, {})).batch == full.batch  # no run values: the design's own sizes


@pytest.mark.parametrize("name", ["heppo-ppo", "apdrl-ppo-mspacman", "cpp-trpo-ant"])
def test_a_run_measured_here_at_the_demonstrations_sizes_is_modelled_at_the_designs(name):
    """perf without --run times one update of the demonstration (HEPPO: 8 x 256 rollout, MsPacman: one
    epoch, TRPO: 2,048 steps) but models the design's graph: its gradient steps per environment step
    and node runs are the design's, the measured graph phases scale by the FLOPs of one execution."""
    from rlhls.host.perf import at_design

    design = get_design(name)
    alg = get_algorithm(design.algorithm)
    demo = alg.hyperparams(design, dict(_probe(design)))
    measured = host_times([{"env_steps": str(demo["num_envs"] * demo["num_steps"]), "t_env_run": "2.0",
                            "t_backprop": "1.0"}], design.algorithm, demo, "given")
    graph = build_graph(design)
    host = at_design(measured, design, demo, graph)
    own = alg.hyperparams(design)
    assert host.host == measured.host and host.graph_steps == _graph_steps(design.algorithm, own)
    assert host.graph_steps != measured.graph_steps or name == "apdrl-ppo-mspacman"

    def per_step(h, g):  # graph FLOPs per environment step, each node as often as its rule says
        return h.graph_steps * sum(n.flops * h.node_runs(n) for n in g.nodes)

    small = build_graph(alg.bind(design, demo))
    scale = per_step(host, graph) / per_step(measured, small) * measured.graph_steps / host.graph_steps
    assert host.graph["backprop"] == pytest.approx(measured.graph["backprop"] * scale)
    # the work per environment step is the design's: MsPacman's 4 epochs are 4x the demonstration's one
    ratio = per_step(host, graph) / per_step(measured, small)
    assert ratio == pytest.approx(4.0 if name == "apdrl-ppo-mspacman" else 1.0, rel=0.02)
    assert "FLOPs of the design's graph execution" in host.source
    whole = host_times([{"env_steps": str(own["num_envs"] * own["num_steps"]), "t_env_run": "2.0",
                         "t_backprop": "1.0"}], design.algorithm, own, "given")
    assert at_design(whole, design, own, graph) is whole  # measured at the design's own sizes: kept


def test_perf_without_a_run_models_the_designs_gradient_steps(tmp_path, monkeypatch, capsys):
    import rlhls.host.perf as perf

    design = get_design("heppo-ppo")
    demo = {**design.hyperparams, **_probe(design)}
    monkeypatch.setattr(perf, "measure_host", lambda d, seed=0: ([{"env_steps": "2048", "t_env_run": "2.0",
                                                                   "t_backprop": "1.0"}], demo))
    out = tmp_path / "perf"
    assert main(["perf", "heppo-ppo", "--ps-factor", "2", "--time-limit", "1", "--out", str(out), "--quiet"]) == 0
    m = json.loads((out / "perf.json").read_text())["measured"]
    own = get_algorithm("ppo").hyperparams(design)
    assert m["graph_steps_per_env_step"] == _graph_steps("ppo", own) == pytest.approx(
        own["update_epochs"] * own["num_minibatches"] / (64 * 1024))
