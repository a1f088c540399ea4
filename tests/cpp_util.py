"""Shared helpers for tests that compare numpy models with C++ built by g++.

Programs are built once per content (rlhls.core.toolchain caches by hash) into tests/.cache/
(gitignored); generated headers and sources go to a folder named by their own hash, so
different sessions and xdist workers never overwrite each other's inputs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np

from rlhls.designs.formats import FixedFormat
from rlhls.core.toolchain import ap_types_include, compile_cpp

HERE = Path(__file__).resolve().parent
CPP_DIR = HERE / "cpp"
CACHE = HERE / ".cache"


def build(name: str, sources, generated: dict[str, str]) -> Path:
    """Compile tests/cpp/<sources> plus ``generated`` {file name: text} (.cpp are compiled)."""
    key = hashlib.sha256(repr(sorted(generated.items())).encode()).hexdigest()[:16]
    gen = CACHE / f"gen-{name}-{key}"
    gen.mkdir(parents=True, exist_ok=True)
    for fname, text in generated.items():
        p = gen / fname
        if not p.is_file() or p.read_text() != text:
            tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")  # xdist workers may write the same file at once
            tmp.write_text(text)
            tmp.replace(p)
    srcs = [CPP_DIR / s for s in sources] + [gen / f for f in sorted(generated) if f.endswith(".cpp")]
    return compile_cpp(srcs, CACHE / f"{name}-{key}",
                       include_dirs=[gen, CPP_DIR, ap_types_include()], flags=("-w", "-O1"))


def run(exe: Path, *args) -> None:
    res = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, f"{exe.name} failed: {res.stderr}"


def wide_type(f: FixedFormat) -> str:
    """Same LSB and rounding as f, saturating, and wide enough that its saturated values lie
    outside f's range: one more integer bit for signed f, two for unsigned (see format_ref.h)."""
    k = 1 if f.signed else 2
    return f"ap_fixed<{f.width + k},{f.int_bits + k},AP_{f.quant},AP_SAT>"


def format_ref_sources(fixed_fmts, uq_bits, n_parts=3) -> dict[str, str]:
    """Generated files for format_ref: the fixed formats split into n_parts translation units."""
    parts = [fixed_fmts[k::n_parts] for k in range(n_parts)]
    parts = [p for p in parts if p]
    order = [f for p in parts for f in p]  # the order the program writes them in
    files = {}
    for k, fmts in enumerate(parts):
        calls = "\n".join(f"  cast_fixed<{f.cpp_type}, {wide_type(f)}, {'true' if f.signed else 'false'}>"
                          f"(in, out, n);" for f in fmts)
        files[f"rlhls_fixed_part{k}.cpp"] = (
            f'#include "format_ref.h"\nvoid rlhls_fixed_part{k}(FILE* in, FILE* out, int64_t n) {{\n'
            f"{calls}\n}}\n")
    decls = "".join(f"void rlhls_fixed_part{k}(FILE* in, FILE* out, int64_t n);\n" for k in range(len(parts)))
    files["rlhls_format_list.h"] = (
        "#pragma once\n#include <cstdint>\n#include <cstdio>\n" + decls +
        "#define RLHLS_FIXED_PARTS(X) " + " ".join(f"X({k})" for k in range(len(parts))) + "\n"
        "#define RLHLS_UQ_BITS(X) " + " ".join(f"X({n})" for n in uq_bits) + "\n")
    return files, order


def write_doubles(path: Path, arrays) -> None:
    """int64 count (length of each array), then every array's float64 values."""
    n = len(arrays[0])
    with open(path, "wb") as fh:
        np.array([n], dtype=np.int64).tofile(fh)
        for a in arrays:
            assert len(a) == n
            np.ascontiguousarray(a, dtype=np.float64).tofile(fh)
