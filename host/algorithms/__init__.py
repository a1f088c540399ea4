"""The algorithm registry: one registration per training algorithm.

An algorithm module (``host/algorithms/<name>.py``) defines its trainer, its hyperparameters as a documented
dataclass (``host/hyperparams.py``) and its batch rule, and registers them once::

    register_algorithm(Algorithm("dqn", DQN, DQNArgs, batch_size, summary="..."))

``rlhls train``, ``rlhls run``, ``rlhls.Flow`` and the experiments look the design's algorithm
up here (``get_algorithm(design.algorithm)``) and have no per-algorithm branch. Every module of
``rlhls.host.algorithms`` is imported on first use (an algorithm's module registers it;
``rlhls.core.registry``); installed packages add algorithms through the entry point group
``rlhls.algorithms``; a user's algorithm registers from their own code. Every algorithm
registers its training-graph builder with it (``graph=fn``: ``fn(bld, design, nets)`` adds its
nodes, see ``rlhls.designs.graph``; ``graph_builder('a2c')`` reuses a built-in one), so any
Design may name it.

What a trainer must implement to train through ``rlhls train`` (host/runner.py):
``Trainer(design, *, env_id=None, seed=0, backend="emu", hyperparams=None, assignment=None)`` with
``steps_per_update``, ``train_update(update, total_updates) -> metrics row`` (an optional
``'_episodes'`` entry lists the ``(env_step, return, length)`` of the episodes that ended),
``state_dict()`` (nested dicts, lists, numpy arrays and scalars: host/checkpoint.py stores it
without pickle), ``load_state_dict(state)`` and ``close()``. The package's trainers derive from
``base.TrainerBase`` (the constructor, the plan for mixed precision, the checkpoint's plan check
and env state, close); the on-policy ones (A2C, PPO, TRPO) collect their rollouts through
``rollout.collect_rollout`` and keep only their loss, update and hyperparameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import Registry, did_you_mean
from rlhls.designs.graph import GRAPH_BUILDERS, register_graph_builder, register_node_runs, unregister_graph_builder

if TYPE_CHECKING:
    from rlhls.designs.design import Design

    from ..hyperparams import HyperParams

__all__ = ["Algorithm", "ALGORITHMS", "register_algorithm", "unregister_algorithm", "get_algorithm",
           "algorithm_names"]

@dataclass(frozen=True)
class Algorithm:
    name: str                 # the designs' ``algorithm`` it trains
    trainer: type             # its Trainer class (host/algorithms/base.py TrainerBase)
    args: type[HyperParams]   # its HyperParams dataclass
    batch: Callable[[dict], int]  # hyperparameters -> the training batch a plan is solved at
    summary: str = ""
    # (design, overrides, config) -> hyperparameters; default args.resolve
    resolve: Callable[[Design, dict | None, dict | None], dict] | None = None
    actions: tuple = ("discrete", "continuous")  # the action spaces its trainer takes
    graph: Callable | None = None  # its training-graph builder fn(bld, design, nets); None: the one registered
    loss_flops: Callable | None = None  # outputs -> FLOPs per sample of its loss (register_graph_builder)
    # hyperparameters -> training-graph executions (gradient steps) per environment step (host/perf.py);
    # None: the performance model counts one per measured update
    grad_steps: Callable | None = None
    # (graph node, hyperparameters) -> how many times that node runs per gradient step, where not once
    # (PPO's GAE: once per rollout of update_epochs x num_minibatches steps); None: every node once
    node_runs: Callable | None = None

    def hyperparams(self, design: Design, overrides: dict | None = None, config: dict | None = None) -> dict:
        """The run's hyperparameters, validated (before anything is written)."""
        fn = self.resolve or self.args.resolve
        return fn(design, overrides, config)

    def bind(self, design: Design, hp: dict) -> Design:
        """`design` with the run's hyperparameters `hp` in its kernels at this algorithm's batch: the
        one design a run trains, the Flow builds and the performance model schedules."""
        return design.bind(hp, batch=self.batch(hp))


ALGORITHMS: Registry[Algorithm] = Registry("algorithm", package=__name__, group="rlhls.algorithms",
                                           linked=(GRAPH_BUILDERS,))


def register_algorithm(alg: Algorithm, *, replace: bool = False) -> Algorithm:
    if not isinstance(alg, Algorithm) or not alg.name:
        raise RlhlsError(f"register_algorithm: {alg!r} is not a named Algorithm")
    old = ALGORITHMS.get(alg.name)
    if old is not None and not replace and old.trainer is not alg.trainer:
        raise RlhlsError(f"register_algorithm: an algorithm named {alg.name!r} is registered already "
                         "(pass replace=True to replace it)")
    if alg.graph is not None:
        register_graph_builder(alg.name, alg.graph, loss_flops=alg.loss_flops, replace=replace or old is not None)
    elif alg.name not in GRAPH_BUILDERS:
        raise RlhlsError(f"register_algorithm: algorithm {alg.name!r} needs its training-graph builder "
                         "(Algorithm(..., graph=fn); rlhls.designs.graph.graph_builder('a2c') reuses A2C's)")
    ALGORITHMS[alg.name] = alg
    register_node_runs(alg.name, None if alg.node_runs is None else _runs_rule(alg))
    return alg


def _runs_rule(alg: Algorithm) -> Callable:
    """`alg.node_runs` over its hyperparameters' defaults (a design names only those it changes): the
    rule the training graph weighs its nodes by (rlhls.designs.graph)."""
    args = alg.args if dataclasses.is_dataclass(alg.args) else None
    defaults = {f.name: f.default for f in dataclasses.fields(args) if f.default is not dataclasses.MISSING} \
        if args else {}
    rule = alg.node_runs
    assert rule is not None
    return lambda node, hp: rule(node, {**defaults, **hp})


def unregister_algorithm(name: str) -> None:
    """Remove a user's algorithm and the graph builder it registered."""
    alg = ALGORITHMS.pop(name, None)
    if alg is not None:
        register_node_runs(name, None)
    if alg is not None and alg.graph is not None and GRAPH_BUILDERS.get(name) is alg.graph:
        unregister_graph_builder(name)


ALGORITHMS.add = register_algorithm


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        near = did_you_mean(name, ALGORITHMS)
        raise RlhlsError(f"algorithm '{name}' has no trainer yet{': ' + near if near else ''} "
                         f"(registered: {', '.join(sorted(ALGORITHMS))})")
    return ALGORITHMS[name]


def algorithm_names() -> list[str]:
    """The registered algorithms in alphabetical order (not registration order, which follows
    whichever trainer module was imported first)."""
    return sorted(ALGORITHMS)
