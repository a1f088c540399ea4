"""What a user with Vitis takes to the board: hls4ml networks as Vitis kernels whose testbench
compares with the emulator, AIE graphs with their data files, real parts, and the rule checker
(flow/rules.py) on every registered design and on broken projects."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

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
    from rlhls.flow.toolchain import compile_cpp

    d = get_design("apdrl-dqn-cartpole")
    g = build_graph(d, 8)
    points = {"q.fc1.fwd": "t4p2", "q.fc2.bwd": "t3p1", "q.fc3.fwd": "t1p1"}
    emit_aie(d, list(points), tmp_path, graph=g, points=points)
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
