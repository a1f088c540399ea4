"""Forward networks through hls4ml: Network -> ONNX -> qonnx clean-up -> hls4ml Vitis project.

Pipeline (``convert_network``)
    ``export_onnx`` (float32, batch 1) -> qonnx ``cleanup_model`` -> ``GemmToMatMul`` ->
    ``ConvertToChannelsLastAndClean`` (convnets only; hls4ml's conv layers are channels-last)
    -> ``hls4ml.converters.convert_from_onnx_model(backend='Vitis')`` with the design's formats
    as hls4ml's per-layer precision config. hls4ml turns MatMul+Add into one Dense (bias fused)
    and, for io_parallel, drops the Transpose before Flatten by permuting the next Dense's
    rows from (C, H, W) to (H, W, C) order (io_stream keeps a streaming Transpose).

Two things are then fixed on the converted model, because hls4ml gets them wrong for us:
  * Parameters: hls4ml reads float32 ONNX constants; we overwrite every weight/bias with the
    float64 master quantized to the storage format (the emulator's values), matched to the
    hls4ml layout by trying the axis permutations (so the Flatten reordering above is found
    and *checked*, not assumed: a wrong order raises RlhlsError). Fixed-point literals are
    then printed exactly (F decimals); float literals with 17 significant digits.
  * Types of the fused Dense/Conv: hls4ml only fuses the bias Add when the layer's result type
    is 'auto', so result/accum/weight/bias types are set on the model after conversion.

Arithmetic (hls4ml ``dense_latency`` = ``arith.dense``): acc = (accum_t)bias;
acc += (accum_t)(x*w) for k ascending; y = (result_t)acc. Tanh / Sigmoid / Softmax are lookup
tables in hls4ml (also in an fp32 net: float table entries, same index); the emulator computes
them the same way in table mode (``Precision(..., table=, table_size=)``, see "Table
activations" in rlhls.designs.network: same index, same table contents, same casts). The
tables are configured from the layer's Precision: Tanh/Sigmoid ``table_t`` = its table format
(default: storage), ``table_size`` = its table size (default: the ``table_size`` argument,
1024); Softmax 'stable' (hls4ml's Vitis default) with the five types of
``softmax_table_formats`` (hls4ml's defaults index by the top bits of wide types: every output
was 1/n). ``check_hls4ml`` compares against the emulator in that table mode, so:

  * fixed-point networks (Dense/Conv/ReLU/Flatten/Tanh/Sigmoid/Softmax): equal, bit for bit.
    Conv2d accumulates in (kh, kw, c) order after channels-last (ours: (c, kh, kw)), but each
    product is cast on its own and sums of equal-LSB values are exact unless the accumulator
    saturates/wraps, so the order does not matter.
  * fp32 MLPs (Dense/ReLU/Tanh/Sigmoid) with zero biases: equal (same float ops in the same
    order; the float table entries are the C library's tanhf/expf, which the emulator calls
    through ctypes). With non-zero biases hls4ml does not fuse the bias Add for float types:
    it computes fl(sum_k x_k w_k + b) (bias last, ``_unfused_bias``), the emulator starts the
    sum from b, so a Dense output may differ by ulps (seen: 1 ulp), inside ``error_bound``.
  * fp32 convnets: the (kh, kw, c) order changes float sums by a few ulps; ``error_bound``
    bounds that and the bias order above (the only places a difference remains).
  * The one-LSB slack: none is needed where the emulator's tables come from the C library;
    without a loadable libm (float64 tanh/exp rounded to float) an entry may differ in its
    last bit, so ``passed`` then allows 1 output LSB per table activation (``tolerance``).
``error_bound`` / ``softmax_error`` keep the bounds of hls4ml against float64 activations
(the emulator without tables): table steps (~8/N for tanh, ~0.03 for softmax), not LSBs.

C simulation: ``compile_csim`` replaces hls4ml's compile() (same library, same loader) with a
one-translation-unit -O1 build, 2-3x less CPU (the time is header parsing, not optimisation).

Formats: fixed/ufixed -> ``fixed<W,I,Q,O>`` (exact ap_fixed); fp32 -> ``float`` (except a
Softmax, whose input must be fixed point: hls4ml's softmax instantiates every implementation
and they slice the input's bits, fixed-point tables or not); fp16, bf16 and other floats raise
RlhlsError (hls4ml maps fp16/bf16 to C++23 std::float16_t /
std::bfloat16_t, which g++ < 13 lacks, and its tables are not defined for them).
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.toolchain import _ap_pch, ap_types_include, compiler_env, find_cxx
from rlhls.designs.formats import FP32, FixedFormat, FloatFormat
from rlhls.designs.lut import SOFTMAX_NORM_INT, _libm, softmax_table_formats
from rlhls.designs.network import TABLE_SIZE, Conv2d, Dense, LeakyReLU, Network, Precision, Quant

__all__ = ["hls4ml_precision_config", "table_precisions", "convert_network", "compile_csim", "check_hls4ml",
           "error_bound", "softmax_error",
           "hls_format"]

_ACT_ONNX = {"ReLU": "Relu", "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Softmax": "Softmax", "LeakyReLU": "LeakyRelu",
             "Softplus": "Softplus", "Quant": "LeakyRelu"}
_TABLE_KINDS = ("Tanh", "Sigmoid", "Softplus")  # elementwise lookup tables (hls4ml table_t, table_size)
# layers hls4ml 1.3's ONNX reader has no layer for (it reads no Clip; LayerNormalization is Keras / PyTorch
# only there): such a network's forward layers are built as dense_forward kernels instead (flow/mapping.py).
# A Quant layer goes to hls4ml as a LeakyReLU of alpha 1 whose result type is its format: x, or 1 * x
# (exact), cast once to that format -- fmt(x), the fake quantization (not hls4ml's own QONNX Quant
# handling, which makes scaling layers of it)
_NO_HLS4ML = ("Clip", "LayerNorm")
DEFAULT_TABLE_SIZE = TABLE_SIZE  # hls4ml's default; error_bound scales with 1/table_size


def hls_format(fmt, where: str) -> str:
    """hls4ml precision text of one of our formats, or RlhlsError naming it and `where`."""
    if isinstance(fmt, FixedFormat):
        kind = "fixed" if fmt.signed else "ufixed"
        return f"{kind}<{fmt.width},{fmt.int_bits},{fmt.quant},{fmt.overflow}>"
    if isinstance(fmt, FloatFormat) and fmt == FP32:
        return "float"
    raise RlhlsError(f"hls4ml: {where}: format {fmt} is not supported (expected fixed<...>, ufixed<...> or fp32;"
                     " hls4ml's fp16/bf16 need C++23 std::float16_t/bfloat16_t and have no activation tables)")


def _holds(storage: FixedFormat, f) -> bool:
    """Every value of fixed format f is a value of fixed format `storage`."""
    return (isinstance(f, FixedFormat) and storage.frac_bits >= f.frac_bits
            and storage.int_bits - storage.signed >= f.int_bits - f.signed and (storage.signed or not f.signed))


def _per_layer(net: Network, precision) -> dict:
    if precision is None:
        raise RlhlsError(f"hls4ml: network '{net.name}': precision is None, expected a Precision or a dict"
                         " layer name -> Precision (hls4ml needs a format for every layer)")
    ps = net._precision_of(precision)
    for layer, p in zip(net.layers, ps):
        if p is None:
            raise RlhlsError(f"hls4ml: network '{net.name}': layer {layer.name}: no precision given")
        kinds = {type(p.storage), type(p.acc)}
        if len(kinds) != 1:
            raise RlhlsError(f"hls4ml: network '{net.name}': layer {layer.name}: storage {p.storage} and"
                             f" accumulator {p.acc} must both be fixed or both float")
    return dict(zip((l.name for l in net.layers), ps))


def table_precisions(net: Network, precision, table_size: int = DEFAULT_TABLE_SIZE) -> dict:
    """{layer name: Precision in table mode}: what the hls4ml project computes (a layer's own
    table / table_size win; else table = storage, table_size = the argument)."""
    return {k: p.with_tables(table_size=table_size) for k, p in _per_layer(net, precision).items()}


def _softmax_geometry(n: int, table_size: int, width: int) -> tuple[float, float, int]:
    """(exp-table step, 1/x-table step, integer bits of the sum) of our softmax table types."""
    sum_int = max(1, math.ceil(math.log2(n + 1)))  # the sum of n exps lies in [1, n] < 2**sum_int
    return 2.0 ** SOFTMAX_NORM_INT / table_size, 2.0 ** sum_int / table_size, sum_int


def _table_width(table) -> int:
    return table.width if isinstance(table, FixedFormat) else 32


def _softmax_types(layer, p: Precision, where: str) -> dict:
    """hls4ml 'stable' softmax types (rlhls.designs.network.softmax_table_formats) as hls4ml
    text. Its tables are indexed by the TOP log2(N) bits of inp_norm_t (x_max - x_i) and of
    inv_inp_t (the sum): hls4ml's defaults (or any wide type) make the index step huge
    (ufixed<38,18>: step 256 -> every output 1/n). Here inp_norm_t covers [0, 16) and
    inv_inp_t [0, 2**sum_int) so the steps are 16/N and 2**sum_int/N; the tables are fixed point
    even for a float table format (hls4ml slices their bits), as wide as the table format or 32."""
    try:
        f = softmax_table_formats(layer.out_shape[-1], p.lut_size, _table_width(p.lut_table))
    except RlhlsError as e:
        raise RlhlsError(f"hls4ml: {where}: {e}") from None
    return {k: hls_format(v, where) for k, v in f.items()}


def hls4ml_precision_config(net: Network, precision, table_size: int = DEFAULT_TABLE_SIZE) -> dict:
    """{layer name: {'weight', 'bias', 'accum', 'result'[, 'table' | softmax tables]}} in hls4ml text
    (tables from ``table_precisions``)."""
    ps = table_precisions(net, precision, table_size)
    out = {}
    for layer in net.layers:
        p = ps[layer.name]
        where = f"network '{net.name}': layer {layer.name}"
        st = hls_format(p.storage, where + " storage")
        ac = hls_format(p.acc, where + " accumulator")
        if layer.kind in _NO_HLS4ML:
            raise RlhlsError(f"hls4ml: {where}: {layer.kind} has no layer in hls4ml's ONNX reader")
        if isinstance(layer, (Dense, Conv2d)):
            out[layer.name] = {"weight": st, "bias": st, "accum": ac, "result": st}
            for k, key in (("W", "weight"), ("b", "bias")):
                f = layer.param_formats.get(k)
                if f is not None:  # a quantization-aware layer's own weight format
                    if isinstance(p.storage, FixedFormat) and not _holds(p.storage, f):
                        raise RlhlsError(f"hls4ml: {where}: {key} format {f} does not fit the storage format "
                                         f"{p.storage}")
                    out[layer.name][key] = hls_format(f, f"{where} {key}")
        elif layer.kind in _TABLE_KINDS:
            out[layer.name] = {"result": st, "table": hls_format(p.lut_table, where + " table")}
        elif layer.kind == "LeakyReLU":
            out[layer.name] = {"result": st, "param": st}  # alpha in the storage format (as the emulator)
        elif isinstance(layer, Quant):
            if not isinstance(p.storage, FixedFormat) or not _holds(p.storage, layer.fmt):
                # the next layer reads the format's values as they are; the emulator casts them to storage
                raise RlhlsError(f"hls4ml: {where}: Quant to {layer.fmt} needs a fixed-point storage format that holds "
                                 f"its values (storage {p.storage})")
            out[layer.name] = {"result": hls_format(layer.fmt, where), "param": "fixed<2,2>"}  # alpha = 1
        elif layer.kind == "Softmax":
            if st == "float":
                # nnet::softmax switches on the implementation at run time, so g++ instantiates
                # softmax_latency/legacy too, and they slice the bits of the INPUT type: a float
                # input cannot compile even with fixed-point tables (tried; hls4ml 1.3).
                raise RlhlsError(f"hls4ml: {where}: Softmax in {p.storage} is not supported by hls4ml's"
                                 " Vitis templates (they index tables by the input's bits; expected a"
                                 " fixed-point storage format)")
            out[layer.name] = {"result": st} | _softmax_types(layer, p, where)
        else:
            out[layer.name] = {"result": st}
    return out


# ----------------------------------------------------------------------------- conversion


def _clean_onnx(net: Network):
    import warnings

    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    model = _quant_as_cast(net.to_onnx())
    for v in (model.graph.input[0], model.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 1  # hls4ml wants a fixed batch of 1
    w = cleanup_model(ModelWrapper(model))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "only explicit support for Gemm v9": fine for alpha=beta=1
        w = w.transform(GemmToMatMul())
    w = cleanup_model(w)
    if any(l.kind == "Conv2d" for l in net.layers):
        import onnx

        # qonnx folds constants by running single-node models through onnxruntime; onnx 1.23
        # stamps them IR 14, onnxruntime 1.31 reads <= 13: make the default ours meanwhile.
        saved = onnx.IR_VERSION
        onnx.IR_VERSION = model.ir_version
        try:
            w = w.transform(ConvertToChannelsLastAndClean(make_input_channels_last=True))
            w = cleanup_model(w)
        finally:
            onnx.IR_VERSION = saved
    _rename_nodes(net, w)
    return w


def _quant_as_cast(model):
    """QONNX Quant nodes of Quant layers as LeakyRelu(alpha = 1) (see _NO_HLS4ML), their constants dropped."""
    from onnx import helper

    g = model.graph
    drop = set()
    for i, n in enumerate(g.node):
        if n.op_type == "Quant":
            drop.update(n.input[1:])
            g.node[i].CopyFrom(helper.make_node("LeakyRelu", [n.input[0]], list(n.output), name=n.name, alpha=1.0))
    keep = [t for t in g.initializer if t.name not in drop]
    del g.initializer[:]
    g.initializer.extend(keep)
    return model


def _rename_nodes(net: Network, w) -> None:
    """Give the cleaned nodes our layer names (cleanup renamed them MatMul_0, ...)."""
    nodes = [n for n in w.graph.node if n.op_type != "Transpose"]
    i = 0
    for layer in net.layers:
        if layer.kind == "Identity":
            if i < len(nodes) and nodes[i].op_type == "Identity":
                nodes[i].name = layer.name
                i += 1
            continue
        expect = {"Dense": "MatMul", "Conv2d": "Conv", "Flatten": ("Flatten", "Reshape")}.get(
            layer.kind, _ACT_ONNX.get(layer.kind))
        if i >= len(nodes) or nodes[i].op_type not in ((expect,) if isinstance(expect, str) else expect or ()):
            got = nodes[i].op_type if i < len(nodes) else "end of graph"
            raise RlhlsError(f"hls4ml: network '{net.name}': layer {layer.name}: cleaned ONNX has {got},"
                             f" expected {expect}")
        nodes[i].name = layer.name
        i += 1
        if layer.kind == "Dense" and i < len(nodes) and nodes[i].op_type == "Add":  # (a zero bias is dropped)
            nodes[i].name = layer.name + "_bias"
            i += 1


def _hls_name(hls_model, name: str):
    for cand in (name, f"Dense_{name}", f"Conv2D_{name}"):
        if cand in hls_model.graph:
            return hls_model.graph[cand]
    return None


def _match_layout(master: np.ndarray, hls_data: np.ndarray, where: str) -> np.ndarray:
    """master permuted (axes and, for a Dense after Flatten, the (C,H,W)->(H,W,C) rows) to hls4ml's layout."""
    target = np.asarray(hls_data, dtype=np.float64)
    cands = []
    for perm in itertools.permutations(range(master.ndim)):
        m = master.transpose(perm)
        cands.append(m.reshape(target.shape) if m.size == target.size else None)
    for c in cands:
        if c is not None and c.shape == target.shape and np.allclose(c, target, rtol=1e-6, atol=1e-7):
            return np.ascontiguousarray(c)
    raise RlhlsError(f"hls4ml: {where}: parameters {master.shape} match no layout of hls4ml's {target.shape}"
                     " (a channel-order change hls4ml made and we did not follow)")


def _flatten_rows(net: Network, layer) -> list[np.ndarray]:
    """Row orders to try for a Dense after Flatten of a (C, H, W) tensor: as is, and (H, W, C)."""
    W = layer.param("W")
    idx = net.layers.index(layer)
    before = net.layers[idx - 1].in_shape if idx >= 1 and net.layers[idx - 1].kind == "Flatten" else None
    if before is not None and len(before) == 3:
        c, h, w = before
        hwc = W.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)
        return [W, hwc]
    return [W]


def _unfused_bias(hls_model, node):
    """The BatchNormalization hls4ml left after `node` for its bias (float types: no fusion), or None."""
    outs = [n for n in hls_model.get_layers() if node.outputs[0] in n.inputs]
    if len(outs) == 1 and outs[0].class_name in ("BatchNormalization", "ApplyAlpha") and "bias" in outs[0].weights:
        return outs[0]
    return None


def _set_params(net: Network, ps: dict, hls_model, table_size: int) -> None:
    from hls4ml.backends.fpga.fpga_types import APTypeConverter

    ap = APTypeConverter()

    def conv(text):  # a backend-ready (AP-wrapped) precision type
        return ap.convert(hls_model.config.backend.convert_precision_string(text))
    for layer in net.mm_layers:
        p = ps[layer.name]
        node = _hls_name(hls_model, layer.name)
        where = f"network '{net.name}': layer {layer.name}"
        if node is None:
            raise RlhlsError(f"hls4ml: {where}: not found in the hls4ml model (layers: {list(hls_model.graph)})")
        st, ac = conv(hls_format(p.storage, where)), conv(hls_format(p.acc, where))
        wvar = node.weights["weight"]
        if layer.kind == "Dense":
            orders = _flatten_rows(net, layer)
            data = None
            for cand in orders:
                try:
                    data = _match_layout(cand, wvar.data, where)
                    break
                except RlhlsError:
                    if cand is orders[-1]:
                        raise
        else:
            data = _match_layout(layer.param("W"), wvar.data, where)
        b = layer.param("b") if "b" in layer.params else None
        if isinstance(layer, Dense):
            n_out = layer.units
        else:  # a Conv2d: its output channels
            n_out = layer.shapes()[1][0]
        bdata = np.zeros(n_out) if b is None else b
        bn = _unfused_bias(hls_model, node)
        if bn is not None:  # float: hls4ml keeps the bias Add as its own layer (y = 1 * x + b) after the
            # Dense, whose own bias is 0: put the bias there (else it was added twice)
            q = np.asarray(p.storage.quantize(bdata), dtype=np.float64).reshape(bn.weights["bias"].data.shape)
            bn.weights["bias"].data = q
            bn.weights["bias"].update_precision(st)
            bn.weights["bias"].precision_fmt = "{:.17e}"
            bdata = np.zeros_like(bdata)
        for var, master, k in ((wvar, data, "W"), (node.weights["bias"], bdata, "b")):
            q = np.asarray(p.storage.quantize(master), dtype=np.float64).reshape(var.data.shape)
            var.data = q
            f = layer.param_formats.get(k) if bn is None or k == "W" else None
            # a quantization-aware layer keeps its weights' own width (hls4ml_precision_config checked
            # that the storage format holds its values)
            var.update_precision(st if f is None or isinstance(p.storage, FloatFormat) else conv(hls_format(f, where)))
            if isinstance(p.storage, FloatFormat):
                var.precision_fmt = "{:.17e}"  # hls4ml's '{:.16f}' loses small float weights
        node.get_attr("accum_t").precision = ac
        node.get_output_variable().type.precision = st
        if node.get_attr("result_t") is not None:
            node.get_attr("result_t").precision = st
    # hls4ml ignores some configured activation types (e.g. 'table' stays fixed<18,8>): set all.
    layer_prec = hls4ml_precision_config(net, ps, table_size)
    for other in net.layers:
        if other.is_mm or other.name not in hls_model.graph:
            continue
        node = hls_model.graph[other.name]
        for key, text in layer_prec[other.name].items():
            t = node.get_output_variable().type if key == "result" else node.get_attr(key + "_t")
            if t is not None:
                t.precision = conv(text)


def convert_network(net: Network, precision, out_dir, *, part: str, clock_ns: float, io_type: str = "io_parallel",
                    reuse_factor: int = 1, name: str | None = None, table_size: int = DEFAULT_TABLE_SIZE) -> dict:
    """Write net's hls4ml Vitis project into out_dir (built beside it, then renamed).

    Returns {'project_dir', 'top', 'files', 'hls_model'}; hls_model is hls4ml's ModelGraph
    (``compile_csim(hls_model)`` or .compile(), then .predict() for C simulation)."""
    import hls4ml

    if io_type not in ("io_parallel", "io_stream"):
        raise RlhlsError(f"hls4ml: io_type '{io_type}', expected io_parallel or io_stream")
    if not (isinstance(reuse_factor, int) and reuse_factor >= 1):
        raise RlhlsError(f"hls4ml: reuse_factor {reuse_factor!r}, expected an integer >= 1")
    if not (isinstance(table_size, int) and table_size >= 2 and table_size & (table_size - 1) == 0):
        raise RlhlsError(f"hls4ml: table_size {table_size!r}, expected a power of two >= 2")
    ps = table_precisions(net, precision, table_size)
    layer_prec = hls4ml_precision_config(net, precision, table_size)
    top = name or f"{net.name}_fwd"
    if not top.isidentifier():
        raise RlhlsError(f"hls4ml: top name {top!r} is not a C identifier")

    w = _clean_onnx(net)
    first = ps[net.layers[0].name]
    cfg = hls4ml.utils.config_from_onnx_model(w, granularity="name", backend="Vitis",
                                              default_precision=hls_format(first.storage, "input"),
                                              default_reuse_factor=reuse_factor)
    lcfg = cfg["LayerName"]
    for k in list(lcfg):
        if k.endswith("_param0") or k.endswith("_param1"):
            lcfg[k]["Precision"] = {"result": hls_format(first.storage, "constants")}
    lcfg.setdefault("global_in", {})["Precision"] = {"result": hls_format(first.storage, "input")}
    for layer in net.layers:
        prec = layer_prec[layer.name]
        entry = lcfg.setdefault(layer.name, {})
        if layer.is_mm:
            # 'auto' result lets hls4ml fuse the bias Add; types are set after conversion.
            entry["Precision"] = {k: v for k, v in prec.items() if k != "result"} | {"result": "auto"}
            if layer.kind == "Dense" and layer.name + "_bias" in lcfg:
                lcfg[layer.name + "_bias"]["Precision"] = {"result": "auto"}
        else:
            entry["Precision"] = dict(prec)
            if layer.kind in (*_TABLE_KINDS, "Softmax"):
                n_table = ps[layer.name].lut_size
                entry["TableSize"] = n_table
                if layer.kind == "Softmax":
                    entry["exp_table_size"] = entry["inv_table_size"] = n_table
                    # inp_norm is no declared hls4ml type (Precision ignores it; without it hls4ml
                    # derives it from the input type, which fails for float): a '*_t' key sets it.
                    entry["inp_norm_t"] = entry["Precision"].pop("inp_norm")
        entry["ReuseFactor"] = reuse_factor

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    hls_model = hls4ml.converters.convert_from_onnx_model(
        w, output_dir=str(tmp), project_name=top, backend="Vitis", hls_config=cfg, io_type=io_type,
        part=part, clock_period=clock_ns)
    _set_params(net, ps, hls_model, table_size)
    hls_model.write()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    hls_model.config.config["OutputDir"] = str(out_dir)
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file()
                   and "ap_types" not in p.parts)
    return {"project_dir": str(out_dir), "top": top, "files": files, "hls_model": hls_model}


# ----------------------------------------------------------------------------- C simulation build

# hls4ml's build_lib.sh compiles firmware/<top>.cpp and <top>_bridge.cpp separately at -O3
# -std=c++23: ~4.5 s CPU per project, nearly all of it parsing ap_types + nnet_utils twice
# (-O0 saves little). One translation unit at -O1 -std=c++14 takes ~1.8 s and computes the same
# (no -ffast-math, no FMA contraction at any level). Weights are read at run time from
# firmware/weights/*.txt (WEIGHTS_DIR), so the build does not grow with the parameter count.
# io_parallel convolutions are unrolled over pixels into huge functions that -O1 spends most of
# its time on (reduced AP-DRL convnet: 23 s CPU at -O1, 6.6 s at -O0), so those build at -O0.
CSIM_FLAGS = ("-O1", "-std=c++14", "-ffp-contract=off", "-fPIC", "-fno-gnu-unique")


def csim_flags(hls_model) -> tuple[str, ...]:
    """CSIM_FLAGS, at -O0 for an io_parallel model with convolutions."""
    conv = any("Conv" in l.class_name for l in hls_model.get_layers())
    if conv and hls_model.config.get_config_value("IOType") == "io_parallel":
        return ("-O0",) + CSIM_FLAGS[1:]
    return CSIM_FLAGS


_BUILD_LIB = """#!/bin/bash
# Written by rlhls (flow/hls4ml_convert.py): hls4ml's C-simulation library as ONE translation
# unit (firmware + bridge), {flags}. Same arithmetic as hls4ml's own -O3 two-unit build.
set -e
cd "$(dirname "$0")"
CC=${{CXX:-g++}}
CFLAGS="{flags}"
PROJECT={top}
LIB_STAMP={stamp}
BASEDIR="$(pwd)"
WEIGHTS_DIR="\\"${{BASEDIR}}/firmware/weights\\""
# the ap_types headers precompiled for these flags (rlhls's build cache; the same code), when there
PCH="{pch}"
PCHFLAGS=()
if [ -n "$PCH" ] && [ -z "${{CXX:-}}" ] && [ -f "$PCH.gch" ]; then PCHFLAGS=(-include "$PCH"); fi
printf '#include "firmware/%s.cpp"\\n#include "%s_bridge.cpp"\\n' "$PROJECT" "$PROJECT" > ${{PROJECT}}_csim.cpp
${{CC}} ${{CFLAGS}} "${{PCHFLAGS[@]}}" -Ifirmware/ap_types/ -D WEIGHTS_DIR="${{WEIGHTS_DIR}}" -shared \\
    ${{PROJECT}}_csim.cpp -o firmware/${{PROJECT}}-${{LIB_STAMP}}.so
rm -f ${{PROJECT}}_csim.cpp
"""


def _ap_types_pch(project_ap_types: Path, flags) -> Path | None:
    """The ap_types headers precompiled for `flags` (``toolchain``'s PCH in the build cache: parsing
    them is about a third of a project's build) when the project's copy of them is the installed
    one, byte for byte, and g++ is the compiler; else None (the plain build)."""
    import filecmp

    if os.environ.get("CXX"):
        return None
    try:
        ap = ap_types_include().resolve()
        names = sorted(str(p.relative_to(ap)) for p in ap.rglob("*") if p.is_file())
        if sorted(str(p.relative_to(project_ap_types)) for p in project_ap_types.rglob("*") if p.is_file()) != names:
            return None
        if filecmp.cmpfiles(project_ap_types, ap, names, shallow=False)[0] != names:
            return None
        return _ap_pch(find_cxx(), list(flags), ap)
    except (OSError, RlhlsError):
        return None


def compile_csim(hls_model, flags=None) -> float:
    """Build and load hls4ml's C-simulation library (what ``hls_model.compile()`` does, but with
    our single-unit build script, written into the project as build_lib.sh; flags default to
    ``csim_flags(hls_model)``). Returns the compiler's CPU seconds; RlhlsError naming the
    script and g++'s first error if the build fails."""
    import ctypes
    import resource

    out = Path(hls_model.config.get_output_dir())
    top = hls_model.config.get_project_name()
    stamp = hls_model.config.get_config_value("Stamp")
    if not (out / "firmware" / f"{top}.cpp").is_file():
        hls_model.write()
    flags = csim_flags(hls_model) if flags is None else tuple(flags)
    pch = _ap_types_pch(out / "firmware" / "ap_types", flags)
    script = out / "build_lib.sh"
    script.write_text(_BUILD_LIB.format(flags=" ".join(flags), top=top, stamp=stamp, pch=pch or ""))
    script.chmod(0o755)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with compiler_env() as env:  # its g++ dies with rlhls, its temporary files go with the scratch folder
        r = procs.run(["bash", str(script)], capture_output=True, text=True, tree=True, env=env)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        lines = (r.stdout + r.stderr).strip().splitlines() or ["(no output)"]
        msg = next((ln for ln in lines if "error" in ln), lines[0])
        raise RlhlsError(f"hls4ml: C simulation build of {out}/build_lib.sh failed: {msg}")
    lib = hls_model._top_function_lib
    if lib is not None:  # as hls4ml's _compile: drop the old build first (-fno-gnu-unique lets it unload)
        ctypes.CDLL("libdl.so.2").dlclose(ctypes.c_void_p(lib._handle))
    hls_model._top_function_lib = ctypes.cdll.LoadLibrary(f"{out}/firmware/{top}-{stamp}.so")
    return (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)


# ----------------------------------------------------------------------------- checking


def _table_error(layer, n: int, table, same_input: bool = False) -> float:
    """max |hls4ml table(x) - f(x)| over x (before the table/result rounding), N = n entries;
    same_input: only over the table's range (a Softplus table saturates at 8 where softplus grows)."""
    if layer.kind == "Softplus":
        return 16.0 / n if same_input else math.inf
    if layer.kind == "Tanh":
        return max(8.0 / n, 1.0 - math.tanh(4.0 - 8.0 / n))
    if layer.kind == "Sigmoid":
        return max(0.25 * 16.0 / n, 1.0 - 1.0 / (1.0 + math.exp(-(8.0 - 16.0 / n))))
    if layer.kind == "Softmax":
        return softmax_error(layer.out_shape[-1], n, table)
    return 0.0


def softmax_error(n: int, table_size: int = DEFAULT_TABLE_SIZE, table=None) -> float:
    """Bound on |p_hls - p| of hls4ml's 'stable' softmax with our table types against the float64
    softmax (``table``: the table format, whose width sets the types; None or float: 32 bits).

    hls4ml: e_i = exp_table[floor(d_i / s_e)], d_i = x_max - x_i (truncated to inp_norm_t,
    clipped below 16); S = sum e_i in [1, n]; p_i = e_i * inv_table[floor(S / s_i)]. So
    exp(-d) <= e <= exp(-d) e^s_e (d < 16) and S' in (S - s_i, S], giving
    p e^-s_e <= p_hls <= p e^s_e / (1 - s_i) with p <= 1; + the tail exp(-16 + s_e) where
    d is clipped, + (n + 1) table LSBs (exp-table rounding through the sum, 1/x rounding)."""
    w = _table_width(table)
    s_e, s_i, sum_int = _softmax_geometry(n, table_size, w)
    s_e += 2.0 ** -(w - SOFTMAX_NORM_INT)  # truncation into inp_norm_t may lower the index once more
    s_i += 2.0 ** -(w - sum_int)
    table_lsb = 2.0 ** -(w - 1)
    rel = max(math.exp(s_e) / (1.0 - s_i) - 1.0, 1.0 - math.exp(-s_e))
    return rel + math.exp(-2.0 ** SOFTMAX_NORM_INT + s_e) + (n + 1) * table_lsb


def _lsb(fmt, scale: float = 1.0) -> float:
    if isinstance(fmt, FixedFormat):
        return fmt.lsb
    return 2.0 ** -fmt.man_bits * max(scale, 2.0 ** -126)  # one ulp at |value| <= scale


def error_bound(net: Network, precision, x=None, table_size: int = DEFAULT_TABLE_SIZE) -> float:
    """Bound on max |hls4ml csim - net.forward(x, precision)| (absolute, output units).

    0 for fixed-point networks when ``precision`` is in table mode (what check_hls4ml uses),
    and for Dense/Conv/ReLU/Flatten networks in fixed point. Without table mode (float64
    activations), a table activation adds its table error (+ table and result rounding,
    1 LSB each). Float formats: each Dense/Conv adds accumulator ulps; each later Dense/Conv multiplies
    the incoming error by max_m sum_k |W_km| and adds one accumulator LSB per product and one
    storage LSB (the outputs may round differently); ReLU and Tanh are 1-Lipschitz,
    Sigmoid 1/4, Softmax 1 (and adds softmax_error)."""
    ps = _per_layer(net, precision)
    e = 0.0
    for layer in net.layers:
        p = ps[layer.name]
        st = p.storage
        if isinstance(layer, (Dense, Conv2d)):
            W = np.asarray(st.quantize(layer.param("W")), dtype=np.float64)
            if layer.kind == "Dense":
                gain, fan = float(np.abs(W).sum(axis=0).max()), W.shape[0]
            else:
                gain, fan = float(np.abs(W).reshape(W.shape[0], -1).sum(axis=1).max()), W[0].size
            if e > 0 or isinstance(st, FloatFormat):
                e = gain * e + fan * _lsb(p.acc, gain) + _lsb(st, gain)
        elif layer.kind in (*_TABLE_KINDS, "Softmax"):
            lip = 0.25 if layer.kind == "Sigmoid" else 1.0
            n = p.table_size or table_size
            if not p.lut:  # hls4ml's table against float64 f
                e = lip * e + _table_error(layer, n, p.lut_table) + 2 * _lsb(st)
            elif e > 0:  # the same table, but on an input that differs by e: f's change + 2 table errors
                e = lip * e + 2 * _table_error(layer, n, p.lut_table, same_input=True) + 2 * _lsb(st)
        elif isinstance(layer, LeakyReLU) and e > 0:  # the same product and rounding on inputs that differ by e
            e = max(1.0, abs(layer.alpha)) * e + _lsb(st)
    return e


def check_hls4ml(net: Network, precision, hls_model, x, *, table_size: int = DEFAULT_TABLE_SIZE) -> dict:
    """Compile (once) and run hls4ml's C simulation on x (N, *input_shape, NCHW for convnets)
    and compare with the emulator in table mode, ``net.forward(x, table_precisions(net,
    precision, table_size))`` (the tables convert_network configured).

    Returns {'max_diff', 'lsb' (of the output format), 'max_diff_lsb', 'bound', 'bound_lsb',
    'exact', 'passed', 'seconds', 'output'}; passed = max_diff <= max(tolerance, error_bound),
    where error_bound is 0 for fixed-point networks (so passed = bit for bit) and bounds the
    fp32 conv reordering, and tolerance is 0, or 1 output LSB when the C library could not be
    loaded for the table contents (module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    ps = table_precisions(net, precision, table_size)
    ref = net.forward(x, ps)
    xin = np.asarray(ps[net.layers[0].name].storage.quantize(x), dtype=np.float64)
    if xin.ndim == 4:
        xin = xin.transpose(0, 2, 3, 1)  # hls4ml's input is channels-last
    t0 = time.perf_counter()
    if getattr(hls_model, "_top_function_lib", None) is None:
        compile_csim(hls_model)
    got = np.asarray(hls_model.predict(np.ascontiguousarray(xin.reshape(len(x), -1))), dtype=np.float64)
    seconds = time.perf_counter() - t0
    got = got.reshape(ref.shape)
    out_fmt = ps[net.layers[-1].name].storage
    lsb = _lsb(out_fmt, float(np.abs(ref).max(initial=0.0)))
    diff = float(np.abs(got - ref).max(initial=0.0))
    bound = error_bound(net, ps, x, table_size)
    tables = any(l.kind in (*_TABLE_KINDS, "Softmax") for l in net.layers)
    tol = lsb if (tables and _libm() is None) else 0.0
    return {"max_diff": diff, "lsb": lsb, "max_diff_lsb": diff / lsb, "bound": bound, "bound_lsb": bound / lsb,
            "exact": diff == 0.0, "passed": bool(diff <= max(tol, bound)), "seconds": seconds, "output": got}
