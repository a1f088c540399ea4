"""ONNX export of a forward Network (float32), the form hls4ml and onnxruntime read.

One node per layer, named after the layer: Dense -> Gemm (MatMul without bias; W stays
(in, out), so transB=0), Conv2d -> Conv (valid padding), Flatten -> Flatten(axis=1),
ReLU/Tanh/Sigmoid/Softmax(axis=-1)/Identity -> the op of the same name, LeakyReLU -> LeakyRelu
(alpha), Softplus -> Softplus, Clip -> Clip (min/max initializers), LayerNorm -> LayerNormalization
(axis -1, gamma/beta initializers), Quant -> QONNX's Quant (scale 2**-F, zero point 0; a node of the
domain qonnx.custom_op.general, which onnxruntime does not run). A Dense / Conv2d with
``param_formats`` exports the fake-quantized weights it computes with (``quant_params=True``: each
through a QONNX Quant node of its format, named '<weight>_quant'). Initializers are named
like Network.get_params ('fc1.W', 'fc1.b'). The graph input 'input' and output 'output' have
a symbolic batch axis 'N'.

The IR version is set explicitly: onnx 1.23 writes IR 14 by default and onnxruntime 1.31
reads at most IR 13, so the default here is IR 10 with opset 17.

The model is returned, never written here (designs/ knows no files): ``rlhls.flow.onnx_file.write_onnx``
writes it atomically.
"""

from __future__ import annotations

import numpy as np

from rlhls.core.errors import RlhlsError

_ACT_OPS = {"ReLU": "Relu", "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Softmax": "Softmax", "Identity": "Identity"}


def export_onnx(net, *, opset: int = 17, ir_version: int = 10, quant_params: bool = False):
    """The ONNX model of `net`'s float64 forward in float32. `quant_params`: each weight of a layer's
    ``param_formats`` goes through a QONNX Quant node of its format (as Brevitas writes quantized weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    where = f"network '{net.name}'"
    if opset < 13:
        raise RlhlsError(f"{where}: ONNX opset {opset}, expected >= 13 (Softmax over the last axis)")
    if opset < 17 and any(l.kind == "LayerNorm" for l in net.layers):
        raise RlhlsError(f"{where}: ONNX opset {opset}, expected >= 17 (LayerNormalization)")
    if ir_version < 7:
        raise RlhlsError(f"{where}: ONNX IR version {ir_version}, expected >= 7")

    nodes, inits = [], []
    x = "input"
    for i, layer in enumerate(net.layers):
        y = "output" if i == len(net.layers) - 1 else layer.name
        names = {k: f"{layer.name}.{k}" for k in layer.params}
        for k, v in layer.params.items():  # the values the layer computes with (fake-quantized weights)
            v = layer.param(k) if layer.is_mm else v
            inits.append(numpy_helper.from_array(np.asarray(v, dtype=np.float32), names[k]))
            fmt = getattr(layer, "param_formats", {}).get(k) if quant_params else None
            if fmt is not None:  # values on the grid through their Quant (an identity): the format carried
                q, more = _quant(fmt, names[k], f"{names[k]}_quant", f"{names[k]}_quant", where, layer.name)
                nodes.append(q)
                inits += more
                names[k] = q.output[0]
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
        elif layer.kind == "LeakyReLU":
            nodes.append(helper.make_node("LeakyRelu", [x], [y], name=layer.name, alpha=float(layer.alpha)))
        elif layer.kind == "Softplus":  # torch's threshold (x > t: x) is below float32's resolution there
            nodes.append(helper.make_node("Softplus", [x], [y], name=layer.name))
        elif layer.kind == "Clip":
            bounds = []
            for k, v in (("min", layer.lo), ("max", layer.hi)):
                if v is not None:
                    inits.append(numpy_helper.from_array(np.asarray(v, dtype=np.float32), f"{layer.name}.{k}"))
                bounds.append("" if v is None else f"{layer.name}.{k}")
            while bounds and not bounds[-1]:
                bounds.pop()
            nodes.append(helper.make_node("Clip", [x, *bounds], [y], name=layer.name))
        elif layer.kind == "LayerNorm":
            nodes.append(helper.make_node("LayerNormalization", [x, names["gamma"], names["beta"]], [y],
                                          name=layer.name, axis=-1, epsilon=float(layer.eps)))
        elif layer.kind == "Quant":  # QONNX's Quant: scale 2**-F, zero point 0, W bits
            q, more = _quant(layer.fmt, x, y, layer.name, where, layer.name)
            nodes.append(q)
            inits += more
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
    opsets = [helper.make_opsetid("", opset)]
    if any(n.domain == "qonnx.custom_op.general" for n in nodes):
        opsets.append(helper.make_opsetid("qonnx.custom_op.general", 1))
    model = helper.make_model(graph, producer_name="rlhls", opset_imports=opsets)
    model.ir_version = ir_version
    model.doc_string = f"rlhls network '{net.name}' (seed {getattr(net, 'seed', '?')})"
    onnx.checker.check_model(model)

    return model


def _quant(f, x: str, y: str, name: str, where: str, layer: str):
    """(QONNX Quant node `name` from `x` to `y` in format `f`, its scale / zero point / bit width
    initializers '`name`.scale', ...): scale 2**-F, zero point 0, W bits."""
    from onnx import helper, numpy_helper

    mode = {"RND_CONV": "ROUND", "TRN": "FLOOR", "TRN_ZERO": "DOWN", "RND_INF": "HALF_UP",
            "RND_ZERO": "HALF_DOWN"}.get(getattr(f, "quant", ""))
    if mode is None or f.overflow not in ("SAT", "SAT_SYM"):
        raise RlhlsError(f"{where}: layer {layer}: format {f} has no QONNX Quant (rounding "
                         "RND_CONV/TRN/TRN_ZERO/RND_INF/RND_ZERO, overflow SAT/SAT_SYM)")
    inits = [numpy_helper.from_array(np.asarray(v, dtype=np.float32), f"{name}.{k}")
             for k, v in (("scale", 2.0 ** -f.frac_bits), ("zeropt", 0.0), ("bitwidth", float(f.width)))]
    node = helper.make_node("Quant", [x] + [f"{name}.{k}" for k in ("scale", "zeropt", "bitwidth")], [y], name=name,
                            domain="qonnx.custom_op.general", signed=int(f.signed), narrow=int(f.overflow == "SAT_SYM"),
                            rounding_mode=mode)
    return node, inits
