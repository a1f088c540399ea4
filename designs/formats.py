"""Numeric formats: fixed point (ap_fixed semantics), IEEE-style floats, n-bit uniform codewords.

Grammar (``parse_format(text)``; ``str(fmt)`` gives the canonical text back)::

    fixed<W,I[,Q[,O]]>     signed fixed point, exactly Xilinx ap_fixed<W,I,AP_Q,AP_O>
    ufixed<W,I[,Q[,O]]>    unsigned fixed point, exactly ap_ufixed<W,I,AP_Q,AP_O>
        W  total width, 1..64 (ufixed: 1..63, mantissas are int64)
        I  integer bits incl. the sign bit, -512..512 (I < 0 and I > W allowed)
        Q  TRN (default) | TRN_ZERO | RND | RND_ZERO | RND_MIN_INF | RND_INF | RND_CONV
        O  WRAP (default) | SAT | SAT_ZERO | SAT_SYM        (AP_WRAP_SM is not supported)
        The C spellings are accepted too: ``ap_fixed<27,4,AP_RND,AP_SAT>``.
    fp32 | fp16 | bf16     IEEE binary32 / binary16 / bfloat16
    float<E,M>             generic IEEE-style float: E exponent bits (2..11), M mantissa bits
                           (1..52); str() of (8,23)/(5,10)/(8,7) is fp32/fp16/bf16
    uq<n>                  n-bit uniform codeword (n = 1..16) of a standardized value (HEPPO-GAE)

``parse_format`` also accepts a NumericFormat and returns it unchanged. Canonical text omits
defaults: ``fixed<16,6>``, ``fixed<16,6,RND>``, ``fixed<27,4,RND,SAT>``,
``fixed<8,3,TRN,SAT>`` (Q is written whenever O is).

Fixed point
    A value is ``m * 2**-F`` with integer mantissa m, F = W - I fractional bits;
    signed m in [-2**(W-1), 2**(W-1)-1], unsigned m in [0, 2**W-1].
    Conversion (from float64, or ``cast_mantissa`` from another fixed point) is ap_fixed's:
    first quantization of the exact value to a multiple of 2**-F (Q: TRN floor, TRN_ZERO
    toward zero, RND ties up, RND_ZERO ties toward zero, RND_MIN_INF ties down, RND_INF ties
    away from zero, RND_CONV ties to even), then overflow of the rounded value (so a rounding
    carry can overflow): WRAP keeps the low W bits, SAT clamps to [min, max], SAT_ZERO gives 0,
    SAT_SYM clamps to [-max, max] (signed: the most negative code is never produced, and
    producing it counts as an overflow; unsigned SAT_SYM = SAT). Signed SAT_SYM needs W >= 2
    (at W = 1 ap_fixed writes the most negative code anyway, i.e. it is SAT).
    The overflow count is the number of values whose rounded value lies outside the range
    (for WRAP too). Non-finite inputs (not a C++ comparison, ap_fixed warns on them): NaN -> 0,
    +-Inf behave like a huge value of that sign (SAT -> max/min, SAT_SYM -> +-max,
    SAT_ZERO and WRAP -> 0); all are counted as overflows.
    Exactness: the float64 input is split exactly into a 53-bit integer and an exponent
    (np.frexp) and everything after that is int64 shifts with a sticky bit, so W up to 64 is
    exact (a float64-only path would be exact only up to 53 bits). Measured on 10**6 values
    (numpy 2.4, 2 CPUs): fixed<27,4,RND,SAT> 42 ms, fixed<64,24,RND,SAT> 46 ms, vs 19 ms for a
    float64-only floor/clip path that agrees only while W <= 53. The float64 that
    ``quantize`` returns is exact whenever the result has <= 53 significant bits, which from a
    float64 input is always so except saturation to +-max when W > 53: those are returned
    rounded toward zero (still a value of the format). ``quantize_mantissa`` is exact always.

Floats
    Round to nearest even with a single rounding from float64, subnormals, +-Inf and NaN as
    the IEEE formats have them; a finite input whose rounded magnitude exceeds the largest
    finite value (i.e. |x| >= max + half an ulp) becomes +-Inf and counts as an overflow.
    Computed by numpy's float64 -> float32 / float16 casts (fp32, fp16), ml_dtypes' float32 ->
    bfloat16 cast (bf16 of values that are float32s; from float64 it would round twice), else
    one float64 add of a power-of-two magic constant (``_quantize_magic``); all equal the frexp /
    np.round reference (``_quantize_frexp``, still used for E = 11 or M > 50), tested bit for bit.

Uniform codeword uq<n> (HEPPO-GAE II.B-C; standardization lives in ``quantizer.py``)
    Input is in standardized units (x - mu) / sigma. Clipping range [-CLIP, CLIP) with
    CLIP = 4 (a standard normal falls outside with probability 6e-5); 2**n levels, mid-rise,
    step = 2*CLIP / 2**n = 2**(3-n):  code = clamp(floor(x / step), -2**(n-1), 2**(n-1)-1)
    + 2**(n-1)  and  decode(code) = (code - 2**(n-1) + 1/2) * step.  Because step is a power
    of two, the code is the offset-binary view of ap_fixed<n,3,AP_TRN,AP_SAT>(x): hardware
    needs no multiplier. Error <= step/2 for x in [-CLIP, CLIP]; values outside [-CLIP, CLIP)
    and NaN (encoded as 0, i.e. code 2**(n-1)) are counted as overflows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TypeVar

import ml_dtypes as _ml_dtypes
import numpy as np

from rlhls.core.errors import RlhlsError

__all__ = [
    "NumericFormat", "FixedFormat", "FloatFormat", "UniformFormat",
    "FP32", "FP16", "BF16", "parse_format", "parse_format_as", "QUANT_MODES", "OVERFLOW_MODES", "round_half",
    "set_round_kernel",
]

QUANT_MODES = ("TRN", "TRN_ZERO", "RND", "RND_ZERO", "RND_MIN_INF", "RND_INF", "RND_CONV")
OVERFLOW_MODES = ("WRAP", "SAT", "SAT_ZERO", "SAT_SYM")
MAX_ABS_INT_BITS = 512  # keeps every value and LSB of a fixed format a normal float64

_I64_MAX = np.int64(2**63 - 1)


class NumericFormat:
    """A number format: quantizes numpy arrays, names its C++ type, knows its width."""

    @property
    def bits(self) -> int:  # storage width in bits
        raise NotImplementedError

    @property
    def cpp_type(self) -> str:
        raise NotImplementedError

    @property
    def kind(self) -> str:  # 'fixed' | 'float' | 'uniform'
        raise NotImplementedError

    def quantize(self, x, *, return_overflow=False):
        raise NotImplementedError


def _err(text, what):
    e = RlhlsError(f"format {text!r}: {what}")
    e.what = what  # lets parse_format re-word the message with the user's own text
    return e


# ----------------------------------------------------------------------------- fixed point

def _round_right(m, s, quant):
    """Q(m * 2**-s) for int64 m and shift s >= 1 (scalar or array), exactly as ap_fixed."""
    scalar = np.ndim(s) == 0
    if quant != "TRN" and m.size and (1 <= int(s) <= 61 if scalar else (s.min() >= 1 and s.max() <= 61)):
        if m.max() < (1 << 62) and m.min() > -(1 << 62):
            # Headroom for an add-then-floor-shift form of each mode (h = half an LSB).
            s = int(s) if scalar else s
            h = (1 << (s - 1)) if scalar else np.left_shift(np.int64(1), s - 1)
            if quant == "RND":
                return np.right_shift(m + h, s)
            if quant == "RND_MIN_INF":
                return np.right_shift(m + (h - 1), s)
            if quant == "RND_ZERO":
                return np.right_shift(m + h - (m >= 0), s)
            if quant == "RND_INF":
                return np.right_shift(m + h - (m < 0), s)
            if quant == "RND_CONV":
                return np.right_shift(m + (h - 1) + (np.right_shift(m, s) & 1), s)
            return np.right_shift(m + (np.right_shift(m, 63) & (2 * h - 1)), s)  # TRN_ZERO
    pre = s - 62
    if np.any(pre > 0):
        # Collapse shifts beyond 62 into a sticky bit 0: keeps the round bit and the OR of
        # everything below it, and the remaining shift (62) keeps bit 0 below the round bit.
        prec = np.clip(pre, 0, 63)
        mask = np.where(prec >= 63, _I64_MAX, np.left_shift(np.int64(1), np.minimum(prec, 62)) - 1)
        sticky = np.where(pre >= 64, m != 0, (m & mask) != 0)
        m = np.where(pre > 0, np.right_shift(m, prec) | sticky.astype(np.int64), m)
        s = np.minimum(s, 62)
    neg = m < 0
    fl = np.right_shift(m, s)
    if quant == "TRN":
        return fl
    qb = (np.right_shift(m, s - 1) & 1).astype(bool)
    r = (m & (np.left_shift(np.int64(1), s - 1) - 1)) != 0
    if quant == "RND":
        inc = qb
    elif quant == "RND_ZERO":
        inc = qb & (neg | r)
    elif quant == "RND_MIN_INF":
        inc = qb & r
    elif quant == "RND_INF":
        inc = qb & (~neg | r)
    elif quant == "RND_CONV":
        inc = qb & (((fl & 1) != 0) | r)
    else:  # TRN_ZERO
        inc = neg & (qb | r)
    return fl + inc


def _shift_round(m, s, quant):
    """Rounded value of m * 2**-s: (low 64 bits, flag 'outside int64'). s scalar or array."""
    s = np.asarray(s, dtype=np.int64)
    if s.ndim == 0:
        if s > 0:
            return _round_right(m, s, quant), None
        k = int(-s)
        if k > 63:
            return np.zeros_like(m), m != 0
        t = np.left_shift(m, k)
        return t, np.right_shift(t, k) != m
    right = s > 0
    if right.all():  # the common case: only right shifts
        return _round_right(m, s, quant), None
    t_r = _round_right(m, np.maximum(s, 1), quant)
    k = np.maximum(-s, 0)
    kc = np.minimum(k, 63)
    t_l = np.left_shift(m, kc)
    big = (np.right_shift(t_l, kc) != m) | ((k > 63) & (m != 0))
    t_l = np.where(k > 63, 0, t_l)
    return np.where(right, t_r, t_l), (~right) & big


@dataclass(frozen=True)
class FixedFormat(NumericFormat):
    """ap_fixed<W,I,Q,O> (signed) / ap_ufixed<W,I,Q,O>; see the module docstring."""

    width: int
    int_bits: int
    signed: bool = True
    quant: str = "TRN"
    overflow: str = "WRAP"

    def __post_init__(self):
        text = _fixed_text(self)
        if not isinstance(self.width, (int, np.integer)) or isinstance(self.width, bool):
            raise _err(text, "width W must be an integer")
        if not isinstance(self.int_bits, (int, np.integer)) or isinstance(self.int_bits, bool):
            raise _err(text, "integer bits I must be an integer")
        object.__setattr__(self, "width", int(self.width))
        object.__setattr__(self, "int_bits", int(self.int_bits))
        object.__setattr__(self, "signed", bool(self.signed))
        if self.width < 1:
            raise _err(text, "width W must be >= 1")
        if self.width > (64 if self.signed else 63):
            raise _err(text, f"width W must be <= {64 if self.signed else 63} "
                             "(mantissas are int64)")
        if abs(self.int_bits) > MAX_ABS_INT_BITS:
            raise _err(text, f"integer bits I must be in -{MAX_ABS_INT_BITS}..{MAX_ABS_INT_BITS}")
        if self.quant not in QUANT_MODES:
            raise _err(text, f"unknown quantization mode {self.quant!r} "
                             f"(expected one of {', '.join(QUANT_MODES)})")
        if self.overflow not in OVERFLOW_MODES:
            raise _err(text, f"unknown overflow mode {self.overflow!r} "
                             f"(expected one of {', '.join(OVERFLOW_MODES)})")
        if self.signed and self.width == 1 and self.overflow == "SAT_SYM":
            raise _err(text, "signed SAT_SYM needs W >= 2 (its symmetric range would be {0})")

    # -- description
    @property
    def kind(self):
        return "fixed"

    @property
    def bits(self):
        return self.width

    @property
    def frac_bits(self):
        return self.width - self.int_bits

    @property
    def lsb(self):
        return float(np.ldexp(1.0, -self.frac_bits))

    @property
    def min_mantissa(self):
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max_mantissa(self):
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1

    @property
    def min_value(self):
        return float(self.from_mantissa(np.int64(self.min_mantissa)))

    @property
    def max_value(self):  # rounded toward zero to float64 when W > 53
        return float(self.from_mantissa(np.int64(self.max_mantissa)))

    @property
    def cpp_type(self):
        name = "ap_fixed" if self.signed else "ap_ufixed"
        args = [str(self.width), str(self.int_bits)]
        if self.quant != "TRN" or self.overflow != "WRAP":
            args.append("AP_" + self.quant)
        if self.overflow != "WRAP":
            args.append("AP_" + self.overflow)
        return f"{name}<{','.join(args)}>"

    def __str__(self):
        return _fixed_text(self)

    # -- mantissas
    def _finish(self, t, big, neg_src):
        """Overflow stage: t = low 64 bits of the rounded mantissa, big = it lies outside int64."""
        lo_m, hi_m = self.min_mantissa, self.max_mantissa
        sym = self.signed and self.overflow == "SAT_SYM"
        if big is None and self.overflow != "SAT_ZERO":
            # Fast forms: the count is the number of values the overflow stage changed.
            if self.overflow == "WRAP":
                out = self._wrap(t)
            else:  # SAT, SAT_SYM (the most negative code is clipped to -max too)
                out = np.clip(t, -hi_m if sym else lo_m, hi_m)
            return out, int(np.count_nonzero(out != t))
        if big is None:
            hi = t > hi_m
            lo = t < lo_m
        else:
            hi = np.where(big, ~neg_src, t > hi_m)
            lo = np.where(big, neg_src, t < lo_m)
        if sym:
            lo = lo | ((t == lo_m) if big is None else (~big & (t == lo_m)))
        ovf = hi | lo
        n_ovf = int(np.count_nonzero(ovf))
        if n_ovf == 0:
            return t, 0
        if self.overflow == "WRAP":
            return self._wrap(t), n_ovf
        if self.overflow == "SAT_ZERO":
            return np.where(ovf, 0, t), n_ovf
        lo_sat = -hi_m if sym else lo_m
        return np.where(hi, np.int64(hi_m), np.where(lo, np.int64(lo_sat), t)), n_ovf

    def _wrap(self, t):
        """Keep the low W bits of int64 t (t holds the low 64 bits of the true value)."""
        W = self.width
        if self.signed:
            return t if W == 64 else np.right_shift(np.left_shift(t, 64 - W), 64 - W)
        return t & np.int64((1 << W) - 1)

    def cast_mantissa(self, m, frac_bits):
        """Re-quantize integer mantissas m (value m * 2**-frac_bits) into this format.

        Q then O exactly as an ap_fixed assignment. m: int64 array, or an object array of
        Python ints (any size, for sums/products wider than 64 bits). Returns
        (int64 mantissas, overflow count).
        """
        m = np.asarray(m)
        if m.dtype == object:
            return self._cast_pyint(m, int(frac_bits))
        m = m.astype(np.int64, copy=False)
        t, big = _shift_round(m, int(frac_bits) - self.frac_bits, self.quant)
        return self._finish(t, big, m < 0)

    def _cast_pyint(self, m, frac_bits):
        """Same as cast_mantissa on Python ints (exact, slow; for > 64-bit intermediates)."""
        flat = m.ravel()
        out = np.empty(flat.shape, dtype=np.int64)
        n_ovf = 0
        s = frac_bits - self.frac_bits
        q = self.quant
        lo_m, hi_m, W = self.min_mantissa, self.max_mantissa, self.width
        for i, v in enumerate(flat.tolist()):
            v = int(v)
            if s > 0:
                fl = v >> s
                qb = (v >> (s - 1)) & 1
                r = (v & ((1 << (s - 1)) - 1)) != 0
                neg = v < 0
                inc = {"TRN": 0, "RND": qb, "RND_ZERO": qb and (neg or r),
                       "RND_MIN_INF": qb and r, "RND_INF": qb and ((not neg) or r),
                       "RND_CONV": qb and ((fl & 1) or r),
                       "TRN_ZERO": neg and (qb or r)}[q]
                v = fl + int(bool(inc))
            else:
                v <<= -s
            over = v > hi_m or v < lo_m or (self.signed and self.overflow == "SAT_SYM" and v == lo_m)
            if over:
                n_ovf += 1
                if self.overflow == "WRAP":
                    v = ((v - lo_m) % (1 << W)) + lo_m
                elif self.overflow == "SAT_ZERO":
                    v = 0
                elif v > hi_m:
                    v = hi_m
                else:
                    v = -hi_m if (self.signed and self.overflow == "SAT_SYM") else lo_m
            out[i] = v
        return out.reshape(m.shape), n_ovf

    def quantize_mantissa(self, x, *, return_overflow=False):
        """float64 -> int64 mantissas of this format, exactly as ap_fixed's double constructor."""
        x = np.asarray(x, dtype=np.float64)
        finite = np.isfinite(x)
        all_finite = bool(finite.all())
        xs = x if all_finite else np.where(finite, x, 0.0)
        f, e = np.frexp(xs)
        m = np.ldexp(f, 53).astype(np.int64)  # exact: x = m * 2**(e-53)
        s = (53 - e).astype(np.int64) - self.frac_bits
        far = s > 61
        if far.any():  # |value| < 2**-8 LSB: only sign and non-zero matter, and 1 * 2**-61 has both
            m = np.where(far, np.sign(m), m)
            s = np.minimum(s, 61)
        if not all_finite:
            inf = np.isinf(x)
            m = np.where(inf, np.where(x > 0, 1, -1), m)
            s = np.where(inf, -4096, s)  # +-Inf: a huge power of two
        t, big = _shift_round(m, s, self.quant)
        out, n_ovf = self._finish(t, big, m < 0)
        if not all_finite:
            nan = np.isnan(x)
            out = np.where(nan, 0, out)
            n_ovf += int(np.count_nonzero(nan))
        return (out, n_ovf) if return_overflow else out

    def to_mantissa(self, x):
        """Values already representable in this format -> int64 mantissas (RlhlsError if not)."""
        x = np.asarray(x, dtype=np.float64)
        y = np.ldexp(x, self.frac_bits)
        top = 2.0 ** (self.width - self.signed)  # exclusive bound, exact in float64
        bad = ~np.isfinite(y) | (y != np.floor(y)) | (y < self.min_mantissa) | (y >= top)
        if np.any(bad):
            v = x[bad].ravel()[0]
            raise RlhlsError(f"format {str(self)!r}: {int(np.count_nonzero(bad))} value(s) not "
                             f"representable (e.g. {v!r}); quantize them first")
        return y.astype(np.int64)

    def from_mantissa(self, m):
        """int64 mantissas -> float64 values (exact up to 53 significant bits, else toward zero)."""
        m = np.asarray(m, dtype=np.int64)
        return np.ldexp(_int64_to_float_trunc(m), -self.frac_bits)

    def quantize(self, x, *, return_overflow=False):
        m, n_ovf = self.quantize_mantissa(x, return_overflow=True)
        y = self.from_mantissa(m)
        return (y, n_ovf) if return_overflow else y


def _int64_to_float_trunc(m):
    """int64 -> float64, exact below 2**53 and rounded toward zero above."""
    f = m.astype(np.float64)
    if m.size == 0 or not np.any(np.abs(f) > 2.0**53):
        return f
    hi = np.right_shift(m, 32).astype(np.float64) * 2.0**32  # both parts exact
    lo = (m & np.int64(0xFFFFFFFF)).astype(np.float64)
    s = hi + lo
    bb = s - hi
    err = (hi - (s - bb)) + (lo - bb)  # TwoSum: hi + lo == s + err exactly
    away = ((err < 0) & (s > 0)) | ((err > 0) & (s < 0))
    return np.where(away, np.nextafter(s, 0.0), s)


def _fixed_text(f):
    name = "fixed" if f.signed else "ufixed"
    args = [str(f.width), str(f.int_bits)]
    if f.quant != "TRN" or f.overflow != "WRAP":
        args.append(str(f.quant))
    if f.overflow != "WRAP":
        args.append(str(f.overflow))
    return f"{name}<{','.join(args)}>"


# ----------------------------------------------------------------------------- floats

_FLOAT_NAMES = {(8, 23): ("fp32", "float"), (5, 10): ("fp16", "half"), (8, 7): ("bf16", "bfloat16")}


@dataclass(frozen=True)
class FloatFormat(NumericFormat):
    """IEEE-style binary float with exp_bits exponent and man_bits stored mantissa bits."""

    exp_bits: int
    man_bits: int

    def __post_init__(self):
        text = f"float<{self.exp_bits},{self.man_bits}>"
        for v in (self.exp_bits, self.man_bits):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise _err(text, "E and M must be integers")
        object.__setattr__(self, "exp_bits", int(self.exp_bits))
        object.__setattr__(self, "man_bits", int(self.man_bits))
        if not 2 <= self.exp_bits <= 11:
            raise _err(text, "exponent bits E must be in 2..11")
        if not 1 <= self.man_bits <= 52:
            raise _err(text, "mantissa bits M must be in 1..52")

    @property
    def kind(self):
        return "float"

    @property
    def bits(self):
        return 1 + self.exp_bits + self.man_bits

    @property
    def emax(self):
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emin(self):
        return 1 - self.emax

    @property
    def max_value(self):
        return math.ldexp(2.0 - math.ldexp(1.0, -self.man_bits), self.emax)  # exact; read per rounding

    @property
    def min_normal(self):
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self):
        return float(np.ldexp(1.0, self.emin - self.man_bits))

    @property
    def cpp_type(self):
        key = (self.exp_bits, self.man_bits)
        if key not in _FLOAT_NAMES:
            raise RlhlsError(f"format {str(self)!r}: no C++ type (only fp32, fp16 and bf16 have one)")
        return _FLOAT_NAMES[key][1]

    def __str__(self):
        key = (self.exp_bits, self.man_bits)
        return _FLOAT_NAMES[key][0] if key in _FLOAT_NAMES else f"float<{key[0]},{key[1]}>"

    def quantize(self, x, *, return_overflow=False):
        """Round to nearest even (one rounding from float64), subnormals, overflow to +-Inf."""
        x = np.asarray(x, dtype=np.float64)
        native = _NATIVE.get((self.exp_bits, self.man_bits))
        k = _round_kernel
        if k is not None and native is not np.float32 and x.ndim and x.size >= _KERNEL_MIN and self._magic_ok:
            y, n_ovf = k(x, self)  # _quantize_magic compiled: one pass, overflow count included
            return (y, n_ovf) if return_overflow else y
        if native is not None:
            # numpy's float64 -> float32 cast (round_half: float16) is this same single IEEE rounding, faster
            if native is np.float16:
                y = round_half(x)
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    y = x.astype(native).astype(np.float64)
            if not return_overflow:
                return y
            return y, int(np.count_nonzero(np.isinf(y) & np.isfinite(x)))
        if (self.exp_bits, self.man_bits) == (8, 7) and x.size:
            # bf16: ml_dtypes' float32 -> bfloat16 cast is one RNE rounding, but from float64 it
            # rounds twice (via float32); so only when x is exactly a float32 (a float32
            # accumulator's result, an FP32 master, an FP16 value), the common case here
            with np.errstate(over="ignore", invalid="ignore"):
                x32 = x.astype(np.float32)
                if (x32 == x).all():
                    y = x32.astype(_ml_dtypes.bfloat16).astype(np.float64)
                    if not return_overflow:
                        return y
                    return y, int(np.count_nonzero(np.isinf(y) & np.isfinite(x)))
        if self._magic_ok:
            return self._quantize_magic(x, return_overflow)
        return self._quantize_frexp(x, return_overflow)

    @property
    def _magic_ok(self) -> bool:
        """_quantize_magic applies: its constant C stays finite and |x| < C / 3 holds."""
        return self.emax <= 900 and self.man_bits <= 50

    def _quantize_frexp(self, x, return_overflow):
        """Reference rounding (any E): scale x so its quantum is 1, np.round (half-even), scale back."""
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / Inf pass through
            _, e = np.frexp(x)  # |x| in [2**(e-1), 2**e)
            q = np.maximum(e - 1, self.emin) - self.man_bits  # exponent of the quantum
            # Scaling by powers of two is exact here; np.round is round-half-even.
            y = np.ldexp(np.round(np.ldexp(x, -q)), q)
        over = np.abs(y) > self.max_value  # NaN compares False; Inf stays Inf
        n_ovf = 0
        if np.any(over):
            n_ovf = int(np.count_nonzero(over & np.isfinite(x)))
            y = np.where(over, np.copysign(np.inf, x), y)
        return (y, n_ovf) if return_overflow else y

    def _quantize_magic(self, x, return_overflow):
        """The same rounding by one float64 add: with q the exponent of x's quantum (from x's
        exponent bits, clamped to the format's range), C = 1.5 * 2**(q + 52) puts x + C in a
        binade whose ulp is 2**q, so the float64 add's RNE rounds x to a multiple of 2**q (ties
        to an even multiple) and - C is exact; ~3x faster than frexp / round / ldexp (bf16)."""
        shape = x.shape
        x = x.reshape(-1)  # contiguous 1-d (a copy only when x is not contiguous)
        e = (x.view(np.int64) >> 52) & 0x7FF  # biased float64 exponent of x
        np.clip(e, self.emin + 1023, self.emax + 1024, out=e)
        e += 52 - self.man_bits
        np.left_shift(e, 52, out=e)
        e |= 1 << 51
        c = e.view(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / Inf pass through
            y = x + c
            y -= c
            np.copysign(y, x, out=y)  # a value rounded to zero keeps its sign
            over = np.abs(y) > self.max_value
        n_ovf = 0
        if over.any():
            n_ovf = int(np.count_nonzero(over & np.isfinite(x)))
            y[over] = np.copysign(np.inf, x[over])
        y = y[0] if shape == () else y.reshape(shape)  # a 0-d input gives a scalar, as ufuncs do
        return (y, n_ovf) if return_overflow else y


_round_kernel = None  # a compiled FloatFormat._quantize_magic, see set_round_kernel
_KERNEL_MIN = 256  # smaller arrays: the call costs more than numpy's casts


def set_round_kernel(fn):
    """Use ``fn(x, fmt, dtype=float64) -> (y, n_overflow)`` for FloatFormat rounding of arrays of at least 256
    elements, except FP32 (numpy's float32 cast is hardware already); None: the numpy paths only.
    Contract: x a float64 array of any shape and layout, fmt a FloatFormat whose ``_magic_ok``
    holds; y a new float64 array of x's shape, bit for bit ``fmt._quantize_magic(x, True)`` (NaN
    payloads aside), which is numpy's float16 cast for FP16 and ml_dtypes' bfloat16 cast for
    BF16; x may also be float32 and y float32 (``round_to``; fmt then fits float32), the same
    values. rlhls.flow.native registers a compiled one after checking that. Returns the previous one."""
    global _round_kernel
    prev, _round_kernel = _round_kernel, fn
    return prev


def round_to(fmt, x, dtype):
    """fmt(x) as a `dtype` array (float32 or float64; fmt a FloatFormat that fits float32 when
    dtype is float32), x a float32 or float64 array: the registered kernel's one pass when it
    applies, else fmt.quantize and a cast (exact: fmt's values are float32 values)."""
    k = _round_kernel
    if (k is not None and x.ndim and x.size >= _KERNEL_MIN and fmt._magic_ok
            and _NATIVE.get((fmt.exp_bits, fmt.man_bits)) is not np.float32):
        return k(x, fmt, dtype)[0]
    y = fmt.quantize(x)
    return y if y.dtype == dtype else y.astype(dtype)


def round_half(x):
    """float64 values rounded to IEEE binary16 (one RNE rounding, subnormals, overflow to +-Inf),
    as float64. numpy's float16 cast is software (~10 ns a value); the registered kernel is ~10x faster."""
    f = _round_kernel
    if f is not None and x.ndim and x.size >= _KERNEL_MIN:
        return f(x, FP16)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).astype(np.float64)


FP32 = FloatFormat(8, 23)
FP16 = FloatFormat(5, 10)
BF16 = FloatFormat(8, 7)
_NATIVE = {(8, 23): np.float32, (5, 10): np.float16}


# ----------------------------------------------------------------------------- uniform codewords

@dataclass(frozen=True)
class UniformFormat(NumericFormat):
    """n-bit uniform codeword of a standardized value over [-CLIP, CLIP); see the module doc."""

    n_bits: int
    CLIP = 4.0  # class constant (not a field): standardized clipping range is [-4, 4)

    def __post_init__(self):
        if not isinstance(self.n_bits, (int, np.integer)) or isinstance(self.n_bits, bool):
            raise _err(f"uq<{self.n_bits}>", "n must be an integer")
        object.__setattr__(self, "n_bits", int(self.n_bits))
        if not 1 <= self.n_bits <= 16:
            raise _err(f"uq<{self.n_bits}>", "codeword bits n must be in 1..16")

    @property
    def kind(self):
        return "uniform"

    @property
    def bits(self):
        return self.n_bits

    @property
    def clip(self):
        return self.CLIP

    @property
    def step(self):
        return 2.0 * self.CLIP / (1 << self.n_bits)

    @property
    def levels(self):
        return 1 << self.n_bits

    @property
    def cpp_type(self):
        return f"ap_uint<{self.n_bits}>"

    @property
    def code_format(self) -> FixedFormat:
        """The ap_fixed whose offset-binary bits are the code (step 2**(3-n) = its LSB)."""
        return FixedFormat(self.n_bits, 3, True, "TRN", "SAT")

    def __str__(self):
        return f"uq<{self.n_bits}>"

    def encode(self, x, *, return_overflow=False):
        """Standardized values -> uint16 codes in [0, 2**n)."""
        m, n_ovf = self.code_format.quantize_mantissa(x, return_overflow=True)
        codes = (m + (1 << (self.n_bits - 1))).astype(np.uint16)
        return (codes, n_ovf) if return_overflow else codes

    def decode(self, codes):
        """Codes -> standardized float64 values (the centre of each level)."""
        c = np.asarray(codes)
        if c.dtype.kind not in "ui":
            raise RlhlsError(f"format {str(self)!r}: codes must be integers, got dtype {c.dtype}")
        if c.size and (c.min() < 0 or c.max() >= self.levels):
            raise RlhlsError(f"format {str(self)!r}: codes must be in 0..{self.levels - 1}")
        k = c.astype(np.int64) - (1 << (self.n_bits - 1))
        return (k.astype(np.float64) + 0.5) * self.step

    def quantize(self, x, *, return_overflow=False):
        codes, n_ovf = self.encode(x, return_overflow=True)
        y = self.decode(codes)
        return (y, n_ovf) if return_overflow else y


# ----------------------------------------------------------------------------- grammar

_FIXED_RE = re.compile(r"^(ap_)?(u?)fixed\s*<(.*)>$")
_FLOAT_RE = re.compile(r"^float\s*<(.*)>$")
_UQ_RE = re.compile(r"^uq\s*<(.*)>$")
_INT_RE = re.compile(r"^[+-]?\d+$")
_GRAMMAR = "fixed<W,I[,Q[,O]]>, ufixed<W,I[,Q[,O]]>, fp32, fp16, bf16, float<E,M> or uq<n>"


def _ints(text, args, names):
    if len(args) != len(names):
        raise _err(text, f"expected {len(names)} integer argument(s) <{','.join(names)}>")
    out = []
    for a, n in zip(args, names):
        if not _INT_RE.match(a):
            raise _err(text, f"{n} must be an integer, got {a!r}")
        out.append(int(a))
    return out


def parse_format(text: str | NumericFormat) -> NumericFormat:
    """Parse the format grammar of the module docstring; RlhlsError on bad text."""
    if isinstance(text, NumericFormat):
        return text
    if not isinstance(text, str):
        raise RlhlsError(f"format {text!r}: expected a string like 'fixed<16,6>' or 'fp32'")
    t = text.strip()
    if t in ("fp32", "fp16", "bf16"):
        return {"fp32": FP32, "fp16": FP16, "bf16": BF16}[t]
    mt = _FIXED_RE.match(t)
    if mt:
        args = [a.strip() for a in mt.group(3).split(",")]
        if not 2 <= len(args) <= 4:
            raise _err(text, "expected <W,I[,Q[,O]]>")
        w, i = _ints(text, args[:2], ("W", "I"))
        q = args[2] if len(args) > 2 else "TRN"
        o = args[3] if len(args) > 3 else "WRAP"
        q = q[3:] if q.startswith("AP_") else q
        o = o[3:] if o.startswith("AP_") else o
        try:
            return FixedFormat(w, i, mt.group(2) == "", q, o)
        except RlhlsError as e:  # re-word with the user's text
            raise _err(text, getattr(e, "what", str(e))) from None
    mt = _FLOAT_RE.match(t)
    if mt:
        ebits, m = _ints(text, [a.strip() for a in mt.group(1).split(",")], ("E", "M"))
        try:
            return FloatFormat(ebits, m)
        except RlhlsError as ex:
            raise _err(text, getattr(ex, "what", str(ex))) from None
    mt = _UQ_RE.match(t)
    if mt:
        (n,) = _ints(text, [mt.group(1).strip()], ("n",))
        try:
            return UniformFormat(n)
        except RlhlsError as ex:
            raise _err(text, getattr(ex, "what", str(ex))) from None
    raise RlhlsError(f"format {text!r}: not recognised (expected {_GRAMMAR})")


_F = TypeVar("_F", bound=NumericFormat)


def parse_format_as(text: str | NumericFormat, cls: type[_F]) -> _F:
    """``parse_format`` of a format that must be a `cls` (FixedFormat, FloatFormat, UniformFormat);
    RlhlsError naming it otherwise."""
    f = parse_format(text)
    if not isinstance(f, cls):
        kinds = {FixedFormat: "fixed-point", FloatFormat: "floating-point", UniformFormat: "uniform"}
        kind = kinds.get(cls, cls.__name__)
        raise RlhlsError(f"format {str(f)!r}: expected a {kind} format")
    return f
