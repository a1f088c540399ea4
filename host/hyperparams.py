"""Hyperparameters of the training loops: one documented dataclass per algorithm (CleanRL's
``Args`` style), filled in this order and validated once, before anything is written:

    the dataclass's defaults  <-  the design's ``hyperparams`` (keys it knows; others describe
    the design, e.g. ``source``) and its kernels' parameters that are hyperparameters (the GAE
    unit's ``bits`` is ``quant_bits``: ``Design.kernel_hyperparams``)  <-  a YAML file (``--config FILE.yaml``: a
    mapping of hyperparameters, or an RL Zoo file as published, host/rlzoo.py)  <-  ``--set key=value``.

Every field is declared with ``hp(default, doc, ...)``: its type (the annotation: int, float,
bool, str, or ``X | None``), its range (``low`` / ``high``, inclusive unless ``above``/``below``
say strictly) and its choices. Floats must be finite. A YAML or ``--set`` key the algorithm does
not have, a value of the wrong type, out of range or not among the choices is one ``RlhlsError``
line naming the key. An algorithm adds checks across fields in ``check()``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from pathlib import Path
from typing import Any, ClassVar

from rlhls.core.errors import RlhlsError

__all__ = ["hp", "HyperParams", "read_config", "load_config", "config_of", "apply_config"]


def hp(default, doc: str, *, low=None, high=None, above=None, below=None, choices=()):
    """A documented, validated hyperparameter field (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"doc": doc, "low": low, "high": high, "above": above,
                                                        "below": below, "choices": tuple(choices)})


def read_config(path, design=None, env_id: str | None = None) -> dict:
    """A YAML file of hyperparameters: a mapping of them, or RL Zoo's file of entries keyed by
    environment id or design name (host/rlzoo.py picks the entry of `design` (a Design) on `env_id`,
    default its own, and reads SB3's names, schedules and policy_kwargs). With a Design the result
    may hold ``rlzoo.RUN_KEYS`` (the budget, hidden layers): ``apply_config`` applies them."""
    return config_of(load_config(path), path, design, env_id)


# A --config file is read with these bounds, checked while its events are parsed, before any value
# is built: a YAML file of nested aliases (a "billion laughs") is a few bytes that expand past any
# memory, and the composer recurses once per level of nesting.
MAX_YAML_BYTES = 1 << 20  # RL Zoo's largest published file (ppo.yml) is about 20 KB
MAX_YAML_EXPANDED = 1 << 22  # characters of scalars + collections with every alias written out
MAX_YAML_DEPTH = 64  # levels of nesting: RL Zoo's files have 3 (entry, key, a list)
MAX_YAML_INT = 2 ** 63  # |integer| below this (a 64-bit integer): counts and seeds are; Python's int() of a
# 5,000-digit text is a ValueError, and a float of a 400-digit one an OverflowError


MAX_EVAL_EPISODES = 100_000  # episodes of one evaluation: SB3's default is 10, papers report 10 to 100


class _YamlRefused(Exception):
    """A bound of a --config file that is exceeded: its message, and the line."""

    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.line = None if mark is None else mark.line + 1


def _yaml_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):
        pass

    def construct_int(loader, node):
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > 2 * len(str(MAX_YAML_INT)):  # before int() converts thousands of digits
            value = None
        else:
            value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
        if value is None or abs(value) >= MAX_YAML_INT:
            raise _YamlRefused(f"integer of {len(digits)} digits is out of range (a 64-bit integer at most)",
                               node.start_mark)
        return value

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return Loader


def _check_yaml_events(text: str, loader) -> None:
    """_YamlRefused when `text` nests deeper than MAX_YAML_DEPTH, expands past MAX_YAML_EXPANDED with
    its aliases, or holds an alias inside its own anchor (a recursive value). Events only: the
    parser keeps a stack, it does not recurse, and nothing is built."""
    import yaml

    size = {}  # anchor -> its value's expanded size
    stack: list[list] = []  # per open collection: [anchor, expanded size so far]
    total = 0
    for ev in yaml.parse(text, Loader=loader):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_YAML_DEPTH:
                raise _YamlRefused(f"nested deeper than {MAX_YAML_DEPTH} levels", ev.start_mark)
            stack.append([ev.anchor, 1])
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = stack.pop()
            if anchor is not None:
                size[anchor] = n
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1 + len(ev.value)
            if ev.anchor is not None:
                size[ev.anchor] = n
        elif isinstance(ev, yaml.AliasEvent):
            if any(a == ev.anchor for a, _ in stack):
                raise _YamlRefused(f"alias *{ev.anchor} is inside its own anchor (a value that holds itself)",
                                   ev.start_mark)
            n = size.get(ev.anchor, 1)  # an undefined alias: the loader names it
        else:
            continue
        if stack:
            stack[-1][1] += n
        total += n
        if total > MAX_YAML_EXPANDED:
            raise _YamlRefused(f"its aliases expand it past {MAX_YAML_EXPANDED} characters (nested aliases?)",
                               ev.start_mark)


def load_config(path) -> dict:
    """The mapping a --config file holds, as read (``config_of`` takes a design's values from it);
    bounded (MAX_YAML_*) before anything is built."""
    import yaml

    from rlhls.core.fileio import read_limited

    path = Path(path)
    try:
        data = read_limited(path, MAX_YAML_BYTES, "a hyperparameter file holds")
    except OSError as e:
        raise RlhlsError(f"--config '{path}': cannot be read ({e.strerror or e})") from None
    except ValueError as e:  # too large, not a regular file
        raise RlhlsError(f"--config '{path}': {e}") from None
    try:
        text = data.decode("utf-8")
        loader = _yaml_loader()
        _check_yaml_events(text, loader)
        data = yaml.load(text, Loader=loader)  # noqa: S506 (a SafeLoader with a bounded int)
    except _YamlRefused as e:
        where = f" (line {e.line})" if e.line else ""
        raise RlhlsError(f"--config '{path}'{where}: {e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
        where = "; ".join(([f"line {mark.line + 1}"] if mark is not None else []) + ([problem] if problem else []))
        raise RlhlsError(f"--config '{path}': not YAML" + (f" ({where})" if where else "")) from None
    except (ValueError, TypeError, OverflowError) as e:  # a value its constructor refuses (a date 2024-13-01)
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RlhlsError(f"--config '{path}': a value cannot be read ({why})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise RlhlsError(f"--config '{path}': expected a mapping of hyperparameters (key: value)")
    return data


def config_of(data: dict, path, design=None, env_id: str | None = None) -> dict:
    """What ``read_config`` returns, of a file's mapping already read (``load_config``)."""
    from . import rlzoo

    key = None
    if any(isinstance(v, dict) for v in data.values()):  # RL Zoo's entries
        if design is None:
            raise RlhlsError(f"--config '{path}': entries keyed by environment or design take one design; "
                             "give a mapping of hyperparameters")
        if isinstance(design, str):
            key = design if isinstance(data.get(design), dict) else None
            data = data[design] if key else data
        else:
            key, data = rlzoo.entry(data, path, design, env_id or design.env_id)
    if isinstance(design, str) or design is None:
        for k, v in data.items():
            if isinstance(v, (dict, list)):
                raise RlhlsError(f"--config '{path}': '{k}' holds a {type(v).__name__}; expected a single value")
        return dict(data)
    from .algorithms import get_algorithm

    args = get_algorithm(design.algorithm).args
    where = f"--config '{path}'" + (f" [{key}]" if key else "")
    return rlzoo.translate(data, where, design, args.design_values(design), args.sb3)


def apply_config(design, config: dict | None):
    """(design, hyperparameters) of a config: its run keys (``rlzoo.RUN_KEYS``: the budget
    ``total_timesteps``, hidden layers ``net_arch`` / ``activation``) applied to the design, the
    rest for the algorithm."""
    from dataclasses import replace

    from .rlzoo import RUN_KEYS

    if not config:
        return design, config
    hp = {k: v for k, v in config.items() if k not in RUN_KEYS}
    if "net_arch" in config or "activation" in config:
        design = design.with_net_arch(dict(config.get("net_arch") or {}), config.get("activation"))
    if "total_timesteps" in config:
        design = replace(design, hyperparams={**design.hyperparams, "total_timesteps": int(config["total_timesteps"])})
    return design, hp


def _types(annotation) -> tuple[str, bool]:
    """('int'|'float'|'bool'|'str', None allowed) from a field's annotation text."""
    parts = [p.strip() for p in str(annotation).split("|")]
    none_ok = "None" in parts
    base = [p for p in parts if p != "None"]
    return (base[0] if base else "str"), none_ok


def _coerce(name: str, value, kind: str, none_ok: bool, algo: str):
    where = f"{algo} hyperparameter {name}"
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null") and none_ok):
        if none_ok:
            return None
        raise RlhlsError(f"{where} = None: expected a{'n' if kind == 'int' else ''} {kind}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise RlhlsError(f"{where} = {value!r}: expected true or false")
    if kind == "int":
        if isinstance(value, bool):
            raise RlhlsError(f"{where} = {value!r}: expected an integer")
        try:
            if isinstance(value, str):
                text = value.strip().replace("_", "")
                f = float(text)
                if not (math.isfinite(f) and f == int(f)):
                    raise ValueError
                return int(f) if "e" in text.lower() or "." in text else int(text)
            if isinstance(value, float):
                if not (math.isfinite(value) and value == int(value)):
                    raise ValueError
                return int(value)
            return int(value)
        except (ValueError, TypeError, OverflowError):
            raise RlhlsError(f"{where} = {value!r}: expected an integer") from None
    if kind == "float":
        if isinstance(value, bool):
            raise RlhlsError(f"{where} = {value!r}: expected a number")
        try:
            f = float(value.strip() if isinstance(value, str) else value)
        except (ValueError, TypeError):
            raise RlhlsError(f"{where} = {value!r}: expected a number") from None
        if not math.isfinite(f):
            raise RlhlsError(f"{where} = {value!r}: expected a finite number")
        return f
    if not isinstance(value, str):
        raise RlhlsError(f"{where} = {value!r}: expected a text")
    return value.strip()


@dataclasses.dataclass
class HyperParams:
    """Base of the algorithms' hyperparameter dataclasses (module docstring)."""

    algorithm = ""  # the name errors use (PPO, DQN, ...)
    # other names of a field (e.g. A2C's n_steps is the rollout length num_steps)
    aliases: ClassVar[dict[str, str]] = {}
    # Stable-Baselines3 / RL Zoo names: a field's name, or fn(value, rlzoo.Ctx) -> {field: value}
    sb3: ClassVar[dict[str, Any]] = {}

    # every algorithm's evaluation (host/evaluation.py; the runner runs it, training's bits untouched)
    eval_every: int = hp(0, "env steps between evaluations of the deterministic policy (0: at the end of the run "
                         "only)", low=0)
    eval_episodes: int = hp(10, "episodes per evaluation (SB3 evaluate_policy); 0: no evaluation", low=0,
                            high=MAX_EVAL_EPISODES)

    @classmethod
    def describe(cls) -> list[dict]:
        """Every field: name, type, default, doc, range and choices (for --help and reports)."""
        out = []
        for f in dataclasses.fields(cls):
            kind, none_ok = _types(f.type)
            m = f.metadata
            d = {"name": f.name, "type": kind + (" | None" if none_ok else ""), "default": f.default,
                 "doc": m.get("doc", "")}
            for key in ("low", "high", "above", "below"):
                if m.get(key) is not None:
                    d[key] = m[key]
            if m.get("choices"):
                d["choices"] = list(m["choices"])
            out.append(d)
        return out

    @classmethod
    def defaults_for(cls, design) -> dict:
        """Defaults that depend on the design (e.g. its batch size); subclasses override."""
        return {}

    @classmethod
    def design_values(cls, design) -> dict:
        """The defaults with the design's values, not validated yet."""
        values = {f.name: f.default for f in dataclasses.fields(cls)}
        values.update(cls.defaults_for(design))
        values.update({k: v for k, v in {**design.hyperparams, **design.kernel_hyperparams()}.items()
                       if k in values})
        return values

    @classmethod
    def resolve(cls, design, overrides: dict | None = None, config: dict | None = None) -> dict:
        """The run's hyperparameters as a dict (see the module docstring)."""
        names = [f.name for f in dataclasses.fields(cls)]
        values = cls.design_values(design)
        for source, given in (("--config", config), ("--set", overrides)):
            for k, v in (given or {}).items():
                k = cls.aliases.get(k, k)
                if k not in values:
                    raise RlhlsError(f"{source} {k}: unknown {cls.algorithm} hyperparameter "
                                     f"(known: {', '.join(sorted(names))})")
                values[k] = v
        for f in dataclasses.fields(cls):
            kind, none_ok = _types(f.type)
            v = values[f.name] = _coerce(f.name, values[f.name], kind, none_ok, cls.algorithm)
            if v is None:
                continue
            m = f.metadata
            where = f"{cls.algorithm} hyperparameter {f.name} = {v!r}"
            if m.get("choices") and v not in m["choices"]:
                raise RlhlsError(f"{where}: expected one of {', '.join(map(str, m['choices']))}")
            lo, hi = m.get("low"), m.get("high")
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                want = f"{lo}..{hi}" if lo is not None and hi is not None else (
                    f">= {lo}" if lo is not None else f"<= {hi}")
                raise RlhlsError(f"{where}: expected {want}")
            if m.get("above") is not None and not v > m["above"]:
                raise RlhlsError(f"{where}: expected > {m['above']}")
            if m.get("below") is not None and not v < m["below"]:
                raise RlhlsError(f"{where}: expected < {m['below']}")
        obj = cls(**values)
        obj.check(design)
        return dataclasses.asdict(obj)

    def check(self, design) -> None:
        """Checks across fields (subclasses)."""


def check_seed(seed) -> int:
    """`seed` as an int (numpy's integers too), or one line."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2 ** 32:
        raise RlhlsError(f"--seed {seed!r}: expected an integer 0 <= seed < 2**32")
    return int(seed)
