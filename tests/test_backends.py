"""Backends: emu and csim give identical bits for identical inputs; cosim fails clearly."""

import shutil

import numpy as np
import pytest

from rlhls.designs.errors import RlhlsError
from rlhls.designs.kernels import get_kernel
from rlhls.host.backends import CsimBackend, get_backend

from cpp_util import CACHE

FIX_SAT = ("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>")
FIX_WRAP = ("fixed<10,3,TRN,WRAP>", "fixed<14,4,RND_CONV,WRAP>")
CASES = [
    ("dense_forward", {}, FIX_SAT), ("dense_forward", {}, ("fp16", "fp16")), ("dense_forward", {}, ("bf16", "fp32")),
    ("dense_backward", {}, FIX_WRAP), ("dense_backward", {}, ("fp32", "fp32")), ("dense_backward", {}, ("bf16", "bf16")),
    ("weight_gradient", {}, FIX_SAT), ("weight_gradient", {}, ("fp16", "fp32")), ("weight_gradient", {}, FIX_WRAP),
    ("weight_update", {"optimizer": "sgd"}, FIX_WRAP), ("weight_update", {"optimizer": "sgd"}, ("bf16", "bf16")),
    ("weight_update", {"optimizer": "adam"}, ("fixed<16,6,RND,SAT>", "fixed<32,8,RND,SAT>")),
    ("weight_update", {"optimizer": "adam"}, ("fp16", "fp32")),
    ("weight_update", {"optimizer": "rmsprop"}, ("fp32", "fp32")),
    ("weight_update", {"optimizer": "rmsprop"}, ("bf16", "fp32")),
]


@pytest.fixture(scope="module")
def csim():
    return CsimBackend(cache_dir=CACHE / "csim-lib")


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("name, extra, fmt", CASES, ids=[f"{c[0]}-{c[1].get('optimizer', '')}-{c[2][0]}" for c in CASES])
def test_emu_equals_csim(name, extra, fmt, csim):
    k = get_kernel(name)
    p = k.resolve({**extra, "storage": fmt[0], "acc": fmt[1], "pf": 2})
    emu = get_backend("emu")
    rng = np.random.default_rng(11)
    for trial in range(3):  # raw float64 inputs: both backends round them to the formats
        ins, _ = k.arrays(p)
        arrays = {a.name: rng.standard_normal(a.shape) * (0.05 if a.fmt_key == "acc" else 1.5) for a in ins}
        if "v" in arrays:
            arrays["v"] = np.abs(arrays["v"])
        if "alpha" in arrays:
            arrays["alpha"] = np.array([1e-3 * (trial + 1)])
        a, b = emu.call(name, p, **arrays), csim.call(name, p, **arrays)
        assert set(a) == set(b) == set(k.arrays(p)[1][i].name for i in range(len(k.arrays(p)[1])))
        for key in a:
            assert a[key].shape == b[key].shape
            assert np.array_equal(_bits(a[key]), _bits(b[key])), (key, np.flatnonzero(_bits(a[key]) != _bits(b[key]))[:5])


def test_csim_library_is_cached(csim):
    k = get_kernel("dense_forward")
    p = k.resolve({"storage": FIX_SAT[0], "acc": FIX_SAT[1], "pf": 2})
    x = {"x": np.ones((8, 16)), "w": np.ones((16, 16)) * 0.5, "b": np.zeros(16)}
    csim.call("dense_forward", p, **x)
    fresh = CsimBackend(cache_dir=csim.cache_dir)
    y = fresh.call("dense_forward", p, **x)["y"]
    assert fresh.built == 0 and np.all(y == 8.0)


def test_backend_errors(csim):
    with pytest.raises(RlhlsError, match="backend 'gpu': unknown"):
        get_backend("gpu")
    if shutil.which("vitis-run") is None and shutil.which("vitis_hls") is None:
        with pytest.raises(RlhlsError) as e:
            get_backend("cosim")
        assert str(e.value) == "cosim backend needs Vitis: 'vitis-run' (or 'vitis_hls') not found on PATH"
    with pytest.raises(RlhlsError, match="input 'x' has shape"):
        csim.call("dense_forward", {}, x=np.zeros((2, 2)), w=np.zeros((16, 16)), b=np.zeros(16))
    with pytest.raises(RlhlsError, match="missing input array 'b'"):
        get_backend("emu").call("dense_forward", {}, x=np.zeros((8, 16)), w=np.zeros((16, 16)))
