"""``rlhls/SumoIntersection-v0``: seed 004's four-way intersection in SUMO, through sumo-rl.

The simulator is real SUMO: the ``eclipse-sumo`` package's binaries (``SUMO_HOME`` is taken from
its ``sumo`` module when unset, so no system install is needed), driven by sumo-rl's
``SumoEnvironment`` (single agent, its ``diff-waiting-time`` reward, an observation function of
ours). Each environment talks to SUMO through ``libsumo`` (in-process, fastest) when this
process has no other libsumo simulation open -- libsumo runs one simulation per process -- and
through TraCI (a ``sumo`` process over a socket) otherwise; ``sumo='libsumo'|'traci'`` forces one.
Both give the same simulation bit for bit (tested). Without a working SUMO the environment fails
with one line naming what is missing.

The intersection (``host/envs/sumo/``, built by SUMO's ``netconvert`` from the node, edge and
connection files there and a signal program written from the seed's table: ``build_network``):
four 250 m roads, each an approach of three lanes (0: right turn + through, 1: through, 2: a
left-turn lane) and a two-lane exit, 50 km/h, one traffic light ``C`` with four links per
approach (right, through, through, left). Its static program is the seed's Fig. 3 table
(``rlhls.designs.traffic.SIGNAL_PLAN``: 30 / 5 / 15 / 5 s per direction, a 110 s cycle).

Actions ``Discrete(4)``: ``rlhls.designs.traffic.ACTIONS`` = (NSL, NS, EWL, EW) in the seed's order;
how an action runs the table (5 s of clearance, then that movement's green of 30 s or 15 s) is
in designs/traffic.py. A step lasts 35 s (through) or 20 s (left) of simulated time.

Observation ``(1, 12, 12)`` float32 in [0, 1]: the seed's lane-occupancy matrix (Fig. 2), four
road blocks of 3 x 12, rows 0-2 the north approach, 3-5 east, 6-8 south, 9-11 west (row 3k + i:
lane i, 0 the rightmost), column c the c-th 7.5 m cell upstream of the stop line (90 m in all);
a cell holds the fraction of its length covered by vehicle bodies (a standing queue of 5 m cars
with 2.5 m gaps covers 2/3 of every cell). The seed gives the 12 x 12 shape
and the four blocks; lanes, cell length and the coverage value are our choices.

Reward: sumo-rl's ``diff-waiting-time``: the drop over the step of the accumulated waiting time
(s) of the vehicles on the approach lanes, divided by 100 (sumo-rl's scale); positive when
waiting drops. Episodes end (truncated) once ``episode_seconds`` (default 3600) have passed.

Demand (``demand``): one of ``DEMANDS`` -- the route files in ``host/envs/sumo/`` (balanced,
ns_heavy, ew_heavy, rush_hour: Poisson flows per movement, documented in each file) -- or
``mixed`` (default): each episode draws one of the four. The departures of an episode are sampled
from the env's ``np_random`` (exponential gaps per flow) and written as a route file; SUMO runs
with ``--seed`` drawn from the same generator. ``reset(seed=s)`` thus fixes the whole episode:
the same seed and actions give the same observations, rewards and infos.

``info`` of a step: ``sim_time`` (s), ``queue`` (vehicles halting -- speed < 0.1 m/s -- anywhere in
the network, plus vehicles waiting for insertion, at the step's end), ``wait`` (vehicle-seconds
halted or waiting for insertion during the step), ``vehicles`` (departures due so far), and the
episode's ``mean_wait`` = all those vehicle-seconds / vehicles due in the episode and
``mean_queue`` = the same vehicle-seconds / simulated seconds; ``movement`` the action's name.
With ``record_signal=True`` also ``signal``: the light's state string in force during each
simulated second of the step (the tests compare it with the table).

SUMO runs headless with ``--time-to-teleport -1`` (no teleports) and ``--max-depart-delay -1``.
``close()`` ends the simulation (and its ``sumo`` process); so does any exception inside
``reset`` / ``step`` before it propagates, so no ``sumo`` process outlives its environment.
``save_state`` / ``load_state`` snapshot a running episode through SUMO's saveState / loadState
(benchmarks/bench_traffic.py compares them with re-seed-and-replay, what ``--resume`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs import traffic as plan

__all__ = ["ENVIRONMENTS", "ENV_ID", "SumoIntersection", "DEMANDS", "DATA", "NET", "LINKS", "signal_state",
           "sumo_home", "build_network", "sample_routes", "APPROACHES", "CELL", "CELLS"]

ENV_ID = "rlhls/SumoIntersection-v0"
ENVIRONMENTS = {ENV_ID: {"entry_point": "rlhls.host.envs.sumo_intersection:SumoIntersection"}}

DATA = Path(__file__).with_name("sumo")
NET = DATA / "intersection.net.xml"
DEFINITIONS = ("intersection.nod.xml", "intersection.edg.xml", "intersection.con.xml")
DEMANDS = ("balanced", "ns_heavy", "ew_heavy", "rush_hour")
APPROACHES = (("N", "N2C"), ("E", "E2C"), ("S", "S2C"), ("W", "W2C"))  # row blocks, clockwise from north
LANES = 3
CELLS = 12
CELL = 7.5  # m: a 5 m car and its 2.5 m gap
TLS = "C"
# the light's links in SUMO's link-index order: per approach (lane, turn, movement of the table)
LINKS = tuple((edge, lane, turn, ("NS" if a in "NS" else "EW") + ("L" if turn == "left" else ""))
              for a, edge in APPROACHES
              for lane, turn in ((0, "right"), (0, "through"), (1, "through"), (2, "left")))
_SUMO_CHAR = {"G": "G", "g": "g", "Y": "y", "R": "r"}
_LIBSUMO_HELD = [None]  # the simulation (an environment's Sim) holding this process's libsumo


def signal_state(interval: int) -> str:
    """SUMO's state string of one interval of the seed's table (one character per link)."""
    states = plan.SIGNAL_PLAN[interval][1]
    return "".join(_SUMO_CHAR[states[m]] for _, _, _, m in LINKS)


def sumo_home() -> str:
    """SUMO_HOME: the environment variable, else the eclipse-sumo package's (RlhlsError if neither)."""
    home = os.environ.get("SUMO_HOME")
    if not home:
        try:
            import sumo
        except ImportError:
            raise RlhlsError(f"environment '{ENV_ID}' needs SUMO: the Python package 'eclipse-sumo' is not "
                             "installed and SUMO_HOME is not set (pip install eclipse-sumo)") from None
        home = sumo.SUMO_HOME
    return home


def _binary(name: str) -> str:
    path = Path(sumo_home()) / "bin" / name
    if not os.access(path, os.X_OK):
        raise RlhlsError(f"environment '{ENV_ID}' needs SUMO: '{path}' is not an executable "
                         "(SUMO_HOME or the eclipse-sumo package is broken)")
    return str(path)


def build_network(out: Path) -> Path:
    """Write ``intersection.tll.xml`` (the table as SUMO's static program) and build
    ``intersection.net.xml`` with netconvert from the definitions in host/envs/sumo/ into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    L = ['<?xml version="1.0" encoding="UTF-8"?>',
         "<!-- The seed's Fig. 3 table as the static program of light C (rlhls.designs.traffic.SIGNAL_PLAN);",
         "     links per approach N, E, S, W: right (lane 0), through (lane 0), through (lane 1), left (lane 2). -->",
         "<tlLogics>",
         f'    <tlLogic id="{TLS}" type="static" programID="0" offset="0">']
    L += [f'        <phase duration="{sec}" state="{signal_state(i)}"/>' for i, (sec, _) in enumerate(plan.SIGNAL_PLAN)]
    L.append("    </tlLogic>")
    to: dict[tuple[str, int, str], ET.Element] = {}
    for c in ET.parse(DATA / "intersection.con.xml").getroot():
        frm, lane, dst = c.attrib["from"], int(c.attrib["fromLane"]), c.attrib["to"]
        turn = "through" if dst[2] == {"N": "S", "S": "N", "E": "W", "W": "E"}[frm[0]] else (
            "left" if lane == 2 else "right")
        to[(frm, lane, turn)] = c
    for i, (edge, lane, turn, _) in enumerate(LINKS):
        c = to[(edge, lane, turn)]
        L.append(f'    <connection from="{edge}" to="{c.get("to")}" fromLane="{lane}" toLane="{c.get("toLane")}" '
                 f'tl="{TLS}" linkIndex="{i}"/>')
    L.append("</tlLogics>")
    (out / "intersection.tll.xml").write_text("\n".join(L) + "\n")
    for f in DEFINITIONS:
        if (out / f).resolve() != (DATA / f).resolve():
            shutil.copyfile(DATA / f, out / f)
    cmd = [_binary("netconvert"), "-n", "intersection.nod.xml", "-e", "intersection.edg.xml",
           "-x", "intersection.con.xml", "-i", "intersection.tll.xml", "-o", "intersection.net.xml",
           "--no-turnarounds", "true", "--no-warnings", "true"]
    r = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    if r.returncode:
        raise RlhlsError(f"netconvert failed ({r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return out / "intersection.net.xml"


def _flows(demand: str) -> list[tuple[str, float, float, float]]:
    """(route, begin, end, vehicles per second) of a route set's flows, in file order."""
    out: list[tuple[str, float, float, float]] = []
    for f in ET.parse(DATA / f"{demand}.rou.xml").getroot().iter("flow"):
        period = f.get("period", "")
        if not (period.startswith("exp(") and period.endswith(")")):
            raise RlhlsError(f"{DATA / f'{demand}.rou.xml'}: flow '{f.get('id')}' has period {period!r} "
                             "(expected exp(vehicles per second))")
        out.append((f.attrib["route"], float(f.attrib["begin"]), float(f.attrib["end"]), float(period[4:-1])))
    return out


def sample_routes(demand: str, rng: np.random.Generator, path: Path, horizon: float) -> int:
    """Write one episode's departures of route set `demand` (Poisson per flow, from `rng`) as a
    SUMO route file; returns the number of vehicles due before `horizon` seconds."""
    root = ET.parse(DATA / f"{demand}.rou.xml").getroot()
    deps = []
    for k, (route, begin, end, rate) in enumerate(_flows(demand)):
        t = begin
        while True:
            t += rng.exponential(1.0 / rate)
            if t >= end:
                break
            deps.append((round(t, 1), k, route))
    deps.sort()
    L = ['<?xml version="1.0" encoding="UTF-8"?>', "<routes>"]
    L += ["    " + ET.tostring(e, encoding="unicode").strip() for e in root if e.tag in ("vType", "route")]
    L += [f'    <vehicle id="v{i}" type="car" route="{r}" depart="{t:.1f}" departLane="best" departSpeed="max"/>'
          for i, (t, _, r) in enumerate(deps)]
    L.append("</routes>")
    path.write_text("\n".join(L) + "\n")
    return sum(1 for t, _, _ in deps if t < horizon)


def _traci_start(traci, cmd: list, label: str):
    """``traci.start`` without its 1 s sleeps while SUMO opens its port and with SUMO's stdout
    silenced: a ``sumo`` process connected under `label`; its errors become one RlhlsError line."""
    port = traci.getFreeSocketPort()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(cmd) + ["--remote-port", str(port)], stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 60.0
        while True:
            try:
                conn = traci.connect(port, numRetries=0, proc=proc, label=label)
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
                    err.seek(0)
                    lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
                    raise RlhlsError(f"environment '{ENV_ID}': SUMO did not start ({cmd[0]} exited with code "
                                     f"{proc.returncode}): {lines[-1] if lines else 'no message'}") from None
                time.sleep(0.01)
    traci.switch(label)
    return conn


_CLASSES: dict = {}


def _sumo_classes():
    """sumo-rl's SumoEnvironment and ObservationFunction subclassed for the intersection, imported
    on first use (SUMO is an optional dependency of the package's other environments)."""
    if _CLASSES:
        return _CLASSES["sim"], _CLASSES["obs"]
    home = sumo_home()
    _binary("sumo")
    os.environ.setdefault("SUMO_HOME", home)  # sumo-rl reads it when imported
    try:
        import traci
        from sumo_rl import SumoEnvironment
        from sumo_rl.environment.observations import ObservationFunction
    except ImportError as e:
        raise RlhlsError(f"environment '{ENV_ID}' needs the Python package 'sumo-rl' and SUMO's 'traci' "
                         f"(pip install sumo-rl): {e}") from None
    import traci.constants as tc

    class Occupancy(ObservationFunction):
        """Fig. 2's 12 x 12 lane-occupancy matrix (module docstring)."""

        def __call__(self):
            return self.ts.env.occupancy()

        def observation_space(self):
            return gym.spaces.Box(0.0, 1.0, (1, LANES * len(APPROACHES), CELLS), np.float32)

    class Sim(SumoEnvironment):
        """sumo-rl's environment starting SUMO our way: one route file per episode, libsumo or
        TraCI per instance, per-second counts of halted vehicles from subscriptions."""

        def __init__(self, *, libsumo: bool, record: bool, **kw):
            self.libsumo, self.record = libsumo, record
            self.routes_path: str | None = None
            self.lane_len: dict[str, float] = {}
            self.sumo: Any = None  # libsumo, or sumo-rl's TraCI connection once started
            start = traci.start  # sumo-rl reads the light's program through traci.start: ours, quiet and quick
            traci.start = lambda cmd, label="default", **_: _traci_start(traci, cmd + ["--no-step-log", "true"],
                                                                            label).getVersion()
            try:
                super().__init__(**kw)
            finally:
                traci.start = start

        def _start_simulation(self):
            cmd = [_binary("sumo"), "-n", self._net, "-r", self.routes_path, "--seed", str(int(self.sumo_seed)),
                   "--max-depart-delay", str(self.max_depart_delay), "--waiting-time-memory",
                   str(self.waiting_time_memory), "--time-to-teleport", str(self.time_to_teleport),
                   "--no-step-log", "true", "--no-warnings", "true", "--duration-log.disable", "true",
                   "--save-state.rng", "true", "--save-state.precision", "17"]  # for save_state only
            if self.libsumo:
                import libsumo

                libsumo.start(cmd)
                self.sumo = libsumo
            else:
                self.sumo = _traci_start(traci, cmd, self.label)
            s = self.sumo
            self.subscribe()
            self.lane_len = {f"{e}_{i}": s.lane.getLength(f"{e}_{i}") for _, e in APPROACHES for i in range(LANES)}
            self.step_wait, self.halted, self.total_wait, self.signal_log = 0.0, 0, 0.0, []

        def subscribe(self):
            """Halted vehicles per lane (internal lanes too) and the insertion backlog, every step."""
            s = self.sumo
            for lid in s.lane.getIDList():
                s.lane.subscribe(lid, [tc.LAST_STEP_VEHICLE_HALTING_NUMBER])
            s.simulation.subscribe([tc.VAR_PENDING_VEHICLES])

        def _sumo_step(self):
            s = self.sumo
            if self.record:
                self.signal_log.append(s.trafficlight.getRedYellowGreenState(TLS))
            s.simulationStep()
            lanes = s.lane.getAllSubscriptionResults()
            halted = sum(int(v[tc.LAST_STEP_VEHICLE_HALTING_NUMBER]) for v in lanes.values())
            halted += len(s.simulation.getSubscriptionResults()[tc.VAR_PENDING_VEHICLES])
            self.halted = halted
            self.step_wait += halted
            if s.simulation.getTime() <= self.sim_max_time:  # the episode's seconds only
                self.total_wait += halted

        def occupancy(self) -> np.ndarray:
            s = self.sumo
            m = np.zeros((LANES * len(APPROACHES), CELLS), np.float64)
            edges = (np.arange(CELLS + 1) * CELL)[None, :]
            for k, (_, e) in enumerate(APPROACHES):
                for i in range(LANES):
                    lid = f"{e}_{i}"
                    vs = s.lane.getLastStepVehicleIDs(lid)
                    if not vs:
                        continue
                    front = np.array([self.lane_len[lid] - s.vehicle.getLanePosition(v) for v in vs])
                    back = front + np.array([s.vehicle.getLength(v) for v in vs])
                    cover = np.clip(np.minimum(back[:, None], edges[:, 1:]) - np.maximum(front[:, None], edges[:, :-1]),
                                    0.0, None)
                    m[LANES * k + i] = np.minimum(cover.sum(axis=0) / CELL, 1.0)
            return m.astype(np.float32)[None]

        def _compute_info(self):
            return {}

        def close(self):
            if self.sumo is None:
                return
            s, self.sumo = self.sumo, None
            if self.libsumo:  # the environment keeps its hold on libsumo (SumoIntersection.close frees it)
                s.close()
                return
            proc = getattr(s, "_process", None)
            try:
                s.close()
            except Exception:  # SUMO died or the socket broke: end the process ourselves
                import traci.connection

                traci.connection._connections.pop(self.label, None)
            finally:
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()

        def __del__(self):
            try:
                self.close()
            except Exception:
                pass

    _CLASSES.update(sim=Sim, obs=Occupancy)
    return Sim, Occupancy


def _use_libsumo(choice: str) -> bool:
    if choice == "traci":
        return False
    try:
        import libsumo  # noqa: F401
    except ImportError:
        if choice == "libsumo":
            raise RlhlsError(f"environment '{ENV_ID}': sumo='libsumo' but the Python package 'libsumo' is not "
                             "installed (pip install libsumo)") from None
        return False
    if _LIBSUMO_HELD[0] is not None:
        if choice == "libsumo":
            raise RlhlsError(f"environment '{ENV_ID}': sumo='libsumo' but another environment of this process "
                             "holds libsumo (one simulation per process); use sumo='traci' or 'auto'")
        return False
    return True


class SumoIntersection(gym.Env):
    """Seed 004's intersection (module docstring)."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(0.0, 1.0, (1, LANES * len(APPROACHES), CELLS), np.float32)
    action_space = gym.spaces.Discrete(len(plan.ACTIONS))

    def __init__(self, demand: str = "mixed", episode_seconds: int = 3600, sumo: str = "auto",
                 record_signal: bool = False):
        if demand not in DEMANDS + ("mixed",):
            raise RlhlsError(f"environment '{ENV_ID}': demand {demand!r} is not one of "
                             f"{', '.join(DEMANDS + ('mixed',))}")
        if sumo not in ("auto", "libsumo", "traci"):
            raise RlhlsError(f"environment '{ENV_ID}': sumo={sumo!r} (expected auto, libsumo or traci)")
        if not (isinstance(episode_seconds, (int, np.integer)) and episode_seconds >= 1):
            raise RlhlsError(f"environment '{ENV_ID}': episode_seconds={episode_seconds!r} (expected an integer >= 1)")
        self.demand, self.episode_seconds = demand, int(episode_seconds)
        self._sim: Any = None  # the Sim of _sumo_classes (None once closed)
        Sim, Occupancy = _sumo_classes()
        libsumo = _use_libsumo(sumo)
        self.backend = "libsumo" if libsumo else "traci"
        # sumo-rl reads the light's program here (a short sumo run); delta_time is set per action
        sim = Sim(libsumo=libsumo, record=bool(record_signal), net_file=str(NET),
                  route_file=str(DATA / "balanced.rou.xml"), num_seconds=self.episode_seconds, delta_time=35,
                  yellow_time=plan.YELLOW, min_green=0, single_agent=True, reward_fn="diff-waiting-time",
                  observation_class=Occupancy, add_system_info=False, add_per_agent_info=False,
                  sumo_seed=0, sumo_warnings=False)
        if libsumo:
            _LIBSUMO_HELD[0] = sim
        self._sim = sim
        self._dir = Path(tempfile.mkdtemp(prefix="rlhls-sumo-"))  # the episodes' route files
        self.vehicles = 0
        self.episode_demand = None

    # -- the signal
    def _ts(self):
        return self._sim.traffic_signals[TLS]

    def _green_index(self, movement: str) -> int:
        state = signal_state(plan.GREEN_INTERVAL[movement])
        return next(i for i, p in enumerate(self._ts().green_phases) if p.state == state)

    # -- gymnasium
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self._sim is None:
            raise RlhlsError(f"environment '{ENV_ID}' is closed")
        rng = self.np_random
        sim = self._sim
        try:
            demand = self.demand if self.demand != "mixed" else DEMANDS[int(rng.integers(len(DEMANDS)))]
            path = self._dir / "episode.rou.xml"
            self.vehicles = sample_routes(demand, rng, path, self.episode_seconds)
            self.episode_demand = demand
            sim.routes_path = str(path)
            obs, _ = sim.reset(seed=int(rng.integers(2 ** 31 - 1)))
            ts = self._ts()
            first = self._green_index(plan.FIRST_GREEN)  # as if interval 6 had just run
            ts.green_phase = first
            sim.sumo.trafficlight.setRedYellowGreenState(TLS, ts.all_phases[first].state)
            ts.time_since_last_phase_change = plan.action_seconds(plan.FIRST_GREEN)
        except BaseException:
            self.close()
            raise
        return obs, {"demand": demand, "sim_time": 0.0, "backend": self.backend}

    def step(self, action):
        if self._sim is None or self._sim.sumo is None:
            raise RlhlsError(f"environment '{ENV_ID}': step() before reset() or after close()")
        if not self.action_space.contains(action):
            raise RlhlsError(f"environment '{ENV_ID}': action {action!r} is not in {self.action_space}")
        movement = plan.ACTIONS[int(action)]
        sim = self._sim
        try:
            self._ts().delta_time = plan.action_seconds(movement)
            sim.step_wait, sim.signal_log = 0.0, []
            obs, reward, terminated, truncated, _ = sim.step(self._green_index(movement))
            t = float(sim.sim_step)
        except BaseException:
            self.close()
            raise
        info = {"sim_time": t, "movement": movement, "queue": sim.halted, "wait": sim.step_wait,
                "vehicles": self.vehicles, "mean_wait": sim.total_wait / max(1, self.vehicles),
                "mean_queue": sim.total_wait / max(1.0, min(t, self.episode_seconds)), "demand": self.episode_demand}
        if sim.record:
            info["signal"] = list(sim.signal_log)
        return obs, float(reward), bool(terminated), bool(truncated), info

    # -- SUMO's own snapshot (benchmarks/bench_traffic.py against re-seed and replay)
    def save_state(self) -> dict:
        """The running episode: SUMO's saveState file and the Python side (sumo-rl's signal and
        waiting-time bookkeeping, our counters)."""
        sim, ts = self._sim, self._ts()
        f = self._dir / "state.xml"
        sim.sumo.simulation.saveState(str(f))
        return {"sumo": f.read_bytes(), "routes": Path(sim.routes_path).read_bytes(),
                "ts": {k: getattr(ts, k) for k in ("green_phase", "is_yellow", "time_since_last_phase_change",
                                                   "next_action_time", "last_measure", "last_reward", "delta_time")},
                "state": sim.sumo.trafficlight.getRedYellowGreenState(TLS),
                "vehicles": {v: dict(d) for v, d in sim.vehicles.items()},
                "counts": (sim.total_wait, sim.halted), "due": self.vehicles, "demand": self.episode_demand}

    def load_state(self, st: dict) -> None:
        """Continue the episode `st` (``save_state``) in this environment."""
        sim = self._sim
        path = self._dir / "episode.rou.xml"
        path.write_bytes(st["routes"])
        f = self._dir / "state.xml"
        f.write_bytes(st["sumo"])
        sim.routes_path = str(path)
        try:
            sim.reset(seed=0)
            sim.sumo.simulation.loadState(str(f))
            sim.subscribe()  # loadState drops the subscriptions
            ts = self._ts()
            for k, v in st["ts"].items():
                setattr(ts, k, v)
            sim.sumo.trafficlight.setRedYellowGreenState(TLS, st["state"])
            sim.vehicles = {v: dict(d) for v, d in st["vehicles"].items()}
            sim.total_wait, sim.halted = st["counts"]
            self.vehicles, self.episode_demand = st["due"], st["demand"]
        except BaseException:
            self.close()
            raise

    @property
    def sumo_pid(self) -> int | None:
        """The ``sumo`` process of a TraCI simulation (None with libsumo or when closed)."""
        s = self._sim.sumo if self._sim is not None else None
        proc = getattr(s, "_process", None)
        return None if proc is None else proc.pid

    def close(self):
        sim, self._sim = getattr(self, "_sim", None), None
        try:
            if sim is not None:
                sim.close()
                if _LIBSUMO_HELD[0] is sim:
                    _LIBSUMO_HELD[0] = None
        finally:
            d = getattr(self, "_dir", None)
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
                self._dir = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
