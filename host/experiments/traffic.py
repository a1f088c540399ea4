"""Seed 004's experiment: A2C traffic-signal control against the seed's fixed-time plan.

    rlhls experiment traffic [--steps N] [--seeds K] [--jobs J] [--backend emu|csim] [--out DIR]
                             [--set K=V ...] [--param episodes=E] [--param eval_seed=S]
    rlhls experiment traffic --param report=FLOW_DIR [--param episodes=E]
    rlhls experiment traffic-energy [--param macs=N] [--param max_macs=M] [--out DIR]

**Training.** ``--seeds`` (default 2) training runs of a2c-traffic (A2C, RMSprop, the conv + fc
trunk of Fig. 3 under the design's plan), ``--steps`` environment steps each (default
``DEFAULT_STEPS``), each its own run folder ``<out>/train-s<seed>``, a Ray task
(host/engine.py: ``--jobs`` at once, ``--address`` a cluster; ``--resume``, or the same command
again, keeps finished runs and continues the others from their checkpoints). Training episodes are
an hour of traffic from the ``mixed`` demand (each episode one of the four route sets).

**Evaluation.** Three policies on the same episodes: the trained A2C agent (greedy: the most
probable action of its policy, acting on the PS in FP32 as in training), the seed's fixed-time
plan (EW, EWL, NS, NSL in turn: the Fig. 3 table's 110 s cycle) and a uniformly random policy. Per
route set (balanced, ns_heavy, ew_heavy, rush_hour) ``episodes`` (default 5) hour-long episodes
with the held-out seeds ``eval_seed + i`` (default 1000000 + i; checked against every training
episode's seed), so each policy meets the same departures and SUMO seed. Per episode: mean
vehicle waiting time (s) and mean queue (vehicles), both from SUMO's halted vehicles each second
(``host/envs/sumo_intersection.py``: vehicle-seconds halted or waiting for insertion, over the
vehicles due in the hour and over the hour's seconds); mean +- std over episodes (and training
seeds for A2C).

**Outputs** in ``--out`` (default ``runs/traffic``): ``summary.md`` / ``summary.csv`` (the table, the
budget, SUMO's speed measured during the evaluation), ``episodes.csv`` (every evaluation
episode), ``learning.png`` (each seed's episodic return, a 20-episode moving average, against the
fixed-time and random policies' mean return) and ``waiting.png`` (waiting time and queue per
route set).

**traffic-energy** (model only): time, power and energy of a decision (batch 1) and of a training
step, PS alone against PS + MAC array (``energy_table``; power from host/power.py), and the MAC
count from which the element would pay in time and in energy (``pays_at``); ``energy.md``,
``energy.csv``, ``energy.json``, ``energy.png``.

**report=FLOW_DIR** adds the seed's section to an ``rlhls run a2c-traffic`` folder's
``report.md``: the compute element's stages with their modeled time on the PL against the PS
(``stage_times``), the learning curve, and the waiting-time comparison of that run's agent.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs import traffic as plan

from ..figures import mean_std, register_report_section
from ..runfolder import CHECKPOINT, episodes, metrics
from . import RUNS, TRAINS, Experiment, Summary, param, read_object, register_experiment, train_run

if TYPE_CHECKING:
    from rlhls.designs.kernels.mac_array import MacArray

__all__ = ["DESIGN", "DEFAULT_STEPS", "DEFAULT_SEEDS", "POLICIES", "fixed_time_policy", "random_policy",
           "a2c_policy", "evaluate", "training_episode_seed", "check_held_out", "stage_times", "runs", "summary",
           "report_section", "summarize", "with_macs", "element_resources", "energy_row", "pays_at", "energy_table",
           "energy_sweep"]

DESIGN = "a2c-traffic"
DEFAULT_STEPS = 60_000  # per seed: the experiment takes ~15 min on 2 cores (README)
DEFAULT_SEEDS = 2
EVAL_EPISODES = 5
EVAL_SEED = 1_000_000
POLICIES = ("a2c", "fixed-time", "random")
MA = 20  # episodes in the learning curve's moving average


# -- policies: factory(seed) -> (observation -> action)

def fixed_time_policy(seed: int):
    """The seed's fixed-time plan: EW, EWL, NS, NSL in turn (the Fig. 3 table)."""
    cycle = [plan.ACTIONS.index(m) for m in plan.FIXED_TIME]
    k = [0]

    def act(obs):
        a = cycle[k[0] % len(cycle)]
        k[0] += 1
        return a
    return act


def random_policy(seed: int):
    rng = np.random.default_rng([seed, 4])
    return lambda obs: int(rng.integers(len(plan.ACTIONS)))


def a2c_policy(run_dir):
    """The greedy policy of a trained a2c-traffic run folder (its checkpoint)."""
    from rlhls.designs.registry import get_design

    from ..checkpoint import load_checkpoint
    from ..mixed import ps_forward

    run_dir = Path(run_dir)
    cfg = read_object(run_dir / "config.json")
    design = get_design(cfg["design"], files=False)
    state = load_checkpoint(run_dir / CHECKPOINT)["trainer"]
    nets = design.build_networks(int(cfg["seed"]))
    for name, params in {"policy": state["policy"], "value": state["value"], **state.get("trunks", {})}.items():
        nets[name].set_params(params)
    trunk = design.net("policy").input_from

    def factory(seed):
        def act(obs):
            x = np.asarray(obs, dtype=np.float64)[None]
            if trunk is not None:
                x = ps_forward(nets[trunk], x)
            return int(np.argmax(ps_forward(nets["policy"], x)[0]))
        return act
    return factory


def evaluate(policies: dict, demands, seeds, *, episode_seconds: int = 3600, sumo: str = "auto",
             say=None) -> list[dict]:
    """One episode per (route set, seed, policy); the policies of a (route set, seed) see the same
    departures and SUMO seed. Rows: policy, demand, seed, mean_wait, mean_queue, return, steps,
    vehicles, sim_seconds, wall_s."""
    from ..envs.sumo_intersection import SumoIntersection

    rows = []
    for demand in demands:
        env = SumoIntersection(demand=demand, episode_seconds=episode_seconds, sumo=sumo)
        try:
            for seed in seeds:
                for name, factory in policies.items():
                    act = factory(seed)
                    t0 = time.perf_counter()
                    obs, _ = env.reset(seed=int(seed))
                    ret, steps, done = 0.0, 0, False
                    while not done:
                        obs, r, te, tr, info = env.step(act(obs))
                        ret, steps, done = ret + r, steps + 1, te or tr
                    rows.append({"policy": name, "demand": demand, "seed": int(seed), "mean_wait": info["mean_wait"],
                                 "mean_queue": info["mean_queue"], "return": ret, "steps": steps,
                                 "vehicles": info["vehicles"], "sim_seconds": info["sim_time"],
                                 "wall_s": time.perf_counter() - t0})
                    if say:
                        say(f"    {demand:<9} seed {seed} {name:<10} waiting {info['mean_wait']:7.1f} s/vehicle, "
                            f"queue {info['mean_queue']:6.1f}")
        finally:
            env.close()
    return rows


# -- held-out seeds

def training_episode_seed(seed: int, env_index: int, episode: int) -> int:
    """The reset seed of a training episode (host/envs/vector.py ReplayableVecEnv)."""
    return int(np.random.SeedSequence([seed, env_index, episode]).generate_state(1)[0])


def check_held_out(eval_seeds, runs) -> None:
    """RlhlsError if an evaluation seed was a training episode's: `runs` = [(train seed, episodes started)]."""
    used = {training_episode_seed(s, 0, e) for s, n in runs for e in range(int(n))}
    both = sorted(set(int(x) for x in eval_seeds) & used)
    if both:
        raise RlhlsError(f"evaluation seed {both[0]} is a training episode's seed: not held-out (choose another "
                         "--param eval_seed)")


# -- the compute element against the PS (modeled)

def stage_times(design=None, batch: int | None = None, device=None) -> list[dict]:
    """Per stage of the design's MAC array at its training batch: iterations, accumulations, MACs,
    the FSM's modeled cycles and time on the PL, and the PS roofline's time for the same MACs and
    words (designs/kernels/cost.py ``ps_cost``), with the graph node each stage computes."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.designs.kernels import KernelContext, get_kernel
    from rlhls.designs.kernels import cost as C
    from rlhls.designs.registry import get_design

    design = get_design(DESIGN) if design is None else design
    graph = build_graph(design, batch or design.batch_size)
    dev = get_device(design.device) if device is None else device
    ctx = KernelContext(design, graph, device=dev)
    K = cast("MacArray", get_kernel("mac_array"))  # registered by designs/kernels/mac_array.py
    rows = []
    for node in graph.nodes:
        if node.kind not in K.implements:
            continue
        stages = K.node_stages(node, ctx)
        if not stages:
            continue
        p = K.resolve(K.node_params(node, ctx))
        table = {s["name"]: s for s in K.stage_table(p)}
        wb = math.ceil(K.formats(p)["storage"].bits / 8)
        for st in K.cost(p, unit="PL", device=dev, stages=stages)["stages"]:
            s = table[st["name"]]
            macs = s["rows"] * s["cols"] * s["accumulations"]
            nbytes = wb * (s["rows"] * s["accumulations"] + s["cols"] * s["accumulations"] + s["rows"] * s["cols"])
            ps = C.ps_cost(2.0 * macs, dev, nbytes=nbytes)["latency_us"]
            rows.append({"stage": st["name"], "node": node.name, "iterations": st["iterations"],
                         "accumulations": st["accumulations"], "macs": macs, "cycles": st["cycles"],
                         "transfers": st["transfers"], "pl_us": st["latency_us"], "ps_us": ps,
                         "clock_mhz": p["clock_mhz"], "mac_units": p["macs"]})
    return rows


# -- energy: PS alone against PS + MAC array (host/power.py)

MAX_MACS = 1024  # the pay-off search stops here (or where the fabric stops holding the element)


def with_macs(design, macs: int):
    """The design with its MAC array at `macs` multiply-accumulators."""
    import dataclasses

    ks = tuple(dataclasses.replace(k, params={**k.params, "macs": int(macs)}) if k.name == "mac_array" else k
               for k in design.kernels)
    return dataclasses.replace(design, kernels=ks)


def element_resources(design, batch: int, device=None) -> tuple[dict, float]:
    """(PL resources, clock MHz) of the design's MAC array sized for `batch`."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.designs.kernels import KernelContext, get_kernel

    dev = get_device(design.device) if device is None else device
    graph = build_graph(design, batch)
    ctx = KernelContext(design, graph, device=dev)
    K = cast("MacArray", get_kernel("mac_array"))  # registered by designs/kernels/mac_array.py
    node = next(n for n in graph.nodes if n.kind in K.implements and K.node_stages(n, ctx))
    p = K.resolve(K.node_params(node, ctx))
    return K.resources(p, dev), float(p["clock_mhz"])


def _case(design, batch: int, decision: bool, device=None) -> dict:
    """Seconds of one decision (batch 1: the trunk and policy forward) or one training step (the
    whole graph at the training batch) on the PS alone and on PS + MAC array (the trunk's stages on
    the element, the rest on the PS, one after another: the PS drives every stage's handshake)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.designs.kernels.cost import ps_cost

    dev = get_device(design.device) if device is None else device
    st = [s for s in stage_times(design, batch, dev) if not decision or s["stage"].startswith("fwd")]
    on_pl = {s["node"] for s in st}
    nodes = [n for n in build_graph(design, batch).nodes
             if not decision or (n.phase == "fwd" and n.name.split(".")[0] != "value")]
    rest = sum(ps_cost(n.flops, dev, nbytes=n.bytes)["latency_us"] for n in nodes if n.name not in on_pl)
    pl = sum(s["pl_us"] for s in st)
    return {"ps_s": (rest + sum(s["ps_us"] for s in st)) * 1e-6, "with_s": (rest + pl) * 1e-6, "pl_s": pl * 1e-6}


def energy_row(design, batch: int, decision: bool, model=None, device=None) -> dict:
    """Time, power and energy of a decision or a training step, PS alone against PS + MAC array.
    PS alone: one A53 core active, the PL domain off. PS + MAC array: the same core (it drives the
    handshakes) and the PL's static power for the whole time, the element's dynamic power while its
    stages run."""
    from ..power import energy_j, soc_power_w

    t = _case(design, batch, decision, device)
    res, clock = element_resources(design, design.batch_size, device)
    alone = soc_power_w(1, model=model)
    both = soc_power_w(1, res, clock, model)
    base = both["ps"] + both["pl_static"]
    e_ps = energy_j([(alone["total"], t["ps_s"])])
    e_with = energy_j([(base, t["with_s"]), (both["pl_dynamic"], t["pl_s"])])
    return {"what": "decision" if decision else "training step", "batch": batch, "ps_s": t["ps_s"],
            "with_s": t["with_s"], "pl_s": t["pl_s"], "ps_w": alone["total"], "with_w": base + both["pl_dynamic"],
            "pl_static_w": both["pl_static"], "pl_dynamic_w": both["pl_dynamic"], "ps_j": e_ps, "with_j": e_with,
            "time_ratio": t["with_s"] / t["ps_s"], "energy_ratio": e_with / e_ps,
            # the PL powered (idle) in the PS-alone case too, e.g. holding other logic: its static is common
            "energy_ratio_pl_on": e_with / (e_ps + both["pl_static"] * t["ps_s"]),
            **{f"pl_{k}": v for k, v in res.items() if k in ("lut", "ff", "dsp", "bram36")}}


# the seed names no clock for the element (designs/traffic.py: 100 MHz, assumed); a ZCU106 fabric closes
# a MAC array like this one anywhere in this range
CLOCK_RANGE_MHZ = (100.0, 300.0)


def energy_band(design, batch: int, decision: bool) -> dict:
    """The time and energy ratios of ``energy_row`` at the ends of every assumed figure they depend on:
    the power coefficients (host/power.py, their ranges), the device's assumed figures
    (designs/devices.py: the PS roofline, the PS->PL link) and the element's clock (``CLOCK_RANGE_MHZ``).
    Each alone at its low and high end (``constants``, largest swing first), then all at the ends that
    make each ratio smallest / largest (``low`` / ``high`` per ratio), and ``flips``: a sentence per ratio
    whose band crosses 1.0 (the verdict PS alone against PS + element may go either way)."""
    import dataclasses

    from rlhls.designs.devices import get_device

    from ..power import ZU7EV_POWER

    dev0 = get_device(design.device)
    base = {k: f.value for k, f in ZU7EV_POWER.items()}

    def at(power=None, dev=None, clock=None) -> dict:
        d = design if clock is None else dataclasses.replace(design, clocks_mhz={**design.clocks_mhz, "PL": clock})
        model = None if power is None else {**ZU7EV_POWER, **{k: dataclasses.replace(ZU7EV_POWER[k], value=v)
                                                                for k, v in power.items()}}
        r = energy_row(d, batch, decision, model=model, device=dev)
        return {k: r[v] for k, v in RATIO.items()}

    central = at()
    ends: list = []  # (name, range, unit, source, apply(end) -> kwargs)
    for k, f in ZU7EV_POWER.items():
        if f.low is not None and f.high is not None:
            ends.append((k, (f.low, f.high), f.unit, f.source, lambda v, k=k: {"power": {**base, k: v}}))
    for path, f in dev0.assumed():
        ends.append((path, (f.low, f.high), f.unit, f.source, lambda v, path=path: {"dev": dev0.with_value(path, v)}))
    ends.append(("element clock", CLOCK_RANGE_MHZ, "MHz", "assumed: the seed names no clock (designs/traffic.py)",
                 lambda v: {"clock": v}))
    constants = []  # in the order of `ends`
    for name, (lo, hi), unit, source, apply in ends:
        a, b = at(**apply(lo)), at(**apply(hi))
        constants.append({"constant": name, "range": [lo, hi], "unit": unit, "source": source, "low": a, "high": b,
                          "swing": max(abs(b[k] - a[k]) for k in RATIO)})

    def corner(key: str, larger: bool) -> float:
        """The ratio `key` with every figure at the end of its range that makes it larger (or smaller)."""
        power, dev, clock = dict(base), dev0, None
        for (name, (lo, hi), _, _, apply), c in zip(ends, constants):
            up = c["high"][key] > c["low"][key]
            kw = apply(v := (hi if up == larger else lo))
            if "power" in kw:
                power[name] = v
            elif "dev" in kw:
                dev = dev.with_value(name, v)
            else:
                clock = v
        return at(power, dev, clock)[key]

    band = {k: {"low": corner(k, False), "central": central[k], "high": corner(k, True)} for k in RATIO}
    flips = [f"{what} ratio {b['central']:.2f}x may flip: inside its band ({b['low']:.2f}x .. {b['high']:.2f}x) it "
             "crosses 1.0x (the element pays at one end, costs at the other)" for what, b in band.items()
             if b["low"] < 1.0 < b["high"]]
    return {"band": band, "constants": sorted(constants, key=lambda c: -c["swing"]), "flips": flips}


def _fits(res: dict, design) -> bool:
    from rlhls.designs.devices import get_device
    from rlhls.partition.profile import device_capacity

    cap = device_capacity(get_device(design.device))
    return all(res.get(r, 0) <= v for (u, r), v in cap.items() if u == "PL")


RATIO = {"time": "time_ratio", "energy": "energy_ratio", "energy, PL on in both": "energy_ratio_pl_on"}


def pays_at(design, batch: int, decision: bool, key: str, max_macs: int = MAX_MACS) -> tuple[int | None, str]:
    """(n, why): the smallest MAC count n at which PS + MAC array beats the PS alone in `key` (of
    ``RATIO``: time, energy, energy with the PL powered in both) for a decision or a training step;
    n None when no count does, up to `max_macs` or to where the fabric stops holding the element
    (`why` says which)."""
    for n in range(1, max_macs + 1):
        d = with_macs(design, n)
        if not _fits(element_resources(d, design.batch_size)[0], design):
            return None, f"at no MAC count the fabric holds (it holds up to {n - 1})"
        r = energy_row(d, batch, decision)
        if r[RATIO[key]] < 1.0:
            return n, f"from {n} MACs"
    return None, f"at no MAC count up to {max_macs}"


def energy_table(design=None, macs: int | None = None, max_macs: int = MAX_MACS) -> dict:
    """Rows (a decision, a training step) at the design's MAC count (or `macs`), the MAC counts at
    which the element would pay in time and in energy, and every coefficient with its source."""
    from rlhls.designs.registry import get_design

    from ..power import ZU7EV_POWER

    design = get_design(DESIGN) if design is None else design
    if macs is not None:
        design = with_macs(design, macs)
    n = int(next(k.params.get("macs", 4) for k in design.kernels if k.name == "mac_array"))
    batch = design.hyperparams.get("num_envs", 1) * design.hyperparams.get("n_steps", design.batch_size)
    rows, pays = [], {}
    bands = {}
    for decision, b in ((True, 1), (False, batch)):
        r = energy_row(design, b, decision)
        eb = bands[r["what"]] = energy_band(design, b, decision)
        for key, col in RATIO.items():
            r[f"{col}_low"], r[f"{col}_high"] = eb["band"][key]["low"], eb["band"][key]["high"]
        rows.append(r)
        for key in RATIO:
            pays[(r["what"], key)] = pays_at(design, b, decision, key, max_macs)
    lines = []
    for r in rows:
        verdict = []
        for key, ratio in ((k, r[v]) for k, v in RATIO.items()):
            if ratio >= 1.0:
                verdict.append(f"{key}: the {n}-MAC element is {ratio:.2f}x the PS alone (costlier); it would pay "
                               + pays[(r["what"], key)][1])
            else:
                verdict.append(f"{key}: the {n}-MAC element takes {ratio:.2f}x the PS alone (it pays)")
        r["verdict"] = "; ".join(verdict)
        lines.append(f"{r['what']}: {r['verdict']}")
        lines += [f"{r['what']}: {f}" for f in bands[r["what"]]["flips"]]
    return {"macs": n, "rows": rows, "pays_at": {f"{w} {k}": v[0] for (w, k), v in pays.items()}, "lines": lines,
            "bands": bands,
            "coefficients": {k: {"value": f.value, "unit": f.unit, "source": f.source}
                             for k, f in ZU7EV_POWER.items()}}


def energy_sweep(design=None, max_macs: int = MAX_MACS) -> list[dict]:
    """Time and energy ratios (PS + MAC array over the PS alone) of a decision and a training step
    at every MAC count the fabric holds, up to `max_macs`."""
    from rlhls.designs.registry import get_design

    design = get_design(DESIGN) if design is None else design
    batch = design.hyperparams.get("num_envs", 1) * design.hyperparams.get("n_steps", design.batch_size)
    out = []
    for n in range(1, max_macs + 1):
        d = with_macs(design, n)
        if not _fits(element_resources(d, design.batch_size)[0], design):
            break
        for decision, b in ((True, 1), (False, batch)):
            r = energy_row(d, b, decision)
            out.append({"macs": n, "what": r["what"], **{v: r[v] for v in RATIO.values()}})
    return out


def runs_energy(ctx) -> list:
    """No runs: the model is evaluated in summary_energy."""
    opts = ctx.opts
    macs = param(opts, "macs", 4, low=1)
    max_macs = param(opts, "max_macs", MAX_MACS, low=1)
    ctx.data.update(macs=macs, max_macs=max_macs)
    ctx.data["settings"] = {"name": opts.name, "macs": macs, "max_macs": max_macs}
    from . import check_out

    check_out(ctx.out, ctx.data["settings"])
    return []


def _banded(r: dict, col: str) -> str:
    return f"{r[col]:.2f}x ({r[col + '_low']:.2f}-{r[col + '_high']:.2f})"


def summary_energy(ctx, outcomes) -> Summary:
    """energy.md / energy.csv / energy.json / energy.png: a decision and a training step, PS alone
    against PS + MAC array, and the MAC counts at which the element would pay."""
    from matplotlib.figure import Figure

    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table, save_png

    D, out = ctx.data, ctx.out
    t = energy_table(macs=D["macs"], max_macs=D["max_macs"])
    sweep = energy_sweep(max_macs=D["max_macs"])
    ctx.start(D["settings"])
    rows = t["rows"]
    cols = ["what", "batch", "ps_s", "with_s", "pl_s", "ps_w", "with_w", "pl_static_w", "pl_dynamic_w", "ps_j",
            "with_j", "time_ratio", "energy_ratio", "energy_ratio_pl_on", *[f"{c}_{e}" for c in RATIO.values()
                                                                            for e in ("low", "high")],
            "pl_lut", "pl_ff", "pl_dsp", "pl_bram36", "verdict"]
    atomic_write_text(out / "energy.csv", csv_text(rows, cols))
    atomic_write_text(out / "energy.json", json.dumps({**t, "sweep": sweep}, indent=1) + "\n")
    n = t["macs"]
    md = [f"# a2c-traffic (seed 004): energy, PS alone against PS + {n}-MAC array", "",
          "Times from the project's models (PS: the catalogue's per-core roofline; the element: its FSM cycle model, "
          "designs/kernels/mac_array.py); power from host/power.py (coefficients below). PS alone: one A53 core, "
          "the PL powered off. PS + MAC array: the same core drives every stage's handshake, the PL's static power "
          "for the whole time, the element's dynamic power while its stages run. The seed gives no time, power or "
          "energy figure (it calls the design \"time and energy-efficient\", §I).", "",
          markdown_table(["", "batch", "PS alone", f"PS + {n} MACs", "time ratio", "PS alone (W)",
                          f"PS + {n} MACs (W)", "PS alone", f"PS + {n} MACs", "energy ratio",
                          "energy ratio, PL on in both"],
                         [[r["what"], r["batch"], f"{r['ps_s'] * 1e6:.1f} us", f"{r['with_s'] * 1e6:.1f} us",
                           _banded(r, "time_ratio"), f"{r['ps_w']:.3f}", f"{r['with_w']:.3f}",
                           f"{r['ps_j'] * 1e6:.2f} uJ", f"{r['with_j'] * 1e6:.2f} uJ", _banded(r, "energy_ratio"),
                           _banded(r, "energy_ratio_pl_on")] for r in rows]), "",
          "Each ratio with its band in brackets: every assumed figure it depends on (the power coefficients "
          "below, the ZCU106's assumed PS roofline and PS->PL link figures in designs/devices.py, the element's "
          f"clock {CLOCK_RANGE_MHZ[0]:g}-{CLOCK_RANGE_MHZ[1]:g} MHz) at the ends of its range that make the ratio "
          "smallest / largest. The figures that move it most (the training step's time ratio, each alone at "
          "its low / high end): "
          + "; ".join(f"{c['constant']} {c['range'][0]:g}-{c['range'][1]:g} {c['unit']}: "
                      f"{c['low']['time']:.2f}x-{c['high']['time']:.2f}x"
                      for c in sorted(t["bands"]["training step"]["constants"],
                                      key=lambda c: -abs(c["high"]["time"] - c["low"]["time"]))[:4]) + ".", "",
          *[f"- {line}" for line in t["lines"]], "",
          f"The element ({n} MACs at {element_resources(with_macs(_design(), n), _design().batch_size)[1]:g} MHz): "
          + ", ".join(f"{r.replace('pl_', '')} {rows[0][r]}" for r in ("pl_lut", "pl_ff", "pl_dsp", "pl_bram36")), "",
          "## Coefficients", "",
          markdown_table(["coefficient", "value", "unit", "source"],
                         [[k, f"{c['value']:g}", c["unit"], c["source"]] for k, c in t["coefficients"].items()]), "",
          "![energy](energy.png)", ""]
    atomic_write_text(out / "energy.md", "\n".join(md))
    fig = Figure(figsize=(10, 3.8))
    for i, what in enumerate(("decision", "training step")):
        ax = fig.add_subplot(1, 2, i + 1)
        sel = [s for s in sweep if s["what"] == what]
        ax.plot([s["macs"] for s in sel], [s["time_ratio"] for s in sel], label="time")
        ax.plot([s["macs"] for s in sel], [s["energy_ratio"] for s in sel], label="energy")
        ax.plot([s["macs"] for s in sel], [s["energy_ratio_pl_on"] for s in sel], label="energy, PL on in both")
        ax.axhline(1.0, color="k", linestyle=":", label="PS alone")
        ax.axvline(n, color="tab:gray", linestyle="--", label=f"the design ({n} MACs)")
        ax.set_yscale("log")
        ax.set_xlabel("MACs in the element")
        ax.set_ylabel("PS + MAC array / PS alone")
        ax.set_title(f"a2c-traffic: one {what}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, out / "energy.png")
    lines = [f"{r['what']:<14} PS {r['ps_s'] * 1e6:8.1f} us {r['ps_j'] * 1e6:8.2f} uJ   PS+{n} MACs "
             f"{r['with_s'] * 1e6:8.1f} us {r['with_j'] * 1e6:8.2f} uJ" for r in rows] + t["lines"]
    return Summary(rows, lines, [out / "energy.md", out / "energy.png"])


def _design():
    from rlhls.designs.registry import get_design

    return get_design(DESIGN)


# -- the experiment

def _curve(run: Path) -> list[tuple[int, float]]:
    x, y = episodes(run)
    return [(int(a), float(b)) for a, b in zip(x, y)]


def _stats(xs) -> tuple[float, float]:
    xs = np.asarray(xs, dtype=np.float64)
    return float(xs.mean()), float(xs.std(ddof=1)) if xs.size > 1 else 0.0


def summarize(rows: list[dict], curves: dict, out: Path, meta: dict) -> list[dict]:
    """summary.csv / summary.md / episodes.csv / learning.png / waiting.png from evaluation rows and
    learning curves ({training seed: [(env_step, return)]})."""
    from matplotlib.figure import Figure

    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table, mean_std, save_png

    demands = list(dict.fromkeys(r["demand"] for r in rows))
    policies = [p for p in POLICIES if any(r["policy"] == p for r in rows)]
    table = []
    for d in demands:
        for p in policies:
            sel = [r for r in rows if r["demand"] == d and r["policy"] == p]
            w, q, g = _stats([r["mean_wait"] for r in sel]), _stats([r["mean_queue"] for r in sel]), \
                _stats([r["return"] for r in sel])
            table.append({"demand": d, "policy": p, "episodes": len(sel), "wait_s": w[0], "wait_std": w[1],
                          "queue": q[0], "queue_std": q[1], "return": g[0], "return_std": g[1]})
    cols = ["demand", "policy", "episodes", "wait_s", "wait_std", "queue", "queue_std", "return", "return_std"]
    atomic_write_text(out / "summary.csv", csv_text(table, cols))
    atomic_write_text(out / "episodes.csv", csv_text(rows, list(rows[0])))
    by = {(t["demand"], t["policy"]): t for t in table}
    md_rows = []
    for d in demands:
        fixed = by.get((d, "fixed-time"))
        cells = [d]
        for p in policies:
            t = by[(d, p)]
            cells.append(mean_std(t["wait_s"], t["wait_std"], t["episodes"], ".1f", ".1f"))
        for p in policies:
            t = by[(d, p)]
            cells.append(mean_std(t["queue"], t["queue_std"], t["episodes"], ".1f", ".1f"))
        a = by.get((d, "a2c"))
        cells.append(f"{100 * (a['wait_s'] / fixed['wait_s'] - 1):+.0f} %" if a and fixed else "-")
        md_rows.append(cells)
    head = (["route set"] + [f"waiting (s/veh) {p}" for p in policies] + [f"queue (veh) {p}" for p in policies]
            + ["A2C vs fixed-time waiting"])
    L = ["# rlhls experiment traffic (seed 004)", "", meta.get("text", ""), "", markdown_table(head, md_rows), ""]
    L += [f"- {k}: {v}" for k, v in meta.get("facts", {}).items()]
    L += ["", "![learning curves](learning.png)", "", "![waiting time and queue](waiting.png)", ""]
    atomic_write_text(out / "summary.md", "\n".join(L) + "\n")
    # learning curves against the baselines' mean return
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    for s, eps in sorted(curves.items()):
        if eps:
            x = np.array([e[0] for e in eps])
            y = np.array([e[1] for e in eps])
            k = min(MA, len(y))
            ma = np.convolve(y, np.ones(k) / k, mode="valid")
            ax.plot(x[k - 1:], ma, label=f"A2C seed {s} ({k}-episode mean)")
    for p, style in (("fixed-time", "--"), ("random", ":")):
        r = [x["return"] for x in rows if x["policy"] == p]
        if r:
            ax.axhline(float(np.mean(r)), linestyle=style, color="k", label=f"{p} (evaluation mean)")
    ax.set_xlabel("environment steps (signal decisions)")
    ax.set_ylabel("episodic return (drop of waiting / 100)")
    ax.set_title("a2c-traffic: learning curves on the mixed demand")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, out / "learning.png")
    fig = Figure(figsize=(9, 3.8))
    panels = (("wait_s", "mean waiting time (s / vehicle)"), ("queue", "mean queue (vehicles)"))
    for i, (key, label) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        bar_w = 0.8 / max(1, len(policies))
        for j, p in enumerate(policies):
            ys = [by[(d, p)][key] for d in demands]
            es = [by[(d, p)][{"wait_s": "wait_std", "queue": "queue_std"}[key]] for d in demands]
            ax.bar(np.arange(len(demands)) + j * bar_w, ys, bar_w, yerr=es, label=p, capsize=2)
        ax.set_xticks(np.arange(len(demands)) + bar_w * (len(policies) - 1) / 2, demands, fontsize=8)
        ax.set_ylabel(label)
        if i == 0:
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, out / "waiting.png")
    return table


def _speed(rows) -> dict:
    sel = [r for r in rows if r["policy"] == "fixed-time"] or rows
    wall = sum(r["wall_s"] for r in sel)
    return {"decisions_per_s": sum(r["steps"] for r in sel) / wall,
            "sim_s_per_s": sum(r["sim_seconds"] for r in sel) / wall}


def runs(ctx) -> list:
    """The training runs (one per seed); none with --param report."""
    opts = ctx.opts
    episodes_ = param(opts, "episodes", EVAL_EPISODES, low=1)
    eval_seed = param(opts, "eval_seed", EVAL_SEED)
    ctx.data.update(episodes=episodes_, eval_seed=eval_seed)
    if "report" in opts.params:
        return []
    _, config = ctx.config(_design())
    steps, seeds = ctx.steps(config, DEFAULT_STEPS), opts.seeds or DEFAULT_SEEDS
    out = ctx.out
    overrides = {k: str(v) for k, v in opts.overrides.items()}
    settings = {"name": "traffic", "steps": steps, "episodes": episodes_, "eval_seed": eval_seed,
                "backend": opts.backend, "overrides": overrides}
    ctx.start(settings, {"seeds": seeds})
    folders = {s: out / f"train-s{s}" for s in range(seeds)}
    ctx.data.update(steps=steps, seeds=seeds, folders=folders, t0=time.perf_counter())
    ctx.say(f"traffic: {seeds} x training {DESIGN} ({steps} steps, backend {opts.backend}) -> {out}")
    # the experiment evaluates the trained agent itself (held-out route sets): no hour-long episodes twice
    return [ctx.run(f"train-s{s}", run, steps=steps, design=DESIGN, out=str(run), seed=s, backend=opts.backend,
                    overrides={"eval_episodes": 0, **overrides}, config=config) for s, run in folders.items()]


def summary(ctx, outcomes) -> Summary:
    """The evaluation of the trained agents against the baselines and its summary files (module
    docstring); with --param report, the seed's section of a flow folder's report."""
    from ..envs.sumo_intersection import DEMANDS

    opts, out, say, D = ctx.opts, ctx.out, ctx.say, ctx.data
    episodes_, eval_seed = D["episodes"], D["eval_seed"]
    if "report" in opts.params:
        report = _add_report(Path(opts.params["report"]), episodes_, eval_seed, say)
        return Summary([], [f"traffic: seed 004's section -> {report}"])
    bad = [o for o in outcomes if not o.ok]
    if bad:  # the evaluation needs every trained agent
        raise RlhlsError(f"traffic: {len(bad)} training run(s) failed (first {bad[0].id}: {bad[0].error}); "
                         f"'rlhls experiment traffic --resume --out {out}' retries them")
    steps, seeds, runs_ = D["steps"], D["seeds"], D["folders"]
    t_train = time.perf_counter() - D["t0"]
    curves = {s: _curve(run) for s, run in runs_.items()}
    eval_seeds = [eval_seed + i for i in range(episodes_)]
    check_held_out(eval_seeds, [(s, len(curves[s]) + 1) for s in runs_])
    say(f"traffic: evaluating on {len(DEMANDS)} route sets x {episodes_} held-out episode(s)")
    t1 = time.perf_counter()
    rows = evaluate({"fixed-time": fixed_time_policy, "random": random_policy}, DEMANDS, eval_seeds, say=say)
    for s, run in runs_.items():
        for r in evaluate({"a2c": a2c_policy(run)}, DEMANDS, eval_seeds, say=say):
            rows.append({**r, "train_seed": s})
    t_eval = time.perf_counter() - t1
    speed = _speed(rows)
    rates = [_steps_per_s(run) for run in runs_.values()]
    minutes = [_train_seconds(run) / 60 for run in runs_.values()]
    facts = {
        "budget": f"{seeds} training seed(s) x {steps} environment steps (signal decisions) = "
                  f"{sum(len(c) for c in curves.values())} hour-long training episodes; training "
                  + ", ".join(f"{m:.1f}" for m in minutes) + f" min per run ({opts.jobs or 'all CPUs'} at a time; this "
                  f"command {t_train / 60:.1f} min), evaluation {t_eval / 60:.1f} min",
        "training speed": ", ".join(f"{m:.0f}" for m in rates) + " environment steps/s per run (incl. A2C)",
        "SUMO speed (evaluation, fixed-time)": f"{speed['decisions_per_s']:.0f} decisions/s = "
                                               f"{speed['sim_s_per_s']:.0f} simulated s/s",
        "evaluation": f"{episodes_} held-out episode(s) per route set (seeds {eval_seeds[0]}..{eval_seeds[-1]}), "
                      "the same for every policy; A2C greedy, pooled over training seeds",
    }
    text = (f"A2C ({DESIGN}: RMSprop, conv + fc trunk, the design's plan) against the seed's fixed-time plan "
            "(Fig. 3 table, 110 s cycle) and a random policy: mean vehicle waiting time and queue per episode, "
            "mean ± std over episodes.")
    table = summarize(rows, curves, out, {"text": text, "facts": facts})
    lines = [f"{t['demand']:<9} {t['policy']:<10} "
             f"waiting {mean_std(t['wait_s'], t['wait_std'], t['episodes'], '7.1f', '5.1f', pad=True)} s/veh   "
             f"queue {mean_std(t['queue'], t['queue_std'], t['episodes'], '6.1f', '5.1f')}" for t in table]
    return Summary(table, lines, [out / "summary.md", out / "learning.png", out / "waiting.png"])


def _train_seconds(run: Path) -> float:
    rows = metrics(run)
    try:
        return sum(float(r["wall_s"]) for r in rows) if rows else float("nan")
    except (KeyError, ValueError):
        return float("nan")


def _steps_per_s(run: Path) -> float:
    try:
        rows = metrics(run)
        return sum(int(r["env_steps"]) - int(p["env_steps"]) for p, r in zip([{"env_steps": 0}] + rows, rows)) / \
            sum(float(r["wall_s"]) for r in rows)
    except (KeyError, ValueError, ZeroDivisionError):
        return float("nan")


# -- rlhls run a2c-traffic: the seed's section of the flow's report

def report_section(flow_dir: Path, episodes: int = 1, eval_seed: int = EVAL_SEED, say=None, rec=None) -> list[str]:
    """Markdown lines for an ``rlhls run a2c-traffic`` folder: the plan's trunk on the compute
    element, its stages' modeled time vs the PS, the learning curve, and the trained agent's waiting
    time against the fixed-time plan and a random policy (evaluated once per checkpoint: kept in
    ``traffic.json``)."""
    from rlhls.designs.registry import get_design

    from ..envs.sumo_intersection import DEMANDS
    from ..figures import markdown_table

    flow_dir = Path(flow_dir)
    rec = read_object(flow_dir / "run.json") if rec is None else rec
    design = get_design(rec["design"], files=False)
    run = flow_dir / "train"
    cfg = read_object(run / "config.json")
    hp = cfg["hyperparams"]
    asg = cfg.get("plan") or {}
    times = stage_times(design, hp["num_envs"] * hp["n_steps"])
    L = ["## The compute element (seed 004)", "",
         f"The plan puts the trunk's matrix multiplies on the MAC array "
         f"({times[0]['mac_units']} MACs at {times[0]['clock_mhz']:g} MHz, the FSM's cycle model) and, of the rest, "
         + ", ".join(f"{u} {sum(1 for v in asg.values() if v == u)}" for u in ("PS", "PL", "AIE")
                     if any(v == u for v in asg.values()))
         + " node(s) in all. Per stage at the training batch, modeled time on the PL against the PS roofline of "
         "the same multiply-accumulates:", ""]
    rows = [[t["stage"], t["node"], asg.get(t["node"], "-"), t["iterations"], t["accumulations"], f"{t['macs']:,}",
             f"{t['pl_us']:.1f}", f"{t['ps_us']:.1f}", f"{t['ps_us'] / t['pl_us']:.2f}"] for t in times]
    L.append(markdown_table(["stage", "node", "plan", "iterations", "accumulations", "MACs", "PL (us)", "PS (us)",
                             "PS / PL"], rows))
    L += ["", "Learning curve: `train/reward.png` (above).", ""]
    eps = _curve(run)
    seeds = [eval_seed + i for i in range(episodes)]
    check_held_out(seeds, [(int(cfg["seed"]), len(eps) + 1)])
    import hashlib

    from rlhls.core.fileio import atomic_write_text

    key = {"checkpoint": hashlib.sha256((run / CHECKPOINT).read_bytes()).hexdigest(), "seeds": seeds}
    cache = flow_dir / "traffic.json"  # the evaluation of this checkpoint, kept: the report is written twice
    old = read_object(cache, default={})  # a damaged cache is evaluated again
    if old.get("key") == key:
        evals = old["rows"]
    else:
        evals = evaluate({"a2c": a2c_policy(run), "fixed-time": fixed_time_policy, "random": random_policy},
                         DEMANDS, seeds, say=say)
        atomic_write_text(cache, json.dumps({"key": key, "rows": evals}, indent=1) + "\n")
    table = summarize_rows(evals)
    L += [f"Waiting time (held-out seeds {seeds[0]}..{seeds[-1]}, {episodes} hour-long episode(s) per route set, "
          "the same for every policy):", "",
          markdown_table(["route set"] + [f"{p} waiting (s/veh)" for p in POLICIES] + [f"{p} queue" for p in POLICIES],
                         [[d] + [f"{table[(d, p)]['wait_s']:.1f}" for p in POLICIES]
                          + [f"{table[(d, p)]['queue']:.1f}" for p in POLICIES] for d in DEMANDS]), ""]
    return L


def summarize_rows(rows) -> dict:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        out.setdefault((r["demand"], r["policy"]), []).append(r)
    return {k: {"wait_s": float(np.mean([r["mean_wait"] for r in v])),
                "queue": float(np.mean([r["mean_queue"] for r in v]))} for k, v in out.items()}


def _add_report(flow_dir: Path, episodes: int, eval_seed: int, say) -> Path:
    from rlhls.core.fileio import atomic_write_text

    report = flow_dir / "report.md"
    if not (flow_dir / "run.json").is_file() or not (flow_dir / "train" / CHECKPOINT).is_file():
        raise RlhlsError(f"--param report={flow_dir}: not a finished 'rlhls run {DESIGN}' folder "
                         "(expected run.json and train/checkpoint.npz)")
    lines = report_section(flow_dir, episodes, eval_seed, say)
    text = report.read_text() if report.is_file() else ""
    head = "## The compute element (seed 004)"
    if head in text:
        text = text[:text.index(head)].rstrip() + "\n"
    atomic_write_text(report, text.rstrip() + "\n\n" + "\n".join(lines).rstrip() + "\n")
    return report


def _flow_section(rec: dict, folder: Path) -> list[str]:
    """``rlhls run a2c-traffic``'s report: the seed's section (nothing for other designs)."""
    if rec.get("design") != DESIGN or not (Path(folder) / "train" / CHECKPOINT).is_file():
        return []
    return report_section(Path(folder), rec=rec)


register_experiment(Experiment(
    "traffic", "seed 004: A2C traffic-signal control vs the fixed-time plan and a random policy (SUMO)",
    runs=runs, run=train_run, summarize=summary, options=(*TRAINS, *RUNS),
    params={"episodes": EVAL_EPISODES, "eval_seed": EVAL_SEED, "report": ""}))
register_experiment(Experiment(
    "traffic-energy", "seed 004: energy per decision and per training step, PS alone vs PS + MAC array (model)",
    runs=runs_energy, summarize=summary_energy, params={"macs": 4, "max_macs": MAX_MACS}))
register_report_section(_flow_section)
