"""Unit cost primitives: cycles, latency and resources of a piece of work on PS, PL or AIE.

Every function returns ``{'cycles', 'latency_us', 'memory_bytes', 'resources', 'source', ...}``
with ``resources = {lut, ff, dsp, bram36, uram, aie_tiles}`` (all six keys) plus the terms the
latency is made of (``compute_us``, ``launch_us``, ``io_us``).  Device figures come from
:mod:`rlhls.designs.devices` (``Unit.perf``, ``Unit.clock_mhz``, links), each with its own
citation there; the model constants *here* are assumptions, or fitted on the calibration rows of the
reference corpus by ``rlhls qor`` (``FITTED`` names the rows; ``docs/guide/qor.md``).

PS  (``ps_cost``)
    ``latency = max(flops / gflops_fp32_sustained, nbytes / mem_gbytes_per_s_sustained)``,
    one core (roofline of the catalogue's per-core sustained rates, both assumed figures in the
    catalogue); at least one PS clock cycle.

PL  (``pl_matmul``)
    A GEMM ``C[n,m] = A[n,k] B[k,m]`` as a pipelined loop nest with ``pf`` MAC lanes: the
    reduction loop is unrolled first (``pk = min(pf, k)``), what is left of ``pf`` unrolls the
    ``m`` loop, then ``n`` (TAPCA's loop-unroll + array-partition design points, AP-DRL Table I)::

        cycles = (ceil(n/pn) * ceil(m/pm) * ceil(k/pk) - 1) * II + depth
        depth  = floor(MUL_DEPTH + ADD_DEPTH * ceil(log2(pk))) + IO_DEPTH  (adder tree over pk lanes)

    (a pipeline's last iteration issues at (trips - 1) II and completes ``depth`` later; IO_DEPTH is
    the stream read/write stage, left out with ``stream_io=False``: hls4ml's io_parallel tops)
        latency_us = cycles / clock_MHz + launch_overhead_us            (catalogue, PL)

    DSPs = ceil(pf * dsp_per_mac_<format>) (catalogue, e.g. 1 DSP58 per fp16/fp32 MAC on Versal,
    5 DSP48E2 per fp32 MAC on UltraScale+, 1 DSP block per 27-bit MAC on Stratix V);
    LUT/FF = a fixed control/AXI part + per-lane operand muxes and pipeline registers;
    block RAM: the weight operand ``B`` is kept on chip, cyclically partitioned into ``pf`` banks
    (each bank a whole number of 36 Kb BRAMs at the port width of the format, or LUTRAM when a
    bank holds at most LUTRAM_MAX_BITS); row buffers of ``A`` and ``C`` are partitioned the same
    way.  ``pl_elementwise`` is the same with ``ops_per_element`` chained operators per lane.

AIE (``aie_matmul``)
    ``tiles`` AIE tiles each run ``macs_per_cycle_<format>`` MACs per cycle (catalogue: AIE-ML
    bf16 128 with fp32 accumulation) on ``AIE_MMUL_BLOCK`` blocks (padding counts) at
    AIE_KERNEL_EFFICIENCY; operands arrive over PLIOs (``plio_bits`` at the PL clock, catalogue),
    ``2 ceil(sqrt(tiles))`` input and ``ceil(sqrt(tiles))`` output streams (a square tile array
    with broadcast of A along rows and B along columns, CHARM-style); compute and streaming
    a tile computes once its input windows are full and streams its result window once computed
    (buffer semantics); operands beyond half a tile's data memory stream in ``windows`` ping-pong
    windows whose fill, compute and drain overlap::

        stages     = (in_us, compute_us, out_us)
        latency_us = launch_overhead_us + max(stages) + (sum(stages) - max(stages)) / windows
                     + 2 * plio_latency_us

    A matrix-vector product (n or m = 1) pads only its long side to the block. The corpus's AIE
    rows (Vitis DSP library benchmarks) check compute_us, the PLIO rate and plio_latency_us
    through the benchmark's steady-state latency (``partition.qor.steady_latency``).

    The launch overhead (catalogue, assumed 20 us on Versal) is what makes the AIE lose small
    GEMMs to the PL and win large ones (AP-DRL §III-A, Fig. 6).

Model constants (not data-sheet numbers):
    * pipeline depths MUL_DEPTH / ADD_DEPTH: float 4/4 cycles assumed (typical Vitis HLS operator
      latencies at 200-300 MHz); fixed 0/0.5 and IO_DEPTH 1 fitted (FITTED) to hls4ml's csynth
      baselines (fixed<16,6> at 200 MHz: a product and two adds fit a cycle);
    * LUT/FF: control LUT_BASE = 1200 LUT / FF_BASE = 1800 FF (AXI-lite + address generators) and
      per lane 3 LUT + 6 FF per accumulator bit (operand muxes, pipeline and adder-tree registers);
      elementwise operators 2 LUT + 4 FF per bit per operator per lane and one DSP-MAC per
      multiply-add pair of float operators (floor(ops/2));
    * LUTRAM_MAX_BITS = 1024: smaller banks go to LUTRAM (64 bits per LUT);
    * AIE_MMUL_BLOCK (4, 8, 8) for 16-bit operands, (4, 8, 4) for fp32 (AIE API aie::mmul shapes);
      AIE_KERNEL_EFFICIENCY = 0.72 of the MAC peak (fitted, FITTED); PL-side data movers
      200 LUT + 400 FF per PLIO stream;
    * the Intel Stratix V M20K blocks are counted as 36 Kb-equivalent ``bram36`` (bits / 36 Kb),
      and its ALMs as ``lut`` (the capacity side converts ALMs to LUTs, see partition.profile).
"""

from __future__ import annotations

import math
import numbers

from rlhls.core.errors import RlhlsError

from ..formats import FixedFormat, FloatFormat, UniformFormat, parse_format

__all__ = ["ps_cost", "pl_matmul", "pl_elementwise", "aie_matmul", "RESOURCE_KEYS", "format_key", "FITTED",
           "dsp_per_mac", "bram36_for", "AIE_MMUL_BLOCK", "FIGURES", "PROVENANCE_KINDS", "provenance", "tag",
           "combine_provenance"]

RESOURCE_KEYS = ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")

# --- model constants (assumptions, or fitted by ``rlhls qor``: see the module docstring and FITTED) ---
MUL_DEPTH = {"float": 4, "fixed": 0}
ADD_DEPTH = {"float": 4, "fixed": 0.5}
IO_DEPTH = 1
LUT_BASE, FF_BASE = 1200, 1800
LUT_PER_ACC_BIT, FF_PER_ACC_BIT = 3, 6
EW_LUT_PER_BIT, EW_FF_PER_BIT = 2, 4
LUTRAM_MAX_BITS = 1024
BRAM36_BITS = 36 * 1024
AIE_MMUL_BLOCK = {16: (4, 8, 8), 8: (4, 8, 8), 32: (4, 8, 4)}
AIE_KERNEL_EFFICIENCY = 0.72
# where each fitted constant comes from (tests/test_qor.py checks the values against the fit)
_PL_ROWS = ("19 calibration rows of designs/qor/pl.csv (hls4ml CI csynth baselines, Vitis HLS 2020.1-2024.1 and "
            "Vivado HLS 2020.1, fixed<16,6> at 200 MHz; ids pl-hls4ml-vitis2020.1-dense-io-parallel-vitis .. "
            "pl-hls4ml-vivado2020.1-dense-io-parallel-vivado)")
FITTED = {
    "AIE_KERNEL_EFFICIENCY": "fitted to 71 calibration rows of designs/qor/aie.csv (AMD Vitis Libraries 2024.2 / "
                             "2025.1 DSP library L2 benchmarks, matrix_mult and matrix_vector_mul on AIE and AIE-ML; "
                             "ids aie-2024.2-mm-006 .. aie-2025.1-mm-131): steady-state latency, rlhls qor",
    "MUL_DEPTH_FIXED": f"fitted to {_PL_ROWS}: csynth latency, rlhls qor",
    "ADD_DEPTH_FIXED": f"fitted to {_PL_ROWS}: csynth latency, rlhls qor",
    "IO_DEPTH": f"fitted to {_PL_ROWS}: csynth latency, rlhls qor",
}
PLIO_MOVER_LUT, PLIO_MOVER_FF = 200, 400
AIE_MAX_AUTO_TILES = 64  # tiles=None searches powers of two up to this


def _zero_resources() -> dict:
    return {k: 0 for k in RESOURCE_KEYS}


def _device(device):
    if isinstance(device, str):
        from ..devices import get_device

        return get_device(device)
    if device is None or not hasattr(device, "units"):
        raise RlhlsError(f"cost model: device {device!r} is not a catalogue Device or device name")
    return device


def _unit(device, name: str, where: str):
    if name not in device.units:
        raise RlhlsError(f"{where}: device {device.id} has no {name} unit; expected one of {', '.join(device.units)}")
    return device.units[name]


def _perf(unit, key: str, where: str) -> float:
    if key not in unit.perf:
        raise RlhlsError(f"{where}: unit {unit.name} has no perf figure {key!r}; "
                         f"expected one of {', '.join(unit.perf)}")
    return unit.perf[key].value


def _int(value, name: str, where: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise RlhlsError(f"{where}: parameter '{name}' = {value!r} must be an integer >= {minimum}")
    return int(value)


def _num(value, name: str, where: str, minimum: float = 0.0, strict: bool = False) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if not ok or value < minimum or (strict and value == minimum):
        rel = ">" if strict else ">="
        raise RlhlsError(f"{where}: parameter '{name}' = {value!r} must be a finite number {rel} {minimum:g}")
    return float(value)


def _fmt(fmt, where: str):
    try:
        return parse_format(fmt)
    except RlhlsError as e:
        raise RlhlsError(f"{where}: format {fmt!r}: {e}") from None


def format_key(fmt) -> str:
    """'fp32' | 'fp16' | 'bf16' | 'fixedW' (W bits) — the suffix of the catalogue's per-format figures."""
    f = parse_format(fmt)
    if isinstance(f, FloatFormat):
        name = str(f)
        return name if name in ("fp32", "fp16", "bf16") else f"float{f.bits}"
    return f"fixed{f.bits}"


def _fmt_class(f) -> str:
    return "float" if isinstance(f, FloatFormat) else "fixed"


def dsp_per_mac(device, fmt) -> float:
    """DSPs per MAC lane on the device's PL for ``fmt`` (catalogue ``dsp_per_mac_*``).

    Fixed point uses the narrowest catalogue width that holds the operand; a float without its own
    figure (bf16 on the PL) uses the next wider float figure (widened operands).
    """
    device = _device(device)
    f = parse_format(fmt)
    pl = _unit(device, "PL", "pl cost")
    have = {k[len("dsp_per_mac_"):]: fig.value for k, fig in pl.perf.items() if k.startswith("dsp_per_mac_")}
    if isinstance(f, FloatFormat):
        for key in (format_key(f), "fp32" if f.bits > 16 or str(f) == "bf16" else "fp16", "fp32"):
            if key in have:
                return have[key]
    else:
        widths = sorted(int(k[5:]) for k in have if k.startswith("fixed"))
        for w in widths:
            if w >= f.bits:
                return have[f"fixed{w}"]
    raise RlhlsError(f"pl cost: device {device.id} PL has no DSP figure for format {f} "
                     f"(dsp_per_mac_{format_key(f)}); it has: {', '.join(sorted(have))}")


def _dsp_source(pl, f) -> str:
    key = "dsp_per_mac_" + format_key(f)
    return pl.perf[key].source if key in pl.perf else f"no {key}: widened to the next catalogue format"


def _dsp_tag(pl, f) -> str:
    key = "dsp_per_mac_" + format_key(f)
    return tag(pl.perf[key]) if key in pl.perf else "assumed"


def _port_depth(width: int) -> int:
    """Words of ``width`` bits one 36 Kb block RAM holds (ports 1,2,4,9,18,36,72 bits)."""
    for port in (1, 2, 4, 9, 18, 36, 72):
        if width <= port:
            return BRAM36_BITS // port
    return 512  # wider words are split over ceil(width / 72) BRAMs by the caller


def bram36_for(elements: int, width: int, banks: int = 1) -> tuple[int, int]:
    """(bram36, lutram LUTs) of an array of ``elements`` words, cyclically partitioned into ``banks``."""
    elements, banks = int(elements), max(1, min(int(banks), int(elements) or 1))
    if elements <= 0:
        return 0, 0
    depth = math.ceil(elements / banks)
    if depth * width <= LUTRAM_MAX_BITS:
        return 0, banks * math.ceil(depth / 64) * width
    per_bank = math.ceil(depth / _port_depth(width)) * math.ceil(width / 72)
    return banks * per_bank, 0


# Provenance of every figure a model gives: its kind first, then why (``"assumed: ..."``).
FIGURES = ("cycles", "latency_us") + RESOURCE_KEYS
PROVENANCE_KINDS = ("derived", "seed", "fitted to", "assumed")


def tag(figure) -> str:
    """The kind of a catalogue figure: 'assumed' where its source says so, else 'derived' (a data
    sheet's figure, or one computed from them)."""
    return "assumed" if figure.source.lower().startswith("assumed") else "derived"


def provenance(rest: str = "derived: none used", **figs) -> dict:
    """``{figure: text}`` for every figure of FIGURES (`rest` for those not given); each text starts
    with a kind of PROVENANCE_KINDS."""
    out = {k: figs.get(k, rest) for k in FIGURES}
    for k, v in out.items():
        if not any(v.startswith(kind) for kind in PROVENANCE_KINDS):
            raise RlhlsError(f"provenance of {k} {v!r}: expected it to start with one of {', '.join(PROVENANCE_KINDS)}")
    return out


def combine_provenance(parts) -> dict:
    """The provenance of figures that add up several models' (units run in turn): the weakest kind
    first (assumed, fitted, seed, derived), then each part's text."""
    order = ("assumed", "fitted to", "seed", "derived")
    out = {}
    for k in FIGURES:
        texts = list(dict.fromkeys(p[k] for p in parts))
        if len(texts) == 1:
            out[k] = texts[0]
        else:
            kind = next(o for o in order if any(t.startswith(o) for t in texts))
            out[k] = f"{kind.split()[0] if kind != 'fitted to' else 'fitted to'} (sum): " + "; ".join(texts)
    return out


def _result(cycles, latency_us, memory_bytes, resources, source, **extra) -> dict:
    out = {"cycles": int(math.ceil(cycles)), "latency_us": float(latency_us), "memory_bytes": int(memory_bytes),
           "resources": {k: int(math.ceil(resources.get(k, 0))) for k in RESOURCE_KEYS}, "source": source}
    out.update(extra)
    return out


# ---------------------------------------------------------------------------------------------
# PS
# ---------------------------------------------------------------------------------------------


def ps_cost(flops: float, device, *, nbytes: float = 0) -> dict:
    """One PS core: roofline of the catalogue's sustained FP32 rate and memory rate (per core)."""
    where = "ps_cost"
    flops = _num(flops, "flops", where)
    nbytes = _num(nbytes, "nbytes", where)
    device = _device(device)
    ps = _unit(device, "PS", where)
    rate = _perf(ps, "gflops_fp32_sustained", where) * 1e3  # FLOP/us
    mem = ps.perf.get("mem_gbytes_per_s_sustained")
    compute_us = flops / rate
    mem_us = nbytes / (mem.value * 1e3) if mem is not None else 0.0
    clock = ps.clock_mhz.value
    latency = max(compute_us, mem_us, 1.0 / clock)
    src = (f"PS roofline: {flops:g} FLOP / {rate / 1e3:g} GFLOP/s ({ps.perf['gflops_fp32_sustained'].source})"
           + (f", {nbytes:g} B / {mem.value:g} GB/s ({mem.source})" if mem is not None else ""))
    rates = "assumed" if "assumed" in (tag(ps.perf["gflops_fp32_sustained"]), tag(mem) if mem else "derived") \
        else "derived"
    why = f"{rates}: roofline of the catalogue's per-core sustained FLOP and memory rates"
    return _result(latency * clock, latency, nbytes, _zero_resources(), src,
                   compute_us=compute_us, io_us=mem_us, launch_us=0.0,
                   provenance=provenance("derived: the PS uses no PL/AIE resources", cycles=why, latency_us=why))


# ---------------------------------------------------------------------------------------------
# PL
# ---------------------------------------------------------------------------------------------


def _pl_clock(pl, clock_mhz, where) -> float:
    if clock_mhz is None:
        return pl.clock_mhz.value
    return _num(clock_mhz, "clock_mhz", where, 0.0, strict=True)


def _depth(ops_depth: float, stream_io: bool) -> int:
    """A pipeline's iteration latency: its operators' cycles rounded down (a fixed-point add or compare
    chains into the cycle that registers it) plus the stream read/write stage when it streams."""
    return int(math.floor(ops_depth + 1e-9)) + (IO_DEPTH if stream_io else 0)


def _split_pf(pf: int, dims: tuple) -> tuple:
    """Unroll the innermost loop first, then the next: (pk, pm, pn) for dims (k, m, n)."""
    out, left = [], pf
    for d in dims:
        p = max(1, min(left, d))
        out.append(p)
        left = max(1, left // p)
    return tuple(out)


def pl_matmul(n, k, m, fmt, device, *, pf: int | None = None, ii: int = 1, clock_mhz=None, acc=None,
              stream_io: bool = True) -> dict:
    """GEMM (n x k) @ (k x m) on the PL with ``pf`` MAC lanes; see the module docstring for the formula.

    ``pf=None`` unrolls the reduction loop up to 64 lanes (largest power of two <= k). ``stream_io=False``:
    operands and result are the top's registers (hls4ml io_parallel), no stream read/write stage.
    """
    where = "pl_matmul"
    n, k, m = (_int(v, name, where) for v, name in ((n, "n"), (k, "k"), (m, "m")))
    if pf is None:
        pf = 2 ** int(math.floor(math.log2(min(k, 64))))
    pf = _int(pf, "pf", where)
    ii = _int(ii, "ii", where)
    f = _fmt(fmt, where)
    a = _fmt(acc, where) if acc is not None else f
    device = _device(device)
    pl = _unit(device, "PL", where)
    clock = _pl_clock(pl, clock_mhz, where)
    cls = _fmt_class(f)
    pk, pm, pn = _split_pf(pf, (k, m, n))
    iters = math.ceil(n / pn) * math.ceil(m / pm) * math.ceil(k / pk)
    depth = _depth(MUL_DEPTH[cls] + ADD_DEPTH[cls] * math.ceil(math.log2(pk)), stream_io)
    cycles = (iters - 1) * ii + depth
    launch = _perf(pl, "launch_overhead_us", where)
    compute_us = cycles / clock
    w = f.bits
    b_w, l_w = bram36_for(k * m, w, pf)
    b_a, l_a = bram36_for(k, w, pk)
    b_c, l_c = bram36_for(m, a.bits, pm)
    res = _zero_resources()
    res["dsp"] = math.ceil(pf * dsp_per_mac(device, f) - 1e-9)
    res["lut"] = LUT_BASE + pf * LUT_PER_ACC_BIT * a.bits + l_w + l_a + l_c
    res["ff"] = FF_BASE + pf * FF_PER_ACC_BIT * a.bits
    res["bram36"] = b_w + b_a + b_c
    nbytes = (n * k + k * m + n * m) * math.ceil(w / 8)
    src = (f"PL GEMM {n}x{k}x{m} {f}/{a}, pf={pf} (pk={pk}, pm={pm}, pn={pn}), II={ii} at {clock:g} MHz; "
           f"DSP/MAC {_dsp_source(pl, f)}; "
           f"launch {pl.perf['launch_overhead_us'].source}")
    prov = provenance(
        cycles="derived: loop nest (ceil(n/pn) ceil(m/pm) ceil(k/pk) - 1) x II + pipeline depth "
               "(depths: float assumed, fixed fitted)",
        latency_us=f"derived: cycles / clock + launch overhead ({tag(pl.perf['launch_overhead_us'])})",
        lut="assumed: LUT_BASE + per-lane LUT per accumulator bit (cost.py) + LUTRAM banks",
        ff="assumed: FF_BASE + per-lane FF per accumulator bit (cost.py)",
        dsp=f"{_dsp_tag(pl, f)}: pf x dsp_per_mac_{format_key(f)} (catalogue)",
        bram36="derived: weight and row buffers in pf banks of 36 Kb block RAM")
    return _result(cycles, compute_us + launch, nbytes, res, src, compute_us=compute_us, launch_us=launch,
                   io_us=0.0, iterations=iters, depth=depth, clock_mhz=clock, provenance=prov)


def pl_elementwise(n_elements, ops_per_element, fmt, device, *, pf: int = 1, ii: int = 1, clock_mhz=None,
                   stream_io: bool = True) -> dict:
    """``n_elements`` independent elements, each through ``ops_per_element`` chained operators, ``pf`` lanes.

    ``cycles = (ceil(n_elements / pf) - 1) * II + depth`` with ``depth = floor(ops * ADD_DEPTH) + IO_DEPTH``
    (``IO_DEPTH`` only with ``stream_io``).
    """
    where = "pl_elementwise"
    n_el = _int(n_elements, "n_elements", where)
    ops = _int(ops_per_element, "ops_per_element", where, minimum=0)
    pf = _int(pf, "pf", where)
    ii = _int(ii, "ii", where)
    f = _fmt(fmt, where)
    device = _device(device)
    pl = _unit(device, "PL", where)
    clock = _pl_clock(pl, clock_mhz, where)
    cls = _fmt_class(f)
    lanes = min(pf, n_el)
    cycles = (math.ceil(n_el / lanes) - 1) * ii + _depth(ops * ADD_DEPTH[cls], stream_io)
    launch = _perf(pl, "launch_overhead_us", where)
    compute_us = cycles / clock
    res = _zero_resources()
    # float operators: one DSP-MAC per multiply-add pair (floor(ops/2)); a lone compare/select
    # (ReLU) and fixed-point adds/compares stay in fabric
    res["dsp"] = math.ceil(pf * (ops // 2) * dsp_per_mac(device, f) - 1e-9) if cls == "float" else 0
    res["lut"] = LUT_BASE + pf * max(ops, 1) * EW_LUT_PER_BIT * f.bits
    res["ff"] = FF_BASE + pf * max(ops, 1) * EW_FF_PER_BIT * f.bits
    nbytes = 2 * n_el * math.ceil(f.bits / 8)
    src = (f"PL elementwise {n_el} x {ops} op(s) {f}, pf={pf}, II={ii} at {clock:g} MHz; "
           f"launch {pl.perf['launch_overhead_us'].source}")
    prov = provenance(
        cycles="derived: (ceil(elements / pf) - 1) x II + operator depth (depths: float assumed, fixed fitted)",
        latency_us=f"derived: cycles / clock + launch overhead ({tag(pl.perf['launch_overhead_us'])})",
        lut="assumed: LUT_BASE + per-lane LUT per bit per operator (cost.py)",
        ff="assumed: FF_BASE + per-lane FF per bit per operator (cost.py)",
        dsp=(f"{_dsp_tag(pl, f)}: pf x floor(ops / 2) x dsp_per_mac_{format_key(f)} (catalogue)" if cls == "float"
             else "derived: fixed-point adds and compares stay in fabric"))
    return _result(cycles, compute_us + launch, nbytes, res, src, compute_us=compute_us, launch_us=launch,
                   io_us=0.0, clock_mhz=clock, provenance=prov)


# ---------------------------------------------------------------------------------------------
# AIE
# ---------------------------------------------------------------------------------------------


def _aie_rate_key(f) -> str:
    if isinstance(f, FloatFormat):
        return "macs_per_cycle_" + format_key(f)
    if isinstance(f, (FixedFormat, UniformFormat)):
        for w in (8, 16):
            if f.bits <= w:
                return f"macs_per_cycle_int{w}"
    raise RlhlsError(f"aie_matmul: format {f} has no AIE datapath; expected bf16, fp32 or fixed point up to 16 bits")


def _aie_one(n, k, m, f, device, tiles, where, plios=None) -> dict:
    aie = _unit(device, "AIE", where)
    pl = _unit(device, "PL", where)
    key = _aie_rate_key(f)
    rate = _perf(aie, key, where)
    clock = aie.clock_mhz.value
    bn, bk, bm = AIE_MMUL_BLOCK[16 if f.bits <= 16 else 32]
    # a matrix-vector product runs on the vector MACs along its long side: its unit dimension is not padded
    bn, bm = (1 if n == 1 else bn), (1 if m == 1 else bm)
    blocks = math.ceil(n / bn) * math.ceil(k / bk) * math.ceil(m / bm)
    out_blocks = math.ceil(n / bn) * math.ceil(m / bm)
    used = min(tiles, out_blocks)  # a tile owns whole output blocks; more tiles than blocks idle
    block_cycles = bn * bk * bm / (rate * AIE_KERNEL_EFFICIENCY)
    compute_cycles = math.ceil(math.ceil(blocks / used) * block_cycles)
    compute_us = compute_cycles / clock
    if plios is None:  # default: one input PLIO per row/column broadcast of a sqrt(tiles) grid
        side = math.ceil(math.sqrt(tiles))
        p_in = int(min(_perf(aie, "plio_count", where), 2 * side))
        p_out = int(min(_perf(aie, "plio_count_out", where), side))
    else:  # explicit: plios PL->AIE and plios AIE->PL streams, staged/broadcast to the tiles
        p_in = p_out = plios
    plio_rate = _perf(aie, "plio_bits", where) / 8 * pl.clock_mhz.value  # B/us per stream
    b = math.ceil(f.bits / 8)
    in_bytes, out_bytes = (n * k + k * m) * b, n * m * b
    in_us, out_us = in_bytes / (p_in * plio_rate), out_bytes / (p_out * plio_rate)
    lat_link = device.link("PL", "AIE").latency_us.value if any(
        l.src == "PL" and l.dst == "AIE" for l in device.links) else 0.0
    launch = _perf(aie, "launch_overhead_us", where)
    # buffer (window) semantics: a tile computes once its input windows are full and streams its result
    # window once computed; operands beyond half a tile's data memory (ping-pong) stream in `windows`
    # windows whose fill, compute and drain overlap (a pipeline: the slowest stage plus one window of the others)
    tile_kb = (aie.resources["aie_data_memory_kb"].value / aie.resources["aie_tiles"].value
               if "aie_data_memory_kb" in aie.resources and "aie_tiles" in aie.resources else 32.0)
    windows = max(1, math.ceil((in_bytes + out_bytes) / used / (tile_kb * 1024 / 2)))
    stages = (in_us, compute_us, out_us)
    latency = launch + max(stages) + (sum(stages) - max(stages)) / windows + 2 * lat_link
    res = _zero_resources()
    res["aie_tiles"] = tiles
    res["lut"] = PLIO_MOVER_LUT * (p_in + p_out)
    res["ff"] = PLIO_MOVER_FF * (p_in + p_out)
    src = (f"AIE GEMM {n}x{k}x{m} {f} on {tiles} tile(s) ({used} busy), {rate:g} MAC/cycle/tile "
           f"({aie.perf[key].source}) x {AIE_KERNEL_EFFICIENCY} at {clock:g} MHz; {p_in}+{p_out} PLIOs of "
           f"{plio_rate:g} B/us; launch {aie.perf['launch_overhead_us'].source}")
    why = (f"derived: MAC blocks / {key} ({tag(aie.perf[key])}) at AIE_KERNEL_EFFICIENCY (fitted to aie.csv), streamed "
           f"through PLIOs, + launch overhead ({tag(aie.perf['launch_overhead_us'])})")
    prov = provenance(cycles=why, latency_us=why, aie_tiles="derived: the design point's tiles",
                      lut="assumed: PL data movers, PLIO_MOVER_LUT per stream (cost.py)",
                      ff="assumed: PL data movers, PLIO_MOVER_FF per stream (cost.py)")
    return _result(latency * clock, latency, in_bytes + out_bytes, res, src, compute_us=compute_us,
                   launch_us=launch, io_us=max(in_us, out_us), in_us=in_us, out_us=out_us, windows=windows,
                   compute_cycles=compute_cycles,
                   plio_in=p_in, plio_out=p_out, plio=max(p_in, p_out), tiles_busy=used, provenance=prov)


def aie_plio_pairs(device, *, routable: bool = True) -> int:
    """PL<->AIE stream pairs a graph may use on a device: min(PL->AIE, AIE->PL PLIOs) of the catalogue
    (AM020) times its routable fraction (``perf['plio_routable_fraction']``, documented there; 1 where
    a device gives none), rounded down. routable=False: every stream pair of the device."""
    aie = _unit(_device(device), "AIE", "aie_plio_pairs")
    pairs = min(aie.perf["plio_count"].value, aie.perf["plio_count_out"].value)
    frac = aie.perf["plio_routable_fraction"].value if routable and "plio_routable_fraction" in aie.perf else 1.0
    return int(math.floor(pairs * frac + 1e-9))


def aie_matmul(n, k, m, fmt, device, *, tiles: int | None = None, plios: int | None = None) -> dict:
    """GEMM (n x k) @ (k x m) on ``tiles`` AIE tiles (None: the fastest power of two up to 64).

    ``plios`` (optional, with ``tiles``): the number of PL<->AIE stream pairs (one PL->AIE and one
    AIE->PL 64-bit PLIO each) the kernel uses, at most ``min(plio_count, plio_count_out)`` of the
    device and at most two per tile (a tile's two input stream channels, AM020). The operands are
    staged through memory tiles (AIE-ML) or broadcast by the stream switch to the tiles, so the
    stream count is a design choice apart from the tile count. Reported as ``plio`` in the result.
    """
    where = "aie_matmul"
    n, k, m = (_int(v, name, where) for v, name in ((n, "n"), (k, "k"), (m, "m")))
    f = _fmt(fmt, where)
    device = _device(device)
    aie = _unit(device, "AIE", where)
    cap = int(aie.resources["aie_tiles"].value) if "aie_tiles" in aie.resources else AIE_MAX_AUTO_TILES
    if plios is not None:
        if tiles is None:
            raise RlhlsError(f"{where}: parameter 'plios' needs 'tiles' as well")
        plios = _int(plios, "plios", where)
        pcap = int(min(_perf(aie, "plio_count", where), _perf(aie, "plio_count_out", where)))
        if plios > pcap or plios > 2 * tiles:
            raise RlhlsError(f"{where}: parameter 'plios' = {plios} must be <= {min(pcap, 2 * tiles)} "
                             f"(the {pcap} PLIO pairs of {device.id}, two per tile)")
    if tiles is not None:
        tiles = _int(tiles, "tiles", where)
        if tiles > cap:
            raise RlhlsError(f"{where}: parameter 'tiles' = {tiles} exceeds the {cap} AIE tiles of {device.id}")
        return _aie_one(n, k, m, f, device, tiles, where, plios)
    best = None
    t = 1
    while t <= min(cap, AIE_MAX_AUTO_TILES):
        c = _aie_one(n, k, m, f, device, t, where)
        if best is None or c["latency_us"] < best["latency_us"] - 1e-12:
            best = c
        t *= 2
    if best is None:
        raise RlhlsError(f"{where}: {device.id} has no AIE tiles")
    return best
