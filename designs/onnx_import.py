"""ONNX import: a user's network as a Network of the layer language (the inverse of onnx_export).

What the exporters write (torch's legacy and dynamo exporters, SB3's export recipe, Brevitas'
QONNX) is first cleaned with qonnx's transformations, then read as one chain of layers:

1. Clean-up (qonnx): the batch axis is fixed to 1, ``InferShapes``, ``FoldConstants`` (Constant
   nodes, Identity of an initializer as the legacy exporter writes for a shared BatchNorm
   parameter, Cast / Shape / Gather / Concat / Reshape of constants: a legacy ``x.view(x.size(0),
   -1)`` becomes one Reshape by a constant shape; Quant nodes are kept), ``FoldTransposeIntoQuantInit``,
   ``RemoveUnusedTensors``. Not qonnx's ``cleanup_model`` itself: it renames every node
   (``GiveUniqueNodeNames``), and a refusal names the node of the user's file.
2. No-ops dropped: Identity, Cast to float / double of a float tensor (the legacy exporter's
   ``obs.float()``), Dropout at inference (no ``training_mode`` input, or a constant false), a
   Flatten / Reshape of what is already (batch, features).
3. Layers: Gemm (any alpha / beta, transA = 0; transB = 1 is transposed to our W (in, out)),
   MatMul by a constant right operand, Conv (valid padding, no dilation, one group, equal strides),
   Flatten (axis 1) and Reshape to (batch, -1) or (-1) (a flatten), Relu, Tanh, Sigmoid, Softmax
   (last axis), LeakyRelu, Softplus (also torch's dynamo form Where(x > t, x, Softplus(x))), Clip
   (ReLU6, Hardtanh), LayerNormalization (last axis), and QONNX Quant (below).
4. Affine nodes folded into the neighbouring Gemm / MatMul / Conv: BatchNormalization (inference
   mode) and Mul / Add / Sub / Div by a constant that is one number, or one per feature / channel,
   fold into the layer directly before them (W * s, b * s + t), else into the one directly after
   (a Flatten may stand between), in float64 from the file's float32 values: s = gamma /
   sqrt(var + eps), t = beta - mean * s. This is the same function, but not the same float32
   operations (the exporter's graph rounds after the matmul and again after the affine; the folded
   layer rounds once), so outputs agree with onnxruntime to rounding, not bit for bit. An affine
   node with no such neighbour is refused, naming it (a scale after the final Tanh: rlhls scales
   the tanh output to the action box itself).
5. QONNX ``Quant`` (Brevitas' quantization-aware export): a scale that is a power of two 2**-F
   and zero point 0 give ``fixed<W, W-F>`` (signed or not; rounding ROUND -> RND_CONV, FLOOR -> TRN,
   DOWN -> TRN_ZERO, HALF_UP -> RND_INF, HALF_DOWN -> RND_ZERO; SAT, narrow signed -> SAT_SYM). A
   Quant on a weight / bias becomes the layer's ``param_formats`` (the layer computes with those
   values, training keeps the float master: QAT); a Quant on the data path becomes a ``Quant``
   layer. Anything else (another scale, a zero point, CEIL / UP rounding, narrow unsigned,
   BipolarQuant, per-channel scales that differ) is refused, naming the node and why.

The Network keeps the file's graph name, input and output names and dims as written (``Network.onnx_io``):
``rlhls export`` writes a trained copy in that layout, and RL Zoo's net_arch never replaces it.

Weights and biases come from the file's initializers (float64 here); the input is (features,),
(C, H, W), or any shape a Flatten / Reshape flattens first, after a batch axis. Any other node is
refused, naming it (and, where one exists, the fix).

A file is data, checked before anything is allocated from it: at most ``MAX_ONNX_BYTES``; every
initializer of a number type, its dims >= 1, its data as long as its dims declare, all of them
together at most ``MAX_ONNX_ELEMENTS`` elements, none in an external file (not read); the input at
most ``MAX_ONNX_ELEMENTS`` features; each layer's weight the size of the layer's input.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from rlhls.core.errors import RlhlsError

from .formats import FixedFormat
from .network import (
    MAX_LAYER_PARAMS,
    Clip,
    Conv2d,
    Dense,
    Flatten,
    Layer,
    LayerNorm,
    LeakyReLU,
    Network,
    Quant,
    ReLU,
    Sigmoid,
    Softmax,
    Softplus,
    Tanh,
    _MMLayer,
)

_ACTS = {"Relu": ReLU, "Tanh": Tanh, "Sigmoid": Sigmoid}
# the operators a chain may have (each a layer, a no-op, or an affine folded into a layer)
log = logging.getLogger(__name__)

_OPS = ("Gemm", "MatMul", "Conv", "Flatten", "Reshape", "Relu", "Tanh", "Sigmoid", "Softmax", "LeakyRelu", "Softplus",
        "Clip", "LayerNormalization", "Quant", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Identity", "Cast",
        "Dropout")
# operators only computed from constants (folded by qonnx before the chain is read), elementwise or
# shape-only so that folding costs no more than its output's size (checked first)
_FOLD_OPS = ("Constant", "Identity", "Cast", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Reshape",
             "Transpose", "Flatten", "Mul", "Add", "Sub", "Div", "Sqrt", "Reciprocal", "Neg", "Greater", "Where",
             # a distribution's parameters (SB3's exports: std = exp(log_std), broadcast to the mean's shape)
             "ConstantOfShape", "Expand", "Exp", "Log", "Pow", "Abs", "Erf", "Clip", "Tanh", "Max", "Min", "Equal",
             "Less", "Not")
# operators of a policy's other outputs or of a branch the first output does not read (SB3's export
# recipe: the Gaussian's log_std -> exp, the log-probability): read only to be pruned (``_prune``); one left
# on the chain is refused by name
_OFF_CHAIN_OPS = ("Exp", "Log", "Pow", "Neg", "Sqrt", "Abs", "Erf", "ReduceSum", "ReduceMean", "Softmax", "Expand",
                  "ConstantOfShape", "Shape", "Max", "Min", "Equal", "Less", "Greater", "Where", "Not", "Tanh", "Clip",
                  "Softplus", "Sum", "Mean", "Reciprocal")
_QUANT_OPS = ("Quant", "BipolarQuant", "Trunc")
_QONNX = "qonnx.custom_op.general"
# QONNX rounding modes -> ap_fixed quantization modes (qonnx's resolve_rounding_mode)
_ROUNDING = {"ROUND": "RND_CONV", "HALF_EVEN": "RND_CONV", "FLOOR": "TRN", "DOWN": "TRN_ZERO", "HALF_UP": "RND_INF",
             "HALF_DOWN": "RND_ZERO"}
# what an operator outside the layer language is, and what to do instead
_HINTS = {
    "ReduceMean": "a LayerNorm written out in primitive nodes (opset < 17): export with opset_version >= 17, "
                  "which writes one LayerNormalization node",
    "Pow": "a LayerNorm written out in primitive nodes (opset < 17): export with opset_version >= 17",
    "Concat": "a network of several inputs (a critic's state and action): import each branch, or give the "
              "critic one input (NetSpec extra_inputs)",
    "Elu": "no ELU layer in the layer language: use LeakyReLU or Softplus",
    "Selu": "no SELU layer in the layer language: use LeakyReLU",
    "Gelu": "no GELU layer in the layer language: use Tanh, Softplus or LeakyReLU",
    "HardSigmoid": "no hard sigmoid in the layer language: use Sigmoid or Clip",
    "HardSwish": "no hard swish in the layer language: use LeakyReLU",
    "Transpose": "only a Flatten / Reshape to (batch, features) reshapes data in the layer language",
    "MaxPool": "no pooling layer in the layer language: use a strided Conv",
    "AveragePool": "no pooling layer in the layer language: use a strided Conv",
    "GlobalAveragePool": "no pooling layer in the layer language: use a strided Conv",
    "BipolarQuant": "binary (+-scale) quantization has no fixed<W,I> format: use a Quant of 2 or more bits",
    "Trunc": "QONNX Trunc (average-pool rescaling) has no layer in the layer language",
}
MAX_ONNX_NODES = 4096  # nodes of one model: a policy network has tens

MAX_ONNX_BYTES = 2 << 30  # protobuf's limit of one message: a larger model keeps its weights in external files
MAX_ONNX_ELEMENTS = MAX_LAYER_PARAMS  # weights of the whole file, and input features: 2 GiB as float64
_NUMBER_TYPES = ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                 "UINT32", "UINT64")


def _read_model(source, where: str):
    """The ModelProto of file `source`, its size checked before it is read; external data is not loaded."""
    import onnx

    try:
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_ONNX_BYTES:
                raise RlhlsError(f"{where}: {size} bytes, more than the {MAX_ONNX_BYTES} an ONNX model may have")
            data = f.read(MAX_ONNX_BYTES + 1)
    except OSError as e:
        raise RlhlsError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_ONNX_BYTES:
        raise RlhlsError(f"{where}: more than the {MAX_ONNX_BYTES} bytes an ONNX model may have")
    try:
        return onnx.load_model_from_string(data)
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise RlhlsError(f"{where}: not an ONNX model ({type(e).__name__}: {first})") from None


def _load_external(model, folder: Path, where: str) -> None:
    """Read the external data of the model's initializers into them (torch's dynamo exporter writes
    tensors of 1 KiB and more to '<model>.onnx.data' beside the model), only from a regular file in
    the model's own folder named without a folder part (not a link), the range [offset, offset +
    length) inside it and as long as the tensor's dims need (checked before reading). Others stay
    external and are refused by _checked_elements."""
    from onnx import TensorProto, helper

    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        at = f"{where}: tensor '{t.name}'"
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc or loc != Path(loc).name or loc in (".", "..") or "\\" in loc:
            continue  # elsewhere: refused, not read
        path = folder / loc
        try:
            st = os.lstat(path)
        except OSError:
            raise RlhlsError(f"{at}: its data file '{loc}' beside the model cannot be read") from None
        if not stat.S_ISREG(st.st_mode):
            raise RlhlsError(f"{at}: its data file '{loc}' is not a regular file (a link or a folder is not read)")
        n = _checked_elements(t, where, data=False)
        need = n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        try:
            offset = int(info.get("offset", "0"))
            length = int(info.get("length", str(need)))
        except ValueError:
            raise RlhlsError(f"{at}: offset / length {info.get('offset')!r} / {info.get('length')!r} are not "
                             "numbers") from None
        if length != need or offset < 0 or offset + length > st.st_size:
            raise RlhlsError(f"{at}: dims {list(t.dims)} need {need} bytes; its data file '{loc}' gives {length} at "
                             f"offset {offset} of {st.st_size}")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            data = b""
            while len(data) < length:
                chunk = os.read(fd, length - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        if len(data) != length:
            raise RlhlsError(f"{at}: its data file '{loc}' ended before {length} bytes")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def _checked_elements(t, where: str, data: bool = True) -> int:
    """The element count tensor `t` declares, after checking that it is a number type with dims >= 1,
    not in an external file, and that its data is as long as its dims declare (nothing allocated);
    data=False: its type and dims only."""
    from onnx import TensorProto, helper

    at = f"{where}: tensor '{t.name}'"
    if data and (t.data_location == TensorProto.EXTERNAL or len(t.external_data)):
        raise RlhlsError(f"{at}: its data is in an external file, which is not read (only a file beside the model "
                         "file is); save the model with its weights inside (onnx.save(model, path, "
                         "save_as_external_data=False))")
    kind = TensorProto.DataType.Name(t.data_type) if t.data_type in TensorProto.DataType.values() else str(t.data_type)
    if kind not in _NUMBER_TYPES:
        raise RlhlsError(f"{at}: data type {kind}; expected a number type ({', '.join(_NUMBER_TYPES)})")
    dims = list(t.dims)
    if any(d < 1 for d in dims):
        raise RlhlsError(f"{at}: dims {dims}; expected sizes >= 1")
    n = math.prod(dims)
    if n > MAX_ONNX_ELEMENTS:
        raise RlhlsError(f"{at}: dims {dims} are {n} elements, more than the {MAX_ONNX_ELEMENTS} a model may have")
    if not data:
        return n
    if t.raw_data:
        need = n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        if len(t.raw_data) != need:
            raise RlhlsError(f"{at}: dims {dims} need {need} bytes of data; it has {len(t.raw_data)}")
    else:
        got = len(getattr(t, helper.tensor_dtype_to_field(t.data_type)))
        if got != n:
            raise RlhlsError(f"{at}: dims {dims} need {n} values; it has {got}")
    return n



def import_onnx(source, name: str | None = None) -> Network:
    """The Network of the ONNX model `source` (a path or an onnx ModelProto), named `name` (default:
    the file's stem or the graph's name), with the model's weights (module docstring)."""
    import onnx

    if isinstance(source, (str, Path)):
        where = f"ONNX file '{source}'"
        if not Path(source).is_file():
            raise RlhlsError(f"{where}: no such file")
        model = _read_model(source, where)
        _load_external(model, Path(source).resolve().parent, where)
        name = name or Path(source).stem
    else:
        if not isinstance(source, onnx.ModelProto):
            raise RlhlsError(f"ONNX model {source!r}: expected a path or an onnx.ModelProto")
        model = onnx.ModelProto()
        model.CopyFrom(source)  # the caller's model is not changed
        where = f"ONNX model '{model.graph.name}'"
        name = name or model.graph.name or "net"
    _check_model(model, where)
    io = _io(model)  # before the clean-up fixes the batch axis
    w = _clean(model, where)
    ops, shape = _Chain(w, where).read()
    ops = _fold_affines(ops, where)
    net = _network(ops, shape, name, where)
    net.onnx_io = io
    return net


def _io(model) -> dict:
    """The graph's name, its input's and output's names and dims as written (an int, a symbolic
    name, or None where the file leaves a dim unknown)."""
    def dims(v):
        return [d.dim_param if d.HasField("dim_param") else int(d.dim_value) if d.HasField("dim_value") else None
                for d in v.type.tensor_type.shape.dim]

    g = model.graph
    inits = {t.name for t in g.initializer}
    x = next(i for i in g.input if i.name not in inits)  # _check_model: exactly one
    return {"graph": g.name, "input": x.name, "input_dims": dims(x), "output": g.output[0].name,
            "output_dims": dims(g.output[0])}


def _node_at(where: str, n) -> str:
    return f"{where}: node '{n.name or (n.output[0] if n.output else '')}' ({n.op_type})"


def _check_model(model, where: str) -> None:
    """Sizes and operators, before anything is computed from the file: every initializer and
    Constant tensor (checked_elements), at most MAX_ONNX_NODES nodes, each an operator the layer
    language has or one folded from constants."""
    import onnx

    g = model.graph
    if len(g.node) > MAX_ONNX_NODES:
        raise RlhlsError(f"{where}: {len(g.node)} nodes, more than the {MAX_ONNX_NODES} a model may have")
    tensors = list(g.initializer)
    for n in g.node:
        if n.op_type == "Constant":
            value = [a for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
            plain = [a for a in n.attribute if a.name in ("value_float", "value_int", "value_floats", "value_ints")]
            if len(n.output) != 1 or len(value) + len(plain) != 1 or len(n.attribute) != 1:
                raise RlhlsError(f"{_node_at(where, n)}: only a 'value' tensor (or one number or list of numbers) "
                                 "and one output are read")
            tensors += [v.t for v in value]
        elif n.domain not in ("", "ai.onnx", _QONNX, "onnx.brevitas", "finn", "finn.custom_op.general"):
            raise RlhlsError(f"{_node_at(where, n)}: operator of the domain '{n.domain}', not in the layer language")
        elif (n.op_type not in _OPS and n.op_type not in _FOLD_OPS and n.op_type not in _QUANT_OPS
              and n.op_type not in _OFF_CHAIN_OPS):
            hint = _HINTS.get(n.op_type)
            raise RlhlsError(f"{_node_at(where, n)}: not in the layer language"
                             + (f" ({hint})" if hint else f" (it has {', '.join(_OPS)})"))
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                raise RlhlsError(f"{_node_at(where, n)}: a subgraph attribute, not in the layer language")
    total = 0
    for t in tensors:  # every size checked before any array is made
        total += _checked_elements(t, where)
        if total > MAX_ONNX_ELEMENTS:
            raise RlhlsError(f"{where}: tensor '{t.name}' brings its weights past the {MAX_ONNX_ELEMENTS} elements a "
                             "model may have")
    inputs = [i for i in g.input if i.name not in {t.name for t in g.initializer}]
    if len(inputs) != 1 or not g.output:
        raise RlhlsError(f"{where}: expected one input and an output, found {len(inputs)} and {len(g.output)}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) < 2 or any(d is None or d < 1 for d in dims[1:]):
        raise RlhlsError(f"{where}: input '{inputs[0].name}' has shape {dims}, expected (N, features) or (N, C, H, W)")
    features = math.prod(d for d in dims[1:] if d is not None)  # none is None by now
    if features > MAX_ONNX_ELEMENTS:
        raise RlhlsError(f"{where}: input '{inputs[0].name}' has shape {dims}: {features} features, more "
                         f"than the {MAX_ONNX_ELEMENTS} a network may take")


@contextlib.contextmanager
def _quiet():
    """qonnx and onnxruntime warnings (about the user's file, already judged here) kept off stderr."""
    import warnings

    import onnxruntime as ort

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort.set_default_logger_severity(3)
        yield


def _clean(model, where: str):
    """qonnx's clean-up of the model (module docstring), batch axis 1; a qonnx failure is one line."""
    import onnx
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.fold_constants import FoldConstants
    from qonnx.transformation.general import RemoveStaticGraphInputs, RemoveUnusedTensors
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.transformation.quant_constant_folding import FoldTransposeIntoQuantInit

    g = model.graph
    if len(g.output) > 1:  # SB3's export of a policy: actions, values, log_prob; the first is the network
        dropped = [o.name for o in g.output[1:]]
        del g.output[1:]
        log.warning("%s: %d outputs; the first, '%s', is the network imported (the others, %s, are left out)",
                    where, len(dropped) + 1, g.output[0].name, ", ".join(f"'{d}'" for d in dropped))
    _prune(g)
    for n in g.node:  # as qonnx's cleanup_model: Brevitas' Quant nodes in qonnx's domain
        if n.op_type in _QUANT_OPS:
            n.domain = _QONNX
    inits = {t.name for t in g.initializer}
    for v in [i for i in g.input if i.name not in inits] + list(g.output):
        dims = v.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_value = 1  # shape-only nodes of the batch fold to constants
    del g.value_info[:]  # the exporter's (symbolic batch) shapes: inferred again
    # qonnx folds by running single nodes through onnxruntime, in a model of onnx's default IR version
    # (onnx 1.23: 14, more than onnxruntime 1.32 reads): the model's own, at most 10, meanwhile
    ir = min(int(model.ir_version) or 10, 10)
    model.ir_version = ir
    saved = onnx.IR_VERSION
    step = "InferShapes"
    try:
        onnx.IR_VERSION = ir  # type: ignore[assignment]  # onnx's stubs type it as its protobuf enum (an int)
        with _quiet():
            w = ModelWrapper(model).transform(InferShapes())
            _check_folds(w, where)
            for step, t in (("FoldConstants", FoldConstants(exclude_op_types=list(_QUANT_OPS))),
                            ("FoldTransposeIntoQuantInit", FoldTransposeIntoQuantInit()),
                            ("prune", None), ("RemoveUnusedTensors", RemoveUnusedTensors()),
                            ("RemoveStaticGraphInputs", RemoveStaticGraphInputs()), ("InferShapes", InferShapes())):
                if t is None:  # a branch only the folded shapes read (a distribution's std) is dead now
                    _prune(w.model.graph)
                else:
                    w = w.transform(t)
    except RlhlsError:
        raise
    except Exception as e:  # qonnx asserts / onnx and onnxruntime errors on a model it cannot take
        text = str(e).strip().splitlines()
        raise RlhlsError(f"{where}: qonnx clean-up ({step}) failed: {type(e).__name__}"
                         + (f": {text[0][:200]}" if text else "")) from None
    finally:
        onnx.IR_VERSION = saved
    return w


def _prune(g) -> None:
    """Remove the nodes whose outputs the graph's output does not read (directly or through others)."""
    producer = {o: n for n in g.node for o in n.output if o}
    todo, keep = [o.name for o in g.output], set()
    while todo:
        n = producer.get(todo.pop())
        if n is not None and id(n) not in keep:
            keep.add(id(n))
            todo += [i for i in n.input if i]
    for n in [n for n in g.node if id(n) not in keep]:
        g.node.remove(n)


def _check_folds(w, where: str) -> None:
    """Before folding: each node computed from constants only is an elementwise or shape operator
    (_FOLD_OPS) whose inferred output is at most MAX_ONNX_ELEMENTS, all of them together too."""
    g = w.graph
    const = {t.name for t in g.initializer}
    total = 0
    for n in g.node:
        ins = [i for i in n.input if i]
        shape_only = n.op_type == "Shape" and w.get_tensor_shape(n.input[0]) is not None
        if n.op_type in _QUANT_OPS or not (n.op_type == "Constant" or shape_only or all(i in const for i in ins)):
            continue
        if n.op_type not in _FOLD_OPS:
            raise RlhlsError(f"{_node_at(where, n)}: computes from constants only; only elementwise and shape "
                             "operators are folded (compute it into an initializer before exporting)")
        for o in n.output:
            shape = w.get_tensor_shape(o)
            if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
                raise RlhlsError(f"{_node_at(where, n)}: the shape of its output '{o}' cannot be inferred")
            total += math.prod(shape)
            if math.prod(shape) > MAX_ONNX_ELEMENTS or total > MAX_ONNX_ELEMENTS:
                raise RlhlsError(f"{_node_at(where, n)}: its output '{o}' of shape {list(shape)} brings the constants "
                                 f"past the {MAX_ONNX_ELEMENTS} elements a model may have")
            const.add(o)


def _attrs(n) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


class _Op:
    """One step of the chain: 'linear' (Dense / Conv2d with its weights), 'layer' (a layer without
    weights from the file, or a LayerNorm with its gamma / beta), 'flatten', or 'affine' (y = s x + t,
    s / t per feature or channel, to be folded)."""

    # set by kind: linear (layer 'dense' / 'conv', W, b, formats, stride), layer (layer: a Layer; params),
    # affine (s, t, at; names: the affines folded into it)
    layer: Any
    W: np.ndarray
    b: np.ndarray | None
    formats: dict
    stride: int
    params: dict
    s: np.ndarray
    t: np.ndarray
    at: str
    names: list[_Op]

    def __init__(self, kind: str, node, **kw) -> None:
        self.kind, self.node = kind, node
        self.__dict__.update(kw)


class _Chain:
    """Reads the cleaned graph from its input to its output (module docstring)."""

    def __init__(self, w, where: str):
        from onnx import numpy_helper

        self.w, self.g, self.where = w, w.graph, where
        self.opset = next((o.version for o in w.model.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.consts = {t.name: numpy_helper.to_array(t) for t in self.g.initializer}
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in self.g.node:
            for i in dict.fromkeys(n.input):
                self.consumers.setdefault(i, []).append(n)

    # -- constants
    def const(self, n, k: int, what: str, at: str):
        """Input k of node n as a float64 array: an initializer (after folding)."""
        if len(n.input) <= k or not n.input[k] or n.input[k] not in self.consts:
            src = self.producer.get(n.input[k]) if len(n.input) > k else None
            how = f" (it is computed by node '{src.name}' ({src.op_type}))" if src is not None else ""
            raise RlhlsError(f"{at}: its {what} (input {k}) is not a constant{how}")
        v = self.consts[n.input[k]]
        if v.dtype.kind not in "biuf":
            raise RlhlsError(f"{at}: its {what} '{n.input[k]}' is of type {v.dtype}, expected numbers")
        return np.asarray(v, dtype=np.float64)

    def param(self, n, k: int, what: str, at: str):
        """A weight / bias input: (float64 values, fixed format or None) -- an initializer, or the
        QONNX Quant of one (its format; the values before quantization: the layer's float master)."""
        t = n.input[k] if len(n.input) > k else ""
        q = self.producer.get(t)
        if t and t not in self.consts and q is not None and q.op_type in _QUANT_OPS:
            qat = _node_at(self.where, q)
            fmt = self.quant_format(q, qat)
            return self.const(q, 0, f"{what} before quantization", qat), fmt
        return self.const(n, k, what, at), None

    def quant_format(self, q, at: str) -> FixedFormat:
        """The fixed<W, W-F> of a QONNX Quant node (module docstring), or a refusal saying why not."""
        if q.op_type != "Quant":
            raise RlhlsError(f"{at}: not in the layer language ({_HINTS.get(q.op_type, '')})")
        a = _attrs(q)
        scale = self.const(q, 1, "scale", at)
        zp = self.const(q, 2, "zero point", at)
        bw = self.const(q, 3, "bit width", at)
        if scale.size < 1 or not np.all(scale == scale.flat[0]):
            raise RlhlsError(f"{at}: per-channel scales {scale.ravel()[:4].tolist()}...: one format per layer, "
                             "expected one scale")
        s = float(scale.flat[0])
        m, e = math.frexp(s) if math.isfinite(s) and s > 0 else (0.0, 0)
        if m != 0.5:
            raise RlhlsError(f"{at}: scale {s!r} is not a power of two: no fixed<W,I> format has that step "
                             "(quantize with a power-of-two scale, e.g. Brevitas' scaling_impl_type po2)")
        if np.any(zp != 0):
            raise RlhlsError(f"{at}: zero point {zp.ravel()[:4].tolist()}: fixed<W,I> formats have zero point 0 "
                             "(use a symmetric quantizer)")
        if bw.size != 1 or bw.flat[0] != int(bw.flat[0]) or not 2 <= bw.flat[0] <= 53:
            raise RlhlsError(f"{at}: bit width {bw.ravel()[:4].tolist()}: expected one whole number of 2..53 bits")
        width, frac = int(bw.flat[0]), 1 - e  # s = 2**(e - 1) = 2**-frac
        signed, narrow = bool(a.get("signed", 1)), bool(a.get("narrow", 0))
        mode = a.get("rounding_mode", b"ROUND")
        mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).upper()
        if mode not in _ROUNDING:
            raise RlhlsError(f"{at}: rounding mode {mode}: no ap_fixed quantization mode rounds so (expected one "
                             f"of {', '.join(_ROUNDING)})")
        if narrow and not signed:
            raise RlhlsError(f"{at}: narrow unsigned range [0, 2**{width} - 2]: no ap_fixed overflow mode saturates "
                             "there")
        try:
            return FixedFormat(width, width - frac, signed, _ROUNDING[mode], "SAT_SYM" if narrow else "SAT")
        except RlhlsError as e:
            raise RlhlsError(f"{at}: {e}") from None

    # -- the chain
    def read(self):
        g, where = self.g, self.where
        inits = set(self.consts)
        inp = [i for i in g.input if i.name not in inits][0]
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        self.cur, self.batched = tuple(dims[1:]), True  # per-sample shape; batched: the batch axis is there
        shape = self.cur
        self.ops = []
        x, out = inp.name, g.output[0].name
        while x != out or self.consumers.get(x):
            users = self.consumers.get(x, [])
            if not users:
                raise RlhlsError(f"{where}: the chain of layers ends at '{x}', not at the output '{out}'")
            if x == out:
                raise RlhlsError(f"{where}: the output '{out}' is also read by node '{users[0].name}' "
                                 f"({users[0].op_type}): only a chain of layers is imported")
            x = self.step(x, users)
        return self.ops, shape

    def step(self, x: str, users: list) -> str:
        """Read the node(s) that take x; return the chain's next tensor."""
        where = self.where
        if len(users) > 1:
            sp = self.softplus(x, users)
            if sp is not None:
                return sp
            names = ", ".join(f"'{u.name}' ({u.op_type})" for u in users[:4])
            act = self.written_out(users)
            if act is not None:
                raise RlhlsError(f"{where}: tensor '{x}' feeds {names}: {act[0]} written out in primitive nodes; "
                                 f"no {act[1]} layer in the layer language: use {act[2]}")
            raise RlhlsError(f"{where}: tensor '{x}' feeds {len(users)} nodes ({names}): only a chain of layers is "
                             "imported")
        n = users[0]
        at = _node_at(where, n)
        outs = [o for o in n.output if o]
        if n.op_type == "Dropout":
            outs = outs[:1] if len(outs) < 2 or not self.consumers.get(outs[1]) else outs
        if len(outs) != 1:
            raise RlhlsError(f"{at}: {len(outs)} outputs; a layer has one")
        data = [v for v in n.input if v and v != x]
        if n.op_type not in ("Quant",) and any(v not in self.consts and not self._quantized(v) for v in data):
            v = next(v for v in data if v not in self.consts)
            src = self.producer.get(v)
            raise RlhlsError(f"{at}: takes the computed tensor '{v}'"
                             + (f" of node '{src.name}' ({src.op_type})" if src is not None else "")
                             + " besides its input (only a chain of layers is imported)")
        handler = getattr(self, "op_" + n.op_type, None)
        if handler is None:
            hint = _HINTS.get(n.op_type)
            raise RlhlsError(f"{at}: not in the layer language" + (f" ({hint})" if hint else
                                                                   f" (it has {', '.join(_OPS)})"))
        handler(n, x, _attrs(n), at)
        return outs[0]

    def written_out(self, users: list):
        """(what, name, instead) when the nodes reading one tensor are an activation the exporter wrote out
        (SiLU: x * sigmoid(x); GELU: x * (1 + erf(x / sqrt 2)) / 2), else None."""
        ops = {u.op_type for u in users}
        if ops == {"Sigmoid", "Mul"}:
            return "SiLU / Swish (x * sigmoid(x))", "SiLU", "Sigmoid, Tanh or LeakyReLU"
        def after(nodes):
            return [c for n in nodes for o in n.output for c in self.consumers.get(o, [])]

        if any(n.op_type == "Erf" for n in after(users) + after(after(users))):
            return "GELU (x * (1 + erf(x / sqrt(2))) / 2)", "GELU", "Tanh, Softplus or LeakyReLU"
        return None

    def _quantized(self, v: str) -> bool:
        q = self.producer.get(v)
        return q is not None and q.op_type in _QUANT_OPS and all(i in self.consts for i in q.input if i)

    def features(self, at: str) -> int:
        if len(self.cur) != 1:
            raise RlhlsError(f"{at}: needs (batch, features), its input is (batch, {', '.join(map(str, self.cur))}): "
                             "add a Flatten before it")
        return self.cur[0]

    def emit(self, kind, n, **kw):
        self.ops.append(_Op(kind, n, **kw))

    # -- no-ops
    def op_Identity(self, n, x, a, at):
        pass

    def op_Expand(self, n, x, a, at):
        shape = [int(d) for d in np.asarray(self.const(n, 1, "shape", at)).ravel()]
        full = (1, *self.cur) if self.batched else self.cur
        if np.broadcast_shapes(tuple(full), tuple(shape)) != tuple(full):
            raise RlhlsError(f"{at}: expands {list(full)} to {shape}; only an Expand to the tensor's own shape (a "
                             "no-op: a distribution's broadcast of its parameters) is read")

    def op_Cast(self, n, x, a, at):
        from onnx import TensorProto

        to = a.get("to")
        if to not in (TensorProto.FLOAT, TensorProto.DOUBLE):
            name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else str(to)
            raise RlhlsError(f"{at}: casts to {name}; only a cast to float / double (a no-op here) is read")

    def op_Dropout(self, n, x, a, at):
        if len(n.input) > 2 and n.input[2]:
            mode = self.const(n, 2, "training_mode", at)
            if np.any(mode != 0):
                raise RlhlsError(f"{at}: in training mode (training_mode true): export the model in eval mode "
                                 "(model.eval()), where Dropout is the identity")

    # -- layers with weights
    def op_Gemm(self, n, x, a, at):
        if n.input[0] != x or a.get("transA", 0):
            raise RlhlsError(f"{at}: the input must be the left operand A, not transposed (transA = 0)")
        k = self.features(at)
        w, wf = self.param(n, 1, "weight", at)
        if w.ndim != 2:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' has shape {list(w.shape)}; expected 2 dims")
        w = w.T if a.get("transB", 0) else w
        if w.shape[0] != k:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' takes {w.shape[0]} inputs; the layer's input has {k}")
        b, bf = self.param(n, 2, "bias", at) if len(n.input) > 2 and n.input[2] else (None, None)
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        if (alpha != 1.0 and wf is not None) or (beta != 1.0 and bf is not None):
            raise RlhlsError(f"{at}: alpha / beta scale quantized weights; only 1 is read with a Quant")
        if b is not None:
            if b.size not in (1, w.shape[1]) or (b.ndim == 2 and b.shape[0] != 1) or b.ndim > 2:
                raise RlhlsError(f"{at}: bias '{n.input[2]}' has shape {list(b.shape)}; expected ({w.shape[1]},) for "
                                 f"{w.shape[1]} outputs")
            b = np.broadcast_to(b.reshape(-1), (w.shape[1],)) * beta
        self.linear(n, "dense", w * alpha, b, {"W": wf, "b": bf})
        self.cur = (w.shape[1],)

    def op_MatMul(self, n, x, a, at):
        if n.input[0] != x:
            raise RlhlsError(f"{at}: the input must be the left operand (x @ W)")
        k = self.features(at)
        w, wf = self.param(n, 1, "weight", at)
        if w.ndim != 2:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' has shape {list(w.shape)}; expected 2 dims")
        if w.shape[0] != k:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' takes {w.shape[0]} inputs; the layer's input has {k}")
        self.linear(n, "dense", w, None, {"W": wf})
        self.cur = (w.shape[1],)

    def op_Conv(self, n, x, a, at):
        if not self.batched or len(self.cur) != 3:
            raise RlhlsError(f"{at}: needs (batch, C, H, W), its input is {self.cur}")
        w, wf = self.param(n, 1, "weight", at)
        if w.ndim != 4:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' has shape {list(w.shape)}; expected 4 dims")
        strides = list(a.get("strides", [1, 1]))
        pad = a.get("auto_pad", b"NOTSET")
        pad = pad.decode() if isinstance(pad, bytes) else pad
        if (any(a.get("pads", [0] * 4)) or any(d != 1 for d in a.get("dilations", [1, 1])) or a.get("group", 1) != 1
                or len(strides) != 2 or len(set(strides)) != 1 or not 1 <= strides[0] <= 1 << 16
                or pad not in ("NOTSET", "VALID")):
            raise RlhlsError(f"{at}: only valid padding, no dilation, one group and equal strides are in the layer "
                             "language")
        b, bf = self.param(n, 2, "bias", at) if len(n.input) > 2 and n.input[2] else (None, None)
        c, h, wd = self.cur
        if w.shape[1] != c:
            raise RlhlsError(f"{at}: weight '{n.input[1]}' takes {w.shape[1]} channels; the layer's input has {c}")
        if w.shape[2] > h or w.shape[3] > wd:
            raise RlhlsError(f"{at}: kernel {w.shape[2]}x{w.shape[3]} larger than its input {h}x{wd}")
        if b is not None and b.size != w.shape[0]:
            raise RlhlsError(f"{at}: bias '{n.input[2]}' has shape {list(b.shape)}; expected ({w.shape[0]},)")
        s = int(strides[0])
        self.linear(n, "conv", w, None if b is None else b.reshape(-1), {"W": wf, "b": bf}, stride=s)
        self.cur = (w.shape[0], (h - w.shape[2]) // s + 1, (wd - w.shape[3]) // s + 1)

    def linear(self, n, kind, w, b, formats, **kw):
        self.emit("linear", n, layer=kind, W=np.asarray(w, dtype=np.float64),
                  b=None if b is None else np.asarray(b, dtype=np.float64),
                  formats={k: f for k, f in formats.items() if f is not None}, **kw)

    # -- reshapes
    def op_Flatten(self, n, x, a, at):
        rank = len(self.cur) + self.batched
        axis = int(a.get("axis", 1))
        axis = axis + rank if axis < 0 else axis
        if not self.batched or axis != 1:
            raise RlhlsError(f"{at}: axis {a.get('axis', 1)} of a rank-{rank} tensor; only a flatten to (batch, "
                             "features) (axis 1) is in the layer language")
        self.flatten(n)

    def op_Reshape(self, n, x, a, at):
        target = self.const(n, 1, "shape", at).astype(np.int64).ravel().tolist()
        full = ((1,) if self.batched else ()) + self.cur
        out = []
        for i, d in enumerate(target):  # ONNX Reshape: 0 copies the input's dim (unless allowzero), -1 is inferred
            out.append(full[i] if d == 0 and not a.get("allowzero", 0) and i < len(full) else d)
        if out.count(-1) == 1:
            rest = math.prod(d for d in out if d != -1)
            if rest > 0 and math.prod(full) % rest == 0:
                out[out.index(-1)] = math.prod(full) // rest
        size = math.prod(self.cur)
        if tuple(out) == full:
            return  # a no-op
        if self.batched and out == [1, size]:
            self.flatten(n)
        elif out == [size]:  # (-1) of a batch of one: the batch axis is gone, the features stay
            self.flatten(n)
            self.batched = False
        else:
            raise RlhlsError(f"{at}: reshapes {list(full)} to {target}; only a flatten to (batch, features) or (-1) is "
                             "in the layer language")

    def flatten(self, n):
        if len(self.cur) > 1:
            self.emit("flatten", n)
            self.cur = (math.prod(self.cur),)

    # -- elementwise layers
    def layer(self, n, layer, **kw):
        self.emit("layer", n, layer=layer, **kw)

    def op_Relu(self, n, x, a, at):
        self.layer(n, ReLU())

    def op_Tanh(self, n, x, a, at):
        self.layer(n, Tanh())

    def op_Sigmoid(self, n, x, a, at):
        self.layer(n, Sigmoid())

    def op_LeakyRelu(self, n, x, a, at):
        self.layer(n, LeakyReLU(float(a.get("alpha", 0.01))))

    def op_Softplus(self, n, x, a, at):
        self.layer(n, Softplus())

    def softplus(self, x: str, users: list):
        """torch's dynamo Softplus: Where(x > t, x, Softplus(x)) -> Softplus(threshold=t), else None."""
        ops = {u.op_type: u for u in users}
        if len(users) != 3 or set(ops) != {"Softplus", "Greater", "Where"}:
            return None
        sp, gt, wh = ops["Softplus"], ops["Greater"], ops["Where"]
        if (list(gt.input)[:1] != [x] or len(gt.input) != 2 or gt.input[1] not in self.consts
                or list(wh.input) != [gt.output[0], x, sp.output[0]] or np.size(self.consts[gt.input[1]]) != 1
                or len(self.consumers.get(gt.output[0], [])) != 1 or len(self.consumers.get(sp.output[0], [])) != 1):
            return None
        self.layer(wh, Softplus(float(np.asarray(self.consts[gt.input[1]], dtype=np.float64).ravel()[0])))
        return wh.output[0]

    def op_Clip(self, n, x, a, at):
        bounds = []
        for k, key in ((1, "min"), (2, "max")):
            if self.opset < 11:
                v = a.get(key)
            elif len(n.input) > k and n.input[k]:
                v = self.const(n, k, key, at)
                if v.size != 1:
                    raise RlhlsError(f"{at}: {key} '{n.input[k]}' has shape {list(v.shape)}; expected one number")
                v = float(v.ravel()[0])
            else:
                v = None
            bounds.append(None if v is None or not math.isfinite(v) else float(v))
        self.layer(n, Clip(*bounds))

    def op_Softmax(self, n, x, a, at):
        rank = len(self.cur) + self.batched
        axis = int(a.get("axis", -1 if self.opset >= 13 else 1))
        axis = axis + rank if axis < 0 else axis
        if axis != rank - 1 or len(self.cur) != 1:
            raise RlhlsError(f"{at}: axis {a.get('axis')} of a rank-{rank} tensor; only the last axis of (batch, "
                             "features) is in the layer language")
        self.layer(n, Softmax())

    def op_LayerNormalization(self, n, x, a, at):
        k = self.features(at)
        rank = len(self.cur) + self.batched
        axis = int(a.get("axis", -1))
        if (axis + rank if axis < 0 else axis) != rank - 1:
            raise RlhlsError(f"{at}: axis {axis}; only the last axis (the features) is in the layer language")
        gamma = self.const(n, 1, "scale", at)
        beta = self.const(n, 2, "bias", at) if len(n.input) > 2 and n.input[2] else np.zeros(k)
        for what, v in (("scale", gamma), ("bias", beta)):
            if v.size not in (1, k):
                raise RlhlsError(f"{at}: {what} has shape {list(v.shape)}; expected ({k},)")
        eps = float(a.get("epsilon", 1e-5))
        self.layer(n, LayerNorm(eps), params={"gamma": np.broadcast_to(gamma.ravel(), (k,)).copy(),
                                               "beta": np.broadcast_to(beta.ravel(), (k,)).copy()})

    def op_Quant(self, n, x, a, at):
        if n.input[0] != x:
            raise RlhlsError(f"{at}: quantizes a constant by the data, not the data")
        self.layer(n, Quant(self.quant_format(n, at)))

    def op_BipolarQuant(self, n, x, a, at):
        self.quant_format(n, at)

    def op_Trunc(self, n, x, a, at):
        self.quant_format(n, at)

    # -- affines, folded later
    def per_feature(self, v: np.ndarray, what: str, at: str) -> np.ndarray:
        """A constant that broadcasts to one value per feature (1-D input) or channel ((C, H, W) input), as
        that vector."""
        full = ((1,) if self.batched else ()) + self.cur
        v = np.asarray(v, dtype=np.float64)
        if v.size == 1:
            return np.full(self.cur[0], float(v.ravel()[0]))
        try:
            b = np.broadcast_shapes(v.shape, full)
        except ValueError:
            b = None
        if b == full:
            if len(self.cur) == 1 and v.size == self.cur[0]:
                return v.reshape(-1)
            if len(self.cur) == 3 and v.size == self.cur[0] and v.shape[-2:] in ((1, 1),) and v.ndim >= 3:
                return v.reshape(-1)
        raise RlhlsError(f"{at}: {what} of shape {list(v.shape)} on a (batch, {', '.join(map(str, self.cur))}) input: "
                         "only one number, or one per feature / channel, is folded into a layer")

    def affine(self, n, s, t, at):
        if not self.batched and len(self.cur) != 1:
            raise RlhlsError(f"{at}: an affine on an input without its batch axis")
        self.emit("affine", n, s=s, t=t, at=at)

    def op_BatchNormalization(self, n, x, a, at):
        if a.get("training_mode", 0):
            raise RlhlsError(f"{at}: in training mode: export the model in eval mode (model.eval()), where it is "
                             "an affine map")
        if len(self.cur) not in (1, 3):
            raise RlhlsError(f"{at}: on a (batch, {', '.join(map(str, self.cur))}) input")
        c = self.cur[0]
        vals = []
        for k, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")):
            v = self.const(n, k, what, at)
            if v.size != c:
                raise RlhlsError(f"{at}: {what} '{n.input[k]}' has shape {list(v.shape)}; expected ({c},)")
            vals.append(v.reshape(-1))
        gamma, beta, mean, var = vals
        eps = float(a.get("epsilon", 1e-5))
        if np.any(var + eps <= 0):
            raise RlhlsError(f"{at}: variance + epsilon <= 0")
        s = gamma / np.sqrt(var + eps)
        self.affine(n, s, beta - mean * s, at)

    def _arith(self, n, x, at):
        other = 1 if n.input[0] == x else 0
        if n.input[1 - other] != x or n.input[other] == x:
            raise RlhlsError(f"{at}: takes its input twice")
        return self.per_feature(self.const(n, other, "constant", at), "the constant", at), other

    def op_Mul(self, n, x, a, at):
        c, _ = self._arith(n, x, at)
        self.affine(n, c, np.zeros_like(c), at)

    def op_Add(self, n, x, a, at):
        c, _ = self._arith(n, x, at)
        self.affine(n, np.ones_like(c), c, at)

    def op_Sub(self, n, x, a, at):
        c, other = self._arith(n, x, at)
        self.affine(n, np.ones_like(c), -c, at) if other == 1 else self.affine(n, -np.ones_like(c), c, at)

    def op_Div(self, n, x, a, at):
        c, other = self._arith(n, x, at)
        if other == 0:
            raise RlhlsError(f"{at}: divides a constant by the input (1 / x is not in the layer language)")
        if np.any(c == 0):
            raise RlhlsError(f"{at}: divides by 0")
        self.affine(n, 1.0 / c, np.zeros_like(c), at)


_NAMES = {"BatchNormalization": "BatchNormalization", "Mul": "a constant scale", "Div": "a constant divisor",
          "Add": "a constant offset", "Sub": "a constant offset"}


def _fold_affines(ops: list, where: str) -> list:
    """Each affine folded into the Gemm / MatMul / Conv directly before it, else the one directly after it
    (a flatten between), in float64 (module docstring); refused, naming it, when there is none."""
    out: list[_Op] = []
    for op in ops:  # consecutive affines compose first: s2 (s1 x + t1) + t2
        if op.kind == "affine" and out and out[-1].kind == "affine" and out[-1].s.shape == op.s.shape:
            prev = out[-1]
            prev.s, prev.t, prev.names = prev.s * op.s, prev.t * op.s + op.t, prev.names + [op]
            continue
        if op.kind == "affine":
            op.names = [op]
        out.append(op)
    ops, i = out, 0
    while i < len(ops):
        op = ops[i]
        if op.kind != "affine":
            i += 1
            continue
        before = ops[i - 1] if i > 0 else None
        after = ops[i + 1] if i + 1 < len(ops) else None
        flat = after is not None and after.kind == "flatten" and i + 2 < len(ops) and ops[i + 2].kind == "linear"
        target = after if after is not None and after.kind == "linear" else (ops[i + 2] if flat else None)
        if before is not None and before.kind == "linear" and _foldable(before, op, op.s):
            s, t = op.s, op.t
            if (before.layer == "dense" and s.size != before.W.shape[1]
                    or before.layer == "conv" and s.size != before.W.shape[0]):
                n_out = before.W.shape[1 if before.layer == "dense" else 0]
                raise RlhlsError(f"{op.at}: {s.size} values for the {n_out} outputs of the layer before it")
            if before.layer == "dense":
                before.W = before.W * s[None, :]
            else:
                before.W = before.W * s[:, None, None, None]
            b = np.zeros(s.size) if before.b is None else before.b
            before.b = b * s + t if (before.b is not None or np.any(t != 0)) else None
            del ops[i]
            continue
        if target is not None and _foldable(target, op, op.s, op.t):
            s, t = op.s, op.t
            if target.layer == "dense":
                if flat:  # per channel of the (C, H, W) the flatten reads: per feature of C*H*W, in C order
                    reps = target.W.shape[0] // s.size
                    s, t = np.repeat(s, reps), np.repeat(t, reps)
                b = np.zeros(target.W.shape[1]) if target.b is None else target.b
                bias = b + t @ target.W  # from the weights before scaling
                target.W = s[:, None] * target.W
            else:
                b = np.zeros(target.W.shape[0]) if target.b is None else target.b
                bias = b + np.einsum("ockl,c->o", target.W, t)
                target.W = target.W * s[None, :, None, None]
            target.b = bias if (target.b is not None or np.any(t != 0)) else None
            del ops[i]
            continue
        first = op.names[0]
        what = _NAMES.get(first.node.op_type, first.node.op_type)
        prev_op = before.node.op_type if before is not None else "the input"
        tail = after is None
        hint = ""
        if tail and before is not None and before.kind == "layer" and before.layer.kind == "Tanh" and \
                first.node.op_type in ("Mul", "Div", "Add", "Sub"):
            hint = ("; rlhls scales the tanh output to the environment's action box itself (a = low + (tanh + 1) "
                    "(high - low) / 2): export the actor without it")
        elif first.node.op_type == "BatchNormalization":
            hint = "; put it directly after a Linear / Conv layer (or directly before one)"
        raise RlhlsError(f"{first.at}: {what} after {prev_op} with no Gemm / MatMul / Conv directly before or after "
                         f"it to fold it into{hint}")
    return ops


def _foldable(lin, op, s, t=None) -> bool:
    """Folding op into lin keeps lin's quantized weights / bias on their grid: no scale of quantized
    weights (s = 1), no offset of a quantized bias (t, or t through the weights, = 0)."""
    moves_w = "W" in lin.formats and np.any(s != 1)
    moves_b = "b" in lin.formats and (np.any(op.t != 0) if t is None else np.any(t != 0))
    if moves_w or moves_b:
        raise RlhlsError(f"{op.at}: next to the quantized {'weights' if moves_w else 'bias'} of node '{lin.node.name}' "
                         f"({lin.node.op_type}): folding would move them off their quantization grid")
    return True


def _network(ops: list, shape: tuple, name: str, where: str) -> Network:
    """The Network of the read chain, its weights the file's."""
    if len(shape) not in (1, 3):  # e.g. (2, 3) observations: a leading flatten makes them features
        if ops and ops[0].kind == "flatten":
            ops, shape = ops[1:], (math.prod(shape),)
        else:
            raise RlhlsError(f"{where}: input of shape (N, {', '.join(map(str, shape))}), expected (N, features) or "
                             "(N, C, H, W), or a Flatten first")
    if not ops:
        raise RlhlsError(f"{where}: no layers between the input and the output")
    layers: list[Layer] = []
    weights: list[dict] = []
    for op in ops:
        if op.kind == "linear":
            fmts = dict(op.formats)
            if op.b is None:
                fmts.pop("b", None)
            if op.layer == "dense":
                layers.append(Dense(op.W.shape[1], bias=op.b is not None, param_formats=fmts))
            else:
                layers.append(Conv2d(op.W.shape[0], tuple(op.W.shape[2:]), stride=op.stride, bias=op.b is not None,
                                     param_formats=fmts))
            weights.append({"W": op.W} | ({"b": op.b} if op.b is not None else {}))
        elif op.kind == "flatten":
            layers.append(Flatten())
            weights.append({})
        else:
            layers.append(op.layer)
            weights.append(getattr(op, "params", {}))
    for layer, wts in zip(layers, weights):  # a weight must fit before the Network allocates its own
        if sum(v.size for v in wts.values()) > MAX_LAYER_PARAMS:
            raise RlhlsError(f"{where}: more than the {MAX_LAYER_PARAMS} weights a layer may have")
    try:
        net = Network(name, shape, layers)
        params = {}
        for layer, wts in zip(net.layers, weights):
            params.update({f"{layer.name}.{k}": v for k, v in wts.items()})
        net.set_params(params)
        for layer in net.layers:  # the weights are the file's, not an initialiser's
            if isinstance(layer, _MMLayer):
                layer._init_used, layer._gain_used = "onnx", None
    except RlhlsError as e:
        raise RlhlsError(f"{where}: {e}") from None
    return net
