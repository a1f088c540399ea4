"""rlhls.designs: *what* to build — numeric formats, the network language, the device catalogue,
the training graph, and one module per seed design with a registry. Knows nothing of files,
tools or training loops."""

from rlhls.core.errors import RlhlsError

from .design import Design, KernelSpec, NetSpec
from .devices import DEVICES, get_device
from .formats import BF16, FP16, FP32, FixedFormat, FloatFormat, NumericFormat, UniformFormat, parse_format
from .graph import TrainingGraph, build_graph
from .network import (
    Clip,
    Conv2d,
    Dense,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Network,
    Precision,
    Quant,
    ReLU,
    Sigmoid,
    Softmax,
    Softplus,
    Tanh,
)
from .onnx_import import import_onnx
from .registry import design_names, get_design, register_design

__all__ = [
    "BF16", "FP16", "FP32", "Clip", "Conv2d", "DEVICES", "Dense", "Design", "FixedFormat", "Flatten", "FloatFormat",
    "Identity", "KernelSpec", "LayerNorm", "LeakyReLU", "NetSpec", "Network", "NumericFormat", "Precision", "Quant",
    "ReLU", "RlhlsError", "Sigmoid", "Softmax", "Softplus", "Tanh", "TrainingGraph", "UniformFormat", "build_graph",
    "design_names", "get_design", "get_device", "import_onnx", "parse_format", "register_design",
]
