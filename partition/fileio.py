"""Atomic file writes for everything rlhls writes (the lowest layer that touches files).

A file is written to a temporary name beside its target, flushed, and renamed into place, so a
killed process leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rlhls.designs.errors import RlhlsError

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_bytes(path, data: bytes) -> None:
    path = Path(path)
    if path.is_dir():
        raise RlhlsError(f"cannot write '{path}': it is a directory")
    if not path.parent.exists():
        raise RlhlsError(f"cannot write '{path}': folder '{path.parent}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
