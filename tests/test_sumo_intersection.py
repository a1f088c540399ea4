"""rlhls/SumoIntersection-v0 (seed 004): the occupancy matrix on a scripted scene, the signal
sequence against the seed's Fig. 3 table, the reward's sign, determinism (libsumo == TraCI),
check_env, no sumo process outliving its environment, one-line errors without SUMO, and the
shipped net being what netconvert builds from the definitions."""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlhls.designs import traffic as plan
from rlhls.core.errors import RlhlsError
from rlhls.host.envs import make_env
from rlhls.host.envs import sumo_intersection as si


def _env(**kw):
    return si.SumoIntersection(**kw)


def _sumo_children() -> list[int]:
    """pids of this process's child processes running SUMO (zombies included)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == os.getpid() and name.startswith("sumo"):
            out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# -- the net and its program ------------------------------------------------------------------------

def test_the_net_runs_the_seeds_table_and_is_netconverts_build(tmp_path):
    # SUMO's static program of light C is the Fig. 3 table: 30/5/15/5 s per direction, 110 s
    net = ET.parse(si.NET).getroot()
    phases = [(int(p.get("duration")), p.get("state")) for p in net.find("tlLogic").iter("phase")]
    assert [d for d, _ in phases] == [30, 5, 15, 5, 30, 5, 15, 5] and sum(d for d, _ in phases) == 110
    assert [s for _, s in phases] == [si.signal_state(i) for i in range(8)]
    # interval 0: EW through (and right) green, EW left yield-green, NS red, link by link
    links = {(c.get("from"), int(c.get("fromLane")), c.get("dir")): int(c.get("linkIndex"))
             for c in net.iter("connection") if c.get("tl") == "C"}
    assert len(links) == 16
    s0 = phases[0][1]
    assert s0[links[("E2C", 1, "s")]] == "G" and s0[links[("W2C", 2, "l")]] == "g"
    assert s0[links[("N2C", 0, "r")]] == "r" and s0[links[("S2C", 2, "l")]] == "r"
    assert phases[6][1][links[("N2C", 2, "l")]] == "G" and phases[7][1][links[("S2C", 2, "l")]] == "y"
    # the shipped net and program are what netconvert makes of the definitions (but its dated header)
    built = si.build_network(tmp_path)
    body = lambda p: re.sub(r"<!--.*?-->", "", p.read_text(), count=1, flags=re.S)  # noqa: E731
    assert body(built) == body(si.NET)
    assert (tmp_path / "intersection.tll.xml").read_text() == (si.DATA / "intersection.tll.xml").read_text()


def test_route_sets_are_sampled_from_the_envs_generator(tmp_path):
    rates = {d: sum(r * (e - b) for _, b, e, r in si._flows(d)) for d in si.DEMANDS}
    assert {d: round(v) for d, v in rates.items()} == {"balanced": 2400, "ns_heavy": 2400, "ew_heavy": 2400,
                                                        "rush_hour": 2280}
    a = si.sample_routes("ns_heavy", np.random.default_rng(5), tmp_path / "a.rou.xml", 3600)
    b = si.sample_routes("ns_heavy", np.random.default_rng(5), tmp_path / "b.rou.xml", 3600)
    c = si.sample_routes("ns_heavy", np.random.default_rng(6), tmp_path / "c.rou.xml", 3600)
    assert (tmp_path / "a.rou.xml").read_text() == (tmp_path / "b.rou.xml").read_text() and a == b
    assert (tmp_path / "a.rou.xml").read_text() != (tmp_path / "c.rou.xml").read_text()
    assert abs(a - 2400) < 5 * np.sqrt(2400)  # Poisson: within 5 sigma of the file's rate
    routes = ET.parse(tmp_path / "a.rou.xml").getroot()
    ns = sum(1 for v in routes.iter("vehicle") if v.get("route")[0] in "NS")
    assert 0.75 < ns / a < 0.85  # NS-heavy: 1800 of 2400 veh/h


# -- observation -----------------------------------------------------------------------------------

def test_occupancy_matrix_of_a_scripted_scene():
    env = _env(demand="balanced")
    env.reset(seed=1)
    sim = env._sim
    s = sim.sumo
    # (lane, distance of the car's front from the stop line in m); cars of 5 m standing still
    scene = [("N2C_2", 0.0), ("E2C_0", 10.0), ("W2C_1", 6.0), ("S2C_1", 86.0), ("S2C_0", 200.0)]
    for i, (lane, dist) in enumerate(scene):
        route = lane[0] + ("_right", "_through", "_left")[int(lane[-1])]
        s.vehicle.add(f"x{i}", route, typeID="car", departLane=lane[-1], departPos=str(sim.lane_len[lane] - dist),
                      departSpeed="0")
        s.vehicle.setSpeed(f"x{i}", 0.0)
    s.simulationStep()
    for i, (lane, dist) in enumerate(scene):
        assert s.vehicle.getLaneID(f"x{i}") == lane
        assert s.vehicle.getLanePosition(f"x{i}") == pytest.approx(sim.lane_len[lane] - dist)
    for v in s.vehicle.getIDList():  # the demand's own first cars, far upstream, out of the picture
        assert v.startswith("x") or sim.lane_len[s.vehicle.getLaneID(v)] - s.vehicle.getLanePosition(v) > 90
    got = sim.occupancy()
    want = np.zeros((12, 12))
    want[2, 0] = 5 / 7.5                       # north block, left-turn lane, at the stop line
    want[3, 1] = 5 / 7.5                       # east block, lane 0: [10, 15] m lies in cell 1
    want[10, 0], want[10, 1] = 1.5 / 7.5, 3.5 / 7.5  # west block, lane 1: [6, 11] m
    want[7, 11] = 4 / 7.5                      # south block, lane 1: [86, 91] m, the matrix ends at 90 m
    assert got.shape == (1, 12, 12) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], want, atol=1e-5)
    env.close()


# -- the signal sequence ---------------------------------------------------------------------------

def _expected(actions) -> list[str]:
    """Per simulated second: clearance from the previous green (a link that has right of way and
    loses it turns yellow, else it keeps its state; none when the green repeats), then the green."""
    out, prev = [], plan.FIRST_GREEN
    for m in actions:
        g0, g1 = si.signal_state(plan.GREEN_INTERVAL[prev]), si.signal_state(plan.GREEN_INTERVAL[m])
        clear = g1 if m == prev else "".join("y" if a in "Gg" and b == "r" else a for a, b in zip(g0, g1))
        out += [clear] * plan.YELLOW + [g1] * plan.SIGNAL_PLAN[plan.GREEN_INTERVAL[m]][0]
        prev = m
    return out


def test_fixed_time_actions_run_the_table_and_any_choice_maps_onto_it():
    env = _env(demand="balanced", record_signal=True)
    env.reset(seed=2)
    run = []
    for m in plan.FIXED_TIME * 2:  # two cycles of the seed's fixed-time plan
        _, _, _, _, info = env.step(plan.ACTIONS.index(m))
        assert info["sim_time"] == len(run) + len(info["signal"]) and info["movement"] == m
        run += info["signal"]
    # the table's intervals 7, 0, 1, ..., 6 with its durations, twice
    table = []
    for i in [7, 0, 1, 2, 3, 4, 5, 6] * 2:
        table += [si.signal_state(i)] * plan.SIGNAL_PLAN[i][0]
    assert run == table[:len(run)] and len(run) == 220
    # an agent's choices: any order, repeats extend the green without yellow
    choices = ["NS", "NS", "EWL", "EW", "NSL", "EWL"]
    env.reset(seed=2)
    seen = []
    for m in choices:
        seen += env.step(plan.ACTIONS.index(m))[4]["signal"]
    assert seen == _expected(choices)
    assert [plan.action_seconds(m) for m in plan.ACTIONS] == [20, 35, 20, 35]
    env.close()


# -- reward ----------------------------------------------------------------------------------------

def _approach_wait(sim) -> float:
    s = sim.sumo
    return sum(s.vehicle.getAccumulatedWaitingTime(v) for _, e in si.APPROACHES for i in range(3)
               for v in s.lane.getLastStepVehicleIDs(f"{e}_{i}"))


def test_reward_is_the_drop_of_waiting_time():
    env = _env(demand="ns_heavy")
    env.reset(seed=4)
    ew, ns = plan.ACTIONS.index("EW"), plan.ACTIONS.index("NS")
    rewards, drops = [], []
    for a in [ew] * 6 + [ns]:  # NS (1800 veh/h) held red for 3.5 min, then given green
        w0 = _approach_wait(env._sim)
        _, r, _, _, info = env.step(a)
        rewards.append(r)
        drops.append((w0 - _approach_wait(env._sim)) / 100)
    assert all(r < 0 for r in rewards[1:6]) and rewards[6] > 0  # waiting grows, then drops
    np.testing.assert_allclose(rewards, drops, rtol=0.05, atol=0.05)  # the waiting of the approach lanes, /100
    assert info["queue"] >= 0 and info["wait"] > 0 and info["vehicles"] > 0
    env.close()


# -- determinism, check_env, processes -------------------------------------------------------------

def _episode(env, seed, steps, rng_seed=0):
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(rng_seed)
    out = [(obs, info["demand"])]
    for _ in range(steps):
        obs, r, te, tr, info = env.step(int(rng.integers(4)))
        out.append((obs, r, te, tr, {k: v for k, v in info.items()}))
    return out


def test_seeded_episodes_repeat_bit_for_bit_with_libsumo_and_traci():
    lib = _env(sumo="libsumo")
    tra = _env(sumo="traci")
    assert (lib.backend, tra.backend) == ("libsumo", "traci")
    a, b = _episode(lib, 11, 25), _episode(tra, 11, 25)
    c = _episode(tra, 12, 25)  # another seed: another demand draw and SUMO seed
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            if isinstance(u, dict):
                assert u == v
            else:
                assert np.array_equal(u, v)
    assert any(not np.array_equal(x[0], y[0]) for x, y in zip(a, c))
    again = _episode(lib, 11, 25)  # the same env, reset again
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, again))
    # libsumo runs one simulation per process: a second environment asking for it is refused
    with pytest.raises(RlhlsError, match="another environment of this process holds libsumo"):
        _env(sumo="libsumo")
    lib.close()
    tra.close()
    _env(sumo="libsumo").close()  # free again after close


def test_check_env_on_the_traci_path():
    env = make_env(si.ENV_ID, demand="rush_hour", sumo="traci", episode_seconds=600)
    check_env(env.unwrapped, skip_render_check=True)
    # episodes end (truncated) once episode_seconds have run
    env.reset(seed=0)
    n, done = 0, False
    while not done:
        _, _, te, tr, info = env.step(plan.ACTIONS.index("EW"))
        n, done = n + 1, te or tr
        assert not te
    assert info["sim_time"] >= 600 and n == 18 and info["mean_queue"] > 0
    env.close()


def test_no_sumo_process_outlives_its_environment(monkeypatch):
    before = set(_sumo_children())
    env = _env(sumo="traci")
    env.reset(seed=0)
    env.step(0)
    pid = env.sumo_pid
    assert _alive(pid) and pid in _sumo_children()
    env.reset(seed=1)  # a new episode: a new process, the old one gone
    assert not _alive(pid) and _alive(env.sumo_pid)
    pid = env.sumo_pid
    env.close()
    assert not _alive(pid) and set(_sumo_children()) <= before
    # an exception inside a step closes the simulation before it propagates
    env = _env(sumo="traci")
    env.reset(seed=0)
    pid = env.sumo_pid

    def broken():
        raise RuntimeError("observation failed")

    monkeypatch.setattr(env._sim, "occupancy", broken)
    with pytest.raises(RuntimeError, match="observation failed"):
        env.step(1)
    assert not _alive(pid) and set(_sumo_children()) <= before
    with pytest.raises(RlhlsError, match="after close"):
        env.step(1)
    # ... and so does one inside a reset; libsumo's hold is given back
    env = _env(sumo="libsumo")
    monkeypatch.setattr(si, "sample_routes", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        env.reset(seed=0)
    assert si._LIBSUMO_HELD[0] is None
    monkeypatch.undo()
    env = make_env(si.ENV_ID)  # as training builds it
    env.reset(seed=3)
    env.close()
    assert set(_sumo_children()) <= before


def test_without_sumo_the_environment_is_one_line(monkeypatch):
    monkeypatch.delenv("SUMO_HOME", raising=False)
    monkeypatch.setitem(sys.modules, "sumo", None)
    with pytest.raises(RlhlsError, match="needs SUMO: the Python package 'eclipse-sumo' is not installed") as e:
        si.sumo_home()
    assert "\n" not in str(e.value)
    monkeypatch.undo()
    monkeypatch.setattr(si, "_CLASSES", {})
    monkeypatch.setitem(sys.modules, "sumo_rl", None)
    with pytest.raises(RlhlsError, match="needs the Python package 'sumo-rl'") as e:
        make_env(si.ENV_ID)
    assert "\n" not in str(e.value)
    monkeypatch.setenv("SUMO_HOME", "/nonexistent/sumo")
    with pytest.raises(RlhlsError, match="'/nonexistent/sumo/bin/sumo' is not an executable"):
        make_env(si.ENV_ID)
    with pytest.raises(RlhlsError, match="demand 'rush' is not one of"):
        si.SumoIntersection(demand="rush")
