"""A C library built for this machine, to be loaded with ctypes: ``build_library(name, source)``.

The source is written into ``cache_dir() / 'native'`` under a name carrying its hash (checkouts with
other sources sharing the cache do not rebuild in turns) and compiled with ``toolchain.compile_cpp``
(g++, content-hash cache) with ``FLAGS`` and ``-march=native``; the library's name carries the CPU's
flags, so a cache shared between machines never loads code built for another CPU. A compiler
without ``-march=native`` gets a portable build. Whoever loads a library checks it bit for bit
against its numpy model before using it (``rlhls.flow.native``, ``rlhls.host.optim_native``);
``enabled()`` is False under ``RLHLS_NATIVE=0``, and then the numpy models run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from pathlib import Path

from .fileio import atomic_write_text
from .toolchain import cache_dir, compile_cpp

__all__ = ["FLAGS", "build_library", "enabled"]

log = logging.getLogger(__name__)

# no reassociation (-fno-fast-math), no FMA (-ffp-contract=off): every operation rounds as numpy's;
# -fno-math-errno: sqrtf is then the correctly rounded instruction, as with errno, but vectorises (the
# optimizer loops ~10x, and they keep the pace when their moments turn subnormal)
FLAGS = ("-O3", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=off", "-Wno-psabi", "-shared", "-fPIC")


def enabled() -> bool:
    return os.environ.get("RLHLS_NATIVE", "1") != "0"


def _machine() -> str:
    """Short tag of the CPU: -march=native code is only valid where it was built."""
    flags = ""
    try:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()}|{flags}".encode()).hexdigest()[:12]


def build_library(name: str, source: str) -> Path:
    """The shared library of C++ `source` (built once per source, compiler and CPU; see the module
    docstring); raises what the compiler raises."""
    folder = cache_dir() / "native"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    src = folder / f"{name}.cpp"
    if not src.is_file() or src.read_text() != source:
        atomic_write_text(src, source)  # a concurrent builder always hashes a whole file
    try:
        return compile_cpp([src], folder / f"{name}-{_machine()}.so", flags=(*FLAGS, "-march=native"))
    except Exception as e:  # noqa: BLE001 -- a compiler without -march=native: portable build
        log.debug("native %s: -march=native build failed (%s), building without it", name, e)
        return compile_cpp([src], folder / f"{name}.so", flags=FLAGS)
