"""The uncertainty of a modeled run: plausible ranges of assumed figures, perf's band and tornado."""

import json

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import DEVICES, Figure, get_device
from rlhls.designs.registry import get_design
from rlhls.host.perf import HostTimes, model_perf, write_perf
from rlhls.host.power import ZU7EV_POWER
from rlhls.partition.profile import profile_design

ERR = {"PL": 0.33, "AIE": 0.32}


def test_an_assumed_figure_without_a_range_is_refused():
    with pytest.raises(RlhlsError, match="assumed and has no plausible range"):
        Figure(2.0, "us", "assumed: a guess")
    with pytest.raises(RlhlsError, match="does not hold the value"):
        Figure(2.0, "us", "assumed: a guess", low=3.0, high=4.0)
    with pytest.raises(RlhlsError, match="needs both low and high"):
        Figure(2.0, "us", "a data sheet", low=1.0)
    fig = Figure(2.0, "us", "assumed: a guess", "why", 1.0, 20.0)
    assert fig.assumed and fig.to_dict()["range"] == [1.0, 20.0]
    assert not Figure(2.0, "us", "a data sheet").assumed  # published figures need none


def test_every_assumed_figure_of_the_catalogue_has_a_range_with_its_reason():
    figs = [f for d in DEVICES.values() for _, f in d.figures() if f.assumed] + \
        [f for f in ZU7EV_POWER.values() if f.assumed]
    assert len(figs) > 25
    for f in figs:
        assert f.low is not None and f.low <= f.value <= f.high and "plausible" in f.note


def test_with_value_moves_the_figure_and_what_is_derived_from_it():
    dev = get_device("vek280")
    half = dev.with_value("PS.perf.flops_per_cycle_fp32", 4.0)
    for k in ("gflops_fp32_peak", "gflops_fp32_sustained"):
        assert half.unit("PS").perf[k].value == pytest.approx(dev.unit("PS").perf[k].value / 2)
    # the launch overhead: every PL row of the profile moves by whole launches, nothing else moves
    d = get_design("apdrl-dqn-cartpole")
    base = {(r.node, r.unit, str(r.point)): r.latency_us for r in profile_design(d, dev)}
    late = dev.with_value("PL.perf.launch_overhead_us", 20.0)
    delta = 20.0 - dev.figure("PL", "launch_overhead_us").value
    moved = {k: r.latency_us - base[k] for r in profile_design(d, late)
             for k in [(r.node, r.unit, str(r.point))]}
    assert any(k[1] == "PL" for k in moved)
    for (node, unit, point), dt in moved.items():
        if unit == "PL":
            launches = dt / delta
            assert launches >= 1 and launches == pytest.approx(round(launches)), (node, point, dt)
        else:
            assert dt == 0.0, (node, unit, point)
    with pytest.raises(RlhlsError, match="no figure"):
        dev.with_value("PL.perf.nothing", 1.0)


@pytest.fixture(scope="module")
def perf():
    host = HostTimes({"env_run": 1e-4}, {"backprop": 1e-3}, graph_steps=0.25, source="given")
    return model_perf(get_design("apdrl-dqn-cartpole"), host=host, factor=3.0, steps=10_000, band=True,
                      model_error=ERR)


def test_the_band_brackets_the_central_value(perf):
    b = perf.band["total_s"]
    assert b["low"] < b["central"] == perf.total_s < b["high"]
    for k, s in perf.band["speedups"].items():
        assert s["low"] <= s["central"] <= s["high"], k
        assert s["central"] == perf.speedups[k]["run"]
    # the band sets every constant that moves the plan; the tornado is sorted by swing
    swings = [t["swing"] for t in perf.tornado]
    assert swings == sorted(swings, reverse=True)
    assert {t["constant"] for t in perf.tornado if t["swing"] > 0} == set(perf.band["slowest"])
    assert b["high"] >= max(max(t["low"], t["high"]) for t in perf.tornado)


def test_the_arithmetic_of_the_ps_factor_and_the_model_error(perf):
    by = {t["constant"]: t for t in perf.tornado}
    # the host phases alone move with the PS factor: 1e-4 s/step x 10,000 steps x (3 x 2 - 3 x 0.5)
    ps = by["PS factor (host phases)"]
    assert ps["range"] == [1.5, 6.0]
    assert ps["high"] - ps["low"] == pytest.approx(1e-4 * 10_000 * 4.5, rel=1e-9)
    # a latency model at 1 - e and 1 + e: the range is the error given
    assert by["PL latency model (held-out error)"]["range"] == pytest.approx([0.67, 1.33])
    # a constant that only sizes resources moves no time of a fixed plan
    assert by["PL.perf.dsp_per_mac_fp16"]["swing"] == 0.0


def test_a_speedup_whose_band_crosses_one_says_it_may_flip(perf):
    flips = perf.band["flips"]
    crossing = [k for k, s in perf.band["speedups"].items() if s["low"] < 1.0 < s["high"]]
    assert crossing and len(flips) == len(crossing)
    assert any(s["high"] < 1.0 or s["low"] > 1.0 for s in perf.band["speedups"].values())  # one that does not
    for sentence in flips:
        assert "may flip" in sentence and "crosses 1.0x" in sentence
        assert sentence in perf.text()


def test_perf_json_text_and_tornado_png(perf, tmp_path):
    out = write_perf(perf, tmp_path / "perf")
    rec = json.loads((out / "perf.json").read_text())
    assert set(rec["band"]["total_s"]) == {"low", "central", "high"}
    assert {"constant", "low", "high", "swing"} <= set(rec["tornado"][0])
    assert (out / "tornado.png").stat().st_size > 1000
    assert "band (every assumed constant" in (out / "perf.txt").read_text()


def test_a_bad_model_error_is_refused():
    host = HostTimes({"env_run": 1e-4}, {}, graph_steps=0.25, source="given")
    with pytest.raises(RlhlsError, match="expected a fraction"):
        model_perf(get_design("apdrl-dqn-cartpole"), host=host, factor=3.0, steps=10, band=True,
                   model_error={"PL": 1.5})
