"""Writing files safely: the one module every layer writes through.

It lives in ``partition/`` because that is the lowest layer that writes files (``designs/``
knows nothing of files), so ``flow/``, ``host/`` and the command line can all import it.

* ``atomic_write_bytes`` / ``atomic_write_text`` / ``write_json``: a file is written to a temporary
  name beside its target, flushed, given the user's umask and renamed into place, so a killed
  process leaves the old file or the new one, never half of one.
* ``check_out`` refuses an output that is a file, or a non-empty folder rlhls did not write (no
  ``OWNER`` record in it); ``force`` is the only way over, and it still never deletes a file rlhls
  did not write.
* ``staged_folder`` builds a folder beside its target and publishes it: renamed into place when the
  target does not exist or holds only rlhls' own files, else merged file by file (files of the
  old record that the new output lacks are removed, anything else is left alone).
* ``timed`` adds a block's seconds to a dict of phase times.
* ``library_output(path)`` sends what libraries print (hls4ml, the ALE, solvers; C++ included)
  to a log file instead of the console.

Every OS error (a folder that cannot be created, permission denied, a full disk) becomes one
``RlhlsError`` line naming the path and the reason, after the temporary files are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from rlhls.designs.errors import RlhlsError

__all__ = ["OWNER", "library_output", "atomic_write_bytes", "atomic_write_text", "write_json", "check_out", "staged_folder",
           "owned_files", "os_error", "make_dirs", "timed"]

OWNER = ".rlhls.json"  # {"command": ..., "files": [...]}: which files of a folder rlhls wrote


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


def os_error(path, exc: OSError, verb: str = "write") -> RlhlsError:
    """One line naming the path and the OS's reason."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: a file-size limit
        reason = "file too large (file-size limit reached)"
    return RlhlsError(f"cannot {verb} '{path}': {reason}")


def make_dirs(path) -> list[Path]:
    """Create `path` and its missing parents; returns the folders created (outermost first)."""
    path = Path(path)
    created = []
    p = path
    while not p.exists():
        created.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise RlhlsError(f"cannot create folder '{path}': '{p}' is a file")
    for c in reversed(created):
        try:
            c.mkdir(mode=0o777)
        except FileExistsError:
            pass
        except OSError as e:
            _remove_dirs(created)
            raise os_error(c, e, "create folder") from None
    return list(reversed(created))


def _remove_dirs(created) -> None:
    for c in reversed(list(created)):
        with contextlib.suppress(OSError):
            Path(c).rmdir()


def atomic_write_bytes(path, data: bytes) -> None:
    path = Path(path)
    if path.is_dir():
        raise RlhlsError(f"cannot write '{path}': it is a folder")
    if not path.parent.is_dir():
        raise RlhlsError(f"cannot write '{path}': folder '{path.parent}' does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600: give the user's usual mode
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise os_error(path, e) from None
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path, obj, indent: int = 1) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, default=str) + "\n")


def owned_files(folder) -> list[str] | None:
    """The files rlhls recorded writing in `folder` (relative paths), or None when it has no record."""
    rec = Path(folder) / OWNER
    try:
        data = json.loads(rec.read_text())
        files = data["files"]
        if isinstance(files, list) and all(isinstance(f, str) for f in files):
            return files
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _probe_parent(out: Path, verb: str = "create folder") -> None:
    """One line now, not after a slow preparation, when `out` cannot be created: its nearest
    existing ancestor must be a folder we can write into (a probe folder made and removed)."""
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise RlhlsError(f"cannot {verb} '{out}': '{parent}' is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlhls-probe-", dir=parent))
    except OSError as e:
        raise os_error(out, e, verb) from None


def check_file_out(path, *, header: str, force: bool = False, what: str = "--out") -> None:
    """Refuse to replace an existing file unless it is one of ours (its first line starts with
    `header`) or `force`: a CSV rlhls wrote is rewritten, anything else of the user's is kept."""
    path = Path(path)
    if path.is_dir():
        raise RlhlsError(f"{what} '{path}' is a folder; expected a file path")
    if path.exists() and not force:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                first = f.readline()
        except OSError as e:
            raise os_error(path, e, "read") from None
        if not first.startswith(header):
            raise RlhlsError(f"{what} '{path}' exists and is not a file rlhls wrote (pass --force to replace it)")
    if not path.exists():
        _probe_parent(path, "write")


def check_out(out, *, force: bool = False, ours=None, what: str = "--out", hint: str = "") -> None:
    """Refuse `out` when it is a file, or a non-empty folder without rlhls' record (unless
    `force`). `ours(out) -> bool` recognises folders written before the record existed."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RlhlsError(f"{what} '{out}' is a file; expected a folder (nothing was written)")
    if not out.is_dir():
        _probe_parent(out)
        return
    if force:
        return
    try:
        empty = not any(out.iterdir())
    except OSError as e:
        raise os_error(out, e, "read folder") from None
    if empty or owned_files(out) is not None or (ours is not None and ours(out)):
        return
    raise RlhlsError(f"{what} '{out}' is not empty and was not written by rlhls "
                     f"({hint or 'pass --force to write into it; no file of yours is deleted'})")


def _all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


@contextlib.contextmanager
def staged_folder(out, *, command: str, ours=None):
    """``with staged_folder(out, command='build') as tmp:`` write into `tmp`; on success the folder
    is published at `out` (see the module docstring), on any error nothing is left behind."""
    out = Path(out).absolute()
    created = make_dirs(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        _remove_dirs(created)
        raise os_error(out.parent, e, "write into") from None
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)
        yield tmp
        new = [f for f in _all_files(tmp) if f != OWNER]
        write_json(tmp / OWNER, {"command": command, "files": new})
        _publish(tmp, out, new, ours)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise os_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise


def _publish(tmp: Path, out: Path, new: list[str], ours) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    old = owned_files(out)
    if old is None and ours is not None and ours(out):
        old = _all_files(out)  # an rlhls folder written before the record: every file is ours
    present = _all_files(out)
    if old is not None and set(present) <= set(old) | {OWNER}:
        # only our own files: swap the folders (the old one is moved aside first)
        aside = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
        os.rename(out, aside)
        os.rename(tmp, out)
        shutil.rmtree(aside, ignore_errors=True)
        return
    # the folder holds files rlhls did not write: replace ours one by one, leave the rest
    mine = set(old or ()) | {OWNER}
    for rel in new:
        dst = out / rel
        if (dst.exists() or dst.is_symlink()) and rel not in mine:
            raise RlhlsError(f"cannot write '{dst}': a file rlhls did not write is in the way (it is left as it is)")
    for rel in old or ():
        if rel not in new and rel != OWNER:
            with contextlib.suppress(OSError):
                (out / rel).unlink()
    for rel in new + [OWNER]:
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_dir() and not dst.is_symlink():
            raise RlhlsError(f"cannot write '{dst}': a folder of that name is in the way")
        os.replace(tmp / rel, dst)
    shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def timed(times: dict, phase: str):
    """Add the block's wall seconds to ``times[phase]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - t0


@contextlib.contextmanager
def library_output(path=None, *, fds=(1, 2)):
    """Redirect file descriptors `fds` (stdout, stderr: what native code writes too) and Python's
    sys.stdout / sys.stderr to the file `path` (appended; None: discarded) for the block."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    target = os.devnull if path is None else str(path)
    saved = {fd: os.dup(fd) for fd in fds}
    py = (sys.stdout, sys.stderr)
    try:
        with open(target, "a", encoding="utf-8", errors="replace") as log:
            for fd in fds:
                os.dup2(log.fileno(), fd)
            if 1 in fds:
                sys.stdout = log
            if 2 in fds:
                sys.stderr = log
            try:
                yield
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                sys.stdout, sys.stderr = py
                for fd, dup in saved.items():
                    os.dup2(dup, fd)
    finally:
        for dup in saved.values():
            os.close(dup)
