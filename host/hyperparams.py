"""Hyperparameters of the training loops: defaults <- the design's <- `--set key=value` overrides."""

from __future__ import annotations

import numpy as np

from rlhls.designs.errors import RlhlsError


def coerce(key: str, value, default, ints=()):
    """A `--set` text as the type of its default (ints: keys that are integers whatever the default)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null"):
        return None
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise RlhlsError(f"--set {key}={value}: expected true or false")
    if key in ints or isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise RlhlsError(f"--set {key}={value}: expected an integer") from None
    if isinstance(default, float) or default is None:
        try:
            return float(text)
        except ValueError:
            raise RlhlsError(f"--set {key}={value}: expected a number") from None
    return text


def merge(defaults: dict, design, overrides: dict | None, algorithm: str, ints=(), zero_ok=(),
          choices: dict | None = None) -> dict:
    """`defaults` updated with the design's hyperparameters of the same names, then `overrides`;
    each key of `ints` checked to be an integer >= 1 (>= 0 for those in `zero_ok`), each key of
    `choices` to be one of its values."""
    hp = dict(defaults)
    for k, v in design.hyperparams.items():
        if k in hp:
            hp[k] = v
    for k, v in (overrides or {}).items():
        if k not in hp:
            raise RlhlsError(f"--set {k}: unknown {algorithm} hyperparameter (known: {', '.join(sorted(hp))})")
        hp[k] = coerce(k, v, hp[k], ints)
    for k in ints:
        if not (isinstance(hp[k], (int, np.integer)) and not isinstance(hp[k], bool)):
            raise RlhlsError(f"hyperparameter {k} = {hp[k]!r}: expected an integer")
        hp[k] = int(hp[k])
        low = 0 if k in zero_ok else 1
        if hp[k] < low:
            raise RlhlsError(f"hyperparameter {k} = {hp[k]}: expected >= {low}")
    for k, allowed in (choices or {}).items():
        if hp[k] not in allowed:
            raise RlhlsError(f"{k} '{hp[k]}': expected one of {', '.join(allowed)}")
    return hp
