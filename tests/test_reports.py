"""Vitis HLS reports: `rlhls report-read` on the real reports of ../shared and on fixtures written
here (tests/report_fixtures.py) for every tool generation and layout; calibrated profiles
(`rlhls profile --reports`) on a build whose components get fixture reports; bad input."""

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.designs.devices import get_device
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.partition.calibrate import calibrate
from rlhls.partition.profile import device_capacity, device_links, profile_design
from rlhls.partition.profile_io import read_profile
from rlhls.partition.reports import find_reports, read_cosim, read_csynth

from report_fixtures import VERSIONS, cosim_rpt, csynth_xml, write_cosim, write_csynth

REAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "csynth"
PART = "xcve2802-vsvh1760-2MP-e-S"  # apdrl-dqn-cartpole's build part (VEK280)
SHARED = ("target_clock_ns", "estimated_clock_ns", "latency_best_cycles", "latency_worst_cycles", "interval_min",
          "interval_max", "LUT", "FF", "DSP", "BRAM_18K", "URAM")


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _hls4ml(xml_path: Path, tmp: Path) -> dict:
    """hls4ml 1.3's own reader on a project holding the report (as SOURCES.md describes), converted
    to report-read's names: clocks float, cycles and resources int, 'undef' / missing None."""
    import xml.etree.ElementTree as ET

    from hls4ml.report.vivado_report import parse_vivado_report

    top = ET.parse(xml_path).getroot().find("UserAssignments/TopModelName").text
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "project.tcl").write_text(f'set project_name "{top}"\nset backend "Vivado"\n')
    rep = tmp / f"{top}_prj" / "solution1" / "syn" / "report"
    rep.mkdir(parents=True)
    (tmp / f"{top}_prj" / "hls.app").write_text('<project><solutions><solution name="solution1"/></solutions></project>')
    (rep / f"{top}_csynth.xml").write_bytes(xml_path.read_bytes())
    with contextlib.redirect_stdout(io.StringIO()):
        r = parse_vivado_report(str(tmp))["CSynthesisReport"]

    def cyc(v):
        return None if v is None or v == "undef" else int(v)

    return {"target_clock_ns": float(r["TargetClockPeriod"]), "estimated_clock_ns": float(r["EstimatedClockPeriod"]),
            "latency_best_cycles": cyc(r["BestLatency"]), "latency_worst_cycles": cyc(r["WorstLatency"]),
            "interval_min": cyc(r["IntervalMin"]), "interval_max": cyc(r["IntervalMax"]),
            **{k: cyc(r.get(k)) for k in ("LUT", "FF", "DSP", "BRAM_18K", "URAM")}}


# ---- the ten real reports ---------------------------------------------------------------------

REAL_FILES = sorted(REAL.glob("*.xml")) if REAL.is_dir() else []


@pytest.mark.skipif(not REAL_FILES, reason=f"the shared csynth reports are not at {REAL}")
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name[:2])
def test_report_read_equals_hls4ml_on_real_reports(path, tmp_path):
    rc, out, err = _cli(["report-read", str(path), "--json"])
    assert rc == 0, err
    got = json.loads(out)
    ref = _hls4ml(path, tmp_path)
    assert {k: got[k] for k in SHARED} == ref
    expected = json.loads((REAL / "expected.json").read_text())[path.name]
    assert {k: got[k] for k in expected} == expected  # top and part too


def test_real_reports_cover_every_generation():
    if not REAL_FILES:
        pytest.skip(f"the shared csynth reports are not at {REAL}")
    reps = [read_csynth(p) for p in REAL_FILES]
    assert {r.tool for r in reps} == {"Vivado HLS", "Vitis HLS"}
    undef = [r for r in reps if r.latency_worst_cycles is None]
    assert [r.top for r in undef] == ["VecDotProduct"]  # the 2020.1 dataflow top
    assert [r.top for r in reps if r.resources["URAM"] is None] == ["hls_sobel"]  # 2018.3, no URAM element
    add = next(r for r in reps if r.top == "add")
    assert add.latency_worst_cycles == 0 and add.resources["FF"] == 0  # zero is a value, not a missing one


# ---- fixtures written here: every version and layout ----------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("layout", ["classic", "unified", "ide"])
def test_fixture_every_version_and_layout(version, layout, tmp_path):
    res = {"LUT": 1234, "FF": 2345, "DSP": 17, "BRAM_18K": 6} | ({} if version < "2020" else {"URAM": 2})
    p = write_csynth(tmp_path, "dense_fwd", PART, layout=layout, version=version, target_ns=4.0, est_ns=4.4,
                     best=90, worst=97, imin=91, imax=98, res=res, sub_module="dense_fwd_Pipeline_L1")
    r = read_csynth(p)
    assert (r.top, r.part, r.version) == ("dense_fwd", PART, version)
    assert r.layout == ("classic" if layout == "classic" else "unified")
    assert r.tool == ("Vivado HLS" if version < "2020" else "Vitis HLS")
    assert (r.latency_best_cycles, r.latency_worst_cycles, r.interval_min, r.interval_max) == (90, 97, 91, 98)
    assert r.clock_ns == 4.4  # the estimate misses the 4 ns target: the kernel runs at 4.4 ns
    assert r.resources == {**res, **({"URAM": None} if version < "2020" else {})}
    assert {k: r.to_json()[k] for k in SHARED} == _hls4ml(p, tmp_path / "h")  # the sub-module's 7/9 cycles unused


def test_undef_latency_and_missing_resources(tmp_path):
    p = tmp_path / "csynth.xml"
    p.write_text(csynth_xml("df", PART, version="2020.1", best="undef", worst="undef", imin="undef", imax="undef",
                            res={"LUT": 10, "FF": 20}))
    rc, out, _ = _cli(["report-read", str(p), "--json"])
    d = json.loads(out)
    assert rc == 0
    assert [d[k] for k in ("latency_best_cycles", "latency_worst_cycles", "interval_min", "interval_max")] == [None] * 4
    assert (d["LUT"], d["FF"], d["DSP"], d["BRAM_18K"], d["URAM"]) == (10, 20, None, None, None)
    rc, out, _ = _cli(["report-read", str(p)])
    assert "best undef  worst undef" in out and "DSP -" in out


@pytest.mark.parametrize("version", ["2019.2", "2023.2"])
def test_cosim_report(version, tmp_path):
    p = tmp_path / "k_cosim.rpt"
    p.write_text(cosim_rpt("k", version=version, lat=(300, 311, 320), ii=(301, 312, 321)))
    r = read_cosim(p)
    assert (r.top, r.rtl, r.status) == ("k", "Verilog", "Pass")
    assert (r.latency_min_cycles, r.latency_avg_cycles, r.latency_max_cycles) == (300, 311.0, 320)
    assert (r.interval_min, r.interval_max) == (301, 321)
    rc, out, _ = _cli(["report-read", str(p), "--json"])
    assert rc == 0 and json.loads(out)["latency_avg_cycles"] == 311.0
    # both RTLs simulated: the last row, as hls4ml takes it
    text = p.read_text().replace("|    VHDL|      NA|", "|    VHDL|    Pass|", 1)
    text = text.replace("     NA|", "    900|", 3)
    p.write_text(text)
    r = read_cosim(p)
    assert (r.rtl, r.latency_min_cycles, r.latency_avg_cycles) == ("Verilog", 300, 311.0)


@pytest.mark.parametrize("text, what", [
    ("<profile><UserAssignments>", "malformed XML"),
    ("<report/>", "root element <report> is not <profile>"),
    (csynth_xml("k", PART, drop=("Interval-min",)), "no <PerformanceEstimates/SummaryOfOverallLatency/Interval-min>"),
    (csynth_xml("k", PART, drop=("Part",)), "no <UserAssignments/Part>"),
    (csynth_xml("k", PART, drop=("Resources",)), "no <AreaEstimates/Resources>"),
    (csynth_xml("k", PART, worst="soon"), "Worst-caseLatency 'soon' is neither"),
])
def test_report_read_bad_input(text, what, tmp_path):
    p = tmp_path / "csynth.xml"
    p.write_text(text)
    rc, out, err = _cli(["report-read", str(p)])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and str(p) in err and what in err, err


def test_report_read_unreadable(tmp_path):
    rc, _, err = _cli(["report-read", str(tmp_path)])
    assert rc == 2 and "is a folder" in err and err.count("\n") == 1
    loop = tmp_path / "loop_csynth.xml"
    loop.symlink_to(loop)
    rc, _, err = _cli(["report-read", str(loop)])
    assert rc == 2 and "cannot be read" in err and str(loop) in err and err.count("\n") == 1
    rc, _, err = _cli(["report-read", str(tmp_path / "none.xml")])
    assert rc == 2 and "no such file" in err


def test_find_reports_skips_sub_function_reports(tmp_path):
    # beside csynth.xml: the top's copy and the sub-functions' reports (whatever they name) are skipped
    d = write_csynth(tmp_path / "a", "top", PART, layout="classic").parent
    (d / "top_Pipeline_1_csynth.xml").write_text(csynth_xml("top_Pipeline_1", PART))
    write_cosim(tmp_path / "a", "top", layout="classic")
    # a folder without csynth.xml: the report named after the top it names; a sub-function's is not
    e = write_csynth(tmp_path / "b", "k2", PART, layout="unified").parent
    (e / "csynth.xml").unlink()
    (e / "k2_loop_csynth.xml").write_text(csynth_xml("k2", PART))
    found = find_reports(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found["csynth"]] == [
        "a/prj/sol1/syn/report/csynth.xml", "b/work/hls/syn/report/k2_csynth.xml"]
    assert [p.name for p in found["cosim"]] == ["top_cosim.rpt"]


# ---- calibrated profiles on a build ---------------------------------------------------------

DESIGN = "apdrl-dqn-cartpole"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    from rlhls.flow.build import build_design

    out = tmp_path_factory.mktemp("build") / "b"
    build_design(DESIGN, out, hls4ml=False)
    return out


def _fresh(build, tmp_path) -> Path:
    """A copy of the build (each test writes its own reports)."""
    import shutil

    dst = tmp_path / "b"
    shutil.copytree(build, dst)
    return dst


def _comps(b):
    return {c["name"]: c for c in json.loads((b / "manifest.json").read_text())["components"]}


def test_calibrated_rows_replace_exactly_the_reported_nodes(build, tmp_path):
    b = _fresh(build, tmp_path)
    comps = _comps(b)
    # q_fc1_fwd: unified synthesis + co-simulation; q_fc3_dx and q_fc3_dw (one backward node): classic
    # synthesis; q_fc2_upd: a dataflow top with undef latency (stays on the model)
    write_csynth(b / comps["q_fc1_fwd"]["dir"], "q_fc1_fwd", PART, layout="unified", version="2024.1",
                 target_ns=4.08, est_ns=3.0, worst=600, res={"LUT": 5000, "FF": 7000, "DSP": 8, "BRAM_18K": 6,
                                                                "URAM": 0})
    write_cosim(b / comps["q_fc1_fwd"]["dir"], "q_fc1_fwd", layout="unified", lat=(640, 650, 660))
    write_csynth(b / comps["q_fc3_dx"]["dir"], "q_fc3_dx", PART, layout="classic", version="2022.1",
                 target_ns=4.08, est_ns=5.0, worst=1000, res={"LUT": 100, "FF": 200, "DSP": 2, "BRAM_18K": 1})
    write_csynth(b / comps["q_fc3_dw"]["dir"], "q_fc3_dw", PART, layout="classic", version="2020.1",
                 target_ns=4.08, est_ns=3.0, worst=2000, res={"LUT": 300, "FF": 400, "DSP": 3, "BRAM_18K": 3})
    write_csynth(b / comps["q_fc2_upd"]["dir"], "q_fc2_upd", PART, layout="ide", best="undef", worst="undef",
                 imin="undef", imax="undef")
    model = profile_design(DESIGN)
    rows, notes = calibrate(model, b, json.loads((b / "manifest.json").read_text()))
    launch = get_device("vek280").units["PL"].perf["launch_overhead_us"].value
    changed = {"q.fc1.fwd", "q.fc1.tfwd", "q.fc1_relu.fwd", "q.fc1_relu.tfwd", "q.fc3.bwd"}
    by = {}
    for r in rows:
        by.setdefault((r.node, r.unit), []).append(r)
    for key, rs in by.items():
        if key[1] == "PL" and key[0] in changed:
            assert len(rs) == 1
        else:  # every other row is the model's, untouched
            assert rs == [r for r in model if (r.node, r.unit) == key]
            assert {r.source for r in rs} == {"model"}
    fc1 = by[("q.fc1.fwd", "PL")][0]
    assert fc1.source == "cosim" and fc1.cycles == 650 and fc1.point == "pf8"
    assert fc1.latency_us == pytest.approx(650 * 4.08 / 1000 + launch)
    assert fc1.resources == {"lut": 5000, "ff": 7000, "dsp": 8, "bram36": 3}
    assert by[("q.fc1.tfwd", "PL")][0] == fc1.__class__(**{**fc1.__dict__, "node": "q.fc1.tfwd",
                                                             "flops": by[("q.fc1.tfwd", "PL")][0].flops})
    relu = by[("q.fc1_relu.fwd", "PL")][0]  # folded into q_fc1_fwd: runs inside its call
    assert (relu.latency_us, relu.resources, relu.source) == (0.0, {}, "cosim")
    bwd = by[("q.fc3.bwd", "PL")][0]  # two components in turn; dx misses its clock: 5 ns
    assert bwd.source == "csynth" and bwd.cycles == 3000
    assert bwd.latency_us == pytest.approx(1000 * 5.0 / 1000 + 2000 * 4.08 / 1000 + 2 * launch)
    assert bwd.resources == {"lut": 400, "ff": 600, "dsp": 5, "bram36": 2}
    assert any("q_fc2_upd" in n and "undef" in n for n in notes)
    assert by[("q.fc1.fwd", "PS")][0].source == "model"


def test_profile_cli_reports_and_plan_moves(build, tmp_path):
    from rlhls.partition.ilp import solve

    b = _fresh(build, tmp_path)
    design = get_design(DESIGN)
    edges = build_graph(design).all_edges()
    cap, links = device_capacity(design.device), device_links(design.device)
    model = profile_design(design)
    before = solve(model, edges, cap, links, ps_cores=2, time_limit=20)
    assert before.assignment["q.fc2.fwd"] == "PL"
    # synthesis says q_fc2_fwd takes 400,000 cycles (1.6 ms): its nodes must leave the PL
    comps = _comps(b)
    write_csynth(b / comps["q_fc2_fwd"]["dir"], "q_fc2_fwd", PART, target_ns=4.08, est_ns=3.9, worst=400_000)
    out = tmp_path / "cal.csv"
    rc, stdout, err = _cli(["profile", DESIGN, "--reports", str(b), "--out", str(out)])
    assert rc == 0, err
    assert "(model 246, csynth 4)" in stdout  # q.fc2.fwd, q.fc2.tfwd and their folded activations
    rows = read_profile(out)
    assert {r.node for r in rows if r.source == "csynth"} == {"q.fc2.fwd", "q.fc2.tfwd", "q.fc2_relu.fwd",
                                                               "q.fc2_relu.tfwd"}
    after = solve(rows, edges, cap, links, ps_cores=2, time_limit=20)
    assert after.assignment["q.fc2.fwd"] != "PL" and after.assignment["q.fc2.tfwd"] != "PL"
    assert after.makespan_us > before.makespan_us
    # the partition command on the calibrated CSV: the plan records each node's row source
    write_csynth(b / comps["q_fc1_fwd"]["dir"], "q_fc1_fwd", PART, target_ns=4.08, est_ns=3.9, worst=300)
    assert _cli(["profile", DESIGN, "--reports", str(b), "--out", str(out)])[0] == 0
    graph = tmp_path / "g.csv"
    assert _cli(["graph", DESIGN, "--csv", str(graph)])[0] == 0
    rc, stdout, err = _cli(["partition", str(out), "--graph", str(graph), "--device", "vek280",
                            "--out", str(tmp_path / "plan")])
    assert rc == 0, err
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["assignment"]["q.fc1.fwd"] == "PL" and plan["sources"]["q.fc1.fwd"] == "csynth"
    assert plan["assignment"]["q.fc2.fwd"] != "PL" and plan["sources"]["q.fc2.fwd"] == "model"
    assert set(plan["sources"]) == set(plan["assignment"])
    assert "profile rows used: csynth" in stdout


def _bad(b, tmp_path, what):
    out = tmp_path / "p.csv"
    rc, stdout, err = _cli(["profile", DESIGN, "--reports", str(b), "--out", str(out)])
    assert rc == 2 and stdout == "", (rc, err)
    assert err.count("\n") == 1 and what in err, err
    assert not out.exists()
    return err


def test_profile_reports_bad_input(build, tmp_path):
    b = _fresh(build, tmp_path)
    comps = _comps(b)
    d = b / comps["q_fc1_fwd"]["dir"]
    err = _bad(b, tmp_path, "no synthesis or co-simulation reports")  # a folder with no reports
    assert str(b) in err
    p = write_csynth(d, "q_fc1_fwd", "xczu7ev-ffvc1156-2-e", both=False)  # another part
    err = _bad(b, tmp_path, "synthesised for part xczu7ev-ffvc1156-2-e; the build is for " + PART)
    assert str(p) in err
    p = write_csynth(d, "q_fc1_fwd", PART, both=False)
    p.write_text("<profile><UserAssignments>")  # malformed
    _bad(b, tmp_path, f"{p}: malformed XML")
    p.write_text(csynth_xml("q_fc1_fwd", PART))
    ghost = write_csynth(b / "pl" / "ghost", "ghost_top", PART, layout="unified")  # a component the build lacks
    _bad(b, tmp_path, f"{ghost}: top 'ghost_top' is no component of the build")
    ghost.unlink()
    (ghost.parent / "ghost_top_csynth.xml").unlink()
    write_csynth(b / comps["q_fc2_fwd"]["dir"], "q_fc3_fwd", PART, layout="classic", both=False)
    _bad(b, tmp_path, "inside component 'q_fc2_fwd', whose top is 'q_fc2_fwd'")
    for f in (b / comps["q_fc2_fwd"]["dir"]).rglob("csynth.xml"):
        f.unlink()
    loop = d / "work" / "hls" / "syn" / "report" / "csynth.xml"
    loop.unlink()
    loop.symlink_to(loop)  # an unreadable report
    _bad(b, tmp_path, f"{loop}: cannot be read")
    rc, _, err = _cli(["profile", DESIGN, "--reports", str(tmp_path / "nope"), "--out", str(tmp_path / "p.csv")])
    assert rc == 2 and "no such folder" in err
    rc, _, err = _cli(["profile", DESIGN, "--reports", str(d), "--out", str(tmp_path / "p.csv")])
    assert rc == 2 and "no manifest.json" in err
    rc, _, err = _cli(["profile", "apdrl-a2c-invpendulum", "--reports", str(b), "--out", str(tmp_path / "p.csv")])
    assert rc == 2 and "is of design 'apdrl-dqn-cartpole'" in err
    assert not (tmp_path / "p.csv").exists()


def test_compare_model_against_calibrated(build, tmp_path):
    b = _fresh(build, tmp_path)
    comps = _comps(b)
    write_csynth(b / comps["q_fc1_fwd"]["dir"], "q_fc1_fwd", PART, target_ns=4.08, est_ns=3.0, worst=2000,
                 res={"LUT": 2000, "FF": 2568, "DSP": 8, "BRAM_18K": 2, "URAM": 0})
    model_csv, cal_csv, fig = tmp_path / "model.csv", tmp_path / "cal.csv", tmp_path / "cmp.png"
    assert _cli(["profile", DESIGN, "--out", str(model_csv)])[0] == 0
    assert _cli(["profile", DESIGN, "--reports", str(b), "--out", str(cal_csv)])[0] == 0
    rc, out, err = _cli(["profile", "--compare", str(model_csv), str(cal_csv), "--out", str(fig), "--json"])
    assert rc == 0, err
    rows = {r["node"]: r for r in json.loads(out)}
    assert set(rows) == {"q.fc1.fwd", "q.fc1.tfwd", "q.fc1_relu.fwd", "q.fc1_relu.tfwd"}
    r = rows["q.fc1.fwd"]
    # built at pf8: the model's nearest points are pf4 and pf16 (equally far); the first is taken
    model_pf4 = next(m for m in read_profile(model_csv) if (m.node, m.unit, m.point) == ("q.fc1.fwd", "PL", "pf4"))
    assert (r["point"], r["model_point"], r["model_latency_us"]) == ("pf8", "pf4", model_pf4.latency_us)
    report_us = 2000 * 4.08 / 1000 + get_device("vek280").units["PL"].perf["launch_overhead_us"].value
    assert r["latency_us"] == pytest.approx(report_us)
    assert r["error_pct"] == pytest.approx((model_pf4.latency_us - report_us) / report_us * 100)
    assert r["ff_error_pct"] == pytest.approx(0.0) and r["dsp_error_pct"] == pytest.approx(-50.0)
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = _cli(["profile", "--compare", str(model_csv), str(cal_csv)])
    assert rc == 0 and "pf4~pf8" in out and "latency error: mean |e|" in out
    # nothing calibrated / a figure that is not a PNG: one line, nothing written
    rc, _, err = _cli(["profile", "--compare", str(model_csv), str(model_csv), "--out", str(tmp_path / "x.png")])
    assert rc == 2 and "nothing to compare" in err and not (tmp_path / "x.png").exists()
    rc, _, err = _cli(["profile", "--compare", str(model_csv), str(cal_csv), "--out", str(tmp_path / "x.txt")])
    assert rc == 2 and "ends in .png" in err and not (tmp_path / "x.txt").exists()
    mine = tmp_path / "mine.png"
    mine.write_text("not a figure of ours\n")
    rc, _, err = _cli(["profile", "--compare", str(model_csv), str(cal_csv), "--out", str(mine)])
    assert rc == 2 and "pass --force" in err and mine.read_text() == "not a figure of ours\n"
    assert _cli(["profile", "--compare", str(model_csv), str(cal_csv), "--out", str(fig)])[0] == 0  # ours: rewritten


# ---- aiesimulator outputs ------------------------------------------------------------------------

def _aiesim(path: Path, bursts) -> Path:
    """An aiesimulator output file: per burst its time stamp, then its data lines (two words each)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for stamp, n in bursts:
        lines.append(f"T {stamp}")
        lines += [f"{i} {i + 1}" for i in range(n)]
        lines.append("TLAST")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_aiesim_output(tmp_path):
    p = _aiesim(tmp_path / "aiesimulator_output" / "data" / "n_out0.txt",
                [("800 ns", 4), ("1200000 ps", 4), ("2 us", 2)])
    rc, out, err = _cli(["report-read", str(p), "--json"])
    assert rc == 0, err
    d = json.loads(out)
    assert (d["plio"], d["words"], d["stamps"], d["first_ns"], d["last_ns"]) == ("n_out0", 20, 3, 800.0, 2000.0)
    assert d["words_per_us"] == pytest.approx(20 / 1.2)
    assert find_reports(tmp_path)["aiesim"] == [p]
    bad = tmp_path / "x.txt"
    bad.write_text("1 2\n3 4\n")
    rc, _, err = _cli(["report-read", str(bad)])
    assert rc == 2 and "no time stamps" in err and err.count("\n") == 1
    bad.write_text("T 10 ns\n1 two\n")
    rc, _, err = _cli(["report-read", str(bad)])
    assert rc == 2 and f"{bad}: line 2: 'two'" in err


@pytest.fixture(scope="module")
def aie_build(tmp_path_factory):
    from rlhls.flow.build import build_design

    g = build_graph(get_design(DESIGN))
    plan = {n.name: "PL" for n in g.nodes}
    plan["q.fc2.fwd"] = "AIE"
    out = tmp_path_factory.mktemp("aiebuild") / "b"
    build_design(DESIGN, out, plan=plan, hls4ml=False)
    return out


def test_aiesim_calibrates_the_aie_node(aie_build, tmp_path):
    b = _fresh(aie_build, tmp_path)
    node = json.loads((b / "aie" / "manifest.json").read_text())["nodes"][0]
    assert node["name"] == "q.fc2.fwd"
    sim = b / "aie" / "aiesimulator_output" / "data"
    for q in node["plio_outputs"]:
        _aiesim(sim / f"{q}.txt", [("3000 ns", 8), ("41.5 us", 8)])
    model = profile_design(DESIGN)
    rows, notes = calibrate(model, b, json.loads((b / "manifest.json").read_text()))
    aie = [r for r in rows if (r.node, r.unit) == ("q.fc2.fwd", "AIE")]
    launch = get_device("vek280").units["AIE"].perf["launch_overhead_us"].value
    assert len(aie) == 1 and aie[0].source == "aie" and aie[0].point == node["point"]
    assert aie[0].latency_us == pytest.approx(41.5 + launch)
    assert aie[0].usage("aie_tiles") == node["tiles"] and aie[0].usage("plio") == node["plio_pairs"]
    assert [r for r in rows if r.unit != "AIE" or r.node != "q.fc2.fwd"] == \
        [r for r in model if r.unit != "AIE" or r.node != "q.fc2.fwd"]
    _aiesim(sim / "ghost_out0.txt", [("10 ns", 1)])  # a PLIO the graph does not have
    out = tmp_path / "p.csv"
    rc, _, err = _cli(["profile", DESIGN, "--reports", str(b), "--out", str(out)])
    assert rc == 2 and "PLIO 'ghost_out0' is no output of the build's AIE graph" in err and not out.exists()


def test_aiesim_in_a_build_without_aie(build, tmp_path):
    b = _fresh(build, tmp_path)
    p = _aiesim(b / "aiesimulator_output" / "data" / "q_out0.txt", [("10 ns", 1)])
    out = tmp_path / "p.csv"
    rc, _, err = _cli(["profile", DESIGN, "--reports", str(b), "--out", str(out)])
    assert rc == 2 and f"{p}: an aiesimulator output, but the build" in err and not out.exists()


def test_hls4ml_component_shares_one_call_over_its_layers(tmp_path):
    # a manifest of the shape `rlhls build` writes: the Q network's forward layers as one hls4ml
    # project, called once for the online pass and once for the target pass
    model = profile_design(DESIGN)
    fwd = [f"q.fc{i}.fwd" for i in (1, 2, 3)]
    tfwd = [f"q.fc{i}.tfwd" for i in (1, 2, 3)]
    comp = {"name": "q_fwd", "kind": "hls4ml", "kernel": None, "top": "q_fwd", "dir": "pl/q_fwd",
            "nodes": fwd + tfwd, "folded": ["q.fc1_relu.fwd", "q.fc2_relu.fwd"], "params": {"network": "q"}}
    manifest = {"design": DESIGN, "batch": 128, "part": PART, "device": "vek280", "components": [comp]}
    write_csynth(tmp_path / "pl" / "q_fwd", "q_fwd", PART, target_ns=4.0, est_ns=3.0, worst=10_000,
                 res={"LUT": 9000, "FF": 12000, "DSP": 40, "BRAM_18K": 8, "URAM": 0})
    rows, _ = calibrate(model, tmp_path, manifest)
    pl = {r.node: r for r in rows if r.unit == "PL" and r.source == "csynth"}
    launch = get_device("vek280").units["PL"].perf["launch_overhead_us"].value
    flops = {r.node: r.flops for r in model if r.unit == "PL"}
    for group in (fwd, tfwd):
        # one call per pass: the pass's latencies add up to the report's, shared by FLOPs
        assert sum(pl[n].latency_us for n in group) == pytest.approx(10_000 * 4.0 / 1000 + launch)
        assert sum(pl[n].cycles for n in group) == pytest.approx(10_000)
        tot = sum(flops[n] for n in group)
        for n in group:
            assert pl[n].latency_us == pytest.approx((10_000 * 4.0 / 1000 + launch) * flops[n] / tot)
        assert pl[group[0]].resources == {"lut": 9000, "ff": 12000, "dsp": 40, "bram36": 4}
        assert all(pl[n].resources == {} for n in group[1:])


def test_flow_partitions_on_calibrated_rows(build, tmp_path):
    import rlhls

    b = _fresh(build, tmp_path)
    comps = _comps(b)
    write_csynth(b / comps["q_fc2_fwd"]["dir"], "q_fc2_fwd", PART, target_ns=4.08, est_ns=3.9, worst=400_000)
    write_csynth(b / comps["q_fc1_fwd"]["dir"], "q_fc1_fwd", PART, target_ns=4.08, est_ns=3.9, worst=300)
    flow = rlhls.Flow(DESIGN, out=tmp_path / "run", reports=b, quiet=True)
    rows = flow.profile()
    assert {r.node for r in rows if r.source == "csynth"} >= {"q.fc1.fwd", "q.fc2.fwd"}
    plan = flow.partition()
    assert plan.assignment["q.fc2.fwd"] != "PL"  # 1.6 ms on the PL: the plan moves it
    assert plan.assignment["q.fc1.fwd"] == "PL" and plan.sources["q.fc1.fwd"] == "csynth"
    back = read_profile(tmp_path / "run" / "profile.csv")
    assert [r.source for r in back] == [r.source for r in rows]
    flow.close()
    with pytest.raises(RlhlsError, match="no manifest.json written by `rlhls build`"):
        rlhls.Flow(DESIGN, out=tmp_path / "run2", reports=tmp_path, quiet=True)
    assert not (tmp_path / "run2").exists()
    from rlhls.cli import main  # rlhls run --reports: the same check, one line

    assert main(["run", DESIGN, "--reports", str(tmp_path), "--out", str(tmp_path / "run3"), "--quiet"]) == 2
    assert not (tmp_path / "run3").exists()


def test_classic_and_unified_reports_of_one_component_the_newest_wins(build, tmp_path):
    b = _fresh(build, tmp_path)
    d = b / _comps(b)["q_fc1_fwd"]["dir"]
    old = write_csynth(d, "q_fc1_fwd", PART, layout="classic", target_ns=4.08, est_ns=3.0, worst=100)
    new = write_csynth(d, "q_fc1_fwd", PART, layout="unified", target_ns=4.08, est_ns=3.0, worst=900)
    os.utime(old, (1_000_000, 1_000_000))
    rows, notes = calibrate(profile_design(DESIGN), b, json.loads((b / "manifest.json").read_text()))
    assert next(r for r in rows if (r.node, r.unit) == ("q.fc1.fwd", "PL")).cycles == 900
    assert any("2 reports, the newest used" in n and str(new) in n for n in notes)
    os.utime(new, (500_000, 500_000))
    rows, _ = calibrate(profile_design(DESIGN), b, json.loads((b / "manifest.json").read_text()))
    assert next(r for r in rows if (r.node, r.unit) == ("q.fc1.fwd", "PL")).cycles == 100
