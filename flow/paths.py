"""Where the flow finds its data: the ``rlhls.vitis`` data package and the build cache."""

from __future__ import annotations

import importlib.resources
import logging
import os
import tempfile
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
    $XDG_CACHE_HOME/rlhls, else ~/.cache/rlhls (created here). One that cannot be written (HOME a
    file, a read-only folder) is replaced by a scratch folder of this process, said once."""
    env = os.environ.get("RLHLS_CACHE_DIR")
    if env:
        return _usable(Path(env))
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except RuntimeError:  # no home folder to be found
        base = "~/.cache"
    return _usable(Path(base) / "rlhls")


_USABLE: dict = {}  # cache folder asked -> the folder used (itself, or a scratch one), once per process


def _usable(path: Path) -> Path:
    if str(path) not in _USABLE:
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".rlhls-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
            _USABLE[str(path)] = path
        except OSError as e:
            from rlhls.partition.fileio import process_scratch

            scratch = _USABLE[str(path)] = process_scratch() / "cache"
            scratch.mkdir(exist_ok=True)
            logging.getLogger("rlhls.flow").warning(
                f"the build cache '{path}' cannot be written ({e.strerror or e}): compiling into a scratch folder "
                "for this command (set RLHLS_CACHE_DIR to a writable folder to keep the builds)")
    return _USABLE[str(path)]
