"""Checkpoints that cannot run code: numpy arrays in an ``.npz``, everything else in JSON.

``save_checkpoint(path, state)`` writes a nested state (dicts, lists, tuples, numpy arrays and
scalars, Python numbers, strings, None) atomically as one ``.npz``: every array is an entry
``a<i>`` (its dtype and shape kept exactly), and the structure around them is the JSON entry
``state`` (with ``{"__array__": i}`` where array i goes, ``{"__tuple__": [...]}`` for tuples and
``{"__items__": [[key, value], ...]}`` for dicts whose keys are not all strings). Floats keep
every bit (JSON writes the shortest repr that reads back the same double; NaN and infinities
included); Python ints of any size stay exact (a random generator's 128-bit state). The file is
written straight into its temp file beside `path` and replaces it when complete.

``load_checkpoint(path)`` reads it with ``allow_pickle=False`` — loading a run folder someone
shared runs no code — and checks the format version; a file that is not such a checkpoint
(random bytes, truncated, empty, an old pickle checkpoint) is one ``RlhlsError`` line.

What grows with a run (the replay buffer, the CSVs) is kept out of it, in files that only grow:
``write_at(path, offset, data)`` puts bytes at an offset the checkpoint recorded (cutting what a
killed write left past it) and ``read_rows(path, dtype, rows)`` reads the rows a checkpoint
covers, its size checked first; the checkpoint names the lengths, so bytes past them are ignored.
Every read and in-place write goes through ``fileio.open_owned``: a symbolic link in the run folder
is never followed, and a file with another hard link is never written, so a folder someone crafted
cannot lead a write (or a read) to a file outside it.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_writer, open_owned, os_error

__all__ = ["FORMAT", "save_checkpoint", "load_checkpoint", "write_at", "read_rows"]

FORMAT = "rlhls-checkpoint/1"


def _encode(x, arrays: list):
    if isinstance(x, np.ndarray):
        arrays.append(x)
        return {"__array__": len(arrays) - 1}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in x):
            return {k: _encode(v, arrays) for k, v in x.items()}
        return {"__items__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in x]}
    if isinstance(x, list):
        return [_encode(v, arrays) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"checkpoint: cannot store a {type(x).__name__}")


def _decode(x, arrays):
    if isinstance(x, dict):
        if "__array__" in x:
            return arrays[x["__array__"]]
        if "__tuple__" in x:
            return tuple(_decode(v, arrays) for v in x["__tuple__"])
        if "__items__" in x:
            return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in x["__items__"]}
        return {k: _decode(v, arrays) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v, arrays) for v in x]
    return x


def _hashable(k):
    return k.item() if isinstance(k, np.ndarray) and k.ndim == 0 else k


def save_checkpoint(path, state) -> None:
    arrays: list = []
    tree = _encode(state, arrays)
    with atomic_writer(path) as fh:
        np.savez(fh, state=np.frombuffer(json.dumps({"format": FORMAT, "state": tree}).encode(), dtype=np.uint8),
                 **{f"a{i}": a for i, a in enumerate(arrays)})


def write_at(path, offset: int, data: bytes, *, folder=None) -> int:
    """Write `data` at byte `offset` of `path` (made when missing), the file cut there first, and
    flush it to disk; returns the new length. A file shorter than `offset` is one line. `path` must be
    a regular file of `folder` (its parent by default; fileio.open_owned): no symbolic link is followed
    and a file with another hard link is refused, so nothing outside the run folder is changed."""
    path = Path(path)
    root = Path(folder) if folder is not None else path.parent
    try:
        with os.fdopen(open_owned(root, path.relative_to(root).as_posix(), os.O_RDWR | os.O_CREAT), "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:
                raise RlhlsError(f"'{path}' holds {size} bytes, its checkpoint counts {offset}: the run folder "
                                 "is damaged")
            if size == offset and not data:
                return offset  # nothing to cut or add: no flush
            f.seek(offset)
            f.truncate()
            f.write(data)
            f.flush()
            os.fdatasync(f.fileno())
    except OSError as e:
        raise os_error(path, e) from None
    return offset + len(data)


def read_rows(path, dtype, rows: int, start: int = 0, *, folder=None) -> np.ndarray:
    """Rows `start` .. `start + rows` of a raw file of `dtype` records (no object fields), the file's
    size checked against them before anything is allocated; a file of `folder` (its parent by
    default), read through no symbolic link."""
    path, dtype = Path(path), np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError("read_rows: object fields")
    need = (start + rows) * dtype.itemsize
    root = Path(folder) if folder is not None else path.parent
    try:
        with os.fdopen(open_owned(root, path.relative_to(root).as_posix()), "rb") as f:
            have = os.fstat(f.fileno()).st_size
            if have < need:
                raise RlhlsError(f"'{path}' holds {have} bytes, its checkpoint counts {need} "
                                 "(truncated or another file): the run folder is damaged")
            f.seek(start * dtype.itemsize)
            return np.fromfile(f, dtype=dtype, count=rows)
    except FileNotFoundError:
        raise RlhlsError(f"'{path}' is missing: its checkpoint counts {need} bytes in it (the run folder is "
                         "damaged)") from None
    except OSError as e:
        raise os_error(path, e, "read") from None


def _check_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """ValueError unless the entry is stored (savez stores) and its array header claims the bytes it holds."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"entry '{info.filename}' is compressed")
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"array format {version}")
        shape, _, dtype = read(f)
        size = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if dtype.hasobject or size != info.file_size - f.tell():
            raise ValueError(f"entry '{info.filename}' claims {size} bytes and holds {info.file_size - f.tell()}")


def _check_sizes(path: Path, data: bytes) -> None:
    """Every array's header against the bytes its entry holds, before anything is allocated: a
    checkpoint whose header claims terabytes is refused, not read."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                if info.file_size > len(data):
                    raise ValueError(f"entry '{info.filename}' is larger than the file")
                _check_entry(zf, info)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, TypeError) as e:
        raise RlhlsError(f"checkpoint '{path}' is not an rlhls checkpoint (empty, truncated or another file: "
                         f"{type(e).__name__}{': ' + str(e) if isinstance(e, ValueError) else ''})") from None


def checkpoint_steps(path) -> int | None:
    """The env steps a run's checkpoint holds, read from its small state member alone (not the
    arrays; its header checked first, as ``load_checkpoint`` checks every entry's); None when there is
    no readable checkpoint there."""
    path = Path(path)
    try:
        with os.fdopen(open_owned(path.parent, path.name), "rb") as fh, zipfile.ZipFile(fh) as zf:
            info = zf.getinfo("state.npy")
            _check_entry(zf, info)
            with zf.open(info) as f:
                head = json.loads(bytes(np.load(f, allow_pickle=False)).decode("utf-8"))
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            return None
        steps = head["state"]["env_steps"]
    except (OSError, ValueError, KeyError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile, RlhlsError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else None


def load_checkpoint(path):
    path = Path(path)
    try:
        with os.fdopen(open_owned(path.parent, path.name), "rb") as f:  # no link out of the run folder
            data = f.read()
    except OSError as e:
        raise os_error(path, e, "read") from None
    if data[:2] == b"\x80\x04" or data[:1] == b"\x80":
        raise RlhlsError(f"checkpoint '{path}' is a pickle (an older rlhls): pickles can run code and are not "
                         "loaded; start the run again")
    _check_sizes(path, data)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            head = json.loads(bytes(z["state"]).decode("utf-8"))
            arrays = {int(k[1:]): z[k] for k in z.files if k.startswith("a") and k[1:].isdigit()}
    except (ValueError, OSError, KeyError, EOFError, UnicodeDecodeError, zipfile.BadZipFile) as e:
        raise RlhlsError(f"checkpoint '{path}' is not an rlhls checkpoint (empty, truncated or another file: "
                         f"{type(e).__name__})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise RlhlsError(f"checkpoint '{path}': format {head.get('format') if isinstance(head, dict) else None!r}, "
                         f"expected {FORMAT!r}")
    try:
        return _decode(head["state"], arrays)
    except (KeyError, TypeError, IndexError) as e:
        raise RlhlsError(f"checkpoint '{path}' is damaged ({type(e).__name__}: {e})") from None
