"""Installed packages' plug-ins: entry points of the groups ``rlhls.designs``, ``rlhls.kernels``
and ``rlhls.algorithms``, loaded on first use of their registry.

An entry point names a module (importing it registers what it defines, as a package's own module
does), a callable (called once; the objects it returns are registered) or an object to register.
A plug-in that fails to load is bad input: one line naming the entry point and its package.
"""

from __future__ import annotations

from importlib import metadata
from types import ModuleType
from typing import Callable

from .errors import RlhlsError


def load_entry_points(group: str, register: Callable, from_module: Callable | None = None) -> None:
    """Load every entry point of `group`; ``register(obj)`` takes each object one yields, and
    ``from_module(module)`` the objects of an entry point that names a module (default: none, its
    import registers them)."""
    try:
        eps = metadata.entry_points(group=group)
    except Exception as e:  # a broken distribution's metadata must not stop rlhls
        raise RlhlsError(f"entry points of {group}: {e}") from None
    for ep in eps:
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        where = f"entry point '{ep.name}' of {group} (package {dist})"
        try:
            obj = ep.load()
            if isinstance(obj, ModuleType):
                objs = from_module(obj) if from_module is not None else ()
            elif callable(obj) and not isinstance(obj, type):
                objs = obj()
            else:
                objs = (obj,)
            if objs is None:
                objs = ()
            for o in (objs if isinstance(objs, (list, tuple)) else (objs,)):
                register(o)
        except RlhlsError as e:
            raise RlhlsError(f"{where}: {e}") from None
        except Exception as e:
            raise RlhlsError(f"{where}: {type(e).__name__}: {e}") from None
