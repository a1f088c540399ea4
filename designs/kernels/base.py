"""The kernel interface: parameters (validated), a bit-accurate numpy model, test vectors,
a cycle/resource model, and the binding to a C++ template in ``vitis/templates``.

A kernel's resolved parameters ``p`` are a plain dict (formats as their canonical text, so
``p`` is JSON-serialisable and the same parameters always render the same C++). Arrays cross
every boundary (tb data, the csim backend's C ABI) as float64: each value is representable in
its format and every fixed format is limited to W <= 53, so float64 carries it exactly.

The C++ binding of a kernel is ``template`` (``vitis/templates/<template>``), the compile-time
constants of ``cpp_constants(p)``, and ``arrays(p)``: the top function's arguments, inputs
then outputs, each an ``Array(name, shape, fmt_key)`` whose element type is the format
``p[fmt_key]`` (typedef ``<fmt_key>_t`` in the generated header).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlhls.core.errors import RlhlsError

from ..formats import FixedFormat, FloatFormat, NumericFormat, parse_format

__all__ = ["Param", "Array", "Kernel", "FORMAT_NOTE", "check_formats"]

FORMAT_NOTE = "fixed<W,I,...> / ufixed<...> with W <= 53, fp32, fp16 or bf16"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # 'int' | 'ints' (a list of ints) | 'float' | 'str' | 'format' | 'bool'
    default: object
    doc: str
    choices: tuple = ()
    min: float | None = None
    # the algorithm's hyperparameter of the same meaning (one value reaches the build and the
    # training: Design.bind)
    hyperparam: str | None = None

    def describe(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "default": self.default, "doc": self.doc}
        if self.choices:
            d["choices"] = list(self.choices)
        if self.min is not None:
            d["min"] = self.min
        if self.hyperparam is not None:
            d["hyperparam"] = self.hyperparam
        return d


@dataclass(frozen=True)
class Array:
    name: str
    shape: tuple
    fmt_key: str  # key of p holding the element format
    rows: bool = False  # shape[0] is the runtime row count n (<= N_MAX = shape[0])

    @property
    def size(self) -> int:
        """Elements at the compile-time maximum (the m_axi depth)."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def row_size(self) -> int:
        """Elements per row (rows arrays) or the whole size (fixed arrays)."""
        return int(np.prod(self.shape[1:], dtype=np.int64)) if self.rows else self.size

    def size_at(self, n: int) -> int:
        """Elements for runtime row count n."""
        return n * self.row_size if self.rows else self.size

    def shape_at(self, n: int) -> tuple:
        return (n, *self.shape[1:]) if self.rows else tuple(self.shape)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def check_formats(kname: str, p: dict, keys=("storage", "acc")) -> dict[str, NumericFormat]:
    """Parse p[keys]: all fixed (W <= 53) or all fp32/fp16/bf16. Returns {key: format}."""
    out: dict[str, NumericFormat] = {}
    for key in keys:
        f = parse_format(p[key])
        if isinstance(f, FixedFormat):
            if f.width > 53:
                raise RlhlsError(f"kernel {kname!r}: parameter {key!r} = {str(f)!r} is wider than 53 bits "
                                 f"(arrays cross the C ABI as float64; expected {FORMAT_NOTE})")
        elif isinstance(f, FloatFormat):
            if str(f) not in ("fp32", "fp16", "bf16"):
                raise RlhlsError(f"kernel {kname!r}: parameter {key!r} = {str(f)!r} has no C++ type "
                                 f"(expected {FORMAT_NOTE})")
        else:
            raise RlhlsError(f"kernel {kname!r}: parameter {key!r} = {str(f)!r} is not supported "
                             f"(expected {FORMAT_NOTE})")
        out[key] = f
    kinds = {type(f) for f in out.values()}
    if len(kinds) > 1:
        txt = ", ".join(f"{k}={v}" for k, v in out.items())
        raise RlhlsError(f"kernel {kname!r}: formats {txt} mix fixed and float "
                         "(expected all fixed or all float)")
    return out


TB_ROWS = 8  # rows of the generated testbench data (min(N_MAX, TB_ROWS)): csim stays fast for any batch


class Kernel:
    """One hardware kernel. Subclasses set the class attributes and implement the hooks.

    Runtime rows: where ``rows_param`` names a parameter (``n``), that parameter is the
    compile-time maximum N_MAX and the HLS top takes the actual row count as an ``s_axilite``
    scalar ``n`` (1 <= n <= N_MAX); arrays marked ``Array.rows`` have n rows at run time.
    Models, check_arrays and the backends take any such n; the testbench data use
    ``tb_rows(p)`` rows so csim cost does not grow with the batch.
    """

    name: str = ""
    summary: str = ""
    source: str = ""  # seed section it comes from
    params: tuple = ()
    inputs: tuple = ()
    outputs: tuple = ()
    template: str = ""  # vitis/templates/<template> (or template_dir/<template>)
    template_dir: str | None = None  # a user's kernel: the folder of its templates (ours stay includable)
    rows_param: str | None = None  # parameter holding N_MAX of the runtime row count n
    # -- what the kernel implements in a training graph (the build and the profiler ask these)
    units: tuple = ("PL",)  # units its hardware runs on
    implements: tuple = ()  # training-graph node kinds it computes (graph.Node.kind)
    generic: bool = False  # also for designs that do not name it (the dense library, the optimizer)
    replaces: tuple = ()  # generic kernels it stands in for where a design names it
    component_suffix: str = ""  # build component name: <instance>_<layer>_<suffix> (else the kernel name)
    # -- in training (host/backends.py PlanKernels): the layer operations it computes for a node,
    # of "forward" (x, w, b -> y), "input_grad" (dy, w -> dx), "weight_grad" (x, dy -> (dw, db | None))
    layer_ops: tuple = ()

    # -- parameters
    def _err(self, text: str) -> RlhlsError:
        return RlhlsError(f"kernel {self.name!r}: {text}")

    def param(self, name: str) -> Param:
        for q in self.params:
            if q.name == name:
                return q
        raise self._err(f"unknown parameter {name!r} (expected one of: "
                        f"{', '.join(q.name for q in self.params)})")

    def _convert(self, q: Param, value):
        where = f"parameter {q.name!r} = {value!r}"
        if q.kind == "format":
            try:
                return str(parse_format(value.strip() if isinstance(value, str) else value))
            except RlhlsError as e:
                raise self._err(f"{where}: {e}") from None
        if q.kind == "bool":
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise self._err(f"{where} is not a boolean (expected true or false)")
        if q.kind == "ints":
            items = value
            if isinstance(value, str):
                items = [t for t in value.strip().strip("[]").replace(" ", "").split(",") if t]
            try:
                if isinstance(items, (str, bytes)) or not len(items):
                    raise ValueError
                ints = [self._convert(Param(q.name, "int", 0, q.doc, min=q.min), t) for t in items]
            except (ValueError, TypeError):
                raise self._err(f"{where} is not a list of integers (e.g. 16,8,5,8)") from None
            return ints
        v: Any  # an int, a float or a string, by the parameter's kind
        if q.kind == "int":
            try:
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, str):
                    v = int(value.strip(), 10)
                elif float(value) == int(value):
                    v = int(value)
                else:
                    raise ValueError
            except (ValueError, TypeError):
                raise self._err(f"{where} is not an integer") from None
        elif q.kind == "float":
            try:
                v = float(value)
            except (ValueError, TypeError):
                raise self._err(f"{where} is not a number") from None
            if not np.isfinite(v):
                raise self._err(f"{where} must be finite")
        else:
            v = str(value).strip()
        if q.choices and v not in q.choices:
            raise self._err(f"{where} is not one of {', '.join(map(str, q.choices))}")
        if q.min is not None and v < q.min:
            lim = int(q.min) if q.kind == "int" else q.min
            raise self._err(f"parameter {q.name!r} = {v!r} must be >= {lim}")
        return v

    def resolve(self, overrides: dict | None = None) -> dict:
        """Defaults + overrides (typed values or 'key=value' texts), validated."""
        overrides = dict(overrides or {})
        p = {q.name: q.default for q in self.params}
        for key, value in overrides.items():
            p[key] = self._convert(self.param(key), value)
        for q in self.params:  # defaults go through the same canonicalisation
            if q.name not in overrides:
                p[q.name] = self._convert(q, p[q.name])
        self.validate(p)
        return p

    def validate(self, p: dict) -> None:  # kernel-specific checks (pf <= dimension, formats)
        pass

    def check_pf(self, p: dict, dim_name: str) -> None:
        if p["pf"] > p[dim_name]:
            raise self._err(f"parameter 'pf' = {p['pf']} must be <= {dim_name} = {p[dim_name]} "
                            f"(the dimension it unrolls)")

    # -- arrays and numerics
    def arrays(self, p: dict) -> tuple[list[Array], list[Array]]:
        raise NotImplementedError

    def formats(self, p: dict) -> dict[str, NumericFormat]:
        return {q.name: parse_format(p[q.name]) for q in self.params if q.kind == "format"}

    def max_rows(self, p: dict) -> int | None:
        return p[self.rows_param] if self.rows_param else None

    def tb_rows(self, p: dict, tb_rows: int | None = None) -> int | None:
        """Rows of the testbench data: min(N_MAX, tb_rows or TB_ROWS)."""
        if not self.rows_param:
            return None
        return max(1, min(p[self.rows_param], TB_ROWS if tb_rows is None else int(tb_rows)))

    def rows_of(self, p: dict, arrays: dict) -> int | None:
        """The runtime row count n of checked input arrays (None for kernels without one)."""
        if not self.rows_param:
            return None
        ins, _ = self.arrays(p)
        a = next(x for x in ins if x.rows)
        return int(np.shape(arrays[a.name])[0])

    def check_arrays(self, p: dict, arrays: dict) -> dict:
        """float64 copies of the inputs with the expected shapes (RlhlsError otherwise).

        Row arrays may have any n rows with 1 <= n <= N_MAX, the same n for all of them."""
        ins, _ = self.arrays(p)
        names = {a.name for a in ins}
        extra = set(arrays) - names
        if extra:
            raise self._err(f"unexpected input array(s) {sorted(extra)} (expected {sorted(names)})")
        out = {}
        n = None
        for a in ins:
            if a.name not in arrays:
                raise self._err(f"missing input array {a.name!r} (expected {[x.name for x in ins]})")
            v = np.asarray(arrays[a.name], dtype=np.float64)
            if a.rows:
                nmax = a.shape[0]
                want = f"(n, {', '.join(map(str, a.shape[1:]))})" if len(a.shape) > 1 else "(n,)"
                if v.ndim != len(a.shape) or v.shape[1:] != tuple(a.shape[1:]):
                    raise self._err(f"input {a.name!r} has shape {v.shape}, expected {want} "
                                    f"with 1 <= n <= {nmax}")
                if not 1 <= v.shape[0] <= nmax:
                    raise self._err(f"input {a.name!r} has {v.shape[0]} rows, expected 1 <= n <= {nmax} "
                                    f"(parameter {self.rows_param!r} = {nmax} is the compile-time maximum)")
                if n is not None and v.shape[0] != n:
                    raise self._err(f"input {a.name!r} has {v.shape[0]} rows, expected n = {n} "
                                    "as the other row inputs")
                n = v.shape[0]
            elif v.shape != tuple(a.shape):
                raise self._err(f"input {a.name!r} has shape {v.shape}, expected {tuple(a.shape)}")
            out[a.name] = v
        return out

    def quantize_inputs(self, p: dict, arrays: dict) -> dict:
        """Each input rounded to its format (what the C++ top receives)."""
        fm = self.formats(p)
        ins, _ = self.arrays(p)
        return {a.name: fm[a.fmt_key].quantize(arrays[a.name]) for a in ins}

    def model(self, p: dict, **arrays) -> dict:
        raise NotImplementedError

    def random_inputs(self, p: dict, rng, rows: int | None = None) -> dict:
        """Test inputs; `rows`: their row count (kernels with a ``rows_param``, ``tb_rows``)."""
        raise NotImplementedError

    def cpp_ints(self, p: dict) -> dict:
        """Compile-time int constants of the generated header (sizes, PF, II)."""
        ints = {"N": p["n"], "PF": p["pf"], "II": p["ii"]}
        for dim in ("k", "m"):
            if dim in p:
                ints[dim.upper()] = p[dim]
        return ints

    def cpp_constants(self, p: dict) -> dict:
        """Compile-time constants of the template: {name: (C++ type key or 'int', value)}."""
        return {}

    # -- one value for the build and the training (Design.bind)
    def hyperparam_values(self, params: dict) -> dict:
        """{hyperparameter: value} that KernelSpec parameters `params` fix (``Param.hyperparam``)."""
        return {q.hyperparam: params[q.name] for q in self.params if q.hyperparam and q.name in params}

    def bind_params(self, params: dict, hp: dict) -> dict:
        """KernelSpec parameters `params` with a run's hyperparameters `hp` where a parameter names one."""
        return {**params, **{q.name: hp[q.hyperparam] for q in self.params
                             if q.hyperparam and q.name in params and q.hyperparam in hp}}

    def linked_params(self, hyperparams: dict) -> dict:
        """The parameters a design's hyperparameters give (``Param.hyperparam``)."""
        return {q.name: hyperparams[q.hyperparam] for q in self.params
                if q.hyperparam and hyperparams.get(q.hyperparam) is not None}

    # -- a training-graph node (see designs/kernels/context.py)
    def spec_params(self, spec) -> dict:
        """Parameters from a design's KernelSpec: its formats and its params (every key a parameter
        of this kernel). Kernels whose formats have other names override it."""
        names = {q.name for q in self.params}
        out = {k: spec.params[k] for k in spec.params}
        for key, text in (("storage", spec.storage), ("acc", spec.acc)):
            if key in names:
                out.setdefault(key, text)
        return out

    def node_params(self, node, ctx) -> dict | None:
        """Parameters of the instance that computes (its part of) `node` of ``ctx.design``, or None
        when this node needs nothing of this kernel. Only asked for nodes of a kind in ``implements``."""
        return None

    def node_points(self, node, ctx, unit: str) -> list[tuple[str, dict]]:
        """Design points ``[(point name, cost dict)]`` of the whole node on `unit` (the profiler's
        rows). Default: the one instance ``node_params`` gives, costed by ``cost``."""
        p = self.resolve(self.node_params(node, ctx))
        return [("0", self.cost(p, unit=unit, device=ctx.device))]

    def op_sizes(self, op: str, **arrays) -> dict:
        """The parameters the arrays of a layer operation fix (the dense kernels: n, k, m)."""
        raise NotImplementedError

    def run_op(self, op: str, backend, p: dict, **arrays):
        """One layer operation of ``layer_ops`` through a backend (``backend.call``)."""
        raise NotImplementedError

    # -- cost
    def cost(self, p: dict, unit: str = "PL", device=None) -> dict:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "summary": self.summary, "source": self.source, "units": list(self.units),
                "implements": list(self.implements), "generic": self.generic, "replaces": list(self.replaces),
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "params": [q.describe() for q in self.params]}


def finish_cost(kname: str, c: dict, *, elements: int | None = None, memory_bytes: int) -> dict:
    """Normalise a cost-primitive result to the kernel cost dict of CONTRACTS.md."""
    res = {k: float(c.get("resources", {}).get(k, 0) or 0) for k in
           ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")}
    out = {"cycles": c.get("cycles"), "latency_us": float(c["latency_us"]),
           "memory_bytes": int(c.get("memory_bytes", memory_bytes)), "resources": res}
    if elements is not None and c["latency_us"] > 0:
        out["throughput_el_per_s"] = elements / (c["latency_us"] * 1e-6)
    for key in ("source", "provenance"):
        if key in c:
            out[key] = c[key]
    return out


def get_dev(device):
    from ..devices import get_device
    if device is None:
        return get_device("zcu106")
    return get_device(device) if isinstance(device, str) else device


# ----------------------------------------------------------------------------- elementwise ops
# One rounding to the result format r per operation, exactly as rl::mul/add/sub/cast/div/sqrt
# in vitis/include/rlhls_types.h: fixed operands on exact integer mantissas (Python ints when
# int64 could overflow), float operands in float64 (exact for products and sums of <= 24-bit
# mantissas, correctly rounded for / and sqrt) and one RNE to r.

def _mant(fmt: FixedFormat, v):
    return fmt.to_mantissa(v)


def _fits(*ms) -> bool:
    return all(m.size == 0 or max(abs(int(m.max())), abs(int(m.min()))) < (1 << 62) for m in ms)


def _fx_combine(r, a, af, b, bf, op):
    ma, mb = _mant(af, a), _mant(bf, b)
    if op == "mul":
        if _fits(ma) and _fits(mb) and (_bits(ma) + _bits(mb) < 62):
            res = ma * mb
        else:
            res = ma.astype(object) * mb.astype(object)
        f = af.frac_bits + bf.frac_bits
    else:
        f = max(af.frac_bits, bf.frac_bits)
        sa, sb = f - af.frac_bits, f - bf.frac_bits
        if _bits(ma) + sa < 61 and _bits(mb) + sb < 61:
            ma, mb = np.left_shift(ma, sa), np.left_shift(mb, sb)
        else:
            ma = ma.astype(object) * (1 << sa)
            mb = mb.astype(object) * (1 << sb)
        res = ma + mb if op == "add" else ma - mb
    m, _ = r.cast_mantissa(res, f)
    return r.from_mantissa(m)


def _bits(m) -> int:
    if m.size == 0:
        return 0
    return max(abs(int(m.max())), abs(int(m.min()))).bit_length()


def op(r: NumericFormat, kind: str, a, af: NumericFormat, b=None, bf: NumericFormat | None = None):
    """r(a <kind> b) for kind in mul, add, sub, div; r(sqrt(a)) for 'sqrt'; r(a) for 'cast'.

    a, b: float64 arrays (or scalars) holding values of formats af, bf."""
    a = np.asarray(a, dtype=np.float64)
    fixed = isinstance(af, FixedFormat)
    if kind == "cast":
        return r.quantize(a)  # exact value in, one Q/O or RNE out: same as ap_fixed(ap_fixed)
    if kind == "sqrt":
        with np.errstate(invalid="ignore"):
            return r.quantize(np.sqrt(a))
    b = np.asarray(b, dtype=np.float64)
    if kind == "div":
        with np.errstate(divide="ignore", invalid="ignore"):
            return r.quantize(a / b)
    if fixed:
        a, b = np.broadcast_arrays(a, b)
        return _fx_combine(r, a, af, b, bf, kind)
    with np.errstate(over="ignore", invalid="ignore"):
        v = a * b if kind == "mul" else (a + b if kind == "add" else a - b)
    return r.quantize(v)
