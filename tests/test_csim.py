"""csim: every kernel's HLS C++ + testbench under g++ equals the numpy model bit for bit."""

from pathlib import Path

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.kernels import get_kernel
from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel
from rlhls.core import procs

from cpp_util import CACHE

CASES = [
    ("dense_forward", {"storage": "fixed<10,3,TRN,WRAP>", "acc": "fixed<14,4,RND_CONV,WRAP>", "pf": 4, "ii": 2}),
    ("dense_backward", {"storage": "bf16", "acc": "fp32", "pf": 2}),
    ("weight_gradient", {"storage": "fp16", "acc": "fp16", "n": 6, "k": 5, "m": 9, "pf": 3}),
    ("weight_update", {"optimizer": "adam", "storage": "fixed<16,6,RND,SAT>", "acc": "fixed<32,8,RND,SAT>", "pf": 8}),
]


@pytest.mark.parametrize("name, params", CASES, ids=[c[0] for c in CASES])
def test_csim_passes(name, params, tmp_path):
    src = render_kernel(name, params, seed=7)
    top = src.files[f"{name}.cpp"]
    pf = params["pf"]
    assert f"#pragma HLS UNROLL factor={pf}" in top and f"cyclic factor={pf}" in top
    assert f"#pragma HLS PIPELINE II={params.get('ii', 1)}" in top
    assert "offset=slave bundle=gmem0" in top and "s_axilite port=return" in top
    assert "hls_stream" not in "".join(src.files.values()) + "".join(src.tb_files.values())
    res = run_csim(src, tmp_path, CACHE)
    assert res.passed, res.detail
    assert "bit-exact" in res.detail


def test_csim_cache_and_corrupted_expectation(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    src = render_kernel("weight_update", {"optimizer": "sgd", "storage": "bf16", "acc": "fp32", "n": 16}, seed=1)
    cold = run_csim(src, tmp_path / "a", cache)
    assert cold.passed and not cold.cached, cold.detail
    ran = []  # the programs a run starts (the compiler too): the warm one runs its testbench alone
    real = procs.run
    monkeypatch.setattr(procs, "run", lambda args, **kw: ran.append(Path(args[0]).name) or real(args, **kw))
    warm = run_csim(src, tmp_path / "b", cache)
    assert warm.passed and warm.cached and ran == [f"csim-{src.top}-{src.digest()[:16]}"], ran
    # Flip the lowest bit of one expected value: the testbench must report it and fail.
    data = bytearray(src.tb_data["expected_w_new.bin"])
    data[8 * 5] ^= 1
    src.tb_data["expected_w_new.bin"] = bytes(data)
    bad = run_csim(src, tmp_path / "c", cache)
    assert not bad.passed and bad.cached
    assert bad.detail.startswith("FAIL w_new[5]")


def test_render_is_deterministic_and_component_named():
    a = render_kernel("dense_forward", {"pf": 2}, seed=3)
    b = render_kernel("dense_forward", {"pf": "2"}, seed=3)
    assert a.files == b.files and a.tb_data == b.tb_data and a.digest() == b.digest()
    c = render_kernel("dense_forward", {"pf": 2}, seed=3, component="policy_fc1_fwd")
    assert c.top == "policy_fc1_fwd" and "void policy_fc1_fwd(" in c.files["policy_fc1_fwd.cpp"]
    assert render_kernel("dense_forward", {"pf": 2}, seed=4).tb_data != a.tb_data


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("name, params, rows", [
    ("dense_forward", {"n": 40, "k": 6, "m": 5, "storage": "fixed<12,4,RND,SAT>", "acc": "fixed<24,8,RND,SAT>"}, 3),
    ("weight_gradient", {"n": 30, "k": 4, "m": 6, "storage": "bf16", "acc": "fp32", "pf": 2}, 7),
    ("weight_update", {"n": 500, "optimizer": "rmsprop", "storage": "fp16", "acc": "fp32", "pf": 4}, 13),
])
def test_runtime_rows_below_n_max(name, params, rows, tmp_path):
    """The top keeps N_MAX (depths, tripcount) while csim runs n < N_MAX rows, and the result
    is the model's for those rows (the model of the full N_MAX rows, cut to n, for dense_forward)."""
    k = get_kernel(name)
    p = k.resolve(params)
    nmax = p["n"]
    src = render_kernel(name, params, seed=2, tb_rows=rows)
    top, hdr = src.files[f"{name}.cpp"], src.files[f"{name}.h"]
    assert f"const int N = {nmax};" in hdr and ", int n)" in hdr
    assert "s_axilite port=n" in top and f"loop_tripcount min=1 max={nmax}" in top
    ins, _ = k.arrays(p)
    row_in = next(a for a in ins if a.rows)
    assert f"depth={row_in.size}" in top  # m_axi depth at N_MAX
    assert src.tb_data["n.txt"] == f"{rows}\n".encode()
    assert len(src.tb_data[f"{row_in.name}.bin"]) == 8 * rows * row_in.row_size
    res = run_csim(src, tmp_path, CACHE)
    assert res.passed, res.detail
    if name == "dense_forward":  # rows are independent: n rows of a full-size call
        full = k.random_inputs(p, np.random.default_rng(5))
        y_full = k.model(p, **full)["y"]
        y_cut = k.model(p, x=full["x"][:rows], w=full["w"], b=full["b"])["y"]
        assert np.array_equal(_bits(y_cut), _bits(y_full[:rows]))


def test_default_tb_rows_small_and_n_out_of_range(tmp_path):
    k = get_kernel("weight_gradient")
    src = render_kernel("weight_gradient", {"n": 50000, "k": 3, "m": 2})
    assert src.tb_data["n.txt"] == b"8\n" and len(src.tb_data["x.bin"]) == 8 * 8 * 3
    p = k.resolve({"n": 4, "k": 3, "m": 2})
    with pytest.raises(RlhlsError) as e:
        k.check_arrays(p, {"x": np.zeros((5, 3)), "dy": np.zeros((5, 2))})
    assert "has 5 rows, expected 1 <= n <= 4" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(RlhlsError, match="expected n = 3"):
        k.check_arrays(p, {"x": np.zeros((3, 3)), "dy": np.zeros((2, 2))})
    # the testbench itself refuses n > N_MAX (a hand-edited n.txt)
    src = render_kernel("weight_gradient", {"n": 4, "k": 3, "m": 2})
    src.tb_data["n.txt"] = b"5\n"
    bad = run_csim(src, tmp_path, CACHE)
    assert not bad.passed and bad.detail == "FAIL n.txt: expected an integer in 1..4"


def test_ap_types_precompiled_header_builds_the_same_binary(tmp_path, monkeypatch):
    """compile_cpp includes the ap_types headers precompiled (one PCH per flag set, in the cache):
    the program is byte for byte the one g++ builds from the plain headers."""
    import subprocess

    import numpy as np

    from rlhls.designs.formats import parse_format
    from rlhls.core.toolchain import BASE_FLAGS, ap_types_include, compile_cpp

    monkeypatch.setenv("RLHLS_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "p.cpp"
    src.write_text('#include "ap_fixed.h"\n#include <cstdio>\nint main() { ap_fixed<18, 6, AP_RND, AP_SAT> a = 1.37;\n'
                   '  a *= a; std::printf("%.17g\\n", a.to_double()); return 0; }\n')
    exe = compile_cpp([src], tmp_path / "with_pch", include_dirs=[ap_types_include()], flags=("-w",))
    gch = list((tmp_path / "cache" / "pch").glob("*/rlhls_ap_types.h.gch"))
    assert len(gch) == 1 and gch[0].stat().st_size > 0
    plain = tmp_path / "plain"
    subprocess.run(["g++", *BASE_FLAGS, "-w", f"-I{ap_types_include()}", str(src), "-o", str(plain)], check=True)
    assert exe.read_bytes() == plain.read_bytes()
    fmt = parse_format("fixed<18,6,RND,SAT>")  # and it computes what our model of ap_fixed does
    q = fmt.quantize(np.array([1.37]))
    assert float(subprocess.run([str(exe)], capture_output=True, text=True).stdout) == float(fmt.quantize(q * q)[0])
