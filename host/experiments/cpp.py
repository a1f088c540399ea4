"""CPP's experiments (seed 001): Fig. 4 (accuracy of the fixed-point CG result against float64 by
fraction bits) and Table II (CG and FVP time: the FPGA model, our emulation, the compiled C++,
float64 numpy as the Keras/Theano baseline's role).

    rlhls experiment cpp-fig4   [--design D ...] [--out DIR] [--param KEY=VALUE ...] [--jobs J] [--json]
    rlhls experiment cpp-table2 [--design D ...] [--out DIR] [--param KEY=VALUE ...] [--repeats R] [--json]

The data set (both experiments; §IV-A: "50000 samples for each benchmark" from MuJoCo). For each
design (default both CPP designs; ``--design`` picks): TRPO (host/algorithms/trpo.py, float64 FVP) runs
``warmup`` iterations of ``samples`` steps on the design's environment from seed ``seed``; then
one more batch of ``samples`` steps is collected with that policy: the normalized, zero-padded
observations, the actions, the standardized GAE advantages and theta. CG's right-hand side is
that batch's policy gradient g, and CG (the seed's Algorithm 1, ``cg_iters`` = 10 iterations,
damping 0.1, no early stop) solves (F + 0.1 I) x = g with F from the FVP unit. The data set is
kept as ``dataset-<design>.npz`` in ``--out`` and reused while the settings stay the same.

``cpp-fig4``: x in float64 (the kernel's float64 path: the exact Hessian-vector product) is the
reference; for every fraction-bit count F in ``bits`` the unit runs with storage
fixed<4+F,4,RND,SAT> (4 integer bits, §IV-B; the design's FVP accumulator and tanh table
2^-10) and MAPE = mean over the parameters of |x_F - x_ref| / |x_ref| in percent (parameters with
x_ref = 0 excluded: the padded inputs' weights, which CG never moves). Where the model refuses the
design's parallelism for a width (its 64-bit sums: W + F + guard(parallelism) <= 62), the unit runs
with parallelism 1 -- the same bits whenever no partial sum saturates, which the experiment checks
at the design's own width (``same_bits_p1`` in fig4.json); widths beyond the model's storage limit
(W <= 31, i.e. F >= 28 with 4 integer bits) are reported as not run. Outputs: ``fig4.csv``,
``fig4.md`` (beside the seed's 0.028 % Humanoid / 0.007 % Ant at 23 bits) and ``fig4.png``
(Fig. 4's plot). ``scale``: the CG direction's power-of-two scaling before the unit (TRPO's
``fvp_scale``) on, off or both.

``cpp-table2``: per design, CG (``cg_iters`` iterations) timed with the unit as (a) the cost model's
FPGA at 200 MHz (Table II's "Model": ``fvp.cost`` at the full sample count; CG's host arithmetic
measured here is added for the CG column), (b) our bit-accurate numpy emulation (``--backend emu``),
(c) the kernel's HLS C++ compiled with g++ and called through ctypes (``--backend csim``; the
build and a first call are not timed), (d) float64 numpy (the kernel's float64 path, BLAS over the
samples) in the role of the seed's 6-thread Keras/Theano double-precision software. The float64
baseline is timed at ``scale_to`` samples (the data set's states repeated: an FVP's time depends on
how many states, not which); emulation and csim on ``samples`` / ``csim_samples`` samples, scaled
linearly to ``scale_to`` (the FVP is one pass over the samples; CG's own arithmetic does not depend
on them). Every timing is warm (one untimed call first), in CPU time, repeated ``--repeats`` times:
the median with its spread; the speed-up is printed as a result only when the medians of the first
and second half of the repeats agree within 5 %, else it says it did not settle. Speed-up = the
float64 CG time / the model's CG time, beside the seed's "Acc." (Keras CG / FPGA CG). Outputs:
``table2.csv``, ``table2.md``.

Parameters (``--param KEY=VALUE``; the defaults fit minutes on 2 cores, the seed's setting is
``--param samples=50000`` (Fig. 4) and ``--param samples=50000 --param csim_samples=50000``
(Table II, hours for the C++ at ~200-1000 samples/s)):

=============  ======================  ===========================================================
key            default                 meaning
=============  ======================  ===========================================================
samples        2000                    data-set samples (and the emulation / float64 timing's)
warmup         2                       TRPO iterations before the data set is collected
seed           0                       the run's seed (environment, policy, sampling)
bits           12-28                   cpp-fig4: fraction bits, 'A-B' or 'a,b,c'
scale          on                      cpp-fig4: the CG direction's scaling: on, off or both
csim_samples   200                     cpp-table2: samples of the compiled C++'s timing (0: skip)
scale_to       50000                   cpp-table2: samples the times are reported for
=============  ======================  ===========================================================
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlhls.core import fileio
from rlhls.core.errors import RlhlsError

from . import RUNS, Experiment, Summary, count, design_ref, option, register_experiment

__all__ = ["collect_dataset", "mape_percent", "runs_fig4", "summary_fig4", "table2_rows", "runs_table2",
           "model_fvp_s", "perf_fvp_s",
           "summary_table2"]

DESIGNS = ("cpp-trpo-humanoid", "cpp-trpo-ant")
INT_BITS = 4
STORAGE_LIMIT = 31  # the FVP model's storage width limit (designs/kernels/fvp.py)
PARAMS: dict[str, dict[str, int | str]] = {
    "cpp-fig4": {"samples": 2000, "warmup": 2, "seed": 0, "bits": "12-28", "scale": "on"},
    "cpp-table2": {"samples": 2000, "warmup": 2, "seed": 0, "csim_samples": 200, "scale_to": 50000},
}


# ----------------------------------------------------------------------------- settings

def _params(opts) -> dict:
    """The experiment's --param settings over its defaults, checked (module docstring)."""
    base: dict[str, Any] = dict(PARAMS[opts.name])  # the settings, parsed (bits: a list)
    for k, v in (opts.params or {}).items():
        if k not in base:
            raise RlhlsError(f"--param {k}: unknown for {opts.name} (known: {', '.join(base)})")
        if isinstance(base[k], int):
            try:
                v = int(str(v).replace("_", ""))
            except ValueError:
                raise RlhlsError(f"--param {k}={v!r}: expected an integer") from None
            low = 0 if k in ("warmup", "seed", "csim_samples") else 1
            if v < low:
                raise RlhlsError(f"--param {k}={v}: expected >= {low}")
        base[k] = v
    if "bits" in base:
        base["bits"] = list(_bits(base["bits"]))
    if "scale" in base and base["scale"] not in ("on", "off", "both"):
        raise RlhlsError(f"--param scale={base['scale']!r}: expected on, off or both")
    return base


def _bits(text) -> tuple:
    if isinstance(text, (list, tuple)):
        return tuple(text)
    try:
        if "-" in str(text):
            a, b = (int(x) for x in str(text).split("-"))
            ends = (a, b) if a <= b else ()  # the range is built only once its ends are checked
        else:
            out = tuple(int(x) for x in str(text).split(","))
            ends = (min(out), max(out)) if out else ()
    except ValueError:
        raise RlhlsError(f"--param bits={text!r}: expected A-B or a,b,c (fraction bits)") from None
    if not ends or ends[0] < 1 or ends[1] > 48:
        raise RlhlsError(f"--param bits={text!r}: expected fraction bits in 1..48")
    return tuple(range(a, b + 1)) if "-" in str(text) else out


def _designs(opts) -> list:
    from rlhls.designs.registry import get_design

    names = opts.design or list(DESIGNS)
    out = []
    for n in names:
        d = get_design(n)
        if d.algorithm != "trpo" or not any(k.name == "fvp" for k in d.kernels):
            raise RlhlsError(f"design '{n}': {opts.name} takes a TRPO design with an fvp unit (cpp-trpo-ant, "
                             "cpp-trpo-humanoid)")
        out.append(d)
    return out


def _start(ctx) -> tuple[dict, list]:
    """The checked --param settings and designs; the experiment folder made and recorded."""
    p, designs = _params(ctx.opts), _designs(ctx.opts)
    settings = {"name": ctx.opts.name, "designs": [d.name for d in designs], "samples": p["samples"],
                "warmup": p["warmup"], "seed": p["seed"]}
    ctx.start(settings, {"params": p})
    ctx.data.update(p=p, designs=designs, t0=time.perf_counter())
    return p, designs


# ----------------------------------------------------------------------------- the data set

def collect_dataset(design, samples: int, warmup: int = 2, seed: int = 0) -> dict:
    """{'theta', 'obs', 'act', 'adv', 'layers', 'g'} of one batch of `samples` steps collected after
    `warmup` TRPO iterations (float64 FVP) on the design's environment (module docstring)."""
    from ..algorithms.trpo import TRPO

    t = TRPO(design, seed=seed, hyperparams={"num_steps": samples, "fvp": "float64",
                                             "value_minibatch": min(64, samples)})
    try:
        for u in range(1, warmup + 1):
            t.train_update(u, warmup + 1)
        b = t.collect(warmup + 1)
        g = t.policy.surrogate_grad(t.theta, b["obs"], b["act"], b["adv"])
        return {"theta": t.theta.copy(), "obs": b["obs"], "act": b["act"], "adv": b["adv"],
                "layers": np.array(t.policy.layers), "g": g}
    finally:
        t.close()


def _dataset(out: Path, design, p: dict, say) -> dict:
    f = out / f"dataset-{design.name}.npz"
    if f.is_file():
        with np.load(f) as z:
            return {k: z[k] for k in z.files}
    say(f"{design.name}: collecting {p['samples']} samples after {p['warmup']} TRPO iteration(s) (seed {p['seed']})")
    data = collect_dataset(design, p["samples"], p["warmup"], p["seed"])
    import io

    buf = io.BytesIO()
    np.savez(buf, **data)
    fileio.atomic_write_bytes(f, buf.getvalue())
    return data


def _hp(design, fvp: str, scale: bool) -> dict:
    from ..algorithms import get_algorithm

    return get_algorithm("trpo").hyperparams(design, {"fvp": fvp, "fvp_scale": scale})


def _cg(unit, data: dict, iters: int, times: dict | None = None):
    """x of CG (``iters`` iterations, no early stop) with the unit's FVP; times: 'cg', 'fvp' seconds."""
    from ..algorithms.trpo import GaussianMLP, conjugate_gradient

    pol = GaussianMLP(data["layers"])
    theta = data["theta"]
    X, theta_net, inv_var = data["obs"], theta[:pol.P], np.exp(-2.0 * pol.log_std(theta))
    spent = [0.0]

    def fvp(v):
        t0 = time.process_time()
        z = unit(X, theta_net, v, inv_var)
        spent[0] += time.process_time() - t0
        return z

    t0 = time.process_time()  # CPU time: what the machine's other work does not inflate
    x, _, _ = conjugate_gradient(fvp, data["g"], iters, 0.0)
    if times is not None:
        times["cg"], times["fvp"] = time.process_time() - t0, spent[0]
    return x


def timed_cg(unit, data: dict, iters: int, repeats: int) -> dict:
    """CG timed warm (one untimed call first: compiles, caches), `repeats` times in CPU time: the
    median call's {'cg', 'fvp'} seconds, the spread of CG ('cg_min', 'cg_max') and whether the
    medians of the first and second half of the repeats agree within 5 % ('settled'; None under
    2 repeats)."""
    _cg(unit, data, iters)
    calls = []
    for _ in range(max(1, repeats)):
        t: dict[str, float] = {}
        _cg(unit, data, iters, t)
        calls.append(t)
    from ..phases import settled

    med = sorted(calls, key=lambda t: t["cg"])[(len(calls) - 1) // 2]
    return {**med, "cg_min": min(t["cg"] for t in calls), "cg_max": max(t["cg"] for t in calls),
            "settled": settled([t["cg"] for t in calls])}


def mape_percent(x, ref) -> float:
    """Mean absolute percentage error of x against ref over ref's nonzero entries."""
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    nz = ref != 0
    return float(100.0 * np.mean(np.abs(x[nz] - ref[nz]) / np.abs(ref[nz])))


# ----------------------------------------------------------------------------- Fig. 4

def _fixed_unit(design, data: dict, bits: int, scale: bool, par1: bool = False):
    """The FVP unit at fixed<4+bits,4,RND,SAT> (or None where the model cannot run that width)."""
    from ..algorithms.trpo import FvpUnit

    w = INT_BITS + bits
    if w > STORAGE_LIMIT:
        return None, f"storage fixed<{w},{INT_BITS}> exceeds the model's W <= {STORAGE_LIMIT}"
    over = {"storage": f"fixed<{w},{INT_BITS},RND,SAT>"}
    hp = _hp(design, "fixed", scale)
    layers = [int(n) for n in data["layers"]]
    n = data["obs"].shape[0]
    if not par1:
        try:
            return FvpUnit(design, None, layers, n, hp, over), ""
        except RlhlsError:
            pass
    try:
        return FvpUnit(design, None, layers, n, hp, {**over, "parallelism": [1] * len(layers)}), "parallelism 1"
    except RlhlsError as e:
        return None, str(e)


def _fig4_one(job: dict) -> dict:
    """The row of one design, scaling and width (`job['bits']` fraction bits), kept in `job['save']`
    as a one-row list for a resumed sweep."""
    from rlhls.designs.registry import get_design

    from ..algorithms.trpo import FvpUnit
    from ..backends import EmuBackend

    design = get_design(job["design"])
    with np.load(job["dataset"]) as z:
        data = {k: z[k] for k in z.files}
    iters = _hp(design, "float64", True)["cg_iters"]
    layers = [int(n) for n in data["layers"]]
    ref = _cg(FvpUnit(design, None, layers, data["obs"].shape[0], _hp(design, "float64", True)), data, iters)
    bits = job["bits"]
    unit, note = _fixed_unit(design, data, bits, job["scale"])
    row = {"design": design.name, "scale": "on" if job["scale"] else "off", "fraction_bits": bits,
           "width": INT_BITS + bits, "mape_percent": float("nan"), "max_rel_error": float("nan"),
           "seconds": 0.0, "note": note}
    if unit is not None:
        unit.backend = EmuBackend()
        t0 = time.perf_counter()
        x = _cg(unit, data, iters)
        nz = ref != 0
        row.update(mape_percent=mape_percent(x, ref), seconds=time.perf_counter() - t0,
                   max_rel_error=float(np.max(np.abs(x[nz] - ref[nz])) / np.max(np.abs(ref[nz]))))
    fileio.write_json(Path(job["save"]), [row])
    return row


def _same_bits_p1(design, data: dict, scale: bool) -> bool:
    """At the design's own width the unit with parallelism 1 gives the same FVP as the design's blocking."""
    from ..backends import EmuBackend

    bits = _design_frac_bits(design)
    a, _ = _fixed_unit(design, data, bits, scale)
    b, _ = _fixed_unit(design, data, bits, scale, par1=True)
    if a is None or b is None:
        return False
    a.backend = b.backend = EmuBackend()
    pol_P = int(sum(x * y + y for x, y in zip(data["layers"][:-1], data["layers"][1:])))
    th, X = data["theta"], data["obs"]
    iv = np.exp(-2.0 * th[pol_P:])
    return bool(np.array_equal(a(X, th[:pol_P], data["g"], iv), b(X, th[:pol_P], data["g"], iv)))


def _fvp_acc(design) -> str:
    return next(k for k in design.kernels if k.name == "fvp").acc


def _design_frac_bits(design) -> int:
    from rlhls.designs.formats import FixedFormat, parse_format_as

    spec = next(k for k in design.kernels if k.name == "fvp")
    return parse_format_as(spec.storage, FixedFormat).frac_bits


def runs_fig4(ctx) -> list:
    """Fig. 4's parts: every (design, scaling, width) is one run on the engine that recomputes the
    float64 reference and keeps its row in ``<out>/parts/``: a part found there is not run again, so
    an interrupted sweep (the seed's 50,000 samples take hours) continues where it stopped."""
    p, designs = _start(ctx)
    out = ctx.out
    scales = {"on": [True], "off": [False], "both": [True, False]}[p["scale"]]
    runs, checks = [], {}
    fileio.make_dirs(out / "parts")
    for d in designs:
        checks[d.name] = _same_bits_p1(d, _dataset(out, d, p, ctx.say), scales[0])
    ctx.data["checks"] = checks
    for s in scales:  # width by width, every design at each: an interrupted sweep has whole columns
        for b in p["bits"]:
            for d in designs:
                part = out / "parts" / f"{d.name}-{'on' if s else 'off'}-F{b}.json"
                runs.append(ctx.run(part.stem, finished=part.is_file, job={
                    "design": design_ref(d), "dataset": str(out / f"dataset-{d.name}.npz"), "bits": b, "scale": s,
                    "save": str(part)}))
    ctx.say(f"{len(runs)} part(s): CG with the fixed-point unit, one width each")
    ctx.data["parts"] = [r.kwargs["job"]["save"] for r in runs]
    return runs


def summary_fig4(ctx, outcomes) -> Summary:
    out, designs, p = ctx.out, ctx.data["designs"], ctx.data["p"]
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise RlhlsError(f"cpp-fig4: {len(bad)} part(s) failed (first {bad[0].id}: {bad[0].error}); the others are "
                         f"kept in {out / 'parts'}: --resume runs the rest")
    rows = [r for part in ctx.data["parts"] for r in _part_rows(part)]
    order = [d.name for d in designs]
    rows.sort(key=lambda r: (order.index(r["design"]), r["scale"] != "on", r["fraction_bits"]))
    _fig4_outputs(out, rows, designs, p, ctx.data["checks"])
    lines = [f"{r['design']:<18} scaling {r['scale']:<3} F={r['fraction_bits']:>2}  MAPE "
             + ("-" if math.isnan(r["mape_percent"]) else f"{r['mape_percent']:.4g} %")
             for r in rows if r["fraction_bits"] in (12, 16, 20, 23, 24, 27)]
    return Summary(rows, lines, [out / "fig4.md", out / "fig4.png"])


def _part_rows(path) -> list:
    """The rows a finished part saved (a list of row objects), read as a file someone may have edited."""
    try:
        rows = fileio.read_json(path)
    except (OSError, ValueError) as e:
        raise RlhlsError(f"'{path}' cannot be read ({e}): a damaged experiment folder") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RlhlsError(f"'{path}' is not a list of rows (a damaged experiment folder)")
    return rows


def _fig4_outputs(out: Path, rows: list, designs, p: dict, checks: dict) -> None:
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table, save_png

    cols = ["design", "scale", "fraction_bits", "width", "mape_percent", "max_rel_error", "seconds", "note"]
    atomic_write_text(out / "fig4.csv", csv_text(rows, cols))
    seed = {d.name: d.seed_figures.get("mape_percent") for d in designs}
    keys = sorted({(r["design"], r["scale"]) for r in rows},
                  key=lambda k: (DESIGNS.index(k[0]) if k[0] in DESIGNS else 9, k[1] != "on"))
    table: dict[int, dict[tuple[str, str], dict]] = {}
    for r in rows:
        table.setdefault(r["fraction_bits"], {})[(r["design"], r["scale"])] = r
    head = ["fraction bits", "width"] + [f"{d.split('cpp-trpo-')[-1]} MAPE % (scaling {s})" for d, s in keys]
    body = []
    for b in sorted(table):
        cells = []
        for k in keys:
            r = table[b].get(k)
            cells.append("—" if r is None or math.isnan(r["mape_percent"]) else
                         f"{r['mape_percent']:.4g}" + (" ¹" if r["note"] else ""))
        body.append([str(b), str(INT_BITS + b)] + cells)
    at23 = [f"{d.split('cpp-trpo-')[-1]}: ours " + ", ".join(
        f"{table[23][(d, s)]['mape_percent']:.3g} % (scaling {s})" for dd, s in keys if dd == d and 23 in table
        and (d, s) in table[23] and not math.isnan(table[23][(d, s)]["mape_percent"]))
        + f", seed's {seed[d]} %" for d in dict.fromkeys(k[0] for k in keys)]
    md = [
        "# CPP Fig. 4: MAPE of the CG result against float64 by fraction bits", "",
        f"Data set: {p['samples']} samples per design collected with the policy after {p['warmup']} TRPO "
        f"iteration(s) (seed {p['seed']}); CG 10 iterations, damping 0.1; storage fixed<4+F,4,RND,SAT>, "
        f"accumulator {', '.join(sorted({_fvp_acc(d) for d in designs}))}, tanh table 2^-10. MAPE over the "
        "parameters whose float64 CG "
        "result is nonzero.", "",
        markdown_table(head, body),
        "¹ run with parallelism 1 (the model refuses the design's blocking at this width; the same bits when "
        "nothing saturates: " + ", ".join(f"{n} {'checked' if ok else 'NOT the same'} at its own width"
                                         for n, ok in checks.items()) + "). — : not run "
        f"(storage wider than the model's {STORAGE_LIMIT} bits).", "",
        "At the seed's 23 fraction bits: " + "; ".join(at23) + ".", "",
        "![Fig. 4](fig4.png)", ""]
    atomic_write_text(out / "fig4.md", "\n".join(md))

    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    colors = {"cpp-trpo-humanoid": "tab:blue", "cpp-trpo-ant": "tab:orange"}
    for d, s in keys:
        pts = [(r["fraction_bits"], r["mape_percent"]) for r in rows if r["design"] == d and r["scale"] == s
               and not math.isnan(r["mape_percent"]) and r["mape_percent"] > 0]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, y, "o-" if s == "on" else "s--", color=colors.get(d, "tab:green"), ms=4,
                    label=f"{d.split('cpp-trpo-')[-1]} (ours{', unscaled' if s == 'off' else ''})")
        if seed.get(d) is not None and s == keys[0][1]:
            ax.plot([23], [seed[d]], "*", color=colors.get(d, "tab:green"), ms=12, mec="k",
                    label=f"{d.split('cpp-trpo-')[-1]}, seed's 23-bit figure")
    ax.axvline(23, color="0.6", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("fraction bits (4 integer bits)")
    ax.set_ylabel("MAPE of the CG result (%)")
    ax.set_title("CG result vs float64 (CPP Fig. 4)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, out / "fig4.png")
    fileio.atomic_write_text(out / "fig4.json", json.dumps({"rows": rows, "same_bits_p1": checks}, indent=1,
                                                           default=str) + "\n")


# ----------------------------------------------------------------------------- Table II

def model_fvp_s(design, samples: int, iterations: int) -> float:
    """Table II's "Model": the FVP unit's cycle model at the design's parallelism, `iterations` FVPs over
    `samples` samples (seconds)."""
    from rlhls.designs.kernels import get_kernel

    k = get_kernel("fvp")
    spec = next(s for s in design.kernels if s.name == "fvp")
    return k.cost(k.resolve({**k.spec_params(spec), "samples": samples, "iterations": iterations}))["latency_us"] * 1e-6


def perf_fvp_s(design) -> float:
    """The FVP time of one TRPO iteration in the whole-run model (host/perf.py ``schedule``): the graph's
    FVP nodes at their profile rows on the PL (the rest on the PS), their node time in one execution."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.partition.profile import device_links, profile_design

    from ..perf import _ps_choice, schedule

    dev = get_device(design.device)
    graph = build_graph(design)
    choice = _ps_choice(graph, dev)
    for r in profile_design(design, dev, graph=graph):
        if r.unit == "PL" and graph.node(r.node).phase in ("fvp_fwd", "fvp_bwd"):
            choice[r.node] = ("PL", r.latency_us)  # one point per FVP node: the design's parallelism
    return schedule(graph, choice, device_links(dev))["phase_us"].get("fvp", 0.0) * 1e-6


def table2_rows(out: Path, designs, p: dict, repeats: int = 3, say=lambda m: None) -> list[dict]:
    from ..algorithms.trpo import FvpUnit
    from ..backends import EmuBackend, get_backend
    from ..perf import model_error

    rows = []
    csim = get_backend("csim") if p["csim_samples"] else None
    for d in designs:
        data = _dataset(out, d, p, say)
        hp = _hp(d, "fixed", True)
        iters = hp["cg_iters"]
        layers = [int(n) for n in data["layers"]]
        model_s = model_fvp_s(d, p["scale_to"], iters)
        # the whole-run model's CG FVPs per TRPO iteration (its graph: the design's rollout, cg_iters FVPs;
        # the line search's one more is the trainer's node_runs, not CG's)
        perf_s = perf_fvp_s(d) * p["scale_to"] / int(hp["num_envs"] * hp["num_steps"])
        res = {}
        # float64 (the baseline) at full size: the data set's states repeated to scale_to rows (an FVP's
        # time depends on how many, not which); the bit-accurate emulation and csim on a part, scaled
        for name, n, fvp_mode in (("float64", p["scale_to"], "float64"), ("emu", p["samples"], "fixed"),
                                  ("csim", p["csim_samples"], "fixed")):
            if not n or (name == "csim" and csim is None):
                continue
            obs = data["obs"] if name != "float64" else np.resize(data["obs"], (n, data["obs"].shape[1]))
            n = min(n, obs.shape[0])
            sub = {**data, "obs": obs[:n]}
            unit = FvpUnit(d, EmuBackend() if name != "csim" else csim, layers, n, {**hp, "fvp": fvp_mode})
            if name == "csim":
                say(f"{d.name}: compiling the FVP unit's C++ for {n} samples (timed_cg's warm call, not timed)")
            t = timed_cg(unit, sub, iters, repeats)
            f = p["scale_to"] / n
            res[name] = {"samples": n, "cg_s": (t["cg"] - t["fvp"]) + t["fvp"] * f, "fvp_s": t["fvp"] * f,
                         "host_cg_s": t["cg"] - t["fvp"], "spread": (t["cg_min"] - t["fvp"]) + t["fvp"] * f,
                         "spread_max": (t["cg_max"] - t["fvp"]) + t["fvp"] * f, "settled": t["settled"]}
            say(f"{d.name}: {name} CG {res[name]['cg_s']:.3g} s (FVP {res[name]['fvp_s']:.3g} s) for "
                f"{p['scale_to']} samples (measured on {n})")
        host = res.get("float64", res.get("emu", {})).get("host_cg_s", 0.0)
        seed = d.seed_figures.get("table_ii", {})
        row = {"design": d.name, "samples": p["scale_to"], "model_fvp_s": model_s, "perf_fvp_s": perf_s,
               "model_cg_s": model_s + host,
               "seed_model_s": seed.get("model_s"), "seed_cg_fpga_s": seed.get("cg_fpga_s"),
               "seed_fvp_fpga_s": seed.get("fvp_fpga_s"), "seed_cg_keras_s": seed.get("cg_keras_s"),
               "seed_fvp_keras_s": seed.get("fvp_keras_s"), "seed_speedup": seed.get("speedup")}
        for name in ("emu", "csim", "float64"):
            r = res.get(name)
            row[f"{name}_cg_s"] = r["cg_s"] if r else float("nan")
            row[f"{name}_fvp_s"] = r["fvp_s"] if r else float("nan")
            row[f"{name}_measured_samples"] = r["samples"] if r else 0
            row[f"{name}_cg_min_s"] = r["spread"] if r else float("nan")
            row[f"{name}_cg_max_s"] = r["spread_max"] if r else float("nan")
        # the headline settles when the float64 baseline's two halves of the repeats agree within 5 %
        row["settled"] = (res.get("float64") or {}).get("settled")
        row["speedup_model_vs_float64"] = row["float64_cg_s"] / row["model_cg_s"]
        # the band: the FVP unit's cycle model at -/+ the PL latency model's held-out error (rlhls qor); the
        # 200 MHz clock is the seed's, nothing else of the model is assumed
        err, why = model_error().get("PL", (0.0, "no PL latency-model error known"))
        row["band_low"] = row["float64_cg_s"] / (model_s * (1 + err) + host)
        row["band_high"] = row["float64_cg_s"] / (model_s * (1 - err) + host)
        row["band_source"] = why
        row["emu_vs_float64"] = row["emu_cg_s"] / row["float64_cg_s"]
        rows.append(row)
    return rows


def _table2_outputs(out: Path, rows: list, p: dict) -> None:
    from rlhls.core.fileio import atomic_write_text

    from ..figures import csv_text, markdown_table

    atomic_write_text(out / "table2.csv", csv_text(rows, list(rows[0])))

    def cg(r, name):
        c, f = r[f"{name}_cg_s"], r[f"{name}_fvp_s"]
        return "—" if math.isnan(c) else f"{c:.4g} s ({f:.4g} s)"

    body = [[r["design"].split("cpp-trpo-")[-1], f"{r['model_fvp_s']:.4g} s", f"{r['perf_fvp_s']:.4g} s",
             f"{r['seed_model_s']} s",
             cg(r, "emu"), cg(r, "csim"), cg(r, "float64"),
             f"{r['seed_cg_fpga_s']} s ({r['seed_fvp_fpga_s']} s)",
             f"{r['seed_cg_keras_s']} s ({r['seed_fvp_keras_s']} s)",
             f"{r['speedup_model_vs_float64']:.2f} ({r['band_low']:.2f}-{r['band_high']:.2f})",
             f"{r['seed_speedup']}"] for r in rows]
    md = ["# CPP Table II: CG (FVP) time per TRPO iteration", "",
          f"{p['scale_to']} samples, 10 CG iterations. Model = the FVP unit's cycle model at 200 MHz "
          "(Table II's \"Model\"); emu = our bit-accurate numpy emulation of the unit, csim = its HLS C++ "
          "compiled with g++ (ctypes), float64 = the unit's float64 path in numpy (the role of the seed's "
          "double-precision Keras/Theano): CG time with the FVP time in brackets, measured on "
          + ", ".join(f"{r['design'].split('cpp-trpo-')[-1]} {r['emu_measured_samples']} (csim "
                      f"{r['csim_measured_samples']})" for r in rows)
          + f" samples and scaled to {p['scale_to']} (float64: at {p['scale_to']} samples, the data set's states "
          "repeated); warm (one untimed call first), CPU time, the median of the repeats (this machine). "
          "Speed-up = float64 CG / "
          "(model FVP + our CG host arithmetic), beside the seed's Acc. (Keras CG / FPGA CG); in brackets its band: "
          "the model FVP at -/+ the PL latency model's held-out error (" + (rows[0]["band_source"] if rows else "")
          + ").", "",
          markdown_table(["benchmark", "model FVP", "whole-run model FVP (rlhls perf)", "seed model", "CG (FVP) emu",
                          "CG (FVP) csim", "CG (FVP) float64 numpy", "seed CG (FVP) FPGA", "seed CG (FVP) Keras",
                          "speed-up (model vs float64) (band)", "seed Acc."], body)]
    atomic_write_text(out / "table2.md", "\n".join(md))


def runs_table2(ctx) -> list:
    """No runs: the timings are measured one after another in this process (summary_table2)."""
    _start(ctx)
    return []


def _headline(r: dict) -> str:
    """The speed-up, printed as a result only when the baseline's timing settled (module docstring)."""
    s = f"{r['speedup_model_vs_float64']:.2f}"
    spread = (f"{r['float64_cg_min_s'] / r['model_cg_s']:.2f}-{r['float64_cg_max_s'] / r['model_cg_s']:.2f}")
    if r.get("settled"):
        return (f"speed-up {s} ({spread}; band {r['band_low']:.2f}-{r['band_high']:.2f} over the latency model's "
                f"held-out error; seed {r['seed_speedup']})")
    why = "one repeat" if r.get("settled") is None else "the two halves of the repeats differ by more than 5 %"
    return f"speed-up not settled ({why}: {s}, {spread}; --repeats more on a quieter machine)"


def summary_table2(ctx, outcomes) -> Summary:
    out, p = ctx.out, ctx.data["p"]
    rows = table2_rows(out, ctx.data["designs"], p, repeats=ctx.opts.repeats, say=ctx.say)
    _table2_outputs(out, rows, p)
    lines = [f"{r['design']:<18} model FVP {r['model_fvp_s']:.4g} s (seed {r['seed_model_s']} s)  CG emu "
             f"{r['emu_cg_s']:.4g} s  csim {r['csim_cg_s']:.4g} s  float64 {r['float64_cg_s']:.4g} s "
             f"({r['float64_cg_min_s']:.4g}-{r['float64_cg_max_s']:.4g})  " + _headline(r) for r in rows]
    return Summary(rows, lines, [out / "table2.md"])


_DESIGN = option("--design", action="append", default=None,
                 help="a TRPO design with an fvp unit (repeatable; default cpp-trpo-humanoid and cpp-trpo-ant)")
register_experiment(Experiment(
    "cpp-fig4", "CPP Fig. 4: MAPE of the fixed-point CG result against float64 by fraction bits (Humanoid, Ant)",
    runs=runs_fig4, run=_fig4_one, summarize=summary_fig4, options=(_DESIGN, *RUNS), params=PARAMS["cpp-fig4"]))
register_experiment(Experiment(
    "cpp-table2", "CPP Table II: CG and FVP time (FPGA model, emulation, csim, float64 numpy) and the speed-up",
    runs=runs_table2, summarize=summary_table2, params=PARAMS["cpp-table2"],
    options=(_DESIGN, option("--repeats", type=count, default=6,
                             help="timing repeats, warm and in CPU time: the median, its spread, settled when the "
                                  "medians of the first and second half agree within 5 %% (default 6)"))))
