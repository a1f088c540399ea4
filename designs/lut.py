"""hls4ml's activation lookup tables, emulated bit for bit (tanh, sigmoid, softplus, 'stable' softmax).

The hardware computes these activations with hls4ml's tables; a `Precision` with a table
format / size (designs/network.py) makes the emulator do the same. Table entries are computed
with the C library's float functions, as hls4ml's table-initialisation code does in csim.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from rlhls.core.errors import RlhlsError

from .formats import FixedFormat

if TYPE_CHECKING:
    from .network import Precision


def _q(fmt, x: np.ndarray) -> np.ndarray:
    return x if fmt is None else np.asarray(fmt.quantize(x), dtype=np.float64)

SOFTMAX_NORM_INT = 4  # x_max - x_i is clipped to [0, 16): exp(-16) ~ 1e-7


def softmax_table_formats(n: int, table_size: int, width: int) -> dict:
    """The five fixed-point types of hls4ml's 'stable' softmax for n classes (our choice; hls4ml's
    defaults index its tables by the TOP bits of wide types, which made every output 1/n):

    inp_norm  ufixed<w, 4, TRN, SAT>         x_max - x_i, covers [0, 16), index step 16/N
    exp_table ufixed<w, 1, RND, SAT>         exp(-d) in (0, 1]
    accum     ufixed<w+lg, 1+lg, RND, SAT>   exact sum of n table values (lg = ceil log2 n)
    inv_inp   ufixed<w, sum_int, TRN, SAT>   the sum S in [1, n] < 2**sum_int
    inv_table ufixed<w, 1, RND, SAT>         1/S for S >= 1 (entries for S < 1 are never indexed)

    Needs w >= log2(table_size) (the index is the top log2(N) bits)."""
    lgn = int(table_size).bit_length() - 1
    if width < lgn:
        raise RlhlsError(f"softmax tables: width {width} < log2(table_size) = {lgn}: the table index is"
                         " the top log2(table_size) bits of the types; use a wider table format")
    sum_int = max(1, math.ceil(math.log2(n + 1)))
    lg = max(1, math.ceil(math.log2(n)))
    u = lambda w, i, q: FixedFormat(w, i, False, q, "SAT")  # noqa: E731
    return {"inp_norm": u(width, SOFTMAX_NORM_INT, "TRN"), "exp_table": u(width, 1, "RND"),
            "accum": u(width + lg, 1 + lg, "RND"), "inv_inp": u(width, sum_int, "TRN"),
            "inv_table": u(width, 1, "RND")}


def _softmax_width(table) -> int:
    return table.width if table.kind == "fixed" else 32


@functools.lru_cache(maxsize=None)
def _libm():
    """The C library's float tanhf/expf (what hls4ml's table init calls), or None."""
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        fns = []
        for name in ("tanhf", "expf"):
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
            fns.append(f)
        return tuple(fns)
    except (OSError, AttributeError):
        return None


def _c_float_fn(name: str, x: np.ndarray) -> np.ndarray:
    """float32 tanhf/expf of float32 x, by the C library if loadable."""
    x = np.asarray(x, dtype=np.float32)
    fns = _libm()
    if fns is None:
        ref = np.tanh if name == "tanhf" else np.exp
        return ref(x.astype(np.float64)).astype(np.float32)
    f = fns[0 if name == "tanhf" else 1]
    return np.array([f(float(v)) for v in x.ravel()], dtype=np.float32).reshape(x.shape)


@functools.lru_cache(maxsize=None)
def _libm_log():
    """The C library's double log, or None."""
    try:
        import ctypes
        import ctypes.util

        f = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").log
        f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
        return f
    except (OSError, AttributeError):
        return None


def _c_log(x: np.ndarray) -> np.ndarray:
    """float64 log of x by the C library if loadable (numpy's own may differ in the last bit)."""
    f = _libm_log()
    if f is None or _libm() is None:
        return np.log(x)
    return np.array([f(float(v)) for v in np.ravel(x)], dtype=np.float64).reshape(np.shape(x))


@functools.lru_cache(maxsize=64)
def lut_tables(kind: str, table_size: int, table, n: int = 0) -> tuple:
    """hls4ml's table contents as float64 values of their types (read-only arrays):
    ('Tanh'|'Sigmoid'|'Softplus', N, table) -> (table,); ('Softmax', N, table, n) -> (exp_table, inv_table)."""
    N = int(table_size)
    i = np.arange(N, dtype=np.float64)
    if kind in ("Tanh", "Sigmoid", "Softplus"):
        half = 4.0 if kind == "Tanh" else 8.0
        x = (2 * half * (i - N / 2.0) / N).astype(np.float32)  # float in_val
        if kind == "Tanh":
            v = _c_float_fn("tanhf", x)
        elif kind == "Sigmoid":  # 1.0 / (1 + std::exp(-x)): float add, double divide, returned as float
            s = np.float32(1) + _c_float_fn("expf", -x)
            v = (1.0 / s.astype(np.float64)).astype(np.float32)
        else:  # std::log(std::exp(x) + 1.): float exp, double add and log, returned as float
            v = _c_log(_c_float_fn("expf", x).astype(np.float64) + 1.0).astype(np.float32)
        out: tuple[np.ndarray, ...] = (np.asarray(table.quantize(v.astype(np.float64)), dtype=np.float64),)
    elif kind == "Softmax":
        f = softmax_table_formats(n, N, _softmax_width(table))
        lgn = N.bit_length() - 1
        xe = (i * 2.0 ** (SOFTMAX_NORM_INT - lgn)).astype(np.float32)  # value of the top bits = i
        e = np.asarray(f["exp_table"].quantize(_c_float_fn("expf", -xe).astype(np.float64)), dtype=np.float64)
        xi = (i * 2.0 ** (f["inv_inp"].int_bits - lgn)).astype(np.float32)
        with np.errstate(divide="ignore"):
            inv = (np.float32(1) / xi).astype(np.float64)  # entry 0 (1/0) is never indexed
        out = (e, np.asarray(f["inv_table"].quantize(inv), dtype=np.float64))
    else:
        raise RlhlsError(f"lut_tables: no table for '{kind}'")
    for a in out:
        a.setflags(write=False)
    return out


def _lut_index(x: np.ndarray, half: float, N: int) -> np.ndarray:
    """hls4ml's int(data * N / (2*half)) + N/2, clipped (truncation toward zero)."""
    r = np.trunc(x * (N / (2.0 * half)))
    return (np.clip(r + N // 2, 0, N - 1)).astype(np.int64)


def _reduce_add(cols: list, fmt) -> np.ndarray:
    """nnet::reduce with Op_add<accum_t>: balanced tree, left part = largest power of 2 < n."""
    n = len(cols)
    if n == 1:
        return cols[0]
    if n == 2:
        return _q(fmt, cols[0] + cols[1])
    left = 1 << ((n - 1).bit_length() - 1)
    return _q(fmt, _reduce_add(cols[:left], fmt) + _reduce_add(cols[left:], fmt))


def _top_bits(fmt, v: np.ndarray, lgn: int) -> np.ndarray:
    """softmax_idx_from_real_val: the top lgn bits of an unsigned fixed value."""
    return np.right_shift(fmt.quantize_mantissa(v), fmt.width - lgn)


def _lut_softmax(x: np.ndarray, p: "Precision") -> np.ndarray:
    N, table = p.lut_size, p.lut_table
    n = x.shape[-1]
    f = softmax_table_formats(n, N, _softmax_width(table))
    exp_t, inv_t = lut_tables("Softmax", N, table, n)
    lgn = N.bit_length() - 1
    d = _q(f["inp_norm"], x.max(axis=-1, keepdims=True) - x)
    e = _q(f["accum"], exp_t[_top_bits(f["inp_norm"], d, lgn)])
    s = _q(f["inv_inp"], _reduce_add([e[:, k] for k in range(n)], f["accum"]))
    inv = inv_t[_top_bits(f["inv_inp"], s, lgn)][:, None]
    st = p.storage
    if not isinstance(st, FixedFormat):
        return _q(st, e * inv)
    fa, fi = f["accum"].frac_bits, f["inv_table"].frac_bits
    me, mi = f["accum"].to_mantissa(e), f["inv_table"].to_mantissa(np.broadcast_to(inv, e.shape))
    if f["accum"].width + f["inv_table"].width <= 62:
        m = me * mi
    else:  # the exact product needs more than 64 bits
        m = me.astype(object) * mi.astype(object)
    out, _ = st.cast_mantissa(m, fa + fi)
    return st.from_mantissa(out)


