"""What a user with Vitis takes to the board: hls4ml networks as Vitis kernels whose testbench
compares with the emulator, AIE graphs with their data files, real parts, and the rule checker
(flow/rules.py) on every registered design and on broken projects."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from rlhls.flow import build as B
from rlhls.flow import project as P
from rlhls.flow.build import build_design


@pytest.fixture(scope="module")
def heppo(tmp_path_factory):
    """heppo-ppo with its hls4ml forward networks."""
    return build_design("heppo-ppo", tmp_path_factory.mktemp("b") / "heppo")


def test_hls4ml_kernel_top_csim_equals_the_emulator_and_its_testbench_fails_on_a_mismatch(heppo, tmp_path):
    from rlhls.flow.hls4ml_kernel import run_wrapper_csim
    from rlhls.flow.paths import include_dir
    import shutil

    comps = [c for c in heppo.components if c.kind == "hls4ml"]
    assert {c.name for c in comps} == {"policy_fwd", "value_fwd"}
    for c in comps:
        d = heppo.out / c.dir
        r = run_wrapper_csim(d, top=c.name, core=f"{c.name}_core", include=include_dir())
        assert r["passed"] and "bit-exact with the emulator" in r["detail"], r
        top, sections = P.parse_cfg((d / P.HLS_CONFIG).read_text())
        hls = sections["hls"]
        assert hls["syn.top"] == [c.name] and f"src/{c.name}.cpp" in hls["syn.file"]
        assert {"tb/x.bin", "tb/expected_y.bin", "tb/n.txt", "firmware/weights"} <= set(hls["tb.file"])
        src = (d / "src" / f"{c.name}.cpp").read_text()
        assert "#pragma HLS INTERFACE m_axi port=x" in src and "#pragma HLS INTERFACE s_axilite port=return" in src
        assert "ap_vld" not in (d / "firmware" / f"{c.name}_core.cpp").read_text()
        # hls4ml's own project scripts and test bench are gone: the component's are the only ones
        assert not [p.name for p in d.iterdir() if p.name in B.HLS4ML_SCRIPTS or p.name.endswith("_test.cpp")
                    or p.name == "tb_data"]
        assert sorted(p.name for p in (d / "include").iterdir()) == ["rlhls_tb.h"]
        # the expected outputs are the emulator's: the network in hls4ml's table mode
        net = c._net
        from rlhls.designs.network import Precision
        from rlhls.flow.hls4ml_convert import table_precisions

        prec = Precision(c.params["storage"], c.params["acc"])
        n = int((d / "tb" / "n.txt").read_text())
        x = np.fromfile(d / "tb" / "x.bin", dtype="<f8").reshape(n, -1)
        ref = net.forward(x, table_precisions(net, prec)).reshape(n, -1)
        assert np.array_equal(np.fromfile(d / "tb" / "expected_y.bin", dtype="<f8").reshape(n, -1), ref)
    # one output value off by one ulp: the same testbench fails
    c = comps[0]
    bad = tmp_path / c.name
    shutil.copytree(heppo.out / c.dir, bad)
    y = np.fromfile(bad / "tb" / "expected_y.bin", dtype="<f8")
    y[3] = np.nextafter(y[3], np.inf)
    y.astype("<f8").tofile(bad / "tb" / "expected_y.bin")
    r = run_wrapper_csim(bad, top=c.name, core=f"{c.name}_core", include=include_dir())
    assert not r["passed"] and r["detail"].startswith("FAIL y[3]"), r


def _decode_plio(text: str, split: bool) -> list:
    """(packet id, bf16 words) of a PLIO data file: 32-bit words two per line, a header and TLAST
    around each packet of a packet-switched stream."""
    lines = text.split("\n")[:-1]
    ints = lambda ln: [int(v) for v in ln.split()]
    to16 = lambda u32: np.asarray(u32, dtype="<u4").view("<u2").tolist()
    if not split:
        return [(0, to16([v for ln in lines for v in ints(ln)]))]
    out, i = [], 0
    while i < len(lines):
        head, *data = ints(lines[i])
        i += 1
        while lines[i] != "TLAST":
            data += ints(lines[i])
            i += 1
        data += ints(lines[i + 1])
        i += 2
        assert head >> 31 == (bin(head & 0x7FFFFFFF).count("1") + 1) % 2  # odd parity
        out.append((head & 0x1F, to16(data)))
    return out


def _trace(path) -> list:
    w = np.fromfile(path, dtype="<u2").tolist()
    out, i = [], 0
    while i < len(w):
        out.append((w[i], w[i + 2:i + 2 + w[i + 1]]))
        i += 2 + w[i + 1]
    return out


def test_aie_data_files_hold_the_streams_the_shim_harness_plays(tmp_path):
    """Every PLIO of the graph has its input file under aie/data/ and the expected output beside the
    output's; decoded, they are word for word what the g++ harness sends and receives on that PLIO,
    and the harness's result on the same operands is the emulator's (expected.bin) bit for bit."""
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    from rlhls.flow.aie import _render_harness, emit_aie, shim_dir
    from rlhls.core.toolchain import compile_cpp

    d = get_design("apdrl-dqn-cartpole")
    g = build_graph(d, 8)
    points = {"q.fc1.fwd": "t4p2", "q.fc2.bwd": "t3p1", "q.fc3.fwd": "t1p1"}
    emit_aie(d, list(points), tmp_path, graph=g, points=points, full_data=True)  # whole streams
    aie = tmp_path / "aie"
    m = json.loads((aie / "manifest.json").read_text())
    graph_h = (aie / "graph.h").read_text()
    for node in m["nodes"]:
        c = node["cname"]
        for q in range(node["plio_pairs"]):
            assert f'"data/{c}_in{q}.txt"' in graph_h and f'"data/{c}_out{q}.txt"' in graph_h
        (tmp_path / f"{c}_h.cpp").write_text(_render_harness(node))
        exe = compile_cpp([aie / "kernels" / f"{c}.cc", tmp_path / f"{c}_h.cpp"], tmp_path / f"{c}_h",
                          include_dirs=[shim_dir(), aie / "kernels"], flags=("-DRLHLS_AIE_MAIN",))
        (tmp_path / c).mkdir()
        subprocess.run([str(exe), str(aie / "data" / f"{c}.in.bin"), str(tmp_path / f"{c}.out.bin"), str(tmp_path / c)],
                       check=True)
        assert (tmp_path / f"{c}.out.bin").read_bytes() == (aie / "data" / f"{c}.expected.bin").read_bytes()
        for q in range(node["plio_pairs"]):
            split = sum(1 for k in node["kernels"] if k["plio"] == q) > 1
            for name, tr in ((f"{c}_in{q}.txt", f"in{q}.u16"), (f"{c}_out{q}_expected.txt", f"out{q}.u16")):
                got = _decode_plio((aie / "data" / name).read_text(), split)
                want = _trace(tmp_path / c / tr)
                if not split:  # one stream: the packets back to back
                    want = [(0, [w for _, ws in want for w in ws])]
                assert len(got) == len(want) and len(want) >= 1, name
                for (pg, wg), (pw, ww) in zip(got, want):
                    assert pg == pw and wg[:len(ww)] == ww and wg[len(ww):] in ([], [0]), name


# ----------------------------------------------------------------------------------- the rule checker

from rlhls.designs.registry import design_names  # noqa: E402
from rlhls.flow.rules import RULES, check_build, is_amd_part  # noqa: E402


@pytest.mark.parametrize("design", design_names())
def test_every_registered_design_builds_without_a_violation(tmp_path, design):
    res = build_design(design, tmp_path / design)  # hls4ml projects where the design's formats allow
    m = json.loads((tmp_path / design / P.MANIFEST).read_text())
    assert m["rules"] == res.rules and m["rules"]["rules"] == list(RULES)
    assert m["rules"]["violations"] == [] and m["rules"]["passed"] and res.ok
    assert is_amd_part(m["part"]) and m["part_placeholder"] is False


@pytest.fixture(scope="module")
def cartpole_aie(tmp_path_factory):
    """apdrl-dqn-cartpole with its matrix products on the AIE, the rest on the PL."""
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design

    d = get_design("apdrl-dqn-cartpole")
    g = build_graph(d)
    plan = {n.name: ("AIE" if n.mm and n.phase in ("fwd", "tfwd", "bwd") else "PL") for n in g.nodes}
    out = tmp_path_factory.mktemp("b") / "cartpole"
    res = build_design(d, out, plan=plan, graph=g)
    assert res.aie["nodes"] and res.rules["passed"], res.rules
    return out


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit(path, old, new, count=1):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, count))


def _line_of(path, text):
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def _fired(out, rule):
    v = RULES[rule](out, json.loads((out / P.MANIFEST).read_text()))
    assert v and all(x.rule == rule for x in v), (rule, [str(x) for x in check_build(out)])
    return v


def _kernel_dir(out):
    m = json.loads((out / P.MANIFEST).read_text())
    c = next(c for c in m["components"] if c["kind"] == "kernel")
    return out / c["dir"], c


def test_part_name_fires_on_a_placeholder_and_on_a_part_other_than_the_builds(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    d, c = _kernel_dir(out)
    cfg = d / P.HLS_CONFIG
    part = json.loads((out / P.MANIFEST).read_text())["part"]
    _edit(cfg, f"part={part}", "part=PLACEHOLDER_PART")
    _edit(d / P.RUN_HLS, f"set_part {part}", "set_part xczu9eg-ffvb1156-2-e")
    v = _fired(out, "part_name")
    assert {(x.file, x.line) for x in v} == {(f"{c['dir']}/{P.HLS_CONFIG}", _line_of(cfg, "part=PLACEHOLDER")),
                                             (f"{c['dir']}/{P.RUN_HLS}", _line_of(d / P.RUN_HLS, "set_part"))}
    assert "UG1399" in v[0].doc
    assert not is_amd_part("5SGSD8") and is_amd_part("xcve2802-vsvh1760-2MP-e-S") and is_amd_part("xcu250-figd2104-2L-e")


def test_hls_sources_fires_on_a_top_no_file_defines_and_a_missing_file(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    d, c = _kernel_dir(out)
    cfg = d / P.HLS_CONFIG
    _edit(cfg, f"syn.top={c['top']}", "syn.top=no_such_top")
    (d / "tb" / "n.txt").unlink(missing_ok=True)
    tb_data = next(p for p in (d / "tb").iterdir() if p.suffix == ".bin")
    tb_data.unlink()
    msgs = [(x.line, x.message) for x in _fired(out, "hls_sources")]
    assert (_line_of(cfg, "syn.top="), "syn.top=no_such_top: no syn.file defines void no_such_top(...)") in msgs
    assert (_line_of(cfg, f"tb/{tb_data.name}"), f"tb/{tb_data.name} does not exist") in msgs
    import shutil

    shutil.rmtree(d)  # a component the manifest lists, gone
    assert [(x.file, x.message) for x in _fired(out, "hls_sources")] == [
        (P.MANIFEST, f"component {c['name']}: folder {c['dir']} missing")]


def test_kernel_interfaces_fire_on_hls4mls_ap_vld_top_and_a_missing_control(heppo, tmp_path):
    out = _copy(heppo.out, tmp_path / "b")
    top = out / "pl" / "policy_fwd" / "src" / "policy_fwd.cpp"
    _edit(top, "INTERFACE m_axi port=x", "INTERFACE ap_vld port=x")
    _edit(top, "#pragma HLS INTERFACE s_axilite port=return\n", "")
    v = _fired(out, "kernel_interfaces")
    assert [(x.file, x.line) for x in v] == [("pl/policy_fwd/src/policy_fwd.cpp", _line_of(top, "ap_vld port=x")),
                                             ("pl/policy_fwd/src/policy_fwd.cpp", _line_of(top, "void policy_fwd("))]
    assert "ap_vld" in v[0].message and "s_axilite port=return" in v[1].message
    assert "Interfaces for Vitis Kernel Flow" in v[0].doc
    # a second control bundle and an m_axi port whose address does not come through s_axilite
    top.write_text(top.read_text().replace("INTERFACE ap_vld port=x offset=slave", "INTERFACE m_axi port=x offset=direct")
                   .replace("INTERFACE s_axilite port=n", "INTERFACE s_axilite port=n bundle=ctrl2\n"
                            "#pragma HLS INTERFACE s_axilite port=return"))
    msgs = {(x.line, x.message.split(":", 1)[1].strip()) for x in _fired(out, "kernel_interfaces")}
    assert msgs == {(_line_of(top, "offset=direct"), "m_axi port x offset=direct: a Vitis kernel takes its buffer "
                                                      "addresses through s_axilite (offset=slave)"),
                    (_line_of(top, "bundle=ctrl2"), "s_axilite bundles control, ctrl2: a Vitis kernel has one "
                                                    "s_axilite control interface")}


def test_hls_pragmas_fire_on_an_unknown_pragma_and_a_bad_factor(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    d, c = _kernel_dir(out)
    src = d / "src" / f"{c['top']}.cpp"
    _edit(src, "#pragma HLS PIPELINE II=1", "#pragma HLS PIPELINE II=0\n#pragma HLS PIPELIN II=1")
    v = _fired(out, "hls_pragmas")
    assert [(x.file, x.line, x.message) for x in v] == [
        (f"{c['dir']}/src/{c['top']}.cpp", _line_of(src, "II=0"), "pragma HLS pipeline ii=0: expected a positive integer"),
        (f"{c['dir']}/src/{c['top']}.cpp", _line_of(src, "PIPELIN II"), "unknown pragma HLS PIPELIN")]


def test_testbench_fires_without_expected_vectors_and_on_an_empty_one(heppo, cartpole_aie, tmp_path):
    out = _copy(heppo.out, tmp_path / "h")
    cfg = out / "pl" / "policy_fwd" / P.HLS_CONFIG
    _edit(cfg, "tb.file=tb/expected_y.bin\n", "")
    v = _fired(out, "testbench")
    assert [x.message for x in v] == ["component policy_fwd: no expected-output vectors in tb.file"]
    out = _copy(cartpole_aie, tmp_path / "c")
    d, c = _kernel_dir(out)
    exp = next(p for p in (d / "tb").iterdir() if p.name.startswith("expected_"))
    exp.write_bytes(b"")
    v = _fired(out, "testbench")
    assert [(x.line, x.message) for x in v] == [(_line_of(d / P.HLS_CONFIG, f"tb/{exp.name}"), f"tb/{exp.name} is empty")]


def test_system_cfg_fires_on_an_unknown_kernel_and_a_kernel_without_nk(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    _, c = _kernel_dir(out)
    cfg = out / P.SYSTEM_CFG
    _edit(cfg, f"nk={c['top']}:1:{c['top']}_1", "nk=ghost:1:ghost_1")
    v = _fired(out, "system_cfg")
    assert {(x.line, x.message) for x in v} == {
        (_line_of(cfg, "nk=ghost"), "nk=ghost:1:ghost_1: no kernel top ghost in this build"),
        (0, f"kernel {c['top']} has no nk= line")}
    assert "UG1393" in v[0].doc


def test_aie_graph_fires_on_a_missing_plio_file_a_bad_ratio_and_a_wide_split(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    g = out / "aie" / "graph.h"
    m = json.loads((out / "aie" / "manifest.json").read_text())
    plio = m["nodes"][0]["plio_inputs"][0]
    (out / "aie" / "data" / f"{plio}.txt").unlink()
    _edit(g, "adf::runtime<adf::ratio>(k[0]) = 0.9", "adf::runtime<adf::ratio>(k[0]) = 1.5")
    text = g.read_text()
    g.write_text(text.replace("};\n", "    adf::pktsplit<40> wide;\n};\n", 1))
    v = _fired(out, "aie_graph")
    lines = {x.line for x in v}
    assert _line_of(g, f'"data/{plio}.txt"') in lines and _line_of(g, "= 1.5") in lines
    assert _line_of(g, "pktsplit<40>") in lines and "UG1079" in v[0].doc


def test_aie_kernel_source_fires_on_an_unregistered_kernel_class(cartpole_aie, tmp_path):
    out = _copy(cartpole_aie, tmp_path / "b")
    h = next((out / "aie" / "kernels").glob("q_*.h"))
    cls = h.stem + "_tile"
    _edit(h, f"REGISTER_FUNCTION({cls}::run);", "")
    v = _fired(out, "aie_kernel_source")
    assert [(x.file, x.line) for x in v] == [(f"aie/kernels/{h.name}", _line_of(h, f"class {cls}"))]
    # registered, but its run function has no output port; and a graph naming a class nobody declares
    out = _copy(cartpole_aie, tmp_path / "c")
    h = out / "aie" / "kernels" / h.name
    _edit(h, "adf::output_async_buffer<bfloat16, adf::extents<OUT>>& out", "float* out")
    g = out / "aie" / "graph.h"
    _edit(g, f"create_object<{cls}>", "create_object<ghost_tile>")
    v = _fired(out, "aie_kernel_source")
    assert {(x.file, x.line) for x in v} == {(f"aie/kernels/{h.name}", _line_of(h, f"class {cls}")),
                                             ("aie/graph.h", _line_of(g, "ghost_tile"))}
    assert "UG1079" in v[0].doc


def test_aie_budget_fires_past_the_routable_streams(cartpole_aie, tmp_path):
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_plio_pairs

    out = _copy(cartpole_aie, tmp_path / "b")
    p = out / "aie" / "manifest.json"
    m = json.loads(p.read_text())
    m["plio_pairs"] = aie_plio_pairs(get_device(m["device"])) + 1
    p.write_text(json.dumps(m))
    (v,) = _fired(out, "aie_budget")
    assert "routable budget" in v.message


def test_check_command(cartpole_aie, tmp_path, capsys):
    from rlhls.cli import main

    assert main(["check", str(cartpole_aie)]) == 0
    assert capsys.readouterr().out.strip().endswith("0 violation(s)")
    out = _copy(cartpole_aie, tmp_path / "b")
    _, c = _kernel_dir(out)
    _edit(out / P.SYSTEM_CFG, f"nk={c['top']}:1:", f"nk={c['top']}:0:")
    assert main(["check", str(out), "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert not r["passed"] and r["violations"][0]["file"] == P.SYSTEM_CFG and r["violations"][0]["line"] > 0
    assert main(["check", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlhls: error:") and err.count("\n") == 1 and "Traceback" not in err


# ----------------------------------------------------------------------------- the routable stream budget


def _breakout_plan():
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    from rlhls.partition.design_plan import partition_design

    d = get_design("apdrl-dqn-breakout")
    g = build_graph(d)
    return d, g, partition_design(d, graph=g)


def _streams(plan) -> int:
    return sum(int(plan.point[n].split("p")[1]) for n, u in plan.assignment.items() if u == "AIE")


def test_partitioner_plans_within_the_routable_stream_budget_and_the_build_refuses_past_it(tmp_path, monkeypatch):
    import dataclasses

    from rlhls.designs.devices import get_device
    from rlhls.core.errors import RlhlsError
    from rlhls.designs.kernels import cost
    from rlhls.flow.aie import aie_fit, emit_aie
    from rlhls.partition import profile

    vek = get_device("vek280")
    budget, streams = cost.aie_plio_pairs(vek), cost.aie_plio_pairs(vek, routable=False)
    assert (budget, streams) == (126, 168)  # 3/4 of the 168 AIE->PL streams
    assert "assumed" in vek.units["AIE"].perf["plio_routable_fraction"].source
    d, g, plan = _breakout_plan()
    assert 0 < _streams(plan) <= budget
    aie = [n for n, u in plan.assignment.items() if u == "AIE"]
    assert aie_fit(d, aie, g, points={n: plan.point[n] for n in aie}) == []
    emit_aie(d, aie, tmp_path / "ok", graph=g, points={n: plan.point[n] for n in aie}, data=False)  # ~380 MB of data
    am = json.loads((tmp_path / "ok" / "aie" / "manifest.json").read_text())
    assert am["plio_pairs"] <= budget and am["capacity"]["plio_pairs"] == budget
    # a plan past the budget (every AIE node at 16 stream pairs): refused in one line, nothing written
    over = dataclasses.replace(plan, point={n: ("t16p16" if u == "AIE" else plan.point[n])
                                            for n, u in plan.assignment.items()})
    assert _streams(over) > budget
    with pytest.raises(RlhlsError) as e:
        build_design(d, tmp_path / "over", plan=over, graph=g)
    assert "routable budget 126 of vek280" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "over").exists()
    # the budget is what holds the plan back: with every stream the same partitioner takes more
    original = cost.aie_plio_pairs
    whole = lambda dev, routable=True: original(dev, routable=False)  # noqa: E731
    monkeypatch.setattr(cost, "aie_plio_pairs", whole)
    monkeypatch.setattr(profile, "aie_plio_pairs", whole)
    assert _streams(_breakout_plan()[2]) > budget


# ----------------------------------------------------------------------------- HEPPO-GAE's on-chip FILO unit


@pytest.mark.parametrize("ps,seed_bytes", [
    (dict(out="fixed<8,4,RND,SAT>"), 128 * 1024),  # §V-D2: results at the code width, "128 KB"
    (dict(), 4 * 128 * 1024),  # the design's fp32 results in place: 4x
    (dict(trajectories=7, steps=23, bits=10, out="fixed<6,2,RND,SAT>"), 2 * 7 * 23 * 10 / 8)])
def test_gae_unit_keeps_the_rollout_on_chip_with_the_models_memory(tmp_path, ps, seed_bytes):
    """The generated unit's FILO stack (rlhls_gae.h Stack: BRAM0 / BRAM1 of S x T words, results in
    place) is the size gae.memory_layout gives, so the §V-D2 figures come from the generated arrays;
    the host's arrays are read once (push) and written once (drain)."""
    from rlhls.designs.kernels.gae import GaeKernel, memory_layout
    from rlhls.flow.kernels import render_kernel
    from rlhls.flow.paths import include_dir
    from rlhls.core.toolchain import ap_types_include, compile_cpp

    k = GaeKernel()
    p = k.resolve(ps)
    src = render_kernel("gae", ps, tb=False)
    for name, text in src.files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "size.cpp").write_text(
        '#include <cstdio>\n#include "gae.h"\n#include "rlhls_gae.h"\nusing namespace gae_t;\n'
        "int main() { std::printf(\"%d %ld\\n\", rlgae::Stack<out_t, T, S, NB>::WORD_BITS, "
        "rlgae::Stack<out_t, T, S, NB>::BITS); return 0; }\n")
    exe = compile_cpp([tmp_path / "size.cpp"], tmp_path / "size", include_dirs=[tmp_path, include_dir(),
                                                                                  ap_types_include()])
    word, bits = map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split())
    m = memory_layout(p)
    assert (word, bits / 8) == (m["word_bits"], m["capacity_bytes"]) and bits / 8 == seed_bytes
    h = (include_dir() / "rlhls_gae.h").read_text()
    body = h[h.index("void run("):]
    # the PEs read and write the stack, never the host's arrays: those appear once in push / drain
    for arr in ("rew[", "val[", "done[", "boot["):
        assert body.count(arr) == 1, arr
    assert body.count("adv[") == 1 and body.count("rtg[") == 1
    assert "rmb[t][j] = Bits<O>::template put" in body and "type = ram_t2p impl = bram" in body
