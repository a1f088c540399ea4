"""The rlhls environment registry: one module per environment in ``host/envs/``.

An environment module ``host/envs/NAME.py`` holds a gymnasium environment and declares its ids in
an ``ENVIRONMENTS`` table, each value the keyword arguments of ``gymnasium.register``
(``entry_point`` required)::

    ENVIRONMENTS = {
        "rlhls/RoboticArm-v0": {"entry_point": "rlhls.host.envs.robotic_arm:RoboticArm",
                                "max_episode_steps": 200},
    }

``register_environments()`` imports every module of this package (``rlhls.core.registry``: the
modules without a table, the vector-env plumbing and the Atari wrappers, add nothing) and registers
their tables with gymnasium, so adding an environment is adding its module: no list to edit.
``import rlhls.envs`` calls it, and so do
``make_env`` / ``make_vec_env`` (every trainer's environments, in every process, Ray workers
included), so ``rlhls/...`` ids work in training without an import. ``register_module(module)``
registers the table of a module from elsewhere (a user's own environments, the tests).

Rules: ids are ``rlhls/<Name>-v<k>``; an id that another entry point already holds, or a
malformed table, is an RlhlsError (nothing of that table
is registered); registering a table again is a no-op. Registration imports every environment
module, so a module imports its optional dependencies (SUMO's ``traci``, ...) inside the
environment, not at its top: a module that fails to import is an error naming it.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from types import ModuleType
from typing import Any, Callable, ParamSpec, TypeVar

import gymnasium as gym

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import Registry

__all__ = ["ENVIRONMENT_IDS", "environment_modules", "register_environments", "register_module"]
_ID = re.compile(r"rlhls/[A-Za-z][A-Za-z0-9]*-v(0|[1-9][0-9]*)")
_KEYS = frozenset(inspect.signature(gym.register).parameters) - {"id"}
_LOCK = threading.RLock()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """`fn` one thread at a time (threads making environments at once register each id once, without
    gymnasium's "overriding" warning); reentrant: a module imported meanwhile may register its table."""
    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _LOCK:
            return fn(*args, **kwargs)
    return call


def _entry_name(entry_point: object) -> str:
    """'module:qualname' of an entry point (a string as it is): a re-imported class is the same one."""
    if isinstance(entry_point, str):
        return entry_point
    return f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"


@_locked
def register_module(module: ModuleType) -> tuple[str, ...]:
    """Register `module`'s ``ENVIRONMENTS`` table with gymnasium; returns its ids."""
    name = getattr(module, "__name__", repr(module))
    table = getattr(module, "ENVIRONMENTS", None)
    if not isinstance(table, dict) or not table:
        raise RlhlsError(f"environment module {name}: expected ENVIRONMENTS, a non-empty dict "
                         "{'rlhls/<Name>-v<k>': gymnasium.register keyword arguments}")
    todo = []
    for env_id, kwargs in table.items():
        where = f"environment module {name}, id {env_id!r}"
        if not isinstance(env_id, str) or not _ID.fullmatch(env_id):
            raise RlhlsError(f"{where}: expected an id 'rlhls/<Name>-v<k>' (e.g. 'rlhls/RoboticArm-v0')")
        if not isinstance(kwargs, dict):
            raise RlhlsError(f"{where}: expected a dict of gymnasium.register keyword arguments, got "
                             f"{type(kwargs).__name__}")
        unknown = sorted(map(str, set(kwargs) - _KEYS))
        if unknown:
            raise RlhlsError(f"{where}: {', '.join(unknown)} not gymnasium.register arguments "
                             f"(expected some of {', '.join(sorted(_KEYS))})")
        if kwargs.get("entry_point") is None:
            raise RlhlsError(f"{where}: no entry_point (the environment class or 'module:Class')")
        held = gym.registry.get(env_id)
        if held is None:
            todo.append((env_id, kwargs))
        elif _entry_name(held.entry_point) != _entry_name(kwargs["entry_point"]):
            raise RlhlsError(f"{where}: the id is already registered with gymnasium for "
                             f"{_entry_name(held.entry_point)}")
    for env_id, kwargs in todo:
        gym.register(env_id, **kwargs)
    for env_id, kwargs in table.items():
        ENVIRONMENT_IDS.put(env_id, kwargs, origin=name)
    return tuple(table)


def _tables(module: ModuleType) -> list[ModuleType]:
    """A module of this package gives its ENVIRONMENTS table (none: the plumbing)."""
    return [module] if hasattr(module, "ENVIRONMENTS") else []


# rlhls/<Name>-v<k> -> its gymnasium.register keyword arguments; every module of this package is looked at
ENVIRONMENT_IDS: Registry[dict[str, Any]] = Registry("environment", package=__package__, group="rlhls.environments",
                                                     collect=_tables)
ENVIRONMENT_IDS.add = register_module


def environment_modules() -> list[str]:
    """Full names of this package's modules that hold environments (imported, not registered)."""
    return ENVIRONMENT_IDS.modules()


@_locked
def register_environments() -> tuple[str, ...]:
    """Import every module of host/envs/ (again: a module added since is found) and register its
    ids with gymnasium; returns the registered ids, sorted."""
    ENVIRONMENT_IDS.reload()
    ENVIRONMENT_IDS.load()
    return tuple(sorted(i for i in ENVIRONMENT_IDS if i in gym.registry))  # one taken out of gymnasium is gone
