"""The user's side: their actor MLP (3 -> 64 -> 64 -> 1, tanh out) exported to actor.onnx.

Any framework that writes ONNX will do (torch.onnx.export, tf2onnx, ...); this one needs only
numpy and onnx. Run it from anywhere: python examples/pendulum_ddpg/export_actor.py [OUT.onnx]
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = (3, 64, 64, 1)  # Pendulum-v1: cos, sin, angular velocity -> torque


def actor_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "obs"
    for i, (n_in, n_out) in enumerate(zip(SIZES, SIZES[1:]), 1):
        # He-uniform hidden layers; a small last layer so the first actions stay near 0
        bound = np.sqrt(6.0 / n_in) if i < len(SIZES) - 1 else 3e-3
        w = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)  # torch's (out, in) layout
        inits += [numpy_helper.from_array(w, f"l{i}.weight"),
                  numpy_helper.from_array(np.zeros(n_out, np.float32), f"l{i}.bias")]
        nodes.append(helper.make_node("Gemm", [x, f"l{i}.weight", f"l{i}.bias"], [f"h{i}"], name=f"l{i}", transB=1))
        act = "Relu" if i < len(SIZES) - 1 else "Tanh"
        nodes.append(helper.make_node(act, [f"h{i}"], [f"a{i}"], name=f"{act.lower()}{i}"))
        x = f"a{i}"
    graph = helper.make_graph(nodes, "actor", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 1])], initializer=inits)
    model = helper.make_model(graph, producer_name="export_actor.py", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("actor.onnx")
    onnx.save(actor_model(), str(out))
    print(f"wrote {out}")
