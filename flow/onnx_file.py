"""A network's ONNX file: the exporter's model (designs/onnx_export.py) written atomically."""

from __future__ import annotations

from rlhls.core import fileio


def write_onnx(net_or_model, path, **kwargs):
    """Write the ONNX model of a Network (``Network.to_onnx(**kwargs)``) or a ModelProto to `path`
    (beside it, then renamed: a reader never sees half a file); returns the model."""
    model = net_or_model.to_onnx(**kwargs) if hasattr(net_or_model, "to_onnx") else net_or_model
    fileio.atomic_write_bytes(path, model.SerializeToString())
    return model
