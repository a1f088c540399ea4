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
