"""The algorithm registry: one registration per training algorithm.

An algorithm module (``host/<name>.py``) defines its trainer, its hyperparameters as a documented
dataclass (``host/hyperparams.py``) and its batch rule, and registers them once::

    register_algorithm(Algorithm("dqn", DQN, DQNArgs, batch_size, summary="..."))

``rlhls train``, ``rlhls run``, ``rlhls.Flow`` and the experiments look the design's algorithm
up here (``get_algorithm(design.algorithm)``) and have no per-algorithm branch. The built-in
modules are imported on first use; a user's algorithm registers from their own code.

A trainer: ``Trainer(design, env_id=, seed=, backend=, hyperparams=, assignment=)`` with
``steps_per_update``, ``train_update(update, total_updates) -> metrics row``, ``state_dict()``,
``load_state_dict(state)`` and ``close()`` (host/runner.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from rlhls.designs.errors import RlhlsError

__all__ = ["Algorithm", "ALGORITHMS", "register_algorithm", "get_algorithm", "algorithm_names"]

_BUILTIN = ("ppo", "dqn", "a2c", "ddpg", "trpo")  # modules of rlhls.host that register an algorithm


@dataclass(frozen=True)
class Algorithm:
    name: str                 # the designs' ``algorithm`` it trains
    trainer: type
    args: type                # a HyperParams dataclass
    batch: Callable           # hyperparameters -> the training batch a plan is solved at
    summary: str = ""
    resolve: Callable | None = None  # (design, overrides, config) -> hyperparameters; default args.resolve
    actions: tuple = ("discrete", "continuous")  # the action spaces its trainer takes

    def hyperparams(self, design, overrides: dict | None = None, config: dict | None = None) -> dict:
        """The run's hyperparameters, validated (before anything is written)."""
        fn = self.resolve or self.args.resolve
        return fn(design, overrides, config)


ALGORITHMS: dict[str, Algorithm] = {}
_loaded = False


def register_algorithm(alg: Algorithm, *, replace: bool = False) -> Algorithm:
    if not isinstance(alg, Algorithm) or not alg.name:
        raise RlhlsError(f"register_algorithm: {alg!r} is not a named Algorithm")
    old = ALGORITHMS.get(alg.name)
    if old is not None and not replace and old.trainer is not alg.trainer:
        raise RlhlsError(f"register_algorithm: an algorithm named {alg.name!r} is registered already "
                         "(pass replace=True to replace it)")
    ALGORITHMS[alg.name] = alg
    return alg


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for m in _BUILTIN:
            importlib.import_module(f"rlhls.host.{m}")


def get_algorithm(name: str) -> Algorithm:
    _load()
    if name not in ALGORITHMS:
        raise RlhlsError(f"algorithm '{name}' has no trainer yet (registered: {', '.join(sorted(ALGORITHMS))})")
    return ALGORITHMS[name]


def algorithm_names() -> list[str]:
    _load()
    return list(ALGORITHMS)
