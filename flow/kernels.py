"""Kernel rendering: a registered kernel + parameters -> HLS C++ sources, testbench, tb data.

``render_kernel(name, params, seed=0, component=None)`` resolves the parameters, renders
``vitis/templates/<kernel>.cpp.j2`` (the HLS top: m_axi / s_axilite interfaces, PIPELINE II,
UNROLL and cyclic ARRAY_PARTITION factors from ``ii`` / ``pf``) and ``kernel.h.j2`` (types and
sizes), the C ABI wrapper ``<top>_abi.cpp`` (float64 arrays in and out: used by the
testbench and the csim backend) and the testbench ``tb_<top>.cpp``. The tb data are the
inputs from ``random_inputs(seed)`` and the outputs of the numpy ``model``, one raw float64
file per array (``<name>.bin`` / ``expected_<name>.bin``). Kernels with a runtime row count
(``Kernel.rows_param``: the top's ``s_axilite`` scalar ``n`` <= N_MAX) get tb data of
``tb_rows`` rows (default ``Kernel.tb_rows``: min(N_MAX, 8), 64 elements for weight_update)
and ``n.txt`` holding that n, so csim cost does not grow with the batch while the
synthesized top keeps N_MAX. With ``RLHLS_TB_OUT=<folder>`` in its environment the testbench
writes ``out_<name>.bin`` there instead of comparing (the cosim backend). The top function is named
``component`` (default: the kernel name). Headers from ``vitis/include`` are not copied:
the build adds that folder (and hls4ml's ap_types) to the include path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import jinja2
import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.kernels import get_kernel

from .paths import templates_dir

__all__ = ["KernelSources", "render_kernel"]

_IDENT_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass
class KernelSources:
    name: str
    top: str
    files: dict[str, str]  # header + top .cpp (the HLS sources)
    tb_files: dict[str, str]  # C ABI wrapper + testbench main
    tb_data: dict[str, bytes]
    params: dict = field(default_factory=dict)

    @property
    def abi_file(self) -> str:
        return f"{self.top}_abi.cpp"

    @property
    def tb_file(self) -> str:
        return f"tb_{self.top}.cpp"

    def digest(self, with_tb: bool = True) -> str:
        h = hashlib.sha256()
        for group in (self.files, self.tb_files if with_tb else {self.abi_file: self.tb_files[self.abi_file]}):
            for k in sorted(group):
                h.update(k.encode() + b"\0" + group[k].encode() + b"\0")
        return h.hexdigest()


_envs: dict = {}


def _jinja(extra_dir=None) -> jinja2.Environment:
    """Our templates; a user's kernel's own folder first (ours stay includable from it)."""
    key = str(extra_dir) if extra_dir else ""
    if key not in _envs:
        dirs = ([key] if key else []) + [str(templates_dir())]
        _envs[key] = jinja2.Environment(loader=jinja2.FileSystemLoader(dirs), undefined=jinja2.StrictUndefined,
                                        keep_trailing_newline=True, autoescape=False)
    return _envs[key]


def _literal(v: float) -> str:
    r = repr(float(v))  # shortest round-trip text: the C++ parser gets the same double back
    return r if any(c in r for c in ".en") else r + ".0"


def render_kernel(name: str, params: dict | None = None, *, seed: int = 0, component: str | None = None,
                  tb: bool = True, inputs: dict | None = None, tb_rows: int | None = None) -> KernelSources:
    """C++ sources for kernel `name` (see the module docstring). tb=False skips the tb data
    (no model run; what the csim backend needs); `inputs` replaces the seeded random tb inputs
    (their row count is the tb's n); `tb_rows` the default row count of the random ones."""
    k = get_kernel(name)
    p = k.resolve(params or {})
    top = component or name
    if not top or not set(top) <= _IDENT_OK or top[0].isdigit():
        raise RlhlsError(f"kernel {name!r}: component name {top!r} is not a C++ identifier")
    ins, outs = k.arrays(p)
    fm = k.formats(p)
    types = {key: f.cpp_type for key, f in fm.items()}
    ints = k.cpp_ints(p)
    ctx = dict(
        kernel=name, top=top, ns=f"{top}_t", types=types, ints=ints,
        consts={c: (key, _literal(v)) for c, (key, v) in k.cpp_constants(p).items()},
        ins=[_arr(a) for a in ins], outs=[_arr(a) for a in outs],
        has_n=k.rows_param is not None, n_max=k.max_rows(p), optimizer=p.get("optimizer", ""),
        params_text=json.dumps(p, sort_keys=True), p=p,
    )
    env = _jinja(k.template_dir)
    try:
        files = {f"{top}.h": env.get_template("kernel.h.j2").render(ctx),
                 f"{top}.cpp": env.get_template(k.template).render(ctx)}
        tb_files = {f"{top}_abi.cpp": env.get_template("abi.cpp.j2").render(ctx),
                    f"tb_{top}.cpp": env.get_template("tb.cpp.j2").render(ctx)}
    except jinja2.TemplateError as e:
        raise RlhlsError(f"kernel {name!r}: template {k.template!r} failed to render: {e}") from None
    data = {}
    if tb:
        if inputs is None:
            rows = k.tb_rows(p, tb_rows)
            rng = np.random.default_rng(seed)
            raw = k.random_inputs(p, rng, rows=rows) if rows is not None else k.random_inputs(p, rng)
        else:
            raw = inputs
        inputs = k.quantize_inputs(p, k.check_arrays(p, raw))
        outputs = k.model(p, **inputs)
        if k.rows_param is not None:
            data["n.txt"] = f"{k.rows_of(p, inputs)}\n".encode()
        for a in ins:
            data[f"{a.name}.bin"] = np.ascontiguousarray(inputs[a.name], dtype="<f8").tobytes()
        for a in outs:
            data[f"expected_{a.name}.bin"] = np.ascontiguousarray(outputs[a.name], dtype="<f8").tobytes()
    return KernelSources(name=name, top=top, files=files, tb_files=tb_files, tb_data=data, params=p)


def _arr(a):
    # count: the C++ expression of the element count at run time (n is the top's row count)
    return {"name": a.name, "size": a.size, "fmt_key": a.fmt_key, "rows": a.rows,
            "count": f"n * {a.row_size}" if a.rows else str(a.size)}
