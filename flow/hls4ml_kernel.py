"""hls4ml networks as Vitis kernels: a kernel top around hls4ml's function, its testbench and vectors.

hls4ml's io_parallel function (``firmware/<core>.cpp``) takes arrays with an ``ap_vld`` interface:
``v++ --link`` cannot take it as a kernel (UG1399 "Interfaces for Vitis Kernel Flow": data ports
``m_axi`` or ``axis``, control ``s_axilite``). ``wrap_network`` writes beside it

* ``src/<top>.cpp`` / ``src/<top>.h`` (``vitis/templates/hls4ml_top.*.j2``): the kernel top, m_axi
  in and out, ``s_axilite`` row count n (1..N_MAX) and control, calling the core once per row;
  the core's INTERFACE pragma is removed (an INTERFACE pragma belongs to the top function);
* ``tb/tb_<top>.cpp`` and its vectors: ``x.bin`` (inputs in the network's input format,
  channels-last as hls4ml takes them), ``expected_y.bin`` (the emulator's outputs: ``Network.forward``
  in hls4ml's table mode), ``n.txt`` and ``tolerance.bin`` (0: bit for bit; for float networks the
  bound of hls4ml's float sums, ``hls4ml_convert.error_bound``). The testbench exits 1 on a mismatch.

``run_wrapper_csim`` compiles that same top + core + testbench with g++ and runs it in ``tb/``
(weights read from ``../firmware/weights``; under Vitis the tb lists ``firmware/weights`` as
hls4ml's own build_prj.tcl does, and hls4ml's default WEIGHTS_DIR ``weights`` finds it).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import jinja2
import numpy as np

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_bytes, atomic_write_text, scratch_dir
from rlhls.core.toolchain import ap_types_include, compile_cpp

from .hls4ml_convert import _libm, _lsb, error_bound, table_precisions
from .paths import templates_dir

__all__ = ["TB_VECTORS", "wrap_network", "run_wrapper_csim", "core_signature"]

TB_VECTORS = ("x.bin", "expected_y.bin", "n.txt", "tolerance.bin")
TB_ROWS = 4
TB_TIMEOUT_S = 300
_SIG = re.compile(r"void\s+(\w+)\s*\(\s*(\w+)\s+(\w+)\[(\d+)\]\s*,\s*(\w+)\s+(\w+)\[(\d+)\]\s*\)")
_IFACE = re.compile(r"^\s*#pragma HLS INTERFACE .*$", re.M)


def core_signature(header_text: str, core: str) -> dict:
    """{'in_t', 'n_in', 'out_t', 'n_out'} of hls4ml's `core` function declared in its header."""
    for m in _SIG.finditer(header_text):
        if m.group(1) == core:
            return {"in_t": m.group(2), "n_in": int(m.group(4)), "out_t": m.group(5), "n_out": int(m.group(7))}
    raise RlhlsError(f"hls4ml: firmware/{core}.h declares no '{core}(in[N], out[M])' (one input, one output)")


def _render(name: str, ctx: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    return env.get_template(name).render(ctx)


def tb_vectors(net, precision, rows: int = TB_ROWS, seed: int = 0, x=None) -> dict:
    """{file: bytes}: inputs (`x`, N x input shape; else `rows` seeded uniform ones), the emulator's
    outputs, n and the tolerance (module docstring)."""
    ps = table_precisions(net, precision)
    if x is None:
        x = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(rows, *net.input_shape))
    x = np.asarray(x, dtype=np.float64)
    rows = len(x)
    ref = np.asarray(net.forward(x, ps), dtype=np.float64).reshape(rows, -1)
    xin = np.asarray(ps[net.layers[0].name].storage.quantize(x), dtype=np.float64)
    if xin.ndim == 4:
        xin = xin.transpose(0, 2, 3, 1)  # hls4ml's input is channels-last
    out_fmt = ps[net.layers[-1].name].storage
    tables = any(l.kind in ("Tanh", "Sigmoid", "Softplus", "Softmax") for l in net.layers)
    # 0 where hls4ml computes what the emulator does (fixed point; float MLPs whose biases are 0: the
    # same float operations in the same order, hls4ml_convert's docstring); else check_hls4ml's bound
    exact = not any(l.kind == "Conv2d" or np.any(np.asarray(l.params.get("b", 0.0)) != 0) for l in net.mm_layers)
    tol = 0.0 if exact else error_bound(net, ps, x)
    if tables and _libm() is None:  # table entries from float64 instead of the C library: 1 LSB
        tol = max(tol, _lsb(out_fmt, float(np.abs(ref).max(initial=0.0))))
    return {"x.bin": np.ascontiguousarray(xin.reshape(rows, -1), dtype="<f8").tobytes(),
            "expected_y.bin": np.ascontiguousarray(ref, dtype="<f8").tobytes(),
            "n.txt": f"{rows}\n".encode(), "tolerance.bin": np.asarray([tol], dtype="<f8").tobytes()}


def wrap_network(net, precision, d: Path, *, core: str, top: str, n_max: int, rows: int = TB_ROWS,
                 x=None) -> dict:
    """Write the kernel top, testbench and vectors of hls4ml project `d` (module docstring); `x`: the
    testbench's inputs (at most n_max rows; default `rows` seeded ones).
    Returns {'syn': [...], 'tb': [...], 'sig': core_signature}: paths relative to `d`."""
    d = Path(d)
    if not top.isidentifier() or top == core:
        raise RlhlsError(f"hls4ml: kernel top {top!r} must be a C identifier other than the core's name")
    if not (isinstance(n_max, int) and n_max >= 1):
        raise RlhlsError(f"hls4ml: kernel '{top}': N_MAX {n_max!r}, expected an integer >= 1")
    rows = min(rows, n_max)
    if x is not None and not 1 <= len(x) <= n_max:
        raise RlhlsError(f"hls4ml: kernel '{top}': {len(x)} testbench rows, expected 1..{n_max}")
    sig = core_signature((d / "firmware" / f"{core}.h").read_text(), core)
    core_cpp = d / "firmware" / f"{core}.cpp"
    text = core_cpp.read_text()
    atomic_write_text(core_cpp, _IFACE.sub(f"    // interface: the kernel top src/{top}.cpp (UG1399: INTERFACE "
                                           "pragmas belong to the top function)", text))
    ctx = dict(top=top, core=core, n_max=n_max, **sig)
    for sub in ("src", "tb"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    atomic_write_text(d / "src" / f"{top}.h", _render("hls4ml_top.h.j2", ctx))
    atomic_write_text(d / "src" / f"{top}.cpp", _render("hls4ml_top.cpp.j2", ctx))
    atomic_write_text(d / "tb" / f"tb_{top}.cpp", _render("hls4ml_tb.cpp.j2", ctx))
    for name, data in tb_vectors(net, precision, rows, x=x).items():
        atomic_write_bytes(d / "tb" / name, data)
    return {"syn": [f"src/{top}.cpp", f"firmware/{core}.cpp"],
            "tb": [f"tb/tb_{top}.cpp", *(f"tb/{n}" for n in TB_VECTORS), "firmware/weights"], "sig": sig}


def run_wrapper_csim(d: Path, *, top: str, core: str, include: Path, flags=("-O1",)) -> dict:
    """g++ build of the kernel top + hls4ml core + testbench of project `d`, run in ``d/tb``
    (read only). {'passed', 'detail', 'seconds'}; a build failure is a failed result."""
    t0 = time.perf_counter()
    d = Path(d).resolve()
    with scratch_dir(f"csim-{top}") as work:
        unity = Path(work) / f"csim_{top}.cpp"
        unity.write_text("".join(f'#include "{p}"\n' for p in (d / "src" / f"{top}.cpp", d / "firmware" / f"{core}.cpp",
                                                               d / "tb" / f"tb_{top}.cpp")))
        exe = Path(work) / f"csim_{top}"
        try:
            compile_cpp([unity], exe, include_dirs=[d / "src", d / "firmware", include, ap_types_include()],
                        flags=(*flags, "-w", '-DWEIGHTS_DIR="../firmware/weights"'))
        except RlhlsError as e:
            return {"passed": False, "detail": f"build failed: {e}", "seconds": round(time.perf_counter() - t0, 3)}
        try:
            res = procs.run([str(exe)], cwd=d / "tb", capture_output=True, text=True, timeout=TB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"passed": False, "detail": f"testbench timed out after {TB_TIMEOUT_S} s",
                    "seconds": round(time.perf_counter() - t0, 3)}
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    passed = res.returncode == 0 and any(ln.startswith("PASS") for ln in lines)
    detail = next((ln for ln in lines if ln.startswith("PASS" if passed else "FAIL")),
                  f"testbench exited with code {res.returncode}: {(res.stderr or res.stdout).strip()[:300]}")
    return {"passed": passed, "detail": detail, "seconds": round(time.perf_counter() - t0, 3)}
