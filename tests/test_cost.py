"""Cost primitives against independent computations from the catalogue's figures."""

import math

import pytest

from rlhls.designs.devices import get_device
from rlhls.core.errors import RlhlsError
from rlhls.designs.kernels import cost
from rlhls.designs.kernels.cost import aie_matmul, pl_elementwise, pl_matmul, ps_cost

KEYS = {"cycles", "latency_us", "memory_bytes", "resources", "source"}
RES = {"lut", "ff", "dsp", "bram36", "uram", "aie_tiles"}
VEK = get_device("vek280")


def test_shape_of_results():
    for c in (ps_cost(1e6, VEK, nbytes=10), pl_matmul(8, 16, 4, "fp16", VEK, pf=4),
              pl_elementwise(100, 3, "fp16", VEK, pf=2), aie_matmul(64, 64, 64, "bf16", VEK, tiles=4)):
        assert KEYS <= set(c) and set(c["resources"]) == RES
        assert c["latency_us"] > 0 and c["cycles"] > 0 and all(v >= 0 for v in c["resources"].values())


@pytest.mark.parametrize("n,k,m,pf,fmt", [(32, 64, 16, 8, "fp16"), (5, 12, 7, 4, "fp32"), (3, 4, 9, 16, "fp16"),
                                          (10, 8, 6, 1, "fixed<18,6>")])
def test_pl_matmul_cycles(n, k, m, pf, fmt):
    pl = VEK.units["PL"]
    c = pl_matmul(n, k, m, fmt, VEK, pf=pf, ii=2, acc="fp32" if "fp" in fmt else "fixed<40,12>")
    # independent: reduction unrolled first, the rest of pf over m, then n
    pk = min(pf, k)
    pm = min(max(1, pf // pk), m)
    pn = min(max(1, pf // (pk * pm)), n)
    trips = math.ceil(k / pk) * math.ceil(m / pm) * math.ceil(n / pn)
    float_ = fmt.startswith("fp")
    # the last trip issues at (trips - 1) II; depths: float 4 + 4 per adder level (assumed), fixed 0 + 0.5 per
    # level rounded down and the stream stage 1 (fitted by rlhls qor)
    depth = (4 + 4 * math.ceil(math.log2(pk)) if float_ else math.ceil(math.log2(pk)) // 2) + 1
    assert c["cycles"] == (trips - 1) * 2 + depth
    want = ((trips - 1) * 2 + depth) / pl.clock_mhz.value + pl.perf["launch_overhead_us"].value
    assert c["latency_us"] == pytest.approx(want)
    fixed_fmt = not float_
    per_mac = pl.perf["dsp_per_mac_fixed24" if fixed_fmt else f"dsp_per_mac_{fmt}"].value
    assert c["resources"]["dsp"] == math.ceil(pf * per_mac)


def test_pl_resources_scale_with_pf():
    prev = None
    for pf in (1, 4, 16, 64):
        r = pl_matmul(256, 400, 300, "fp16", VEK, pf=pf, acc="fp32")
        if prev is not None:
            assert r["resources"]["dsp"] == 4 * prev["resources"]["dsp"]
            assert r["resources"]["lut"] > prev["resources"]["lut"]
            assert r["resources"]["ff"] > prev["resources"]["ff"]
            assert r["resources"]["bram36"] >= prev["resources"]["bram36"]
            assert r["cycles"] < prev["cycles"]
        prev = r
    # the weights (400 x 300 fp16) need block RAM: at least their bits / 36 Kb
    assert prev["resources"]["bram36"] >= math.ceil(400 * 300 * 16 / (36 * 1024))
    e1, e4 = (pl_elementwise(4096, 12, "fp16", VEK, pf=p) for p in (1, 4))
    assert e4["resources"]["dsp"] == 4 * e1["resources"]["dsp"] > 0
    assert e4["cycles"] == math.ceil(4096 / 4) - 1 + 12 * 4 + 1


def test_dsp_per_mac_by_format_and_family():
    assert cost.dsp_per_mac("zcu106", "fp32") == 5  # DSP48E2: fmul 3 + fadd 2 (catalogue)
    assert cost.dsp_per_mac("max4", "fixed<27,4>") == 1  # Stratix V 27x27 in one block (CPP §IV-B)
    assert cost.dsp_per_mac("max4", "fixed<32,8>") == 2
    assert cost.dsp_per_mac("vek280", "fp16") == 1


def test_ps_cost_roofline():
    ps = VEK.units["PS"]
    rate = ps.perf["gflops_fp32_sustained"].value * 1e3
    mem = ps.perf["mem_gbytes_per_s_sustained"].value * 1e3
    assert ps_cost(1e6, VEK)["latency_us"] == pytest.approx(1e6 / rate)
    assert ps_cost(10, VEK, nbytes=1e6)["latency_us"] == pytest.approx(1e6 / mem)
    assert ps_cost(0, VEK)["latency_us"] == pytest.approx(1 / ps.clock_mhz.value)


def _aie_independent(n, k, m, tiles):
    aie, pl = VEK.units["AIE"], VEK.units["PL"]
    rate = aie.perf["macs_per_cycle_bf16"].value
    blocks = math.ceil(n / 4) * math.ceil(k / 8) * math.ceil(m / 8)
    busy = min(tiles, math.ceil(n / 4) * math.ceil(m / 8))
    compute = math.ceil(math.ceil(blocks / busy) * 256 / (rate * 0.72)) / aie.clock_mhz.value
    side = math.ceil(math.sqrt(tiles))
    plio = aie.perf["plio_bits"].value / 8 * pl.clock_mhz.value
    t_in = (n * k + k * m) * 2 / (2 * side * plio)
    t_out = n * m * 2 / (side * plio)
    link = VEK.link("PL", "AIE").latency_us.value
    # windows of half a tile's 64 KB: fill, compute and drain of one window, the slowest stage for the rest
    windows = max(1, math.ceil((n * k + k * m + n * m) * 2 / busy / (32 * 1024)))
    stages = (t_in, compute, t_out)
    pipe = max(stages) + (sum(stages) - max(stages)) / windows
    return aie.perf["launch_overhead_us"].value + pipe + 2 * link, compute


def test_aie_latency_launch_and_compute():
    launch = VEK.units["AIE"].perf["launch_overhead_us"].value
    for n, k, m, t in ((8, 8, 8, 1), (256, 400, 300, 16), (2048, 2048, 2048, 64)):
        c = aie_matmul(n, k, m, "bf16", VEK, tiles=t)
        want, compute = _aie_independent(n, k, m, t)
        assert c["latency_us"] == pytest.approx(want)
        assert c["latency_us"] > launch and c["launch_us"] == launch
    tiny = aie_matmul(8, 8, 8, "bf16", VEK, tiles=1)
    assert tiny["launch_us"] > 0.9 * tiny["latency_us"]  # AP-DRL §III: launch dominates small layers
    big = aie_matmul(2048, 2048, 2048, "bf16", VEK, tiles=64)
    assert big["compute_us"] > 5 * big["launch_us"]  # and compute dominates big ones
    assert aie_matmul(8, 8, 8, "bf16", VEK, tiles=64)["resources"]["aie_tiles"] == 64
    auto = aie_matmul(512, 512, 512, "bf16", VEK)
    assert auto["latency_us"] <= min(aie_matmul(512, 512, 512, "bf16", VEK, tiles=t)["latency_us"] for t in (1, 8, 64))


def test_pl_wins_small_gemm_aie_wins_large():
    """AP-DRL §III-A / Fig. 6: GEMM of size s (s x s times s x s), PL at 245 MHz vs AIE-ML at 1 GHz."""
    pl = VEK.units["PL"]
    f, launch_pl = pl.clock_mhz.value, pl.perf["launch_overhead_us"].value
    dsp = pl.resources["dsp"].value
    pf = 256  # a fifth of the VE2802's DSP58s, one per fp16 MAC

    def pl_independent(s):
        trips = math.ceil(s / min(pf, s)) * math.ceil(s / max(1, min(pf // min(pf, s), s))) * s
        return launch_pl + (trips - 1 + 4 + 4 * math.ceil(math.log2(min(pf, s))) + 1) / f

    assert pf * pl.perf["dsp_per_mac_fp16"].value <= dsp
    for s, pl_wins in ((16, True), (32, True), (64, True), (512, False), (1024, False)):
        p = pl_matmul(s, s, s, "fp16", VEK, pf=pf, acc="fp32")["latency_us"]
        a = aie_matmul(s, s, s, "bf16", VEK, tiles=16)["latency_us"]
        assert p == pytest.approx(pl_independent(s))
        assert a == pytest.approx(_aie_independent(s, s, s, 16)[0])
        assert (p < a) == pl_wins, (s, p, a)


@pytest.mark.parametrize("call, text", [
    (lambda: pl_matmul(0, 4, 4, "fp16", VEK), "'n' = 0"),
    (lambda: pl_matmul(4, 4, 4, "fp16", VEK, pf=0), "'pf' = 0"),
    (lambda: pl_matmul(4, 4, 4, "fp16", VEK, ii=1.5), "'ii'"),
    (lambda: pl_matmul(4, 4, 4, "fp99", VEK), "format"),
    (lambda: pl_matmul(4, 4, 4, "fp16", VEK, clock_mhz=0), "clock_mhz"),
    (lambda: pl_elementwise(-1, 1, "fp16", VEK), "n_elements"),
    (lambda: aie_matmul(4, 4, 4, "bf16", VEK, tiles=1000), "tiles"),
    (lambda: aie_matmul(4, 4, 4, "bf16", "zcu106"), "no AIE unit"),
    (lambda: aie_matmul(4, 4, 4, "fixed<32,8>", VEK), "no AIE datapath"),
    (lambda: ps_cost(-5, VEK), "flops"),
    (lambda: ps_cost(5, "nosuchboard"), "unknown device"),
    (lambda: pl_matmul(4, 4, 4, "fixed<64,8>", "zcu106"), "no DSP figure"),
])
def test_bad_parameters(call, text):
    with pytest.raises(RlhlsError, match=text):
        call()
