"""Backends: emu and csim give identical bits for identical inputs; cosim fails clearly."""

import shutil

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
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


def test_runtime_rows_csim_equals_emu_and_rejects_too_many(csim):
    k = get_kernel("dense_backward")
    p = k.resolve({"storage": FIX_SAT[0], "acc": FIX_SAT[1], "pf": 2, "n": 8})
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 16))
    for n in (1, 5, 8):  # one library serves every n <= N_MAX
        dy = rng.standard_normal((n, 16))
        a, b = get_backend("emu").call("dense_backward", p, dy=dy, w=w), csim.call("dense_backward", p, dy=dy, w=w)
        assert b["dx"].shape == (n, 16) and np.array_equal(_bits(a["dx"]), _bits(b["dx"]))
    with pytest.raises(RlhlsError) as e:
        csim.call("dense_backward", p, dy=np.zeros((9, 16)), w=w)
    assert "'dy' has 9 rows, expected 1 <= n <= 8" in str(e.value) and "\n" not in str(e.value)


# -- cosim: stub executables emulate Vitis by compiling the component's own files with g++ and
# running its testbench in a simulation folder (as vitis-run does), so the file protocol is real.

_VITIS_RUN = r'''#!{python}
import os, shutil, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(os.getcwd() + " | vitis-run " + " ".join(args) + "\n")
assert args[:3] == ["--mode", "hls", "--cosim"], args
cfg, work = args[args.index("--config") + 1], args[args.index("--work_dir") + 1]
comp = os.path.dirname(cfg)
keys = {{}}
for line in open(cfg):
    if "=" in line and not line.startswith("#"):
        k, v = line.strip().split("=", 1)
        keys.setdefault(k, []).append(v)
sim = os.path.join(work, "sim")
os.makedirs(sim, exist_ok=True)
srcs = [os.path.join(comp, f) for f in keys["syn.file"] + keys["tb.file"] if f.endswith(".cpp")]
for f in keys["tb.file"]:  # tb data next to the simulation, as Vitis copies them
    if not f.endswith(".cpp"):
        shutil.copy(os.path.join(comp, f), sim)
inc = [f"-I{{os.path.join(comp, d)}}" for d in ("src", "include", "tb")] + ["-I{ap}"]
exe = os.path.join(sim, "tb")
if not os.path.exists(exe):  # same sources on every call of a component: build once (Vitis rebuilds)
    subprocess.run(["g++", "-O0", "-std=c++14", "-ffp-contract=off", "-w", *inc, *srcs, "-o", exe], check=True)
sys.exit(subprocess.run([exe], cwd=sim).returncode)
'''


def _cosim_stubs(tmp_path):
    import stat
    import sys

    from rlhls.core.toolchain import ap_types_include

    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    (bindir / "vitis-run").write_text(_VITIS_RUN.format(python=sys.executable, log=str(log), ap=ap_types_include()))
    (bindir / "v++").write_text(f'#!/bin/sh\necho "$(pwd) | v++ $*" >> "{log}"\nexit 0\n')
    for f in bindir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return bindir, log


def test_cosim_backend_runs_vitis_and_reads_outputs(tmp_path):
    bindir, log = _cosim_stubs(tmp_path)
    cos = get_backend("cosim", cache_dir=tmp_path / "cosim", path=str(bindir))
    k = get_kernel("weight_gradient")
    p = k.resolve({"n": 16, "k": 3, "m": 4, "storage": "bf16", "acc": "fp32"})
    rng = np.random.default_rng(9)
    for n in (5, 2):
        x, dy = rng.standard_normal((n, 3)), rng.standard_normal((n, 4))
        got, ref = cos.call("weight_gradient", p, x=x, dy=dy), get_backend("emu").call("weight_gradient", p, x=x, dy=dy)
        assert set(got) == {"dw", "db"}
        for key in ref:
            assert got[key].shape == ref[key].shape and np.array_equal(_bits(got[key]), _bits(ref[key]))
    calls = log.read_text().splitlines()
    comp = next((tmp_path / "cosim").glob("weight_gradient-*")).resolve()
    cfg = f"--config {comp}/hls_config.cfg --work_dir {comp}/work"
    # synthesis once per component, one co-simulation per call, run in the component folder
    assert calls == [f"{comp} | v++ -c --mode hls {cfg}", f"{comp} | vitis-run --mode hls --cosim {cfg}",
                     f"{comp} | vitis-run --mode hls --cosim {cfg}"]
    assert (comp / "tb" / "n.txt").read_text() == "2\n"


def test_cosim_backend_reports_tool_failure_in_one_line(tmp_path):
    bindir, _ = _cosim_stubs(tmp_path)
    (bindir / "vitis-run").write_text("#!/bin/sh\nexit 4\n")
    cos = get_backend("cosim", cache_dir=tmp_path / "cosim", path=str(bindir))
    with pytest.raises(RlhlsError) as e:
        cos.call("weight_update", {"optimizer": "sgd", "n": 4}, w=np.zeros(4), g=np.ones(4), alpha=np.array([1e-3]))
    assert "vitis-run (cosim) exited with code 4 (log: " in str(e.value) and "\n" not in str(e.value)


def test_cosim_backend_absent_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no Vitis
    with pytest.raises(RlhlsError) as e:
        get_backend("cosim")
    assert str(e.value) == "cosim backend needs Vitis: 'vitis-run' (or 'vitis_hls') not found on PATH"
