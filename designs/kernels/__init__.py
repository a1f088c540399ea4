"""Hardware kernels: one module per kernel, one registry (hls4ml's ``register_*`` style).

On the first look-up the package imports each of its modules and registers every named ``Kernel``
subclass defined there (``rlhls.core.registry``), so adding a kernel is one module (and its
template in ``vitis/``) with no other edit. A user registers a kernel of their own from any
code: ``register_kernel(MyKernel())`` (a ``Kernel`` subclass; ``template_dir`` names the folder
of its C++ template); an installed package through the entry point group ``rlhls.kernels``.

``get_kernel(name)`` raises RlhlsError naming the known kernels; ``kernel_names()`` lists them in
registration order; ``kernels_for(node, ctx, unit)`` is the one rule by which the build and the
profiler pick the kernels that implement a training-graph node (see its docstring).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import Registry

from .base import Array, Kernel, Param
from .context import KernelContext, unit_formats
from .update import adam_alpha

if TYPE_CHECKING:
    from ..graph import Node

__all__ = ["KERNELS", "register_kernel", "unregister_kernel", "get_kernel", "kernel_names", "kernels_for",
           "Kernel", "KernelContext", "Param", "Array", "adam_alpha", "unit_formats"]



def _kernel_classes(module: ModuleType) -> list[type[Kernel]]:
    """The named Kernel subclasses that `module` defines (not those it imports)."""
    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, Kernel) and obj.name and obj.__module__ == module.__name__]


KERNELS: Registry[Kernel] = Registry("kernel", package=__name__, group="rlhls.kernels", collect=_kernel_classes)


def register_kernel(kernel: Kernel | type[Kernel], *, replace: bool = False) -> Kernel:
    """Add `kernel` (an instance of a Kernel subclass) to the registry; returns it."""
    if isinstance(kernel, type):
        kernel = kernel()
    if not isinstance(kernel, Kernel) or not kernel.name:
        raise RlhlsError(f"register_kernel: {kernel!r} is not a named Kernel instance")
    if kernel.name in KERNELS and not replace and type(KERNELS[kernel.name]) is not type(kernel):
        raise RlhlsError(f"register_kernel: a kernel named {kernel.name!r} is registered already "
                         "(pass replace=True to replace it)")
    KERNELS[kernel.name] = kernel
    return kernel


def unregister_kernel(name: str) -> None:
    KERNELS.pop(name, None)


KERNELS.add = register_kernel


def get_kernel(name: str) -> Kernel:
    if name not in KERNELS:
        raise KERNELS.unknown(name)
    return KERNELS[name]


def kernel_names() -> list[str]:
    return KERNELS.names()


def kernels_for(node: Node, ctx: KernelContext, unit: str = "PL") -> list[tuple[Kernel, dict]]:
    """``[(kernel, params)]`` that implement `node` on `unit` for ``ctx.design``.

    Among the kernels whose ``implements`` holds the node's kind on that unit: the ones the design
    names (a KernelSpec on that unit), then the generic ones (``Kernel.generic``: the dense layers,
    the optimizer, the AIE matrix multiply), leaving out those a chosen named kernel ``replaces``; of these,
    those that give parameters for the node (``Kernel.node_params`` not None). Several kernels may
    share one node (a backward's input gradient and weight gradient); the first one costs the node
    in the profile. An empty list: no kernel implements the node on that unit."""
    cands = [k for k in KERNELS.values() if node.kind in k.implements and unit in k.units]
    named = [k for k in cands if ctx.spec(k.name, unit) is not None]
    chosen = [(k, p) for k in named if (p := k.node_params(node, ctx)) is not None]
    replaced = {r for k, _ in chosen for r in k.replaces}
    chosen = [(k, p) for k, p in chosen if k.name not in replaced]
    chosen += [(k, p) for k in cands if k.generic and k not in named and k.name not in replaced
               and (p := k.node_params(node, ctx)) is not None]
    return chosen
