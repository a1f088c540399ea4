"""Kernel backends for the training loops: one call interface, three executors.

``get_backend(name)`` with name ``emu`` (default: the numpy models of designs/kernels),
``csim`` (the same HLS C++ the flow emits, compiled by g++ with its C ABI wrapper into a
shared library and called through ctypes), ``cosim`` (Vitis co-simulation; needs Vitis).

``backend.call(kernel_name, params, **arrays) -> {output name: float64 array}``. Inputs are
float64 arrays of the kernel's shapes; each is rounded to its format on the way in (the model
quantizes, the C++ converts from double with the same single rounding), so emu and csim give
identical bits for identical inputs. Outputs are float64 holding values of their formats
exactly (fixed formats are limited to W <= 53 for this reason).

The csim library of a (kernel, params) pair is built once: the build is cached on disk by
content hash (``flow.toolchain.compile_cpp``) and the loaded library per process.
"""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import numpy as np

from rlhls.designs.errors import RlhlsError
from rlhls.designs.kernels import get_kernel
from rlhls.flow.csim import build_cached, unity_source, write_sources
from rlhls.flow.kernels import render_kernel
from rlhls.flow.paths import cache_dir as default_cache_dir
from rlhls.flow.paths import include_dir
from rlhls.flow.toolchain import ap_types_include

__all__ = ["Backend", "EmuBackend", "CsimBackend", "CosimBackend", "get_backend", "BACKENDS"]

BACKENDS = ("emu", "csim", "cosim")


class Backend:
    name = ""

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        raise NotImplementedError


class EmuBackend(Backend):
    """The bit-accurate numpy models."""

    name = "emu"

    def call(self, kernel_name, params, **arrays):
        k = get_kernel(kernel_name)
        p = k.resolve(params)
        return k.model(p, **k.check_arrays(p, arrays))


_DPTR = ctypes.POINTER(ctypes.c_double)


class _Lib:
    def __init__(self, path: Path, top: str, ins, outs):
        self.cdll = ctypes.CDLL(str(path))
        self.fn = getattr(self.cdll, f"{top}_abi")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.POINTER(_DPTR), ctypes.POINTER(_DPTR)]
        self.ins, self.outs = ins, outs


class CsimBackend(Backend):
    """g++ build of the kernel's HLS C++ + C ABI wrapper (shared library), called via ctypes."""

    name = "csim"

    def __init__(self, cache_dir: Path | str | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "csim-lib"
        self._libs: dict[str, _Lib] = {}
        self.built = 0  # libraries compiled (not taken from the disk cache) by this backend

    def library(self, kernel_name: str, params: dict) -> _Lib:
        k = get_kernel(kernel_name)
        p = k.resolve(params)
        key = kernel_name + json.dumps(p, sort_keys=True)
        lib = self._libs.get(key)
        if lib is None:
            src = render_kernel(kernel_name, p, tb=False)
            digest = src.digest(with_tb=False)[:16]
            work = self.cache_dir / f"src-{kernel_name}-{digest}"
            write_sources(src, work, tb=False)
            so = self.cache_dir / f"lib{kernel_name}-{digest}.so"
            cached = build_cached([unity_source(src, work, tb=False)], so,
                                  [work, include_dir(), ap_types_include()], flags=("-shared", "-fPIC", "-w"))
            self.built += 0 if cached else 1
            ins, outs = k.arrays(p)
            lib = self._libs[key] = _Lib(so, src.top, ins, outs)
        return lib

    def call(self, kernel_name, params, **arrays):
        k = get_kernel(kernel_name)
        p = k.resolve(params)
        a = k.check_arrays(p, arrays)
        lib = self.library(kernel_name, p)
        ins = [np.ascontiguousarray(a[s.name], dtype=np.float64).ravel() for s in lib.ins]
        outs = {s.name: np.empty(s.shape, dtype=np.float64) for s in lib.outs}
        in_ptrs = (_DPTR * max(1, len(ins)))(*[x.ctypes.data_as(_DPTR) for x in ins])
        out_ptrs = (_DPTR * len(outs))(*[o.ctypes.data_as(_DPTR) for o in outs.values()])
        rc = lib.fn(in_ptrs, out_ptrs)
        if rc != 0:
            raise RlhlsError(f"csim backend: kernel {kernel_name!r} returned {rc}")
        return outs


class CosimBackend(Backend):
    """Vitis co-simulation. Without Vitis on PATH it cannot be created (one clear error)."""

    name = "cosim"
    TOOLS = ("vitis-run", "vitis_hls")

    def __init__(self):
        self.tool = next((shutil.which(t) for t in self.TOOLS if shutil.which(t)), None)
        if self.tool is None:
            raise RlhlsError("cosim backend needs Vitis: 'vitis-run' (or 'vitis_hls') not found on PATH")

    def call(self, kernel_name, params, **arrays):
        raise RlhlsError(f"cosim backend: calling kernel {kernel_name!r} per step under Vitis "
                         f"co-simulation ({self.tool}) is not implemented yet; use --backend csim")


def get_backend(name: str = "emu", **kwargs) -> Backend:
    if name == "emu":
        return EmuBackend()
    if name == "csim":
        return CsimBackend(**kwargs)
    if name == "cosim":
        return CosimBackend()
    raise RlhlsError(f"backend {name!r}: unknown (expected one of: {', '.join(BACKENDS)})")
