"""Where the flow finds its data: the ``rlhls.vitis`` data package and the build cache."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path


def vitis_dir() -> Path:
    """The installed ``vitis/`` folder (HLS headers in include/, Jinja2 templates in templates/)."""
    return Path(str(importlib.resources.files("rlhls.vitis")))


def include_dir() -> Path:
    return vitis_dir() / "include"


def templates_dir() -> Path:
    return vitis_dir() / "templates"


def cache_dir() -> Path:
    """Build cache for csim programs and csim-backend libraries: $RLHLS_CACHE_DIR, else
    $XDG_CACHE_HOME/rlhls, else ~/.cache/rlhls (created on use)."""
    env = os.environ.get("RLHLS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlhls"
