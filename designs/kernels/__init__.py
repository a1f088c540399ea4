"""Hardware kernels: one module per kernel family, one registry (see base.Kernel).

``KERNELS`` maps a name to its Kernel; ``get_kernel(name)`` raises RlhlsError naming the known
kernels; ``kernel_names()`` lists them in registry order.
"""

from __future__ import annotations

from ..errors import RlhlsError
from .base import Array, Kernel, Param
from .dense import DenseBackward, DenseForward, WeightGradient
from .gae import GaeKernel
from .update import WeightUpdate, adam_alpha

__all__ = ["KERNELS", "get_kernel", "kernel_names", "Kernel", "Param", "Array", "adam_alpha"]

KERNELS: dict[str, Kernel] = {k.name: k for k in (DenseForward(), DenseBackward(), WeightGradient(), WeightUpdate(), GaeKernel())}


def get_kernel(name: str) -> Kernel:
    if name not in KERNELS:
        raise RlhlsError(f"kernel {name!r}: unknown (expected one of: {', '.join(KERNELS)})")
    return KERNELS[name]


def kernel_names() -> list[str]:
    return list(KERNELS)
