"""A run bound once: what every command resolves before its first stage, and what its outputs record.

``bind(design, overrides=..., config=..., env_id=..., precision=..., demo=...)`` takes the design as
the user gave it (a registered name, a design file's design, an ONNX network's) and resolves, in this
order and nowhere else:

1. RL Zoo's run keys of ``config`` (``net_arch`` / ``activation`` resize the networks,
   ``total_timesteps`` the budget): the *given* design;
2. the hyperparameters of its algorithm (defaults <- design <- ``config`` <- ``overrides``),
   validated; ``demo`` puts the design's demonstration values (``Design.demo['set']``) under
   ``overrides``; ``precision`` is ``--set precision=...``;
3. the *bound* design: those hyperparameters in its kernels, at the algorithm's batch
   (``Algorithm.bind``). The graph, the profile, the plan, the build and the trainer all take it.

A design whose algorithm has no trainer is bound to its own values (graph, profile, partition and
build still work). ``BoundRun.record()`` is what a run folder (``config.json``, ``run.json``), a
build's ``manifest.json``, a plan and a perf output record of it, and ``bind_recorded`` turns such a
record back into the same bound run (a design file's only with the file given again).

The demonstration (``rlhls run`` without ``--full``) is a budget: its ``steps``, and settings that
change how long the run takes, never what is built (tests/test_bound.py checks every design), so
``rlhls build D`` and ``rlhls run D`` build the same components.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlhls.core.errors import RlhlsError
from rlhls.designs.design import Design
from rlhls.designs.registry import design_record, get_design, recorded_design

from .algorithms import get_algorithm
from .hyperparams import apply_config

if TYPE_CHECKING:
    from .algorithms import Algorithm

__all__ = ["BoundRun", "bind", "bind_recorded", "DEMO_STEPS", "FULL_STEPS"]

DEMO_STEPS = 10_000  # a design without its own demonstration budget
FULL_STEPS = 1_000_000  # a design without its own total_timesteps


@dataclass(frozen=True)
class BoundRun:
    """One run's design and settings, resolved once (module docstring)."""

    given: Design                   # the design as named, RL Zoo's resize applied
    design: Design                  # bound: the run's hyperparameters in its kernels, at its batch
    algorithm: Algorithm | None     # None: no trainer registered (train says why)
    hyperparams: dict               # resolved and validated
    overrides: dict = field(default_factory=dict)  # --set (the demonstration's values under them, precision)
    config: dict | None = None      # --config's entry (its algorithm keys)
    env_id: str = ""                # the environment it trains on
    demo: bool = False              # the demonstration budget
    steps: int = FULL_STEPS         # its default budget in environment steps

    @property
    def batch(self) -> int:
        return self.design.batch_size

    def record(self) -> dict:
        """What outputs record of the binding: the design's record (name, file and sha256, resize),
        its algorithm, environment, batch, hyperparameters, the --set values and every kernel's
        bound parameters."""
        return {**design_record(self.design), "algorithm": self.design.algorithm, "env": self.env_id,
                "batch": self.batch, "demo": self.demo, "hyperparams": dict(self.hyperparams),
                "overrides": {k: str(v) for k, v in self.overrides.items()},
                "kernels": [{"name": k.name, "unit": k.unit, "params": dict(k.params)} for k in self.design.kernels]}

    def rebound(self, hyperparams: dict) -> BoundRun:
        """The same run at `hyperparams` resolved again over the given design (a resumed run's own)."""
        if self.algorithm is None:
            return self
        hp = self.algorithm.hyperparams(self.given, hyperparams, None)
        if hp == self.hyperparams:
            return self
        return BoundRun(self.given, self.algorithm.bind(self.given, hp), self.algorithm, hp, self.overrides,
                        self.config, self.env_id, self.demo, self.steps)


def bind(design: str | Design, *, overrides: dict | None = None, config: dict | None = None,
         env_id: str | None = None, precision: str | None = None, demo: bool = False) -> BoundRun:
    """The bound run of `design` (module docstring); every value checked, nothing written."""
    if isinstance(design, str):
        if "\0" in design:
            raise RlhlsError(f"design {design!r}: a design name or file cannot hold a NUL character")
        design = get_design(design)
    if not isinstance(design, Design):
        raise RlhlsError(f"design {design!r}: expected a design name (rlhls designs) or a Design")
    for name, value in (("overrides", overrides), ("config", config)):
        if value is not None and not isinstance(value, dict):
            raise RlhlsError(f"{name}={value!r}: expected a dict of hyperparameters")
    d = design.demo if demo else {}
    over = {**d.get("set", {}), **(overrides or {})}
    if precision is not None:
        over["precision"] = precision
    given, config = apply_config(design, config)
    steps = int(d.get("steps", DEMO_STEPS) if demo else given.hyperparams.get("total_timesteps", FULL_STEPS))
    try:
        alg: Algorithm | None = get_algorithm(given.algorithm)
    except RlhlsError:
        alg = None
    if alg is None:
        if over or config:
            key = sorted({*over, *(config or {})})[0]
            raise RlhlsError(f"--set {key}: design '{given.name}' has no trainer for algorithm "
                             f"'{given.algorithm}' to take hyperparameters")
        return BoundRun(given, given, None, {}, {}, None, env_id or given.env_id, demo, steps)
    hp = alg.hyperparams(given, over, config)
    return BoundRun(given, alg.bind(given, hp), alg, hp, over, config, env_id or given.env_id, demo, steps)


def bind_recorded(cfg: dict, *, given: Design | str | None = None, where: str = "the run") -> BoundRun:
    """The bound run a record describes (a run folder's ``config.json``: ``design`` and its file /
    resize record, ``env``, ``hyperparams``): the recorded design (``recorded_design``: a design
    file's only from `given`, never by importing what the record names) at the recorded
    hyperparameters, validated again."""
    design = recorded_design(cfg.get("design"), cfg.get("design_file"), given=given,
                             resized=cfg.get("design_resized"), where=where)
    if cfg.get("algorithm") not in (None, design.algorithm):
        raise RlhlsError(f"{where}: records algorithm {str(cfg['algorithm'])[:40]!r}; its design "
                         f"'{design.name}' trains with {design.algorithm!r}")
    alg = get_algorithm(design.algorithm)
    hp = cfg.get("hyperparams")
    if not isinstance(hp, dict):
        raise RlhlsError(f"{where}: records no hyperparameters (expected a JSON object)")
    hp = alg.hyperparams(design, hp, None)
    env = cfg.get("env")
    return BoundRun(design, alg.bind(design, hp), alg, hp, {}, None, env if isinstance(env, str) else design.env_id,
                    False, int(design.hyperparams.get("total_timesteps", FULL_STEPS)))


def folder_binding(folder) -> dict:
    """What a folder rlhls wrote was bound to, read (never imported, never bound again): a flow
    folder's ``run.json``, a training run's ``config.json`` (``rlhls run``'s ``train/`` too) or a
    build's ``manifest.json``; ``{"folder", "from", design record, algorithm, env, batch,
    hyperparams, overrides, kernels}`` as far as it recorded them."""
    from pathlib import Path

    from rlhls.core.fileio import owned_file, read_json

    folder = Path(folder)
    for name, key in (("run.json", "binding"), ("config.json", None), ("train/config.json", None),
                      ("manifest.json", "binding")):
        path = folder / name
        if not path.is_file():
            continue
        owned_file(path.parent, path.name)  # never read through a link out of the folder
        try:
            rec = read_json(path)
        except (OSError, ValueError) as e:
            raise RlhlsError(f"'{path}' cannot be read as JSON ({e})") from None
        rec = rec.get(key) if key and isinstance(rec, dict) else rec
        if not isinstance(rec, dict) or not isinstance(rec.get("design"), str):
            continue  # written before the binding was recorded: the next file may hold it
        keep = ("design", "design_file", "design_resized", "algorithm", "env", "batch", "demo", "hyperparams",
                "overrides", "kernels", "precision", "plan_points")
        return {"folder": str(folder), "from": name, **{k: rec[k] for k in keep if k in rec}}
    raise RlhlsError(f"'{folder}': no run.json, config.json or manifest.json recording a binding (not a folder of "
                     "rlhls run, train or build)")
