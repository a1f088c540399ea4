"""What the AP-DRL trainers (host/dqn.py, host/a2c.py, host/ddpg.py) do alike when they start: check
the backend, resolve hyperparameters, build the design's networks and the replayable envs, and take
the partition plan for ``precision='mixed'`` (``assignment`` None there = profile + ILP in-process
at the given batch, ``mixed.default_plan``). The runner's trainer interface is in host/runner.py."""

from __future__ import annotations

from rlhls.designs.errors import RlhlsError

from .envs import ReplayableVecEnv
from .mixed import default_plan

__all__ = ["TrainerBase"]


class TrainerBase:
    algorithm = ""

    def _start(self, design, env_id, seed, backend, hyperparams, resolve, networks: tuple) -> dict:
        """Set design, hp, env_id, seed, envs; return the design's fresh networks (``networks`` must be there)."""
        name = self.algorithm.upper()
        if backend != "emu":
            raise RlhlsError(f"backend '{backend}': {name} runs its layers through the emulator only so far (use emu)")
        self.design = design
        self.hp = resolve(design, hyperparams)
        self.env_id = env_id or design.env_id
        self.seed = int(seed)
        nets = design.build_networks(self.seed)
        if any(n not in nets for n in networks):
            raise RlhlsError(f"design '{design.name}': {name} needs network(s) {', '.join(map(repr, networks))} "
                             f"(has {', '.join(nets)})")
        self.envs = ReplayableVecEnv(self.env_id, self.hp["num_envs"], self.seed)
        return nets

    def _take_plan(self, assignment, batch: int) -> None:
        """``self.assignment``: the plan for mixed precision (solved here when None), else None."""
        mixed = self.hp["precision"] == "mixed"
        if mixed and assignment is None:
            assignment = default_plan(self.design, batch)
        self.assignment = dict(assignment) if mixed else None

    def _scaling(self, **extra) -> dict:
        """MixedPrecision keyword arguments from the loss-scaling hyperparameters."""
        hp = self.hp
        return dict(loss_scale_init=hp["loss_scale_init"], growth_interval=hp["loss_scale_growth_interval"],
                    quantization_delay=hp["quantization_delay"], **extra)
