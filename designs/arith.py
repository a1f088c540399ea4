"""Layer arithmetic bit-exact with the C++ a kernel runs: dense (matrix product) and conv2d.

Semantics of ``dense(x, w, b, in_fmt=A, w_fmt=Wf, acc_fmt=B, out_fmt=C)`` (hls4ml's
dense_latency: product cast to accum_t, bias as the initial accumulator, result cast to res_t)::

    x <- A(x);  w, b <- Wf(w), Wf(b)          (Wf defaults to A)
    acc[n, m] = B(b[m])                       (0 without bias)
    for k in 0..K-1:  acc = B(acc + B(x[n, k] * w[k, m]))
    y = C(acc)                                (acc itself when C is None)

where B(.) / C(.) are exact ap_fixed assignments (quantization, then overflow) or IEEE
round-to-nearest-even. Supported combinations: every format None (plain float64
``x @ w + b``); ``acc_fmt=None`` (inputs quantized, float64 product, optional output cast);
fixed A, Wf, B (and fixed or no C); float A, Wf, B (and float or no C). Anything else raises
RlhlsError naming the combination. ``conv2d`` is im2col + dense: NCHW input, OIHW weights,
valid padding, reduction index in C order (c, kh, kw).

How it is computed (exactness first, then speed):

* Fixed point works on int64 mantissas. If the bias and every product cast are exact
  (F_acc >= F_in + F_w) and a bound on every partial sum (sum over k of max|x| * max|w|)
  shows no overflow and stays below 2**53, the whole product is one float64 BLAS matmul of the
  mantissas: every partial sum is an integer below 2**53, so any summation order is exact.
  Otherwise products are formed in int64 (or in Python ints when max|x| * max|w| >= 2**63),
  cast to the accumulator in chunks of k, and summed with a plain int64 sum when the running
  bound shows the chunk cannot overflow, else one k at a time with an exact add-and-cast
  (carry-out of int64 detected, so a 64-bit accumulator is exact too).
* Floats: the product of two inputs is exact in float64 when M_in + M_w + 2 <= 53, and each
  float64 sum of two accumulator values rounded once to the accumulator is correctly rounded
  when 2 * (M_acc + 1) + 2 <= 53 (fp32, fp16, bf16 all qualify), so
  acc = round_acc(acc + round_acc(x * w)) equals the C++ float arithmetic. With an fp32
  accumulator this is float32 arithmetic (hardware RNE), vectorized over the outputs and
  sequential in k (``_seq_sum_f32``): in numpy, products of a chunk of k at once, then
  ``np.add.reduce`` over k. ``set_seq_sum_kernel(fn)`` swaps in a faster implementation of the
  same loop; ``rlhls.flow.native.install()`` (called by the host's mixed precision) registers a
  compiled C kernel after a bit-for-bit self-check against the numpy path. Measured with
  ``benchmarks/bench_arith.py`` (fp16 inputs, fp32 accumulator, 2 shared EPYC cores): dense
  128x64x64 0.10 ms compiled vs 0.39 ms numpy; 256x400x300 2.5 ms vs 15.7 ms (the sums alone
  1.4 ms vs 15 ms; the fp16 casts are most of the rest). Without an overflow count the fp32
  path casts straight between the storage format and float32 (no float64 copies).

Why our own int64 / BLAS path and not APyTypes: measured with ``benchmarks/bench_arith.py``
(numpy 2.4, APyTypes 0.5.1 with APyFixedAccumulatorContext, 2 CPUs, input fixed<16,6,RND,SAT>,
best of 3, same run):

    layer N x K x M   accumulator                     ours      APyTypes
    256 x 512 x 256   exact (BLAS path)                7 ms      436 ms   (62x)
    256 x 512 x 256   products rounded                256 ms     458 ms   (1.8x)
    256 x 512 x 256   may saturate (per-k cast)       354 ms     477 ms   (1.35x)
     64 x 256 x 256   exact / rounded / saturating   1.6/36/53  56/59/58 ms
     64 x  64 x  64   exact / rounded / saturating   0.4/5.3/8.9  4.6/3.9/3.7 ms

Only tiny layers with rounding are faster in APyTypes (our per-k Python loop overhead). More
decisive: once a partial sum saturates, APyTypes' accumulator context does not give ap_fixed's
``acc += p`` results (the benchmark's "same" column turns False there; ours equal the C++ in
tests/test_arith.py), and APyTypes has no SAT_ZERO / SAT_SYM at all.
"""

from __future__ import annotations

import numpy as np

from rlhls.core.errors import RlhlsError

from .formats import _NATIVE, FP32, FixedFormat, FloatFormat, NumericFormat, parse_format, round_to

__all__ = ["dense", "conv2d", "im2col", "col2im", "set_seq_sum_kernel"]

_CHUNK_ELEMS = 1 << 20  # products cast at once (bounds temporary memory to tens of MB)


def _fmt(f, name) -> NumericFormat | None:
    if f is None or isinstance(f, NumericFormat):
        return f
    if isinstance(f, str):
        return parse_format(f)
    raise RlhlsError(f"dense: {name} must be a format or its text, got {f!r}")


def dense(x, w, b=None, *, in_fmt=None, w_fmt=None, acc_fmt=None, out_fmt=None,
          return_overflow=False, x_quantized=False, w_quantized=False, out32=False):
    """y = x @ w + b in the given formats (see the module docstring).

    x (N, K), w (K, M), b (M,) or None -> y (N, M) float64. With return_overflow=True also
    returns {'input', 'product', 'accumulator', 'output'} overflow counts. x_quantized=True
    says x already holds values of in_fmt (a float in_fmt only; a layer's stored activations):
    its cast, an identity then, is skipped; w_quantized=True the same of w and w_fmt. x and w
    may be float32 arrays (values of their formats: read as they are where they fit).
    out32=True: y as float32 (the same values) where the sums are float32 and out_fmt fits
    float32 (no overflow counts); else float64 as always.
    """
    if (not return_overflow and type(acc_fmt) is FloatFormat and type(in_fmt) is FloatFormat
            and type(w_fmt or in_fmt) is FloatFormat and (out_fmt is None or type(out_fmt) is FloatFormat)
            and acc_fmt == FP32 and _fits32(in_fmt) and _fits32(w_fmt or in_fmt)):
        # the float32-sum path without the general dispatch (small layers pay per call)
        x, w = _f64_or_32(x), _f64_or_32(w)
        _check_shapes(x, w, b)
        return _dense_f32(x, w, b, in_fmt, w_fmt or in_fmt, out_fmt, x_quantized, w_quantized, out32)
    x, w = _f64_or_32(x), _f64_or_32(w)
    b = _check_shapes(x, w, b)
    fi, fw, fa, fo = (_fmt(in_fmt, "in_fmt"), _fmt(w_fmt, "w_fmt"), _fmt(acc_fmt, "acc_fmt"),
                      _fmt(out_fmt, "out_fmt"))
    fw = fw if fw is not None else fi
    ovf = {"input": 0, "product": 0, "accumulator": 0, "output": 0}
    if not (fa == FP32 and isinstance(fi, FloatFormat) and isinstance(fw, FloatFormat)
            and (fo is None or isinstance(fo, FloatFormat)) and not return_overflow):
        x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)  # float32 only on the fp32-sum path

    if fa is None:
        xq, wq, bq = x, w, b
        if fi is not None:
            xq, ovf["input"] = fi.quantize(x, return_overflow=True)
        if fw is not None:
            wq, n = fw.quantize(w, return_overflow=True)
            ovf["input"] += n
            if b is not None:
                bq, n = fw.quantize(b, return_overflow=True)
                ovf["input"] += n
        y = xq @ wq
        if bq is not None:
            y = y + bq
        if fo is not None:
            y, ovf["output"] = fo.quantize(y, return_overflow=True)
    elif (isinstance(fa, FixedFormat) and isinstance(fi, FixedFormat)
          and isinstance(fw, FixedFormat) and (fo is None or isinstance(fo, FixedFormat))):
        y = _dense_fixed(x, w, b, fi, fw, fa, fo, ovf)
    elif (isinstance(fa, FloatFormat) and isinstance(fi, FloatFormat)
          and isinstance(fw, FloatFormat) and (fo is None or isinstance(fo, FloatFormat))):
        y = _dense_float(x, w, b, fi, fw, fa, fo, ovf, return_overflow, x_quantized, w_quantized, out32)
    else:
        raise RlhlsError(
            f"dense: unsupported format combination in={fi} w={fw} acc={fa} out={fo} "
            "(expected all fixed, all float, or acc_fmt=None)")
    return (y, ovf) if return_overflow else y


def _check_shapes(x, w, b):
    """b as float64 (or None) once x (N, K), w (K, M) and b (M,) are known to chain."""
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise RlhlsError(f"dense: shapes x {x.shape} and w {w.shape} do not chain "
                         "(expected x (N, K) and w (K, M))")
    if b is not None:
        b = np.asarray(b, dtype=np.float64)
        if b.shape != (w.shape[1],):
            raise RlhlsError(f"dense: bias shape {b.shape} does not match w {w.shape} "
                             f"(expected ({w.shape[1]},))")
    return b


def _fits32(f) -> bool:
    return f.exp_bits <= 8 and f.man_bits <= 23


# ----------------------------------------------------------------------------- fixed point

def _maxabs(m) -> int:
    if m.size == 0:
        return 0
    return max(abs(int(m.max())), abs(int(m.min())))


def _colmaxabs(m, axis):
    """max |m| along axis as Python ints (int64 abs would overflow at -2**63)."""
    if m.size == 0:
        return [0] * m.shape[1 - axis]
    return [max(abs(a), abs(c)) for a, c in zip(m.max(axis=axis).tolist(), m.min(axis=axis).tolist())]


def _add_cast(fa: FixedFormat, a, b):
    """fa(a + b) for int64 mantissas with the same LSB, exact even when a + b leaves int64."""
    s = a + b  # wraps mod 2**64: still the right low bits
    carry = ((a ^ s) & (b ^ s)) < 0  # signed overflow of the int64 add
    return fa._finish(s, carry if carry.any() else None, a < 0)


def _dense_fixed(x, w, b, fi, fw, fa, fo, ovf):
    xm, n1 = fi.quantize_mantissa(x, return_overflow=True)
    wm, n2 = fw.quantize_mantissa(w, return_overflow=True)
    ovf["input"] = n1 + n2
    N, K = xm.shape
    M = wm.shape[1]
    fp = fi.frac_bits + fw.frac_bits  # LSB of the exact product
    acc = np.zeros((N, M), dtype=np.int64)
    if b is not None:
        bm, n3 = fw.quantize_mantissa(b, return_overflow=True)
        ovf["input"] += n3
        bacc, ovf["accumulator"] = fa.cast_mantissa(bm, fw.frac_bits)
        acc += bacc[None, :]

    # Exact bound (Python ints) on |any partial sum of products| in product LSBs.
    colmax = _colmaxabs(xm, axis=0)
    rowmax = _colmaxabs(wm, axis=1)
    bound = sum(a * c for a, c in zip(colmax, rowmax))
    shift = fa.frac_bits - fp
    unsigned_ok = fa.signed or (xm.min(initial=0) >= 0 and wm.min(initial=0) >= 0)
    if (shift >= 0 and bound < 2**53 and unsigned_ok
            and (bound << shift) + _maxabs(acc) <= fa.max_mantissa):
        # Every product cast and partial sum is exact and in range: one BLAS matmul.
        prod = (xm.astype(np.float64) @ wm.astype(np.float64)).astype(np.int64)
        acc = acc + np.left_shift(prod, shift)
    else:
        wide = _maxabs(xm) * _maxabs(wm) >= 2**63
        xk = xm.astype(object) if wide else xm
        wk = wm.astype(object) if wide else wm
        kc = max(1, _CHUNK_ELEMS // max(1, N * M))
        for k0 in range(0, K, kc):
            k1 = min(K, k0 + kc)
            p = xk[:, k0:k1, None] * wk[None, k0:k1, :]  # (N, kc, M) exact products
            pc, n = fa.cast_mantissa(p, fp)
            ovf["product"] += n
            # Running bound: the chunk cannot overflow the accumulator -> plain int64 sum.
            step = sum(_maxabs(pc[:, j, :]) for j in range(k1 - k0))
            if _maxabs(acc) + step <= fa.max_mantissa:
                acc = acc + pc.sum(axis=1)
            else:
                for j in range(k1 - k0):
                    acc, n = _add_cast(fa, acc, pc[:, j, :])
                    ovf["accumulator"] += n
    if fo is None:
        return fa.from_mantissa(acc)
    ym, ovf["output"] = fo.cast_mantissa(acc, fa.frac_bits)
    return fo.from_mantissa(ym)


# ----------------------------------------------------------------------------- floats

def _q(fmt, x, ovf, key, count):
    """fmt(x); the overflow count (an extra pass) only when asked for."""
    if not count:
        return fmt.quantize(x)
    y, n = fmt.quantize(x, return_overflow=True)
    ovf[key] += n
    return y


def _f64_or_32(a) -> np.ndarray:
    a = np.asarray(a)
    return a if a.dtype == np.float32 else np.asarray(a, dtype=np.float64)


def _dense_float(x, w, b, fi, fw, fa, fo, ovf, count=True, x_quantized=False, w_quantized=False, out32=False):
    if fi.man_bits + fw.man_bits + 2 > 53:
        raise RlhlsError(f"dense: inputs {fi} x {fw} products are not exact in float64 "
                         "(need M_in + M_w + 2 <= 53)")
    if 2 * (fa.man_bits + 1) + 2 > 53:
        raise RlhlsError(f"dense: accumulator {fa} is too wide for one-rounding float64 "
                         "emulation (need M_acc <= 24)")
    fits32 = _fits32(fi) and _fits32(fw)
    if fa == FP32 and fits32 and not count:  # no overflow counts: straight to float32 and back
        return _dense_f32(x, w, b, fi, fw, fo, x_quantized, w_quantized, out32)
    xq = x if x_quantized else _q(fi, x, ovf, "input", count)
    wq = _q(fw, w, ovf, "input", count)
    N, K = xq.shape
    M = wq.shape[1]
    if fa == FP32 and fits32:
        # float32 numpy ops are IEEE binary32 RNE: exactly the C++ float arithmetic.
        acc = np.zeros((N, M), dtype=np.float32)
        if b is not None:
            acc += _q(fw, b, ovf, "input", count).astype(np.float32)[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            _seq_sum_f32(xq.astype(np.float32), wq.astype(np.float32), acc)
        acc = acc.astype(np.float64)
    else:
        acc = np.zeros((N, M))
        if b is not None:
            acc = acc + fa.quantize(_q(fw, b, ovf, "input", count))[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(K):
                p = fa.quantize(xq[:, k, None] * wq[None, k, :])
                acc = fa.quantize(acc + p)
    if count:  # accumulator overflow: outputs that became +-Inf although every input was finite
        ovf["accumulator"] = int(np.count_nonzero(np.isinf(acc) & np.isfinite(xq).all(axis=1)[:, None]
                                                  & np.isfinite(wq).all(axis=0)[None, :]))
    if fo is None:
        return acc
    return _q(fo, acc, ovf, "output", count)


def _dense_f32(x, w, b, fi, fw, fo, x_quantized, w_quantized, out32):
    """The FP32-accumulator dense of float formats that fit float32, without overflow counts:
    operands rounded straight into float32, the sequential sums, the output rounded from float32."""
    acc = np.zeros((x.shape[0], w.shape[1]), dtype=np.float32)
    if b is not None:  # 0 + b, as the C++ (a -0 bias starts at +0)
        acc += _to32(fw, b)[None, :]
    x32 = np.asarray(x, dtype=np.float32) if x_quantized else _to32(fi, x)
    w32 = np.asarray(w, dtype=np.float32) if w_quantized else _to32(fw, w)
    if _seq_sum_kernel is not None:  # compiled: no numpy floating-point state to guard
        _seq_sum_kernel(x32, w32, acc)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            _seq_sum_f32_numpy(x32, w32, acc)
    if out32 and (fo is None or _fits32(fo)):
        return acc if fo is None or fo == FP32 else round_to(fo, acc, np.float32)
    return acc.astype(np.float64) if fo is None else _from32(fo, acc)


def _to32(fmt, v):
    """fmt(v) as float32 (fmt fits float32): one RNE rounding of v's value (float64 -> float32
    cast, or formats.round_to's one pass), without a float64 copy."""
    if _NATIVE.get((fmt.exp_bits, fmt.man_bits)) is np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            return v.astype(np.float32)
    return round_to(fmt, np.asarray(v, dtype=np.float32 if v.dtype == np.float32 else np.float64), np.float32)


def _from32(fmt, a32):
    """fmt(a32) as float64 for a float32 array (the same rounding as from the equal float64 value)."""
    if _NATIVE.get((fmt.exp_bits, fmt.man_bits)) is np.float32:
        return a32.astype(np.float64)
    return round_to(fmt, a32, np.float64)  # its numpy paths guard their own floating-point state


_seq_sum_kernel = None  # a faster implementation of _seq_sum_f32_numpy, see set_seq_sum_kernel


def set_seq_sum_kernel(fn):
    """Use ``fn(x32, w32, acc)`` for the sequential float32 sums of ``dense`` (None: the numpy
    path). Same contract as ``_seq_sum_f32_numpy``: x32 (N, K) and w32 (K, M) float32 in any
    layout, acc (N, M) C-contiguous float32 updated in place, bit for bit the numpy results
    (rlhls.flow.native registers a compiled one after checking that). Returns the previous one."""
    global _seq_sum_kernel
    prev, _seq_sum_kernel = _seq_sum_kernel, fn
    return prev


def _seq_sum_f32(x32, w32, acc) -> None:
    """acc (N, M) float32 <- fl32(acc + fl32(x[:, k] * w[k, :])) for k = 0..K-1 in order, in place:
    the registered kernel (``set_seq_sum_kernel``) if any, else ``_seq_sum_f32_numpy``."""
    f = _seq_sum_kernel
    if f is None:
        _seq_sum_f32_numpy(x32, w32, acc)
    else:
        f(x32, w32, acc)


def _seq_sum_f32_numpy(x32, w32, acc) -> None:
    """``_seq_sum_f32`` in numpy. Products of a chunk of k are formed at once; the chunk is then
    summed by ``np.add.reduce`` over its leading axis, whose inner loop runs over the N*M
    contiguous outputs (``out += row`` one row after another: sequential in k, float32 RNE per
    add -- numpy's pairwise summation applies only when the reduced axis is the inner loop, i.e.
    N*M == 1, which takes the loop)."""
    N, K = x32.shape
    M = w32.shape[1]
    if N * M <= 1:
        for k in range(K):
            np.add(acc, x32[:, k, None] * w32[None, k, :], out=acc)
        return
    xT = np.ascontiguousarray(x32.T)
    kc = max(1, _CHUNK_ELEMS // (N * M))
    buf = np.empty((min(kc, K) + 1, N, M), dtype=np.float32)
    for k0 in range(0, K, kc):
        n = min(K, k0 + kc) - k0
        buf[0] = acc
        np.multiply(xT[k0:k0 + n, :, None], w32[k0:k0 + n, None, :], out=buf[1:n + 1])
        np.add.reduce(buf[:n + 1], axis=0, out=acc)


# ----------------------------------------------------------------------------- convolution

def _pair(v, name):
    t = (v, v) if np.isscalar(v) else tuple(v)
    if len(t) != 2 or any(int(s) != s or s < 1 for s in t):
        raise RlhlsError(f"conv2d: {name} {v!r} must be a positive int or a pair of them")
    return int(t[0]), int(t[1])


def im2col(x, kh, kw, stride=1) -> np.ndarray:
    """NCHW x -> (N*OH*OW, C*kh*kw) patches, rows in (n, oh, ow) order, columns in (c, i, j)."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise RlhlsError(f"im2col: x shape {x.shape} is not NCHW")
    sh, sw = _pair(stride, "stride")
    N, C, H, W = x.shape
    if kh > H or kw > W or kh < 1 or kw < 1:
        raise RlhlsError(f"im2col: kernel {kh}x{kw} does not fit the {H}x{W} input")
    OH, OW = (H - kh) // sh + 1, (W - kw) // sw + 1
    if x.size == 0:
        return np.empty((N * OH * OW, C * kh * kw), dtype=x.dtype)
    x = np.ascontiguousarray(x)
    it = x.itemsize
    # The kw values of one patch row are contiguous in x and in the result: copy them as one opaque
    # item (a (N, OH, OW, C, kh) gather of kw*itemsize-byte items), ~3-5x faster than a gather of
    # single values whose inner loop is only kw long. The bytes are the same.
    rows = np.ndarray((N, OH, OW, C, kh), dtype=np.dtype((np.void, kw * it)), buffer=x,
                      strides=(C * H * W * it, sh * W * it, sw * it, H * W * it, W * it))
    out = np.empty(rows.shape, dtype=rows.dtype)
    np.copyto(out, rows)
    return out.view(x.dtype).reshape(N * OH * OW, C * kh * kw)


def col2im(cols, x_shape, kh, kw, stride=1) -> np.ndarray:
    """Adjoint of im2col: scatter-add patches back into an NCHW array (float64 sums in
    (i, j) order; exact whenever the values and their sums are, e.g. fixed-point gradients)."""
    N, C, H, W = x_shape
    sh, sw = _pair(stride, "stride")
    OH, OW = (H - kh) // sh + 1, (W - kw) // sw + 1
    cols = np.asarray(cols, dtype=np.float64)
    if cols.shape != (N * OH * OW, C * kh * kw):
        raise RlhlsError(f"col2im: cols shape {cols.shape} does not match x {tuple(x_shape)} "
                         f"with a {kh}x{kw} kernel (expected {(N * OH * OW, C * kh * kw)})")
    # Two cache-friendly copies to (kh, kw, N, C, OH, OW) (per sample a 2-D transpose, then whole
    # OH*OW rows), so each (i, j) pass reads contiguous memory: a direct view of cols has a
    # C*kh*kw stride between neighbouring outputs and is several times slower.
    ct = np.empty((N, C * kh * kw, OH * OW))
    np.copyto(ct, cols.reshape(N, OH * OW, C * kh * kw).transpose(0, 2, 1))
    ct = np.ascontiguousarray(ct.reshape(N, C, kh, kw, OH, OW).transpose(2, 3, 0, 1, 4, 5))
    out = np.zeros((N, C, H, W))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + sh * (OH - 1) + 1:sh, j:j + sw * (OW - 1) + 1:sw] += ct[i, j]
    return out


def conv2d(x, w, b=None, stride=1, *, in_fmt=None, w_fmt=None, acc_fmt=None, out_fmt=None,
           return_overflow=False):
    """Valid 2-D convolution (cross-correlation), NCHW x (N,C,H,W), OIHW w (O,C,KH,KW) ->
    (N,O,OH,OW); im2col + dense, so the accumulation order is (c, kh, kw)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise RlhlsError(f"conv2d: shapes x {x.shape} and w {w.shape} do not match "
                         "(expected x (N,C,H,W) and w (O,C,KH,KW))")
    N = x.shape[0]
    O, C, KH, KW = w.shape
    sh, sw = _pair(stride, "stride")
    cols = im2col(x, KH, KW, (sh, sw))
    OH, OW = (x.shape[2] - KH) // sh + 1, (x.shape[3] - KW) // sw + 1
    res = dense(cols, w.reshape(O, C * KH * KW).T, b, in_fmt=in_fmt, w_fmt=w_fmt,
                acc_fmt=acc_fmt, out_fmt=out_fmt, return_overflow=return_overflow)
    y, ovf = res if return_overflow else (res, None)
    y = y.reshape(N, OH, OW, O).transpose(0, 3, 1, 2)
    return (np.ascontiguousarray(y), ovf) if return_overflow else np.ascontiguousarray(y)
