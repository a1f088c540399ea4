"""ONNX export of a forward Network (float32), the form hls4ml and onnxruntime read.

One node per layer, named after the layer: Dense -> Gemm (MatMul without bias; W stays
(in, out), so transB=0), Conv2d -> Conv (valid padding), Flatten -> Flatten(axis=1),
ReLU/Tanh/Sigmoid/Softmax(axis=-1)/Identity -> the op of the same name. Initializers are named
like Network.get_params ('fc1.W', 'fc1.b'). The graph input 'input' and output 'output' have
a symbolic batch axis 'N'.

The IR version is set explicitly: onnx 1.23 writes IR 14 by default and onnxruntime 1.31
reads at most IR 13, so the default here is IR 10 with opset 17.

The model is returned, never written here (designs/ knows no files): ``rlhls.flow.onnx_file.write_onnx``
writes it atomically.
"""

from __future__ import annotations

import numpy as np

from .errors import RlhlsError

_ACT_OPS = {"ReLU": "Relu", "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Softmax": "Softmax", "Identity": "Identity"}


def export_onnx(net, *, opset: int = 17, ir_version: int = 10):
    """The ONNX model of `net`'s float64 forward in float32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    where = f"network '{net.name}'"
    if opset < 13:
        raise RlhlsError(f"{where}: ONNX opset {opset}, expected >= 13 (Softmax over the last axis)")
    if ir_version < 7:
        raise RlhlsError(f"{where}: ONNX IR version {ir_version}, expected >= 7")

    nodes, inits = [], []
    x = "input"
    for i, layer in enumerate(net.layers):
        y = "output" if i == len(net.layers) - 1 else layer.name
        names = {k: f"{layer.name}.{k}" for k in layer.params}
        for k, v in layer.params.items():
            inits.append(numpy_helper.from_array(np.asarray(v, dtype=np.float32), names[k]))
        ins = [x] + [names[k] for k in ("W", "b") if k in names]
        if layer.kind == "Dense":
            op = "Gemm" if "b" in names else "MatMul"
            nodes.append(helper.make_node(op, ins, [y], name=layer.name))
        elif layer.kind == "Conv2d":
            kh, kw = layer.kernel
            s = layer.stride
            nodes.append(helper.make_node("Conv", ins, [y], name=layer.name, kernel_shape=[kh, kw],
                                          strides=[s, s], pads=[0, 0, 0, 0], dilations=[1, 1], group=1))
        elif layer.kind == "Flatten":
            nodes.append(helper.make_node("Flatten", [x], [y], name=layer.name, axis=1))
        elif layer.kind == "Softmax":
            nodes.append(helper.make_node("Softmax", [x], [y], name=layer.name, axis=-1))
        elif layer.kind in _ACT_OPS:
            nodes.append(helper.make_node(_ACT_OPS[layer.kind], [x], [y], name=layer.name))
        else:
            raise RlhlsError(f"{where}: layer {layer.name}: no ONNX export for kind '{layer.kind}'")
        x = y

    graph = helper.make_graph(
        nodes,
        net.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *net.input_shape])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", *net.output_shape])],
        initializer=inits,
    )
    model = helper.make_model(graph, producer_name="rlhls", opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    model.doc_string = f"rlhls network '{net.name}' (seed {getattr(net, 'seed', '?')})"
    onnx.checker.check_model(model)

    return model
