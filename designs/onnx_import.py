"""ONNX import: a user's network as a Network of the layer language (the inverse of onnx_export).

The model must be one chain, input to output, of the nodes the layer language has:
Gemm (alpha = beta = 1, transA = 0; transB = 1 is transposed to our W (in, out)), MatMul with a
constant right operand (a following Add of a constant vector is its bias), Conv (valid padding,
no dilation, one group, equal strides), Flatten (axis 1), Relu, Tanh, Sigmoid, Softmax (last axis)
and Identity. Weights and biases come from the file's initializers (float64 here); the input is
(features,) or (C, H, W) after a batch axis. Any other node is refused, naming it.

A file is data, checked before anything is allocated from it: at most ``MAX_ONNX_BYTES``; every
initializer of a number type, its dims >= 1, its data as long as its dims declare, all of them
together at most ``MAX_ONNX_ELEMENTS`` elements, none in an external file (not read); the input at
most ``MAX_ONNX_ELEMENTS`` features; each layer's weight the size of the layer's input.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .errors import RlhlsError
from .network import MAX_LAYER_PARAMS, Conv2d, Dense, Flatten, Identity, Network, ReLU, Sigmoid, Softmax, Tanh

_ACTS = {"Relu": ReLU, "Tanh": Tanh, "Sigmoid": Sigmoid, "Identity": Identity}
_OPS = ("Gemm", "MatMul", "Add", "Conv", "Flatten", "Relu", "Tanh", "Sigmoid", "Softmax", "Identity")

MAX_ONNX_BYTES = 2 << 30  # protobuf's limit of one message: a larger model keeps its weights in external files
MAX_ONNX_ELEMENTS = MAX_LAYER_PARAMS  # weights of the whole file, and input features: 2 GiB as float64
_NUMBER_TYPES = ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
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
        raise RlhlsError(f"{where}: not an ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") \
            from None


def _checked_elements(t, where: str) -> int:
    """The element count tensor `t` declares, after checking that it is a number type with dims >= 1,
    not in an external file, and that its data is as long as its dims declare (nothing allocated)."""
    from onnx import TensorProto, helper

    at = f"{where}: tensor '{t.name}'"
    if t.data_location == TensorProto.EXTERNAL or len(t.external_data):
        raise RlhlsError(f"{at}: its data is in an external file, which is not read; save the model with its "
                         "weights inside (onnx.save(model, path, save_as_external_data=False))")
    kind = TensorProto.DataType.Name(t.data_type) if t.data_type in TensorProto.DataType.values() else str(t.data_type)
    if kind not in _NUMBER_TYPES:
        raise RlhlsError(f"{at}: data type {kind}; expected a number type ({', '.join(_NUMBER_TYPES)})")
    dims = list(t.dims)
    if any(d < 1 for d in dims):
        raise RlhlsError(f"{at}: dims {dims}; expected sizes >= 1")
    n = math.prod(dims)
    if n > MAX_ONNX_ELEMENTS:
        raise RlhlsError(f"{at}: dims {dims} are {n} elements, more than the {MAX_ONNX_ELEMENTS} a model may have")
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
    the file's stem or the graph's name), with the model's weights."""
    import onnx
    from onnx import numpy_helper

    if isinstance(source, (str, Path)):
        where = f"ONNX file '{source}'"
        if not Path(source).is_file():
            raise RlhlsError(f"{where}: no such file")
        model = _read_model(source, where)
        name = name or Path(source).stem
    else:
        model = source
        where = f"ONNX model '{model.graph.name}'"
        name = name or model.graph.name or "net"
    g = model.graph
    tensors = [(t.name, t) for t in g.initializer]
    for n in g.node:  # Constant nodes are initializers written as nodes
        if n.op_type == "Constant":
            value = [a for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
            if len(n.output) != 1 or len(value) != 1:
                raise RlhlsError(f"{where}: node '{n.name}' (Constant): only a 'value' tensor and one output are read")
            tensors.append((n.output[0], value[0].t))
    total = 0
    for _, t in tensors:  # every size checked before any array is made
        total += _checked_elements(t, where)
        if total > MAX_ONNX_ELEMENTS:
            raise RlhlsError(f"{where}: tensor '{t.name}' brings its weights past the {MAX_ONNX_ELEMENTS} elements a "
                             "model may have")
    consts = {name: numpy_helper.to_array(t).astype(np.float64) for name, t in tensors}
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1 or len(g.output) != 1:
        raise RlhlsError(f"{where}: expected one input and one output, found {len(inputs)} and {len(g.output)}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) not in (2, 4) or any(d is None or d < 1 for d in dims[1:]):
        raise RlhlsError(f"{where}: input '{inputs[0].name}' has shape {dims}, expected (N, features) or (N, C, H, W)")
    shape = tuple(dims[1:])
    if math.prod(shape) > MAX_ONNX_ELEMENTS:
        raise RlhlsError(f"{where}: input '{inputs[0].name}' has shape {dims}: {math.prod(shape)} features, more "
                         f"than the {MAX_ONNX_ELEMENTS} a network may take")

    layers, weights = [], []  # weights: (W in our layout, b or None) per Dense/Conv2d, in order
    x = inputs[0].name
    nodes = [n for n in g.node if n.op_type != "Constant"]
    cur = shape  # the current layer's input shape: a weight must fit it before the Network allocates one
    i = 0
    while i < len(nodes):
        n = nodes[i]
        at = f"{where}: node '{n.name or (n.output[0] if n.output else '')}' ({n.op_type})"
        if len(n.output) != 1:
            raise RlhlsError(f"{at}: {len(n.output)} outputs; a layer has one")

        def const(k: int, what: str, ndim: int | None = None):
            if len(n.input) <= k or n.input[k] not in consts:
                raise RlhlsError(f"{at}: its {what} (input {k}) is not an initializer")
            v = consts[n.input[k]]
            if ndim is not None and v.ndim != ndim:
                raise RlhlsError(f"{at}: {what} '{n.input[k]}' has shape {list(v.shape)}; expected {ndim} dims")
            return v

        def fits(w, features: int) -> None:
            if len(cur) == 1 and cur[0] != features:
                raise RlhlsError(f"{at}: weight '{n.input[1]}' takes {features} inputs; the layer's input has "
                                 f"{cur[0]}")

        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        data = [v for v in n.input if v and v != x]
        if x not in n.input:
            raise RlhlsError(f"{at}: does not take the previous node's output '{x}' (only a chain of layers is imported)")
        if any(v not in consts for v in data):
            raise RlhlsError(f"{at}: takes a computed tensor besides its input (only a chain of layers is imported)")
        if n.op_type == "Gemm":
            if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
                raise RlhlsError(f"{at}: only alpha = beta = 1 and transA = 0 are in the layer language")
            w = const(1, "weight", 2)
            w = w.T if attrs.get("transB", 0) else w
            fits(w, w.shape[0])
            b = const(2, "bias") if len(n.input) > 2 and n.input[2] else None
            if b is not None:
                if b.size not in (1, w.shape[1]):
                    raise RlhlsError(f"{at}: bias '{n.input[2]}' has shape {list(b.shape)}; expected "
                                     f"({w.shape[1]},) for {w.shape[1]} outputs")
                b = np.broadcast_to(b.reshape(-1), (w.shape[1],)).copy()
            layers.append(Dense(w.shape[1], bias=b is not None))
            weights.append((w, b))
            cur = (w.shape[1],)
        elif n.op_type == "MatMul":
            if n.input[0] != x:
                raise RlhlsError(f"{at}: the input must be the left operand")
            w, b = const(1, "weight", 2), None
            fits(w, w.shape[0])
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.op_type == "Add" and n.output[0] in nxt.input:
                other = [v for v in nxt.input if v != n.output[0]]
                if len(other) == 1 and other[0] in consts and consts[other[0]].size == w.shape[1]:
                    b = consts[other[0]].reshape(-1)
                    n, i = nxt, i + 1  # the bias add is part of the Dense layer
                    if len(n.output) != 1:
                        raise RlhlsError(f"{where}: node '{n.name}' (Add): {len(n.output)} outputs; a layer has one")
            layers.append(Dense(w.shape[1], bias=b is not None))
            weights.append((w, b))
            cur = (w.shape[1],)
        elif n.op_type == "Conv":
            w = const(1, "weight", 4)
            strides = list(attrs.get("strides", [1, 1]))
            if (any(attrs.get("pads", [0] * 4)) or any(d != 1 for d in attrs.get("dilations", [1, 1]))
                    or attrs.get("group", 1) != 1 or len(set(strides)) != 1
                    or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID")):
                raise RlhlsError(f"{at}: only valid padding, no dilation, one group and equal strides are in the "
                                 "layer language")
            b = const(2, "bias") if len(n.input) > 2 and n.input[2] else None
            if len(cur) == 3 and cur[0] != w.shape[1]:
                raise RlhlsError(f"{at}: weight '{n.input[1]}' takes {w.shape[1]} channels; the layer's input has "
                                 f"{cur[0]}")
            if len(cur) == 3 and (w.shape[2] > cur[1] or w.shape[3] > cur[2]):
                raise RlhlsError(f"{at}: kernel {w.shape[2]}x{w.shape[3]} larger than its input {cur[1]}x{cur[2]}")
            layers.append(Conv2d(w.shape[0], tuple(w.shape[2:]), stride=strides[0], bias=b is not None))
            weights.append((w, b))
            s = strides[0] if isinstance(strides[0], int) and strides[0] >= 1 else 1  # else the Network says
            cur = ((w.shape[0], (cur[1] - w.shape[2]) // s + 1, (cur[2] - w.shape[3]) // s + 1) if len(cur) == 3
                   else cur)
        elif n.op_type == "Flatten":
            if attrs.get("axis", 1) != 1:
                raise RlhlsError(f"{at}: only axis 1 (keep the batch axis) is in the layer language")
            layers.append(Flatten())
            cur = (math.prod(cur),)
        elif n.op_type == "Softmax":
            if attrs.get("axis", -1) not in (-1, 1):
                raise RlhlsError(f"{at}: only the last axis is in the layer language")
            layers.append(Softmax())
        elif n.op_type in _ACTS:
            layers.append(_ACTS[n.op_type]())
        else:
            raise RlhlsError(f"{at}: not in the layer language (it has {', '.join(_OPS)})")
        x = n.output[0]
        i += 1
    if x != g.output[0].name:
        raise RlhlsError(f"{where}: the chain of layers ends at '{x}', not at the output '{g.output[0].name}'")
    try:
        net = Network(name, shape, layers)
        params, mm = {}, [l for l in net.layers if l.kind in ("Dense", "Conv2d")]
        for layer, (w, b) in zip(mm, weights):
            params[f"{layer.name}.W"] = w
            if b is not None:
                params[f"{layer.name}.b"] = b
        net.set_params(params)
        for layer in mm:  # the weights are the file's, not an initialiser's
            layer._init_used, layer._gain_used = "onnx", None
    except RlhlsError as e:
        raise RlhlsError(f"{where}: {e}") from None
    return net
