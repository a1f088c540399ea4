"""rlhls.designs.arith against C++ (hls4ml-style ap_fixed dense; _Float16 / bf16 with float
accumulation), bit for bit, plus conv2d / im2col / col2im behaviour."""

from __future__ import annotations

import numpy as np
import pytest
from cpp_util import build, run

from rlhls.designs.arith import col2im, conv2d, dense, im2col
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat, parse_format

# (in, weight, accumulator, output, (N, K, M)). Each row exercises one code path of
# arith._dense_fixed; see the comment beside it.
FIXED_CONFIGS = [
    # hls4ml default types; products rounded (F_acc 16 < 20), int64 chunk sums
    ("fixed<16,6>", "fixed<16,6>", "fixed<32,16>", "fixed<16,6,RND,SAT>", (16, 64, 24)),
    # exact products, bound < 2**53, no overflow possible: the float64 BLAS path
    ("fixed<16,6>", "fixed<16,6>", "fixed<48,16>", "fixed<16,6,RND,SAT>", (16, 32, 24)),
    # CPP/TRPO and F-DDPG as registered (48-bit saturating accumulator), and a wrapping one
    ("fixed<27,4,RND,SAT>", "fixed<27,4,RND,SAT>", "fixed<48,16,RND,SAT>", "fixed<27,4,RND,SAT>", (12, 64, 16)),
    ("fixed<32,8,RND,SAT>", "fixed<32,8,RND,SAT>", "fixed<48,16,RND,SAT>", "fixed<32,8,RND,SAT>", (12, 48, 16)),
    ("fixed<27,4,RND,SAT>", "fixed<27,4,RND,SAT>", "fixed<48,16>", "fixed<27,4,RND,SAT>", (12, 64, 16)),
    # 64-bit products, 64-bit accumulator
    ("fixed<32,8,RND,SAT>", "fixed<32,8,RND,SAT>", "fixed<64,24,RND,SAT>", "fixed<32,8,RND,SAT>", (12, 48, 16)),
    # small wrapping accumulator: per-k add-and-cast with overflow; SAT_ZERO unsigned output
    ("fixed<8,3,RND_CONV,SAT_SYM>", "fixed<8,2,RND_INF,SAT>", "fixed<12,4,RND_ZERO>",
     "ufixed<8,2,RND_MIN_INF,SAT_ZERO>", (16, 40, 16)),
    # SAT_SYM accumulator hit at its most negative value; TRN_ZERO products
    ("fixed<10,4,RND>", "fixed<10,2,TRN>", "fixed<12,5,TRN_ZERO,SAT_SYM>", "fixed<6,3,RND,WRAP>", (16, 40, 16)),
    # 64-bit accumulator whose int64 sums carry out (saturating and wrapping)
    ("fixed<32,20>", "fixed<32,20>", "fixed<64,30,TRN,SAT>", "fixed<40,30,RND,SAT>", (8, 40, 8)),
    ("fixed<32,20>", "fixed<32,20>", "fixed<64,30>", "fixed<50,30,RND,SAT>", (8, 40, 8)),
    # products wider than 64 bits: the exact Python-int path
    ("fixed<48,16>", "fixed<27,4,RND,SAT>", "fixed<64,24,RND,SAT>", "fixed<32,8,RND,SAT>", (4, 12, 6)),
    # unsigned input into an unsigned accumulator (negative products saturate to 0)
    ("ufixed<8,0>", "fixed<8,1,RND,SAT>", "ufixed<20,6,RND,SAT>", "ufixed<8,0>", (8, 32, 16)),
    # I < 0 input, I > W weight, registered output format
    ("fixed<12,-2,RND>", "fixed<6,9,RND_CONV,SAT>", "fixed<40,14,RND_CONV,SAT_SYM>",
     "fixed<18,8,RND_CONV,SAT_SYM>", (8, 32, 16)),
]
# (kind in dense_ref.cpp, in, acc, out)
FLOAT_CONFIGS = [(0, "fp32", "fp32", "fp32"), (1, "fp16", "fp32", "fp32"),
                 (2, "bf16", "fp32", "bf16"), (3, "fp16", "fp16", "fp16")]


def _dense_header():
    def t(text):
        return f"RLHLS_T({parse_format(text).cpp_type})"
    rows = [f"  X({i}, {t(a)}, {t(b)}, {t(c)}, {t(d)}, {'true' if parse_format(d).signed else 'false'})"
            for i, (a, b, c, d, _) in enumerate(FIXED_CONFIGS)]
    return ("#pragma once\n#define RLHLS_T(...) __VA_ARGS__\n#define RLHLS_DENSE_FIXED(X) \\\n"
            + " \\\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def dense_exe():
    return build("dense_ref", ["dense_ref.cpp"], {"rlhls_dense_list.h": _dense_header()})


def _values(f: FixedFormat, rng, shape):
    """Over the whole range (and 20 % beyond), half of them on a half-LSB grid (exact ties)."""
    lo = f.min_value if f.signed else -0.2 * f.max_value
    hi = f.max_value
    u = rng.uniform(1.2 * lo, 1.2 * hi, shape)
    grid = np.round(u / f.lsb * 2) * f.lsb / 2
    return np.where(rng.random(shape) < 0.5, u, grid)


def _run_dense(exe, tmp_path, mode, cid, x, w, b, out_dtype):
    N, K = x.shape
    M = w.shape[1]
    with open(tmp_path / "in.bin", "wb") as fh:
        np.array([N, K, M, b is not None], dtype=np.int64).tofile(fh)
        for a in (x, w, np.zeros(M) if b is None else b):
            np.ascontiguousarray(a, dtype=np.float64).tofile(fh)
    run(exe, mode, cid, tmp_path / "in.bin", tmp_path / "out.bin")
    return np.fromfile(tmp_path / "out.bin", dtype=out_dtype).reshape(N, M)


@pytest.mark.parametrize("cid", range(len(FIXED_CONFIGS)),
                         ids=[f"{c[0]}x{c[1]}->{c[2]}->{c[3]}" for c in FIXED_CONFIGS])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_dense_fixed_matches_cpp(cid, bias, dense_exe, tmp_path):
    fi, fw, fa, fo, (N, K, M) = FIXED_CONFIGS[cid]
    fi, fw, fo = parse_format(fi), parse_format(fw), parse_format(fo)
    rng = np.random.default_rng(100 + cid)
    x = _values(fi, rng, (N, K))
    w = _values(fw, rng, (K, M))
    b = _values(fw, rng, (M,)) if bias else None
    ref = _run_dense(dense_exe, tmp_path, "fixed", cid, x, w, b, np.int64)
    y, ovf = dense(x, w, b, in_fmt=fi, w_fmt=fw, acc_fmt=fa, out_fmt=fo, return_overflow=True)
    m = fo.to_mantissa(y)  # every output format here has <= 53 bits: y is exact
    bad = m != ref
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} differ, e.g. ours {m[bad][:4]} C++ {ref[bad][:4]}"
    assert set(ovf) == {"input", "product", "accumulator", "output"}


def test_dense_configs_overflow_somewhere():
    """The configurations above really exercise overflow in accumulators and outputs."""
    seen = {"accumulator": 0, "output": 0, "product": 0}
    for cid, (fi, fw, fa, fo, (N, K, M)) in enumerate(FIXED_CONFIGS):
        rng = np.random.default_rng(100 + cid)
        fi_, fw_ = parse_format(fi), parse_format(fw)
        x, w = _values(fi_, rng, (N, K)), _values(fw_, rng, (K, M))
        _, ovf = dense(x, w, _values(fw_, rng, (M,)), in_fmt=fi, w_fmt=fw, acc_fmt=fa,
                       out_fmt=fo, return_overflow=True)
        for k in seen:
            seen[k] += ovf[k]
    assert all(v > 0 for v in seen.values()), seen


def _float_values(rng, shape, spread):
    return rng.normal(0, 1, shape) * np.exp2(rng.integers(-spread, spread + 1, shape))


@pytest.mark.parametrize("kind, fi, fa, fo", FLOAT_CONFIGS, ids=[f"{c[1]}-{c[2]}-{c[3]}" for c in FLOAT_CONFIGS])
def test_dense_float_matches_cpp(kind, fi, fa, fo, dense_exe, tmp_path):
    rng = np.random.default_rng(7 + kind)
    N, K, M = 16, 96, 24
    spread = 6 if kind == 3 else 20  # fp16 accumulation reaches Inf sometimes
    x, w = _float_values(rng, (N, K), spread), _float_values(rng, (K, M), spread)
    b = _float_values(rng, (M,), spread)
    ref = _run_dense(dense_exe, tmp_path, "float", kind, x, w, b, np.float64)
    y = dense(x, w, b, in_fmt=fi, acc_fmt=fa, out_fmt=fo)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    ok = ~np.isnan(y)
    assert np.array_equal(y[ok].view(np.int64), ref[ok].view(np.int64))


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_float32_shortcuts_equal_quantize(fmt):
    """_to32 / _from32 (the dense fp32-accumulator path without overflow counts) give exactly
    FloatFormat.quantize's values: ties, subnormals, overflow, Inf, NaN, -0."""
    import rlhls.designs.arith as arith

    f = parse_format(fmt)
    rng = np.random.default_rng(11)
    v = rng.normal(size=4000) * np.exp2(rng.integers(-160, 140, 4000))
    ties = (np.arange(1, 200) + 0.5) * 2.0 ** -10  # halfway between fp16 neighbours
    v = np.concatenate([v, ties, ties * 2.0 ** -14, [0.0, -0.0, np.inf, -np.inf, np.nan, 65520.0, 65519.9, 3.5e38]])
    q = f.quantize(v)
    with np.errstate(over="ignore", invalid="ignore"):
        a = arith._to32(f, v).astype(np.float64)
        b = arith._from32(f, v.astype(np.float32))
        ref32 = f.quantize(v.astype(np.float32).astype(np.float64))
    for got, ref in ((a, q), (b, ref32)):
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.int64), ref[~nan].view(np.int64))


@pytest.mark.parametrize("fi, fo", [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", None)])
def test_dense_float_same_with_and_without_overflow_counts(fi, fo):
    rng = np.random.default_rng(12)
    x, w = _float_values(rng, (9, 40), 14), _float_values(rng, (40, 11), 14)
    b = _float_values(rng, (11,), 14)
    y = dense(x, w, b, in_fmt=fi, acc_fmt="fp32", out_fmt=fo)
    y2, ovf = dense(x, w, b, in_fmt=fi, acc_fmt="fp32", out_fmt=fo, return_overflow=True)
    assert np.array_equal(np.isnan(y), np.isnan(y2))
    ok = ~np.isnan(y)
    assert np.array_equal(y[ok].view(np.int64), y2[ok].view(np.int64))


def test_dense_float_generic_path_equals_float32_path():
    """The generic float64-then-round path gives the float32 fast path's bits for fp32."""
    import rlhls.designs.arith as arith
    from rlhls.designs.formats import FP16, FP32
    rng = np.random.default_rng(3)
    x, w, b = rng.normal(size=(8, 50)), rng.normal(size=(50, 6)), rng.normal(size=6)
    ovf = {"input": 0, "product": 0, "accumulator": 0, "output": 0}
    fast = arith._dense_float(x, w, b, FP16, FP16, FP32, None, dict(ovf))
    slow = np.zeros((8, 6)) + FP32.quantize(FP16.quantize(b))
    xq, wq = FP16.quantize(x), FP16.quantize(w)
    for k in range(50):
        slow = FP32.quantize(slow + FP32.quantize(xq[:, k, None] * wq[None, k, :]))
    assert np.array_equal(fast.view(np.int64), slow.view(np.int64))


def test_dense_plain_float64_and_storage_only():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(5, 7)), rng.normal(size=(7, 3)), rng.normal(size=3)
    assert np.array_equal(dense(x, w, b), x @ w + b)
    f = parse_format("fixed<16,6,RND,SAT>")
    assert np.array_equal(dense(x, w, in_fmt=f), f.quantize(x) @ f.quantize(w))


@pytest.mark.parametrize("kw, needle", [
    (dict(in_fmt="fixed<16,6>", acc_fmt="fp32"), "unsupported format combination"),
    (dict(in_fmt="fp16", acc_fmt="fixed<32,16>"), "unsupported format combination"),
    (dict(in_fmt="fixed<16,6>", acc_fmt="fixed<32,16>", out_fmt="fp32"), "unsupported format combination"),
    (dict(in_fmt="uq<8>", acc_fmt="fixed<32,16>"), "unsupported format combination"),
    (dict(in_fmt="float<11,40>", acc_fmt="fp32"), "not exact in float64"),
    (dict(in_fmt="fp16", acc_fmt="float<8,30>"), "too wide"),
    (dict(in_fmt="fixed<0,1>"), "width W must be >= 1"),
])
def test_dense_bad_formats(kw, needle):
    with pytest.raises(RlhlsError, match=needle):
        dense(np.ones((2, 3)), np.ones((3, 4)), **kw)


def test_dense_bad_shapes():
    with pytest.raises(RlhlsError, match=r"do not chain"):
        dense(np.ones((2, 3)), np.ones((4, 4)))
    with pytest.raises(RlhlsError, match=r"bias shape"):
        dense(np.ones((2, 3)), np.ones((3, 4)), np.ones(3))


# ----------------------------------------------------------------------------- convolution

def _conv_reference(x, w, b, stride, fi, fa, fo):
    """Direct nested loops with Python-int mantissas, reduction in (c, kh, kw) order."""
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    OH, OW = (H - KH) // stride + 1, (W - KW) // stride + 1
    xm, wm, bm = fi.quantize_mantissa(x), fi.quantize_mantissa(w), fi.quantize_mantissa(b)
    fp = 2 * fi.frac_bits
    y = np.zeros((N, O, OH, OW), dtype=np.int64)
    for n in range(N):
        for o in range(O):
            for i in range(OH):
                for j in range(OW):
                    acc = int(fa.cast_mantissa(np.array([int(bm[o])], dtype=object), fi.frac_bits)[0][0])
                    for c in range(C):
                        for di in range(KH):
                            for dj in range(KW):
                                p = int(xm[n, c, i * stride + di, j * stride + dj]) * int(wm[o, c, di, dj])
                                p = int(fa.cast_mantissa(np.array([p], dtype=object), fp)[0][0])
                                acc = int(fa.cast_mantissa(np.array([acc + p], dtype=object), fa.frac_bits)[0][0])
                    y[n, o, i, j] = fo.cast_mantissa(np.array([acc], dtype=object), fa.frac_bits)[0][0]
    return fo.from_mantissa(y)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_fixed_matches_direct_loops(stride):
    fi, fa, fo = (parse_format(t) for t in ("fixed<8,3,RND,SAT>", "fixed<12,5,RND_CONV,SAT>", "fixed<8,4,RND,SAT>"))
    rng = np.random.default_rng(stride)
    x, w, b = rng.uniform(-4, 4, (2, 3, 7, 6)), rng.uniform(-4, 4, (4, 3, 3, 2)), rng.uniform(-4, 4, 4)
    y, ovf = conv2d(x, w, b, stride, in_fmt=fi, acc_fmt=fa, out_fmt=fo, return_overflow=True)
    assert y.shape == (2, 4, (7 - 3) // stride + 1, (6 - 2) // stride + 1)
    ref = _conv_reference(x, w, b, stride, fi, fa, fo)
    assert np.array_equal(y, ref)
    assert ovf["accumulator"] > 0  # the small accumulator saturates somewhere


def test_conv2d_float64_matches_loops_and_col2im_is_adjoint():
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(2, 3, 8, 7)), rng.normal(size=(5, 3, 3, 3)), rng.normal(size=5)
    y = conv2d(x, w, b, stride=(2, 1))
    ref = np.zeros_like(y)
    for i in range(y.shape[2]):
        for j in range(y.shape[3]):
            patch = x[:, :, 2 * i:2 * i + 3, j:j + 3]
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    assert np.allclose(y, ref, rtol=1e-13, atol=1e-13)
    cols = im2col(x, 3, 3, (2, 1))
    c = rng.normal(size=cols.shape)
    assert np.isclose(np.sum(cols * c), np.sum(x * col2im(c, x.shape, 3, 3, (2, 1))), rtol=1e-12)
    # integer-valued data: col2im sums are exact
    xi = rng.integers(-5, 5, (1, 2, 5, 5)).astype(float)
    ci = im2col(xi, 2, 2, 1)
    counts = col2im(np.ones_like(ci), xi.shape, 2, 2, 1)
    assert np.array_equal(col2im(ci, xi.shape, 2, 2, 1), xi * counts)


@pytest.mark.parametrize("shape, k, stride", [((2, 3, 11, 13), (3, 4), (2, 3)), ((3, 4, 20, 20), (8, 8), 4),
                                             ((1, 2, 5, 6), (1, 1), 1), ((2, 1, 5, 5), (5, 5), 1)])
def test_im2col_and_col2im_equal_plain_numpy(shape, k, stride):
    """im2col's gather of kw-long rows and col2im's transposed passes give exactly the values of
    the plain formulation: a sliding-window gather, and per-(i, j) float64 sums in (i, j) order."""
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape) * np.exp2(rng.integers(-40, 40, shape))
    kh, kw = k
    sh, sw = (stride, stride) if np.isscalar(stride) else stride
    win = np.lib.stride_tricks.sliding_window_view(x, k, axis=(2, 3))[:, :, ::sh, ::sw]
    N, C, OH, OW = win.shape[:4]
    ref = win.transpose(0, 2, 3, 1, 4, 5).reshape(N * OH * OW, C * kh * kw)
    assert np.array_equal(im2col(x, kh, kw, stride), ref)
    assert np.array_equal(im2col(x[:, :, ::-1], kh, kw, stride),  # non-contiguous input
                          np.lib.stride_tricks.sliding_window_view(x[:, :, ::-1], k, axis=(2, 3))[:, :, ::sh, ::sw]
                          .transpose(0, 2, 3, 1, 4, 5).reshape(N * OH * OW, C * kh * kw))
    xi = rng.integers(-1000, 1000, shape).astype(np.int32)
    assert np.array_equal(im2col(xi, kh, kw, stride), im2col(xi.astype(np.float64), kh, kw, stride).astype(np.int32))
    assert im2col(x[:0], kh, kw, stride).shape == (0, C * kh * kw)
    cols = rng.normal(size=ref.shape) * np.exp2(rng.integers(-40, 40, ref.shape))
    c6 = cols.reshape(N, OH, OW, C, kh, kw)
    out = np.zeros(shape)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + sh * (OH - 1) + 1:sh, j:j + sw * (OW - 1) + 1:sw] += c6[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    assert np.array_equal(col2im(cols, shape, kh, kw, stride).view(np.int64), out.view(np.int64))


def test_conv2d_bad_input():
    with pytest.raises(RlhlsError, match="do not match"):
        conv2d(np.ones((1, 2, 4, 4)), np.ones((3, 1, 2, 2)))
    with pytest.raises(RlhlsError, match="does not fit"):
        conv2d(np.ones((1, 2, 4, 4)), np.ones((3, 2, 5, 2)))
    with pytest.raises(RlhlsError, match="positive int"):
        conv2d(np.ones((1, 2, 4, 4)), np.ones((3, 2, 2, 2)), stride=0)


# ----------------------------------------------------------------------------- toolchain

def test_toolchain_cache_and_errors(tmp_path):
    from rlhls.core.toolchain import ap_types_include, compile_cpp, find_cxx

    assert (ap_types_include() / "ap_fixed.h").is_file()
    with pytest.raises(RlhlsError, match="'no-such-cxx' not found on PATH"):
        find_cxx("no-such-cxx")
    src = tmp_path / "p.cpp"
    src.write_text("#include <ap_fixed.h>\nint main() { ap_fixed<8,3,AP_RND,AP_SAT> a = 1.3; "
                   "return a == 1.3125 ? 0 : 1; }\n")
    exe = compile_cpp([src], tmp_path / "p", include_dirs=[ap_types_include()], flags=("-w",))
    stamp = exe.stat().st_mtime_ns
    run(exe)
    assert compile_cpp([src], tmp_path / "p", include_dirs=[ap_types_include()], flags=("-w",)) == exe
    assert exe.stat().st_mtime_ns == stamp  # same content: not rebuilt
    src.write_text("int main() { return 0 }\n")
    with pytest.raises(RlhlsError, match="g\\+\\+ failed building p: .*error"):
        compile_cpp([src], tmp_path / "p")
    with pytest.raises(RlhlsError, match="does not exist"):
        compile_cpp([tmp_path / "missing.cpp"], tmp_path / "q")

