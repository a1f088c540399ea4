"""The network language: Dense, Conv2d, Flatten, activations (ReLU, Tanh, Sigmoid, Softmax,
Identity, LeakyReLU, Clip, Softplus), LayerNorm and Quant (fake quantization), with shapes, seeded
initialisation, forward and backward in any (storage, accumulator) format pair, FLOP counts
and ONNX export.

Layout
------
- Activations are batched: a Dense layer sees ``(N, features)``, a Conv2d layer sees NCHW
  ``(N, C, H, W)``. ``Layer.in_shape`` / ``out_shape`` and ``Network.input_shape`` are per
  sample (no batch axis).
- Dense ``W`` is ``(in, out)`` so that ``y = x @ W + b``; Conv2d ``W`` is ``(O, C, KH, KW)``
  (PyTorch / ONNX layout), valid padding, square-or-rectangular kernel, one integer stride.
  The conv reduction order is ``(c, kh, kw)``, the order of an im2col column.
- Parameters are float64 masters; a Precision decides how they are *used*.

Formats
-------
``precision=None`` is plain float64 numpy (BLAS matmuls, conv as im2col + matmul; a Conv2d
keeps the patches of its last float64 forward for the backward that follows).
With ``Precision(storage, acc)`` a layer computes as the hardware would: inputs, weights,
biases, outputs and gradients are quantized to ``storage``; products and running sums to
``acc``, in the exact order of ``arith.dense`` (a sequential sum over the reduction axis):

- Dense forward      ``dense(x, W, b, in=storage, w=storage, acc=acc, out=storage)``
- input gradient     ``dense(dy, W.T, ...)``            (same formats)
- weight gradient    ``dense(x.T, dy, ...)``            (reduction over the batch)
- bias gradient      sequential sum of ``dy`` over the batch in ``acc``, stored in ``storage``
- Conv2d             ``arith.conv2d`` forward; backward through im2col columns with the same
  three rules; the conv input gradient keeps its column products in ``acc`` and sums the
  overlapping patches once in ``acc`` before storing.
- Activations are evaluated in float64 on storage values and the result quantized to
  ``storage`` -- unless the Precision asks for lookup tables (below). ReLU and Identity map
  storage values to storage values, so their results are not cast again.
- ``forward(x, p, stored=True)`` / ``backward(dy, p, stored=True)``: the caller guarantees that
  x / dy already hold ``p.storage`` values (e.g. the previous layer's output on the same unit),
  so their input cast, an identity then, is skipped. Results are the same either way.

Table activations (``Precision(storage, acc, table=fmt, table_size=N)``)
------------------------------------------------------------------------
Giving ``table`` and/or ``table_size`` (defaults: ``storage``, ``TABLE_SIZE`` = 1024, hls4ml's
default) makes Tanh, Sigmoid and Softmax compute as hls4ml's Vitis templates do
(``nnet_activation.h``, io_parallel, softmax implementation 'stable', hls4ml's default), bit
for bit for fixed-point and fp32 storage:

- Tanh: ``index = trunc(x * N / 8) + N/2`` (truncation toward zero, as hls4ml's conversion
  of ``data * table_size / 8`` to int), clipped to [0, N-1]; entry i = ``table(tanhf(in_i))``
  with ``in_i = float(8 * (i - N/2) / N)``; output ``storage(entry)``.
- Sigmoid: the same over [-8, 8): ``index = trunc(x * N / 16) + N/2``; entry i =
  ``table(float(1.0 / (1 + expf(-in_i))))`` with ``in_i = float(16 * (i - N/2) / N)``.
- Softmax ('stable'): the five types are ``softmax_table_formats(n, N, table.width)``
  (fixed point, 32 bits wide for a float table): ``d_i = inp_norm(max(x) - x_i)``;
  ``e_i = accum(exp_table[top log2(N) bits of d_i])``, exp_table[i] =
  ``exp_table_t(expf(-float(i * 16 / N)))``; ``S = inv_inp(adder-tree sum of e_i in accum)``;
  ``p_i = storage(e_i * inv_table[top log2(N) bits of S])`` (exact product), inv_table[i] =
  ``inv_table_t(1 / float(i * 2**sum_int / N))``.
- ``tanhf``/``expf`` are the C library's own (through ctypes, the same libm that hls4ml's C
  simulation links), because glibc's are not correctly rounded (tanhf differs from
  float64-then-rounded in 146 of 1024 entries at N = 1024); float ops (``1 + e``, ``1 / x``)
  are float32 numpy ops (IEEE). Without a loadable libm the float64 results rounded to
  float32 are used (then entries may differ from hls4ml's in the last table LSB).
- Backward: the derivative of the tabulated function's *math* at the same (stored) input:
  ``dy * (1 - tanh(x)**2)``, ``dy * s(x) (1 - s(x))``, softmax's Jacobian at ``softmax(x)``,
  all float64, the result stored in ``storage`` -- not the (piecewise constant, zero almost
  everywhere) derivative of the table, so training works with table activations.
- Softplus (hls4ml's ``softplus``): Sigmoid's index over [-8, 8); entry i =
  ``table(float(log(double(expf(in_i)) + 1.)))`` (the C library's expf and log); backward
  ``dy * sigmoid(x)``.
- Inputs outside the table range take the end entries (tanh(+-4 - ...), sigmoid(+-8 ...)),
  as in hls4ml. Other activations ignore the tables.

Storage and accumulator must both be fixed or both be float (what ``arith.dense`` models).

FLOP convention
---------------
``flops(batch)`` gives ``{'forward', 'backward_input', 'backward_weight'}``. For Dense and
Conv2d only multiply-accumulates are counted, one MAC = 2 FLOPs, each phase =
``2 * batch * macs_per_sample``; bias adds and the col2im overlap sums are not counted.
Activations count a fixed number of FLOPs per element (``ACT_FLOPS``, forward / backward):

    Identity 0/0   Flatten 0/0   ReLU 1/1 (compare / select)
    Tanh 4/3       Sigmoid 4/3   Softmax 4/4   (exp ~1, add, divide, ...; see ACT_FLOPS)
    LeakyReLU 2/2  Clip 2/2      Softplus 4/4  Quant 3/2   LayerNorm 8/10 (+ 3 per feature and
    sample for its gamma / beta gradients)

Initialisation
--------------
``'orthogonal'`` follows CleanRL's ``layer_init``: orthogonal W with a gain (default
sqrt(2); e.g. 0.01 for a policy head, 1.0 for a value head), bias 0. ``'uniform'`` follows
PyTorch's default: W and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (an explicit gain scales
W's bound). One ``np.random.default_rng(seed)`` is drawn from layer by layer in order.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlhls.core.errors import RlhlsError

from .arith import col2im, conv2d, dense, im2col
from .formats import FP32, FloatFormat, NumericFormat, parse_format, round_to
from .lut import _lut_index, _lut_softmax, lut_tables, softmax_table_formats

if TYPE_CHECKING:
    import onnx

__all__ = ["Precision", "TABLE_SIZE", "softmax_table_formats", "lut_tables", "Layer", "Dense", "Conv2d", "Flatten",
           "ReLU", "Tanh", "Sigmoid", "Softmax", "Identity", "LeakyReLU", "Clip", "Softplus", "Quant", "LayerNorm",
           "Network", "ACT_FLOPS",
           "ELEMENTWISE_KINDS", "INITS", "MAX_LAYER_PARAMS", "im2col", "col2im"]

INITS = ("orthogonal", "uniform")
MAX_LAYER_PARAMS = 1 << 28  # weights of one layer, checked before they are allocated: a 16384 x 16384 layer
# (the largest of the experiments' sizes) is 2 GiB as float64

# FLOPs per element (forward, backward) of the elementwise layers; see the module docstring.
ACT_FLOPS = {
    "Identity": (0, 0),
    "Flatten": (0, 0),
    "ReLU": (1, 1),       # max(x, 0); dy * (x > 0)
    "Tanh": (4, 3),       # exp, add, sub, div; dy * (1 - y*y)
    "Sigmoid": (4, 3),    # exp, add, div, neg; dy * y * (1 - y)
    "Softmax": (4, 4),    # sub max, exp, sum, div; y * (dy - sum(dy * y))
    "LeakyReLU": (2, 2),  # compare, multiply (select); dy or alpha * dy
    "Clip": (2, 2),       # max, min; dy * (lo < x < hi)
    "Softplus": (4, 4),   # exp, add, log (compare with the threshold); dy * sigmoid(x)
    "Quant": (3, 2),      # scale, round, saturate; dy * (x in range)
    "LayerNorm": (8, 10),  # mean, sub, square, mean, rsqrt, mul, gamma, beta; dx (+ dgamma, dbeta)
}
# the layers that compute elementwise (per sample for Softmax and LayerNorm): what profiles and
# kernels cost per element
ELEMENTWISE_KINDS = tuple(k for k in ACT_FLOPS if k != "Flatten")


TABLE_SIZE = 1024  # hls4ml's default activation table size


@dataclass(frozen=True)
class Precision:
    """The (storage, accumulator) format pair a layer computes in, and optionally the lookup
    tables of its Tanh/Sigmoid/Softmax (see "Table activations" in the module docstring).

    Any format may be given as text (e.g. ``Precision('fp16', 'fp32')``). ``table`` /
    ``table_size``: None both = activations in float64; either given = hls4ml's tables of
    ``table_size`` (default 1024, a power of two >= 8) entries in ``table`` (default storage).
    """

    storage: NumericFormat  # inputs, weights, outputs and gradients are stored in this format
    acc: NumericFormat      # products and sums
    table: NumericFormat | None = None  # entries of the activation tables (hls4ml table_t)
    table_size: int | None = None       # entries per table (hls4ml table_size)

    def __post_init__(self):
        for field in ("storage", "acc", "table"):
            value = getattr(self, field)
            if value is None and field == "table":
                continue
            if isinstance(value, str):
                object.__setattr__(self, field, parse_format(value))
            elif not hasattr(value, "quantize"):
                raise RlhlsError(f"Precision: {field} is {value!r}, expected a NumericFormat or format text")
        n = self.table_size
        if n is not None and not (isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                  and n >= 8 and n & (n - 1) == 0):
            raise RlhlsError(f"Precision: table_size {n!r}, expected a power of two >= 8")
        if self.table is not None and self.table.kind not in ("fixed", "float"):
            raise RlhlsError(f"Precision: table {self.table}, expected a fixed or float format")

    @property
    def lut(self) -> bool:
        """Activations through hls4ml's lookup tables (table or table_size given)."""
        return self.table is not None or self.table_size is not None

    @property
    def lut_table(self) -> NumericFormat:
        return self.storage if self.table is None else self.table

    @property
    def lut_size(self) -> int:
        return TABLE_SIZE if self.table_size is None else int(self.table_size)

    def with_tables(self, table=None, table_size=None) -> "Precision":
        """This precision in table mode; fields already set here win over the arguments."""
        return dataclasses.replace(self, table=self.table if self.table is not None else (table or self.storage),
                                   table_size=self.table_size if self.table_size is not None
                                   else int(table_size or TABLE_SIZE))


# ---------------------------------------------------------------------------- layers


class Layer:
    """Base layer. Network names it, infers its shapes and initialises its parameters."""

    kind = "Layer"
    is_mm = False

    def __init__(self) -> None:
        self.name = ""  # Network names it
        self.in_shape: tuple | None = None
        self.out_shape: tuple | None = None
        self.params: dict[str, np.ndarray] = {}
        self.grads: dict[str, np.ndarray] = {}
        self._net = "?"
        self._cache: Any = None  # what the forward keeps for the backward
        self._batch = 0  # the forward's batch size

    # -- set up by Network
    def _error(self, what: str) -> RlhlsError:
        return RlhlsError(f"network '{self._net}': layer {self.name}: {what}")

    def shapes(self) -> tuple[tuple, tuple]:
        """(in_shape, out_shape) of a layer a Network holds (RlhlsError before)."""
        if self.in_shape is None or self.out_shape is None:
            raise RlhlsError(f"layer {self.kind}: not part of a Network yet (shapes unknown)")
        return self.in_shape, self.out_shape

    def _build(self, in_shape: tuple) -> tuple:
        """Check the parameters against the input shape; return the output shape."""
        return in_shape

    def _init(self, rng: np.random.Generator, default_init: str) -> None:
        pass

    # -- sizes
    @property
    def n_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    @property
    def macs_per_sample(self) -> int:
        return 0

    def flops(self, batch: int) -> dict:
        fwd, bwd = ACT_FLOPS.get(self.kind, (0, 0))
        n = int(batch) * math.prod(self.shapes()[1])
        return {"forward": fwd * n, "backward_input": bwd * n, "backward_weight": 0}

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "in_shape": self.in_shape,
            "out_shape": self.out_shape,
            "params": self.n_params,
        }

    # -- compute
    def _check_input(self, x, keep32: bool = False) -> np.ndarray:
        """x as float64 (keep32: a float32 array stays float32: stored values, the same values)."""
        if self.in_shape is None:
            raise RlhlsError(f"layer {self.kind}: not part of a Network yet (shapes unknown)")
        x = np.asarray(x)
        if not (keep32 and x.dtype == np.float32):
            x = np.asarray(x, dtype=np.float64)
        if x.shape[1:] != self.in_shape:
            raise self._error(f"input has shape {x.shape}, expected (N, {_dims(self.in_shape)})")
        return x

    def _check_dy(self, dy, keep32: bool = False) -> np.ndarray:
        if self._cache is None:
            raise self._error("backward called before forward")
        dy = np.asarray(dy)
        if not (keep32 and dy.dtype == np.float32):
            dy = np.asarray(dy, dtype=np.float64)
        expected = (self._batch,) + self.shapes()[1]
        if dy.shape != expected:
            raise self._error(f"output gradient has shape {dy.shape}, expected {expected}")
        return dy

    def forward(self, x, precision: Precision | None = None, *, stored: bool = False) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy, precision: Precision | None = None, need_input_grad: bool = True, *,
                 stored: bool = False, need_param_grads: bool = True) -> np.ndarray | None:
        """Gradient of the input (None unless need_input_grad); the parameters' gradients go to
        ``grads`` (emptied instead when not need_param_grads: a pass that only wants dx)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.kind}({self.name or ''})"


def _dims(shape) -> str:
    return ", ".join(str(d) for d in shape)


def _q(fmt, x: np.ndarray) -> np.ndarray:
    return x if fmt is None else np.asarray(fmt.quantize(x), dtype=np.float64)


def _w_stored(p: Precision, W: np.ndarray) -> np.ndarray | None:
    """W in p's storage format as float32 where dense reads it so (float storage that fits
    float32, FP32 sums): rounded once per forward, read again by the backward's dx."""
    s = p.storage
    if isinstance(s, FloatFormat) and s.exp_bits <= 8 and s.man_bits <= 23 and p.acc == FP32:
        with np.errstate(over="ignore", invalid="ignore"):
            return round_to(s, np.asarray(W, dtype=np.float64), np.float32)
    return None


def _sum_rows(dy: np.ndarray, p: Precision | None, stored: bool = False) -> np.ndarray:
    """Sum over axis 0: float64, or sequentially in p.acc (as arith.dense) stored in p.storage.
    stored: dy already holds p.storage values (a float storage)."""
    if p is None:
        return dy.sum(axis=0)
    if p.storage.kind == "float" and p.acc.kind == "float":  # = dense(ones, dy): same order, vectorized
        ones = np.ones((1, dy.shape[0]))
        return dense(ones, dy.reshape(dy.shape[0], -1), in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc,
                     out_fmt=p.storage, x_quantized=True, w_quantized=stored).reshape(dy.shape[1:])
    dy = _q(p.storage, dy)
    acc = np.zeros(dy.shape[1:])
    for row in dy:
        acc = _q(p.acc, acc + _q(p.acc, row))
    return _q(p.storage, acc)


def _init_matrix(rng, init: str, rows: int, cols: int, gain: float) -> np.ndarray:
    """A (rows=fan_out, cols=fan_in) weight matrix, PyTorch's layout, from `init`."""
    if init == "orthogonal":
        # torch.nn.init.orthogonal_: QR of a Gaussian, sign-fixed so Q is unique.
        flat = rng.standard_normal((rows, cols))
        if rows < cols:
            flat = flat.T
        q, r = np.linalg.qr(flat)
        q *= np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return gain * q
    bound = gain / math.sqrt(cols)
    return rng.uniform(-bound, bound, size=(rows, cols))


class _MMLayer(Layer):
    """Shared parameter handling of Dense and Conv2d.

    ``param_formats`` ({'W': fmt, 'b': fmt}, either optional): the layer *uses* its weight / bias
    fake-quantized to that format (a quantization-aware network's, e.g. a QONNX ``Quant`` on the
    weights) before the Precision's storage cast; the float64 masters stay what the optimizer
    steps and their gradients pass through the rounding unchanged (straight-through, as QAT)."""

    is_mm = True
    _init_used: str  # what _init drew the weights with (an imported network's: 'onnx', gain None)
    _gain_used: float | None

    def __init__(self, bias: bool, init: str | None, gain: float | None, param_formats: dict | None = None):
        super().__init__()
        self.bias = bias
        self.init = init
        self.gain = gain
        self.param_formats = dict(param_formats or {})

    def param(self, key: str) -> np.ndarray:
        """The parameter as the layer computes with it: fake-quantized to its param_format, else the
        master itself (the same array)."""
        v = self.params[key]
        f = self.param_formats.get(key)
        return v if f is None else np.asarray(f.quantize(v), dtype=np.float64)

    def _fan(self) -> tuple[int, int]:
        raise NotImplementedError

    def _check_init(self, default_init: str) -> str:
        init = self.init or default_init
        if init not in INITS:
            raise self._error(f"unknown init '{init}', expected one of {', '.join(INITS)}")
        if self.gain is not None and not (isinstance(self.gain, (int, float)) and self.gain > 0):
            raise self._error(f"gain {self.gain!r}, expected a number > 0")
        return init

    def _init(self, rng, default_init):
        init = self._check_init(default_init)
        self._init_used = init
        default_gain = math.sqrt(2) if init == "orthogonal" else 1.0
        self._gain_used = gain = float(default_gain if self.gain is None else self.gain)
        fan_out, fan_in = self._fan()
        if fan_out * fan_in > MAX_LAYER_PARAMS:
            raise self._error(f"{fan_out} x {fan_in} weights, more than the {MAX_LAYER_PARAMS} a layer may have")
        self.params = {"W": self._from_matrix(_init_matrix(rng, init, fan_out, fan_in, gain))}
        if self.bias:
            if init == "orthogonal":
                self.params["b"] = np.zeros(fan_out)
            else:
                bound = 1.0 / math.sqrt(fan_in)
                self.params["b"] = rng.uniform(-bound, bound, size=fan_out)
        self.grads = {}

    def _from_matrix(self, m: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def flops(self, batch: int) -> dict:
        f = 2 * int(batch) * self.macs_per_sample
        return {"forward": f, "backward_input": f, "backward_weight": f}

    def describe(self) -> dict:
        d = super().describe()
        d.update(bias=self.bias, init=getattr(self, "_init_used", self.init),
                 gain=getattr(self, "_gain_used", self.gain))
        if self.param_formats:
            d["param_formats"] = {k: str(f) for k, f in self.param_formats.items()}
        return d

    def _b(self, p: Precision | None):
        b = self.param("b") if "b" in self.params else None
        return b if (b is None or p is None) else _q(p.storage, b)


class Dense(_MMLayer):
    """Fully connected: y = x @ W + b, W (in, out)."""

    kind = "Dense"

    def __init__(self, units: int, bias: bool = True, init: str | None = None, gain: float | None = None,
                 param_formats: dict | None = None):
        super().__init__(bias, init, gain, param_formats)
        self.units = units

    def _build(self, in_shape):
        if not (isinstance(self.units, (int, np.integer)) and self.units >= 1):
            raise self._error(f"units {self.units!r}, expected an integer >= 1")
        if len(in_shape) != 1:
            raise self._error(f"Dense needs a 1-D input, got ({_dims(in_shape)}): add a Flatten before it")
        return (int(self.units),)

    def _fan(self):
        return self.units, self.in_shape[0]

    def _from_matrix(self, m):
        return np.ascontiguousarray(m.T)

    @property
    def macs_per_sample(self):
        return self.in_shape[0] * self.units

    def describe(self):
        d = super().describe()
        d["units"] = self.units
        return d

    def forward(self, x, precision=None, *, stored=False):
        x = self._check_input(x, stored)  # stored float32 x: float32 out on the FP32-sum path
        W, b, p = self.param("W"), self._b(precision), precision
        if p is None:
            y = x @ W
            if b is not None:
                y += b
        else:
            x = x if stored else _q(p.storage, x)
            wq = _w_stored(p, W)
            y = dense(x, W if wq is None else wq, b, in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc,
                      out_fmt=p.storage, x_quantized=p.storage.kind == "float", w_quantized=wq is not None,
                      out32=x.dtype == np.float32)
        self._cache, self._batch = x, x.shape[0]
        self._xfmt = None if p is None else p.storage  # what the cached x was stored in
        self._wq = None if p is None or wq is None else (p, wq)  # W as this forward read it, for the backward
        return y

    def backward(self, dy, precision=None, need_input_grad=True, *, stored=False, need_param_grads=True):
        dy = self._check_dy(dy, stored)  # stored float32 dy: float32 dx and dW on the FP32-sum path
        x, W, p = self._cache, self.param("W"), precision
        self.grads = {}
        if p is None:
            if need_param_grads:
                self.grads["W"] = x.T @ dy
            dx = dy @ W.T if need_input_grad else None
        else:
            fmts = dict(in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc, out_fmt=p.storage)
            flt = p.storage.kind == "float"
            if flt and not stored:
                dy = _q(p.storage, dy)  # once, not in each dense below
            if need_param_grads:
                self.grads["W"] = dense(x.T, dy, **fmts, x_quantized=flt and self._xfmt == p.storage,
                                        w_quantized=flt, out32=dy.dtype == np.float32)
            wq = getattr(self, "_wq", None)  # the forward's stored W (same weights: no update in between)
            wq = wq[1].T if wq is not None and wq[0].storage == p.storage and wq[0].acc == p.acc else None
            dx = (dense(dy, W.T if wq is None else wq, **fmts, x_quantized=flt, w_quantized=wq is not None,
                        out32=dy.dtype == np.float32) if need_input_grad else None)
        if self.bias and need_param_grads:
            self.grads["b"] = _sum_rows(dy, p, stored=p is not None and p.storage.kind == "float")
        return dx


def _pair(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class Conv2d(_MMLayer):
    """2-D convolution, NCHW, valid padding: W (O, C, KH, KW)."""

    kind = "Conv2d"
    _cols = None

    def __init__(self, out_channels: int, kernel_size, stride: int = 1, bias: bool = True,
                 init: str | None = None, gain: float | None = None, param_formats: dict | None = None):
        super().__init__(bias, init, gain, param_formats)
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride

    def _build(self, in_shape):
        o, s = self.out_channels, self.stride
        if not (isinstance(o, (int, np.integer)) and o >= 1):
            raise self._error(f"out_channels {o!r}, expected an integer >= 1")
        k = _pair(self.kernel_size)
        if len(k) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in k):
            raise self._error(f"kernel_size {self.kernel_size!r}, expected an integer >= 1 or a pair of them")
        if not (isinstance(s, (int, np.integer)) and s >= 1):
            raise self._error(f"stride {s!r}, expected an integer >= 1")
        if len(in_shape) != 3:
            raise self._error(f"Conv2d needs a 3-D (C, H, W) input, got ({_dims(in_shape)})")
        c, h, w = in_shape
        kh, kw = self.kernel = (int(k[0]), int(k[1]))
        if kh > h or kw > w:
            raise self._error(f"kernel {kh}x{kw} larger than input {h}x{w}")
        self.stride = int(s)
        return (int(o), (h - kh) // s + 1, (w - kw) // s + 1)

    def _fan(self):
        kh, kw = self.kernel
        return self.out_channels, self.in_shape[0] * kh * kw

    def _from_matrix(self, m):
        return np.ascontiguousarray(m.reshape(self.out_channels, self.in_shape[0], *self.kernel))

    @property
    def macs_per_sample(self):
        o, oh, ow = self.out_shape
        return oh * ow * o * self._fan()[1]

    def describe(self):
        d = super().describe()
        d.update(out_channels=self.out_channels, kernel=self.kernel, stride=self.stride)
        return d

    def _w2(self) -> np.ndarray:
        """W as an im2col weight matrix (C*KH*KW, O)."""
        return self.param("W").reshape(self.out_channels, -1).T

    def forward(self, x, precision=None, *, stored=False):
        x = self._check_input(x)
        p, b, (kh, kw) = precision, self._b(precision), self.kernel
        cols = None
        if p is None:
            cols = im2col(x, kh, kw, self.stride)
            y = cols @ self._w2()
            if b is not None:
                y += b
            y = y.reshape(x.shape[0], *self.out_shape[1:], self.out_channels).transpose(0, 3, 1, 2)
            y = np.ascontiguousarray(y)
        else:
            x = _q(p.storage, x)
            y = conv2d(x, self.param("W"), b, self.stride,
                                in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc, out_fmt=p.storage)
        self._cache, self._batch = x, x.shape[0]
        self._cols = cols  # the float64 path's patches: backward needs them again
        return y

    def backward(self, dy, precision=None, need_input_grad=True, *, stored=False, need_param_grads=True):
        dy = self._check_dy(dy)
        x, p, (kh, kw) = self._cache, precision, self.kernel
        dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, self.out_channels)  # rows in (n, oh, ow) order
        w2, dx = self._w2(), None
        self.grads = {}
        if need_param_grads:
            cols = self._cols
            if cols is None:
                cols = im2col(x, kh, kw, self.stride)
            if p is None:
                dw2 = cols.T @ dy2
            else:
                dw2 = dense(cols.T, dy2, in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc, out_fmt=p.storage)
            self.grads["W"] = np.ascontiguousarray(dw2.T.reshape(self.params["W"].shape))
            if self.bias:
                self.grads["b"] = _sum_rows(dy2, p)
        if need_input_grad:
            if p is None:
                dx = col2im(dy2 @ w2.T, x.shape, kh, kw, self.stride)
            else:
                # the input-gradient kernel's patches (dense_backward: stored in p.storage), summed
                # back into the image by the data mover (float64, one rounding to p.storage)
                dcols = dense(dy2, w2.T, in_fmt=p.storage, w_fmt=p.storage, acc_fmt=p.acc, out_fmt=p.storage)
                dx = _q(p.storage, col2im(dcols, x.shape, kh, kw, self.stride))
        return dx


class Flatten(Layer):
    """(C, H, W) -> (C*H*W,) in C order, as torch.flatten / ONNX Flatten(axis=1)."""

    kind = "Flatten"

    def _build(self, in_shape):
        return (math.prod(in_shape),)

    def forward(self, x, precision=None, *, stored=False):
        x = self._check_input(x)
        self._cache, self._batch = True, x.shape[0]
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, precision=None, need_input_grad=True, *, stored=False, need_param_grads=True):
        dy = self._check_dy(dy)
        return dy.reshape((self._batch,) + self.in_shape) if need_input_grad else None


class _Activation(Layer):
    """Elementwise (or, for Softmax, per-row) function: f in float64, result stored."""

    _closed = False  # f and its backward map stored values to stored values (no output cast)

    def _f(self, x):
        raise NotImplementedError

    def _df(self, dy, x, y):
        raise NotImplementedError

    def _lut(self, x, p):
        """hls4ml's table version of f on stored x (only Tanh/Sigmoid/Softmax have one)."""
        return None

    def forward(self, x, precision=None, *, stored=False):
        x = self._check_input(x, stored and self._closed)  # float32 through ReLU / Identity (exact)
        s = precision.storage if precision is not None else None
        x = x if stored else _q(s, x)
        y = self._lut(x, precision) if precision is not None and precision.lut else None
        table = y is not None
        if y is None:
            y = self._f(x) if self._closed else self._stored_f(x, precision)
        self._cache, self._batch = (x, y, table), x.shape[0]
        return y

    def _stored_f(self, x, p):
        """f of stored x, rounded once to p's storage (float64 f where p is None)."""
        return _q(None if p is None else p.storage, self._f(x))

    def backward(self, dy, precision=None, need_input_grad=True, *, stored=False, need_param_grads=True):
        dy = self._check_dy(dy, stored and self._closed)
        if not need_input_grad:
            return None
        s = precision.storage if precision is not None else None
        x, y, table = self._cache
        if table:  # derivative of the tabulated math at the same input (module docstring)
            y = self._f(x)
        dy = dy if stored else _q(s, dy)
        return self._df(dy, x, y) if self._closed else _q(s, self._df(dy, x, y))


class Identity(_Activation):
    kind = "Identity"
    _closed = True

    def _f(self, x):
        return x.copy()

    def _df(self, dy, x, y):
        return dy.copy()


class ReLU(_Activation):
    kind = "ReLU"
    _closed = True

    def _f(self, x):
        return np.maximum(x, 0.0)

    def _df(self, dy, x, y):
        # np.where(x > 0, dy, 0.0) bit for bit (dy's bits where x > 0, +0 elsewhere) as an integer
        # mask: ~4x faster than numpy's select
        dy = np.asarray(dy)
        if dy.dtype.kind != "f" or dy.shape != np.shape(x):
            return np.where(x > 0, dy, 0.0)
        it = np.dtype(f"i{dy.dtype.itemsize}")
        m = (x > 0).astype(it)
        np.negative(m, out=m)
        m &= dy.view(it)
        return m.view(dy.dtype)


class Tanh(_Activation):
    kind = "Tanh"

    def _f(self, x):
        return np.tanh(x)

    def _lut(self, x, p):
        (t,) = lut_tables("Tanh", p.lut_size, p.lut_table)
        return _q(p.storage, t[_lut_index(x, 4.0, p.lut_size)])

    def _df(self, dy, x, y):
        return dy * (1.0 - y * y)


class Sigmoid(_Activation):
    kind = "Sigmoid"

    def _f(self, x):
        # 0.5 * (1 + tanh(x/2)) is the logistic function without exp overflow.
        return 0.5 * (1.0 + np.tanh(0.5 * x))

    def _lut(self, x, p):
        (t,) = lut_tables("Sigmoid", p.lut_size, p.lut_table)
        return _q(p.storage, t[_lut_index(x, 8.0, p.lut_size)])

    def _df(self, dy, x, y):
        return dy * y * (1.0 - y)


class Softmax(_Activation):
    """Softmax over the features of a 1-D (per sample) input."""

    kind = "Softmax"

    def _build(self, in_shape):
        if len(in_shape) != 1:
            raise self._error(f"Softmax needs a 1-D input, got ({_dims(in_shape)}): add a Flatten before it")
        return in_shape

    def _f(self, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def _lut(self, x, p):
        return _lut_softmax(x, p)

    def _df(self, dy, x, y):
        return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def _number(layer, name: str, v, *, none_ok: bool = False):
    """A finite float parameter of a layer (None where none_ok)."""
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
        raise layer._error(f"{name} {v!r}, expected a finite number")
    return float(v)


class LeakyReLU(_Activation):
    """x for x > 0, alpha * x otherwise (ONNX LeakyRelu, torch nn.LeakyReLU; alpha 0.01 by default).

    With a Precision, alpha is held in the storage format (as hls4ml's ``param_t``, which rlhls sets
    to the storage format) and alpha * x is formed exactly before its one rounding to storage (an
    ap_fixed product, or an IEEE product of two float values)."""

    kind = "LeakyReLU"

    def __init__(self, alpha: float = 0.01):
        super().__init__()
        self.alpha = alpha

    def _build(self, in_shape):
        self.alpha = _number(self, "alpha", self.alpha)
        return in_shape

    def describe(self):
        return super().describe() | {"alpha": self.alpha}

    def _slope(self, p) -> float:
        return self.alpha if p is None else float(np.asarray(p.storage.quantize(np.float64(self.alpha))))

    def _f(self, x):
        return np.where(x > 0, x, self.alpha * x)

    def _stored_f(self, x, p):
        if p is None:
            return self._f(x)
        s, a = p.storage, self._slope(p)
        if s.kind != "fixed":  # alpha * x exact in float64 (both at most 26 significant bits), one rounding
            return _q(s, np.where(x > 0, x, a * x))
        mx, ma = s.to_mantissa(x), int(s.to_mantissa(np.float64(a)))
        m = mx * ma if 2 * s.width <= 62 else mx.astype(object) * ma
        neg, _ = s.cast_mantissa(m, 2 * s.frac_bits)
        return np.where(x > 0, x, s.from_mantissa(neg))

    def forward(self, x, precision=None, *, stored=False):
        self._a_used = self._slope(precision)
        return super().forward(x, precision, stored=stored)

    def _df(self, dy, x, y):
        return np.where(x > 0, dy, getattr(self, "_a_used", self.alpha) * dy)


class Clip(_Activation):
    """min(max(x, lo), hi) (ONNX Clip; torch clamp, ReLU6 = Clip(0, 6), Hardtanh = Clip(-1, 1)); lo or
    hi None: unbounded on that side. The gradient passes where lo < x < hi (torch's hardtanh / relu6
    backward; 0 at the bounds, as ReLU's at 0)."""

    kind = "Clip"

    def __init__(self, lo: float | None = None, hi: float | None = None):
        super().__init__()
        self.lo, self.hi = lo, hi

    def _build(self, in_shape):
        self.lo = _number(self, "lo", self.lo, none_ok=True)
        self.hi = _number(self, "hi", self.hi, none_ok=True)
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise self._error(f"lo {self.lo} > hi {self.hi}")
        return in_shape

    def describe(self):
        return super().describe() | {"lo": self.lo, "hi": self.hi}

    def _f(self, x):
        return np.clip(x, -np.inf if self.lo is None else self.lo, np.inf if self.hi is None else self.hi)

    def _df(self, dy, x, y):
        inside = np.ones(np.shape(x), dtype=bool)
        if self.lo is not None:
            inside &= x > self.lo
        if self.hi is not None:
            inside &= x < self.hi
        return np.where(inside, dy, 0.0)


class Softplus(_Activation):
    """log(1 + exp(x)) (ONNX Softplus); ``threshold`` t: x itself where x > t (torch's nn.Softplus,
    t = 20, which torch's exporter writes as Where(x > 20, x, Softplus(x))). Table mode (hls4ml's
    ``softplus``): the Sigmoid's index over [-8, 8) (``index = trunc(x * N / 16) + N/2``), entry i =
    ``table(float(log(double(expf(in_i)) + 1.)))``, the C library's expf and log."""

    kind = "Softplus"

    def __init__(self, threshold: float | None = None):
        super().__init__()
        self.threshold = threshold

    def _build(self, in_shape):
        self.threshold = _number(self, "threshold", self.threshold, none_ok=True)
        return in_shape

    def describe(self):
        return super().describe() | {"threshold": self.threshold}

    def _f(self, x):
        y = np.logaddexp(0.0, x)  # log(1 + exp(x)) without overflow
        return y if self.threshold is None else np.where(x > self.threshold, x, y)

    def _lut(self, x, p):
        (t,) = lut_tables("Softplus", p.lut_size, p.lut_table)
        return _q(p.storage, t[_lut_index(x, 8.0, p.lut_size)])

    def _df(self, dy, x, y):
        s = 0.5 * (1.0 + np.tanh(0.5 * x))  # the logistic function: softplus' derivative
        if self.threshold is not None:
            s = np.where(x > self.threshold, 1.0, s)
        return dy * s


class Quant(_Activation):
    """Fake quantization to a fixed-point format (a quantization-aware network's activation
    quantizer: QONNX ``Quant`` with a power-of-two scale and zero point 0, Brevitas' QuantReLU /
    QuantIdentity): y = fmt(x), exactly the ap_fixed assignment; then the storage cast (a no-op
    where the storage format holds fmt's values). Backward: the straight-through estimator, dy where
    x lies in fmt's range [min, max] (the clamp's gradient), 0 outside."""

    kind = "Quant"

    def __init__(self, fmt):
        super().__init__()
        self.fmt = fmt

    def _build(self, in_shape):
        if isinstance(self.fmt, str):
            self.fmt = parse_format(self.fmt)
        if getattr(self.fmt, "kind", None) != "fixed":
            raise self._error(f"format {self.fmt!r}, expected a fixed<W,I,...> format")
        return in_shape

    def describe(self):
        return super().describe() | {"format": str(self.fmt)}

    def _f(self, x):
        return np.asarray(self.fmt.quantize(x), dtype=np.float64)

    def _df(self, dy, x, y):
        return np.where((x >= self.fmt.min_value) & (x <= self.fmt.max_value), dy, 0.0)


class LayerNorm(Layer):
    """Layer normalisation over the features of a 1-D input (ONNX LayerNormalization, axis -1; torch
    nn.LayerNorm): y = gamma * (x - mean) / sqrt(var + eps) + beta, var the biased variance;
    parameters 'gamma' (1s) and 'beta' (0s). With a Precision it computes as the activations do:
    float64 on stored x, gamma and beta, each result (y, dx, dgamma, dbeta) rounded once to storage."""

    kind = "LayerNorm"

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def _build(self, in_shape):
        self.eps = _number(self, "eps", self.eps)
        if not self.eps > 0:
            raise self._error(f"eps {self.eps}, expected a number > 0")
        if len(in_shape) != 1:
            raise self._error(f"LayerNorm needs a 1-D input, got ({_dims(in_shape)}): add a Flatten before it")
        return in_shape

    def _init(self, rng, default_init):
        n = self.in_shape[0]
        self.params = {"gamma": np.ones(n), "beta": np.zeros(n)}
        self.grads = {}

    def describe(self):
        return super().describe() | {"eps": self.eps}

    def flops(self, batch: int) -> dict:
        f = super().flops(batch)
        f["backward_weight"] = 3 * int(batch) * self.shapes()[0][0]  # dgamma (mul, add), dbeta (add)
        return f

    def forward(self, x, precision=None, *, stored=False):
        x = self._check_input(x)
        s = precision.storage if precision is not None else None
        x = x if stored else _q(s, x)
        g, b = _q(s, self.params["gamma"]), _q(s, self.params["beta"])
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        r = 1.0 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + self.eps)
        xhat = d * r
        self._cache, self._batch = (xhat, r, g), x.shape[0]
        return _q(s, g * xhat + b)

    def backward(self, dy, precision=None, need_input_grad=True, *, stored=False, need_param_grads=True):
        dy = self._check_dy(dy)
        s = precision.storage if precision is not None else None
        dy = dy if stored else _q(s, dy)
        xhat, r, g = self._cache
        self.grads = {}
        if need_param_grads:
            self.grads = {"gamma": _q(s, (dy * xhat).sum(axis=0)), "beta": _q(s, dy.sum(axis=0))}
        if not need_input_grad:
            return None
        dxhat = dy * g
        dx = r * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
        return _q(s, dx)


# ---------------------------------------------------------------------------- network


class Network:
    """A sequential network: shapes inferred, layers named, parameters initialised from `seed`.

    Layers are copied in, so one list of layer specs can build an online and a target network.
    Names: Dense 'fc1', 'fc2', ...; Conv2d 'conv1', ...; 'flatten'; an activation takes the
    name of the layer before it plus its kind ('fc1_relu').
    """

    def __init__(self, name: str, input_shape: Iterable[int], layers: Iterable[Layer], *, seed: int = 0,
                 init: str = "orthogonal") -> None:
        if not isinstance(name, str) or not name:
            raise RlhlsError(f"network {name!r}: name must be a non-empty string")
        self.name = name
        where = f"network '{name}'"
        try:
            shape = tuple(int(d) for d in input_shape)
        except (TypeError, ValueError):
            raise RlhlsError(f"{where}: input_shape {input_shape!r}, expected (features,) or (C, H, W)") from None
        if len(shape) not in (1, 3) or min(shape) < 1:
            raise RlhlsError(f"{where}: input_shape {tuple(input_shape)},"
                             " expected (features,) or (C, H, W) of sizes >= 1")
        if init not in INITS:
            raise RlhlsError(f"{where}: unknown init '{init}', expected one of {', '.join(INITS)}")
        layers = list(layers)
        if not layers:
            raise RlhlsError(f"{where}: no layers")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise RlhlsError(f"{where}: layer {i} is {layer!r}, expected a Layer (Dense, Conv2d, ...)")
        self.input_shape = shape
        self.seed = seed
        self.init = init
        # an imported network's graph name, input and output as its file wrote them (onnx_import): an
        # export goes out in the same layout
        self.onnx_io: dict | None = None
        self.layers: list[Layer] = [self._adopt(layer) for layer in layers]
        self._name_layers()

        rng = np.random.default_rng(seed)
        for layer in self.layers:
            layer.in_shape = shape
            shape = layer.out_shape = layer._build(shape)
            layer._init(rng, init)
        self.output_shape = shape

    def _adopt(self, spec: Layer) -> Layer:
        layer = copy.copy(spec)
        layer.params, layer.grads, layer._cache = {}, {}, None
        layer._net = self.name
        return layer

    def _name_layers(self) -> None:
        counts = {"Dense": 0, "Conv2d": 0}
        self._by_name: dict[str, Layer] = {}
        prev = None
        for layer in self.layers:
            if layer.kind in counts:
                counts[layer.kind] += 1
                base = ("fc" if layer.kind == "Dense" else "conv") + str(counts[layer.kind])
            elif layer.kind == "Flatten":
                base = "flatten"
            else:
                base = f"{prev}_{layer.kind.lower()}" if prev else layer.kind.lower()
            name, k = base, 2
            while name in self._by_name:
                name, k = f"{base}{k}", k + 1
            self._by_name[name] = layer
            layer.name = prev = name

    # -- structure
    @property
    def n_params(self) -> int:
        return sum(layer.n_params for layer in self.layers)

    @property
    def mm_layers(self) -> list[_MMLayer]:
        return [layer for layer in self.layers if isinstance(layer, _MMLayer)]  # the layers with is_mm

    def __getitem__(self, name: str) -> Layer:
        try:
            return self._by_name[name]
        except KeyError:
            raise RlhlsError(f"network '{self.name}': no layer '{name}'"
                             f" (layers: {', '.join(self._by_name)})") from None

    def flops(self, batch: int) -> list[tuple[str, dict]]:
        """Per layer and phase. The first layer's backward_input is counted although
        Network.backward skips it unless need_input_grad."""
        return [(name, layer.flops(batch)) for name, layer in self._by_name.items()]

    def describe(self) -> list[dict]:
        return [layer.describe() for layer in self.layers]

    def summary(self) -> str:
        lines = []
        for d in self.describe():
            extra = ""
            if d["kind"] == "Dense":
                extra = f"units={d['units']}"
            elif d["kind"] == "Conv2d":
                kh, kw = d["kernel"]
                extra = f"out_channels={d['out_channels']} kernel={kh}x{kw} stride={d['stride']}"
            if "init" in d:
                extra += f" init={d['init']} gain={d['gain']:.4g}" + ("" if d["bias"] else " no-bias")
            lines.append(f"{d['name']:<16} {d['kind']:<8} {d['in_shape']} -> {d['out_shape']}"
                         f"  params={d['params']}  {extra}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Network('{self.name}', {self.input_shape} -> {self.output_shape}, {len(self.layers)} layers)"

    # -- parameters
    def get_params(self) -> dict[str, np.ndarray]:
        """Copies of the parameters, keyed 'fc1.W', 'fc1.b', ..."""
        return {f"{l.name}.{k}": v.copy() for l in self.layers for k, v in l.params.items()}

    def set_params(self, params: dict) -> None:
        """Set every parameter (same keys and shapes as get_params); values are copied."""
        own = {f"{l.name}.{k}": (l, k) for l in self.layers for k in l.params}
        unknown = sorted(set(params) - set(own))
        missing = sorted(set(own) - set(params))
        if unknown or missing:
            raise RlhlsError(f"network '{self.name}': set_params keys do not match"
                             f" (unknown: {unknown or 'none'}, missing: {missing or 'none'})")
        new = {}
        for key, (layer, k) in own.items():
            v = np.array(params[key], dtype=np.float64)
            if v.shape != layer.params[k].shape:
                raise RlhlsError(f"network '{self.name}': layer {layer.name}: {k} has shape {v.shape},"
                                 f" expected {layer.params[k].shape}")
            new[key] = v
        for key, (layer, k) in own.items():
            layer.params[k] = new[key]

    @property
    def grads(self) -> dict[str, np.ndarray]:
        """The last backward's gradients (not copies), keyed like get_params."""
        return {f"{l.name}.{k}": v for l in self.layers for k, v in l.grads.items()}

    def zero_grads(self) -> None:
        for layer in self.layers:
            layer.grads = {k: np.zeros_like(v) for k, v in layer.params.items()}

    # -- compute
    def _precision_of(self, precision: Precision | dict | None) -> list[Precision | None]:
        if precision is None or isinstance(precision, Precision):
            return [precision] * len(self.layers)
        if isinstance(precision, dict):
            unknown = [k for k in precision if k not in self._by_name]
            if unknown:
                raise RlhlsError(f"network '{self.name}': precision given for unknown layer '{unknown[0]}'"
                                 f" (layers: {', '.join(self._by_name)})")
            return [precision.get(layer.name) for layer in self.layers]
        raise RlhlsError(f"network '{self.name}': precision {precision!r}, expected None, a Precision"
                         " or a dict layer name -> Precision")

    @contextlib.contextmanager
    def _where(self, layer: Layer) -> Iterator[None]:
        """Prefix errors from arith / formats (e.g. an unsupported format pair) with the layer."""
        try:
            yield
        except RlhlsError as e:
            if str(e).startswith("network "):
                raise
            raise RlhlsError(f"network '{self.name}': layer {layer.name}: {e}") from None

    def forward(self, x, precision: Precision | dict | None = None) -> np.ndarray:
        """x (N, *input_shape) -> y (N, *output_shape). precision: None (float64), a
        Precision for every layer, or a dict layer name -> Precision (missing: float64)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != len(self.input_shape) + 1 or x.shape[1:] != self.input_shape:
            raise RlhlsError(f"network '{self.name}': input has shape {x.shape},"
                             f" expected (N, {_dims(self.input_shape)})")
        for layer, p in zip(self.layers, self._precision_of(precision)):
            with self._where(layer):
                x = layer.forward(x, p)
        return x

    __call__ = forward

    def backward(self, dy, precision: Precision | dict | None = None, need_input_grad: bool = False,
                 param_grads: bool = True) -> np.ndarray | None:
        """Back-propagate dy (N, *output_shape) through the last forward; stores every
        layer's grads (summed over the batch, overwriting the previous ones). Returns the
        input gradient if need_input_grad, else None (and stops below the first MM layer).
        param_grads=False computes the input gradient alone (DDPG's dQ/da through the critic):
        every layer's grads are left empty."""
        precisions = self._precision_of(precision)
        mm = [i for i, layer in enumerate(self.layers) if layer.is_mm or layer.params]  # layers with weights
        stop = 0 if (need_input_grad or not mm) else mm[0]
        for i in range(len(self.layers) - 1, stop - 1, -1):
            with self._where(self.layers[i]):
                dy = self.layers[i].backward(dy, precisions[i], need_input_grad=need_input_grad or i > stop,
                                             need_param_grads=param_grads)
        return dy if need_input_grad else None

    def to_onnx(self, **kwargs) -> onnx.ModelProto:
        """The forward network as an ONNX model; see rlhls.designs.onnx_export.export_onnx (a file:
        rlhls.flow.onnx_file.write_onnx)."""
        from .onnx_export import export_onnx

        return export_onnx(self, **kwargs)
