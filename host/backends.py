"""Kernel backends for the training loops: one call interface, three executors.

``get_backend(name)`` with name ``emu`` (default: the numpy models of designs/kernels),
``csim`` (the same HLS C++ the flow emits, compiled by g++ with its C ABI wrapper into a
shared library and called through ctypes), ``cosim`` (Vitis C/RTL co-simulation; needs Vitis),
``board`` (the linked xclbin on the device through XRT: host/board.py).

Kernels with a runtime row count (the HLS top's ``n`` <= N_MAX, ``Kernel.rows_param``) take
row arrays of any n rows up to N_MAX; the backends pass n from the array shapes and return
outputs of n rows.

cosim: per (kernel, params, part, clock) one Vitis HLS component is written once under the
cache folder (``flow.build.write_kernel_component``: sources, testbench, hls_config.cfg,
run_hls.tcl); each call writes its inputs as the tb data (``n.txt`` + ``<name>.bin``), runs
the co-simulation with ``RLHLS_TB_OUT=<component>/out`` so the testbench writes
``out_<name>.bin`` (the RTL's results), and reads them back. Unified flow (v++ and vitis-run
on PATH): ``v++ -c --mode hls`` synthesises once per component, then every call runs
``vitis-run --mode hls --cosim --config hls_config.cfg --work_dir work``; classic flow
(vitis_hls only): ``vitis_hls -f run_hls.tcl -tclargs csynth cosim`` per call (the Tcl
script resets its project, so synthesis runs each time). Logs: ``<component>/synth.log``,
``cosim.log``. Calls on one component are serialised with a lock file.

``backend.call(kernel_name, params, **arrays) -> {output name: float64 array}``. Inputs are
float64 arrays of the kernel's shapes; each is rounded to its format on the way in (the model
quantizes, the C++ converts from double with the same single rounding), so emu and csim give
identical bits for identical inputs. Outputs are float64 holding values of their formats
exactly (fixed formats are limited to W <= 53 for this reason).

The csim library of a (kernel, params) pair is built once: the build is cached on disk by
content hash (``core.toolchain.compile_cpp``) and the loaded library per process.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.toolchain import ap_types_include
from rlhls.core.toolchain import cache_dir as default_cache_dir
from rlhls.designs.kernels import get_kernel
from rlhls.flow.csim import build_cached, unity_source, write_sources
from rlhls.flow.kernels import render_kernel
from rlhls.flow.paths import include_dir

from .optim import Adam, Optimizer, RMSprop

if TYPE_CHECKING:
    from rlhls.designs.design import Design
    from rlhls.designs.kernels import Kernel
    from rlhls.designs.kernels.update import WeightUpdate
    from rlhls.flow.kernels import KernelSources
    from rlhls.flow.vitis import VitisTools

__all__ = ["Backend", "EmuBackend", "CsimBackend", "CosimBackend", "get_backend", "check_tools", "BACKENDS"]

BACKENDS = ("emu", "csim", "cosim", "board")


class Backend:
    name = ""

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        raise NotImplementedError


class EmuBackend(Backend):
    """The bit-accurate numpy models."""

    name = "emu"
    _native = False

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        if not EmuBackend._native:  # once per process: the models' compiled twins (same bits, checked)
            EmuBackend._native = True
            from rlhls.flow import native

            native.install()
        k = get_kernel(kernel_name)
        p = k.resolve(params)
        return k.model(p, **k.check_arrays(p, arrays))


_DPTR = ctypes.POINTER(ctypes.c_double)


class _Lib:
    def __init__(self, path: Path, top: str, ins: list, outs: list) -> None:
        self.cdll = ctypes.CDLL(str(path))
        self.fn = getattr(self.cdll, f"{top}_abi")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_int, ctypes.POINTER(_DPTR), ctypes.POINTER(_DPTR)]
        self.ins, self.outs = ins, outs


class CsimBackend(Backend):
    """g++ build of the kernel's HLS C++ + C ABI wrapper (shared library), called via ctypes."""

    name = "csim"

    def __init__(self, cache_dir: Path | str | None = None) -> None:
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

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        k = get_kernel(kernel_name)
        p = k.resolve(params)
        a = k.check_arrays(p, arrays)
        if "AIE" in k.units:  # an AIE kernel: its sources compiled against the g++ shim
            from rlhls.flow.aie import aie_gemm

            return {"c": aie_gemm(a["a"], a["b"], a["bias"])}
        n = k.rows_of(p, a)
        lib = self.library(kernel_name, p)
        ins = [np.ascontiguousarray(a[s.name], dtype=np.float64).ravel() for s in lib.ins]
        outs = {s.name: np.empty(s.shape_at(n) if n else s.shape, dtype=np.float64) for s in lib.outs}
        in_ptrs = (_DPTR * max(1, len(ins)))(*[x.ctypes.data_as(_DPTR) for x in ins])
        out_ptrs = (_DPTR * len(outs))(*[o.ctypes.data_as(_DPTR) for o in outs.values()])
        rc = lib.fn(n or 0, in_ptrs, out_ptrs)
        if rc != 0:
            raise RlhlsError(f"csim backend: kernel {kernel_name!r} returned {rc}")
        return outs


class CosimBackend(Backend):
    """Vitis C/RTL co-simulation of the kernel's HLS component (module docstring). Without
    Vitis on PATH it cannot be created (one clear error)."""

    name = "cosim"
    TOOLS = ("vitis-run", "vitis_hls")
    DEFAULT_DEVICE = "zcu106"

    def __init__(self, cache_dir: Path | str | None = None, *, part: str | None = None,
                 clock_ns: float = 4.0, path: str | None = None) -> None:
        self.tools, self.flow, self.tool = _cosim_tools(path)
        if part is None:
            from rlhls.designs.devices import get_device
            part = get_device(self.DEFAULT_DEVICE).part
        self.part, self.clock_ns = part, float(clock_ns)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "cosim"
        self.runs: list[dict] = []  # every tool step run by this backend (run_step results)

    def component(self, kernel_name: str, p: dict) -> tuple[Path, KernelSources]:
        """The component folder of (kernel, params) (written on first use) and its sources."""
        from rlhls.flow.build import write_kernel_component

        src = render_kernel(kernel_name, p, tb=False)
        key = json.dumps([src.digest(), self.part, self.clock_ns], sort_keys=True)
        d = self.cache_dir / f"{kernel_name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        if not (d / "hls_config.cfg").is_file():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.tmp-", dir=self.cache_dir))
            try:
                write_kernel_component(tmp, src, f"cosim backend ({kernel_name})", self.part, self.clock_ns,
                                       tb_data={f: b"" for f in _tb_names(get_kernel(kernel_name), p)})
                os.rename(tmp, d)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)  # another process wrote it first
                if not (d / "hls_config.cfg").is_file():
                    raise
        return d, src

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        from rlhls.flow.vitis import Step, component_steps, run_step

        k = get_kernel(kernel_name)
        if "PL" not in k.units:
            raise RlhlsError(f"cosim backend: kernel {kernel_name!r} runs on the {', '.join(k.units)}: Vitis HLS "
                             "co-simulation covers PL kernels (use --backend csim for the AIE's shim)")
        p = k.resolve(params)
        a = k.check_arrays(p, arrays)
        n = k.rows_of(p, a)
        d, src = self.component(kernel_name, p)
        ins, outs = k.arrays(p)
        with open(d / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if n is not None:
                (d / "tb" / "n.txt").write_text(f"{n}\n")
            for s in ins:
                (d / "tb" / f"{s.name}.bin").write_bytes(np.ascontiguousarray(a[s.name], dtype="<f8").tobytes())
            out_dir = d / "out"
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir()
            if self.flow == "unified":
                steps = component_steps("unified", self.tools, d, synth=True, cosim=True)
                if (d / ".synth_ok").is_file():
                    steps = [s for s in steps if s.name != "synth"]
            else:
                steps = [Step("cosim", (self.tools.vitis_hls, "-f", str(d.resolve() / "run_hls.tcl"), "-tclargs",
                                        "csynth", "cosim"), d.resolve(), d.resolve() / "cosim.log")]
            for step in steps:
                r = run_step(step, env={"RLHLS_TB_OUT": str(out_dir.resolve())})
                self.runs.append(r)
                if not r["passed"]:
                    raise RlhlsError(f"cosim backend: kernel {kernel_name!r}: {Path(step.argv[0]).name} "
                                     f"({step.name}) exited with code {r['returncode']} (log: {r['log']})")
                if step.name == "synth":
                    (d / ".synth_ok").write_text("ok\n")
            res = {}
            for s in outs:
                f = out_dir / f"out_{s.name}.bin"
                shape = s.shape_at(n) if n else tuple(s.shape)
                if not f.is_file():
                    raise RlhlsError(f"cosim backend: kernel {kernel_name!r}: the testbench wrote no {f.name} "
                                     f"in '{out_dir}' (log: {d / 'cosim.log'})")
                v = np.frombuffer(f.read_bytes(), dtype="<f8")
                if v.size != int(np.prod(shape)):
                    raise RlhlsError(f"cosim backend: kernel {kernel_name!r}: {f.name} holds {v.size} values, "
                                     f"expected {int(np.prod(shape))}")
                res[s.name] = v.astype(np.float64).reshape(shape)
        return res


def _tb_names(k: Kernel, p: dict) -> list[str]:
    """tb data files of a cosim-backend component (contents written per call)."""
    ins, _ = k.arrays(p)
    return (["n.txt"] if k.rows_param else []) + [f"{a.name}.bin" for a in ins]


def _cosim_tools(path: str | None = None) -> tuple[VitisTools, str, str]:
    """(VitisTools, flow, the co-simulating tool) on PATH (or `path`); one line naming what is missing."""
    from rlhls.flow.vitis import find_tools

    tools = find_tools(path)
    if tools.vitis_run is None and tools.vitis_hls is None:
        raise RlhlsError("cosim backend needs Vitis: 'vitis-run' (or 'vitis_hls') not found on PATH")
    if tools.vitis_run and tools.vpp:
        return tools, "unified", tools.vitis_run
    if tools.vitis_hls:
        return tools, "tcl", tools.vitis_hls
    raise RlhlsError("cosim backend needs Vitis: 'v++' not found on PATH next to 'vitis-run' "
                     "(co-simulation runs on the synthesised RTL; source Vitis' settings64.sh)")


def check_tools(name: str) -> None:
    """One line now, before a run writes anything, when the tools backend `name` runs its kernels with
    are missing: g++ and the ap_types headers for ``csim``, Vitis for ``cosim`` (``emu`` needs none)."""
    if name == "csim":
        from rlhls.core.toolchain import find_cxx

        try:
            find_cxx()
        except RlhlsError:
            raise RlhlsError("csim backend needs g++: 'g++' not found on PATH (install g++ >= 9)") from None
        ap_types_include()  # hls4ml's headers: its own line
    elif name == "cosim":
        _cosim_tools()
    elif name == "board":  # its xclbin and XRT: host.board.check_board
        raise RlhlsError("board backend needs --xclbin FILE and XRT (rlhls train DESIGN --backend board --xclbin "
                         "FILE)")
    elif name not in BACKENDS:
        get_backend(name)  # its one line


def get_backend(name: str | Backend = "emu", **kwargs: Any) -> Backend:
    if isinstance(name, Backend):  # opened already (the board backend: its xclbin, once per run)
        return name
    if name == "emu":
        return EmuBackend()
    if name == "csim":
        return CsimBackend(**kwargs)
    if name == "cosim":
        return CosimBackend(**kwargs)
    if name == "board":  # opened with its xclbin once per run (host.board.BoardBackend), then passed as an object
        check_tools("board")
    raise RlhlsError(f"backend {name!r}: unknown (expected one of: {', '.join(BACKENDS)})")


class PlanKernels:
    """The nodes a plan puts on the PL and the AIE, run through a backend inside the training loop.

    A layer node's operations (``forward``: y = x w + b; ``input_grad``: dx = dy w^T;
    ``weight_grad``: dW = x^T dy and db) run through the kernels the build gives that node on its
    unit (``designs.kernels.kernels_for``: the design's own units first, then the dense kernels on
    the PL, the AIE matrix multiply on the AIE), each with the parameters it derives from the node
    (``Kernel.node_params``) at the sizes of the arrays it gets; an operation no chosen kernel
    computes (an input gradient the graph does not need) takes the unit's generic kernel for it.
    Every update node on the PL runs through ``weight_update``. Conv2d layers go through im2col
    (and col2im on the host: the data mover's job). ``compiled`` is False for ``emu``: the layers'
    own numpy arithmetic is then the kernels' model (the same bits) and only the update kernel's
    model is called.
    """

    def __init__(self, design: Design, batch: int, backend: Backend) -> None:
        from rlhls.designs.graph import build_graph
        from rlhls.designs.kernels import KernelContext

        self.ctx = KernelContext(design, build_graph(design, batch))
        self.backend = backend
        self.compiled = backend.name != "emu"
        self._params: dict[tuple, dict] = {}
        self._kernels: dict[tuple[str, str, str], tuple[Kernel, dict]] = {}
        # (node, optimizer's constants, n) -> (kernel, parameters, constants)
        self._upd: dict[tuple, tuple[WeightUpdate, dict, dict | None]] = {}

    def _kernel(self, node: str, unit: str, op: str) -> tuple[Kernel, dict]:
        """(kernel, its parameters for the node) computing `op` of `node` on `unit`."""
        key = (node, unit, op)
        if key not in self._kernels:
            from rlhls.designs.kernels import KERNELS, kernels_for

            gnode = self.ctx.graph.node(node)
            found = next(((k, p) for k, p in kernels_for(gnode, self.ctx, unit) if op in k.layer_ops), None)
            if found is None:  # the unit's generic kernel for it, with the node's forward parameters
                k = next(k for k in KERNELS.values() if k.generic and unit in k.units and op in k.layer_ops)
                fwd = next(g for g in KERNELS.values() if g.generic and unit in g.units and "forward" in g.layer_ops)
                params = fwd.node_params(gnode, self.ctx)
                if params is None:
                    raise RlhlsError(f"node '{node}': no {unit} kernel gives parameters for its {op}")
                found = (k, params)
            self._kernels[key] = found
        return self._kernels[key]

    def params(self, kernel: Kernel, node_params: dict, node: str, **given) -> dict:
        """The kernel's parameters for a node at the sizes of the arrays it gets (``given``: a run on
        another environment resizes the networks), its parallelism within the unrolled dimension."""
        key = (kernel.name, node, tuple(sorted(given.items())))
        if key not in self._params:
            rows = kernel.rows_param  # a runtime row count within the built N_MAX: the built component's
            if rows in given and rows in node_params and given[rows] <= node_params[rows]:
                given = {k: v for k, v in given.items() if k != rows}
            p = {**node_params, **given}
            pf_dim = getattr(kernel, "pf_dim", "n")
            if "pf" in p and pf_dim in p:
                p["pf"] = min(p["pf"], p[pf_dim])
            self._params[key] = kernel.resolve(p)
        return self._params[key]

    def op(self, node: str, unit: str, op: str, **arrays) -> Any:
        """One layer operation of `node` on `unit` through the backend's kernel."""
        k, node_params = self._kernel(node, unit, op)
        return k.run_op(op, self.backend, self.params(k, node_params, node, **k.op_sizes(op, **arrays)), **arrays)

    def _update_params(self, node: str, opt: Optimizer, n: int) -> tuple[WeightUpdate, dict, dict | None]:
        # the run's optimizer; its step size comes at run time (alpha): an annealed rate needs no other library
        extra: dict[str, str | float] = {"optimizer": opt.kind}
        if isinstance(opt, Adam):
            extra.update(beta1=opt.b1, beta2=opt.b2, eps=opt.eps)
        elif isinstance(opt, RMSprop):
            extra.update(rho=opt.alpha, eps=opt.eps)
        key = (node, n, tuple(extra.items()))
        if key not in self._upd:  # resolved once per node and optimizer (a call per layer and step)
            k = cast("WeightUpdate", get_kernel("weight_update"))  # registered by designs/kernels/update.py
            p = self.params(k, k.node_params(self.ctx.graph.node(node), self.ctx), node, n=n, **extra)
            self._upd[key] = (k, p, k.constants(p) if k.fast_fp32 else None)
        return self._upd[key]

    def update_inplace(self, node: str, opt: Optimizer, ws: list, gs: list, state: dict, alpha: float) -> bool:
        """``update`` on a layer's own arrays, array by array, in place (``ws`` and each state
        list updated; ``gs`` their gradients): the emu backend's all-FP32 model is elementwise
        float32 arithmetic, so this gives the flat call's bits without its concatenations. False
        (nothing done) where that model does not apply: a compiled backend, other formats."""
        k, p, c = self._update_params(node, opt, sum(int(w.size) for w in ws))
        if self.compiled or not k.fast_fp32 or not p["storage"] == p["acc"] == "fp32":
            return False
        from rlhls.flow import native

        fast = native.update_kernel()
        for i, w in enumerate(ws):
            if fast is not None and fast(p["optimizer"], c, alpha, w, gs[i], *(state.get(n, [None] * len(ws))[i]
                                                                               for n in ("m", "v"))):
                continue
            a = {"w": w, "g": gs[i], "alpha": (alpha,), **{n: v[i] for n, v in state.items()}}
            for name, v in k._model_fp32(p, a, c).items():
                (w if name == "w_new" else state[name[0]][i])[...] = v
        return True

    def update(self, node: str, opt: Optimizer, w: np.ndarray, g: np.ndarray, state: dict, alpha: float) -> dict:
        """One optimizer step of a PL update node through ``weight_update``: flat float64 arrays
        ``w``, ``g`` and the state (``m``, ``v``) in; {w_new, m_new, v_new} out."""
        k, p, _ = self._update_params(node, opt, int(w.size))
        ins, _ = k.arrays(p)
        arrays = {"w": w, "g": g, "alpha": np.array([alpha]), **state}
        arrays = {a.name: arrays[a.name] for a in ins}
        if not self.compiled:  # the model with the parameters resolved once (a call per layer and step)
            return k.model(p, **arrays)
        return self.backend.call("weight_update", p, **arrays)
