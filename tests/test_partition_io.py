"""Partition inputs and outputs: CSV readers, bad input messages, plan files, the CLI function."""

from __future__ import annotations

import json

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.cli import build_parser
from rlhls.partition.plan import read_plan
from rlhls.partition.profile_io import (
    ProfileRow, check_inputs, read_capacity, read_graph, read_links, read_profile, write_profile,
)

PROFILE = """node,unit,latency_us,point,dsp,aie_tiles
a,PS,10,,,
a,PL,3,u2,20,
a,PL,2,u4,40,
b,PS,8,,,
b,AIE,1,,,4
c,PS,5,,,
c,PL,2,,30,
"""
GRAPH = "src,dst,bytes\na,b,4096\nb,c,1024\n"
CAPACITY = "unit,resource,capacity\nPL,dsp,100\nAIE,aie_tiles,8\nPS,cores,2\n"
LINKS = "src_unit,dst_unit,latency_us,bytes_per_us\nPS,PL,1,1000\nPL,PS,1,1000\nPL,AIE,0.5,2000\nAIE,PL,0.5,2000\n"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _args(tmp_path, *extra, profile=PROFILE, graph=GRAPH, capacity=CAPACITY, links=LINKS):
    argv = ["partition", str(_write(tmp_path, "p.csv", profile)), "--graph", str(_write(tmp_path, "g.csv", graph))]
    if capacity is not None:
        argv += ["--capacity", str(_write(tmp_path, "cap.csv", capacity))]
    if links is not None:
        argv += ["--links", str(_write(tmp_path, "l.csv", links))]
    argv += ["--out", str(tmp_path / "out"), *extra]
    return build_parser().parse_args(argv)


def run_partition(args):
    return args.func(args)


def test_readers_and_roundtrip(tmp_path):
    rows = read_profile(_write(tmp_path, "p.csv", PROFILE))
    assert len(rows) == 7 and rows[0].point == "0" and rows[2].point == "u4" and rows[2].usage("dsp") == 40
    assert rows[4].usage("aie_tiles") == 4 and rows[0].usage("lut") == 0
    write_profile(rows, tmp_path / "p2.csv")
    assert read_profile(tmp_path / "p2.csv") == rows
    assert read_graph(_write(tmp_path, "g.csv", GRAPH)) == [("a", "b", 4096), ("b", "c", 1024)]
    assert read_capacity(_write(tmp_path, "c.csv", CAPACITY))[("PS", "cores")] == 2
    assert read_links(_write(tmp_path, "l.csv", LINKS))[("PL", "AIE")] == (0.5, 2000.0)


@pytest.mark.parametrize("reader,text,expect", [
    (read_profile, "node,unit\na,PS\n", "row 1: missing column 'latency_us'"),
    (read_profile, "node,unit,latency_us\na,GPU,3\n", "row 2: unknown unit 'GPU'"),
    (read_profile, "node,unit,latency_us\na,PS,1\na,PL,-3\n", "row 3: latency_us -3 is negative"),
    (read_profile, "node,unit,latency_us\na,PS,fast\n", "row 2: latency_us 'fast' is not a number"),
    (read_profile, "", "empty profile file"),
    (read_profile, "node,unit,latency_us\n", "header but no data rows"),
    (read_profile, "node,unit,latency_us,dsp\na,PL,1,-2\n", "row 2: dsp -2 is negative"),
    (read_profile, "node,unit,latency_us,foo\na,PL,1,2\n", "unknown column 'foo'"),
    (read_profile, "node,unit,latency_us\na,PL,1\na,PL,2\n", "row 3: node 'a' on PL point '0' repeats row 2"),
    (read_graph, "src,dst\na,b\n", "missing column 'bytes'"),
    (read_graph, "src,dst,bytes\na,b,1\nb,c,1\nc,a,1\n", "row 4: edge closes a cycle"),
    (read_graph, "src,dst,bytes\na,a,1\n", "row 2: edge a->a joins a node to itself"),
    (read_graph, "src,dst,bytes\na,b,-1\n", "row 2: bytes -1 is negative"),
    (read_capacity, "unit,resource,capacity\nPL,dsps,3\n", "row 2: unknown resource 'dsps'"),
    (read_capacity, "unit,resource,capacity\nXPU,dsp,3\n", "row 2: unknown unit 'XPU'"),
    (read_links, "src_unit,dst_unit,latency_us,bytes_per_us\nPS,PL,1,0\n", "row 2: bytes_per_us 0 is not positive"),
    (read_links, "src_unit,dst_unit,latency_us\nPS,PL,1\n", "missing column 'bytes_per_us'"),
    (read_profile, "node,unit,latency_us\na,PS,1\x00\n", "row 2: control character '\\x00' in the row"),
    (read_profile, 'node,unit,latency_us\na,"PS,1\n', "row 2: unterminated double quote"),
])
def test_bad_files(tmp_path, reader, text, expect):
    path = _write(tmp_path, "f.csv", text)
    with pytest.raises(RlhlsError) as exc:
        reader(path)
    msg = str(exc.value)
    assert str(path) in msg and expect in msg and "\n" not in msg and "\x00" not in msg


def test_graph_node_without_profile(tmp_path):
    rows = read_profile(_write(tmp_path, "p.csv", PROFILE))
    edges = read_graph(_write(tmp_path, "g.csv", "src,dst,bytes\n# comment\na,b,1\nb,zz,1\n"))
    with pytest.raises(RlhlsError, match=r"g.csv: row 4: node 'zz' has no rows in p.csv"):
        check_inputs(rows, edges, profile_name="p.csv", graph_name="g.csv")


def _no_output(tmp_path):
    return not (tmp_path / "out").exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


@pytest.mark.parametrize("kw,expect", [
    (dict(profile="node,unit,latency_us\na,PS,x\n"), "p.csv: row 2: latency_us 'x' is not a number"),
    (dict(graph="src,dst,bytes\na,q,3\n"), "g.csv: row 2: node 'q' has no rows"),
    (dict(graph="src,dst,bytes\na,b,1\nb,a,1\n"), "g.csv: row 3: edge closes a cycle"),
    (dict(profile=PROFILE + "d,PL,1,,150,\n"), "cap.csv: row 2: PL dsp capacity 100 is below the 150"),
    (dict(profile=PROFILE + "d,AIE,1,,,9\n"), "cap.csv: row 3: AIE aie_tiles capacity 8 is below the 9"),
    (dict(links=""), "l.csv: empty links file"),
])
def test_cli_bad_input_writes_nothing(tmp_path, kw, expect):
    with pytest.raises(RlhlsError) as exc:
        run_partition(_args(tmp_path, **kw))
    assert expect in str(exc.value)
    assert _no_output(tmp_path)


def test_joint_capacity_infeasible_names_resource():
    # each node alone fits either unit, but three nodes: PL holds one, AIE holds one
    rows = []
    for v in "abc":
        rows += [ProfileRow(v, "PL", 1.0, "0", {"dsp": 60}), ProfileRow(v, "AIE", 1.0, "0", {"aie_tiles": 5})]
    from rlhls.partition.ilp import solve

    with pytest.raises(RlhlsError, match=r"cap.csv: .*(PL dsp|AIE aie_tiles)"):
        solve(rows, [], {("PL", "dsp"): 100, ("AIE", "aie_tiles"): 8}, {}, source="cap.csv")


def test_cli_writes_plan(tmp_path, capsys):
    assert run_partition(_args(tmp_path, "--json", "--solver", "highs")) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("status", "makespan_us", "gap", "assignment", "start_us", "point", "baselines", "utilisation"):
        assert key in out
    assert out["status"] == "Optimal" and out["gap"] == 0
    folder = tmp_path / "out"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["gantt.png", "plan.csv",
                                                                                      "plan.json"]
    assert (folder / "gantt.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "plan.csv").read_text().splitlines()[0] == "node,unit,point,start_us,finish_us,latency_us"
    plan = read_plan(folder)
    assert plan["makespan_us"] == pytest.approx(out["makespan_us"])
    # rerun replaces the folder; text output names makespan, utilisation and status
    assert run_partition(_args(tmp_path)) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "busy" in text and "Optimal" in text and "baseline HEFT" in text


def test_cli_device(tmp_path, capsys):
    args = _args(tmp_path, "--device", "vek280", capacity=None, links=None)
    assert run_partition(args) == 0
    assert (tmp_path / "out" / "plan.json").exists()


@pytest.mark.parametrize("mutate,expect", [
    (lambda d: d.pop("assignment"), "missing key 'assignment'"),
    (lambda d: d["assignment"].update(a="GPU"), "unknown unit 'GPU'"),
    (lambda d: d["start_us"].pop("a"), "node 'a' has no 'start_us' entry"),
    (lambda d: d.update(makespan_us="x"), "'makespan_us' = 'x'"),
])
def test_read_plan_rejects(tmp_path, mutate, expect):
    data = {"status": "Optimal", "makespan_us": 3.0, "gap": 0.0, "assignment": {"a": "PL"},
            "start_us": {"a": 0.0}, "point": {"a": "0"}}
    mutate(data)
    p = _write(tmp_path, "plan.json", json.dumps(data))
    with pytest.raises(RlhlsError, match=expect) as exc:
        read_plan(p)
    assert str(p) in str(exc.value)
    with pytest.raises(RlhlsError, match="not JSON"):
        read_plan(_write(tmp_path, "bad.json", "{"))


def test_graph_csv_carry_column(tmp_path):
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design

    g = build_graph(get_design("apdrl-dqn-cartpole"), batch=2)
    path = _write(tmp_path, "g.csv", g.edges_csv(carry=True))
    assert read_graph(path) == g.all_edges()
    # 3 columns still read; a carry edge may point backwards or to itself, a DAG edge may not
    assert read_graph(_write(tmp_path, "h.csv", "src,dst,bytes,carry\na,b,1,0\nb,a,2,1\nb,b,3,1\nb,c,4,\n")) == \
        [("a", "b", 1), ("b", "a", 2, True), ("b", "b", 3, True), ("b", "c", 4)]
    with pytest.raises(RlhlsError, match="row 2: carry 'x' is not 0 or 1"):
        read_graph(_write(tmp_path, "i.csv", "src,dst,bytes,carry\na,b,1,x\n"))
    with pytest.raises(RlhlsError, match="row 3: edge closes a cycle a -> b -> a"):
        read_graph(_write(tmp_path, "j.csv", "src,dst,bytes,carry\na,b,1,0\nb,a,1,0\n"))
