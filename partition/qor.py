"""The reference corpus (QoR): every cost model beside published measurements it was not fitted to.

The corpus is package data, ``rlhls/designs/qor/{aie,pl,ps}.csv`` (source folder ``designs/qor/``), one row
per published measurement; ``docs/guide/qor.md`` describes every column. Each row names the document it
comes from (``document``) and the exact file and table (``source``: a document and its version, or a
repository file at a commit).

How a row is predicted (the kernels' cost models, ``designs/kernels/cost.py``, on the catalogue devices):

AIE  as the benchmark graph runs: each of the casc_len x ssr kernels takes an M / ssr by K / casc_len share
     of A and the matching rows of B, each port on its own PLIO. Its compute is ``aie_matmul``'s
     ``compute_us`` on one tile (catalogue device of the row's generation, AIE: vck190, AIE-ML: vek280, at
     the benchmark's AIE clock; a matrix-vector row is ``n`` frames of one GEMV), its window fill and
     drain times are at the catalogue's PLIO rate (at the benchmark's PLIO clock). The benchmark's
     latency is aiesimulator's first input (port A) to first output of a graph run back to back at steady
     state: ``steady_latency`` of those terms, plus the PL<->AIE link latency twice (no launch overhead).
     ``int16`` is a 16-bit fixed format, ``float`` fp32. Rows with the tiling widgets and data types no
     kernel of ours computes have no prediction.
PL   hls4ml's CI models: ``pl_matmul(M, K, N, fixed<16,6>, pf=K x N / reuse factor)`` and, for an
     activation, ``pl_elementwise(M x N, ops, fixed<16,6>, pf=N)``, both with ``stream_io`` for io_stream
     models only (ops: ``ACT_FLOPS`` of ReLU for ReLU,
     LeakyReLU and PReLU, of Sigmoid for Sigmoid and ELU), on the UltraScale+ PL of the catalogue (zcu106
     figures: DSP48E2, as the baselines' VU13P) at the baseline's clock. Cycles against the csynth
     worst-case latency (the launch overhead is the host's; no csynth latency holds it); DSP, LUT and FF
     summed as the profile sums units that run in turn; BRAM_18K / 2 against ``bram36``. A measured 0
     (a combinational top, no DSP) has no relative error and is left out of that metric. The csynth
     fixtures match no kernel of ours: recorded, not predicted.
PS   ``ps_cost(2MKN, device, nbytes=4(MK + KN + MN))`` on the catalogue PS of the core (Cortex-A53:
     zcu106, Cortex-A72: vek280) at the row's clock; the measured latency is 2MKN / (flops per clock x
     clock). AArch32 rows have no prediction (the PS runs AArch64).

Split (fixed): a row is held out when the first 8 hex digits of sha256(its configuration key) are odd,
else it calibrates. The key is the row's unit and configuration without the tool release, so a
configuration measured by several releases is on one side only; no row is on both.

Calibration: the model's free constants (``CONSTANTS``) are fitted on the calibration rows only, one group
per unit and metric, by an exhaustive grid search for the smallest median |error| (its mean breaks ties),
searched on the model's own decomposition (latency terms, or a resource's slopes in each constant), then
every reported prediction is the cost model itself called with those constants. Errors are reported on
the held-out rows, for the constants of the code (``assumed``) and for the fitted ones (``calibrated``).
Nothing here changes the catalogue or the cost models; the code carries the fits it adopted with their
sources (``cost.FITTED``, the catalogue's PL<->AIE link latency), a constant it keeps names why (``kept``).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, overload

import numpy as np

from rlhls.core.errors import RlhlsError

__all__ = ["CorpusRow", "Qor", "load_corpus", "split_of", "config_key", "no_model", "predict", "assumed_constants",
           "qor", "calibrated_constants", "qor_figure", "write_qor", "check_qor_out", "UNITS", "METRICS", "CONSTANTS",
           "CORPUS_FILES"]

UNITS = ("AIE", "PL", "PS")
METRICS = ("latency", "dsp", "lut", "ff", "bram", "power")
CORPUS_FILES = {"AIE": "aie.csv", "PL": "pl.csv", "PS": "ps.csv"}
MAX_CSV_BYTES = 16 * 2 ** 20

# columns every row of a file must have (a value may be empty where the file's docs say so)
COLUMNS = {
    "AIE": ("id", "release", "element", "variant", "part", "aie_clock_mhz", "plio_bits", "plio_clock_mhz", "data_a",
            "data_b", "data_out", "m", "k", "n", "tiling", "casc_len", "ssr", "layout", "num_aie", "latency_ns",
            "throughput_msa_s", "dynamic_power_w", "document", "source"),
    "PL": ("id", "origin", "kernel", "definition", "activation", "tool", "tool_version", "part", "clock_ns", "m", "k",
           "n", "precision", "reuse_factor", "strategy", "io_type", "latency_cycles", "ii", "dsp", "lut", "ff",
           "bram18k", "uram", "est_clock_ns", "document", "source"),
    "PS": ("id", "core", "soc", "isa", "clock_mhz", "m", "k", "n", "threads", "precision", "flops_per_clock",
           "compiler", "code", "document", "source"),
}
# the columns of a row's configuration (its split key): everything but the release, the figures and the citation
KEY_COLUMNS = {
    "AIE": ("element", "variant", "data_a", "data_b", "data_out", "m", "k", "n", "tiling", "casc_len", "ssr"),
    "PL": ("origin", "kernel", "definition", "activation", "precision", "reuse_factor", "strategy", "io_type", "part"),
    "PS": ("core", "soc", "isa", "m", "k", "n", "threads", "precision"),
}
AIE_FORMATS = {"int16": "fixed<16,8>", "float": "fp32", "bfloat16": "bf16"}
PL_FORMAT = "fixed<16,6>"
# hls4ml activation -> the ACT_FLOPS kind whose operator count it takes
ACT_KIND = {"ReLU": "ReLU", "LeakyReLU": "ReLU", "PReLU": "ReLU", "Sigmoid": "Sigmoid", "ELU": "Sigmoid"}
PS_DEVICE = {"Cortex-A53": "zcu106", "Cortex-A72": "vek280"}


# ---------------------------------------------------------------------------------------------
# The constants a fit may move
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constant:
    name: str
    unit: str  # the unit of the corpus that fits it
    metric: str
    where: str  # where the code keeps it
    grid: tuple  # (start, stop, step) of the search
    integer: bool = False
    kept: str = ""  # why the code keeps its own value rather than the fitted one ('' : the code uses the fit)


_KEPT_LUT = ("kept: the hls4ml tops have no AXI control interface (the kernels' AXI-lite and m_axi part) and the "
             "fit's held-out error stays above 40 %")
CONSTANTS = (
    Constant("AIE_KERNEL_EFFICIENCY", "AIE", "latency", "designs/kernels/cost.py AIE_KERNEL_EFFICIENCY",
             (0.05, 1.0, 0.01)),
    Constant("PLIO_LATENCY_US", "AIE", "latency", "designs/devices.py _versal_links: PL<->AIE link latency_us "
             "(the AIE model adds it twice)", (0.0, 1.5, 0.005)),
    Constant("MUL_DEPTH_FIXED", "PL", "latency", "designs/kernels/cost.py MUL_DEPTH['fixed']", (0, 6, 1), True),
    Constant("ADD_DEPTH_FIXED", "PL", "latency", "designs/kernels/cost.py ADD_DEPTH['fixed']", (0, 2, 0.25)),
    Constant("IO_DEPTH", "PL", "latency", "designs/kernels/cost.py IO_DEPTH", (0, 4, 1), True),
    Constant("DSP_PER_MAC_FIXED18", "PL", "dsp", "designs/devices.py _ultrascale_pl_perf dsp_per_mac_fixed18",
             (0.5, 1.5, 0.01), kept="kept: a data-sheet figure (one DSP48E2 per 27x18 product, UG579); the "
                                    "fit's 0.9 is HLS binding some constant products to LUTs"),
    Constant("LUT_BASE", "PL", "lut", "designs/kernels/cost.py LUT_BASE", (0, 3000, 25), kept=_KEPT_LUT),
    Constant("LUT_PER_ACC_BIT", "PL", "lut", "designs/kernels/cost.py LUT_PER_ACC_BIT", (0.0, 8.0, 0.125),
             kept=_KEPT_LUT),
    Constant("EW_LUT_PER_BIT", "PL", "lut", "designs/kernels/cost.py EW_LUT_PER_BIT", (0.0, 16.0, 0.125),
             kept=_KEPT_LUT),
    Constant("FF_BASE", "PL", "ff", "designs/kernels/cost.py FF_BASE", (0, 3000, 25), kept=_KEPT_LUT),
    Constant("FF_PER_ACC_BIT", "PL", "ff", "designs/kernels/cost.py FF_PER_ACC_BIT", (0.0, 12.0, 0.125),
             kept=_KEPT_LUT),
    Constant("EW_FF_PER_BIT", "PL", "ff", "designs/kernels/cost.py EW_FF_PER_BIT", (0.0, 16.0, 0.125),
             kept=_KEPT_LUT),
    Constant("SUSTAINED_FRACTION", "PS", "latency", "designs/devices.py SUSTAINED_FRACTION", (0.05, 1.0, 0.005),
             kept="kept: the corpus measures hand-written NEON GEMM kernels; the catalogue's fraction is for "
                  "compiled training code (scalar loops of small layers)"),
)
_BY_NAME = {c.name: c for c in CONSTANTS}
# cost.py module constants: name -> (attribute, dict key or None)
_COST_ATTR = {"AIE_KERNEL_EFFICIENCY": ("AIE_KERNEL_EFFICIENCY", None), "MUL_DEPTH_FIXED": ("MUL_DEPTH", "fixed"),
              "ADD_DEPTH_FIXED": ("ADD_DEPTH", "fixed"), "IO_DEPTH": ("IO_DEPTH", None),
              "LUT_BASE": ("LUT_BASE", None), "LUT_PER_ACC_BIT": ("LUT_PER_ACC_BIT", None),
              "EW_LUT_PER_BIT": ("EW_LUT_PER_BIT", None), "FF_BASE": ("FF_BASE", None),
              "FF_PER_ACC_BIT": ("FF_PER_ACC_BIT", None), "EW_FF_PER_BIT": ("EW_FF_PER_BIT", None)}


def assumed_constants() -> dict:
    """``{name: value}`` of every constant as the code has it now."""
    from rlhls.designs import devices
    from rlhls.designs.kernels import cost

    out = {}
    for name, (attr, key) in _COST_ATTR.items():
        v = getattr(cost, attr)
        out[name] = float(v[key] if key else v)
    out["PLIO_LATENCY_US"] = devices.get_device("vek280").link("PL", "AIE").latency_us.value
    out["DSP_PER_MAC_FIXED18"] = devices.get_device("zcu106").units["PL"].perf["dsp_per_mac_fixed18"].value
    out["SUSTAINED_FRACTION"] = float(devices.SUSTAINED_FRACTION)
    return out


def _assumed_source(name: str) -> str:
    from rlhls.designs.devices import get_device

    if name == "PLIO_LATENCY_US":
        return get_device("vek280").link("PL", "AIE").latency_us.source
    if name == "DSP_PER_MAC_FIXED18":
        return get_device("zcu106").units["PL"].perf["dsp_per_mac_fixed18"].source
    if name == "SUSTAINED_FRACTION":
        return get_device("zcu106").units["PS"].perf["gflops_fp32_sustained"].source
    from rlhls.designs.kernels.cost import FITTED

    return FITTED.get(name) or f"assumed: {_BY_NAME[name].where} (see the module docstring there)"


def _like(old, v):
    """``v`` as an int where the code's constant is one and ``v`` is whole."""
    return int(v) if isinstance(old, int) and float(v).is_integer() else float(v)


@contextlib.contextmanager
def _cost_constants(values: dict):
    """cost.py's module constants set to ``values`` (names of _COST_ATTR) for the block, then restored."""
    from rlhls.designs.kernels import cost

    saved = {}
    try:
        for name, v in values.items():
            if name not in _COST_ATTR:
                continue
            attr, key = _COST_ATTR[name]
            if attr not in saved:
                saved[attr] = getattr(cost, attr)
            if key is None:
                setattr(cost, attr, _like(saved[attr], v))
            else:
                d = dict(getattr(cost, attr))
                d[key] = _like(d[key], v)
                setattr(cost, attr, d)
        yield
    finally:
        for attr, v in saved.items():
            setattr(cost, attr, v)


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusRow:
    """One published measurement: its unit, configuration key and split, citation, the CSV's fields
    (strings) and the measured figures (``{metric: value}``; latency in ns for AIE and PS, in cycles for PL)."""

    id: str
    unit: str
    key: str
    split: str
    document: str
    source: str
    fields: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)
    where: str = ""


def config_key(unit: str, fields: dict) -> str:
    return unit + "|" + "|".join(f"{c}={fields.get(c, '').strip()}" for c in KEY_COLUMNS[unit])


def split_of(key: str) -> str:
    """'heldout' when the first 8 hex digits of sha256(key) are odd, else 'calibration' (fixed, documented)."""
    return "heldout" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 2 else "calibration"


def _corpus_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("rlhls.designs") / "qor"))


@overload
def _num(text: str, where: str, col: str, *, empty_ok: Literal[False], positive: bool = False) -> float: ...
@overload
def _num(text: str, where: str, col: str, *, empty_ok: bool = True, positive: bool = False) -> float | None: ...
def _num(text: str, where: str, col: str, *, empty_ok: bool = True, positive: bool = False) -> float | None:
    t = (text or "").strip()
    if not t:
        if empty_ok:
            return None
        raise RlhlsError(f"{where}: column '{col}' is empty; expected a number")
    try:
        v = float(t)
    except ValueError:
        raise RlhlsError(f"{where}: column '{col}' = '{t}' is not a number") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise RlhlsError(f"{where}: column '{col}' = '{t}' must be a finite number {'>' if positive else '>='} 0")
    return v


def _read_text(path: Path) -> str:
    try:
        if not path.is_file():
            raise RlhlsError(f"{path}: not a regular file; expected a corpus CSV")
        if path.stat().st_size > MAX_CSV_BYTES:
            raise RlhlsError(f"{path}: larger than {MAX_CSV_BYTES // 2 ** 20} MiB; expected a corpus CSV")
        data = path.read_bytes()
    except OSError as e:
        raise RlhlsError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RlhlsError(f"{path}: not UTF-8 text; expected a corpus CSV") from None


def _measured(unit: str, f: dict, where: str) -> dict:
    out = {}
    if unit == "AIE":
        for metric, col in (("latency", "latency_ns"), ("power", "dynamic_power_w")):
            v = _num(f[col], where, col)
            if v:
                out[metric] = v
        for col in ("aie_clock_mhz", "plio_clock_mhz", "plio_bits", "m", "k", "n", "casc_len", "ssr"):
            _num(f[col], where, col, empty_ok=False, positive=True)
    elif unit == "PL":
        for metric, col in (("latency", "latency_cycles"), ("dsp", "dsp"), ("lut", "lut"), ("ff", "ff"),
                            ("bram", "bram18k")):
            v = _num(f[col], where, col)
            if v:  # 0 (a combinational top, no DSP) has no relative error
                out[metric] = v / 2 if metric == "bram" else v
        _num(f["clock_ns"], where, "clock_ns", empty_ok=False, positive=True)
        if f["origin"] == "hls4ml CI baseline":
            for col in ("m", "k", "n", "reuse_factor"):
                _num(f[col], where, col, empty_ok=False, positive=True)
    else:
        clock = _num(f["clock_mhz"], where, "clock_mhz", empty_ok=False, positive=True)
        fpc = _num(f["flops_per_clock"], where, "flops_per_clock", empty_ok=False, positive=True)
        dims = [_num(f[c], where, c, empty_ok=False, positive=True) for c in ("m", "k", "n")]
        out["latency"] = 2 * math.prod(dims) / (fpc * clock / 1000.0)  # ns
    return out


def load_corpus(folder=None) -> list:
    """Every row of the corpus CSVs in ``folder`` (default: the package's), validated: each file has its
    columns, each row an id unique over the corpus, a document and a source, and numbers where numbers go.
    A bad file is one RlhlsError line naming the file, the line and what is wrong."""
    base = Path(folder) if folder is not None else _corpus_dir()
    if folder is not None and not base.is_dir():
        raise RlhlsError(f"--corpus '{base}': not a folder; expected one holding {', '.join(CORPUS_FILES.values())}")
    rows: list[CorpusRow] = []
    seen: dict[str, str] = {}
    present = [u for u, name in CORPUS_FILES.items() if (base / name).exists() or (base / name).is_symlink()]
    if not present:
        raise RlhlsError(f"{base}: holds none of {', '.join(CORPUS_FILES.values())}")
    for unit in present:
        path = base / CORPUS_FILES[unit]
        text = _read_text(path)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = [c for c in COLUMNS[unit] if c not in (reader.fieldnames or ())]
        if missing:
            raise RlhlsError(f"{path}: no column {', '.join(missing)}; expected the columns {', '.join(COLUMNS[unit])}")
        try:
            records = list(reader)
        except csv.Error as e:
            raise RlhlsError(f"{path}: malformed CSV ({e})") from None
        for i, f in enumerate(records, start=2):
            where = f"{path}:{i}"
            if None in f or any(v is None for v in f.values()):
                raise RlhlsError(f"{where}: {'more' if None in f else 'fewer'} cells than the header's "
                                 f"{len(reader.fieldnames or ())} columns")
            rid = f["id"].strip()
            if not rid:
                raise RlhlsError(f"{where}: column 'id' is empty")
            if rid in seen:
                raise RlhlsError(f"{where}: id '{rid}' is given twice (first at {seen[rid]})")
            seen[rid] = where
            for col in ("document", "source"):
                if not f[col].strip():
                    raise RlhlsError(f"{where}: column '{col}' is empty; every row names the document it comes from")
            key = config_key(unit, f)
            rows.append(CorpusRow(id=rid, unit=unit, key=key, split=split_of(key), document=f["document"].strip(),
                                  source=f["source"].strip(), fields=dict(f), measured=_measured(unit, f, where),
                                  where=where))
    return rows


# ---------------------------------------------------------------------------------------------
# The models' predictions
# ---------------------------------------------------------------------------------------------


def _fig(value, unit, source):
    from rlhls.designs.devices import Figure

    return Figure(float(value), unit, source)


_DEVICES: dict = {}


def _aie_device(variant: str, aie_mhz: float, plio_mhz: float, plio_latency_us: float):
    k = ("AIE", variant, aie_mhz, plio_mhz, plio_latency_us)
    if k not in _DEVICES:
        from rlhls.designs.devices import get_device

        base = get_device("vek280" if variant == "AIE-ML" else "vck190")
        aie = replace(base.units["AIE"], clock_mhz=_fig(aie_mhz, "MHz", "corpus row: the benchmark's AIE clock"))
        pl = replace(base.units["PL"], clock_mhz=_fig(plio_mhz, "MHz", "corpus row: the benchmark's PLIO clock"))
        links = tuple(replace(link, latency_us=_fig(plio_latency_us, "us", "qor: PLIO_LATENCY_US"))
                      if {link.src, link.dst} == {"PL", "AIE"} else link for link in base.links)
        _DEVICES[k] = replace(base, units={**base.units, "AIE": aie, "PL": pl}, links=links)
    return _DEVICES[k]


def _pl_device(clock_mhz: float, dsp_per_mac: float):
    k = ("PL", clock_mhz, dsp_per_mac)
    if k not in _DEVICES:
        from rlhls.designs.devices import get_device

        base = get_device("zcu106")
        perf = {**base.units["PL"].perf,
                "dsp_per_mac_fixed18": _fig(dsp_per_mac, "DSP48E2/MAC", "qor: DSP_PER_MAC_FIXED18")}
        pl = replace(base.units["PL"], clock_mhz=_fig(clock_mhz, "MHz", "corpus row: the baseline's clock"), perf=perf)
        _DEVICES[k] = replace(base, units={**base.units, "PL": pl})
    return _DEVICES[k]


def _ps_device(core: str, clock_mhz: float, fraction: float):
    k = ("PS", core, clock_mhz, fraction)
    if k not in _DEVICES:
        from rlhls.designs.devices import get_device

        base = get_device(PS_DEVICE[core])
        ps = base.units["PS"]
        rate = clock_mhz / 1000.0 * ps.perf["flops_per_cycle_fp32"].value * fraction
        perf = {**ps.perf, "gflops_fp32_sustained": _fig(rate, "GFLOP/s per core", "qor: SUSTAINED_FRACTION")}
        ps = replace(ps, clock_mhz=_fig(clock_mhz, "MHz", "corpus row: the core's clock"), perf=perf)
        _DEVICES[k] = replace(base, units={**base.units, "PS": ps})
    return _DEVICES[k]


def no_model(row: CorpusRow) -> str:
    """Why no cost model predicts this row ('' when one does)."""
    f = row.fields
    if row.unit == "AIE":
        if f["data_a"] != f["data_b"] or f["data_a"] not in AIE_FORMATS:
            return f"data types {f['data_a']} x {f['data_b']}: no AIE kernel of ours computes them"
        if f["tiling"].strip() not in ("", "0"):
            return "tiling widgets (tiler and untiler kernels around the multiply): not part of our AIE kernel"
        if f["variant"] not in ("AIE", "AIE-ML"):
            return f"AIE generation {f['variant']}: not in the device catalogue"
        return ""
    if row.unit == "PL":
        if f["origin"] != "hls4ml CI baseline":
            return f"top '{f['kernel']}': no kernel of ours implements it"
        if f["kernel"] not in ("dense", "conv2d"):
            return f"layer {f['kernel']}: no kernel of ours implements it"
        act = f["activation"].split("(")[0]
        if act not in ACT_KIND and act != "linear":
            return f"activation {f['activation']}: not mapped to an elementwise cost"
        return ""
    if f["isa"] != "A64":
        return f"{f['isa']} code: the PS runs AArch64"
    if f["core"] not in PS_DEVICE:
        return f"core {f['core']}: not in the device catalogue"
    return ""


def _aie_call(row: CorpusRow, c: dict) -> dict:
    """The cost model's terms for one kernel of the benchmark graph (its share: M / ssr rows, K / casc_len
    of the reduction): ``compute_us`` of ``aie_matmul`` on one tile (a matrix-vector row: ``n`` frames of
    one GEMV each), the fill time of its A and B windows (``a_us``, ``b_us``: each port its own PLIO) and
    the drain time of its output window (``out_us``) at the catalogue's PLIO rate, and the PL<->AIE link
    latency (``link_us``)."""
    from rlhls.designs.kernels import cost

    f = row.fields
    m, k, n = (int(f[x]) for x in ("m", "k", "n"))
    casc, ssr = int(f["casc_len"]), int(f["ssr"])
    mk, kk = math.ceil(m / ssr), math.ceil(k / casc)
    fmt = AIE_FORMATS[f["data_a"]]
    dev = _aie_device(f["variant"], float(f["aie_clock_mhz"]), float(f["plio_clock_mhz"]), c["PLIO_LATENCY_US"])
    mvm = f["element"] == "matrix_vector_mul"
    with _cost_constants(c):
        one = cost.aie_matmul(mk, kk, 1 if mvm else n, fmt, dev, tiles=1, plios=1)
    rate = dev.units["AIE"].perf["plio_bits"].value / 8 * dev.units["PL"].clock_mhz.value  # B/us per PLIO
    b = 2 if f["data_a"] in ("int16", "bfloat16") else 4
    return {"compute_us": one["compute_us"] * (n if mvm else 1), "a_us": mk * kk * (n if mvm else 1) * b / rate,
            "b_us": kk * n * b / rate, "out_us": mk * n * b / rate,
            "link_us": dev.link("PL", "AIE").latency_us.value}


STEADY_ITERATIONS = 24


def steady_latency(a_us, b_us, compute_us, out_us, iterations: int = STEADY_ITERATIONS):
    """First input (port A) to first output of one iteration of a graph run back to back, at steady state:
    each input port fills its double-buffered window at its PLIO's rate as soon as the kernel has released
    that buffer (after the iteration two before), the kernel runs once both windows are full, its previous
    run is done and one of its two output buffers is drained; the output streams out at its PLIO's rate.
    Scalars or numpy arrays (one value per row)."""
    a_us, b_us, compute_us, out_us = (np.asarray(x, dtype=float) for x in (a_us, b_us, compute_us, out_us))
    zero = np.zeros(np.broadcast(a_us, b_us, compute_us, out_us).shape)
    sa, sb, k, o = [zero], [zero], [np.maximum(a_us, b_us)], []
    o.append(k[0] + compute_us)
    for i in range(1, iterations):
        free = k[i - 2] + compute_us if i >= 2 else zero
        sa.append(np.maximum(sa[i - 1] + a_us, free))
        sb.append(np.maximum(sb[i - 1] + b_us, free))
        drained = o[i - 2] + out_us if i >= 2 else zero
        k.append(np.maximum.reduce([sa[i] + a_us, sb[i] + b_us, k[i - 1] + compute_us, drained]))
        o.append(np.maximum(k[i] + compute_us, o[i - 1] + out_us))
    return o[-1] - sa[-1]


def _pl_calls(row: CorpusRow, c: dict) -> list:
    from rlhls.designs.kernels import cost
    from rlhls.designs.network import ACT_FLOPS

    f = row.fields
    m, k, n, rf = (int(float(f[x])) for x in ("m", "k", "n", "reuse_factor"))
    dev = _pl_device(1000.0 / float(f["clock_ns"]), c["DSP_PER_MAC_FIXED18"])
    act = f["activation"].split("(")[0]
    stream = f["io_type"].strip() == "io_stream"
    with _cost_constants(c):
        out = [cost.pl_matmul(m, k, n, PL_FORMAT, dev, pf=max(1, k * n // rf), ii=1, acc=PL_FORMAT, stream_io=stream)]
        if act != "linear":
            out.append(cost.pl_elementwise(m * n, ACT_FLOPS[ACT_KIND[act]][0], PL_FORMAT, dev, pf=n,
                                           stream_io=stream))
    return out


def _ps_call(row: CorpusRow, c: dict) -> dict:
    from rlhls.designs.kernels import cost

    f = row.fields
    m, k, n = (int(float(f[x])) for x in ("m", "k", "n"))
    dev = _ps_device(f["core"], float(f["clock_mhz"]), c["SUSTAINED_FRACTION"])
    return cost.ps_cost(2.0 * m * k * n, dev, nbytes=4.0 * (m * k + k * n + m * n))


def predict(row: CorpusRow, constants: dict) -> dict:
    """``{metric: value}`` the cost model gives for ``row`` with ``constants`` (names of CONSTANTS), in the
    units of ``row.measured``; {} when no model predicts the row."""
    if no_model(row):
        return {}
    if row.unit == "AIE":
        t = _aie_call(row, constants)
        lat = steady_latency(t["a_us"], t["b_us"], t["compute_us"], t["out_us"]) + 2.0 * t["link_us"]
        return {"latency": float(lat) * 1000.0}
    if row.unit == "PL":
        parts = _pl_calls(row, constants)
        res = {k: sum(p["resources"][k] for p in parts) for k in ("dsp", "lut", "ff", "bram36")}
        return {"latency": float(sum(p["cycles"] for p in parts)), "dsp": float(res["dsp"]), "lut": float(res["lut"]),
                "ff": float(res["ff"]), "bram": float(res["bram36"])}
    r = _ps_call(row, constants)
    return {"latency": r["latency_us"] * 1000.0}


# ---------------------------------------------------------------------------------------------
# The fit
# ---------------------------------------------------------------------------------------------


def _grid(c: Constant) -> np.ndarray:
    a, b, s = c.grid
    return np.round(np.arange(a, b + s / 2, s), 6)


def _score(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Median |error| over the last axis (the mean breaks ties)."""
    err = np.abs(pred / meas - 1.0)
    return np.median(err, axis=-1) + 1e-6 * err.mean(axis=-1)


def _surrogate(rows: list, metric: str, names: list, c0: dict):
    """pred(values) for the rows, as arrays: the model's own terms at the assumed constants, scaled exactly as
    the model scales them with each constant (AIE and PS: compute time ~ 1/constant; PL: linear slopes)."""
    unit = rows[0].unit
    if unit == "AIE":
        calls = [_aie_call(r, c0) for r in rows]
        a, b, comp, out = (np.array([x[key] for x in calls]) for key in ("a_us", "b_us", "compute_us", "out_us"))
        eff0 = c0["AIE_KERNEL_EFFICIENCY"]
        # one efficiency (the outer loop of the search) against every link latency at once
        return lambda eff, lat: (steady_latency(a, b, comp * eff0 / float(eff), out)
                                 + 2.0 * np.asarray(lat, dtype=float)) * 1000.0
    if unit == "PS":
        calls = [_ps_call(r, c0) for r in rows]
        comp = np.array([x["compute_us"] for x in calls])
        floor = np.array([max(x["io_us"], 1.0 / float(r.fields["clock_mhz"])) for x, r in zip(calls, rows)])
        f0 = c0["SUSTAINED_FRACTION"]
        return lambda frac: np.maximum(comp * f0 / frac, floor) * 1000.0
    if metric == "latency":  # PL depths are rounded down: evaluate the model at every grid point
        def exact(*values):
            shape = np.broadcast(*[np.asarray(v) for v in values]).shape
            flat = [np.broadcast_to(np.asarray(v, dtype=float), shape).ravel() for v in values]
            out = np.array([[predict(r, dict(c0, **{n: float(v[i]) for n, v in zip(names, flat)}))[metric]
                             for r in rows] for i in range(len(flat[0]))])
            return out.reshape(shape + (len(rows),)) if shape else out[0]
        return exact
    base = np.array([predict(r, c0)[metric] for r in rows])
    slopes = []
    for name in names:
        step = dict(c0, **{name: c0[name] + 1.0})
        slopes.append(np.array([predict(r, step)[metric] for r in rows]) - base)

    def pl(*values):
        out = base
        for s, v, name in zip(slopes, values, names):
            out = out + s * (np.asarray(v, dtype=float) - c0[name])
        return out
    return pl


def _fit_group(rows: list, metric: str, names: list, c0: dict) -> dict:
    """Exhaustive grid search of the constants ``names`` on ``rows`` (calibration rows with a measurement)."""
    if not rows:
        return {}
    meas = np.array([r.measured[metric] for r in rows])
    fn = _surrogate(rows, metric, names, c0)
    grids = [_grid(_BY_NAME[n]) for n in names]
    best, best_score = None, math.inf
    if len(names) == 1:
        preds = np.stack([fn(g) for g in grids[0]])
        s = _score(preds, meas)
        i = int(np.argmin(s))
        return {names[0]: float(grids[0][i])}
    # outer loop over the first constant, the rest as a broadcast mesh
    mesh = np.meshgrid(*grids[1:], indexing="ij")
    flat = [m.ravel() for m in mesh]
    for g0 in grids[0]:
        preds = fn(g0, *[f[:, None] for f in flat])
        s = _score(preds, meas)
        i = int(np.argmin(s))
        if s[i] < best_score - 1e-12:
            best_score, best = s[i], (g0, *[f[i] for f in flat])
    if best is None:  # no grid point scores (every prediction NaN)
        return {}
    return {n: float(v) for n, v in zip(names, best)}


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@dataclass
class Qor:
    """The comparison: the corpus, the assumed and calibrated constants, every (row, metric) point with both
    predictions, and the errors per unit and metric."""

    rows: list
    assumed: dict
    calibrated: dict
    points: list  # dicts: id, unit, metric, split, measured, assumed, calibrated, document
    fitted_on: dict  # constant -> text naming the rows it was fitted to

    def metrics(self, which: str = "calibrated") -> list:
        """The ``--json`` entries: per unit and metric with predictions, its points, held-out points, and the
        held-out median and 90th-percentile |error| in % of the ``which`` constants."""
        if which not in ("calibrated", "assumed"):
            raise RlhlsError(f"qor: constants {which!r}; expected 'calibrated' or 'assumed'")
        out = []
        for unit in UNITS:
            for metric in METRICS:
                pts = [p for p in self.points if p["unit"] == unit and p["metric"] == metric]
                if not pts:
                    continue
                held = [abs(p[which] / p["measured"] - 1.0) * 100.0 for p in pts if p["split"] == "heldout"]
                out.append({
                    "unit": unit, "metric": metric, "points": len(pts), "heldout": len(held),
                    "median_abs_error_pct": round(float(np.median(held)), 2) if held else None,
                    "p90_abs_error_pct": round(float(np.percentile(held, 90)), 2) if held else None,
                    "sources": sorted({p["document"] for p in pts}),
                })
        return out

    def to_json(self, which: str = "calibrated") -> dict:
        return {"metrics": self.metrics(which)}

    def constants_table(self) -> list:
        """One dict per constant: name, where, assumed and its source, calibrated and 'fitted to ...'."""
        return [{"name": c.name, "unit": c.unit, "metric": c.metric, "where": c.where,
                 "assumed": self.assumed[c.name], "assumed_source": _assumed_source(c.name),
                 "calibrated": self.calibrated[c.name], "source": self.fitted_on.get(c.name, "not fitted: no rows"),
                 "in_code": "kept" if c.kept else "fitted", "kept": c.kept}
                for c in CONSTANTS]

    def text(self) -> str:
        per_unit = ", ".join(f"{u} {sum(r.unit == u for r in self.rows)}" for u in UNITS)
        L = [f"Reference corpus: {len(self.rows)} rows ({per_unit}); "
             "errors on the held-out rows (|model / measured - 1|):", ""]
        L.append(f"{'unit':<4} {'metric':<8} {'points':>6} {'held':>5}  {'code median':>14} {'p90':>8}  "
                 f"{'calibrated median':>17} {'p90':>8}")
        cal = {(m["unit"], m["metric"]): m for m in self.metrics("calibrated")}

        def pct(x):
            return "-" if x is None else f"{x:.1f}%"
        for a in self.metrics("assumed"):
            c = cal[(a["unit"], a["metric"])]
            L.append(f"{a['unit']:<4} {a['metric']:<8} {a['points']:>6} {a['heldout']:>5}  "
                     f"{pct(a['median_abs_error_pct']):>14} {pct(a['p90_abs_error_pct']):>8}  "
                     f"{pct(c['median_abs_error_pct']):>17} {pct(c['p90_abs_error_pct']):>8}")
        L += ["", "Constants (in the code -> fitted on the calibration rows; 'fitted': the code uses the fit):", ""]
        for c in self.constants_table():
            L.append(f"  {c['name']:<22} {c['assumed']:>9.4g} -> {c['calibrated']:<9.4g} {c['in_code']:<6} "
                     f"{c['kept'] or c['source']}")
        skipped = [r for r in self.rows if no_model(r)]
        if skipped:
            L += ["", f"Rows without a prediction ({len(skipped)}):"]
            why: dict = {}
            for r in skipped:
                why.setdefault(no_model(r), []).append(r.id)
            L += [f"  {len(ids)} ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''}): {w}"
                  for w, ids in why.items()]
        L += ["", "Sources:"] + [f"  {d}" for d in sorted({r.document for r in self.rows})]
        return "\n".join(L)


def _fitted_text(rows: list, metric: str) -> str:
    docs = sorted({r.document for r in rows})
    return (f"fitted to {len(rows)} calibration rows of {CORPUS_FILES[rows[0].unit]} ({metric}; ids "
            f"{rows[0].id} .. {rows[-1].id}): {'; '.join(docs)}")


def qor(corpus=None, rows=None) -> Qor:
    """Fit every group of CONSTANTS on the calibration rows of ``rows`` (default: ``load_corpus(corpus)``)
    and predict every row with the assumed and the calibrated constants."""
    rows = load_corpus(corpus) if rows is None else rows
    c0 = assumed_constants()
    cal = dict(c0)
    fitted_on = {}
    groups: dict = {}
    for c in CONSTANTS:
        groups.setdefault((c.unit, c.metric), []).append(c.name)
    for (unit, metric), names in groups.items():
        fit_rows = [r for r in rows if r.unit == unit and r.split == "calibration" and metric in r.measured
                    and not no_model(r)]
        if not fit_rows:
            continue
        cal.update(_fit_group(fit_rows, metric, names, c0))
        for n in names:
            fitted_on[n] = _fitted_text(fit_rows, metric)
    points = []
    for r in rows:
        pa = predict(r, c0)
        if not pa:
            continue
        pc = predict(r, cal)
        for metric, v in r.measured.items():
            if metric in pa:
                points.append({"id": r.id, "unit": r.unit, "metric": metric, "split": r.split, "measured": v,
                               "assumed": pa[metric], "calibrated": pc[metric], "document": r.document})
    return Qor(rows=rows, assumed=c0, calibrated=cal, points=points, fitted_on=fitted_on)


_CACHE: dict = {}


def calibrated_constants() -> dict:
    """``{name: {'value', 'assumed', 'source'}}`` of every constant fitted on the package's corpus (the
    source says which rows: 'fitted to ...'). The catalogue and the cost models keep their own values."""
    if "qor" not in _CACHE:
        _CACHE["qor"] = qor()
    q = _CACHE["qor"]
    return {c["name"]: {"value": c["calibrated"], "assumed": c["assumed"], "source": c["source"]}
            for c in q.constants_table()}


# ---------------------------------------------------------------------------------------------
# Figures and files
# ---------------------------------------------------------------------------------------------

QOR_FILES = ("aie.png", "pl.png", "ps.png", "points.csv")
UNIT_LABEL: dict[str, str | dict[str, str]] = {
    "latency": {"AIE": "latency (ns)", "PL": "latency (cycles)", "PS": "latency (ns)"},
    "dsp": "DSP", "lut": "LUT", "ff": "FF", "bram": "BRAM36", "power": "power (W)"}


def qor_figure(q: Qor, unit: str):
    """Predicted against measured for one unit: one panel per metric, log-log; assumed (hollow) and
    calibrated (filled) constants, held-out rows in colour, calibration rows grey."""
    from matplotlib.figure import Figure

    metrics = [m for m in METRICS if any(p["unit"] == unit and p["metric"] == m for p in q.points)]
    fig = Figure(figsize=(4.2 * max(1, len(metrics)), 4.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(metrics)), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        pts = [p for p in q.points if p["unit"] == unit and p["metric"] == metric]
        vals = [v for p in pts for v in (p["measured"], p["assumed"], p["calibrated"]) if v > 0]
        lo, hi = min(vals), max(vals)
        floor = lo / 2  # a prediction of 0 is drawn on this line (log axes)
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        if any(min(p["assumed"], p["calibrated"]) <= 0 for p in pts):
            ax.axhline(floor, color="tab:red", lw=0.6, ls=":")
            ax.text(lo, floor, " model 0", fontsize=7, va="bottom", color="tab:red")
        for split, colour in (("calibration", "0.6"), ("heldout", "tab:blue")):
            sel = [p for p in pts if p["split"] == split]
            if not sel:
                continue
            ax.scatter([p["measured"] for p in sel], [max(p["assumed"], floor) for p in sel], s=18, facecolors="none",
                       edgecolors="tab:red" if split == "heldout" else "0.75", label=f"assumed ({split})")
            ax.scatter([p["measured"] for p in sel], [max(p["calibrated"], floor) for p in sel], s=14, color=colour,
                       label=f"calibrated ({split})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        label = UNIT_LABEL[metric]
        lab = label[unit] if isinstance(label, dict) else label
        ax.set_xlabel(f"measured {lab}")
        ax.set_ylabel(f"model {lab}")
        ax.set_title(f"{unit} {metric}: {len(pts)} points")
        ax.legend(fontsize=7)
    return fig


def points_csv(q: Qor) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "unit", "metric", "split", "measured", "assumed", "calibrated", "assumed_error_pct",
                "calibrated_error_pct", "document"])
    for p in q.points:
        w.writerow([p["id"], p["unit"], p["metric"], p["split"], f"{p['measured']:.6g}", f"{p['assumed']:.6g}",
                    f"{p['calibrated']:.6g}", f"{(p['assumed'] / p['measured'] - 1) * 100:.2f}",
                    f"{(p['calibrated'] / p['measured'] - 1) * 100:.2f}", p["document"]])
    return buf.getvalue()


def qor_folder(d: Path) -> bool:
    return all(p.name in QOR_FILES for p in d.iterdir())


def check_qor_out(out, force: bool = False) -> None:
    from rlhls.core.fileio import check_out

    check_out(Path(out), command="qor", force=force, ours=qor_folder)


def write_qor(q: Qor, out, *, force: bool = False) -> Path:
    """One predicted-vs-measured PNG per unit with points (aie.png, pl.png, ps.png) and points.csv into ``out``
    (staged, then published; a folder rlhls did not write is refused unless ``force``)."""
    from rlhls.core.fileio import atomic_write_bytes, atomic_write_text, staged_folder

    out = Path(out)
    check_qor_out(out, force)
    with staged_folder(out, command="qor", ours=qor_folder) as tmp:
        for unit in UNITS:
            if any(p["unit"] == unit for p in q.points):
                buf = io.BytesIO()
                qor_figure(q, unit).savefig(buf, format="png", dpi=110)
                atomic_write_bytes(tmp / f"{unit.lower()}.png", buf.getvalue())
        atomic_write_text(tmp / "points.csv", points_csv(q))
    return out
