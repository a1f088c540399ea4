"""The bytes an m_axi port carries: a format's values as the kernel's C++ type in device memory (the
board backend writes and reads them; xrt-sim decodes them for the kernel's C++ and encodes its outputs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat, FloatFormat, NumericFormat, UniformFormat

__all__ = ["element_bytes", "encode", "decode"]


def element_bytes(fmt: NumericFormat) -> int:
    """Bytes per element in device memory: the C++ type's width padded to a power of two (UG1399:
    arbitrary-precision types in memory take the next power-of-two bytes)."""
    b = max(1, -(-fmt.bits // 8))
    return 1 << (b - 1).bit_length()


def _int_dtype(fmt: NumericFormat, signed: bool) -> np.dtype:
    return np.dtype(f"<{'i' if signed else 'u'}{element_bytes(fmt)}")


def encode(fmt: NumericFormat, values) -> bytes:
    """Values of `fmt` (float64, representable) -> their bits as the C++ type holds them."""
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if isinstance(fmt, FixedFormat):
        return fmt.to_mantissa(v).astype(_int_dtype(fmt, fmt.signed)).tobytes()
    if isinstance(fmt, UniformFormat):
        return fmt.encode(v).astype(_int_dtype(fmt, False)).tobytes()
    if isinstance(fmt, FloatFormat):
        return v.astype(_float_dtype(fmt)).tobytes()
    raise RlhlsError(f"board backend: format {fmt} has no device encoding")


def decode(fmt: NumericFormat, raw, count: int) -> np.ndarray:
    """`count` elements of `fmt` from device bytes -> float64 values."""
    if isinstance(fmt, FixedFormat):
        return fmt.from_mantissa(np.frombuffer(raw, _int_dtype(fmt, fmt.signed), count).astype(np.int64))
    if isinstance(fmt, UniformFormat):
        return fmt.decode(np.frombuffer(raw, _int_dtype(fmt, False), count))
    if isinstance(fmt, FloatFormat):
        return np.frombuffer(raw, _float_dtype(fmt), count).astype(np.float64)
    raise RlhlsError(f"board backend: format {fmt} has no device encoding")


def _float_dtype(fmt: FloatFormat) -> Any:
    key = (fmt.exp_bits, fmt.man_bits)
    if key == (8, 23):
        return np.dtype("<f4")
    if key == (5, 10):
        return np.dtype("<f2")
    if key == (11, 52):
        return np.dtype("<f8")
    if key == (8, 7):
        import ml_dtypes

        return ml_dtypes.bfloat16
    raise RlhlsError(f"board backend: format {fmt} has no C++ type")
