"""MAC-array compute element of the A2C traffic-signal seed (004: Fig. 3, Fig. 4, the FSM listing).

The seed's PL holds one compute element: ``macs`` multiply-accumulators working concurrently,
three data buffers (Input_0: one operand per MAC; Input_1: one operand shared by every MAC; the
Output buffer: one on-chip BRAM per MAC), and an 11-state FSM that the PS drives through
registers (``ps_control`` PS -> PL; ``pl_full`` and ``done`` PL -> PS). The network (Fig. 3) is
12x12 occupancy -> conv 2x2, 4 filters -> 484 -> fc 48 -> heads; the heads stay on the PS ("the
output feature map of the first fully connected layer is 48"). Five computation stages, two in
inference and three in back propagation, run on the element one after another.

Stages (B batch, C x H x W conv input, F filters of KH x KW, P = OH x OW output positions,
K = F*P fc inputs, M fc outputs, T = C*KH*KW taps). Each stage is ``rows`` Input_0 vectors (one
per MAC at a time, ``groups = ceil(rows / macs)``), ``cols`` Input_1 vectors (shared) and
``accumulations`` A products per output; ``iterations = groups * cols``, each producing ``macs``
results (one per BRAM)::

    stage            Input_0 (per MAC)     Input_1 (shared)       A      rows  cols  the design: A, groups x cols
    fwd_conv         filter w[f]           patch (b, pos)         T      F     B*P   4, 1 x 3872
    fwd_fc           column w[:, m]        activation h[b]        K      M     B     484, 12 x 32
    bwd_delta        row w[k, :]           gradient dy[b]         M      K     B     48, 121 x 32
    bwd_wgrad        h[:, k] over batch    dy[:, m] over batch    B      K     M     32, 121 x 48
    bwd_conv_wgrad   dz[:, f] (b, pos)     tap column (b, pos)    B*P    F     T     3872, 1 x 4

``bwd_wgrad`` is the seed's example: Input_0 holds the layer inputs of every episode of the batch,
Input_1 the output gradients fed to all MACs, the accumulation count is the batch, and the
iteration count is 48 x 484 / 4 = 5808. More MACs: fewer groups, fewer iterations (in the conv
stages only up to F MACs, one filter each; more idle on zero-padded groups).

In a training graph (``node_params``, ``node_stages``): the Conv2d and Dense nodes of the shared
trunk (the network the heads take their input from) map to one compute element (the same
parameters for all, so the build makes one component): ``conv.fwd`` -> fwd_conv, ``fc.fwd`` ->
fwd_fc, ``fc.bwd`` -> bwd_delta + bwd_wgrad, ``conv.bwd`` -> bwd_conv_wgrad; ``node_points`` costs
a node as the sum of its stages. The heads are left to the dense kernels (the design puts them on
the PS).

In training (``layer_ops``, host/backends.py ``PlanKernels``): each layer operation of a trunk node
is one program of the element holding that stage alone, packed from PlanKernels' arrays (``pack``;
a Conv2d comes lowered: x = im2col rows (B*P, T), w = (T, F)) and unpacked from ``out``
(``stage_matrix``): forward -> fwd_conv / fwd_fc, input_grad -> bwd_delta, weight_grad ->
bwd_wgrad / bwd_conv_wgrad (the bias gradient stays on the PS: returned as None). The node's
parameters fix the geometry (``op_sizes`` gives none); a call at another batch runs the element
sized for it. The conv layer's input gradient has no stage: ``run_op`` hands it to the generic
``dense_backward`` (the trunk's first layer never asks for it).

Arithmetic (bit for bit what ``vitis/include/rlhls_mac_array.h`` does): every MAC starts from
its output's initial value (the bias for the forward stages, else 0) and accumulates in order
a = 0 .. A-1, one rounding per operation (rl::mul / rl::add)::

    acc = Acc(init) or 0;  acc = Acc(acc + Acc(in0[a] * in1[a])) for a in order;  out = S(acc)

which is ``arith.dense``'s semantics (hls4ml's order, bias first): the model computes a stage as
one dense product (its fast exact paths), the C++ as the MACs' loop. So each stage equals the
dense kernels' models: fwd_fc = dense_forward, bwd_delta = dense_backward, bwd_wgrad =
weight_gradient's dW, the conv stages = ``arith.conv2d`` and the im2col weight gradient.

Buffer layouts (what the PS writes; ``program`` packs, ``results`` unpacks): Input_0 of a stage
is ``[group][a][mac]`` (MAC j of group g reads word (g*A + a)*macs + j: ``macs`` cyclic banks,
one read per MAC per cycle), zero-padded to whole groups; Input_1 ``[col][a]``; the initial
values ``[group][mac]``; results leave the BRAMs in iteration order, word it*macs + j of the
stage's output region, iteration it = col * groups + group.

The HLS top ``mac_array(prog, in0, in1, init, out, counters, trace)``: ``in0/in1/init/out``
are DRAM (m_axi), one region per stage (``layout``); ``prog`` holds one row of set-up
registers per stage, in the order they run (a row with accfreq 0 ends the program)::

    accfreq iternum repeat full_reg in0_addr in1_addr init_addr bias out_addr

``repeat`` = groups (iterations that share one Input_1 vector, the FSM's repeat_counter);
``full_reg`` the output-buffer fill (results per MAC) at which the PL asks for a transfer
(the PS sets ``out_depth``). Outputs: ``out``, ``counters`` (per prog row: iterations,
valid_in pulses per MAC, PS transfers, cycles) and ``trace`` (the FSM's first ``trace_depth``
state entries, -1 after the end; a debug capture like an ILA's).

FSM (states 0-10 of the listing; ``fsm_walk`` is the reference)::

    0 wait ps_control == 1 (the PS loaded the input buffers)    1 stage set-up (latch prog row)
    2 new iteration: addresses to the datapath                  3 load the first operands
    4 valid_in per accumulation, valid_last on the last         5 wait for the MAC pipeline
    6 write the results (one per BRAM), repeat_counter, next addresses
    7 transfer needed? (buffer at full_reg and iterations left) 8 pl_full, wait ps_control == 0
    9 last iteration?  (no: 2)                                  10 done, wait ps_control == 0 (-> 0)

Handshakes are four-phase: the PL raises ``pl_full`` / ``done`` only while ``ps_control`` is 1;
the PS answers by clearing ``ps_control`` (transfer complete / acknowledged) and sets it again
when ``pl_full`` falls (state 8) or with the next stage's start. The trace records each state
entered (a state that waits is one entry).

Cycle model (``cost``; the C++ counts the same per state, the ``cycles`` counter)::

    state 0   ps_latency + ceil(words loaded * word bytes / axi_bytes)     (the PS fills the buffers)
    1, 2, 6, 7, 9   1 cycle each;  3  LOAD_LATENCY (BRAM read);  4  A * ii;  5  mac_latency
    8   ps_latency + ceil(macs * full_reg * word bytes / axi_bytes)       (PS drains the BRAMs)
    10  ps_latency + ceil(macs * rest * word bytes / axi_bytes)           (PS reads the last results)

    stage = load + 1 + iterations * (A*ii + mac_latency + 6) + transfers * drain + read,
    transfers = (iterations - 1) // full_reg, rest = iterations - transfers * full_reg

Assumptions (not seed figures): one valid_in per cycle (ii = 1, the listing's state 4 loads the
next values every cycle); mac_latency defaults to MAC_LATENCY (float 4 + 4, fixed 3 + 1);
ps_latency and axi_bytes default to the device's PS<->PL link (1 us hand-off, one 128-bit
port: 16 bytes per PL cycle); each input buffer holds a whole stage (the largest: 23232 words of
Input_0 for the fc layer) and the PS fills it before the stage starts; an output BRAM holds
``out_depth`` = 1024 words (one BRAM36 at 32 bits). Iterations run one after another as the
listing has them (no overlap of iteration i+1's loads with iteration i's writes).

Choices where the seed is silent: the bias is the accumulator's initial value (Input buffer
``init``), so results equal the dense kernels; the bias gradients (a sum of dy over the batch,
48 + 4 values) stay on the PS with the heads; the conv layer is the first layer and needs no
input gradient, so there is no sixth stage (a conv backward that needs one is left to the dense
kernels); the C++ top runs the PS's side of the handshakes too (``rlmac::PsDriver``) so that the
FSM, its registers and the transfers run under g++ csim; on a board that driver is host code.
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import dense, im2col
from ..formats import FixedFormat, FloatFormat, parse_format
from .base import Array, Kernel, Param, check_formats, get_dev

__all__ = ["MacArray", "STAGES", "STAGE_IO", "REGS", "COUNTERS", "STATE_NAMES", "LOAD_LATENCY", "fsm_walk",
           "stage_cycles"]

STAGES = ("fwd_conv", "fwd_fc", "bwd_delta", "bwd_wgrad", "bwd_conv_wgrad")
# stage -> (operands the PS packs, the result it unpacks)
STAGE_IO = {
    "fwd_conv": (("x", "w", "b"), "z"),
    "fwd_fc": (("h", "w", "b"), "y"),
    "bwd_delta": (("dy", "w"), "dh"),
    "bwd_wgrad": (("h", "dy"), "dw"),
    "bwd_conv_wgrad": (("x", "dz"), "dw"),
}
REGS = ("accfreq", "iternum", "repeat", "full_reg", "in0_addr", "in1_addr", "init_addr", "bias", "out_addr")
COUNTERS = ("iterations", "valid_in", "transfers", "cycles")
STATE_NAMES = ("wait PS start", "stage set-up", "iteration start", "load", "valid_in / valid_last",
               "wait result", "write + repeat counter", "transfer check", "pl_full handshake",
               "last-iteration check", "PS acknowledgement")
LOAD_LATENCY = 2  # BRAM read: address, then data in the MAC input registers
REG_FMT = FixedFormat(32, 32, False)  # a 32-bit s_axilite register
COUNT_FMT = FixedFormat(48, 48, True)  # counters and trace entries (-1 = empty)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- the FSM

# the FSM's MAC pipeline (state 5) in cycles: a multiplier and an adder stage of the listing's design at its
# clock (assumed; cost.py's float depths 4 + 4, fixed 3 + 1 before its fixed-point depths were fitted to HLS
# schedules at 200 MHz, which are not this FSM's registers)
MAC_LATENCY = {"float": 8, "fixed": 4}


def _timing(p: dict) -> dict:
    storage = parse_format(p["storage"])
    cls = "float" if isinstance(storage, FloatFormat) else "fixed"
    lat = p["mac_latency"] or MAC_LATENCY[cls]
    return {"ii": p["ii"], "mac": lat, "ps": p["ps_latency"], "axi": p["axi_bytes"],
            "wb": _ceil(storage.bits, 8), "macs": p["macs"]}


def _xfer(t: dict, words: int) -> int:
    return t["ps"] + _ceil(words * t["wb"], t["axi"])


def fsm_walk(p: dict, rows: list[dict]):
    """The FSM of the listing as ``(state, cycles, row)`` per state entered, for the prog rows
    `rows` (dicts of REGS) run in order; ends in state 0 (waiting for the next phase)."""
    t = _timing(p)
    M = t["macs"]
    for i, r in enumerate(rows):
        A, I, R, F = r["accfreq"], r["iternum"], r["repeat"], r["full_reg"]
        words = R * A * M + (I // R) * A + (R * M if r["bias"] else 0)
        yield 0, _xfer(t, words), i
        yield 1, 1, i
        fill = 0
        for it in range(I):
            yield from ((2, 1, i), (3, LOAD_LATENCY, i), (4, A * t["ii"], i), (5, t["mac"], i), (6, 1, i))
            fill += 1
            yield 7, 1, i
            if fill == F and it + 1 < I:
                yield 8, _xfer(t, M * F), i
                fill = 0
            yield 9, 1, i
        yield 10, _xfer(t, M * fill), i
    yield 0, 0, len(rows)


def stage_cycles(p: dict, r: dict) -> dict:
    """Closed form of fsm_walk's cycles for one prog row (module docstring)."""
    t = _timing(p)
    M = t["macs"]
    A, I, R, F = r["accfreq"], r["iternum"], r["repeat"], r["full_reg"]
    transfers = (I - 1) // F
    rest = I - transfers * F
    load = _xfer(t, R * A * M + (I // R) * A + (R * M if r["bias"] else 0))
    compute = 1 + I * (A * t["ii"] + t["mac"] + 6)
    xfer = transfers * _xfer(t, M * F) + _xfer(t, M * rest)
    return {"transfers": transfers, "load_cycles": load, "compute_cycles": compute, "transfer_cycles": xfer,
            "cycles": load + compute + xfer}


# ----------------------------------------------------------------------------- the kernel

class MacArray(Kernel):
    name = "mac_array"
    summary = ("seed 004's compute element: macs MACs (Input_0 per MAC, Input_1 shared, one output BRAM "
               "per MAC), 11-state FSM driven by PS handshakes, five conv/fc stages of the A2C trunk")
    source = "seed 004 (A2C traffic-signal control): Fig. 3, Fig. 4, the FSM listing, the computation stages"
    template = "mac_array.cpp.j2"
    units = ("PL",)
    implements = ("mm.fwd", "mm.bwd")
    generic = False
    replaces = ("dense_forward", "dense_backward", "weight_gradient")
    params = (
        Param("macs", "int", 4, "MAC units working concurrently (the seed: 4)", min=1),
        Param("batch", "int", 32, "batch B of the stage layouts (episodes per update)", min=1),
        Param("in_shape", "ints", [1, 12, 12], "conv input C,H,W (the seed: one 12x12 occupancy map)", min=1),
        Param("filters", "int", 4, "conv filters F", min=1),
        Param("kernel", "ints", [2, 2], "conv kernel KH,KW", min=1),
        Param("stride", "int", 1, "conv stride", min=1),
        Param("fc_out", "int", 48, "fc outputs M (the fc input is the flattened conv output)", min=1),
        Param("storage", "format", "fp32", "format of every buffer word (operands and results)"),
        Param("acc", "format", "fp32", "MAC accumulator format"),
        Param("out_depth", "int", 1024, "words per output BRAM (full_reg the PS sets)", min=1),
        Param("ii", "int", 1, "cycles between valid_in pulses (state 4)", min=1),
        Param("mac_latency", "int", 0, "cycles from valid_last to the result (state 5); "
              "0: MAC_LATENCY of the format", min=0),
        Param("ps_latency", "int", 100, "cycles the PS takes to answer a handshake (1 us at 100 MHz)", min=0),
        Param("axi_bytes", "int", 16, "bytes per PL cycle between DRAM and the buffers (128-bit AXI)", min=1),
        Param("clock_mhz", "float", 100.0, "PL clock (MHz)", min=1e-3),
        Param("trace_depth", "int", 256, "FSM state entries the trace output captures", min=1),
    )
    inputs = ("prog", "in0", "in1", "init")
    outputs = ("out", "counters", "trace")

    # -- parameters and geometry
    def validate(self, p):
        check_formats(self.name, p)
        if len(p["in_shape"]) != 3:
            raise self._err(f"parameter 'in_shape' = {p['in_shape']} must be C,H,W (three integers)")
        if len(p["kernel"]) != 2:
            raise self._err(f"parameter 'kernel' = {p['kernel']} must be KH,KW (two integers)")
        _, h, w = p["in_shape"]
        kh, kw = p["kernel"]
        if kh > h or kw > w:
            raise self._err(f"parameter 'kernel' = {kh}x{kw} does not fit the {h}x{w} input ('in_shape')")

    def formats(self, p):
        fm = super().formats(p)
        fm.update(reg=REG_FMT, count=COUNT_FMT)
        return fm

    def geometry(self, p) -> dict:
        c, h, w = p["in_shape"]
        kh, kw = p["kernel"]
        s = p["stride"]
        oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
        f = p["filters"]
        return {"B": p["batch"], "C": c, "H": h, "W": w, "F": f, "KH": kh, "KW": kw, "S": s, "OH": oh, "OW": ow,
                "P": oh * ow, "T": c * kh * kw, "K": f * oh * ow, "M": p["fc_out"]}

    def operand_shapes(self, p, stage: str) -> dict:
        """{operand or result name: shape} of a stage."""
        g = self._stage_check(p, stage)
        B, C, H, W, F, KH, KW, OH, OW, K, M = (g[k] for k in ("B", "C", "H", "W", "F", "KH", "KW", "OH", "OW",
                                                              "K", "M"))
        return {
            "fwd_conv": {"x": (B, C, H, W), "w": (F, C, KH, KW), "b": (F,), "z": (B, F, OH, OW)},
            "fwd_fc": {"h": (B, K), "w": (K, M), "b": (M,), "y": (B, M)},
            "bwd_delta": {"dy": (B, M), "w": (K, M), "dh": (B, K)},
            "bwd_wgrad": {"h": (B, K), "dy": (B, M), "dw": (K, M)},
            "bwd_conv_wgrad": {"x": (B, C, H, W), "dz": (B, F, OH, OW), "dw": (F, C, KH, KW)},
        }[stage]

    def _stage_check(self, p, stage):
        if stage not in STAGES:
            raise self._err(f"unknown stage {stage!r} (expected one of {', '.join(STAGES)})")
        return self.geometry(p)

    def stage_table(self, p) -> list[dict]:
        """Per stage: rows / cols / groups (= repeat), accumulations, iterations and buffer words."""
        g = self.geometry(p)
        M = p["macs"]
        dims = {"fwd_conv": (g["F"], g["B"] * g["P"], g["T"], True),
                "fwd_fc": (g["M"], g["B"], g["K"], True),
                "bwd_delta": (g["K"], g["B"], g["M"], False),
                "bwd_wgrad": (g["K"], g["M"], g["B"], False),
                "bwd_conv_wgrad": (g["F"], g["T"], g["B"] * g["P"], False)}
        out = []
        for name in STAGES:
            rows, cols, A, bias = dims[name]
            G = _ceil(rows, M)
            out.append({"name": name, "rows": rows, "cols": cols, "groups": G, "accumulations": A,
                        "iterations": G * cols, "bias": bias, "in0_words": G * A * M, "in1_words": cols * A,
                        "init_words": G * M if bias else 0, "out_words": G * cols * M})
        return out

    def layout(self, p) -> dict:
        """DRAM regions per stage (word offsets), DRAM sizes and on-chip buffer depths."""
        table = self.stage_table(p)
        off = {"in0": 0, "in1": 0, "init": 0, "out": 0}
        regions = {}
        for s in table:
            regions[s["name"]] = dict(off)
            for key in off:
                off[key] += s[f"{key}_words"]
        return {"regions": regions, "words": {k: max(1, v) for k, v in off.items()},
                "depth": {k: max(1, max(s[f"{k}_words"] for s in table)) for k in ("in0", "in1", "init")}
                | {"out": p["out_depth"]}}

    # -- arrays of the HLS top
    def arrays(self, p):
        L = self.layout(p)
        w = L["words"]
        return ([Array("prog", (len(STAGES), len(REGS)), "reg"), Array("in0", (w["in0"],), "storage"),
                 Array("in1", (w["in1"],), "storage"), Array("init", (w["init"],), "storage")],
                [Array("out", (w["out"],), "storage"), Array("counters", (len(STAGES), len(COUNTERS)), "count"),
                 Array("trace", (p["trace_depth"],), "count")])

    def cpp_ints(self, p):
        L = self.layout(p)
        t = _timing(p)
        return {"MACS": p["macs"], "NSTAGE": len(STAGES), "TRACE": p["trace_depth"],
                "IN0_WORDS": L["words"]["in0"], "IN1_WORDS": L["words"]["in1"], "INIT_WORDS": L["words"]["init"],
                "OUT_WORDS": L["words"]["out"], "IN0_DEPTH": L["depth"]["in0"], "IN1_DEPTH": L["depth"]["in1"],
                "INIT_DEPTH": L["depth"]["init"], "OUT_DEPTH": p["out_depth"], "II": t["ii"], "MAC_LAT": t["mac"],
                "PS_LAT": t["ps"], "AXI_BYTES": t["axi"], "WORD_BYTES": t["wb"]}

    # -- the PS's side: buffer layouts
    def _vectors(self, p, stage, ops):
        """(Input_0 vectors (rows, A), Input_1 vectors (cols, A), initial values (rows,) or None)."""
        g = self.geometry(p)
        kh, kw, s = g["KH"], g["KW"], g["S"]
        if stage == "fwd_conv":
            return ops["w"].reshape(g["F"], g["T"]), im2col(ops["x"], kh, kw, s), ops["b"]
        if stage == "fwd_fc":
            return ops["w"].T, ops["h"], ops["b"]
        if stage == "bwd_delta":
            return ops["w"], ops["dy"], None
        if stage == "bwd_wgrad":
            return ops["h"].T, ops["dy"].T, None
        dz = ops["dz"].transpose(1, 0, 2, 3).reshape(g["F"], g["B"] * g["P"])  # (f; b, pos)
        return dz, im2col(ops["x"], kh, kw, s).T, None

    def _operands(self, p, stage, ops) -> dict:
        shapes = self.operand_shapes(p, stage)
        names, _ = STAGE_IO[stage]
        if not isinstance(ops, dict):
            raise self._err(f"stage {stage!r}: operands must be a dict of {', '.join(names)}")
        extra = set(ops) - set(names)
        if extra:
            raise self._err(f"stage {stage!r}: unexpected operand(s) {sorted(extra)} (expected {', '.join(names)})")
        out = {}
        for n in names:
            if n not in ops:
                raise self._err(f"stage {stage!r}: missing operand {n!r} (expected {', '.join(names)})")
            v = np.asarray(ops[n], dtype=np.float64)
            if v.shape != shapes[n]:
                raise self._err(f"stage {stage!r}: operand {n!r} has shape {v.shape}, expected {shapes[n]}")
            out[n] = v
        return out

    def program(self, p, ops: dict) -> dict:
        """The top's inputs for the stages of `ops` ({stage: {operand: array}}), run in that order:
        every stage's operands packed into its DRAM regions and its prog row (the PS's work)."""
        self._stage_count(ops)
        return self.pack(p, {stage: self._vectors(p, stage, self._operands(p, stage, o)) for stage, o in ops.items()})

    def _stage_count(self, stages) -> None:
        if not stages:
            raise self._err("program: no stage given (expected operands for one or more of "
                            f"{', '.join(STAGES)})")
        if len(stages) > len(STAGES):
            raise self._err(f"program: {len(stages)} stages, at most {len(STAGES)}")

    def pack(self, p, vectors: dict) -> dict:
        """The top's inputs for ``{stage: (Input_0 vectors (rows, A), Input_1 vectors (cols, A),
        initial values (rows,) or None)}``, run in that order (``program`` without the layer shapes)."""
        self._stage_count(vectors)
        L = self.layout(p)
        table = {s["name"]: s for s in self.stage_table(p)}
        M = p["macs"]
        ins, _ = self.arrays(p)
        arr = {a.name: np.zeros(a.shape) for a in ins}
        for row, (stage, (v0, v1, init)) in enumerate(vectors.items()):
            self._stage_check(p, stage)
            s, reg = table[stage], L["regions"][stage]
            G, A = s["groups"], s["accumulations"]
            pad = np.zeros((G * M, A))
            pad[:s["rows"]] = v0
            arr["in0"][reg["in0"]:reg["in0"] + s["in0_words"]] = pad.reshape(G, M, A).transpose(0, 2, 1).ravel()
            arr["in1"][reg["in1"]:reg["in1"] + s["in1_words"]] = np.ascontiguousarray(v1).ravel()
            if init is not None:
                b = np.zeros(G * M)
                b[:s["rows"]] = init
                arr["init"][reg["init"]:reg["init"] + s["init_words"]] = b
            arr["prog"][row] = [A, s["iterations"], G, p["out_depth"], reg["in0"], reg["in1"], reg["init"],
                                int(s["bias"]), reg["out"]]
        return arr

    def stage_matrix(self, p, stage, out) -> np.ndarray:
        """A stage's results from the top's ``out`` as (cols, rows): Input_1 vector by Input_0 vector."""
        self._stage_check(p, stage)
        s = {t["name"]: t for t in self.stage_table(p)}[stage]
        o = self.layout(p)["regions"][stage]["out"]
        out = np.asarray(out, dtype=np.float64)
        return out[o:o + s["out_words"]].reshape(s["cols"], s["groups"] * p["macs"])[:, :s["rows"]]

    def results(self, p, stages, out) -> dict:
        """{stage: {result name: array}} from the top's ``out`` (the PS's unpacking)."""
        g = self.geometry(p)
        res = {}
        for stage in stages:
            R = self.stage_matrix(p, stage, out)
            if stage == "fwd_conv":
                v = R.reshape(g["B"], g["OH"], g["OW"], g["F"]).transpose(0, 3, 1, 2)
            elif stage == "bwd_wgrad":
                v = R.T
            elif stage == "bwd_conv_wgrad":
                v = R.T.reshape(g["F"], g["C"], g["KH"], g["KW"])
            else:
                v = R
            res[stage] = {STAGE_IO[stage][1]: np.ascontiguousarray(v)}
        return res

    def run(self, p, ops: dict, call=None) -> dict:
        """Pack `ops`, run the top (``call(kernel_name, p, **arrays)``, e.g. a backend's ``call``;
        default the model) and unpack: ``{'results': {stage: {name: array}}, 'counters': {stage:
        {counter: int}}, 'trace': [states], 'raw': top outputs}``."""
        arrays = self.program(p, ops)
        raw = call(self.name, p, **arrays) if call is not None else self.model(p, **arrays)
        stages = list(ops)
        cnt = np.asarray(raw["counters"])
        tr = np.asarray(raw["trace"])
        return {"results": self.results(p, stages, raw["out"]),
                "counters": {s: {c: int(cnt[i, j]) for j, c in enumerate(COUNTERS)} for i, s in enumerate(stages)},
                "trace": [int(v) for v in tr if v >= 0], "raw": raw}

    def random_operands(self, p, rng, stages=STAGES) -> dict:
        s = self.formats(p)["storage"]
        out = {}
        for stage in stages:
            shapes = self.operand_shapes(p, stage)
            out[stage] = {n: s.quantize(rng.standard_normal(shapes[n]) * 0.5) for n in STAGE_IO[stage][0]}
        return out

    def random_inputs(self, p, rng):
        return self.program(p, self.random_operands(p, rng))

    # -- the PL: model
    def prog_rows(self, p, prog) -> list[dict]:
        """The prog rows the FSM runs (up to the first with accfreq 0), checked."""
        L = self.layout(p)
        prog = np.asarray(prog, dtype=np.float64)
        M = p["macs"]
        rows = []
        for i, raw in enumerate(prog):
            where = f"prog row {i}"
            if np.any(raw != np.floor(raw)) or np.any(raw < 0) or np.any(raw >= 2 ** 32):
                raise self._err(f"{where}: registers must be integers in 0..2^32-1, got {raw.tolist()}")
            r = {name: int(raw[j]) for j, name in enumerate(REGS)}
            if r["accfreq"] == 0:
                break
            A, I, R, F = r["accfreq"], r["iternum"], r["repeat"], r["full_reg"]
            if I < 1 or R < 1 or I % R:
                raise self._err(f"{where}: iternum = {I} must be a positive multiple of repeat = {R}")
            if not 1 <= F <= p["out_depth"]:
                raise self._err(f"{where}: full_reg = {F} must be in 1..{p['out_depth']} (out_depth)")
            if r["bias"] not in (0, 1):
                raise self._err(f"{where}: bias = {r['bias']} must be 0 or 1")
            need = {"in0": R * A * M, "in1": (I // R) * A, "init": R * M if r["bias"] else 0, "out": I * M}
            for buf, words in need.items():
                addr = r[f"{buf}_addr"]
                if buf != "out" and words > L["depth"][buf]:
                    raise self._err(f"{where}: {words} words of {buf} exceed its buffer of {L['depth'][buf]} words")
                if words and addr + words > L["words"][buf]:
                    raise self._err(f"{where}: {buf}_addr = {addr} + {words} words runs past the {buf} array "
                                    f"({L['words'][buf]} words)")
            rows.append(r)
        return rows

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        s, acc = fm["storage"], fm["acc"]
        M = p["macs"]
        rows = self.prog_rows(p, a["prog"])
        in0, in1, init = (s.quantize(a[k]) for k in ("in0", "in1", "init"))
        _, outs = self.arrays(p)
        out = np.zeros(outs[0].shape)
        counters = np.zeros(outs[1].shape)
        for i, r in enumerate(rows):
            A, I, R = r["accfreq"], r["iternum"], r["repeat"]
            cols = I // R
            # MAC j of group g against shared vector c is column g*M + j of one dense product
            # (bias first, a = 0..A-1 in order: the MAC's own accumulation); rows = iterations by col
            v0 = in0[r["in0_addr"]:r["in0_addr"] + R * A * M].reshape(R, A, M).transpose(1, 0, 2).reshape(A, R * M)
            v1 = in1[r["in1_addr"]:r["in1_addr"] + cols * A].reshape(cols, A)
            b = init[r["init_addr"]:r["init_addr"] + R * M] if r["bias"] else None
            y = dense(v1, v0, b, in_fmt=s, w_fmt=s, acc_fmt=acc, out_fmt=s)
            out[r["out_addr"]:r["out_addr"] + I * M] = y.ravel()  # iteration = col * R + group
            c = stage_cycles(p, r)
            counters[i] = [I, I * A, c["transfers"], c["cycles"]]
        trace = np.full(p["trace_depth"], -1.0)
        for n, (state, _, _) in enumerate(fsm_walk(p, rows)):
            if n >= p["trace_depth"]:
                break
            trace[n] = state
        return {"out": out, "counters": counters, "trace": trace}

    # -- a training-graph node
    @staticmethod
    def _trunk_nets(ctx) -> set:
        # the seed offloads the shared trunk; the heads after its 48 outputs stay on the PS
        return {n.input_from for n in ctx.design.networks if n.input_from}

    def _conv_fc(self, ctx, net):
        mm = [l for l in net.layers if l.is_mm]
        kinds = [l.kind for l in mm]
        if kinds != ["Conv2d", "Dense"]:
            raise self._err(f"design '{ctx.design.name}': network '{net.name}' has matrix multiplies "
                            f"{kinds}; the MAC array's five stages are the seed's trunk (expected Conv2d, Dense)")
        conv, fc = mm
        if fc.in_shape[0] != math.prod(conv.out_shape):
            raise self._err(f"design '{ctx.design.name}': network '{net.name}': layer '{fc.name}' takes "
                            f"{fc.in_shape[0]} inputs, not the {math.prod(conv.out_shape)} outputs of '{conv.name}'")
        return conv, fc

    def node_stages(self, node, ctx) -> list[str] | None:
        """The stages that compute `node`, or None when the MAC array does not take it."""
        layer, net = ctx.layer(node), ctx.network(node)
        if layer is None or net is None or not layer.is_mm or net.name not in self._trunk_nets(ctx):
            return None
        conv, _ = self._conv_fc(ctx, net)
        if node.phase in ("fwd", "tfwd"):
            return ["fwd_conv" if layer is conv else "fwd_fc"]
        if node.phase != "bwd":
            return None
        if layer is conv:
            return None if ctx.needs_input_grad(node) else ["bwd_conv_wgrad"]
        return (["bwd_delta"] if ctx.needs_input_grad(node) else []) + ["bwd_wgrad"]

    def node_params(self, node, ctx):
        if self.node_stages(node, ctx) is None:
            return None
        conv, fc = self._conv_fc(ctx, ctx.network(node))
        storage, acc = ctx.formats(self.name, "PL")
        clock = ctx.clock_mhz("PL")
        p = {"batch": ctx.batch, "in_shape": list(conv.in_shape), "filters": conv.out_channels,
             "kernel": list(conv.kernel), "stride": conv.stride, "fc_out": fc.out_shape[0],
             "storage": storage, "acc": acc, "clock_mhz": clock}
        link = next((l for l in ctx.device.links if (l.src, l.dst) == ("PS", "PL")), None)
        if link is not None:  # the catalogue's hand-off latency and bytes per PL cycle (its figure's clock)
            p["ps_latency"] = math.ceil(link.latency_us.value * clock)
            p["axi_bytes"] = max(1, round(link.bytes_per_us.value / ctx.device.units["PL"].clock_mhz.value))
        p.update(ctx.spec_params(self))  # the design's own choices (macs, out_depth, ...) win
        return p

    def node_points(self, node, ctx, unit):
        p = self.resolve(self.node_params(node, ctx))
        return [(f"macs{p['macs']}", self.cost(p, unit=unit, device=ctx.device, stages=self.node_stages(node, ctx)))]

    # -- in training (host/backends.py PlanKernels): a trunk layer's operations as stages
    layer_ops = ("forward", "input_grad", "weight_grad")

    def op_sizes(self, op, **arrays):
        # the node's parameters fix the geometry; the batch of a call is checked in run_op
        return {}

    def op_stage(self, op, p, **arrays):
        """``(stage or None, (Input_0, Input_1, init), batch)`` of a layer operation in PlanKernels'
        arrays (a Conv2d lowered: x = im2col rows (B*P, T), w = (T, F), dy = (B*P, F)); stage None
        for the conv layer's input gradient, which no stage computes."""
        g = self.geometry(p)
        fc, conv = (g["K"], g["M"]), (g["T"], g["F"])
        if op == "forward":
            x, w, b = arrays["x"], arrays["w"], arrays.get("b")
            shape, rows, v = w.shape, x.shape[0], (w.T, x, b)
            stage = "fwd_fc" if shape == fc else "fwd_conv" if shape == conv else None
        elif op == "input_grad":
            dy, w = arrays["dy"], arrays["w"]
            shape, rows, v = w.shape, dy.shape[0], (w, dy, None)
            stage = "bwd_delta" if shape == fc else None
        elif op == "weight_grad":
            x, dy = arrays["x"], arrays["dy"]
            shape, rows, v = (x.shape[1], dy.shape[1]), x.shape[0], (x.T, dy.T, None)
            stage = "bwd_wgrad" if shape == fc else "bwd_conv_wgrad" if shape == conv else None
            if stage == "bwd_conv_wgrad":
                v = (dy.T, x.T, None)  # Input_0: dz per filter over (b, pos); Input_1: a tap column
        else:
            raise self._err(f"layer operation {op!r}: expected one of {', '.join(self.layer_ops)}")
        if shape not in (fc, conv):
            raise self._err(f"{op}: weights of shape {shape} are neither the conv layer's {conv} nor the fc "
                            f"layer's {fc} (parameters in_shape={p['in_shape']}, filters={p['filters']}, "
                            f"kernel={p['kernel']}, fc_out={p['fc_out']})")
        per = 1 if shape == fc else g["P"]
        if rows % per:
            raise self._err(f"{op}: {rows} im2col rows are not whole samples of {per} conv positions")
        return stage, v, rows // per

    def run_op(self, op, backend, p, **arrays):
        """One layer operation as one program of the element (its stage alone), through
        ``backend.call``; a call at another batch than `p`'s runs the element sized for it. The conv
        layer's input gradient has no stage: the generic ``dense_backward`` computes it."""
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items() if v is not None}
        stage, vec, batch = self.op_stage(op, p, **arrays)
        if stage is None:
            dy, w = arrays["dy"], arrays["w"]
            q = {"n": dy.shape[0], "k": w.shape[0], "m": w.shape[1], "storage": p["storage"], "acc": p["acc"]}
            return backend.call("dense_backward", q, dy=dy, w=w)["dx"]
        if batch != p["batch"]:
            p = self.resolve({**p, "batch": batch})
        R = self.stage_matrix(p, stage, backend.call(self.name, p, **self.pack(p, {stage: vec}))["out"])
        if op == "weight_grad":  # the bias gradients stay on the PS (module docstring)
            return (np.ascontiguousarray(R.T) if stage == "bwd_wgrad" else np.ascontiguousarray(R)), None
        return np.ascontiguousarray(R)

    # -- cost
    def resources(self, p, device=None) -> dict:
        from . import cost as C
        dev = get_dev(device)
        fm = self.formats(p)
        w, a = fm["storage"].bits, fm["acc"].bits
        M = p["macs"]
        L = self.layout(p)["depth"]
        parts = [C.bram36_for(L["in0"], w, M), C.bram36_for(L["in1"], w), C.bram36_for(L["init"], w, M),
                 C.bram36_for(M * L["out"], w, M)]
        return {"lut": C.LUT_BASE + M * C.LUT_PER_ACC_BIT * a + sum(x[1] for x in parts),
                "ff": C.FF_BASE + M * C.FF_PER_ACC_BIT * a,
                "dsp": math.ceil(M * C.dsp_per_mac(dev, fm["storage"]) - 1e-9),
                "bram36": sum(x[0] for x in parts), "uram": 0, "aie_tiles": 0}

    def cost(self, p, unit="PL", device=None, stages=None):
        """The FSM's cycles per stage (module docstring), for `stages` (default all five, in order)."""
        if unit != "PL":
            raise self._err(f"unit {unit!r}: the MAC array is PL logic (expected PL)")
        from . import cost as C

        stages = list(STAGES if stages is None else stages)
        table = {s["name"]: s for s in self.stage_table(p)}
        wb = _ceil(self.formats(p)["storage"].bits, 8)
        rows, total, nbytes = [], 0, 0
        for name in stages:
            self._stage_check(p, name)
            s = table[name]
            r = {"accfreq": s["accumulations"], "iternum": s["iterations"], "repeat": s["groups"],
                 "full_reg": p["out_depth"], "bias": int(s["bias"])}
            c = stage_cycles(p, r)
            rows.append({"name": name, "iterations": s["iterations"], "accumulations": s["accumulations"],
                         "groups": s["groups"], **c, "latency_us": c["cycles"] / p["clock_mhz"]})
            total += c["cycles"]
            nbytes += wb * (s["in0_words"] + s["in1_words"] + s["init_words"] + s["out_words"])
        return {"cycles": total, "latency_us": total / p["clock_mhz"], "memory_bytes": nbytes,
                "resources": self.resources(p, device), "stages": rows,
                "iterations": sum(r["iterations"] for r in rows),
                "source": f"mac_array FSM model: {p['macs']} MACs at {p['clock_mhz']:g} MHz, {len(rows)} stage(s) "
                          "(seed 004 FSM listing; timing assumptions in designs/kernels/mac_array.py)",
                "provenance": C.provenance(
                    cycles="seed: the FSM listing of seed 004 per stage (per-state timings assumed, mac_array.py)",
                    latency_us="derived: cycles / clock",
                    lut="assumed: LUT_BASE + per-MAC LUT per accumulator bit (cost.py) + LUTRAM banks",
                    ff="assumed: FF_BASE + per-MAC FF per accumulator bit (cost.py)",
                    dsp="derived: MACs x dsp_per_mac (catalogue)",
                    bram36="derived: the input, init and output buffers in block RAM")}
