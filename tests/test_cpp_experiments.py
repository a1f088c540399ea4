"""CPP's experiments (host/experiments/cpp.py) at tiny settings: cpp-fig4 (MAPE of the fixed-point
CG result against float64 by fraction bits) and cpp-table2 (FPGA model, emulation, csim and float64
CG/FVP times)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import get_design
from rlhls.host.experiments.cpp import collect_dataset, mape_percent
from rlhls.host.experiments import experiment_names

TINY = ["--param", "samples=64", "--param", "warmup=1", "--quiet"]


def test_cpp_experiments_are_registered():
    assert {"cpp-fig4", "cpp-table2"} <= set(experiment_names())


def test_mape_skips_the_reference_zeros():
    assert mape_percent([1.01, 5.0, 2.0], [1.0, 0.0, 2.0]) == pytest.approx(0.5)


def test_dataset_is_one_trpo_batch_after_warmup():
    d = collect_dataset(get_design("cpp-trpo-ant"), 64, warmup=1, seed=3)
    assert d["obs"].shape == (64, 111) and d["act"].shape == (64, 8) and d["g"].shape == d["theta"].shape
    assert np.all(d["obs"][:, 105:] == 0) and np.max(np.abs(d["obs"])) <= 5.0  # padded, clipped
    assert abs(float(np.mean(d["adv"]))) < 1e-9  # standardized
    # the padded inputs' weights have no gradient (CG never moves them)
    assert np.all(d["g"][:111 * 64].reshape(111, 64)[105:] == 0)


def test_fig4_tiny(tmp_path, local_ray):
    out = tmp_path / "f4"
    argv = ["experiment", "cpp-fig4", "--out", str(out), "--param", "bits=12,23,27,28", *TINY]
    assert main(argv) == 0
    rows = list(csv.DictReader(open(out / "fig4.csv")))
    got = {(r["design"], int(r["fraction_bits"])): r for r in rows}
    assert len(rows) == 8
    for design in ("cpp-trpo-humanoid", "cpp-trpo-ant"):
        m12, m23 = float(got[design, 12]["mape_percent"]), float(got[design, 23]["mape_percent"])
        assert 0 < m23 < m12 and m23 < 1.0  # more fraction bits, closer to float64
        assert got[design, 23]["note"] == ""  # the design's own blocking
        assert got[design, 27]["note"] == "parallelism 1" and float(got[design, 27]["mape_percent"]) < m12
        assert got[design, 28]["mape_percent"] == "" and "W <= 31" in got[design, 28]["note"]
    rec = json.loads((out / "fig4.json").read_text())
    assert all(rec["same_bits_p1"].values())
    md = (out / "fig4.md").read_text()
    assert "seed's 0.028 %" in md and "seed's 0.007 %" in md and "| 23 | 27 |" in md
    assert (out / "fig4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same settings continue in the folder (the data sets are reused), others are refused
    stamp = (out / "dataset-cpp-trpo-ant.npz").stat().st_mtime_ns
    assert main(["experiment", "cpp-fig4", "--out", str(out), "--design", "cpp-trpo-ant", "--param", "bits=23",
                 *TINY]) == 2  # other designs: other settings
    # ... and with --jobs the widths are split over workers: the same rows
    assert main([*argv, "--jobs", "2"]) == 0 and (out / "dataset-cpp-trpo-ant.npz").stat().st_mtime_ns == stamp
    again = list(csv.DictReader(open(out / "fig4.csv")))
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in again] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    # --resume takes the recorded settings: the folder alone on the command line
    assert main(["experiment", "cpp-fig4", "--out", str(out), "--resume", "--quiet"]) == 0
    assert [r["mape_percent"] for r in csv.DictReader(open(out / "fig4.csv"))] == [r["mape_percent"] for r in rows]


def test_table2_tiny(tmp_path):
    out = tmp_path / "t2"
    assert main(["experiment", "cpp-table2", "--out", str(out), "--design", "cpp-trpo-ant", "--param",
                 "csim_samples=8", "--repeats", "1", *TINY]) == 0
    (r,) = list(csv.DictReader(open(out / "table2.csv")))
    assert float(r["model_fvp_s"]) == pytest.approx(0.158, rel=0.01)  # Table II's Model
    for col in ("emu_cg_s", "csim_cg_s", "float64_cg_s", "emu_fvp_s", "speedup_model_vs_float64"):
        assert float(r[col]) > 0, col
    assert float(r["emu_fvp_s"]) <= float(r["emu_cg_s"]) and int(r["csim_measured_samples"]) == 8
    # its band: the model FVP at -/+ the PL latency model's held-out error, around the speed-up
    err = __import__("rlhls.host.perf", fromlist=["x"]).model_error()["PL"][0]
    host = float(r["model_cg_s"]) - float(r["model_fvp_s"])
    assert float(r["band_low"]) == pytest.approx(float(r["float64_cg_s"]) / (float(r["model_fvp_s"]) * (1 + err) + host))
    assert float(r["band_low"]) < float(r["speedup_model_vs_float64"]) < float(r["band_high"])
    md = (out / "table2.md").read_text()
    assert "20.7" in md and "3.976 s (3.975 s)" in md


@pytest.mark.parametrize("params,match", [
    (["--param", "nope=1"], "unknown for cpp-fig4"),
    (["--param", "bits=x"], "bits='x'"),
    (["--param", "samples=0"], "expected >= 1"),
    (["--param", "scale=maybe"], "expected on, off or both"),
    (["--design", "heppo-ppo"], "takes a TRPO design"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, params, match):
    from rlhls.host.experiments import ExperimentOptions, run_experiment
    from rlhls.cli.common import parse_sets

    out = tmp_path / "bad"
    design = [params[1]] if params[0] == "--design" else None
    sets = parse_sets([params[1]]) if params[0] == "--param" else {}
    with pytest.raises(RlhlsError, match=match):
        run_experiment(ExperimentOptions("cpp-fig4", design=design, out=str(out), params=sets, quiet=True))
    assert not out.exists()


def test_table2_times_the_baseline_warm_at_full_size_and_says_when_it_settled():
    from rlhls.host.experiments import cpp

    calls = []

    class Unit:  # an FVP unit that records the states it is given
        def __call__(self, X, theta, v, inv_var):
            calls.append(X.shape[0])
            return v

    data = {"layers": [2, 3, 1], "theta": np.zeros(40), "obs": np.ones((5, 2)), "g": np.ones(4)}
    t = cpp.timed_cg(Unit(), {**data, "obs": np.resize(data["obs"], (50, 2))}, 3, repeats=4)
    assert set(calls) == {50} and len(calls) % 5 == 0  # one untimed warm CG, four timed: all at full size
    assert t["cg_min"] <= t["cg"] <= t["cg_max"] and t["settled"] in (True, False)
    assert cpp.timed_cg(Unit(), data, 3, repeats=1)["settled"] is None
    row = {"speedup_model_vs_float64": 20.0, "float64_cg_min_s": 1.9, "float64_cg_max_s": 2.1, "model_cg_s": 0.1,
           "seed_speedup": 20.7, "band_low": 19.6, "band_high": 20.4}
    assert cpp._headline({**row, "settled": True}).startswith("speed-up 20.00 (19.00-21.00; band 19.60-20.40")
    assert "not settled (one repeat" in cpp._headline({**row, "settled": None})
    assert "differ by more than 5 %" in cpp._headline({**row, "settled": False})
