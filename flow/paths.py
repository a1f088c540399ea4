"""Where the flow finds its data: the ``rlhls.vitis`` data package (the build cache is
``rlhls.core.toolchain.cache_dir``)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def vitis_dir() -> Path:
    """The installed ``vitis/`` folder (HLS headers in include/, Jinja2 templates in templates/)."""
    return Path(str(importlib.resources.files("rlhls.vitis")))


def include_dir() -> Path:
    return vitis_dir() / "include"


def templates_dir() -> Path:
    return vitis_dir() / "templates"
