"""All registered designs, by name."""

from __future__ import annotations

from functools import lru_cache

from .errors import RlhlsError


@lru_cache(maxsize=1)
def _registry() -> dict:
    from . import apdrl, cpp, fddpg, heppo, traffic

    out = {}
    for module in (heppo, cpp, fddpg, apdrl, traffic):
        for d in module.designs():
            d.check_kernels()  # every kernel it names is registered and takes the parameters it gives
            out[d.name] = d
    return out


def design_names() -> list[str]:
    return list(_registry())


def get_design(name: str):
    reg = _registry()
    if name not in reg:
        raise RlhlsError(f"unknown design '{name}' (known: {', '.join(reg)})")
    return reg[name]
