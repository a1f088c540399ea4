"""The reference corpus and `rlhls qor`: published measurements beside the cost models, held-out errors."""

import csv
import json
import re
import shutil

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.partition import qor as Q

SCHEMA = {"unit", "metric", "points", "heldout", "median_abs_error_pct", "p90_abs_error_pct", "sources"}
# held-out median |error| in % as measured when the corpus was assembled; a change that worsens one fails
PINNED = {
    "assumed": {("AIE", "latency"): 64.74, ("PL", "latency"): 333.33, ("PL", "dsp"): 4.92, ("PL", "lut"): 237.58,
                ("PL", "ff"): 3812.73, ("PL", "bram"): 100.0, ("PS", "latency"): 115.0},
    "calibrated": {("AIE", "latency"): 32.14, ("PL", "latency"): 33.33, ("PL", "dsp"): 3.28, ("PL", "lut"): 40.28,
                   ("PL", "ff"): 186.27, ("PL", "bram"): 100.0, ("PS", "latency"): 34.05},
}
TOLERANCE_PCT = 0.5


@pytest.fixture(scope="module")
def result():
    return Q.qor()


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, args, folder):
    """Exit 2, one line on stderr, no traceback, nothing written or changed under `folder`."""
    before = _files(folder)
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert _files(folder) == before
    return err


def _corpus_copy(tmp_path):
    dst = tmp_path / "corpus"
    shutil.copytree(Q._corpus_dir(), dst, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return dst


# -- the corpus ---------------------------------------------------------------------------------


def test_corpus_parses_with_enough_points():
    rows = Q.load_corpus()
    by_unit = {u: [r for r in rows if r.unit == u] for u in Q.UNITS}
    assert all(by_unit.values())
    assert len({r.id for r in rows}) == len(rows)
    lat = {u: [r for r in by_unit[u] if "latency" in r.measured and not Q.no_model(r)] for u in Q.UNITS}
    assert len(lat["AIE"]) >= 30 and len(lat["PL"]) >= 15
    # measured figures as the files give them: a benchmark row, an hls4ml baseline, a derived PS latency
    row = {r.id: r for r in rows}
    assert row["aie-2024.2-mm-001"].measured == {"latency": 1282.0, "power": 1.061}
    hl = row["pl-hls4ml-vitis2024.1-conv2d-io-parallel-vitis-resource-same-channels-last"].measured
    assert hl == {"latency": 52.0, "dsp": 792.0, "lut": 75413.0, "ff": 33150.0}
    assert row["ps-rk3399-a72-a64-512"].measured["latency"] == pytest.approx(2 * 512 ** 3 / (2.01 * 1.8))


def test_every_row_names_its_document():
    """A document, and the exact file: a repository path at a commit (the benchmark tables, the hls4ml
    baselines, the fixtures' upstream, the GEMM table)."""
    for r in Q.load_corpus():
        assert r.document.strip(), r.id
        assert re.search(r"[\w.-]+/[\w.-]+@[0-9a-f]{12}:\S+", r.source), (r.id, r.source)
    fixtures = [r for r in Q.load_corpus() if r.fields.get("origin") == "csynth.xml fixture"]
    assert len(fixtures) == 10 and all(re.match(r"\d\d_\S+\.xml = ", r.source) for r in fixtures)


def test_split_is_fixed_and_disjoint():
    rows = Q.load_corpus()
    assert {r.split for r in rows} == {"calibration", "heldout"}
    # a configuration is on one side only, whichever release measured it
    side = {}
    for r in rows:
        assert side.setdefault(r.key, r.split) == r.split
    # the rule itself: sha256 of the key, first 8 hex digits odd -> held out
    assert Q.split_of("AIE|element=matrix_mult") == "calibration"
    assert Q.split_of("PS|core=Cortex-A72") == "heldout"
    counts = {u: sum(r.unit == u and r.split == "heldout" for r in rows) for u in Q.UNITS}
    assert counts == {"AIE": 92, "PL": 26, "PS": 10}


def test_constants_are_fitted_on_calibration_rows_only(result):
    held = {r.id for r in result.rows if r.split == "heldout"}
    for c in result.constants_table():
        assert c["source"].startswith("fitted to "), c
        ids = re.findall(r"ids (\S+) \.\. (\S+)\)", c["source"])[0]
        assert not held & set(ids)
    # moving the held-out rows' measurements changes no fitted constant
    moved = [r if r.split == "calibration" else
             Q.CorpusRow(**{**r.__dict__, "measured": {k: v * 3 for k, v in r.measured.items()}}) for r in result.rows]
    assert Q.qor(rows=moved).calibrated == result.calibrated


def test_predictions_are_the_cost_models(result):
    """An AIE row is aie_matmul at the benchmark's clocks less its launch; a PL row pl_matmul + pl_elementwise."""
    from rlhls.designs.kernels import cost

    rows = {r.id: r for r in result.rows}
    p = {(x["id"], x["metric"]): x for x in result.points}
    r = rows["aie-2024.2-mm-001"]  # AIE int16 16x64x16 on 1 tile, 2 input PLIOs at 625 MHz, AIE 1.25 GHz
    c = cost.aie_matmul(16, 64, 16, "fixed<16,8>", Q._aie_device("AIE", 1250.0, 625.0, 0.1), tiles=1, plios=2)
    assert p[(r.id, "latency")]["assumed"] == pytest.approx((c["latency_us"] - c["launch_us"]) * 1000)
    assert p[(r.id, "latency")]["assumed"] == pytest.approx(712.0)  # 640 cycles at 1.25 GHz + 2 x 0.1 us
    hl = "pl-hls4ml-vitis2024.1-activations-io-stream-vitis-relu"  # Dense(64, input 1) + ReLU
    mm = cost.pl_matmul(1, 1, 64, "fixed<16,6>", Q._pl_device(200.0, 1.0), pf=64, acc="fixed<16,6>")
    ew = cost.pl_elementwise(64, 1, "fixed<16,6>", Q._pl_device(200.0, 1.0), pf=64)
    assert p[(hl, "latency")]["assumed"] == mm["cycles"] + ew["cycles"]
    assert p[(hl, "dsp")]["assumed"] == 64
    assert "latency" not in rows["pl-hls4ml-vitis2024.1-activations-io-parallel-vitis-relu"].measured  # 0 cycles


def test_qor_leaves_the_cost_models_as_they_are(result):
    from rlhls.designs.kernels import cost

    assert Q.assumed_constants() == result.assumed
    assert cost.AIE_KERNEL_EFFICIENCY == 0.8 and cost.MUL_DEPTH == {"float": 4, "fixed": 3}
    with pytest.raises(ZeroDivisionError):
        with Q._cost_constants({"IO_DEPTH": 7, "MUL_DEPTH_FIXED": 0}):
            assert cost.IO_DEPTH == 7 and cost.MUL_DEPTH["fixed"] == 0
            1 / 0
    assert cost.IO_DEPTH == 2 and cost.MUL_DEPTH == {"float": 4, "fixed": 3}


def test_held_out_errors_are_pinned(result):
    for which, pins in PINNED.items():
        got = {(m["unit"], m["metric"]): m for m in result.metrics(which)}
        assert set(got) == set(pins)
        for k, pinned in pins.items():
            assert got[k]["heldout"] > 0
            assert got[k]["median_abs_error_pct"] <= pinned + TOLERANCE_PCT, (which, k, got[k])


def test_calibrated_constants_name_their_rows():
    consts = Q.calibrated_constants()
    assert set(consts) == {c.name for c in Q.CONSTANTS}
    assert consts["AIE_KERNEL_EFFICIENCY"]["assumed"] == 0.8
    assert all(v["source"].startswith("fitted to ") for v in consts.values())


# -- the command --------------------------------------------------------------------------------


def test_json_schema(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["qor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"metrics"}
    for m in data["metrics"]:
        assert set(m) == SCHEMA
        assert m["unit"] in ("AIE", "PL", "PS") and m["metric"] in Q.METRICS
        assert isinstance(m["points"], int) and 0 < m["heldout"] < m["points"]
        assert isinstance(m["median_abs_error_pct"], float) and isinstance(m["p90_abs_error_pct"], float)
        assert m["sources"] and all(isinstance(s, str) and s for s in m["sources"])
    assert not list(tmp_path.iterdir())  # --json alone writes nothing


def test_plain_writes_one_figure_per_unit(tmp_path, capsys):
    out = tmp_path / "qor"
    assert main(["qor", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "calibrated median" in text and "AIE_KERNEL_EFFICIENCY" in text
    assert {p.name for p in out.iterdir()} == {".rlhls.json", "aie.png", "pl.png", "ps.png", "points.csv"}
    assert all((out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in ("aie.png", "pl.png", "ps.png"))
    pts = list(csv.DictReader((out / "points.csv").open()))
    assert {p["split"] for p in pts} == {"calibration", "heldout"}


def test_out_a_users_file_is_refused(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    err = _refused(capsys, ["qor", "--out", str(f)], tmp_path)
    assert "is a file" in err
    err = _refused(capsys, ["qor", "--json", "--out", str(f)], tmp_path)
    assert "is a file" in err


def test_out_a_users_folder_is_refused(tmp_path, capsys):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "data.csv").write_text("a,b\n")
    err = _refused(capsys, ["qor", "--out", str(d)], tmp_path)
    assert "not written by rlhls" in err


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_text(p.read_text().replace(",1282,472,", ",fast,472,", 1)), r"aie\.csv:2: column 'latency_ns' = 'fast'"),
    (lambda p: p.write_text(p.read_text().replace(",1282,472,1.061,", ",1282,472,1.061,,", 1)), r"aie\.csv:2: more cells"),
    (lambda p: p.write_text(p.read_text().replace("aie-2024.2-mm-002,", "aie-2024.2-mm-001,", 1)), r"aie\.csv:3: id 'aie-2024.2-mm-001' is given twice"),
    (lambda p: p.write_text(p.read_text().replace("id,release", "ident,release", 1)), r"aie\.csv: no column id"),
    (lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()), r"aie\.csv: not UTF-8"),
])
def test_bad_corpus_is_one_line(tmp_path, capsys, damage, message):
    corpus = _corpus_copy(tmp_path)
    damage(corpus / "aie.csv")
    err = _refused(capsys, ["qor", "--json", "--corpus", str(corpus)], tmp_path)
    assert re.search(message, err), err


def test_row_without_source_is_refused(tmp_path):
    corpus = _corpus_copy(tmp_path)
    p = corpus / "ps.csv"
    rows = list(csv.reader(p.open()))
    rows[1][rows[0].index("source")] = " "
    with p.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(RlhlsError, match=r"ps\.csv:2: column 'source' is empty"):
        Q.load_corpus(corpus)


def test_corpus_not_a_folder(tmp_path, capsys):
    err = _refused(capsys, ["qor", "--json", "--corpus", str(tmp_path / "nowhere")], tmp_path)
    assert "not a folder" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    err = _refused(capsys, ["qor", "--json", "--corpus", str(empty)], tmp_path)
    assert "holds none of aie.csv, pl.csv, ps.csv" in err
