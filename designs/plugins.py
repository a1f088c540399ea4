"""Installed packages' plug-ins: entry points of the groups ``rlhls.designs``, ``rlhls.kernels``
and ``rlhls.algorithms``, loaded on first use of their registry.

An entry point names a module (importing it registers what it defines, as a package's own module
does), a callable (called once; the objects it returns are registered) or an object to register.
A plug-in that fails to load is bad input: one line naming the entry point and its package.

``LazyLoad`` is every registry's first-use load: once per process, whichever threads look it up.
"""

from __future__ import annotations

import threading
from importlib import metadata
from types import ModuleType
from typing import Callable

from rlhls.core.errors import RlhlsError


class LazyLoad:
    """A registry's load on its first look-up: ``load()`` runs once per process. Threads that look
    the registry up meanwhile wait for it (a lock); a look-up from inside the load (a plug-in's
    module calling ``register_*``) returns at once, the lock being reentrant. A load that raises is
    not done: the next look-up runs it again and meets the same error, never a half-filled registry."""

    def __init__(self, load: Callable[[], None]):
        self._load = load
        self._lock = threading.RLock()
        self._running = False
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        with self._lock:
            if self.done or self._running:
                return
            self._running = True
            try:
                self._load()
                self.done = True
            finally:
                self._running = False


_ABSENT = object()


def load_entry_points(group: str, register: Callable, from_module: Callable | None = None,
                      registries: tuple = ()) -> None:
    """Load every entry point of `group`; ``register(obj)`` takes each object one yields, and
    ``from_module(module)`` the objects of an entry point that names a module (default: none, its
    import registers them). When one fails, what ``register`` put into `registries` (dicts) is taken
    out again, so the next load registers it afresh (a module's own registrations stay with the
    imported module)."""
    try:
        eps = metadata.entry_points(group=group)
    except Exception as e:  # a broken distribution's metadata must not stop rlhls
        raise RlhlsError(f"entry points of {group}: {e}") from None
    undo: list = [{} for _ in registries]  # per registry: key -> its value before (_ABSENT: none)

    def add(obj):
        before = [dict(r) for r in registries]
        register(obj)
        for reg, old, changed in zip(registries, before, undo):
            for k, v in reg.items():
                if old.get(k, _ABSENT) is not v:
                    changed.setdefault(k, old.get(k, _ABSENT))

    try:
        _load_all(group, eps, add, from_module)
    except BaseException:
        for reg, changed in zip(registries, undo):
            for k, v in changed.items():
                if v is _ABSENT:
                    reg.pop(k, None)
                else:
                    reg[k] = v
        raise


def _load_all(group, eps, register, from_module) -> None:
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
