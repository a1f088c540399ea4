"""Hardware-aware mixed precision (AP-DRL §IV-D, Algorithm 1, Fig. 9-10, Table II) on the host.

Every node of the training graph computes in the format of the unit the plan assigns it
(``plan['assignment']``: ``q.fc1.fwd`` / ``q.fc1.tfwd`` / ``q.fc1.bwd`` / ``q.fc1.upd`` /
``loss`` -> PS | PL | AIE):

======  ==================================  =================  ==============  ==================
unit    layer arithmetic                    master weights     loss scaling    model
======  ==================================  =================  ==============  ==================
PS      FP32 storage (``formats['ps']``)    FP32               no              float32 tensors,
                                                                               float32 BLAS
                                                                               (``ps_math``)
PL      FP16 storage, FP32 accumulation     FP32 (backup,      dynamic         ``arith.dense``
        (``formats['pl']``/``['pl_acc']``)  Fig. 9)                            bit-exact (hls4ml
                                                                               order)
AIE     BF16 storage, FP32 accumulation     none: weights      no (Table II)   ``arith.dense``
        (``formats['aie']``/``['aie_acc']``) kept in BF16                      bit-exact
======  ==================================  =================  ==============  ==================

PS model (``MixedPrecisionArgs.ps_math``): the Arm cores run ordinary FP32 library code, whose
summation order no hardware spec fixes. ``float32`` (the default): a PS layer computes as such
code does, in float32 -- float32 tensors (inputs, weights read as float32 copies of the FP32
masters, outputs, gradients), float32 BLAS products and sums, the bias added and the activation
applied in place on the matmul's result, activations and their derivatives in float32 (numpy's
float32 tanh / exp), bias gradients as float32 column sums; no round trips through float64
between PS nodes. Its bits are deterministic on a given machine and BLAS thread count (the runs
here: OpenBLAS, one thread); the BLAS's summation order, and so the last bits, are not fixed
across CPUs or BLAS builds. ``float64`` (``--set ps_math=float64``; the earlier default,
docs/benchmarks/ dates its results): every tensor rounded to FP32, products and sums in float64 BLAS,
activations in float64 rounded to FP32. Both model FP32 storage; float32 sums model the PS at least as
faithfully. The update node on the PS steps the optimizer in the gradients' precision
(host/optim.py): float32 state and float32 operations with ``float32``, float64 operations with
FP32-rounded state with ``float64``. PL and AIE layers are the kernels' bit-exact emulation
through ``Network`` layers with ``Precision(storage, acc)``, the same bits under either
``ps_math`` (a PS node's float32 output reaches them through the same FP16 / BF16 conversion;
a PS forward's float32 cache is read as float64 by a PL / AIE backward).

Conversions (Fig. 10: "FP32+FP16 for nodes interfacing with PS, BF16+FP16 for AIE interactions").
Wherever a tensor crosses from a node on one unit to a node on another (activation of layer i ->
layer i+1, forward -> loss, loss gradient -> last backward, gradient of layer i+1 -> layer i) it
is quantized to the *receiving* unit's storage format (``MixedPrecision.convert``; counted per
edge kind, and values that were finite but overflow the receiving format are counted as
``conv_overflows``). Weights are converted on the fly to the format of the node that reads them
("Convert BF16/FP32 to FP16", Algorithm 1 line 5): a PL node reads FP16 copies of the FP32
master. Saved forward inputs reach a backward node on another unit converted the same way (the
layer quantizes them to its storage format).

Weights. A layer's parameters are stored in its *master format*: BF16 when its forward or
backward node runs on the AIE (Algorithm 1 lines 2-3: all of an AIE node's work in BF16, no
backup; Table II), else FP32. The update node (PS or PL; optimizer steps are not matrix
multiplies, so never on the AIE) unscales the gradient in FP32, steps Adam (moments kept in
FP32) and rounds the new weights to the master format (line 9). The target network's weights are
copies of the online ones in the same format.

Dynamic loss scaling (Fig. 9), active when any backward or loss node runs on the PL (an FP16
gradient path): the loss gradient is multiplied by ``scale`` (a power of two, exact) before the
backward pass; after it every gradient is checked; any Inf / NaN -> the step is **skipped**
(weights and optimizer untouched), ``scale *= 1/2`` (never below 1); otherwise the gradients are
divided by ``scale`` and applied, and after ``loss_scale_growth_interval`` consecutive good steps
``scale *= 2`` (at most 2**24). Defaults (design hyperparameters): initial scale 2**15, growth
interval 2000 (PyTorch AMP / Micikevicius et al.; the seed is silent).

Quantization delay T_d (Algorithm 1's input, ``quantization_delay``): the first T_d gradient
steps run every node in FP32 (as the PS) with no loss scaling; FP16 and BF16 start at step
T_d + 1 (the weights are then rounded to their master formats).

Acting (the per-env-step Q / policy inference) runs on the PS in FP32 (Fig. 10: "PS (FP32): Env
Step + Inference") whatever the plan says about the training nodes (``ps_forward``, with the
run's ``ps_math``).

``precision='fp32'`` is the non-quantized baseline of AP-DRL §V-B: every node on the PS.

Several networks, one training step (the API the trainers use):

- One ``MixedPrecision`` per graph instance (``q``; ``policy`` + ``value``; ``actor``, ``critic``
  and ``critic@pi``, the critic run again on mu(s) for DDPG's actor loss). ``target=False``: the
  instance has no target copy (no ``tfwd`` nodes); ``update=False`` + ``master_of=other``: it
  has no update nodes and reads ``other``'s weights in ``other``'s master formats.
- ``MixedPrecision.link(a, b, ...)``: instances behind one loss share one loss scaler (enabled
  when any of them has an FP16 gradient node; a non-finite gradient anywhere skips the whole
  step) and one step count (quantization delay); ``a.apply`` then also takes b's parameters
  (view layer keys ``'<inst>.<layer>'``) and rounds them to b's master formats.
- ``backward(dy, need_input_grad=True)`` returns the gradient of the network input too (in the
  storage of the first layer's backward node), e.g. dQ/da of DDPG's critic; ``param_grads=False``
  computes only that, as the graph's ``critic@pi`` backward (no weight gradients).
- ``apply(..., max_grad_norm=c)`` clips the unscaled FP32 gradients to global L2 norm ``c``
  before the optimizer (A2C; the norm before clipping is left in ``grad_norm``).
- ``unit(node)`` is the unit any plan node computes on now (the PS during the delay).

Host-speed notes (results unchanged; the float64 PS path's): a layer's input is converted once at a unit boundary and
then trusted to be in the unit's storage (``Layer.forward(..., stored=True)``); PS layers read
parameters that ``round_masters`` left in a master format, and tensors a PS node stored (outputs,
gradients; ReLU / Flatten results of FP32 values are FP32 values), without rounding them again;
FP32 rounding of optimizer state and masters is done in place; an instance with any PL/AIE node
calls ``rlhls.flow.native.install()`` (the compiled sequential float32 sum of ``arith.dense``, with
FMA where the FP16 / BF16 products are exact, and the roundings; ``RLHLS_NATIVE=0`` keeps the numpy
path); a PL / AIE Dense rounds its weights once per forward and its backward reuses them; the emu
backend's PL update nodes step each layer array in place (``PlanKernels.update_inplace``), and
neither those parameters nor their optimizer state are rounded to FP32 again; with ``ps_math``
float32 and the emu models (``f32``), PL / AIE tensors are float32 arrays from one layer to the
next (FP16 / BF16 values are float32 values; dense's float32 sums write them directly, a boundary
conversion rounds float32 to float32 in one pass), float64 only where a caller receives them or
an activation other than ReLU / Identity computes in float64.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs import formats
from rlhls.designs.arith import col2im, im2col
from rlhls.designs.formats import parse_format
from rlhls.designs.network import Precision, _sum_rows

from .hyperparams import HyperParams, hp

__all__ = ["MixedPrecisionArgs", "PS_MATHS", "COUNTS", "count_columns", "ps_forward", "UNITS", "PRECISIONS",
           "LossScaler", "MixedPrecision", "unit_precisions", "default_plan"]

UNITS = ("PS", "PL", "AIE")
PRECISIONS = ("fp32", "mixed")
PS_MATHS = ("float32", "float64")  # MixedPrecisionArgs.ps_math
MAX_SCALE = 2.0 ** 24
COUNTS = ("skipped_steps", "scale_shrinks", "scale_grows", "grad_overflows", "conv_overflows")  # metrics.csv
# Arrays known to hold FP32 values, by id (weak: a dead array's id may be reused): parameters
# round_masters left in their master format (FP32 or BF16) and tensors a PS node stored (outputs,
# gradients). Their FP32 rounding, an identity, is skipped. Whatever changes parameters in place
# (optimizer, Polyak step) is followed by round_masters; set_params makes new arrays, rounded on
# use; stored tensors are not changed in place (clipping works on copies).
_ROUNDED: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def _fp32(a: np.ndarray) -> np.ndarray:
    """FP32(a) as float64 values; arrays in _ROUNDED are returned as they are."""
    if _ROUNDED.get(id(a)) is a:
        return a
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64)
    _ROUNDED[id(y)] = y
    return y


def _fp32_inplace(a: np.ndarray) -> None:
    """a[...] = FP32(a) without a float64 temporary."""
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(a, a.astype(np.float32))


def _finite_sum(a) -> bool:
    """True when sum(a) is finite: then no element is Inf / NaN (one pass, no temporaries)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.sum(a)))


def _closed(layer) -> bool:
    """Layers whose float64 result of FP32 inputs is FP32 again (ReLU, Identity, Flatten)."""
    return layer.kind == "Flatten" or getattr(layer, "_closed", False)


# ---------------------------------------------------------------- the PS in float32 (ps_math)
# The PS's layer arithmetic with ps_math='float32': float32 tensors, float32 BLAS, the bias and
# activations applied in place on the matmul's result. A layer's forward keeps what its backward
# reads (input, float32 weights, activation output) in the layer's own cache slots, in float32;
# _cache64 turns them into float64 when a backward on another unit (PL/AIE: Network layers)
# follows a PS forward.


def _f32(a) -> np.ndarray:
    """a as float32 (a float64 array is rounded to FP32: one IEEE rounding, overflow -> Inf)."""
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(np.float32)


# the activations with a float32 implementation here; other layers (LeakyReLU, Clip, Softplus, Quant,
# LayerNorm) compute their float64 model on the float32 values, rounded once to FP32
_ACT32 = ("ReLU", "Tanh", "Sigmoid", "Softmax", "Identity")


def _act32(kind: str, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The activation `kind` of float32 x (into `out` when given: x itself, owned by the caller)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "ReLU":
            return np.maximum(x, np.float32(0.0), out=out)
        if kind == "Tanh":
            return np.tanh(x, out=out)
        if kind == "Sigmoid":  # 0.5 (1 + tanh(x / 2)), as Network's (no exp overflow)
            y = np.multiply(x, np.float32(0.5), out=out)
            np.tanh(y, out=y)
            y += np.float32(1.0)
            y *= np.float32(0.5)
            return y
        if kind == "Softmax":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return np.divide(e, e.sum(axis=-1, keepdims=True), out=out)
        if kind == "Identity":
            return x
    raise RlhlsError(f"PS float32 path: no activation {kind!r}")


def _dact32(kind: str, dy: np.ndarray, x: np.ndarray | None, y: np.ndarray, owned: bool) -> np.ndarray:
    """dL/dx of the activation from float32 dy and its forward's x, y (in place on dy when owned)."""
    out = dy if owned else None
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "ReLU":  # dy * [x > 0] (y > 0 is the same set): a multiply, 10x faster than a select
            return np.multiply(dy, y > 0, out=out)
        if kind == "Tanh":  # dy (1 - y^2)
            t = np.multiply(y, y)
            np.subtract(np.float32(1.0), t, out=t)
            return np.multiply(dy, t, out=out)
        if kind == "Sigmoid":  # dy y (1 - y)
            t = np.subtract(np.float32(1.0), y)
            t *= y
            return np.multiply(dy, t, out=out)
        if kind == "Softmax":  # y (dy - sum(dy y))
            s = (dy * y).sum(axis=-1, keepdims=True)
            return np.multiply(y, dy - s, out=out)
        if kind == "Identity":
            return dy
    raise RlhlsError(f"PS float32 path: no activation {kind!r}")


def _ps32_forward(layer, x: np.ndarray, owned: bool) -> tuple:
    """One PS layer's forward in float32 on float32 x -> (y, y owned: a fresh array). `owned`:
    x is a temporary of this pass (an activation may overwrite it)."""
    kind = layer.kind
    layer._wq = None  # no stored weights of a PL / AIE forward (designs.network) for the backward
    if kind == "Dense":
        w = layer._w32 = _f32(layer.param("W"))
        y = x @ w
        b = layer.param("b") if "b" in layer.params else None
        if b is not None:
            y += _f32(b)
        layer._cache, layer._batch, layer._xfmt, layer._cols = x, x.shape[0], None, None
        return y, True
    if kind == "Conv2d":
        kh, kw = layer.kernel
        cols = im2col(x, kh, kw, layer.stride)
        w2 = layer._w32 = _f32(layer.param("W")).reshape(layer.out_channels, -1).T
        y = cols @ w2
        b = layer.param("b") if "b" in layer.params else None
        if b is not None:
            y += _f32(b)
        y = np.ascontiguousarray(y.reshape(x.shape[0], *layer.out_shape[1:], layer.out_channels)
                                 .transpose(0, 3, 1, 2))
        layer._cache, layer._batch, layer._cols = x, x.shape[0], cols
        return y, True
    if kind == "Flatten":
        layer._cache, layer._batch = True, x.shape[0]
        return x.reshape(x.shape[0], -1), owned
    if kind not in _ACT32:  # no float32 twin: the layer's float64 model, its result rounded to FP32
        return _f32(layer.forward(np.asarray(x, dtype=np.float64), None)), True
    y = _act32(kind, x, x if (owned and kind != "Identity") else None)
    # ReLU's backward needs only y > 0; the others read y alone too (x is kept for a PL backward)
    layer._cache, layer._batch = (None if y is x else x, y, False), x.shape[0]
    return y, y is not x or owned


def _ps32_backward(layer, dy: np.ndarray, owned: bool, need_dx: bool, need_dw: bool):
    """One PS layer's backward in float32 (float32 dy) -> dx (None unless need_dx); the
    parameter gradients (float32) go to layer.grads. A cache left by a forward on another unit
    (float64 storage values) is read as float32."""
    kind = layer.kind
    if kind in ("Dense", "Conv2d"):
        x = _f32(layer._cache)
        w = getattr(layer, "_w32", None)
        if w is None:
            w = _f32(layer.param("W"))
            w = w if kind == "Dense" else w.reshape(layer.out_channels, -1).T
        layer.grads = {}
        if kind == "Dense":
            if need_dw:
                layer.grads["W"] = x.T @ dy
                if layer.bias:
                    layer.grads["b"] = dy.sum(axis=0)
            return dy @ w.T if need_dx else None
        kh, kw = layer.kernel
        dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, layer.out_channels)
        if need_dw:
            cols = layer._cols if layer._cols is not None else im2col(x, kh, kw, layer.stride)
            layer.grads["W"] = np.ascontiguousarray((_f32(cols).T @ dy2).T.reshape(layer.params["W"].shape))
            if layer.bias:
                layer.grads["b"] = dy2.sum(axis=0)
        if not need_dx:
            return None
        # the patches' overlaps summed by col2im (float64, rounded once to FP32)
        return _f32(col2im(dy2 @ w.T, x.shape, kh, kw, layer.stride))
    if kind == "Flatten":
        return dy.reshape((layer._batch,) + layer.in_shape) if need_dx else None
    if kind not in _ACT32:  # the float64 model's backward, its results rounded to FP32
        dx = layer.backward(np.asarray(dy, dtype=np.float64), None, need_input_grad=need_dx, need_param_grads=need_dw)
        layer.grads = {k: _f32(g) for k, g in layer.grads.items()}
        return None if dx is None else _f32(dx)
    if not need_dx:
        return None
    x, y, table = layer._cache
    if table:  # a table forward on the PL: the derivative of the math at its input
        y = _act32(kind, _f32(x), None)
    return _dact32(kind, dy, None if x is None else _f32(x), _f32(y), owned and dy.dtype == np.float32)


def _cache64(layer, keep32: bool = False) -> None:
    """Float64 copies of what a PS float32 forward cached, for a backward on the PL / AIE.
    keep32: a Dense input and a ReLU / Identity cache stay float32 (their backward reads float32
    arrays exactly; other activations compute on y in float64)."""
    c = layer._cache
    if keep32 and (layer.kind == "Dense" or (_closed(layer) and isinstance(c, tuple))):
        if isinstance(c, tuple) and c[0] is None:  # an in-place activation (ReLU): x > 0 where y > 0
            layer._cache = (c[1], c[1], c[2])
        return
    if isinstance(c, np.ndarray) and c.dtype == np.float32:
        layer._cache = c.astype(np.float64)
    elif isinstance(c, tuple) and len(c) == 3:
        x, y, t = c
        if x is None:  # an in-place activation (ReLU): x > 0 where y > 0, and only that is read
            x = y
        layer._cache = (np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), t)
    cols = getattr(layer, "_cols", None)
    if cols is not None and cols.dtype == np.float32:
        layer._cols = cols.astype(np.float64)


def unit_precisions(design) -> dict:
    """{'PS'|'PL'|'AIE': Precision(storage, acc)}: the design's formats per unit
    (designs.kernels.unit_formats)."""
    from rlhls.designs.kernels import unit_formats

    return {u: Precision(parse_format(str(s)), parse_format(str(a)))
            for u, (s, a) in unit_formats(design).items()}


def count_columns(counts: dict) -> dict:
    """The metrics.csv columns of ``MixedPrecision.take_counts()`` (0 where nothing happened)."""
    return {k: counts.get(k, 0) for k in COUNTS}


def ps_forward(net, x, ps_math: str = "float32") -> np.ndarray:
    """Acting on the PS in FP32 (Fig. 10), float64 values out. ps_math 'float32': float32 BLAS
    and elementwise ops (the PS path of MixedPrecision); 'float64': every tensor rounded to FP32,
    products and sums in float64 BLAS."""
    if ps_math == "float32":
        x, owned = _f32(x), False
        for layer in net.layers:
            x, owned = _ps32_forward(layer, x, owned)
        return x.astype(np.float64)
    q = parse_format("fp32").quantize
    x = q(np.asarray(x, dtype=np.float64))
    for layer in net.layers:
        x = q(layer.forward(x, None))
    return x


@dataclass
class MixedPrecisionArgs(HyperParams):
    """The hyperparameters of AP-DRL's mixed precision every algorithm with a ``precision`` has."""

    loss_scale_init: float = hp(2.0 ** 15, "mixed precision: initial dynamic loss scale (a power of two)", low=1.0)
    loss_scale_growth_interval: int = hp(2000, "mixed precision: good steps before the loss scale doubles", low=1)
    quantization_delay: int = hp(0, "mixed precision: gradient steps in FP32 before FP16/BF16 start", low=0)
    ps_math: str = hp("float32", "PS layers' arithmetic: float32 (float32 BLAS, as the Arm cores) or float64 "
                      "(FP32-rounded tensors, float64 BLAS sums: the earlier results' path)", choices=PS_MATHS)


class LossScaler:
    """Dynamic loss scaling (Fig. 9): ``update(finite) -> 'skip_shrink' | 'grow' | 'ok'``."""

    def __init__(self, init: float = 2.0 ** 15, growth_interval: int = 2000, enabled: bool = True):
        if not (init >= 1.0 and float(np.log2(init)).is_integer()):
            raise RlhlsError(f"loss_scale_init {init!r}: expected a power of two >= 1")
        if not (isinstance(growth_interval, (int, np.integer)) and growth_interval >= 1):
            raise RlhlsError(f"loss_scale_growth_interval {growth_interval!r}: expected an integer >= 1")
        self.enabled, self.init = bool(enabled), float(init)
        self.scale = float(init) if enabled else 1.0
        self.growth_interval = int(growth_interval)
        self.good = 0  # consecutive finite steps since the last change

    def update(self, finite: bool) -> str:
        if not self.enabled:
            return "ok" if finite else "skip"
        if not finite:
            self.scale = max(1.0, self.scale * 0.5)
            self.good = 0
            return "skip_shrink"
        self.good += 1
        if self.good >= self.growth_interval:
            self.good = 0
            if self.scale < MAX_SCALE:
                self.scale *= 2.0
                return "grow"
        return "ok"

    def state(self) -> dict:
        return {"enabled": self.enabled, "scale": self.scale, "growth_interval": self.growth_interval,
                "good": self.good}

    def load(self, s: dict) -> None:
        self.enabled, self.scale = bool(s["enabled"]), float(s["scale"])
        self.growth_interval, self.good = int(s["growth_interval"]), int(s["good"])


def default_plan(design, batch: int | None = None, time_limit: float | None = 60.0) -> dict:
    """{node: unit} of the design's plan at `batch`, solved in-process (partition_design)."""
    from rlhls.partition.design_plan import partition_design

    return dict(partition_design(design, batch=batch, time_limit=time_limit).assignment)


class MixedPrecision:
    """Per-node formats of one network instance (and its target copy) under a plan; see the module
    docstring.

    ``inst`` is the network's name in the training graph (``q`` for DQN). ``assignment`` None =
    every node on the PS (the FP32 baseline). ``target`` False: the instance has no target-forward
    nodes (``tfwd``; A2C); ``update`` False: no update nodes, its weights are another instance's
    (DDPG's ``critic@pi``: ``master_of`` names that instance, whose master formats it shares)."""

    def __init__(self, design, net, inst: str, assignment: dict | None, *, loss_node: str = "loss",
                 loss_scale_init: float = 2.0 ** 15, growth_interval: int = 2000, quantization_delay: int = 0,
                 target: bool = True, update: bool = True, master_of: "MixedPrecision | None" = None,
                 kernels=None, ps_math: str = "float32"):
        if ps_math not in PS_MATHS:
            raise RlhlsError(f"ps_math {ps_math!r}: expected one of {', '.join(PS_MATHS)}")
        self.ps32 = ps_math == "float32"
        self.net, self.inst, self.loss_node = net, inst, loss_node
        self.kernels = kernels  # backends.PlanKernels: PL/AIE nodes through a backend (None: emu models)
        # PL / AIE tensors as float32 arrays where their float formats fit it (the same values, no
        # float64 copies between layers); not for a compiled backend's kernels (they take float64)
        self.f32 = self.ps32 and not (kernels is not None and kernels.compiled)
        self.prec = unit_precisions(design)
        self.fp32 = parse_format("fp32")
        self.layers = [l for l in net.layers]
        self.assignment = dict(assignment) if assignment is not None else None
        nodes: dict[tuple[str, str], str | None] = {}  # (layer name, phase) -> unit
        asg = self.assignment
        phases = ("fwd", "tfwd", "bwd") if target else ("fwd", "bwd")
        prev: dict[str, str | None] = {}
        for phase in phases:
            prev[phase] = None
            for l in self.layers:
                node = f"{inst}.{l.name}.{phase}"
                if l.kind == "Flatten":  # no graph node: it stays where its input is
                    nodes[(l.name, phase)] = prev[phase]
                    continue
                nodes[(l.name, phase)] = prev[phase] = self._unit(asg, node)
        for l in self.layers:  # a flatten at the head follows the next layer
            for phase in phases:
                if nodes[(l.name, phase)] is None:
                    nxt = [nodes[(m.name, phase)] for m in self.layers if nodes[(m.name, phase)]]
                    nodes[(l.name, phase)] = nxt[0] if nxt else "PS"
            if l.params and update:
                nodes[(l.name, "upd")] = self._unit(asg, f"{inst}.{l.name}.upd")
        self.nodes = {k: u or "PS" for k, u in nodes.items()}  # every one has its unit by now
        self.loss_unit = self._unit(asg, loss_node)
        if any(u != "PS" for u in (*self.nodes.values(), self.loss_unit)):
            from rlhls.flow import native

            native.install()  # compiled fp32 sums for the PL/AIE layers (same bits, faster)
        for (name, phase), u in self.nodes.items():
            if phase == "upd" and u == "AIE":
                raise RlhlsError(f"plan: update node '{inst}.{name}.upd' on the AIE (only matrix multiplies may be)")
        self.master_fmt: dict[str, formats.NumericFormat] = {}
        if master_of is not None:
            self.master_fmt = master_of.master_fmt  # the same weights, the same formats
        else:
            for l in self.layers:
                if l.params:
                    on_aie = "AIE" in (self.nodes[(l.name, "fwd")], self.nodes[(l.name, "bwd")])
                    self.master_fmt[l.name] = self.prec["AIE"].storage if on_aie else self.fp32
        fp16_grad = self.loss_unit == "PL" or any(self.nodes[(l.name, "bwd")] == "PL" for l in self.layers)
        self.scaler = LossScaler(loss_scale_init, growth_interval, enabled=fp16_grad)
        self.quantization_delay = int(quantization_delay)
        if self.quantization_delay < 0:
            raise RlhlsError(f"quantization_delay {quantization_delay!r}: expected an integer >= 0")
        self._clock = [0]  # gradient steps taken (skipped ones included); shared by linked instances
        self._group = [self]
        self.counts: dict[str, int] = {}
        self.grad_norm = float("nan")  # global norm before clipping of the last applied step
        self._fp32_state: set[str] = set()  # see apply

    @staticmethod
    def link(*mps: "MixedPrecision") -> LossScaler:
        """Instances that share one loss (A2C's policy + value; DDPG's actor + ``critic@pi``): one
        dynamic loss scale (enabled if any of them has an FP16 gradient path, PyTorch GradScaler
        style: a non-finite gradient anywhere skips the whole step), one step count (quantization
        delay), and ``apply`` / ``round_masters`` of any of them take the others' parameters
        (view layer keys ``'<inst>.<layer>'``). Returns the shared scaler."""
        first = mps[0].scaler
        shared = LossScaler(first.init, first.growth_interval, enabled=any(m.scaler.enabled for m in mps))
        group = list(mps)
        for m in mps:
            m.scaler, m._clock, m._group = shared, mps[0]._clock, group
        return shared

    @property
    def steps(self) -> int:
        return self._clock[0]

    @steps.setter
    def steps(self, n: int) -> None:
        self._clock[0] = int(n)

    def _unit(self, asg, node) -> str:
        if asg is None:
            return "PS"
        if node not in asg:
            raise RlhlsError(f"plan: no unit for node '{node}' (is the plan for this design and network?)")
        u = asg[node]
        if u not in UNITS:
            raise RlhlsError(f"plan: node '{node}' on unknown unit {u!r} (expected PS, PL or AIE)")
        return u

    # -- state
    @property
    def quantized(self) -> bool:
        """True once the quantization delay is over (FP16/BF16 in use)."""
        return self.steps >= self.quantization_delay

    def units(self) -> dict:
        """{node name: unit} as planned (for reports)."""
        out = {f"{self.inst}.{n}.{p}": u for (n, p), u in self.nodes.items()}
        out[self.loss_node] = self.loss_unit
        return out

    def unit(self, node: str) -> str:
        """The unit a graph node (``'critic.fc1.bwd'``, ``'loss'``, ``'returns'``, any node of the
        plan) computes on now: its planned unit, or the PS during the quantization delay."""
        if not self.quantized:
            return "PS"
        if node == self.loss_node:
            return self.loss_unit
        parts = node.split(".")
        if len(parts) == 3 and parts[0] == self.inst and (parts[1], parts[2]) in self.nodes:
            return self.nodes[(parts[1], parts[2])]
        return self._unit(self.assignment, node)

    def unit_of(self, layer: str, phase: str) -> str:
        return self.nodes[(layer, phase)] if self.quantized else "PS"

    def precision(self, unit: str) -> Precision:
        return self.prec[unit if self.quantized else "PS"]

    def precision_map(self, phase: str) -> dict:
        """{layer name: Precision} of a phase ('fwd', 'tfwd', 'bwd'): what Network.forward takes."""
        return {l.name: self.precision(self.unit_of(l.name, phase)) for l in self.layers}

    def take_counts(self) -> dict:
        c, self.counts = self.counts, {}
        return c

    def _count(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    # -- conversions
    def convert(self, x, src: str, dst: str, what: str = "act") -> np.ndarray:
        """Quantize a tensor leaving a node on `src` for a node on `dst` to dst's storage format."""
        if src == dst or not self.quantized:
            return x if self.ps32 else np.asarray(x, dtype=np.float64)
        fmt = self.prec[dst].storage
        x = np.asarray(x)
        if self.f32 and x.dtype == np.float32 and fmt == self.fp32:  # float32 values are FP32 values
            self._count(f"conv_{src}_{dst}")
            return x
        kernel = formats._round_kernel
        if self.f32 and kernel is not None and self._to32(fmt):  # one pass into float32, overflows counted in it
            y, ovf = kernel(x if x.dtype == np.float32 else np.asarray(x, dtype=np.float64),
                                           fmt, np.float32)
            self._count(f"conv_{src}_{dst}")
            if ovf:
                self._count("conv_overflows", int(ovf))
            return y
        x = np.asarray(x, dtype=np.float64)
        if formats._round_kernel is not None and fmt != self.fp32:  # the kernel counts in its one pass
            y, ovf = fmt.quantize(x, return_overflow=True)
        else:
            y = fmt.quantize(x)
            ovf = 0
            if not _finite_sum(y):  # only then can a finite value have overflowed: count
                y, ovf = fmt.quantize(x, return_overflow=True)
        self._count(f"conv_{src}_{dst}")
        if ovf:
            self._count("conv_overflows", int(ovf))
        return y

    def _to32(self, fmt) -> bool:
        """fmt's values go to float32 arrays in one compiled pass (a float format that fits it)."""
        return (formats._round_kernel is not None and isinstance(fmt, formats.FloatFormat) and fmt._magic_ok
                and fmt.exp_bits <= 8 and fmt.man_bits <= 23 and fmt != self.fp32)

    def _stored(self, x, unit: str) -> np.ndarray:
        """A caller's tensor from a node on `unit` in that unit's storage format (float32 where it fits)."""
        fmt = self.prec[unit].storage
        kernel = formats._round_kernel
        if self.f32 and kernel is not None and self._to32(fmt):
            return kernel(np.asarray(x) if np.asarray(x).dtype == np.float32
                                         else np.asarray(x, dtype=np.float64), fmt, np.float32)[0]
        return fmt.quantize(x)

    # -- compute
    def _ps_params(self, layer) -> dict:
        """The layer's parameters as FP32 values: arrays round_masters left in a master format
        (FP32 or BF16, both FP32 values) are used as they are, any other array is rounded."""
        return {k: _fp32(v) for k, v in layer.params.items()}

    @staticmethod
    def _ps_out(layer, y):
        if _closed(layer):  # already FP32 values: only remember that
            _ROUNDED[id(y)] = y
            return y
        return _fp32(y)

    def _layer_fwd(self, layer, x, unit, node=None):
        if unit != "PS":
            layer._w32 = None  # no float32 weights of this forward for a PS backward
        if unit != "PS" and layer.is_mm and self.kernels is not None and self.kernels.compiled:
            return self._kernel_fwd(layer, x, unit, node)
        if unit == "PS":  # FP32 tensors, float64 BLAS sums (ps_math float64; see the module docstring)
            saved = layer.params
            layer.params = self._ps_params(layer)
            try:
                return self._ps_out(layer, layer.forward(_fp32(x), None))
            finally:
                layer.params = saved
        # x is already in the unit's storage: converted at the boundary or made by a layer there
        return layer.forward(x, self.precision(unit), stored=True)

    def _kernel_fwd(self, layer, x, unit, node):
        """A PL / AIE matrix multiply through the backend's compiled kernel (the same bits as
        ``layer.forward(x, precision, stored=True)``); the layer keeps what its backward needs."""
        p = self.precision(unit)
        b = layer._b(p)
        layer._wq = None
        if layer.kind == "Conv2d":
            kh, kw = layer.kernel
            cols = im2col(x, kh, kw, layer.stride)
            y = self.kernels.op(node, unit, "forward", x=cols, w=layer._w2(), b=b)
            y = np.ascontiguousarray(y.reshape(x.shape[0], *layer.out_shape[1:], layer.out_channels)
                                     .transpose(0, 3, 1, 2))
        else:
            y = self.kernels.op(node, unit, "forward", x=x, w=layer.param("W"), b=b)
        layer._cache, layer._batch, layer._xfmt, layer._cols = x, x.shape[0], p.storage, None
        return y

    def _kernel_bwd(self, layer, dy, unit, node, need_dx, need_dw):
        """The backward of a PL / AIE matrix multiply through the backend's compiled kernels: input
        gradient (dense_backward; Conv2d: col2im on the host) and weight gradient (weight_gradient;
        the AIE's bias gradient, a column sum, on the host as its data mover)."""
        p = self.precision(unit)
        x = layer._cache
        layer.grads = {}
        conv = layer.kind == "Conv2d"
        if conv:
            kh, kw = layer.kernel
            dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, layer.out_channels)
            w = layer._w2()
        else:
            dy2, w = dy, layer.param("W")
        if need_dw:
            xx = im2col(x, kh, kw, layer.stride) if conv else x
            dw, db = self.kernels.op(node, unit, "weight_grad", x=xx, dy=dy2)
            layer.grads["W"] = np.ascontiguousarray(dw.T.reshape(layer.params["W"].shape)) if conv else dw
            if layer.bias:
                layer.grads["b"] = db if db is not None else _sum_rows(dy2, p)
        if not need_dx:
            return None
        dx = self.kernels.op(node, unit, "input_grad", dy=dy2, w=w)
        return p.storage.quantize(col2im(dx, x.shape, kh, kw, layer.stride)) if conv else dx

    def _layer_bwd(self, layer, dy, unit, need_dx, need_dw=True, node=None):
        if unit != "PS" and self.ps32:
            _cache64(layer, self.f32)  # a PS forward's float32 cache, read by a PL / AIE backward
        if unit != "PS" and layer.is_mm and self.kernels is not None and self.kernels.compiled:
            return self._kernel_bwd(layer, dy, unit, node, need_dx, need_dw)
        if unit == "PS":
            saved = layer.params
            layer.params = self._ps_params(layer)
            try:
                dx = layer.backward(_fp32(dy), None, need_input_grad=need_dx, need_param_grads=need_dw)
            finally:
                layer.params = saved
            layer.grads = {k: _fp32(g) for k, g in layer.grads.items()}
            return None if dx is None else self._ps_out(layer, dx)
        return layer.backward(dy, self.precision(unit), need_input_grad=need_dx, stored=True,
                              need_param_grads=need_dw)

    def forward(self, x, phase: str = "fwd", net=None, src: str = "PS"):
        """Forward through `net` (default the online network; the target network for 'tfwd') with
        each layer in its node's format and conversions at unit boundaries; `x` comes from a node
        on `src` (default the PS: observations, Fig. 10). Returns (y, unit of the last node)."""
        net = self.net if net is None else net
        x = np.asarray(x) if self.ps32 else np.asarray(x, dtype=np.float64)
        if not self.quantized:
            src = "PS"
        elif src != "PS":  # held in src's format (a caller's tensor): make sure of it once
            x = self._stored(x, src)
        owned = False  # x is a temporary of this pass (PS float32 activations work in place)
        for layer in net.layers:
            u = self.unit_of(layer.name, phase)
            if u != src:
                x = self.convert(x, src, u)
            if self.ps32 and u == "PS":
                if x.dtype != np.float32:
                    x, owned = _f32(x), True
                x, owned = _ps32_forward(layer, x, owned)
            else:
                x = self._layer_fwd(layer, x, u, f"{self.inst}.{layer.name}.{phase}")
                owned = False  # a PL / AIE layer's output (an activation may have cached it)
            src = u
        if src != "PS" and x.dtype == np.float32:  # a PL / AIE result: float64 values, as ever
            x = x.astype(np.float64)
        return x, src

    def _ps32_bwd(self, layer, dy, owned, need_dx, need_dw):
        """A PS node's backward in float32 (dy in the PS's storage) -> (dx, dx owned)."""
        if dy.dtype != np.float32:
            dy, owned = _f32(dy), True
        dx = _ps32_backward(layer, dy, owned, need_dx, need_dw)
        return dx, dx is not None and dx is not dy or owned

    def to_loss(self, y, src: str) -> np.ndarray:
        """The network's output as the loss node reads it (float64 values in its storage format)."""
        return np.asarray(self.convert(y, src, self.loss_unit if self.quantized else "PS"), dtype=np.float64)

    def backward(self, dy, src: str | None = None, need_input_grad: bool = False, param_grads: bool = True):
        """Back-propagate the (scaled) loss gradient `dy`, produced on `src` (default the loss
        node's unit), through the online network's last forward; layer grads are left in each
        layer's ``grads``. With need_input_grad also the gradient of the network input (DDPG's
        dQ/d(obs, a)) is computed and returned, in the storage format of the first layer's
        backward node (``unit_of(first layer, 'bwd')``); else returns None. param_grads=False
        computes that input gradient alone (the graph's ``critic@pi`` backward has no weight
        gradients) and leaves every layer's ``grads`` empty."""
        src = src or (self.loss_unit if self.quantized else "PS")
        dy = np.asarray(dy) if self.ps32 else np.asarray(dy, dtype=np.float64)
        if self.quantized and src != "PS":
            dy = self._stored(dy, src)  # the caller's tensor, once (layers trust it)
        layers = self.net.layers
        mm = [i for i, l in enumerate(layers) if l.is_mm or l.params]  # layers with weights
        stop = 0 if (need_input_grad or not mm) else mm[0]
        owned = False
        for i in range(len(layers) - 1, stop - 1, -1):
            layer = layers[i]
            u = self.unit_of(layer.name, "bwd")
            need_dx = need_input_grad or i > stop
            if u != src:
                dy = self.convert(dy, src, u, "grad")
            if self.ps32 and u == "PS":
                dy, owned = self._ps32_bwd(layer, dy, owned and src == "PS", need_dx, param_grads)
            else:
                dy = self._layer_bwd(layer, dy, u, need_dx=need_dx, need_dw=param_grads,
                                     node=f"{self.inst}.{layer.name}.bwd")
            src = u
        for l in layers[:stop]:
            l.grads = {k: np.zeros_like(v) for k, v in l.params.items()}
        if need_input_grad and src != "PS" and dy.dtype == np.float32:
            dy = dy.astype(np.float64)  # a PL / AIE result: float64 values, as ever
        return dy if need_input_grad else None

    def loss_scale(self) -> float:
        return self.scaler.scale if (self.quantized and self.scaler.enabled) else 1.0

    def apply(self, opt, param_views: dict, grads: dict, max_grad_norm: float | None = None) -> str:
        """Check, unscale and apply gradients (``{key: grad}`` with keys of ``param_views``, which
        map to ``(layer key, array)``); returns the scaler event. Skipped steps change nothing.
        ``max_grad_norm``: clip the unscaled FP32 gradients to this global L2 norm before the
        optimizer (the norm before clipping is left in ``grad_norm``)."""
        quantized = self.quantized
        scale = self.loss_scale()
        # a finite sum means no Inf / NaN (exact count only otherwise)
        n_bad = sum(0 if _finite_sum(g) else int(np.count_nonzero(~np.isfinite(g))) for g in grads.values())
        finite = n_bad == 0
        if n_bad:
            self._count("grad_overflows", n_bad)
        event = self.scaler.update(finite) if quantized else ("ok" if finite else "skip")
        self.steps += 1
        self.grad_norm = float("nan")
        if event in ("skip_shrink", "skip"):
            self._count("skipped_steps")
            if event == "skip_shrink":
                self._count("scale_shrinks")
            return event
        if event == "grow":
            self._count("scale_grows")
        q = self.fp32.quantize
        # unscale in FP32 (scale = 2^k: exact but for subnormals); scale 1: FP32(g) is all it does
        if self.ps32:  # float32 arrays: the optimizer then steps in float32 (host/optim.py)
            with np.errstate(over="ignore", invalid="ignore"):
                g32 = {k: _f32(g) if scale == 1.0 else _f32(g) / np.float32(scale) for k, g in grads.items()}
        else:
            g32 = {k: _fp32(g) if scale == 1.0 else q(_fp32(g) / scale) for k, g in grads.items()}
        if max_grad_norm is not None:
            from .optim import clip_grad_norm

            g32 = {k: g.copy() if g is grads[k] else g for k, g in g32.items()}  # clipped in place
            self.grad_norm = float(clip_grad_norm(g32, max_grad_norm))
        on_pl = self._pl_updates(param_views) if (quantized and self.kernels is not None) else {}
        pl_keys = {k for keys in on_pl.values() for k in keys}
        params = {k: a for k, (_, a) in param_views.items() if k not in pl_keys}
        opt.step(params, {k: g32[k] for k in params})  # the host's optimizer (counts the step for all)
        done = self._fp32_state  # state the all-FP32 update model left last time, untouched since
        for kind in opt.slots.values():  # FP32 optimizer state, as the update kernel keeps it
            for k, a in kind.items():
                if a.dtype != np.float32 and (k not in done or k in params):
                    _fp32_inplace(a)
        fp32_out = set()  # parameters (and their state) the all-FP32 update model left as FP32 values
        for node, keys in on_pl.items():  # the PL's update kernel
            if self._kernel_update(opt, node, keys, param_views, g32):
                fp32_out.update(keys)
        self._fp32_state = fp32_out
        self.round_masters(param_views, fp32_out)  # after the delay: into their master formats
        return event

    def _pl_updates(self, param_views: dict) -> dict:
        """{update node on the PL: [view keys of its parameters]} (keys '<inst>.<layer>.<param>')."""
        out: dict[str, list[str]] = {}
        for key in param_views:
            if key.count(".") < 2:
                continue  # not a layer's parameter (A2C's and PPO's log-std: the PS's)
            node = key.rsplit(".", 1)[0] + ".upd"
            if self.assignment is not None and self.assignment.get(node) == "PL":
                out.setdefault(node, []).append(key)
        return out

    def _kernel_update(self, opt, node: str, keys: list, param_views: dict, g32: dict) -> bool:
        """One layer's optimizer step through the weight_update kernel: its parameters as one flat
        vector (the build's component updates ``n_params`` elements), state from the optimizer's
        slots, the step size of this step (Adam: bias-corrected). True when the all-FP32 model
        stepped the arrays in place (their values are then FP32 values)."""
        if opt.kind == "sgd" and getattr(opt, "momentum", 0.0):
            raise RlhlsError(f"plan: update node '{node}' on the PL: the update kernel's SGD has no momentum")
        arrays = [param_views[k][1] for k in keys]
        flat = lambda xs: np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in xs])  # noqa: E731
        names = {"adam": ("m", "v"), "rmsprop": ("v",), "sgd": ()}[opt.kind]
        slots = {n: [opt._slot(n, k, a) for k, a in zip(keys, arrays)] for n in names}
        if self.kernels.update_inplace(node, opt, arrays, [g32[k] for k in keys], slots, opt.step_size()):
            return True
        out = self.kernels.update(node, opt, flat(arrays), flat(g32[k] for k in keys),
                                  {n: flat(v) for n, v in slots.items()}, opt.step_size())
        off = 0
        for i, a in enumerate(arrays):
            n = a.size
            a[...] = out["w_new"][off:off + n].reshape(a.shape)
            for name in names:
                slots[name][i][...] = out[f"{name}_new"][off:off + n].reshape(a.shape)
            off += n
        return False

    def _master(self, layer: str):
        """Master format of a view's layer key: own layer name, or '<inst>.<layer>' of a linked
        instance; anything else (e.g. A2C's log-std) is an FP32 parameter."""
        f = self.master_fmt.get(layer)
        if f is None and "." in layer:
            inst, name = layer.split(".", 1)
            for m in self._group:
                if m.inst == inst:
                    f = m.master_fmt.get(name)
        return f if f is not None else self.fp32

    def round_masters(self, param_views: dict, fp32_values=()) -> None:
        """Round every parameter to its layer's master format (FP32, or BF16 for AIE layers);
        keys in `fp32_values` already hold FP32 values (their FP32 rounding is skipped)."""
        for key, (layer, a) in param_views.items():
            fmt = self._master(layer) if self.quantized else self.fp32
            if fmt == self.fp32:
                if key not in fp32_values:
                    _fp32_inplace(a)
            else:
                a[...] = fmt.quantize(a)
            _ROUNDED[id(a)] = a

    def state(self) -> dict:
        return {"scaler": self.scaler.state(), "steps": self.steps}

    def load(self, s: dict) -> None:
        self.scaler.load(s["scaler"])
        self.steps = int(s["steps"])
