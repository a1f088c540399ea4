"""Hostile input files end in one line, before any work and with nothing written: YAML configs,
JSON plans and manifests, the partitioner's CSVs, ONNX models, and sizes bounded by their value."""

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlhls.cli import main
from rlhls.core.errors import RlhlsError

DESIGN = "apdrl-dqn-cartpole"


def _files(root):
    """Every path under `root` with its bytes (None for a folder, a FIFO, a link)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def _refused(argv, root, capsys, what):
    """`rlhls argv` exits 2 with one line holding `what`, no traceback, nothing under `root` changed."""
    before = _files(root)
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert what in err, err
    assert err.count("\n") <= 2 and "Traceback" not in err, err
    assert _files(root) == before
    return err


# ----------------------------------------------------------------------------------------- YAML

def _train_config(tmp_path, text):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    return ["train", DESIGN, "--precision", "fp32", "--steps", "1000", "--config", cfg, "--out", tmp_path / "out"]


def _laughs(levels=9):
    """A "billion laughs": each level a list of nine aliases of the one before, all under one key."""
    parts = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return f"gamma: [{', '.join(parts)}]\n"


def test_yaml_alias_bomb_is_refused_while_parsing(tmp_path, capsys):
    _refused(_train_config(tmp_path, _laughs()), tmp_path, capsys, "its aliases expand it past 4194304 characters")


@pytest.mark.parametrize("key, digits", [("n_timesteps", 5000), ("n_timesteps", 4000), ("gamma", 400)])
def test_yaml_integer_of_thousands_of_digits(tmp_path, capsys, key, digits):
    _refused(_train_config(tmp_path, f"{key}: {'1' * digits}\n"), tmp_path, capsys,
             f"(line 1): integer of {digits} digits is out of range (a 64-bit integer at most)")


@pytest.mark.parametrize("text, what", [
    ("gamma: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "(line 1): nested deeper than 64 levels"),
    ("gamma: " + "[" * 100_000 + "]" * 100_000 + "\n", "not YAML (line 1; exceeded maximum nesting depth)"),
    ("gamma:\n" + "".join("  " * i + "- \n" for i in range(1, 800)), "nested deeper than 64 levels"),
])
def test_yaml_nested_deeper_than_the_parser_recurses(tmp_path, capsys, text, what):
    _refused(_train_config(tmp_path, text), tmp_path, capsys, what)


def test_yaml_file_larger_than_a_config_is_not_read(tmp_path, capsys):
    argv = _train_config(tmp_path, "gamma: 0.9\n" + "# padding\n" * 120_000)
    _refused(argv, tmp_path, capsys, "bytes, more than a hyperparameter file holds (1048576)")


def test_yaml_config_that_is_a_fifo_does_not_block(tmp_path, capsys):
    argv = _train_config(tmp_path, "")
    os.unlink(argv[7])
    os.mkfifo(argv[7])
    _refused(argv, tmp_path, capsys, "cfg.yaml': not a regular file")


# ----------------------------------------------------------------------------------------- JSON

@pytest.fixture(scope="module")
def plan_of_design():
    """A valid plan.json of DESIGN: every node on the PS."""
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design

    nodes = [n.name for n in build_graph(get_design(DESIGN)).nodes]
    return {"status": "Optimal", "makespan_us": 10.0, "gap": 0.0, "assignment": dict.fromkeys(nodes, "PS"),
            "start_us": dict.fromkeys(nodes, 0.0), "point": dict.fromkeys(nodes, "0"),
            "finish_us": dict.fromkeys(nodes, 1.0), "core": dict.fromkeys(nodes, 0), "ps_cores": 1,
            "baselines": {"all_PS": 10.0, "HEFT": None}, "solver": "cbc", "solve_seconds": 0.1, "bound": 10.0,
            "utilisation": {"PS": {"nodes": len(nodes), "busy": 0.5}}, "sources": dict.fromkeys(nodes, "model")}


def _build_plan(tmp_path, text):
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    return ["build", DESIGN, "--plan", plan, "--out", tmp_path / "b"]


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000])
def test_plan_json_nested_too_deeply(tmp_path, capsys, text):
    _refused(_build_plan(tmp_path, text), tmp_path, capsys, "not JSON (nested too deeply)")


def test_plan_json_that_is_a_fifo_does_not_block(tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    os.mkfifo(folder / "plan.json")
    _refused(["build", DESIGN, "--plan", folder, "--out", tmp_path / "b"], tmp_path, capsys,
             "plan.json: not JSON (not a regular file)")


def test_calibrate_reads_a_crafted_aie_manifest_as_data(tmp_path):
    from rlhls.partition.calibrate import calibrate
    from rlhls.partition.profile import profile_design
    from rlhls.designs.registry import get_design

    (tmp_path / "aie").mkdir()
    (tmp_path / "aie" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    sim = tmp_path / "aiesimulator_output" / "data" / "q_out0.txt"
    sim.parent.mkdir(parents=True)
    sim.write_text("T 10 ns\n0 1\nTLAST\n")
    manifest = {"design": DESIGN, "components": [], "aie": {"files": ["aie/manifest.json"]}}
    with pytest.raises(RlhlsError, match=r"manifest.json: cannot be read \(nested too deeply\)"):
        calibrate(profile_design(get_design(DESIGN)), tmp_path, manifest)
    (tmp_path / "aie" / "manifest.json").write_text('{"nodes": [{"name": "q", "plio_outputs": [["x"]]}]}')
    with pytest.raises(RlhlsError, match="not the manifest of an AIE graph"):
        calibrate(profile_design(get_design(DESIGN)), tmp_path, manifest)


def test_check_aie_reads_its_manifest_as_data(tmp_path):
    from rlhls.flow.aie import check_aie

    (tmp_path / "aie").mkdir()
    (tmp_path / "aie" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RlhlsError, match=r"manifest.json: cannot be read \(nested too deeply\)"):
        check_aie(tmp_path)


# ----------------------------------------------------------------------------------------- CSV

def _partition_files(tmp_path, big: str = ""):
    """The partitioner's four CSVs; `big` names the one whose second row holds a 200,000-character cell."""
    cell = "x" * 200_000
    files = {
        "profile": "node,unit,latency_us\na,PS,2\na,PL,1\nb,PS,3\nb,PL,1\n",
        "graph": "src,dst,bytes\na,b,8\n",
        "capacity": "unit,resource,capacity\nPS,cores,1\n",
        "links": "src_unit,dst_unit,latency_us,bytes_per_us\nPS,PL,1,100\n",
    }
    if big:
        head, first, *rest = files[big].splitlines()
        files[big] = "\n".join([head, f'"{cell}",' + first.split(",", 1)[1], *rest]) + "\n"
    for kind, text in files.items():
        (tmp_path / f"{kind}.csv").write_text(text)
    return ["partition", tmp_path / "profile.csv", "--graph", tmp_path / "graph.csv",
            "--capacity", tmp_path / "capacity.csv", "--links", tmp_path / "links.csv", "--out", tmp_path / "plan"]


@pytest.mark.parametrize("kind", ["profile", "graph", "capacity", "links"])
def test_csv_cell_over_the_csv_field_limit(tmp_path, capsys, kind):
    argv = _partition_files(tmp_path, kind)
    _refused(argv, tmp_path, capsys, f"{kind}.csv: row 2: field larger than field limit (131072)")


def test_profile_compare_cell_over_the_csv_field_limit(tmp_path, capsys):
    _partition_files(tmp_path, "profile")
    p = tmp_path / "profile.csv"
    _refused(["profile", "--compare", p, p], tmp_path, capsys, "profile.csv: row 2: field larger than field limit")


@pytest.mark.parametrize("name", ["top_cosim.rpt", "csynth.xml", "aiesimulator_output/data/q_out0.txt"])
def test_report_that_is_a_fifo_does_not_block(tmp_path, capsys, name):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    _refused(["report-read", path], tmp_path, capsys, f"{path}: cannot be read (not a regular file)")


# ----------------------------------------------------------------------------------------- ONNX

def _tensor(name, data_type, dims, raw=None, floats=None, strings=None):
    """A TensorProto as a crafted file holds it: dims and data need not agree."""
    t = TensorProto()
    t.name, t.data_type = name, data_type
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    if strings is not None:
        t.string_data.extend(strings)
    return t


def _gemm_model(input_dims, weight, bias=None):
    inits = [weight] + ([bias] if bias is not None else [])
    node = helper.make_node("Gemm", ["input", weight.name] + ([bias.name] if bias is not None else []), ["out"],
                            name="fc")
    graph = helper.make_graph([node], "net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, input_dims)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph)


GOOD_W = numpy_helper.from_array(np.ones((4, 2), np.float32), "W")

ONNX_CASES = {
    "input of 10**12 features": (
        lambda: _gemm_model([1, 10 ** 12], GOOD_W),
        "input 'input' has shape [1, 1000000000000]: 1000000000000 features, more than the 268435456"),
    "weight of terabytes, no data": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [10 ** 6, 10 ** 6])),
        "tensor 'W': dims [1000000, 1000000] are 1000000000000 elements, more than the 268435456"),
    "weight of terabytes, 16 bytes of data": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [10 ** 6, 10 ** 6], raw=b"\0" * 16)),
        "tensor 'W': dims [1000000, 1000000] are 1000000000000 elements"),
    "string weight": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.STRING, [4, 2], strings=[b"a"] * 8)),
        "tensor 'W': data type STRING; expected a number type"),
    "raw data shorter than its dims": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [4, 2], raw=b"\0" * 12)),
        "tensor 'W': dims [4, 2] need 32 bytes of data; it has 12"),
    "values fewer than its dims": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [4, 2], floats=[1.0] * 3)),
        "tensor 'W': dims [4, 2] need 8 values; it has 3"),
    "negative dim": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [4, -2])), "tensor 'W': dims [4, -2]; expected sizes >= 1"),
    "zero dim": (
        lambda: _gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [4, 0])), "tensor 'W': dims [4, 0]; expected sizes >= 1"),
    "weight that does not take the input": (
        lambda: _gemm_model([1, 64], GOOD_W), "node 'fc' (Gemm): weight 'W' takes 4 inputs; the layer's input has 64"),
    "bias of another size": (
        lambda: _gemm_model([1, 4], GOOD_W, numpy_helper.from_array(np.ones(3, np.float32), "b")),
        "node 'fc' (Gemm): bias 'b' has shape [3]; expected (2,) for 2 outputs"),
}


@pytest.mark.parametrize("case", sorted(ONNX_CASES))
def test_onnx_file_checked_before_allocating(tmp_path, case):
    build, what = ONNX_CASES[case]
    path = tmp_path / "net.onnx"
    path.write_bytes(build().SerializeToString())
    with pytest.raises(RlhlsError) as e:
        from rlhls.designs import import_onnx

        import_onnx(path)
    assert what in str(e.value) and str(e.value).startswith(f"ONNX file '{path}': ") and "\n" not in str(e.value)


def test_onnx_external_data_is_not_read(tmp_path):
    secret = tmp_path / "elsewhere" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    w = _tensor("W", TensorProto.FLOAT, [4, 2])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", str(secret)), ("length", "32")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "net.onnx"
    path.write_bytes(_gemm_model([1, 4], w).SerializeToString())
    from rlhls.designs import import_onnx

    with pytest.raises(RlhlsError, match="tensor 'W': its data is in an external file, which is not read"):
        import_onnx(path)


def test_a_design_file_with_a_crafted_onnx_is_one_line(tmp_path, capsys):
    onnx.save(_gemm_model([1, 4], _tensor("W", TensorProto.FLOAT, [10 ** 6, 10 ** 6])), tmp_path / "actor.onnx")
    design = tmp_path / "design.py"
    design.write_text(
        "from pathlib import Path\n"
        "from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU, import_onnx\n"
        "HERE = Path(__file__).resolve().parent\n"
        "design = Design(name='crafted-onnx', seed_file='-', seed_title='-', algorithm='dqn', env_id='CartPole-v1',\n"
        "    env_notes='-', obs_shape=(4,), action_dim=2, action_space='discrete',\n"
        "    networks=(NetSpec('q', 'q', lambda seed: import_onnx(HERE / 'actor.onnx', 'q'), target=True),),\n"
        "    kernels=(KernelSpec('dense_forward', 'PL', 'fp32', 'fp32', {'pf': 4}),),\n"
        "    formats={'storage': 'fp32', 'acc': 'fp32'}, device='zcu106', clocks_mhz={'PL': 200.0}, batch_size=64,\n"
        "    hyperparams={})\n")
    for argv in (["graph", design, "--csv", tmp_path / "g.csv"],
                 ["build", design, "--out", tmp_path / "b"],
                 ["train", design, "--steps", "100", "--out", tmp_path / "t"]):
        _refused(argv, tmp_path, capsys, "tensor 'W': dims [1000000, 1000000] are 1000000000000 elements")


# ----------------------------------------------------------------------------------------- plan fields

@pytest.mark.parametrize("field, value, what", [
    ("finish_us", "abc", "finish_us of node '{node}' = 'abc' must be a number >= its start_us"),
    ("finish_us", float("nan"), "finish_us of node '{node}' = nan must be a number >= its start_us"),
    ("finish_us", [1.0], "finish_us of node '{node}' = [1.0] must be a number >= its start_us"),
    ("finish_us", True, "finish_us of node '{node}' = True must be a number >= its start_us"),
    ("ps_cores", "x", "'ps_cores' = 'x' must be a whole number in 1..1024"),
    ("ps_cores", [1], "'ps_cores' = [1] must be a whole number in 1..1024"),
    ("ps_cores", 1e9, "'ps_cores' = 1000000000.0 must be a whole number in 1..1024"),
    ("ps_cores", 2.5, "'ps_cores' = 2.5 must be a whole number in 1..1024"),
    ("core", "x", "core of node '{node}' = 'x' must be a PS core 0..0"),
    ("core", 3, "core of node '{node}' = 3 must be a PS core 0..0"),
    ("solve_seconds", "abc", "'solve_seconds' = 'abc' must be a number >= 0 (or null)"),
    ("solve_seconds", float("inf"), "'solve_seconds' = inf must be a number >= 0 (or null)"),
    ("bound", True, "'bound' = True must be a number >= 0 (or null)"),
    ("solver", 7, "'solver' = 7 must be a string (or null)"),
    ("baselines", {"HEFT": "abc"}, "'baselines.HEFT' = 'abc' must be a number >= 0 (or null)"),
    ("utilisation", {"PS": {"busy": "x"}}, "'utilisation.PS.busy' = 'x' must be a number >= 0"),
    ("sources", 5, "'sources' must be an object {{node: value}}"),
])
def test_plan_field_that_is_not_a_number(tmp_path, capsys, plan_of_design, field, value, what):
    plan = json.loads(json.dumps(plan_of_design))
    node = next(iter(plan["assignment"]))
    plan[field] = {**plan[field], node: value} if field in ("finish_us", "core") else value
    argv = _build_plan(tmp_path, json.dumps(plan))
    _refused(argv, tmp_path, capsys, f"plan {tmp_path / 'plan.json'}: " + what.format(node=node))


def test_plan_fields_checked_in_every_command_that_reads_one(tmp_path, capsys, plan_of_design):
    plan = {**plan_of_design, "ps_cores": "x"}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    for argv in (["train", DESIGN, "--precision", "mixed", "--plan", tmp_path / "plan.json", "--steps", "100",
                  "--out", tmp_path / "t"],
                 ["perf", DESIGN, "--plan", tmp_path / "plan.json", "--out", tmp_path / "perf"]):
        _refused(argv, tmp_path, capsys, "'ps_cores' = 'x' must be a whole number in 1..1024")


# ----------------------------------------------------------------------------------------- bounds before work

def _partition_inputs(tmp_path, profile=None, graph=None, capacity=None):
    files = {"p.csv": profile or "node,unit,latency_us\na,PS,2\na,PL,1\nb,PS,3\nb,PL,1\n",
             "g.csv": graph or "src,dst,bytes\na,b,8\n", "c.csv": capacity or "unit,resource,capacity\nPS,cores,1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return ["partition", tmp_path / "p.csv", "--graph", tmp_path / "g.csv", "--capacity", tmp_path / "c.csv",
            "--out", tmp_path / "plan"]


def _many_nodes(n):
    return "node,unit,latency_us\n" + "".join(f"n{i},PS,1\n" for i in range(n))


@pytest.mark.parametrize("files, what", [
    ({"capacity": "unit,resource,capacity\nPS,cores,1e9\n"}, "c.csv: row 2: PS cores 1e+09 is not a whole number in 1..1024"),
    ({"capacity": "unit,resource,capacity\nPS,cores,1025\n"}, "c.csv: row 2: PS cores 1025 is not a whole number in 1..1024"),
    ({"profile": _many_nodes(10_001)}, "p.csv: row 10002: node 'n10000' is one more than the 10000 nodes a profile may have"),
    ({"graph": "src,dst,bytes\n" + "".join(f"n{i},n{i + 1},8\n" for i in range(10_000))},
     "g.csv: row 10001: node 'n10000' is one more than the 10000 nodes a graph may have"),
])
def test_partition_inputs_bounded_by_their_value(tmp_path, capsys, files, what):
    _refused(_partition_inputs(tmp_path, **files), tmp_path, capsys, what)


def test_partition_csv_larger_than_a_profile_is_not_read(tmp_path, capsys):
    argv = _partition_inputs(tmp_path)
    with open(tmp_path / "p.csv", "r+b") as f:
        f.truncate(65 << 20)  # sparse: nothing written to disk
    _refused(argv, tmp_path, capsys, "p.csv: cannot be read (68157440 bytes, more than a profile file holds (67108864))")


def test_solve_bounds_cores_and_nodes_from_python(tmp_path):
    from rlhls.partition.ilp import solve
    from rlhls.partition.profile_io import ProfileRow

    rows = [ProfileRow("a", "PS", 1.0), ProfileRow("a", "PL", 1.0)]
    for cores in (10 ** 9, float("nan"), float("inf")):
        with pytest.raises(RlhlsError, match=r"PS cores .*: expected a whole number in 1\.\.1024"):
            solve(rows, [], ps_cores=cores)
    with pytest.raises(RlhlsError, match="profile: 10001 nodes, more than the 10000 a partition takes"):
        solve([ProfileRow(f"n{i}", "PS", 1.0) for i in range(10_001)], [])


@pytest.mark.parametrize("argv, what", [
    (["graph", DESIGN, "--batch", "1000000000000"], "batch size 1000000000000: more than the 1048576 samples"),
    (["profile", DESIGN, "--batch", "1000000000000", "--measure-ps", "--out", "p.csv"],
     "batch size 1000000000000: more than the 1048576 samples"),
    (["profile", DESIGN, "--measure-ps", "--repeats", "1000000000000", "--out", "p.csv"],
     "argument --repeats: 1000000000000 is more than 10000, the most it takes"),
    (["eval", "run", "--episodes", "1000000000000"], "argument --episodes: 1000000000000 is more than 100000"),
    (["train", DESIGN, "--set", "eval_episodes=1000000000000", "--out", "t"],
     "eval_episodes = 1000000000000: expected 0..100000"),
])
def test_cli_counts_bounded_before_any_work(tmp_path, capsys, monkeypatch, argv, what):
    monkeypatch.chdir(tmp_path)
    _refused(argv, tmp_path, capsys, what)
