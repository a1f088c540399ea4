"""Providers for tests of `rlhls build`: the other streams' real functions where their modules
exist, otherwise small stand-ins with the contract's signatures (CONTRACTS.md) that generate
real C++ (a scaled copy kernel + testbench) and really compile and run it with g++.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlhls.flow import build as B
from rlhls.flow.toolchain import ap_types_include, compile_cpp


@dataclass
class KernelSources:
    name: str
    top: str
    files: dict
    tb_files: dict
    tb_data: dict
    params: dict = field(default_factory=dict)


@dataclass
class CsimResult:
    name: str
    passed: bool
    detail: str
    cached: bool
    seconds: float


def standin_render_kernel(name, params, *, seed=0, component=None):
    top = component or name
    n = int(params.get("n", 4)) % 7 + 1
    h = f"#pragma once\n#include <ap_fixed.h>\nvoid {top}(const float in[{n}], float out[{n}]);\n"
    cpp = (f'#include "{top}.h"\nvoid {top}(const float in[{n}], float out[{n}]) {{\n'
           f"  for (int i = 0; i < {n}; ++i) out[i] = 2.0f * in[i];\n}}\n")
    tb = (f'#include <cstdio>\n#include "{top}.h"\nint main() {{\n  float in[{n}], out[{n}];\n'
          f'  FILE* f = std::fopen("in.dat", "r"); if (!f) return 2;\n'
          f'  for (int i = 0; i < {n}; ++i) if (std::fscanf(f, "%f", &in[i]) != 1) return 3;\n'
          f"  std::fclose(f);\n  {top}(in, out);\n"
          f"  for (int i = 0; i < {n}; ++i) if (out[i] != 2.0f * in[i]) return 1;\n"
          f'  std::puts("PASS");\n  return 0;\n}}\n')
    data = " ".join(str(seed + i) for i in range(n)).encode() + b"\n"
    return KernelSources(name, top, {f"{top}.h": h, f"{top}.cpp": cpp}, {f"{top}_tb.cpp": tb},
                         {"in.dat": data}, dict(params))


def standin_run_csim(src, workdir, cache_dir):
    t0 = time.perf_counter()
    workdir = Path(workdir)
    for name, text in {**src.files, **src.tb_files}.items():
        (workdir / name).write_text(text)
    for name, data in src.tb_data.items():
        (workdir / name).write_bytes(data)
    digest = hashlib.sha256(repr(sorted({**src.files, **src.tb_files}.items())).encode()).hexdigest()[:16]
    exe = Path(cache_dir) / f"{src.top}-{digest}"
    cached = exe.is_file()
    sources = [workdir / n for n in (*src.files, *src.tb_files) if n.endswith(".cpp")]
    compile_cpp(sources, exe, include_dirs=[workdir, ap_types_include()])
    r = subprocess.run([str(exe)], cwd=workdir, capture_output=True, text=True)
    return CsimResult(src.name, r.returncode == 0, (r.stdout + r.stderr).strip(), cached, time.perf_counter() - t0)


def providers(*, aie_calls: list | None = None) -> B.Providers:
    """Real providers where present, stand-ins for the rest (listed in .standins)."""
    pv = B.default_providers()
    pv.standins = []
    if pv.render_kernel is None:
        pv.render_kernel = standin_render_kernel
        pv.standins.append("render_kernel")
    if pv.run_csim is None or "render_kernel" in pv.standins:
        pv.run_csim = standin_run_csim
        pv.standins.append("run_csim")
    if aie_calls is not None:
        real = pv.emit_aie

        def emit_aie(design, nodes, out_dir):
            aie_calls.append(list(nodes))
            if real is not None:
                return real(design, nodes, out_dir)
            d = Path(out_dir) / "aie"
            d.mkdir(parents=True, exist_ok=True)
            (d / "graph.h").write_text("// " + " ".join(nodes) + "\n")
            return [d / "graph.h"]

        pv.emit_aie = emit_aie
    return pv


def fast_providers(**kw) -> B.Providers:
    """As providers(), without hls4ml (forward layers become dense_forward kernels): fast tests."""
    pv = providers(**kw)
    pv.convert_network = None
    pv.check_hls4ml = None
    return pv
