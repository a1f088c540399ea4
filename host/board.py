"""The board backend: the plan's PL and AIE kernels executed in a linked xclbin through XRT.

``BoardBackend(xclbin, design=..., batch=..., assignment=...)`` opens device 0 through XRT's native
Python API (``pyxrt``, installed with XRT on the board) and loads the xclbin once. Its kernel table
(``kernel_table``) is the build's: every PL component of ``flow.mapping.map_design`` for the run's
design, batch and plan (forward layers as rlhls' dense kernels, not hls4ml projects: the training loop
calls them layer by layer), named by the component's HLS top, plus one AIE data mover
(``AIE_MOVER``) for the plan's AIE matrix products. Every kernel name of the table must be in the
xclbin (``xclbin.get_kernels()``), checked before anything is written.

A call ``call(kernel, params, **arrays)`` runs the table's kernel whose (kernel, parameters) it
names. Its arguments follow the HLS top the flow emits (``vitis/templates/_top_head.j2``): one
buffer per input array, one per output array, in the kernel's order, then the row count ``n``
(kernels with one). Each buffer (``bo``, in the argument's memory group ``kernel.group_id(i)``) is
allocated once per (kernel, argument), sized for N_MAX rows in the element width the top's m_axi port
carries (``element_bytes``: the format's C++ type padded to 1, 2, 4 or 8 bytes). Inputs are rounded
to their formats, written and synced to the device (``XCL_BO_SYNC_BO_TO_DEVICE``), outputs synced back
(``..._FROM_DEVICE``) and read. An output ``X_new`` of an input ``X`` (the optimizer's weights and
moments) is the same buffer: the update writes the new weights over the old ones on the device, and an
input the device already holds (the weights after the last step) is neither written nor synced again.

The AIE data mover: ``AIE_MOVER(a, b, bias, c, n, k, m)`` computes c = a b + bias on the AIE graph
through its PLIOs (buffers sized for the graph's largest product). The build does not emit it yet
(the graph's PL data movers are missing, docs/guide/board.md): a real board runs plans without AIE
nodes; ``xrt-sim`` stands in for it.

Timing: the wall clock around ``run.start()`` .. ``run.wait()`` of each call, summed per (kernel,
rows) into ``board_timings.csv`` of the run folder (``write_timings``); ``measured_rows`` turns them
into profile rows with source ``measured-board``.

XRT: ``pyxrt`` where importable; ``RLHLS_XRT=sim`` (or ``xrt='sim'``) takes ``host.xrt_sim`` instead,
the stand-in that runs each kernel through its csim library (tests, no board).
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FloatFormat, NumericFormat
from rlhls.designs.kernels import get_kernel

from .axi_bytes import decode, element_bytes, encode
from .backends import Backend

__all__ = ["BoardBackend", "BoardKernel", "kernel_table", "write_sim_xclbin", "load_xrt", "check_board",
           "element_bytes", "encode", "decode", "TIMINGS", "MEASURED_SOURCE", "read_timings", "write_timings",
           "measured_rows", "run_measured_rows", "is_board_run", "AIE_MOVER"]

AIE_MOVER = "aie_mm_dm"
TIMINGS = "board_timings.csv"
TIMING_COLUMNS = ("kernel", "top", "rows", "calls", "total_s", "min_s", "max_s")
MEASURED_SOURCE = "measured-board"
XRT_ENV = "RLHLS_XRT"


# ---------------------------------------------------------------------------------------------
# the kernel table: what the xclbin holds for a run
# ---------------------------------------------------------------------------------------------


@dataclass
class BoardArg:
    name: str
    dir: str        # 'in' | 'out' | 'scalar'
    fmt: str = ""   # the element format (pointer arguments)
    elems: int = 0  # elements at N_MAX rows
    row_size: int = 0  # elements per row of a row array (0: a fixed-size array)

    @property
    def bytes(self) -> int:
        from rlhls.designs.formats import parse_format

        return element_bytes(parse_format(self.fmt)) * self.elems if self.fmt else 0

    def to_json(self) -> dict:
        return {"name": self.name, "dir": self.dir, "fmt": self.fmt, "elems": self.elems,
                "row_size": self.row_size, "bytes": self.bytes}


@dataclass
class BoardKernel:
    name: str          # the kernel's name in the xclbin (the HLS top)
    kernel: str        # the registered kernel it runs
    params: dict       # its resolved parameters (PL); the largest product's (the AIE mover)
    unit: str          # 'PL' | 'AIE'
    args: list = field(default_factory=list)
    nodes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "kernel": self.kernel, "unit": self.unit, "params": self.params,
                "nodes": list(self.nodes), "args": [a.to_json() for a in self.args]}


def _key(kernel: str, params: dict) -> str:
    from rlhls.flow.mapping import jsonable

    return kernel + json.dumps(jsonable(params), sort_keys=True)


def _fmt_text(fmt: NumericFormat) -> str:
    """A format's text that parse_format reads back (fp64 is written float<11,52>)."""
    if isinstance(fmt, FloatFormat) and str(fmt) not in ("fp32", "fp16", "bf16"):
        return f"float<{fmt.exp_bits},{fmt.man_bits}>"
    return str(fmt)


def _pl_args(kernel: str, p: dict) -> list[BoardArg]:
    k = get_kernel(kernel)
    ins, outs = k.arrays(p)
    fm = k.formats(p)
    args = [BoardArg(a.name, d, _fmt_text(fm[a.fmt_key]), a.size, a.row_size if a.rows else 0)
            for d, group in (("in", ins), ("out", outs)) for a in group]
    if k.rows_param:
        args.append(BoardArg("n", "scalar"))
    return args


def kernel_table(design, batch: int, assignment: dict | None, points: dict | None = None) -> list[BoardKernel]:
    """The kernels a run's xclbin holds: the build's PL components (``map_design`` without hls4ml) and
    the AIE data mover sized for the largest product of the plan's AIE nodes. `assignment` None: every
    node on the PL (the build of a run without a plan); `points`: the plan's design points."""
    from rlhls.designs.graph import build_graph
    from rlhls.flow.aie import node_gemms
    from rlhls.flow.mapping import jsonable, map_design

    graph = build_graph(design, batch)
    assignment = assignment or {n.name: "PL" for n in graph.nodes}
    m = map_design(design, graph, assignment, hls4ml=False, points=points)
    table = [BoardKernel(c.name, c.kernel, jsonable(c.params), "PL", _pl_args(c.kernel, c.params), list(c.nodes))
             for c in m.components if c.kind == "kernel"]
    if m.aie_nodes:
        gemms = [g for n in m.aie_nodes for g in node_gemms(design, graph, n)]
        big = {"a": max(g.M * g.K for g in gemms), "b": max(g.K * g.N for g in gemms),
               "bias": max(g.N for g in gemms), "c": max(g.M * g.N for g in gemms)}
        # bf16 operands and results: what the AIE kernels take and give (flow.aie.aie_gemm)
        args = [BoardArg(n, "in" if n != "c" else "out", "bf16", v) for n, v in big.items()]
        args += [BoardArg(x, "scalar") for x in ("n", "k", "m")]
        table.append(BoardKernel(AIE_MOVER, "mm_aie", {"max": big}, "AIE", args, list(m.aie_nodes)))
    return table


def write_sim_xclbin(path, design, batch: int, assignment: dict | None, points: dict | None = None) -> Path:
    """The xrt-sim stand-in of the run's xclbin: a JSON file naming the kernel table (an xclbin for
    ``host.xrt_sim`` only; XRT does not open it)."""
    from rlhls.core.fileio import atomic_write_text

    table = kernel_table(design, batch, assignment, points)
    from .xrt_sim import SIM_FORMAT

    rec = {"format": SIM_FORMAT, "note": "xrt-sim stand-in of an xclbin; not a device binary",
           "design": design.name, "batch": batch, "kernels": [k.to_json() for k in table]}
    text = json.dumps(rec, indent=1) + "\n"
    rec["uuid"] = hashlib.sha256(text.encode()).hexdigest()[:32]
    atomic_write_text(Path(path), json.dumps(rec, indent=1) + "\n")
    return Path(path)


# ---------------------------------------------------------------------------------------------
# XRT
# ---------------------------------------------------------------------------------------------


def load_xrt(xrt: str | None = None):
    """``pyxrt``, or the stand-in ``host.xrt_sim`` where asked (`xrt` 'sim', or RLHLS_XRT=sim)."""
    want = xrt if xrt is not None else os.environ.get(XRT_ENV, "") or "pyxrt"
    if want == "sim":
        from . import xrt_sim

        return xrt_sim
    if want != "pyxrt":
        raise RlhlsError(f"{XRT_ENV}={want!r}: expected 'pyxrt' (XRT on the board) or 'sim' (the xrt-sim stand-in)")
    try:
        return importlib.import_module("pyxrt")
    except ImportError:
        raise RlhlsError("board backend needs XRT's Python API: 'pyxrt' cannot be imported (it comes with XRT on "
                         f"the board: source /opt/xilinx/xrt/setup.sh; {XRT_ENV}=sim runs the xrt-sim stand-in "
                         "without a board)") from None


def _open_xclbin(xrt, xclbin) -> tuple[Any, list[str]]:
    path = Path(xclbin)
    if not path.is_file():
        raise RlhlsError(f"--xclbin '{xclbin}': no such file (the xclbin `v++ --package` made: "
                         "link/<design>.xclbin of the build)")
    try:
        xb = xrt.xclbin(str(path))
        names = [k.get_name() for k in xb.get_kernels()]
    except RlhlsError:
        raise
    except Exception as e:  # pyxrt raises RuntimeError for a file that is not an xclbin
        raise RlhlsError(f"--xclbin '{xclbin}': not an xclbin XRT can open ({str(e).splitlines()[0][:200]})") from None
    return xb, names


def check_board(xclbin, xrt: str | None = None) -> None:
    """One line now, before a run writes anything: no XRT, no xclbin, a file that is not one."""
    if xclbin is None:
        raise RlhlsError("--backend board needs --xclbin FILE (the design's xclbin, made by `rlhls build "
                         "--platform P --link`)")
    _open_xclbin(load_xrt(xrt), xclbin)


class BoardBackend(Backend):
    """The plan's kernels in the xclbin on the device (module docstring)."""

    name = "board"

    def __init__(self, xclbin, *, design, batch: int, assignment: dict | None, points: dict | None = None,
                 xrt: str | None = None) -> None:
        self.xrt = load_xrt(xrt)
        self.xclbin_path = Path(xclbin)
        xb, names = _open_xclbin(self.xrt, xclbin)
        self.table = {k.name: k for k in kernel_table(design, batch, assignment, points)}
        missing = [n for n in self.table if n not in names]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise RlhlsError(f"--xclbin '{xclbin}': holds no kernel {', '.join(missing[:3])}{more} of design "
                             f"'{design.name}' at this plan (it holds {', '.join(names[:6]) or 'none'}): an xclbin "
                             "of another design or plan")
        self._by_key = {_key(k.kernel, k.params): k for k in self.table.values() if k.unit == "PL"}
        self.device = self.xrt.device(0)
        self.uuid = self.device.load_xclbin(xb)  # once: weights stay in device buffers between calls
        self._kernels: dict[str, Any] = {}
        self._bos: dict[tuple[str, str], Any] = {}
        self._held: dict[int, bytes] = {}  # id(bo) -> the bytes the device holds at its start
        self.timings: dict[tuple[str, str, int], list] = {}  # (kernel, top, rows) -> [calls, total, min, max]
        self.syncs = {"to_device": 0, "from_device": 0, "skipped": 0}

    def _entry(self, kernel_name: str, p: dict) -> BoardKernel:
        k = get_kernel(kernel_name)
        if "AIE" in k.units:
            e = self.table.get(AIE_MOVER)
        else:
            e = self._by_key.get(_key(kernel_name, p))
        if e is None:
            raise RlhlsError(f"board backend: the xclbin's kernel table has no {kernel_name} with parameters "
                             f"{json.dumps(p, sort_keys=True)[:200]}")
        return e

    def _kernel(self, e: BoardKernel):
        if e.name not in self._kernels:
            x = self.xrt
            self._kernels[e.name] = x.kernel(self.device, self.uuid, e.name, x.kernel.shared)
        return self._kernels[e.name]

    def _bo(self, e: BoardKernel, i: int, arg: BoardArg):
        alias = arg.name[:-4] if arg.dir == "out" and arg.name.endswith("_new") else arg.name
        key = (e.name, alias)
        if key not in self._bos:
            x = self.xrt
            self._bos[key] = x.bo(self.device, max(arg.bytes, 1), x.bo.normal, self._kernel(e).group_id(i))
        return self._bos[key]

    def call(self, kernel_name: str, params: dict, **arrays) -> dict:
        from rlhls.designs.formats import parse_format

        k = get_kernel(kernel_name)
        p = k.resolve(params)
        a = k.quantize_inputs(p, k.check_arrays(p, arrays))
        e = self._entry(kernel_name, p)
        aie = e.unit == "AIE"
        ins, outs = k.arrays(p)
        n = k.rows_of(p, a)
        x = self.xrt
        sync = x.xclBOSyncDirection
        to_dev, from_dev = sync.XCL_BO_SYNC_BO_TO_DEVICE, sync.XCL_BO_SYNC_BO_FROM_DEVICE
        run = x.run(self._kernel(e))
        pos = {arg.name: i for i, arg in enumerate(e.args)}
        for spec in ins:
            i = pos[spec.name]
            arg = e.args[i]
            data = encode(parse_format(arg.fmt), a[spec.name])
            if len(data) > arg.bytes:
                raise RlhlsError(f"board backend: {e.name}.{arg.name}: {len(data)} bytes over its buffer's "
                                 f"{arg.bytes}")
            bo = self._bo(e, i, arg)
            if self._held.get(id(bo)) != data:  # what the device holds already is not sent again
                bo.write(np.frombuffer(data, np.uint8), 0)
                bo.sync(to_dev, len(data), 0)
                self._held[id(bo)] = data
                self.syncs["to_device"] += 1
            else:
                self.syncs["skipped"] += 1
            run.set_arg(i, bo)
        shapes = {}
        for spec in outs:
            i = pos[spec.name]
            bo = self._bo(e, i, e.args[i])
            run.set_arg(i, bo)
            shapes[spec.name] = spec.shape_at(n) if n else tuple(spec.shape)
        if aie:
            nn, kk = a["a"].shape
            for name, v in (("n", nn), ("k", kk), ("m", a["b"].shape[1])):
                run.set_arg(pos[name], int(v))
            shapes["c"] = (nn, a["b"].shape[1])
        elif n is not None:
            run.set_arg(pos["n"], int(n))
        t0 = time.perf_counter()
        run.start()
        state = run.wait()
        dt = time.perf_counter() - t0
        if "COMPLETED" not in getattr(state, "name", str(state)):
            raise RlhlsError(f"board backend: kernel {e.name} ended in state {state}")
        rows = n if n is not None else (a["a"].shape[0] if aie else 0)
        t = self.timings.setdefault((kernel_name, e.name, rows), [0, 0.0, dt, dt])
        t[0], t[1], t[2], t[3] = t[0] + 1, t[1] + dt, min(t[2], dt), max(t[3], dt)
        res = {}
        for spec in outs:
            i = pos[spec.name]
            arg = e.args[i]
            fmt = parse_format(arg.fmt)
            count = int(np.prod(shapes[spec.name]))
            size = element_bytes(fmt) * count
            bo = self._bo(e, i, arg)
            bo.sync(from_dev, size, 0)
            self.syncs["from_device"] += 1
            raw = bytes(bo.read(size, 0))
            if arg.name.endswith("_new"):  # the input's buffer, updated in place
                self._held[id(bo)] = raw
            else:
                self._held.pop(id(bo), None)
            res[spec.name] = decode(fmt, raw, count).reshape(shapes[spec.name])
        return res

    def timing_rows(self) -> list[dict]:
        return [{"kernel": k, "top": top, "rows": rows, "calls": c, "total_s": tot, "min_s": lo, "max_s": hi}
                for (k, top, rows), (c, tot, lo, hi) in sorted(self.timings.items())]


# ---------------------------------------------------------------------------------------------
# timings in the run folder, and as profile rows
# ---------------------------------------------------------------------------------------------


def read_timings(folder) -> list[dict]:
    """The rows of a board run's ``board_timings.csv`` (RlhlsError naming the file if malformed)."""
    from rlhls.core.fileio import read_limited

    path = Path(folder) / TIMINGS
    if not path.is_file():
        raise RlhlsError(f"--measured '{folder}': no {TIMINGS} (a run of `rlhls train --backend board` writes it)")
    try:
        text = read_limited(path, 16 << 20, "a timings file holds").decode()
        rd = csv.DictReader(io.StringIO(text))
        if tuple(rd.fieldnames or ()) != TIMING_COLUMNS:
            raise ValueError(f"columns {rd.fieldnames}, expected {', '.join(TIMING_COLUMNS)}")
        rows = []
        for r in rd:
            calls, times = int(r["calls"]), [float(r[c]) for c in ("total_s", "min_s", "max_s")]
            if calls < 1 or not all(np.isfinite(t) and t >= 0 for t in times):
                raise ValueError(f"row {r['top']}: calls >= 1 and finite times >= 0 expected")
            row = {"kernel": r["kernel"], "top": r["top"], "rows": int(r["rows"]), "calls": calls,
                   "total_s": times[0], "min_s": times[1], "max_s": times[2]}
            rows.append(row)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise RlhlsError(f"'{path}': not a board timings file ({e})") from None
    return rows


def write_timings(folder, backend: BoardBackend) -> Path:
    """Add this process's calls to the run folder's ``board_timings.csv`` (a resumed run's too)."""
    from rlhls.core.fileio import atomic_write_text

    merged: dict[tuple, list] = {}
    if (Path(folder) / TIMINGS).is_file():
        for r in read_timings(folder):
            merged[(r["kernel"], r["top"], r["rows"])] = [r["calls"], r["total_s"], r["min_s"], r["max_s"]]
    for r in backend.timing_rows():
        k = (r["kernel"], r["top"], r["rows"])
        old = merged.get(k)
        merged[k] = ([r["calls"], r["total_s"], r["min_s"], r["max_s"]] if old is None else
                     [old[0] + r["calls"], old[1] + r["total_s"], min(old[2], r["min_s"]), max(old[3], r["max_s"])])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(TIMING_COLUMNS)
    for (kern, top, rows), (c, tot, lo, hi) in sorted(merged.items()):
        w.writerow([kern, top, rows, c, repr(float(tot)), repr(float(lo)), repr(float(hi))])
    path = Path(folder) / TIMINGS
    atomic_write_text(path, buf.getvalue())
    from .runfolder import record_files

    record_files(Path(folder), None)  # the file is the run's own
    return path


def measured_rows(rows: list, timings: list[dict], design, batch: int, assignment: dict | None,
                  points: dict | None, where: str) -> tuple[list, list[str]]:
    """Profile `rows` with each node a measured PL kernel implements on one row of source
    ``measured-board``: latency = the mean time per call of its kernel at the graph's batch (else the
    most rows measured), summed over the kernels the node takes (a backward pass: input and weight
    gradients). Nodes the run did not time keep their rows. Returns (rows, notes)."""
    from rlhls.partition.calibrate import _point
    from rlhls.partition.profile_io import ProfileRow

    table = kernel_table(design, batch, assignment, points)
    known = {k.name: k for k in table}
    per_top: dict[str, dict] = {}
    for t in timings:
        if t["top"] not in known:
            raise RlhlsError(f"{where}: kernel {t['top']!r} is no kernel of design '{design.name}' at this plan (a "
                             "board run of another design or plan)")
        best = per_top.get(t["top"])
        if best is None or (t["rows"] == batch) > (best["rows"] == batch) or \
                ((t["rows"] == batch) == (best["rows"] == batch) and t["rows"] > best["rows"]):
            per_top[t["top"]] = t
    node_us: dict[str, list] = {}
    node_kernels: dict[str, list] = {}
    for top, t in per_top.items():
        k = known[top]
        if k.unit != "PL":
            continue
        for node in k.nodes:
            node_us.setdefault(node, []).append(t["total_s"] / t["calls"] * 1e6)
            node_kernels.setdefault(node, []).append({"params": k.params})
    out, done = [], set()
    for r in rows:
        if r.unit == "PL" and r.node in node_us:
            if r.node in done:
                continue
            done.add(r.node)
            out.append(ProfileRow(r.node, "PL", float(sum(node_us[r.node])), _point(node_kernels[r.node]),
                                  dict(r.resources), None, r.flops, MEASURED_SOURCE, None, r.runs))
        else:
            out.append(r)
    notes = []
    if not node_us:
        notes.append("no PL kernel of the run was timed: every row stays on the model")
    return out, notes


def is_board_run(run_folder) -> bool:
    folder = Path(run_folder)
    return (folder / TIMINGS).is_file() or (folder / "train" / TIMINGS).is_file()


def run_measured_rows(run_folder, rows: list, design_name: str, *, given=None) -> tuple[list, list[str]]:
    """`rows` (a profile of the run's design at its batch) with the board run `run_folder`'s timed
    kernels as ``measured-board`` rows (``measured_rows``), its design, batch and plan as it recorded
    them (``config.json``). RlhlsError (one line) for a folder that is no board run."""
    from rlhls.core.fileio import owned_file, read_json

    from .bound import bind_recorded

    folder = Path(run_folder)
    if (folder / "train" / "config.json").is_file() and not (folder / "config.json").is_file():
        folder = folder / "train"  # rlhls run's folder
    where = f"--measured '{run_folder}'"
    if not (folder / "config.json").is_file():
        raise RlhlsError(f"{where}: no config.json (expected the folder of a `rlhls train --backend board` run)")
    for name in ("config.json", TIMINGS):  # never read through a link out of the run folder
        if (folder / name).exists():
            owned_file(folder, name)
    cfg = read_json(folder / "config.json")
    if not isinstance(cfg, dict) or cfg.get("backend") != "board":
        raise RlhlsError(f"{where}: a run of backend {cfg.get('backend') if isinstance(cfg, dict) else None!r}, "
                         "not 'board' (its times are not the device's)")
    if cfg.get("design") != design_name:
        raise RlhlsError(f"{where}: a run of design {str(cfg.get('design'))[:60]!r}, not '{design_name}'")
    run = bind_recorded(cfg, given=given, where=f"'{folder / 'config.json'}'")
    design = run.design
    points = cfg.get("plan_points") if isinstance(cfg.get("plan_points"), dict) else None
    if points:
        design = design.at_points(points)
    plan = cfg.get("plan") if isinstance(cfg.get("plan"), dict) else None
    assert run.algorithm is not None
    return measured_rows(rows, read_timings(folder), design, run.algorithm.batch(run.hyperparams), plan, points,
                         where)
