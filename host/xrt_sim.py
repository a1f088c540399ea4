"""xrt-sim: a stand-in for the part of XRT's Python API (``pyxrt``) the board backend uses, without a board.

It is not XRT and opens no device binary. ``xclbin(path)`` reads the JSON stand-in of an xclbin that
``host.board.write_sim_xclbin`` writes (the run's kernel table: names, argument formats and sizes); a
kernel runs as XRT's software emulation runs x86-compiled kernels: through its C++ compiled by g++
(the csim backend's shared library of the same HLS top; the AIE data mover through the AIE kernel
sources under the g++ shim). What it checks of the host side, as a board would see it:

* one xclbin load per device (``device.loads``), kernels looked up by name in the loaded xclbin;
* each pointer argument bound to a ``bo`` of the argument's memory group and at least the bytes of
  its N_MAX rows; the scalars an int; every argument set before ``start``;
* host and device memory are separate: a kernel reads what ``sync(XCL_BO_SYNC_BO_TO_DEVICE)`` sent and
  the host sees its results only after ``sync(XCL_BO_SYNC_BO_FROM_DEVICE)`` (counted in ``bo.syncs``).

What only a board checks: that the real xclbin loads, the kernels meet timing and compute the same
bits in hardware, the AIE graph's data movers, and the times.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format

SIM_FORMAT = "rlhls-xrt-sim-xclbin"  # a JSON stand-in of an xclbin, for xrt-sim only
XCL_BO_FLAGS_NONE = 0


class xclBOSyncDirection(enum.IntEnum):  # noqa: N801  (pyxrt's names)
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class ert_cmd_state(enum.IntEnum):  # noqa: N801
    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5


class uuid:  # noqa: N801
    def __init__(self, text: str) -> None:
        self._text = text

    def to_string(self) -> str:
        return self._text


class _XclbinKernel:
    def __init__(self, rec: dict) -> None:
        self.rec = rec

    def get_name(self) -> str:
        return self.rec["name"]

    def get_num_args(self) -> int:
        return len(self.rec["args"])


class xclbin:  # noqa: N801
    """The JSON stand-in of an xclbin (SIM_FORMAT); a real xclbin is refused."""

    def __init__(self, path: str) -> None:
        from rlhls.core.fileio import read_limited


        data = read_limited(Path(path), 16 << 20, "an xrt-sim xclbin holds")
        if data[:8] == b"xclbin2\0":
            raise RuntimeError("a real xclbin: xrt-sim opens only the stand-in rlhls writes (host.board."
                               "write_sim_xclbin); run it on the board with pyxrt")
        try:
            rec = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise RuntimeError("not an xrt-sim xclbin (not JSON)") from None
        if not isinstance(rec, dict) or rec.get("format") != SIM_FORMAT or not isinstance(rec.get("kernels"), list):
            raise RuntimeError(f"not an xrt-sim xclbin (no 'format': '{SIM_FORMAT}' with its kernels)")
        self.rec = rec

    def get_kernels(self) -> list:
        return [_XclbinKernel(k) for k in self.rec["kernels"]]

    def get_uuid(self) -> uuid:
        return uuid(str(self.rec.get("uuid", "0")))


class device:  # noqa: N801
    def __init__(self, index: int = 0) -> None:
        if index != 0:
            raise RuntimeError(f"xrt-sim: no device {index} (one device, index 0)")
        self.loads = 0
        self.xclbin: xclbin | None = None

    def load_xclbin(self, xb: xclbin) -> uuid:
        self.loads += 1
        self.xclbin = xb
        return xb.get_uuid()

    def get_xclbin_uuid(self) -> uuid:
        return self.xclbin.get_uuid() if self.xclbin is not None else uuid("0")


class bo:  # noqa: N801
    """A buffer: host memory and device memory apart, joined by ``sync`` only."""

    class flags(enum.IntEnum):  # noqa: N801
        normal = 0
        cacheable = 1
        device_only = 2
        host_only = 3

    normal = flags.normal

    def __init__(self, dev: device, size: int, flags, group: int) -> None:
        self.dev, self.group = dev, int(group)
        self.host = np.zeros(int(size), np.uint8)
        self.devmem = np.zeros(int(size), np.uint8)
        self.syncs = {"to_device": 0, "from_device": 0}

    def size(self) -> int:
        return int(self.host.size)

    def write(self, buf, seek: int) -> None:
        b = np.frombuffer(memoryview(buf).cast("B"), np.uint8)
        if seek < 0 or seek + b.size > self.host.size:
            raise RuntimeError(f"xrt-sim: bo.write of {b.size} bytes at {seek} past its {self.host.size}")
        self.host[seek:seek + b.size] = b

    def read(self, size: int, skip: int) -> np.ndarray:
        if skip < 0 or skip + size > self.host.size:
            raise RuntimeError(f"xrt-sim: bo.read of {size} bytes at {skip} past its {self.host.size}")
        return self.host[skip:skip + size].copy()

    def sync(self, direction, size: int | None = None, offset: int = 0) -> None:
        size = self.host.size - offset if size is None else int(size)
        if offset < 0 or offset + size > self.host.size:
            raise RuntimeError(f"xrt-sim: bo.sync of {size} bytes at {offset} past its {self.host.size}")
        if direction == xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self.devmem[offset:offset + size] = self.host[offset:offset + size]
            self.syncs["to_device"] += 1
        elif direction == xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE:
            self.host[offset:offset + size] = self.devmem[offset:offset + size]
            self.syncs["from_device"] += 1
        else:
            raise RuntimeError(f"xrt-sim: sync direction {direction!r}")

    def map(self) -> memoryview:
        return memoryview(self.host.data)


class kernel:  # noqa: N801
    class cu_access_mode(enum.IntEnum):  # noqa: N801
        exclusive = 0
        shared = 1

    shared = cu_access_mode.shared
    exclusive = cu_access_mode.exclusive

    def __init__(self, dev: device, xuuid: uuid, name: str, mode=None) -> None:
        xb = dev.xclbin
        if xb is None or xb.get_uuid().to_string() != xuuid.to_string():
            raise RuntimeError("xrt-sim: no such xclbin loaded on the device")
        rec = next((k for k in xb.rec["kernels"] if k["name"] == name), None)
        if rec is None:
            raise RuntimeError(f"xrt-sim: no kernel {name!r} in the xclbin")
        self.dev, self.name, self.rec = dev, name, rec
        self.calls = 0

    def group_id(self, i: int) -> int:
        if not 0 <= i < len(self.rec["args"]):
            raise RuntimeError(f"xrt-sim: kernel {self.name} has no argument {i}")
        return 0  # an embedded platform's one DDR: v++ connects every m_axi port there unless sp= says otherwise

    def __call__(self, *args):
        r = run(self)
        for i, a in enumerate(args):
            r.set_arg(i, a)
        r.start()
        return r


class run:  # noqa: N801
    def __init__(self, k: kernel) -> None:
        self.k = k
        self.args: dict[int, object] = {}
        self._state = ert_cmd_state.ERT_CMD_STATE_NEW

    def set_arg(self, i: int, value) -> None:
        spec = self.k.rec["args"]
        if not 0 <= i < len(spec):
            raise RuntimeError(f"xrt-sim: kernel {self.k.name} has no argument {i}")
        a = spec[i]
        if a["dir"] == "scalar":
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise RuntimeError(f"xrt-sim: {self.k.name} argument {i} ({a['name']}) is a scalar int")
        else:
            if not isinstance(value, bo):
                raise RuntimeError(f"xrt-sim: {self.k.name} argument {i} ({a['name']}) takes a bo")
            if value.size() < a["bytes"]:
                raise RuntimeError(f"xrt-sim: {self.k.name} argument {i} ({a['name']}): bo of {value.size()} bytes, "
                                   f"the port reads up to {a['bytes']}")
            if value.group != self.k.group_id(i):
                raise RuntimeError(f"xrt-sim: {self.k.name} argument {i} ({a['name']}): bo of memory group "
                                   f"{value.group}, the argument's is {self.k.group_id(i)}")
        self.args[i] = value

    def start(self) -> None:
        spec = self.k.rec["args"]
        unset = [a["name"] for i, a in enumerate(spec) if i not in self.args]
        if unset:
            raise RuntimeError(f"xrt-sim: {self.k.name} started without argument(s) {', '.join(unset)}")
        _execute(self.k, spec, self.args)
        self.k.calls += 1
        self._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED

    def wait(self, timeout_ms: int = 0) -> ert_cmd_state:
        return self._state

    def state(self) -> ert_cmd_state:
        return self._state


_csim = None


def _execute(k: kernel, spec: list, args: dict) -> None:
    """The kernel on the device memory of its buffers: inputs decoded, its C++ run, outputs encoded."""
    from .axi_bytes import decode, element_bytes, encode

    scal = {a["name"]: int(args[i]) for i, a in enumerate(spec) if a["dir"] == "scalar"}
    ins = {}
    for i, a in enumerate(spec):
        if a["dir"] != "in":
            continue
        fmt = parse_format(a["fmt"])
        count = _count(a, scal)
        ins[a["name"]] = decode(fmt, args[i].devmem[:count * element_bytes(fmt)].tobytes(), count)
    if k.rec["unit"] == "AIE":
        from rlhls.flow.aie import aie_gemm

        n, kk, m = scal["n"], scal["k"], scal["m"]
        outs = {"c": aie_gemm(ins["a"][:n * kk].reshape(n, kk), ins["b"][:kk * m].reshape(kk, m), ins["bias"][:m])}
    else:
        outs = _run_csim(k.rec, scal.get("n"), ins)
    for i, a in enumerate(spec):
        if a["dir"] == "out":
            data = np.frombuffer(encode(parse_format(a["fmt"]), outs[a["name"]]), np.uint8)
            args[i].devmem[:data.size] = data


def _count(a: dict, scal: dict) -> int:
    if "n" in scal and a["row_size"]:
        if not 1 <= scal["n"] <= a["elems"] // a["row_size"]:
            raise RuntimeError(f"xrt-sim: n = {scal['n']} outside 1..N_MAX")
        return scal["n"] * a["row_size"]
    return a["elems"]


def _run_csim(rec: dict, n: int | None, ins: dict) -> dict:
    """The HLS top's C++ (the csim backend's library) on the decoded inputs."""
    global _csim
    from .backends import _DPTR, CsimBackend

    if _csim is None:
        _csim = CsimBackend()
    lib = _csim.library(rec["kernel"], rec["params"])
    arrays = [np.ascontiguousarray(ins[s.name], dtype=np.float64) for s in lib.ins]
    outs = {s.name: np.empty(int(np.prod(s.shape_at(n) if n else s.shape)), np.float64) for s in lib.outs}
    in_ptrs = (_DPTR * max(1, len(arrays)))(*[x.ctypes.data_as(_DPTR) for x in arrays])
    out_ptrs = (_DPTR * len(outs))(*[o.ctypes.data_as(_DPTR) for o in outs.values()])
    rc = lib.fn(n or 0, in_ptrs, out_ptrs)
    if rc != 0:
        raise RlhlsError(f"xrt-sim: kernel {rec['name']!r} returned {rc}")
    return outs
