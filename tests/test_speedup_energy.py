"""AP-DRL's modeled speed-up figures (apdrl-speedup) and the a2c-traffic energy model (host/power.py,
traffic-energy)."""

import csv
import json

import pytest

from rlhls.cli import main
from rlhls.designs.devices import get_device
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels.cost import ps_cost
from rlhls.designs.registry import get_design
from rlhls.host.experiments.traffic import (
    element_resources,
    energy_row,
    energy_sweep,
    energy_table,
    pays_at,
    stage_times,
    with_macs,
)
from rlhls.host.perf import _fixar_design, choose, schedule
from rlhls.host.power import ZU7EV_POWER, energy_j, pl_dynamic_w, soc_power_w
from rlhls.partition.profile import device_capacity, device_links, profile_design


@pytest.fixture(scope="module")
def speedup(tmp_path_factory):
    out = tmp_path_factory.mktemp("speedup") / "out"
    assert main(["experiment", "apdrl-speedup", "--design", "apdrl-dqn-cartpole", "--param", "scales=1",
                 "--param", "time_limit=5", "--out", str(out), "--quiet"]) == 0
    return out


def test_apdrl_speedup_tiny_budget_columns_and_files(speedup):
    for f in ("fig4.png", "fig6.png", "fig12.png", "fig13.png", "speedup.md", "speedup.csv", "fig4.csv", "fig6.csv"):
        assert (speedup / f).is_file(), f
    rows = list(csv.DictReader(open(speedup / "speedup.csv")))
    assert [(r["design"], int(r["batch"])) for r in rows] == [("apdrl-dqn-cartpole", 128)]
    r = {k: (float(v) if k.endswith(("_us", "_norm")) or k.startswith("speedup") else v) for k, v in rows[0].items()}
    assert r["speedup_vs_fixar"] == pytest.approx(r["fixar_us"] / r["plan_us"])
    assert r["speedup_vs_aie"] == pytest.approx(r["aie_us"] / r["plan_us"])
    # Fig. 12 normalizes time to FIXAR-like, Fig. 13 throughput: reciprocal, one batch per step
    assert r["fixar_time_norm"] == 1.0 and r["plan_tput_norm"] == pytest.approx(1 / r["plan_time_norm"])
    f4 = list(csv.DictReader(open(speedup / "fig4.csv")))
    assert [x["design"] for x in f4] == ["apdrl-dqn-cartpole"]
    assert min(float(f4[0][f"{u}_norm"]) for u in ("PS", "PL", "AIE")) == 1.0
    # each speed-up with its band over the assumed constants' ranges, around it and printed beside it
    for s in ("fixar", "aie"):
        lo, hi = float(rows[0][f"band_vs_{s}_low"]), float(rows[0][f"band_vs_{s}_high"])
        assert lo <= r[f"speedup_vs_{s}"] <= hi and lo < hi
        assert f"{r[f'speedup_vs_{s}']:.3g}x ({lo:.3g}-{hi:.3g})" in (speedup / "speedup.md").read_text()


def test_apdrl_speedup_baselines_are_the_plans_they_claim(speedup):
    """FIXAR-like: every node on the PL at 164 MHz in fixed point; AIE-only: FP32 matrix multiplies on
    the AIE, the rest on the PS; Fig. 4's PS bar: every node on the PS, list-scheduled on its cores
    (each variant timed as the partitioner times a schedule)."""
    d = get_design("apdrl-dqn-cartpole")
    dev = get_device(d.device)
    g = build_graph(d, 128)
    cap, links = device_capacity(dev), device_links(dev)
    cores = int(cap[("PS", "cores")])
    row = next(csv.DictReader(open(speedup / "speedup.csv")))
    fx, _ = _fixar_design(d)
    pl, _ = choose(profile_design(fx, dev, graph=g), g, "PL", cap)
    assert set(u for u, _ in pl.values()) == {"PL"}
    assert float(row["fixar_us"]) == pytest.approx(schedule(g, pl, links, ps_cores=cores)["makespan_us"])
    from dataclasses import replace

    aie_d = replace(d, formats={**d.formats, "aie": "fp32", "aie_acc": "fp32"}, pins={})
    ps = {n.name: ("PS", ps_cost(n.flops, dev, nbytes=n.bytes)["latency_us"]) for n in g.nodes}
    aie, _ = choose([r for r in profile_design(aie_d, dev, graph=g) if g.node(r.node).mm], g, "AIE", cap, others=ps)
    assert {n: u for n, (u, _) in aie.items()} == {n.name: ("AIE" if n.mm else "PS") for n in g.nodes}
    assert float(row["aie_us"]) == pytest.approx(schedule(g, aie, links, ps_cores=cores)["makespan_us"])
    f4 = next(csv.DictReader(open(speedup / "fig4.csv")))
    assert float(f4["PS_us"]) == pytest.approx(schedule(g, ps, links, ps_cores=cores)["makespan_us"])
    assert float(f4["PS_us"]) <= sum(lat for _, lat in ps.values())  # the cores may overlap independent nodes


@pytest.mark.parametrize("args, what", [
    (["--param", "scales=0"], "scales"),
    (["--param", "scales=two"], "scales"),
    (["--param", "time_limit=-1"], "time_limit"),
    (["--design", "nosuch"], "nosuch"),
])
def test_apdrl_speedup_bad_input_one_line_exit_2_nothing_written(args, what, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["experiment", "apdrl-speedup", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and what in err and "Traceback" not in err
    assert not out.exists()


def test_power_model_arithmetic_hand_computed():
    res = {"lut": 1000, "ff": 2000, "dsp": 10, "bram36": 4}
    m = ZU7EV_POWER
    assert (m["lut_uw_per_mhz"].value, m["ff_uw_per_mhz"].value, m["dsp_uw_per_mhz"].value,
            m["bram36_uw_per_mhz"].value) == (0.04, 0.01, 3.0, 8.0)
    # (1000 x 0.04 + 2000 x 0.01 + 10 x 3 + 4 x 8) uW/MHz x 100 MHz = 122 uW/MHz x 100 MHz = 12.2 mW
    assert pl_dynamic_w(res, 100.0) == pytest.approx(0.0122)
    p = soc_power_w(2, res, 100.0)
    assert p["ps"] == pytest.approx(0.20 + 2 * 0.25)
    # the ZU7EV's PL static: 850 mW over the ZU19EG's and ZU2EG's cell difference, times its cells
    assert p["pl_static"] == pytest.approx(0.850 / (1_143_450 - 103_320) * 504_000, abs=1e-4)
    assert p["total"] == pytest.approx(p["ps"] + p["pl_static"] + 0.0122)
    assert soc_power_w(1)["pl_static"] == 0.0 and soc_power_w(1)["total"] == pytest.approx(0.45)
    assert energy_j([(2.0, 0.5), (1.0, 3.0)]) == pytest.approx(4.0)
    for f in m.values():  # every coefficient says where it comes from
        assert f.source.startswith(("assumed", "derived"))


def test_energy_row_is_power_times_time():
    d = get_design("a2c-traffic")
    r = energy_row(d, 32, False)
    st = stage_times(d, 32)
    assert r["pl_s"] == pytest.approx(sum(s["pl_us"] for s in st) * 1e-6)
    assert r["ps_j"] == pytest.approx(0.45 * r["ps_s"])  # one core, PL off
    assert r["with_j"] == pytest.approx((0.45 + r["pl_static_w"]) * r["with_s"] + r["pl_dynamic_w"] * r["pl_s"])
    # the PS-only parts (heads, loss, optimizer) are the same seconds on both sides
    assert r["ps_s"] - sum(s["ps_us"] for s in st) * 1e-6 == pytest.approx(r["with_s"] - r["pl_s"])
    assert element_resources(d, 32)[1] == 100.0


def test_pays_at_n_macs_and_not_at_n_minus_1():
    d = get_design("a2c-traffic")
    t = energy_table(d)
    step = next(r for r in t["rows"] if r["what"] == "training step")
    assert step["time_ratio"] > 1 and "costlier" in step["verdict"]  # the 4-MAC element is slower than the PS
    n = t["pays_at"]["training step time"]
    assert n is not None and n > 4
    assert energy_row(with_macs(d, n), 32, False)["time_ratio"] < 1.0
    assert energy_row(with_macs(d, n - 1), 32, False)["time_ratio"] >= 1.0
    m = t["pays_at"]["training step energy, PL on in both"]  # the PL's static power on both sides
    assert m is not None and energy_row(with_macs(d, m), 32, False)["energy_ratio_pl_on"] < 1.0
    assert energy_row(with_macs(d, m - 1), 32, False)["energy_ratio_pl_on"] >= 1.0
    assert f"time: the 4-MAC element is {step['time_ratio']:.2f}x" in step["verdict"]
    assert f"from {n} MACs" in step["verdict"]
    # where no count pays, none the fabric holds does
    sweep = energy_sweep(d)
    assert t["pays_at"]["decision energy"] is None
    assert all(s["energy_ratio"] >= 1.0 for s in sweep if s["what"] == "decision")
    assert pays_at(d, 1, True, "energy")[1].startswith("at no MAC count the fabric holds")


def test_traffic_energy_command(tmp_path, capsys):
    out = tmp_path / "te"
    assert main(["experiment", "traffic-energy", "--param", "max_macs=20", "--out", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["what"] for r in rows] == ["decision", "training step"]
    for f in ("energy.md", "energy.csv", "energy.json", "energy.png"):
        assert (out / f).is_file()
    md = (out / "energy.md").read_text()
    assert "assumed" in md and "derived" in md and "would pay from" in md
    assert main(["experiment", "traffic-energy", "--param", "macs=0", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "macs" in err and not (tmp_path / "bad").exists()


def test_traffic_energy_band_is_the_model_at_the_ends_of_the_assumed_ranges():
    """The band of a ratio: each assumed figure alone at its ends (the tornado), then all at the ends that
    make the ratio smallest / largest; a band across 1.0x says the verdict may flip."""
    import dataclasses

    from rlhls.designs.devices import get_device
    from rlhls.host.experiments.traffic import CLOCK_RANGE_MHZ, RATIO, _design, energy_band
    from rlhls.host.power import ZU7EV_POWER

    d = _design()
    eb = energy_band(d, 1, True)
    row = energy_row(d, 1, True)
    for key, col in RATIO.items():
        b = eb["band"][key]
        assert b["central"] == row[col] and b["low"] <= b["central"] <= b["high"]
        assert b["low"] < b["high"]
    by = {c["constant"]: c for c in eb["constants"]}
    # one figure alone, by hand: the element's clock at its top end, and the DSP power at its high end
    fast = energy_row(dataclasses.replace(d, clocks_mhz={**d.clocks_mhz, "PL": CLOCK_RANGE_MHZ[1]}), 1, True)
    assert by["element clock"]["high"]["time"] == fast["time_ratio"] < row["time_ratio"]
    hot = {**ZU7EV_POWER, "dsp_uw_per_mhz": dataclasses.replace(ZU7EV_POWER["dsp_uw_per_mhz"],
                                                                 value=ZU7EV_POWER["dsp_uw_per_mhz"].high)}
    assert by["dsp_uw_per_mhz"]["high"]["energy"] == energy_row(d, 1, True, model=hot)["energy_ratio"]
    assert by["dsp_uw_per_mhz"]["high"]["time"] == row["time_ratio"]  # power moves no time
    # every device figure that stays assumed is in the band
    assert {p for p, _ in get_device(d.device).assumed()} <= set(by)
    assert eb["constants"] == sorted(eb["constants"], key=lambda c: -c["swing"])
    for key in RATIO:
        b = eb["band"][key]
        assert any(f.startswith(f"{key} ratio") for f in eb["flips"]) == (b["low"] < 1.0 < b["high"])
