"""C simulation of a rendered kernel: g++ build of top + C ABI wrapper + testbench, then run.

``run_csim(src, workdir, cache_dir)`` writes the sources and tb data into ``workdir``, builds
with ``core.toolchain.compile_cpp`` into ``cache_dir`` (the content-hash cache: unchanged
sources are not recompiled; ``CsimResult.cached`` says so), runs the testbench in ``workdir``
and reports PASS/FAIL with the testbench's line (the first mismatching value on failure).
A build failure is a failed result whose detail names the first compiler error.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_bytes
from rlhls.core.toolchain import ap_types_include, compile_cpp

from .kernels import KernelSources
from .paths import include_dir

__all__ = ["CsimResult", "run_csim", "write_sources"]

TB_TIMEOUT_S = 300


@dataclass
class CsimResult:
    name: str
    passed: bool
    detail: str
    cached: bool
    seconds: float


def _write(path: Path, data) -> None:
    mode = "wb" if isinstance(data, bytes) else "w"
    if path.is_file():
        old = path.read_bytes() if mode == "wb" else path.read_text()
        if old == data:
            return
    atomic_write_bytes(path, data if mode == "wb" else data.encode("utf-8"))


def write_sources(src: KernelSources, workdir: Path, *, tb: bool = True) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for fname, text in {**src.files, **src.tb_files}.items():
        _write(workdir / fname, text)
    if tb:
        for fname, data in src.tb_data.items():
            _write(workdir / fname, data)


def unity_source(src: KernelSources, workdir: Path, *, tb: bool) -> Path:
    """One translation unit including top, ABI wrapper (and testbench): the ap_types headers
    dominate compile time, so they are parsed once."""
    names = [f"{src.top}.cpp", src.abi_file] + ([src.tb_file] if tb else [])
    path = workdir / f"{'csim' if tb else 'lib'}_{src.top}.cpp"
    _write(path, "".join(f'#include "{n}"\n' for n in names))
    return path


def _mtime(p: Path):
    try:
        return p.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def build_cached(sources, output: Path, include_dirs, flags=()) -> bool:
    """compile_cpp, returning True when the cached build was reused (output untouched)."""
    before = _mtime(output)
    compile_cpp(sources, output, include_dirs=include_dirs, flags=flags)
    return before is not None and _mtime(output) == before


def run_csim(src: KernelSources, workdir: Path, cache_dir: Path) -> CsimResult:
    t0 = time.perf_counter()
    workdir, cache_dir = Path(workdir), Path(cache_dir)
    if not src.tb_data:
        raise RlhlsError(f"csim {src.top}: no tb data (render the kernel with tb=True)")
    write_sources(src, workdir)  # the user's copy: sources, testbench and tb data side by side
    digest = src.digest()[:16]
    # Compile from a content-addressed folder: the include path is part of the build hash, so
    # building in workdir would miss the cache whenever the workdir changes.
    build_dir = cache_dir / f"src-{src.top}-{digest}"
    write_sources(src, build_dir, tb=False)
    exe = cache_dir / f"csim-{src.top}-{digest}"
    sources = [unity_source(src, build_dir, tb=True)]
    try:
        cached = build_cached(sources, exe, [build_dir, include_dir(), ap_types_include()], flags=("-w",))
    except RlhlsError as e:
        return CsimResult(src.top, False, f"build failed: {e}", False, time.perf_counter() - t0)
    try:
        res = procs.run([str(exe)], cwd=workdir, capture_output=True, text=True, timeout=TB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return CsimResult(src.top, False, f"testbench timed out after {TB_TIMEOUT_S} s", cached,
                          time.perf_counter() - t0)
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    passed = res.returncode == 0 and any(ln.startswith("PASS") for ln in lines)
    if passed:
        detail = next(ln for ln in lines if ln.startswith("PASS"))
    else:
        detail = next((ln for ln in lines if ln.startswith("FAIL")),
                      f"testbench exited with code {res.returncode}: {(res.stderr or res.stdout).strip()[:300]}")
    return CsimResult(src.top, passed, detail, cached, time.perf_counter() - t0)
