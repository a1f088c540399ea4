"""ONNX import: a user's network as a Network of the layer language (the inverse of onnx_export).

The model must be one chain, input to output, of the nodes the layer language has:
Gemm (alpha = beta = 1, transA = 0; transB = 1 is transposed to our W (in, out)), MatMul with a
constant right operand (a following Add of a constant vector is its bias), Conv (valid padding,
no dilation, one group, equal strides), Flatten (axis 1), Relu, Tanh, Sigmoid, Softmax (last axis)
and Identity. Weights and biases come from the file's initializers (float64 here); the input is
(features,) or (C, H, W) after a batch axis. Any other node is refused, naming it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import RlhlsError
from .network import Conv2d, Dense, Flatten, Identity, Network, ReLU, Sigmoid, Softmax, Tanh

_ACTS = {"Relu": ReLU, "Tanh": Tanh, "Sigmoid": Sigmoid, "Identity": Identity}
_OPS = ("Gemm", "MatMul", "Add", "Conv", "Flatten", "Relu", "Tanh", "Sigmoid", "Softmax", "Identity")


def import_onnx(source, name: str | None = None) -> Network:
    """The Network of the ONNX model `source` (a path or an onnx ModelProto), named `name` (default:
    the file's stem or the graph's name), with the model's weights."""
    import onnx
    from onnx import numpy_helper

    if isinstance(source, (str, Path)):
        where = f"ONNX file '{source}'"
        if not Path(source).is_file():
            raise RlhlsError(f"{where}: no such file")
        try:
            model = onnx.load(str(source))
        except Exception as e:
            raise RlhlsError(f"{where}: not an ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        name = name or Path(source).stem
    else:
        model = source
        where = f"ONNX model '{model.graph.name}'"
        name = name or model.graph.name or "net"
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    for n in g.node:  # Constant nodes are initializers written as nodes
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t).astype(np.float64)
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1 or len(g.output) != 1:
        raise RlhlsError(f"{where}: expected one input and one output, found {len(inputs)} and {len(g.output)}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) not in (2, 4) or any(d is None or d < 1 for d in dims[1:]):
        raise RlhlsError(f"{where}: input '{inputs[0].name}' has shape {dims}, expected (N, features) or (N, C, H, W)")
    shape = tuple(dims[1:])

    layers, weights = [], []  # weights: (W in our layout, b or None) per Dense/Conv2d, in order
    x = inputs[0].name
    nodes = [n for n in g.node if n.op_type != "Constant"]
    i = 0
    while i < len(nodes):
        n = nodes[i]
        at = f"{where}: node '{n.name or n.output[0]}' ({n.op_type})"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        data = [v for v in n.input if v and v != x]
        if x not in n.input:
            raise RlhlsError(f"{at}: does not take the previous node's output '{x}' (only a chain of layers is imported)")
        if any(v not in consts for v in data):
            raise RlhlsError(f"{at}: takes a computed tensor besides its input (only a chain of layers is imported)")
        if n.op_type == "Gemm":
            if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
                raise RlhlsError(f"{at}: only alpha = beta = 1 and transA = 0 are in the layer language")
            w = consts[n.input[1]]
            w = w.T if attrs.get("transB", 0) else w
            b = consts[n.input[2]] if len(n.input) > 2 and n.input[2] else None
            if b is not None:
                b = np.broadcast_to(b, (w.shape[1],)).copy()
            layers.append(Dense(w.shape[1], bias=b is not None))
            weights.append((w, b))
        elif n.op_type == "MatMul":
            if n.input[0] != x:
                raise RlhlsError(f"{at}: the input must be the left operand")
            w, b = consts[n.input[1]], None
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.op_type == "Add" and n.output[0] in nxt.input:
                other = [v for v in nxt.input if v != n.output[0]]
                if len(other) == 1 and other[0] in consts and consts[other[0]].size == w.shape[1]:
                    b = consts[other[0]].reshape(-1)
                    n, i = nxt, i + 1  # the bias add is part of the Dense layer
            layers.append(Dense(w.shape[1], bias=b is not None))
            weights.append((w, b))
        elif n.op_type == "Conv":
            w = consts[n.input[1]]
            strides = list(attrs.get("strides", [1, 1]))
            if (any(attrs.get("pads", [0] * 4)) or any(d != 1 for d in attrs.get("dilations", [1, 1]))
                    or attrs.get("group", 1) != 1 or len(set(strides)) != 1
                    or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID")):
                raise RlhlsError(f"{at}: only valid padding, no dilation, one group and equal strides are in the "
                                 "layer language")
            b = consts[n.input[2]] if len(n.input) > 2 and n.input[2] else None
            layers.append(Conv2d(w.shape[0], tuple(w.shape[2:]), stride=strides[0], bias=b is not None))
            weights.append((w, b))
        elif n.op_type == "Flatten":
            if attrs.get("axis", 1) != 1:
                raise RlhlsError(f"{at}: only axis 1 (keep the batch axis) is in the layer language")
            layers.append(Flatten())
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
