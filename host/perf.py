"""The performance model: one whole training run of a design on its device, phase by phase, beside
this machine's measured time and the seeds' baselines.

A run is ``steps`` environment steps. Its time is the host loop's phases plus the training graph's:

* **host phases** (environment step, acting, storing, sampling, ... : every ``t_<phase>`` column of
  the trainer's metrics.csv that ``GRAPH_PHASES`` does not name) run on the PS. Their seconds per
  environment step are measured here (a short run of the same design at its demonstration's sizes,
  ``at_design`` carrying its graph phases to the design's own; or ``--run``'s metrics, the graph then
  at that run's sizes: ``bind_run``) and multiplied by the PS factor (how many times slower the device's PS
  core is than this machine's).
* **the training graph** (update forward/backward/optimizer, GAE, returns, CG, ...) runs
  ``graph_steps_per_env_step`` times per environment step (its registration's ``grad_steps``: the
  gradient steps per environment step from its hyperparameters), and each node as often per
  gradient step as its registration's ``node_runs`` says (the graph's ``Node.runs``: PPO's GAE once
  per rollout, that is once in update_epochs x num_minibatches gradient steps; default once). One
  execution costs what the partitioner's objective says (``rlhls.partition.heft``, the one cost of a
  schedule): each node on its unit and design point (its profile row: model, csynth, cosim, aie or
  measured), an edge between two units costs the device's link (``latency + bytes / bandwidth``,
  ``partition.profile.device_links``), a loop-carried edge (new weights to the next step's forward)
  too where its ends sit on different units; PL and AIE nodes run side by side as their
  dependencies allow (spatial hardware), PS nodes on the device's PS cores, one node per core at a
  time. Nodes that run equally often form a loop of their own, scheduled alone; the loops run one
  after another (as the trainers run them: GAE, then the minibatches) and one execution is their
  makespans weighed by their runs. The plan keeps its own PS cores and order, so its graph step is
  the plan's ``makespan_us`` (the ILP's objective); the other variants are list-scheduled (HEFT with
  each node's unit fixed).

Variants (``Perf.variants``), each a full run:

* ``cpu``: this machine, measured (host and graph phases as timed here);
* ``all_PS``: every node on the PS (the profile's PS cost model: the catalogue's per-core roofline);
* ``PL_only`` (FIXAR-like, AP-DRL §V-C): every node on the PL at 164 MHz in the design's fixed-point
  format (``FIXAR_FORMAT`` where the design has none), each at its fastest design point that fits the
  fabric alone;
* ``AIE_only`` (CHARM-like): matrix multiplies on the AIE in FP32 (fastest point that fits), the
  rest on the PS; ``None`` on a device without AI Engines;
* ``plan``: the plan's units and points.

Host phases are the same seconds in every device variant: only the graph moves. The host loop and
the graph do not overlap (serial) unless the design declares it (``Design.host_overlap``: a fraction
0..1 of the graph hidden behind the host loop by double buffering) or the caller gives ``overlap``;
a unit's own pipelining (CPP's coarse-grained FVP pipeline) is in its kernel's cost model already.

``mm_crossover(device)``: AP-DRL Fig. 6 from the same cost models (an n x n GEMM on the PL against
the AIE, per size).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import read_json

if TYPE_CHECKING:
    from rlhls.designs.design import Design
    from rlhls.partition.profile_io import ProfileRow

__all__ = ["HostTimes", "Variant", "Perf", "GRAPH_PHASES", "NODE_PHASE", "FIXAR_CLOCK_MHZ", "FIXAR_FORMAT",
           "host_times", "at_design", "read_run", "measure_host", "ps_factor", "schedule", "run_phases", "choose",
           "model_perf", "perf_figure", "write_perf", "report_lines", "mm_crossover", "model_error",
           "tornado_figure"]

# the trainers' phases that the training graph covers (host/algorithms/*: timed(times, ...))
GRAPH_PHASES = ("update_forward", "target_forward", "backprop", "weight_update", "soft_update", "gae",
                "gae_fetch", "gae_compute", "gae_write", "returns", "policy_gradient", "fvp", "cg",
                "line_search", "value_fit")
# a graph node's phase as the trainers name it
NODE_PHASE = {"fwd": "update_forward", "tfwd": "target_forward", "loss": "update_forward", "bwd": "backprop",
              "upd": "weight_update", "soft": "soft_update", "gae": "gae", "returns": "returns",
              "fvp_fwd": "fvp", "fvp_bwd": "fvp", "cg": "cg", "linesearch": "line_search"}

LABELS = {"cpu": "this machine (measured)", "all_PS": "all on the PS", "PL_only": "PL only (FIXAR-like)",
          "AIE_only": "AIE only (CHARM-like)", "plan": "the plan"}
FIXAR_CLOCK_MHZ = 164.0  # AP-DRL §V-C describes FIXAR's PL at 164 MHz
# assumed where the design has no fixed-point format: the seed names no width for FIXAR
FIXAR_FORMAT = ("fixed<24,12,RND,SAT>", "fixed<48,24,RND,SAT>")


def _rule(algorithm: str, name: str, hp: dict):
    """(the algorithm registration's rule `name` (``grad_steps``, ``node_runs``) or None, `hp` over the
    defaults of its hyperparameters: a run's record may lack some)."""
    from .algorithms import get_algorithm

    try:
        alg = get_algorithm(algorithm)
    except RlhlsError:
        return None, hp
    args = alg.args if dataclasses.is_dataclass(alg.args) else None
    defaults = {f.name: f.default for f in dataclasses.fields(args) if f.default is not dataclasses.MISSING} \
        if args else {}
    return getattr(alg, name), {**defaults, **hp}


def _apply(algorithm: str, what: str, fn, *args) -> float:
    try:
        return float(fn(*args))
    except (KeyError, TypeError, ZeroDivisionError, ValueError) as e:
        raise RlhlsError(f"perf: hyperparameters of '{algorithm}' lack what its {what} rule needs ({e})") from None


def _graph_steps(algorithm: str, hp: dict) -> float | None:
    """Gradient steps per environment step by the algorithm's rule; None for an algorithm without one
    (a user's: its measured updates count one gradient step each)."""
    fn, hp = _rule(algorithm, "grad_steps", hp)
    return None if fn is None else _apply(algorithm, "gradient-step", fn, hp)


def _node_runs(algorithm: str, hp: dict):
    """node -> runs per gradient step by the algorithm's rule, bound to `hp`; None: every node once."""
    fn, hp = _rule(algorithm, "node_runs", hp)
    return None if fn is None else (lambda node: _apply(algorithm, "node-runs", fn, node, hp))


# ----------------------------------------------------------------------------------------------
# What was measured here
# ----------------------------------------------------------------------------------------------


@dataclass
class HostTimes:
    """Seconds per environment step of each host phase, and of each graph phase per graph execution,
    measured on this machine; ``graph_steps``: graph executions per environment step; ``node_runs``:
    node -> its runs per graph execution (None: once each)."""

    host: dict            # {phase: s per env step}
    graph: dict           # {phase: s per graph execution}
    graph_steps: float
    source: str
    node_runs: Callable | None = None

    def to_json(self) -> dict:
        return {"host_s_per_env_step": self.host, "graph_s_per_execution": self.graph,
                "graph_steps_per_env_step": self.graph_steps, "source": self.source}


def _executions(row: dict, env_steps: float, graph_steps: float) -> float:
    """Graph executions one metrics row (one update of `env_steps` environment steps) timed: the
    off-policy trainers count theirs (``train_steps``); the on-policy ones run the rule's number."""
    if "train_steps" in row:
        return _num(row["train_steps"], "train_steps")
    return env_steps * graph_steps


def _num(v, what: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise RlhlsError(f"metrics: {what} = {v!r} is not a number") from None
    return x if math.isfinite(x) else 0.0


def host_times(metrics: list, algorithm: str, hp: dict, source: str) -> HostTimes:
    """HostTimes from a run's metrics rows (dicts with ``env_steps`` cumulative and ``t_<phase>``)."""
    if not metrics:
        raise RlhlsError(f"{source}: no metrics row (no update finished)")
    phases = [k[2:] for k in metrics[0] if k.startswith("t_")]
    if not phases:
        raise RlhlsError(f"{source}: metrics have no t_<phase> columns")
    steps = _num(metrics[-1].get("env_steps"), "env_steps")
    if steps <= 0:
        raise RlhlsError(f"{source}: env_steps is {steps:g}; expected > 0")
    tot = {p: sum(_num(r.get(f"t_{p}"), f"t_{p}") for r in metrics) for p in phases}
    gs = _graph_steps(algorithm, hp)
    done = [0.0] + [_num(r.get("env_steps"), "env_steps") for r in metrics]
    if gs is None:  # assumed: one gradient step per update (the trainer's count where it keeps one)
        execs = sum(_num(r["train_steps"], "train_steps") if "train_steps" in r else 1.0 for r in metrics)
        gs = execs / steps
        source += f" (assumed for '{algorithm}', which has no gradient-step rule: one per update)"
    else:
        execs = sum(_executions(r, b - a, gs) for r, a, b in zip(metrics, done, done[1:]))
    host = {p: tot[p] / steps for p in phases if p not in GRAPH_PHASES}
    graph = {p: (tot[p] / execs if execs > 0 else 0.0) for p in phases if p in GRAPH_PHASES}
    if execs <= 0:
        raise RlhlsError(f"{source}: no gradient step was measured (the run ended before learning started); "
                         "a longer run, or a smaller learning_starts, measures one")
    return HostTimes(host, graph, gs, source, _node_runs(algorithm, hp))


def bind_run(design, hp: dict):
    """`design` at a measured run's sizes (batch, rollout: its hyperparameters over the design's),
    so the graph the model schedules is the one whose host phases were timed."""
    from .algorithms import get_algorithm

    alg = get_algorithm(design.algorithm)
    return alg.bind(design, {**alg.hyperparams(design), **hp})


def at_design(host: HostTimes, design, measured_hp: dict, graph) -> HostTimes:
    """`host`, timed on a short run at `measured_hp` (the demonstration's sizes), for `design`'s own
    graph: its gradient steps per environment step and node runs from the design's hyperparameters,
    the graph phases measured per execution scaled by the FLOPs of the design's execution over the
    measured one's (assumed linear). Host phases per environment step are kept."""
    from rlhls.designs.graph import build_graph

    from .algorithms import get_algorithm

    try:
        own = get_algorithm(design.algorithm).hyperparams(design)
    except RlhlsError:
        return host
    gs = _graph_steps(design.algorithm, own)
    if gs is None:
        return host
    runs = _node_runs(design.algorithm, own)
    was = build_graph(bind_run(design, measured_hp))

    def flops(g, rule):
        return sum(n.flops * (1.0 if rule is None else rule(n)) for n in g.nodes)

    done = flops(was, host.node_runs)
    scale = flops(graph, runs) / done if done > 0 else 1.0
    if gs == host.graph_steps and scale == 1.0:
        return host
    return HostTimes(host.host, {p: t * scale for p, t in host.graph.items()}, gs,
                     f"{host.source}; its graph phases x {scale:.4g} (FLOPs of the design's graph execution at "
                     f"batch {graph.batch} over the measured one's at {was.batch}, assumed linear)", runs)


def read_run(folder: str | Path, design: Design) -> tuple[list, dict, Design]:
    """(metrics rows, hyperparameters, the run's design) of a run folder of `design` (``rlhls
    train``, or ``rlhls run``'s ``train/``; the design resized where an RL Zoo net_arch resized the run)."""
    folder = Path(folder)
    if (folder / "train" / "metrics.csv").is_file() and not (folder / "metrics.csv").is_file():
        folder = folder / "train"
    from rlhls.core.fileio import owned_file

    for name in ("config.json", "metrics.csv"):  # never read through a link out of the run folder
        owned_file(folder, name)
    try:
        cfg = read_json(folder / "config.json")
        with open(folder / "metrics.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError as e:
        raise RlhlsError(f"--run '{folder}': no {Path(e.filename).name} (not a run folder of rlhls train)") from None
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as e:
        raise RlhlsError(f"--run '{folder}': cannot be read ({e})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("hyperparams"), dict):
        raise RlhlsError(f"--run '{folder}/config.json': expected a run config with 'hyperparams'")
    resized = cfg.get("design_resized")
    base = resized.get("from") if isinstance(resized, dict) else None
    if cfg.get("design") != design.name and base != design.name:
        raise RlhlsError(f"--run '{folder}': a run of design '{cfg.get('design')}', not of '{design.name}'")
    if "design_file" in cfg or resized is not None:  # the file given the run's; the design resized as the run's
        from rlhls.designs.registry import recorded_design

        design = recorded_design(cfg["design"], cfg.get("design_file"), given=design, resized=resized,
                                 where=f"--run '{folder}'")
    return rows, cfg["hyperparams"], design


def measure_host(design, *, seed: int = 0, updates: int = 1) -> tuple[list, dict]:
    """A short run of `design` here (`updates` updates at its demonstration's probe sizes, learning from the
    first batch) in a scratch folder: (metrics rows, one per update, hyperparameters)."""
    import logging

    from rlhls.core.fileio import scratch_dir

    from .algorithms import get_algorithm
    from .train import train_design

    sets = {**design.demo.get("set", {}), **design.demo.get("probe", {})}
    hp0 = {**design.hyperparams, **sets}
    if "learning_starts" in hp0:  # off-policy: learn from the first batch so a gradient step is timed
        sets["learning_starts"] = hp0.get("batch_size", design.batch_size)
    hp1 = get_algorithm(design.algorithm).hyperparams(design, sets)
    steps = hp1.get("steps_per_update", 1)  # one update (a shorter run is rounded up to one)
    if updates > 1:  # on-policy trainers: an update is the rollout (A2C: several)
        steps = updates * (hp1.get("steps_per_update") or hp1.get("num_envs", 1)
                           * hp1.get("num_steps", hp1.get("n_steps", 1)) * hp1.get("rollouts_per_update", 1))
    log = logging.getLogger("rlhls.host")
    level = log.level
    log.setLevel(logging.ERROR)  # the scratch run's notes (steps rounded to an update) are not the user's
    try:
        with scratch_dir("perf") as d:
            run = train_design(design, out=Path(d) / "run", steps=steps, seed=seed, overrides=sets, progress=False)
            return run.metrics, dict(run.config.get("hyperparams", {}))
    finally:
        log.setLevel(level)


# ----------------------------------------------------------------------------------------------
# The PS factor
# ----------------------------------------------------------------------------------------------


def _gemm_gflops(n: int = 256, repeats: int = 9) -> float:
    """fp32 GEMM rate of one core here (GFLOP/s, best of `repeats`)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def ps_factor(device) -> tuple[float, str]:
    """(factor, basis): how many times slower the device's PS core is than this machine's core."""
    ps = device.unit("PS")
    peak = ps.perf["gflops_fp32_peak"]
    here = _gemm_gflops()
    basis = (f"fp32 GEMM 256x256 timed here on one core: {here:.3g} GFLOP/s, against the {device.id} PS core's "
             f"fp32 peak {peak.value:.3g} GFLOP/s ({peak.source}: clock {ps.clock_mhz.source}, "
             f"{ps.perf['flops_per_cycle_fp32'].source}); assumed: the PS core's GEMM runs at that peak (for GEMM "
             "work a lower bound of the factor), and the host loop's Python scales as the GEMM does")
    return max(here / peak.value, 1e-6), basis


# ----------------------------------------------------------------------------------------------
# One execution of the training graph
# ----------------------------------------------------------------------------------------------


def schedule(graph, choice: dict, links: dict, runs: dict | None = None, *, ps_cores: int = 1, plan=None) -> dict:
    """One graph execution, costed as the partitioner costs a schedule (``rlhls.partition.heft``,
    the ILP's objective). `choice`: {node: (unit, latency_us)}; `links`: {(src, dst): (latency_us,
    bytes_per_us)}; `runs`: {node: runs per execution} (default once each; the model passes the graph's
    ``Node.runs``); `ps_cores`:
    the PS's cores. `plan` (a Plan of these choices): its PS cores and order, so that its own
    makespan comes back; else the list schedule (insertion HEFT with each node's unit fixed).
    Nodes with equal runs form a loop scheduled on its own (module docstring): an input from another
    loop is in memory when the loop starts (its transfer, paid at the consumer's runs, still counts).
    Returns {'makespan_us' (the loops' makespans weighed by their runs), 'start', 'finish' (within
    the node's loop), 'loops' {runs: makespan of one run of that loop}, 'phase_us' {phase: node us},
    'transfer_us' {phase: edge us into that phase's nodes}}, the last two weighed by runs."""
    from rlhls.partition.heft import Problem, semi_active
    from rlhls.partition.profile_io import ProfileRow
    from rlhls.partition.relax import list_schedule

    r_of = {n.name: float((runs or {}).get(n.name, 1.0)) for n in graph.nodes}
    rows = [ProfileRow(n.name, choice[n.name][0], float(choice[n.name][1]), runs=r_of[n.name]) for n in graph.nodes]
    problem = Problem(rows, graph.all_edges(), None, links, ps_cores)
    option = {r.node: r for r in rows}
    sch = None
    if plan is not None:  # the plan's PS cores and their order: the plan's own schedule
        core = {v: int(plan.core.get(v, 0)) for v, o in option.items() if o.unit == "PS"}
        key = {v: (float(plan.start_us.get(v, 0.0)), float(plan.finish_us.get(v, plan.start_us.get(v, 0.0))))
               for v in option}
        try:
            sch = semi_active(problem, option, core, key)
        except RuntimeError:  # an order no schedule of this graph keeps: list-scheduled instead
            sch = None
    if sch is None:
        sch = list_schedule(problem, option)
    assert sch is not None  # no capacities: the list schedule always places every node
    phase_us: dict[str, float] = {}
    transfer_us: dict[str, float] = {}
    nodes = {n.name: n for n in graph.nodes}
    for n in graph.nodes:
        phase = NODE_PHASE.get(n.phase, n.phase)
        phase_us[phase] = phase_us.get(phase, 0.0) + r_of[n.name] * choice[n.name][1]
    for e in graph.edges + graph.carry_edges:
        phase = NODE_PHASE.get(nodes[e.dst].phase, nodes[e.dst].phase)
        cost = problem.transfer(e.bytes, choice[e.src][0], choice[e.dst][0])
        transfer_us[phase] = transfer_us.get(phase, 0.0) + r_of[e.dst] * cost
    return {"makespan_us": sch.makespan, "start": sch.start, "finish": sch.finish, "loops": dict(sch.loops),
            "phase_us": phase_us, "transfer_us": transfer_us}


def run_phases(host: HostTimes, sch: dict, steps: int, factor: float, overlap: float = 0.0) -> dict:
    """{phase: seconds of the whole run on the device}: host phases x `factor`; the graph's phases
    from the schedule `sch` (each phase's node and transfer time, scaled so that one execution
    sums to the makespan), times the executions, less the `overlap` share hidden behind the host."""
    execs = host.graph_steps * steps
    phases = {p: s * factor * steps for p, s in host.host.items()}
    serial = sum(sch["phase_us"].values()) + sum(sch["transfer_us"].values())
    scale = sch["makespan_us"] / serial if serial > 0 else 0.0  # concurrency spread over the phases
    for p, us in sch["phase_us"].items():
        phases[p] = phases.get(p, 0.0) + us * scale * 1e-6 * execs * (1 - overlap)
    xfer = sum(sch["transfer_us"].values()) * scale * 1e-6 * execs * (1 - overlap)
    if xfer > 0:
        phases["transfers"] = xfer
    return phases


def _fits(row, capacity: dict) -> bool:
    return all(row.usage(res) <= cap for (unit, res), cap in capacity.items() if unit == row.unit and res != "cores")


def _overuse(row, capacity: dict) -> float:
    return max((row.usage(res) / cap for (u, res), cap in capacity.items() if u == row.unit and res != "cores"
                and cap > 0), default=0.0)


def choose(rows, graph, unit: str, capacity: dict, *, others=None, points: dict | None = None) -> tuple[dict, list]:
    """({node: (unit, latency)}, notes): each node at its fastest `unit` row that fits the unit alone
    (a node with none: its smallest row, noted); nodes without a `unit` row from `others`. `points`,
    when given, receives {node: the chosen row's point} of the `unit` nodes."""
    best: dict[str, tuple[str, float]] = {}  # node -> (unit, latency)
    best_point: dict[str, str] = {}
    small: dict[str, ProfileRow] = {}
    for r in rows:
        if r.unit != unit:
            continue
        if _fits(r, capacity) and (r.node not in best or r.latency_us < best[r.node][1]):
            best[r.node] = (unit, r.latency_us)
            best_point[r.node] = str(r.point)
        if r.node not in small or _overuse(r, capacity) < _overuse(small[r.node], capacity):
            small[r.node] = r
    out: dict[str, tuple[str, float]] = {}
    over: list[str] = []
    for n in graph.nodes:
        if n.name in best:
            out[n.name] = best[n.name]
            if points is not None:
                points[n.name] = best_point[n.name]
        elif n.name in small:
            out[n.name] = (unit, small[n.name].latency_us)
            if points is not None:
                points[n.name] = str(small[n.name].point)
            over.append(n.name)
        elif others is not None and n.name in others:
            out[n.name] = others[n.name]
        else:
            raise RlhlsError(f"perf: node '{n.name}' has no {unit} row")
    notes = [f"{unit}: {len(over)} node(s) fit the device at no design point ({over[0]}, ...): each takes its "
             "smallest point as if the fabric held it"] if over else []
    return out, notes


# ----------------------------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    label: str
    step_us: float | None                        # one graph execution (None: the cpu's measured)
    phases_s: dict = field(default_factory=dict)  # {phase: s for the whole run}
    total_s: float = 0.0
    units: dict = field(default_factory=dict)     # {node: unit} of its graph execution

    def to_json(self) -> dict:
        return {"label": self.label, "graph_step_us": self.step_us, "phases_s": self.phases_s,
                "total_s": self.total_s, "units": self.units}


@dataclass
class Perf:
    """The modeled run (module docstring): variants, speed-ups, the PS factor and every assumption."""

    design: str
    device: str
    steps: int
    ps_factor: float
    ps_basis: str
    host: HostTimes
    variants: dict
    speedups: dict          # {variant: {'per_step', 'run'}} of the plan over each
    sensitivity: dict       # {'x0.5'|'x2': {'plan_s', 'speedup_vs_cpu'}}
    assumptions: list
    node_runs: dict = field(default_factory=dict)  # {node: runs per graph execution} of those not run once
    band: dict = field(default_factory=dict)       # {'total_s', 'speedups': {low, central, high}, 'flips', ...}
    tornado: list = field(default_factory=list)    # [{constant, range, low, high, swing}], largest swing first

    @property
    def total_s(self) -> float:
        return self.variants["plan"].total_s

    def to_json(self) -> dict:
        return {"design": self.design, "device": self.device, "steps": self.steps, "ps_factor": self.ps_factor,
                "ps_factor_basis": self.ps_basis, "measured": self.host.to_json(),
                "variants": {k: (v.to_json() if v else None) for k, v in self.variants.items()},
                "speedups": self.speedups, "sensitivity": self.sensitivity, "assumptions": list(self.assumptions),
                "node_runs_per_graph_execution": self.node_runs,
                **({"band": self.band, "tornado": self.tornado} if self.band else {})}

    def band_lines(self, top: int = 5) -> list:
        """The band, the flip sentences and the top constants of the tornado, as text lines."""
        return _band_lines(self.band, self.tornado, {k: v.to_json() for k, v in self.variants.items() if v}, top)

    def text(self) -> str:
        lines = [f"{self.design} on {self.device}: {self.steps:,} environment steps",
                 f"PS factor {self.ps_factor:.3g} (device PS core vs this machine's core): {self.ps_basis}",
                 f"measured here: {self.host.source}", "",
                 f"{'variant':34s} {'graph step':>12s} {'whole run':>12s} {'plan speed-up':>14s}"]
        for k, v in self.variants.items():
            if v is None:
                lines.append(f"{LABELS[k]:34s} {'n/a (no unit)':>12s}")
                continue
            step = "measured" if v.step_us is None else f"{v.step_us:.4g} us"
            sp = self.speedups.get(k)
            lines.append(f"{v.label:34s} {step:>12s} {_dur(v.total_s):>12s} "
                         f"{(format(sp['run'], '.3g') + 'x' if sp else '-'):>14s}")
        lines.append("")
        lines.append("plan, time per phase: " + ", ".join(
            f"{p} {_dur(s)}" for p, s in sorted(self.variants["plan"].phases_s.items(), key=lambda x: -x[1]) if s > 0))
        for k, s in self.sensitivity.items():
            lines.append(f"PS factor {k}: plan {_dur(s['plan_s'])}, speed-up over this CPU {s['speedup_vs_cpu']:.3g}x")
        lines += self.band_lines()
        lines.append("assumptions:")
        lines += [f"  - {a}" for a in self.assumptions]
        return "\n".join(lines)


def _band_lines(band: dict, tornado: list, variants: dict, top: int = 5) -> list:
    if not band:
        return []
    t = band["total_s"]
    L = ["", f"band (every assumed constant at the ends of its range, latency models +- their held-out error): "
             f"plan {_dur(t['low'])} .. {_dur(t['central'])} .. {_dur(t['high'])} (low .. central .. high)"]
    for k, b in band["speedups"].items():
        v = variants.get(k)
        label = v["label"] if isinstance(v, dict) else LABELS[k]
        L.append(f"  speed-up over {label}: {b['low']:.3g}x .. {b['central']:.3g}x .. {b['high']:.3g}x")
    L += [f"  {s}" for s in band["flips"]]
    L.append(f"constants that move the plan most (its time at the low / high end of each range; top {top}):")
    for c in tornado[:top]:
        L.append(f"  {c['constant']} {c['range'][0]:.3g} .. {c['range'][1]:.3g} {c['unit']}: "
                 f"{_dur(c['low'])} / {_dur(c['high'])} (swing {_dur(c['swing'])})")
    return L


def _dur(s: float) -> str:
    return f"{s:.3g} s" if s < 3600 else f"{s / 3600:.3g} h"


def _fixar_design(design):
    from rlhls.designs.formats import FixedFormat, parse_format

    st = parse_format(design.formats.get("storage", "fp32"))
    if isinstance(st, FixedFormat):
        fx, acc = design.formats["storage"], design.formats.get("acc", design.formats["storage"])
        why = f"the design's fixed format {st}"
    else:
        fx, acc = FIXAR_FORMAT
        why = f"assumed {fx} (the design has no fixed-point format)"
    formats = {**design.formats, "storage": fx, "acc": acc, "pl": fx, "pl_acc": acc}
    return replace(design, formats=formats, clocks_mhz={**design.clocks_mhz, "PL": FIXAR_CLOCK_MHZ}, pins={}), why


def _ps_choice(graph, device) -> dict:
    from rlhls.designs.kernels.cost import ps_cost

    return {n.name: ("PS", ps_cost(n.flops, device, nbytes=n.bytes)["latency_us"]) for n in graph.nodes}


def model_perf(design, *, device=None, plan=None, rows=None, graph=None, host: HostTimes | None = None,
               factor: float | None = None, steps: int | None = None, seed: int = 0, say=None,
               time_limit: float | None = 60.0, overlap: float | None = None, band: bool = False,
               model_error: dict | None = None) -> Perf:
    """The Perf of `design` (module docstring). `plan` (a Plan; default: solved), `rows` (its profile,
    e.g. calibrated), `host` (default: a short run here, announced to `say`), `factor` (default: ``ps_factor``);
    `time_limit`: the ILP's, when the plan is solved here; `overlap`: the share of the graph a
    double-buffered design hides behind the host loop (default: the design's ``host_overlap``); `band`: also
    re-evaluate the plan at the ends of every assumed constant's range (``Perf.band``, ``Perf.tornado``);
    `model_error`: {unit: fraction} of the PL and AIE latency models (default: ``model_error()``, rlhls qor's)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.partition.plan import check_plan
    from rlhls.partition.profile import device_capacity, device_links, profile_design

    dev = device if not isinstance(device, (str, type(None))) else get_device(device or design.device)
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not math.isfinite(factor) or factor <= 0):
        raise RlhlsError(f"--ps-factor {factor!r}: expected a number > 0")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise RlhlsError(f"--steps {steps!r}: expected a positive integer")
    given = overlap is not None
    overlap = overlap if given else design.host_overlap
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0 <= overlap <= 1:
        raise RlhlsError(f"perf: overlap {overlap!r}: expected a fraction 0..1 of the graph hidden behind the host")
    graph = graph if graph is not None else build_graph(design)
    rows = rows if rows is not None else profile_design(design, dev, graph=graph)
    if plan is None:
        from rlhls.partition.design_plan import partition_design

        plan = partition_design(design, dev, graph=graph, rows=rows, time_limit=time_limit)
    asg = check_plan(plan, graph, where=getattr(plan, "source", "") or "plan")
    # the plan's rows: the row of each node at its planned unit and point
    planned = {}
    plan_points = {}
    for r in rows:
        if asg.get(r.node) == r.unit and str(plan.point.get(r.node, r.point)) == str(r.point):
            planned[r.node] = (r.unit, r.latency_us)
            plan_points[r.node] = str(r.point)
    missing = [n for n in asg if n not in planned]
    if missing:
        where = getattr(plan, "source", "") or "plan"
        raise RlhlsError(f"plan '{where}': node '{missing[0]}' on {asg[missing[0]]} point "
                         f"'{plan.point.get(missing[0])}' has no profile row (is the plan for this design and device?)")
    if host is None:
        if say is not None:
            say(f"measuring {design.name} here (one update) ...")
        metrics, hp = measure_host(design, seed=seed)
        host = host_times(metrics, design.algorithm, hp, f"a short run of {design.name} here (1 update)")
        host = at_design(host, design, hp, graph)  # the demonstration's sizes are not the design's
    basis = "given (--ps-factor)"
    if factor is None:
        factor, basis = ps_factor(dev)
    steps = steps or int(design.hyperparams.get("total_timesteps", 1_000_000))
    # the graph's node runs (its algorithm's rule): the ones the plan's ILP weighed its nodes by
    runs: dict[str, float] = {n.name: float(n.runs) for n in graph.nodes if n.runs != 1.0}
    links = device_links(dev)
    cap = device_capacity(dev)
    cores = max(1, int(cap.get(("PS", "cores"), 1) or 1))
    assumptions = [
        f"PS factor {factor:.3g}: {basis}",
        "host phases (" + ", ".join(sorted(host.host)) + ") run on the PS at this machine's measured seconds x the "
        "PS factor, in every device variant",
        f"{host.graph_steps:.4g} training-graph executions (gradient steps at batch {graph.batch}) per environment "
        f"step, from the {design.algorithm} hyperparameters; " + ("every node once in each" if not runs else
        "nodes run other than once in each by its rule: " + ", ".join(f"{n} {r:.4g}" for n, r in runs.items())
        + " (nodes run equally often form a loop scheduled on its own, the loops one after another)"),
        "graph nodes: PL/AIE from the profile rows chosen (their sources: "
        + ", ".join(sorted({r.source for r in rows})) + "); PS nodes from the PS row (catalogue per-core roofline)",
        "an edge between two units costs the device link's latency + bytes / bandwidth (designs/devices.py); so "
        "does a loop-carried edge (new weights to the next step's forward) whose ends sit on different units",
        f"PL and AIE nodes overlap as dependencies allow; PS nodes run on the {cores} PS core(s), one node per core "
        "at a time; the plan in its own core order (its graph step is the plan's makespan, the ILP's objective), "
        "the other variants list-scheduled (rlhls.partition.heft)",
    ]
    assumptions.append("host loop and graph: " + (f"{overlap:.0%} of the graph hidden behind the host loop "
                                                   f"({'given' if given else 'declared by the design'})"
                                                   if overlap else "serial (a unit's own pipelining, e.g. CPP's "
                                                   "coarse-grained FVP pipeline, is inside its cost model)"))

    ps = _ps_choice(graph, dev)
    choices = {"all_PS": ps, "plan": planned}
    # each device variant's fixed points, and the design whose profile rows they come from
    fixed = {"all_PS": ({}, None), "plan": (plan_points, design)}
    fx_design, fx_why = _fixar_design(design)
    if "PL" in dev.units:
        pts: dict = {}
        choices["PL_only"], notes = choose(profile_design(fx_design, dev, graph=graph), graph, "PL", cap, points=pts)
        fixed["PL_only"] = (pts, fx_design)
        assumptions += notes
    assumptions.append(f"PL-only (FIXAR-like): every node on the PL at {FIXAR_CLOCK_MHZ:g} MHz in {fx_why}, each at "
                       "its fastest design point that fits the fabric alone")
    if "AIE" in dev.units:
        aie_design = replace(design, formats={**design.formats, "aie": "fp32", "aie_acc": "fp32"}, pins={})
        aie_rows = [r for r in profile_design(aie_design, dev, graph=graph) if graph.node(r.node).mm]
        pts = {}
        choices["AIE_only"], notes = choose(aie_rows, graph, "AIE", cap, others=ps, points=pts)
        fixed["AIE_only"] = (pts, aie_design)
        assumptions += notes
        assumptions.append("AIE-only (CHARM-like): matrix multiplies on the AIE in fp32 (fastest point that fits), "
                           "the rest on the PS")
    else:
        assumptions.append(f"AIE-only: n/a ({dev.id} has no AI Engines)")

    variants: dict[str, Variant | None] = {}
    cpu_graph = sum(host.graph.values())
    variants["cpu"] = cpu = Variant("cpu", LABELS["cpu"], None,
                                    {**{p: s * steps for p, s in host.host.items()},
                                     **{p: s * host.graph_steps * steps for p, s in host.graph.items()}})

    scheds = {k: schedule(graph, c, links, runs, ps_cores=cores, plan=plan if k == "plan" else None)
               for k, c in choices.items()}

    def device_run(k, f):
        return scheds[k]["makespan_us"], run_phases(host, scheds[k], steps, f, overlap)

    for k in ("all_PS", "PL_only", "AIE_only", "plan"):
        if k not in choices:
            variants[k] = None
            continue
        step_us, phases = device_run(k, factor)
        variants[k] = Variant(k, LABELS[k], step_us, phases, units={n: u for n, (u, _) in choices[k].items()})
    for v in variants.values():
        if v is not None:
            v.total_s = float(sum(v.phases_s.values()))
    plan_v = variants["plan"]
    assert plan_v is not None and plan_v.step_us is not None  # the plan is always a modelled device variant
    speedups = {}
    for k, v in variants.items():
        if v is None or k == "plan":
            continue
        step_us = cpu_graph * 1e6 if v.step_us is None else v.step_us  # None: the cpu's, its measured graph
        per_step = step_us / plan_v.step_us if plan_v.step_us > 0 else math.inf
        speedups[k] = {"per_step": per_step, "run": v.total_s / plan_v.total_s if plan_v.total_s > 0 else math.inf}
    sensitivity = {}
    for tag, f in (("x0.5", factor / 2), ("x2", factor * 2)):
        _, ph = device_run("plan", f)
        tot = float(sum(ph.values()))
        sensitivity[tag] = {"ps_factor": f, "plan_s": tot,
                            "speedup_vs_cpu": cpu.total_s / tot if tot > 0 else math.inf}
    out = Perf(design.name, dev.id, steps, float(factor), basis, host, variants, speedups, sensitivity, assumptions,
               runs)
    if band:
        _Band(dev, graph, host, steps, overlap, cores, runs, plan, float(factor), choices, fixed,
              _model_error(model_error, dev)).fill(out)
    return out


# ----------------------------------------------------------------------------------------------
# The band and the tornado: the plan re-evaluated at the ends of every assumed constant
# ----------------------------------------------------------------------------------------------

# assumed: the host loop's Python need not slow down as the GEMM does (the PS factor's basis)
PS_FACTOR_RANGE = (0.5, 2.0)
PS_FACTOR = "PS factor (host phases)"
MODEL = "{} latency model (held-out error)"
# figures with others derived from them: set after the rest, so their dependents follow them
_DERIVES = ("PS.perf.flops_per_cycle_fp32", "PL.clock_mhz")
_QOR: dict = {}


def model_error() -> dict:
    """{unit: (fraction, why)}: the held-out median |error| of the PL and AIE latency models, from
    ``rlhls qor`` (``partition.qor``: the models with their constants calibrated, on rows not fitted to)."""
    if "err" not in _QOR:
        from rlhls.partition.qor import qor

        q = qor()
        cal = {m["unit"]: m for m in q.metrics("calibrated") if m["metric"] == "latency"}
        raw = {m["unit"]: m for m in q.metrics("assumed") if m["metric"] == "latency"}
        out = {}
        for u in ("PL", "AIE"):
            m = cal.get(u)
            if m is None or m["median_abs_error_pct"] is None:
                continue
            was = raw.get(u, {}).get("median_abs_error_pct")
            out[u] = (m["median_abs_error_pct"] / 100.0,
                      f"rlhls qor: held-out median |error| of the {u} latency model, constants calibrated "
                      f"({m['heldout']} held-out points)" + (f"; {was:g} % with the catalogue's constants"
                                                            if was is not None else ""))
        _QOR["err"] = out
    return _QOR["err"]


def _model_error(given, dev) -> dict:
    if given is None:
        given = model_error()
    if not isinstance(given, dict):
        raise RlhlsError(f"perf: model_error {given!r}: expected {{unit: fraction}}")
    out = {}
    for u, e in given.items():
        frac, why = e if isinstance(e, tuple) else (e, "given")
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 <= frac < 1:
            raise RlhlsError(f"perf: model error of {u} = {frac!r}: expected a fraction 0 .. 1")
        if u in dev.units:
            out[u] = (float(frac), why)
    return out


class _Band:
    """Re-evaluates the fixed choices of every device variant (units and design points unchanged, no
    ILP) on the device with some constants at an end of their range: profile rows recomputed, each
    node's latency moved by its model's change, the same schedules (``schedule``, the plan in its own
    core order)."""

    def __init__(self, dev, graph, host, steps, overlap, cores, runs, plan, factor, choices, fixed, errors):
        self.dev, self.graph, self.host, self.steps, self.overlap = dev, graph, host, steps, overlap
        self.cores, self.runs, self.plan, self.factor = cores, runs, plan, factor
        self.choices, self.fixed, self.errors = choices, fixed, errors
        self.figs = dict(dev.assumed())
        self.peak = dev.unit("PS").perf["gflops_fp32_peak"].value
        self.constants = [(path, fig.low, fig.high, fig.unit, fig.source) for path, fig in self.figs.items()]
        self.constants.append((PS_FACTOR, factor * PS_FACTOR_RANGE[0], factor * PS_FACTOR_RANGE[1], "x",
                               "assumed: the host loop's Python scales as the GEMM does, x0.5 .. x2"))
        for u, (e, why) in errors.items():
            self.constants.append((MODEL.format(u), 1 - e, 1 + e, "x latency", why))
        self.tables: dict = {}
        self.memo: dict = {}
        self.central = self._tables(dev)

    def _tables(self, dev) -> dict:
        """{variant source: {(node, unit, point): latency}} on `dev`."""
        from rlhls.partition.profile import profile_design

        out: dict = {"PS": {(n, "PS", ""): lat for n, (_, lat) in _ps_choice(self.graph, dev).items()}}
        for k, (_, d) in self.fixed.items():
            if d is not None:
                out[k] = {(r.node, r.unit, str(r.point)): r.latency_us
                          for r in profile_design(d, dev, graph=self.graph)}
        return out

    def evaluate(self, setting: dict) -> dict:
        """{'total_s': {variant: s}, 'speedups': {variant: run speed-up of the plan}} with each named
        constant of `setting` at its 'low' or 'high' end."""
        key = frozenset(setting.items())
        if key in self.memo:
            return self.memo[key]
        from rlhls.partition.profile import device_links

        ends = {name: (lo, hi) for name, lo, hi, _, _ in self.constants}
        dev = self.dev
        for path in sorted((p for p in setting if p in self.figs), key=lambda p: p in _DERIVES):
            dev = dev.with_value(path, ends[path][setting[path] == "high"])
        factor = self.factor * self.peak / dev.unit("PS").perf["gflops_fp32_peak"].value
        if PS_FACTOR in setting:
            factor *= PS_FACTOR_RANGE[setting[PS_FACTOR] == "high"]
        scale = {u: ends[MODEL.format(u)][setting[MODEL.format(u)] == "high"] if MODEL.format(u) in setting else 1.0
                 for u in self.errors}
        now = self.central if dev is self.dev else self._tables(dev)
        links = device_links(dev)
        totals = {}
        for k, choice in self.choices.items():
            points, _ = self.fixed[k]
            moved = {}
            for n, (u, lat) in choice.items():
                src, pkey = (k, (n, u, points[n])) if n in points else ("PS", (n, "PS", ""))
                base = self.central.get(src, {}).get(pkey)
                delta = now[src][pkey] - base if base is not None and pkey in now.get(src, {}) else 0.0
                moved[n] = (u, max(0.0, (lat + delta) * scale.get(u, 1.0)))
            sch = schedule(self.graph, moved, links, self.runs, ps_cores=self.cores,
                           plan=self.plan if k == "plan" else None)
            totals[k] = float(sum(run_phases(self.host, sch, self.steps, factor, self.overlap).values()))
        plan_s = totals["plan"]
        self.memo[key] = out = {"total_s": totals, "speedups": {
            k: (t / plan_s if plan_s > 0 else math.inf) for k, t in totals.items() if k != "plan"}}
        return out

    def fill(self, perf: Perf) -> None:
        cpu_s = perf.variants["cpu"].total_s

        def sp(res: dict, k: str) -> float:
            if k == "cpu":
                return cpu_s / res["total_s"]["plan"] if res["total_s"]["plan"] > 0 else math.inf
            return res["speedups"][k]

        ends = {}
        tornado = []
        for name, lo, hi, unit, source in self.constants:
            a, b = self.evaluate({name: "low"}), self.evaluate({name: "high"})
            ends[name] = (a, b)
            tornado.append({"constant": name, "unit": unit, "range": [lo, hi], "source": source,
                            "low": a["total_s"]["plan"], "high": b["total_s"]["plan"],
                            "swing": abs(b["total_s"]["plan"] - a["total_s"]["plan"]),
                            "speedup_vs_cpu": [sp(a, "cpu"), sp(b, "cpu")]})
        tornado.sort(key=lambda t: -t["swing"])

        def corner(metric, larger: bool) -> dict:
            """Every constant at the end that makes `metric` larger (or smaller); none where it is level."""
            out = {}
            for name, (a, b) in ends.items():
                ma, mb = metric(a), metric(b)
                if ma != mb:
                    out[name] = ("high" if mb > ma else "low") if larger else ("low" if mb > ma else "high")
            return out

        plan_of = lambda r: r["total_s"]["plan"]  # noqa: E731
        slow, fast = corner(plan_of, True), corner(plan_of, False)
        band: dict = {"total_s": {"low": plan_of(self.evaluate(fast)), "central": perf.total_s,
                            "high": plan_of(self.evaluate(slow))},
                "slowest": slow, "fastest": fast, "speedups": {}, "flips": []}
        for k, v in perf.speedups.items():
            metric = lambda r, k=k: sp(r, k)  # noqa: E731
            lo = sp(self.evaluate(corner(metric, False)), k)
            hi = sp(self.evaluate(corner(metric, True)), k)
            band["speedups"][k] = {"low": lo, "central": v["run"], "high": hi}
            if min(lo, hi) < 1.0 < max(lo, hi):
                band["flips"].append(
                    f"The plan's speed-up over {LABELS[k]}, {v['run']:.3g}x, may flip: inside its band "
                    f"({lo:.3g}x .. {hi:.3g}x) it crosses 1.0x.")
        perf.band, perf.tornado = band, tornado
        perf.assumptions.append(
            "band: the plan and the baselines keep their units and design points; each assumed constant "
            "(designs/devices.py, with its plausible range) set to its low and its high end one at a time (the "
            "tornado), then all at the ends that make the plan slowest / fastest; the PS factor x0.5 .. x2; "
            + ("; ".join(f"{u} latencies x (1 +- {e:.3g}) ({why})" for u, (e, why) in self.errors.items())
               or "no latency-model error (no PL or AIE unit)"))


def tornado_figure(perf: Perf, top: int = 12):
    """The tornado chart: the plan's whole-run time at the low and the high end of each assumed
    constant's range (the others central), the largest swings on top."""
    from matplotlib.figure import Figure

    rows = perf.tornado[:top][::-1]
    fig = Figure(figsize=(10, 0.45 * max(len(rows), 3) + 1.6))
    ax = fig.add_subplot()
    mid = perf.total_s
    for i, t in enumerate(rows):
        for end, color in (("low", "tab:blue"), ("high", "tab:red")):
            ax.barh(i, t[end] - mid, left=mid, color=color, alpha=0.8, label=f"constant at its {end} end" if i == 0
                    else None)
    ax.axvline(mid, color="black", lw=1)
    b = perf.band.get("total_s", {})
    if b:
        ax.axvspan(b["low"], b["high"], color="grey", alpha=0.12, label="band (all at once)")
    ax.set_yticks(range(len(rows)), [f"{t['constant']} ({t['range'][0]:.3g} .. {t['range'][1]:.3g} {t['unit']})"
                                     for t in rows], fontsize=7)
    ax.set_xlabel(f"plan, seconds for {perf.steps:,} environment steps (central {_dur(mid)})")
    ax.set_title(f"{perf.design} on {perf.device}: which assumed constants move the plan's time")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def perf_figure(perf: Perf):
    """Stacked bars: seconds per phase of the whole run, one bar per variant."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    vs = [v for v in perf.variants.values() if v is not None]
    phases = []
    for v in vs:
        phases += [p for p in v.phases_s if p not in phases]
    fig = Figure(figsize=(10, 4.8))
    ax = fig.add_subplot()
    tab20 = colormaps["tab20"]
    colors = [tab20(i) for i in range(tab20.N)]  # its colours (RGBA)
    bottom = np.zeros(len(vs))
    x = np.arange(len(vs))
    for i, p in enumerate(phases):
        y = np.array([v.phases_s.get(p, 0.0) for v in vs])
        ax.bar(x, y, bottom=bottom, color=colors[i % 20], label=p)
        bottom += y
    for xi, v in zip(x, vs):
        ax.text(float(xi), v.total_s, f"{_dur(v.total_s)}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [v.label for v in vs], fontsize=8, rotation=10)
    ax.set_ylabel(f"seconds for {perf.steps:,} environment steps")
    ax.set_title(f"{perf.design} on {perf.device}: where the time goes (PS factor {perf.ps_factor:.3g})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


PERF_FILES = ("perf.json", "perf.txt", "perf.png", "tornado.png")


def write_perf(perf: Perf, out_dir, *, force: bool = False, bound: dict | None = None) -> Path:
    """perf.json, perf.txt, perf.png and tornado.png (where the Perf has a band) into `out_dir` (staged, then
    published; a folder rlhls did not write is refused unless `force`). `bound`: the record of the run it
    models (``BoundRun.record()``)."""
    from rlhls.core.fileio import atomic_write_text, check_out, staged_folder

    from .figures import save_png

    out_dir = Path(out_dir)
    ours = lambda d: all(p.name in PERF_FILES for p in d.iterdir())  # noqa: E731
    check_out(out_dir, command="perf", force=force, ours=ours)
    with staged_folder(out_dir, command="perf", ours=ours) as tmp:
        rec = {**perf.to_json(), **({"binding": bound} if bound is not None else {})}
        atomic_write_text(tmp / "perf.json", json.dumps(rec, indent=1, default=str) + "\n")
        atomic_write_text(tmp / "perf.txt", perf.text() + "\n")
        save_png(perf_figure(perf), tmp / "perf.png")
        if perf.tornado:
            save_png(tornado_figure(perf), tmp / "tornado.png")
    return out_dir


def report_lines(p: dict) -> list:
    """The run report's section from a Perf's JSON (the flow record's ``perf``)."""
    from .figures import markdown_table

    rows = []
    for k, v in p["variants"].items():
        if v is None:
            rows.append([LABELS[k], "n/a", "n/a", "-"])
            continue
        sp = p["speedups"].get(k)
        step = "measured" if v["graph_step_us"] is None else f"{v['graph_step_us']:.4g}"
        rows.append([v["label"], step, f"{v['total_s']:.4g}", f"{sp['run']:.3g}x" if sp else "-"])
    L = ["## Modeled run on the device", "",
         f"{p['steps']:,} environment steps of {p['design']} on {p['device']}; PS factor {p['ps_factor']:.3g} "
         f"({p['ps_factor_basis']}). Measured here: {p['measured']['source']}.", "",
         markdown_table(["variant", "graph step (us)", "whole run (s)", "plan speed-up"], rows), ""]
    L += [f"PS factor {k}: plan {s['plan_s']:.4g} s, speed-up over this CPU {s['speedup_vs_cpu']:.3g}x"
          for k, s in p["sensitivity"].items()]
    L += _band_lines(p.get("band", {}), p.get("tornado", []), p["variants"])
    L += ["", "Assumptions:", ""] + [f"- {a}" for a in p["assumptions"]] + ["", "![perf](perf.png)", ""]
    return L


MM_SIZES = (16, 32, 64, 128, 256, 512, 1024)


def mm_crossover(device="vek280", sizes=MM_SIZES, fmt: str = "fp32") -> dict:
    """AP-DRL Fig. 6 from the cost models: an n x n x n GEMM on the PL (fastest MAC-lane point that
    fits the fabric) against the AIE (fastest tile count), per size, and the smallest size from which
    the AIE is faster. The seed's own bars are in its figure only; its text (§III) says the PL wins at
    low FLOPs (the AIE's kernel launch dominates) and the AIE at high FLOPs (1 GHz against 245 MHz)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_matmul, pl_matmul
    from rlhls.designs.kernels.dense import PL_MM_POINTS
    from rlhls.partition.profile import device_capacity

    dev = device if not isinstance(device, str) else get_device(device)
    if "PL" not in dev.units or "AIE" not in dev.units:
        raise RlhlsError(f"device {dev.id} lacks a PL or an AIE; the crossover needs both (vek280, vck190)")
    cap = device_capacity(dev)
    rows = []
    for n in sizes:
        pl = [c for c in (pl_matmul(n, n, n, fmt, dev, pf=pf) for pf in PL_MM_POINTS if pf <= n * n)
              if all(c["resources"].get(r, 0) <= v for (u, r), v in cap.items() if u == "PL" and r != "cores")]
        pl_us = min((c["latency_us"] for c in pl), default=None)  # None: the fabric holds it at no point
        aie_us = aie_matmul(n, n, n, fmt, dev)["latency_us"]
        rows.append({"n": n, "flops": 2 * n ** 3, "pl_us": pl_us, "aie_us": aie_us,
                     "faster": "AIE" if pl_us is None or aie_us < pl_us else "PL"})
    cross = next((r["n"] for r in rows if r["faster"] == "AIE"), None)
    return {"device": dev.id, "format": fmt, "rows": rows, "aie_from_n": cross,
            "seed": "AP-DRL §III, Fig. 6: PL faster at low FLOPs (AIE launch time), AIE faster at high FLOPs "
                    "(PL 245 MHz vs AIE 1 GHz); the figure's values are not in its text",
            "agrees": cross is not None and rows[0]["faster"] == "PL"
            and all(r["faster"] == "AIE" for r in rows if r["n"] >= cross)}
