"""RL Zoo's hyperparameter files as published (DLR-RM/rl-baselines3-zoo ``hyperparams/<algo>.yml``):
the entry of a design, Stable-Baselines3's names in ours, schedules and ``policy_kwargs``.

``entry(data, design, env_id)`` picks what RL Zoo's ExperimentManager picks: the entry keyed by the
design's name, else by the environment id, else by the same environment at another version
(``LunarLanderContinuous-v2`` for ``-v3``; said in the log), else ``atari`` for an ALE game, else
``default``. ``translate(entry, ...)`` maps it: the keys every algorithm shares are here
(``COMMON``), an algorithm's own SB3 names are its hyperparameter dataclass's ``sb3`` table
(a field name, or a function of the value and a ``Ctx`` returning our values); a key that is ours
passes as it is. ``n_timesteps`` is the run's budget, ``policy_kwargs`` net_arch / activation_fn
resize the design's MLPs (``Design.with_net_arch``): both are run keys (``RUN_KEYS``) that
``hyperparams.apply_config`` applies to the design. A value we cannot honour (``normalize: true``,
gSDE, a wrapper we do not have) and a key we do not know are one RlhlsError line naming the key:
nothing that changes learning is dropped. docs/guide/configs.md has the whole table.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import math
import re
from typing import TYPE_CHECKING, Any

from rlhls.core.errors import RlhlsError

if TYPE_CHECKING:
    from rlhls.designs.design import Design

__all__ = ["Ctx", "RUN_KEYS", "entry", "translate", "schedule", "constant", "whole", "parse_policy_kwargs",
           "train_freq"]

log = logging.getLogger(__name__)

RUN_KEYS = ("total_timesteps", "net_arch", "activation")  # what a config changes of the design, not of its algorithm
ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"  # = host/envs/atari.py's stack
ATARI_FRAME_STACK = 4


@dataclasses.dataclass
class Ctx:
    """What an SB3 key's translation sees: where it is (for errors), the whole entry, the algorithm's
    values before the config (the design's), the design."""

    where: str
    entry: dict
    base: dict
    design: Design

    def error(self, key: str, what: str) -> RlhlsError:
        return RlhlsError(f"{self.where} {key}: {what}")

    def given(self, sb3: str, ours: str):
        """The entry's value of an SB3 key, else ours before the config."""
        return self.entry.get(sb3, self.base.get(ours))


def _version_free(env_id: str) -> str:
    return re.sub(r"-v\d+$", "", env_id)


def entry(data: dict, path, design, env_id: str) -> tuple[str, dict]:
    """(key, entry) of an RL Zoo file's mapping for `design` on `env_id` (module docstring)."""
    keys = [k for k in data if isinstance(data[k], dict)]
    for key in (design.name, env_id):
        if key in data:
            return key, data[key]
    same = [k for k in keys if _version_free(k) == _version_free(env_id)]
    if same:
        log.info("--config %s: no entry %s; taking %s (the same environment at another version)", path, env_id,
                 same[0])
        return same[0], data[same[0]]
    from .envs.atari import is_atari

    if "atari" in data and is_atari(env_id):
        return "atari", data["atari"]
    if "default" in data:
        log.info("--config %s: no entry for %s or %s; taking 'default'", path, design.name, env_id)
        return "default", data["default"]
    raise RlhlsError(f"--config '{path}': no entry for design {design.name} or environment {env_id} "
                     f"(entries: {', '.join(keys[:12])}{', ...' if len(keys) > 12 else ''})")


def schedule(ctx: Ctx, key: str, value) -> tuple[float | str, bool]:
    """(initial value, annealed linearly to 0) of a number or RL Zoo's ``lin_<value>`` (a number as text
    stays text: the hyperparameter's own check reads it)."""
    if isinstance(value, str) and value.strip().startswith("lin_"):
        try:
            return float(value.strip()[4:]), True
        except ValueError:
            raise ctx.error(key, f"{value!r} is not lin_<number>") from None
    if isinstance(value, str) and "_" in value and not value.replace("_", "").replace(".", "").isdigit():
        raise ctx.error(key, f"schedule {value!r}: only RL Zoo's lin_<value> is known")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ctx.error(key, f"{value!r}: expected a number or lin_<number>")
    return value, False


def constant(ctx: Ctx, key: str, value):
    """A value that must not be a schedule (the algorithm anneals no such value)."""
    v, annealed = schedule(ctx, key, value) if isinstance(value, str) and value.startswith("lin_") else (value, False)
    if annealed:
        alg = getattr(ctx.design, "algorithm", "").upper()
        raise ctx.error(key, f"{value!r}: {alg} keeps {key} constant (no schedule); give a number")
    return v


def whole(ctx: Ctx, key: str, value, low: int = 1) -> int:
    """An SB3 count (an int, or a float such as YAML's 1e4 that is one)."""
    if isinstance(value, str):  # PyYAML reads 1e4 without !!float as text
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < low:
        raise ctx.error(key, f"{value!r}: expected a whole number >= {low}")
    return int(value)


def train_freq(ctx: Ctx, value) -> int:
    """SB3's train_freq (n, [n, 'step'] or (n, 'step')) in environment steps; per episode is refused."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[1] in ("step", "episode"):
        if value[1] == "episode":
            raise ctx.error("train_freq", f"{list(value)}: training per episode is not ours (give steps)")
        value = value[0]
    return whole(ctx, "train_freq", value)


# policy_kwargs ---------------------------------------------------------------------------------


class _Name(str):
    """A name in a policy_kwargs text (nn.ReLU, RMSpropTFLike): never looked up, only compared."""


def parse_policy_kwargs(ctx: Ctx, value) -> dict:
    """RL Zoo's ``policy_kwargs`` (the text ``"dict(net_arch=[64, 64])"`` or a mapping) as a dict of
    literals; read with ``ast`` (never evaluated): names stay names."""
    if isinstance(value, dict):
        return dict(value)
    if not isinstance(value, str):
        raise ctx.error("policy_kwargs", f"{value!r}: expected dict(...) text")
    try:
        node = ast.parse(value.strip(), mode="eval").body
    except SyntaxError:
        raise ctx.error("policy_kwargs", f"{value!r} is not a dict(...) expression") from None
    out = _literal(ctx, node)
    if not isinstance(out, dict):
        raise ctx.error("policy_kwargs", f"{value!r}: expected dict(...)")
    return out


def _literal(ctx: Ctx, node):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(k.arg is None for k in node.keywords):
            raise ctx.error("policy_kwargs", "** in dict(...) is not a literal")
        return {k.arg: _literal(ctx, k.value) for k in node.keywords}
    if isinstance(node, ast.Dict):
        return {_literal(ctx, k): _literal(ctx, v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(ctx, e) for e in node.elts]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand,
                                                                                                  ast.Constant):
        v = node.operand.value
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _Name(ast.unparse(node))
    raise ctx.error("policy_kwargs", f"{ast.unparse(node)!r} is not a literal (a number, list, dict(...) or name)")


_ROLES = {"pi": "actor", "vf": "critic", "qf": "critic"}
_ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh"}


def _policy_kwargs(value, ctx: Ctx) -> dict:
    kw = parse_policy_kwargs(ctx, value)
    out: dict[str, Any] = {}
    fields = set(ctx.base)
    roles = {n.role for n in ctx.design.networks}
    for k, v in kw.items():
        key = f"policy_kwargs {k}"
        if k == "net_arch":
            if isinstance(v, list) and len(v) == 1 and isinstance(v[0], dict):  # SB3 < 1.8: [dict(pi=, vf=)]
                v = v[0]
            if isinstance(v, list):
                arch = {r: v for r in roles}
            elif isinstance(v, dict):
                arch = {}
                for part, sizes in v.items():
                    role = _ROLES.get(part)
                    if role not in roles:
                        raise ctx.error(key, f"{part}=: design {ctx.design.name} has no such network "
                                             f"(its roles: {', '.join(sorted(roles))})")
                    arch[role] = sizes
            else:
                raise ctx.error(key, f"{v!r}: expected [sizes] or dict(pi=[...], vf=[...] / qf=[...])")
            for role, sizes in arch.items():
                if not isinstance(sizes, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1
                                                          for h in sizes):
                    raise ctx.error(key, f"{sizes!r}: expected a list of layer sizes >= 1 (shared layers are not ours)")
            if len(ctx.design.obs_shape) != 1:
                raise ctx.error(key, f"design {ctx.design.name}'s networks are convnets; net_arch resizes MLPs")
            out["net_arch"] = {r: tuple(s) for r, s in arch.items()}
        elif k == "activation_fn":
            act = _ACTIVATIONS.get(str(v).rsplit(".", 1)[-1])
            if act is None:
                raise ctx.error(key, f"{v}: only nn.ReLU and nn.Tanh are ours")
            out["activation"] = act
        elif k == "log_std_init" and "log_std_init" in fields:
            out["log_std_init"] = v
        elif k == "ortho_init":
            if v is not True:
                raise ctx.error(key, f"{v!r}: our networks are initialised orthogonally (CleanRL, SB3's default)")
        else:
            raise ctx.error(key, f"cannot be honoured for {ctx.design.algorithm.upper()} "
                                 "(ours: net_arch, activation_fn, ortho_init=True"
                                 f"{', log_std_init' if 'log_std_init' in fields else ''})")
    return out


# the keys every algorithm shares --------------------------------------------------------------


def _policy(value, ctx: Ctx) -> dict:
    want = "MlpPolicy" if len(ctx.design.obs_shape) == 1 else "CnnPolicy"
    if value != want:
        raise ctx.error("policy", f"{value!r}: design {ctx.design.name}'s networks are a {want}")
    return {}


def _frame_stack(value, ctx: Ctx) -> dict:
    if len(ctx.design.obs_shape) != 3 or value != ATARI_FRAME_STACK:
        raise ctx.error("frame_stack", f"{value!r}: ours stacks {ATARI_FRAME_STACK} frames of Atari games only")
    return {}


def _env_wrapper(value, ctx: Ctx) -> dict:
    names = value if isinstance(value, list) else [value]
    for w in names:
        if w != ATARI_WRAPPER or len(ctx.design.obs_shape) != 3:
            raise ctx.error("env_wrapper", f"{w!r}: the only wrapper ours has is {ATARI_WRAPPER} "
                                           "(no arguments, Atari games: host/envs/atari.py)")
    return {}


def _false_only(key: str, why: str):
    """A key honoured when false (SB3's default), refused otherwise."""
    def fn(value, ctx: Ctx) -> dict:
        if value not in (False, None):
            raise ctx.error(key, f"{value!r}: {why}")
        return {}
    return fn


def _budget(key: str):
    return lambda value, ctx: {"total_timesteps": whole(ctx, key, value)}


COMMON = {
    "n_timesteps": _budget("n_timesteps"),
    "total_timesteps": _budget("total_timesteps"),  # CleanRL's name of it
    "policy": _policy,
    "n_envs": "num_envs",
    "frame_stack": _frame_stack,
    "env_wrapper": _env_wrapper,
    "policy_kwargs": _policy_kwargs,
    "normalize": _false_only("normalize", "VecNormalize is not ours (PPO / TRPO: obs_norm normalizes "
                                          "observations)"),
    "use_sde": _false_only("use_sde", "generalized state-dependent exploration is not ours"),
    "sde_sample_freq": _false_only("sde_sample_freq", "gSDE (use_sde) is not ours"),
    "optimize_memory_usage": _false_only("optimize_memory_usage", "needs SB3's handle_timeout_termination=False, "
                                                                  "which changes the targets"),
}


def translate(entry_: dict, where: str, design, base: dict, table: dict) -> dict:
    """Our hyperparameters (and RUN_KEYS) of one RL Zoo entry; `base`: the algorithm's values before
    the config, `table`: the algorithm's own SB3 names (its dataclass's ``sb3``)."""
    ctx = Ctx(where, entry_, base, design)
    names = {**COMMON, **table}
    out = {}
    for k, v in entry_.items():
        t = names.get(k)
        if t is None:
            if k in base:
                out[k] = constant(ctx, k, v)
                continue
            sb3 = sorted(set(names) - set(base))
            raise ctx.error(k, f"unknown key for {design.algorithm.upper()} (ours: `rlhls algorithms`; "
                               f"SB3's we read: {', '.join(sb3)})")
        if callable(t):
            out.update(t(v, ctx))
        else:
            out[t] = constant(ctx, k, v)
    return out
