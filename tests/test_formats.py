"""rlhls.designs.formats against the real C++ types (ap_fixed from hls4ml's ap_types, g++
_Float16, a bit-level bfloat16), bit for bit, plus grammar and API behaviour."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cpp_util import build, format_ref_sources, run, write_doubles

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import (
    BF16, FP16, FP32, OVERFLOW_MODES, QUANT_MODES, FixedFormat, FloatFormat, UniformFormat,
    parse_format)

# Formats the registered designs use (CPP/TRPO, F-DDPG, hls4ml defaults, accumulators, HEPPO).
REGISTERED_FIXED = [
    "fixed<27,4,RND,SAT>", "fixed<32,8,RND,SAT>", "fixed<32,8>", "fixed<16,6>",
    "fixed<16,6,RND,SAT>", "fixed<32,16>", "fixed<48,16>", "fixed<64,24,RND,SAT>",
    "ufixed<8,0>", "fixed<18,8,RND_CONV,SAT_SYM>",
]
UQ_BITS = [3, 4, 5, 6, 7, 8, 9, 10]
N_RANDOM = 100_000


def registry_formats():
    """Every format text the registered designs name (formats and kernel storage/acc)."""
    from rlhls.designs.registry import design_names, get_design
    out = set()
    for name in design_names():
        d = get_design(name)
        out |= {str(parse_format(t)) for t in d.formats.values()}
        out |= {str(parse_format(t)) for k in d.kernels for t in (k.storage, k.acc)}
    return out


try:  # the registry is other engineers' code: a failure here fails only the coverage test
    _REGISTRY = registry_formats()
except Exception as exc:  # noqa: BLE001
    _REGISTRY, _REGISTRY_ERROR = set(), exc
else:
    _REGISTRY_ERROR = None
for _f in sorted(_REGISTRY):
    _p = parse_format(_f)
    if isinstance(_p, FixedFormat) and _f not in REGISTERED_FIXED:
        REGISTERED_FIXED.append(_f)
    if isinstance(_p, UniformFormat) and _p.n_bits not in UQ_BITS:
        UQ_BITS.append(_p.n_bits)


def random_fixed_formats(n=40, seed=20240611):
    """Seeded sample: every (Q, O) pair, signed/unsigned, I < 0, I > W, W from 1 to 64."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    widths = [1, 2, 3, 52, 53, 54, 63, 64]
    while len(out) < n:
        q, o = QUANT_MODES[i % 7], OVERFLOW_MODES[i % 4]  # 28 consecutive i cover all pairs
        i += 1
        signed = bool(rng.integers(0, 4) != 0)
        w = widths[len(out)] if len(out) < len(widths) else int(rng.integers(1, 65))
        w = w if signed else min(w, 63)
        if signed and w == 1 and o == "SAT_SYM":
            continue
        r = rng.random()
        if r < 0.25:
            ib = int(rng.integers(-10, 0))
        elif r < 0.5:
            ib = int(rng.integers(w + 1, w + 12))
        else:
            ib = int(rng.integers(0, w + 1))
        out.append(FixedFormat(w, ib, signed, q, o))
    return out


FIXED = [parse_format(t) for t in REGISTERED_FIXED] + random_fixed_formats()


def fixed_edges(f: FixedFormat) -> np.ndarray:
    """Ties at every boundary, +-1 LSB around min/max (before and after rounding carry),
    wrap multiples, values near zero, huge values."""
    F, lo, hi = f.frac_bits, f.min_mantissa, f.max_mantissa
    span = hi - lo + 1
    ks = {lo, lo + 1, lo + 2, lo - 1, lo - 2, hi, hi - 1, hi - 2, hi + 1, hi + 2, 0, 1, -1, 2, -2, 3,
          -3, hi // 2, lo // 2, hi + span, lo - span, 2 * hi + 1, 2 * lo, 5, -5}
    fracs = [0.0, 0.5, -0.5, 0.25, 0.75, -0.25, -0.75, 0.5 - 2**-20, 0.5 + 2**-20,
             -0.5 + 2**-20, -0.5 - 2**-20, 1e-6, -1e-6]
    vals = [np.ldexp(float(k) + fr, -F) for k in ks for fr in fracs]
    for e in (1, 2, 3, 30, 60, 200):  # just above/below zero
        vals += [np.ldexp(1.0, -F - e), -np.ldexp(1.0, -F - e), np.ldexp(3.0, -F - e), -np.ldexp(3.0, -F - e)]
    vals += [5e-324, -5e-324, 1e-300, -1e-300, 2.2250738585072014e-308, -2.2250738585072014e-308,
             0.0, -0.0, 1e300, -1e300, 1.7976931348623157e308, -1.7976931348623157e308]
    I = f.int_bits
    for e in (-1, 0, 1, 2, 10, 62, 63, 64, 65, 100):
        vals += [np.ldexp(1.0, I + e), -np.ldexp(1.0, I + e), np.ldexp(3.0, I + e), -np.ldexp(3.0, I + e)]
    return np.array(vals, dtype=np.float64)


def fixed_random(f: FixedFormat, rng, n) -> np.ndarray:
    F, I = f.frac_bits, f.int_bits
    lo, hi = float(f.min_mantissa), float(f.max_mantissa)
    if not f.signed:
        lo = -0.25 * hi
    a = n * 35 // 100
    b = n * 35 // 100
    c = n - a - b
    uni = np.ldexp(rng.uniform(1.25 * lo - 1, 1.25 * hi + 1, a), -F)
    # Quarter-LSB grid: exact ties (k + 1/2) and non-ties (k +- 1/4) on every mode.
    grid = np.ldexp(np.round(rng.uniform(4 * (1.1 * lo - 2), 4 * (1.1 * hi + 2), b)), -F - 2)
    mag = np.ldexp(rng.uniform(1, 2, c), rng.integers(-F - 8, I + 9, c))
    logu = np.where(rng.random(c) < 0.5, -mag, mag)
    return np.concatenate([uni, grid, logu])


@pytest.fixture(scope="module")
def fixed_cpp(tmp_path_factory):
    """Run format_ref once for every fixed format: {fmt: (x, mantissas, overflow flags)}."""
    files, order = format_ref_sources(FIXED, UQ_BITS)
    exe = build("format_ref", ["format_ref.cpp"], files)
    rng = np.random.default_rng(7)
    edges = {f: fixed_edges(f) for f in order}
    n_edge = max(len(e) for e in edges.values())
    xs = {}
    for f in order:
        e = edges[f]
        pad = e[rng.integers(0, len(e), n_edge - len(e))]  # same length for every format
        xs[f] = np.concatenate([e, pad, fixed_random(f, rng, N_RANDOM)])
    n = n_edge + N_RANDOM
    tmp = tmp_path_factory.mktemp("fixed")
    write_doubles(tmp / "in.bin", [xs[f] for f in order])
    run(exe, "fixed", tmp / "in.bin", tmp / "out.bin")
    raw = open(tmp / "out.bin", "rb").read()
    out, pos = {}, 0
    for f in order:
        m = np.frombuffer(raw, dtype=np.int64, count=n, offset=pos)
        pos += 8 * n
        ovf = np.frombuffer(raw, dtype=np.uint8, count=n, offset=pos).astype(bool)
        pos += n
        out[f] = (xs[f], m, ovf, n_edge)
    assert pos == len(raw)
    return out


def _show(x, ours, ref, bad, k=5):
    idx = np.flatnonzero(bad)[:k]
    return "; ".join(f"x={x[i]!r}: ours {ours[i]} C++ {ref[i]}" for i in idx)


@pytest.mark.parametrize("fmt", FIXED, ids=str)
def test_fixed_matches_ap_fixed(fmt, fixed_cpp):
    x, m_ref, ovf_ref, n_edge = fixed_cpp[fmt]
    m, n_ovf = fmt.quantize_mantissa(x, return_overflow=True)
    bad = m != m_ref
    assert not bad.any(), f"{fmt}: {int(bad.sum())} mismatches: {_show(x, m, m_ref, bad)}"
    # Overflow counts, on the edge block and on the random block separately.
    assert fmt.quantize_mantissa(x[:n_edge], return_overflow=True)[1] == int(ovf_ref[:n_edge].sum())
    assert n_ovf == int(ovf_ref.sum())
    assert N_RANDOM >= 100_000 and len(x) >= 100_000
    # The float64 result: exact for W <= 53; toward zero (still in the format) beyond.
    q = fmt.quantize(x)
    if fmt.width <= 53:
        assert np.array_equal(q.view(np.int64), np.ldexp(m_ref.astype(np.float64), -fmt.frac_bits).view(np.int64))
    else:
        back = fmt.quantize_mantissa(q)
        assert np.array_equal(fmt.quantize(q), q)  # representable: quantize is idempotent
        assert np.all(np.abs(back.astype(object)) <= np.abs(m_ref.astype(object)))
        exact = np.abs(m_ref) < 2**53
        assert np.array_equal(back[exact], m_ref[exact])


def test_registered_design_formats_are_all_tested():
    assert _REGISTRY_ERROR is None, f"cannot list the registered designs' formats: {_REGISTRY_ERROR}"
    tested = {str(f) for f in FIXED} | {"fp32", "fp16", "bf16"} | {f"uq<{n}>" for n in UQ_BITS}
    assert _REGISTRY and _REGISTRY <= tested, sorted(_REGISTRY - tested)


def test_fixed_sample_covers_the_brief():
    rnd = FIXED[len(REGISTERED_FIXED):]
    assert len(rnd) >= 40
    assert {(f.quant, f.overflow) for f in rnd} == {(q, o) for q in QUANT_MODES for o in OVERFLOW_MODES}
    assert any(not f.signed for f in rnd)
    assert any(f.int_bits < 0 for f in rnd) and any(f.int_bits > f.width for f in rnd)
    assert {1, 64} <= {f.width for f in rnd}


# ----------------------------------------------------------------------------- floats

def float_inputs(rng, n=200_000) -> np.ndarray:
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1.7976931348623157e308]
    for f in (FP32, FP16, BF16):
        M, emin, emax = f.man_bits, f.emin, f.emax
        mx = f.max_value
        half_ulp_max = np.ldexp(1.0, emax - M - 1)
        vals += [mx, -mx, mx + half_ulp_max, -(mx + half_ulp_max),  # tie at max: goes to Inf
                 np.nextafter(mx + half_ulp_max, 0), -np.nextafter(mx + half_ulp_max, 0),
                 f.min_normal, f.min_subnormal, f.min_subnormal / 2, -f.min_subnormal / 2,
                 np.nextafter(f.min_subnormal / 2, 1), f.min_subnormal * 0.75, f.min_subnormal * 1.5,
                 f.min_subnormal * 2.5, f.min_normal - f.min_subnormal / 2]
        # Exact ties and +-1 float64 ulp around them, at random exponents incl. subnormal.
        k = rng.integers(1 << M, 1 << (M + 1), 4000).astype(np.float64)
        e = rng.integers(emin - M - 3, emax - M + 1, 4000)
        t = np.ldexp(k + 0.5, e)
        vals += list(t) + list(np.nextafter(t, np.inf)) + list(np.nextafter(t, -np.inf)) + list(-t)
        # Random values spread over the whole range of this format (and beyond).
        vals += list(np.ldexp(rng.uniform(-2, 2, 20000), rng.integers(emin - M - 4, emax + 3, 20000)))
    x = np.array(vals, dtype=np.float64)
    rest = n - len(x)
    # Random float64 bit patterns (every exponent, NaN and Inf included) for a tenth of the
    # rest, values over and around the formats' exponent ranges for the others.
    k = rest // 10
    pat = rng.integers(-(2**63), 2**63 - 1, k, dtype=np.int64, endpoint=True).view(np.float64)
    spread = np.ldexp(rng.uniform(-2, 2, rest - k), rng.integers(-160, 140, rest - k))
    return np.concatenate([x, pat, spread])


@pytest.fixture(scope="module")
def float_cpp(tmp_path_factory):
    files, _ = format_ref_sources(FIXED, UQ_BITS)
    exe = build("format_ref", ["format_ref.cpp"], files)
    x = float_inputs(np.random.default_rng(11))
    tmp = tmp_path_factory.mktemp("float")
    write_doubles(tmp / "in.bin", [x])
    run(exe, "float", tmp / "in.bin", tmp / "out.bin")
    raw = open(tmp / "out.bin", "rb").read()
    n = len(x)
    f32 = np.frombuffer(raw, np.uint32, n, 0)
    f16 = np.frombuffer(raw, np.uint16, n, 4 * n)
    b16 = np.frombuffer(raw, np.uint16, n, 6 * n)
    b16f = np.frombuffer(raw, np.uint16, n, 8 * n)
    return x, {"fp32": f32, "fp16": f16, "bf16": b16, "bf16_of_float": b16f}


def _bits(fmt, y):
    if fmt == FP32:
        return y.astype(np.float32).view(np.uint32)
    if fmt == FP16:
        return y.astype(np.float16).view(np.uint16)
    return y.astype(ml_dtypes.bfloat16).view(np.uint16)


def _nan_bits(fmt, bits):
    """NaN payloads differ between libraries: compare NaN-ness, not NaN bits."""
    v = bits.view({FP32: np.float32, FP16: np.float16, BF16: ml_dtypes.bfloat16}[fmt])
    return np.isnan(v.astype(np.float32))


@pytest.mark.parametrize("fmt", [FP32, FP16, BF16], ids=str)
def test_float_matches_cpp(fmt, float_cpp):
    x, ref = float_cpp
    y, n_ovf = fmt.quantize(x, return_overflow=True)
    ours = _bits(fmt, y)  # exact: y is representable in fmt
    rb = ref[str(fmt)]
    nan_o, nan_r = np.isnan(y), _nan_bits(fmt, rb)
    assert np.array_equal(nan_o, nan_r)
    bad = (ours != rb) & ~nan_o
    assert not bad.any(), f"{fmt}: {int(bad.sum())} mismatches: {_show(x, ours, rb, bad)}"
    assert len(x) >= 100_000
    # Overflow = finite inputs that became +-Inf.
    assert n_ovf == int(np.count_nonzero(np.isfinite(x) & np.isinf(y)))


def test_float_cross_checks_numpy_and_ml_dtypes(float_cpp):
    x, ref = float_cpp
    # numpy converts float64 -> float16 with one rounding.
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    ok = ~np.isnan(x)
    assert np.array_equal(h[ok], _bits(FP16, FP16.quantize(x))[ok])
    # bf16 of float32 inputs: ml_dtypes, the C++ bit-level RNE, and ours agree.
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x.astype(np.float32)
    ml = x32.astype(ml_dtypes.bfloat16).view(np.uint16)
    ours = _bits(BF16, BF16.quantize(x32.astype(np.float64)))
    assert np.array_equal(ml[ok], ref["bf16_of_float"][ok])
    assert np.array_equal(ours[ok], ref["bf16_of_float"][ok])


def test_bf16_single_rounding_differs_from_double_rounding():
    # A value just above a bf16 tie that float32 rounding would move onto the tie.
    t = np.ldexp(float((1 << 7) + 0.5), -7)  # halfway between two bf16 numbers near 1
    x = np.array([t + 2.0**-40])
    via_f32 = x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    direct = BF16.quantize(x)
    assert direct[0] > t and via_f32[0] < t


# ----------------------------------------------------------------------------- uniform codes

@pytest.fixture(scope="module")
def uq_cpp(tmp_path_factory):
    files, _ = format_ref_sources(FIXED, UQ_BITS)
    exe = build("format_ref", ["format_ref.cpp"], files)
    rng = np.random.default_rng(5)
    edge = [0.0, -0.0, 4.0, -4.0, np.nextafter(4.0, 0), np.nextafter(-4.0, 0), 1e-300, -1e-300,
            5e-324, -5e-324, 1e300, -1e300, 3.999, -3.999]
    edge += list(np.arange(-4.5, 4.5, 2.0**-12))  # every level boundary of uq<3..10> exactly
    x = np.concatenate([edge, rng.normal(0, 1.5, N_RANDOM)])
    tmp = tmp_path_factory.mktemp("uq")
    write_doubles(tmp / "in.bin", [x])
    run(exe, "uq", tmp / "in.bin", tmp / "out.bin")
    raw = open(tmp / "out.bin", "rb").read()
    n = len(x)
    return x, {nb: np.frombuffer(raw, np.uint16, n, 2 * n * i) for i, nb in enumerate(UQ_BITS)}


@pytest.mark.parametrize("n_bits", UQ_BITS)
def test_uniform_codes_match_cpp(n_bits, uq_cpp):
    x, ref = uq_cpp
    f = parse_format(f"uq<{n_bits}>")
    codes, n_ovf = f.encode(x, return_overflow=True)
    assert codes.dtype == np.uint16
    assert np.array_equal(codes, ref[n_bits])
    assert n_ovf == int(np.count_nonzero((x < -f.clip) | (x >= f.clip)))


@pytest.mark.parametrize("n_bits", [1, 2, 3, 8, 10, 16])
def test_uniform_roundtrip_and_error_bound(n_bits):
    f = UniformFormat(n_bits)
    codes = np.arange(f.levels, dtype=np.uint16)
    assert np.array_equal(f.encode(f.decode(codes)), codes)  # level centres round-trip
    x = np.random.default_rng(n_bits).uniform(-f.clip, f.clip, 50_000)
    y, n_ovf = f.quantize(x, return_overflow=True)
    assert n_ovf == 0
    assert np.max(np.abs(y - x)) <= f.step / 2
    assert np.all(np.abs(y) < f.clip)
    assert f.quantize(np.array([1e9, -1e9]), return_overflow=True)[1] == 2
    with pytest.raises(RlhlsError, match="codes must be in"):
        f.decode(np.array([f.levels]))


# ----------------------------------------------------------------------------- grammar and API

ALL_TEXTS = REGISTERED_FIXED + [str(f) for f in FIXED] + ["fp32", "fp16", "bf16", "float<4,3>", "float<11,52>"] + [
    f"uq<{n}>" for n in range(1, 17)]


@pytest.mark.parametrize("text", sorted(set(ALL_TEXTS)))
def test_parse_str_roundtrip(text):
    f = parse_format(text)
    assert str(f) == text  # these texts are canonical
    assert parse_format(str(f)) == f and hash(parse_format(str(f))) == hash(f)


def test_canonical_text_and_cpp_types():
    cases = {
        "fixed<27,4,RND,SAT>": ("fixed<27,4,RND,SAT>", "ap_fixed<27,4,AP_RND,AP_SAT>", 27),
        "ap_fixed<27, 4, AP_RND, AP_SAT>": ("fixed<27,4,RND,SAT>", "ap_fixed<27,4,AP_RND,AP_SAT>", 27),
        "fixed<16,6,TRN,WRAP>": ("fixed<16,6>", "ap_fixed<16,6>", 16),
        "fixed<8,3,TRN,SAT>": ("fixed<8,3,TRN,SAT>", "ap_fixed<8,3,AP_TRN,AP_SAT>", 8),
        "fixed<16,6,RND>": ("fixed<16,6,RND>", "ap_fixed<16,6,AP_RND>", 16),
        "ufixed<8,0>": ("ufixed<8,0>", "ap_ufixed<8,0>", 8),
        "fixed<8,-3>": ("fixed<8,-3>", "ap_fixed<8,-3>", 8),
        "float<8,23>": ("fp32", "float", 32),
        "float<5,10>": ("fp16", "half", 16),
        "float<8,7>": ("bf16", "bfloat16", 16),
        "uq<8>": ("uq<8>", "ap_uint<8>", 8),
    }
    for text, (canon, cpp, bits) in cases.items():
        f = parse_format(text)
        assert (str(f), f.cpp_type, f.bits) == (canon, cpp, bits), text
    assert {parse_format(t).kind for t in ("fixed<8,3>", "fp16", "uq<3>")} == {"fixed", "float", "uniform"}
    assert FixedFormat(16, 6) == parse_format("fixed<16,6,TRN,WRAP>")
    assert len({FP16, FloatFormat(5, 10), parse_format("fp16")}) == 1


@pytest.mark.parametrize("text, needle", [
    ("fixed<0,2>", "width W must be >= 1"),
    ("fixed<65,2>", "width W must be <= 64"),
    ("ufixed<64,2>", "width W must be <= 63"),
    ("fixed<8,3,RNDX>", "unknown quantization mode 'RNDX' (expected one of TRN, TRN_ZERO"),
    ("fixed<8,3,RND,CLAMP>", "unknown overflow mode 'CLAMP' (expected one of WRAP, SAT"),
    ("fixed<8>", "expected <W,I[,Q[,O]]>"),
    ("fixed<8,x>", "I must be an integer"),
    ("fixed<8,3,RND,SAT,1>", "expected <W,I[,Q[,O]]>"),
    ("fixed<8,600>", "integer bits I must be in"),
    ("fixed<1,1,RND,SAT_SYM>", "signed SAT_SYM needs W >= 2"),
    ("fp8", "not recognised"),
    ("float<1,3>", "exponent bits E must be in 2..11"),
    ("float<8,0>", "mantissa bits M must be in 1..52"),
    ("uq<0>", "codeword bits n must be in 1..16"),
    ("uq<17>", "codeword bits n must be in 1..16"),
    ("", "not recognised"),
])
def test_bad_grammar(text, needle):
    with pytest.raises(RlhlsError) as ei:
        parse_format(text)
    msg = str(ei.value)
    assert needle in msg and repr(text) in msg and "\n" not in msg
    assert isinstance(ei.value, ValueError)


def test_float_format_without_cpp_type():
    with pytest.raises(RlhlsError, match="no C.. type"):
        _ = FloatFormat(4, 3).cpp_type


def test_fixed_properties_and_mantissa_api():
    f = parse_format("fixed<18,8,RND_CONV,SAT_SYM>")
    assert (f.frac_bits, f.lsb, f.min_value, f.max_value) == (10, 2**-10, -128.0, 128 - 2**-10)
    x = np.array([-128.0, -127.5, 0.3, 200.0])
    q, n = f.quantize(x, return_overflow=True)
    assert q[0] == -f.max_value and n == 2  # SAT_SYM: the most negative code is never produced
    m = f.to_mantissa(q)
    assert m.dtype == np.int64 and np.array_equal(f.from_mantissa(m), q)
    with pytest.raises(RlhlsError, match="not representable"):
        f.to_mantissa(np.array([2**-11]))
    # cast_mantissa: an int64 mantissa with 12 fractional bits; ties to even, saturation.
    src = np.array([0b110, 0b010, 0b1010, 1 << 40, -(1 << 40)], dtype=np.int64)
    out, n = f.cast_mantissa(src, 12)
    assert np.array_equal(out, [2, 0, 2, f.max_mantissa, -f.max_mantissa]) and n == 2
    # Python-int mantissas (wider than int64) take the exact slow path with the same result.
    out2, n2 = f.cast_mantissa(src.astype(object), 12)
    assert np.array_equal(out, out2) and n == n2
    big = np.array([(1 << 80) + 3, -(1 << 80)], dtype=object)
    assert f.cast_mantissa(big, 90)[0].tolist() == [1 << 0, -1]


def test_wide_formats_are_exact_beyond_53_bits():
    f = parse_format("fixed<64,24,RND,SAT>")
    assert f.max_mantissa == 2**63 - 1 and f.min_mantissa == -(2**63)
    # 2**23 - 2**-40 needs 63 bits: the float64 result is rounded toward zero, the mantissa exact.
    m = f.quantize_mantissa(np.array([1e10, -1e10]))
    assert m.tolist() == [2**63 - 1, -(2**63)]
    q = f.quantize(np.array([1e10]))
    assert q[0] < 2**23 and q[0] == np.nextafter(2.0**23, 0)
    # A wrap at W = 64 keeps all low 64 bits.
    g = parse_format("fixed<64,64>")
    x = np.array([2.0**64 + 2.0**12, -(2.0**63) - 2.0**11, 2.0**63])
    assert g.quantize_mantissa(x).tolist() == [2**12, 2**63 - 2**11, -(2**63)]


def test_nonfinite_fixed_inputs_are_documented_behaviour():
    x = np.array([np.nan, np.inf, -np.inf])
    for o, expect in {"SAT": [0, 127, -128], "WRAP": [0, 0, 0], "SAT_ZERO": [0, 0, 0],
                      "SAT_SYM": [0, 127, -127]}.items():
        m, n = FixedFormat(8, 8, True, "RND", o).quantize_mantissa(x, return_overflow=True)
        assert m.tolist() == expect and n == 3, o


def test_float_format_properties():
    assert (FP16.max_value, FP16.min_normal, FP16.min_subnormal) == (65504.0, 2.0**-14, 2.0**-24)
    assert (BF16.max_value, BF16.min_subnormal) == (float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-133)
    assert FP32.max_value == float(np.finfo(np.float32).max)
    y = FP16.quantize(np.array([-0.0, 2.0**-26]))
    assert np.signbit(y[0]) and y[1] == 0.0  # -0 kept; below half the smallest subnormal -> 0


@pytest.mark.parametrize("em", [(8, 7), (5, 10), (8, 23), (5, 2), (4, 3), (2, 1), (10, 40), (9, 50)])
def test_float_add_rounding_equals_frexp_reference(em):
    """The fast paths (one-add rounding; ml_dtypes' cast for bf16 of float32 values; numpy's casts
    for fp32 / fp16) against the frexp / np.round reference: random magnitudes over the whole range, exact ties (to even),
    subnormals, the overflow threshold, +-0, +-Inf, NaN; signs of zero included."""
    f = FloatFormat(*em)
    rng = np.random.default_rng(sum(em))
    n = 20000
    e = rng.integers(f.emin - f.man_bits - 3, f.emax + 2, n)
    m = rng.integers(0, 1 << (f.man_bits + 1), n).astype(np.float64)
    ties = np.ldexp(m + 0.5, e - f.man_bits) * rng.choice([-1.0, 1.0], n)  # exactly halfway
    rand = rng.standard_normal(n) * np.exp2(rng.integers(f.emin - f.man_bits - 3, f.emax + 2, n).astype(float))
    ulp_max = np.ldexp(1.0, f.emax - f.man_bits)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, -5e-324, f.max_value,
                     f.max_value + ulp_max / 2, np.nextafter(f.max_value + ulp_max / 2, 0), f.min_subnormal / 2,
                     -f.min_subnormal / 2, np.nextafter(f.min_subnormal / 2, 1), f.min_subnormal * 1.5,
                     f.min_subnormal * 2.5, f.min_normal, -np.nextafter(f.min_normal, 0)])
    with np.errstate(over="ignore"):  # bf16 takes ml_dtypes' cast for float32 values (+-Inf included)
        f32 = rand.astype(np.float32).astype(np.float64)
    for x in (ties, rand, edge, rand.reshape(100, 200)[:, ::3], f32, np.r_[f32, np.nan, -np.inf]):
        y, n1 = f.quantize(x, return_overflow=True)
        ref, n2 = f._quantize_frexp(x, True)
        assert n1 == n2 and y.shape == ref.shape
        assert np.array_equal(y, ref, equal_nan=True)
        assert np.array_equal(np.signbit(y), np.signbit(ref))
    assert np.ndim(f.quantize(1.0 + 2.0 ** -30)) == 0
