"""The compile cache (``toolchain.cache_location()``): what it holds, and pruning it (``rlhls cache``).

Its top folders are kinds (``csim``, ``csim-lib``, ``native``, ``pch``, ``aie``, ``aie-check``, ...). In
a kind, an **entry** is what one build made: the files and folders whose names carry the same content
hash (``src-<kernel>-<hash>/`` and ``lib<kernel>-<hash>.so`` with its ``.sha256`` stamp and ``.log``),
else one name up to its first dot. An entry's **last use** is the newest modification time in it
(``compile_cpp`` touches an output's stamp each time it takes it from the cache).

Pruning removes whole entries, the least recently used first, and is safe beside a build that runs:

* **nothing outside the cache**: only the children of the cache's kind folders are removed, and only in
  a folder rlhls made its cache (its ``CACHEDIR.TAG``, or the default location); a symbolic link is
  never followed (a kind folder that is one is left alone; a link entry is removed as a link), and a
  cache folder that is itself a link is refused;
* **whole entries, atomically**: under the entry's lock its parts are renamed into a trash folder of
  the cache (``.trash-<pid>-...``), then the trash is deleted; a build looks an entry up under the same
  lock, so it finds the entry whole or gone (and builds it again), never half of it;
* **what a build uses stays**: an entry whose lock a process holds, or used in the last ``IN_USE_S``
  seconds (a build may be about to load what it just took from the cache). The empty lock files of a
  kind folder stay too: a build waiting on one must find the same file.

A prune that was killed leaves its trash folder; the next prune removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import RlhlsError
from .fileio import sweep_dead

__all__ = ["Entry", "entries", "summary", "prune", "TAG_NAME", "IN_USE_S"]

TAG_NAME = "CACHEDIR.TAG"  # https://bford.info/cachedir/: backup tools skip the folder; rlhls knows it made it
TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
TAG_TEXT = (f"{TAG_SIGNATURE}\n# This file is a cache directory tag created by rlhls (its compile cache).\n"
            "# For information about cache directory tags, see https://bford.info/cachedir/\n")
IN_USE_S = 60.0
_TRASH = re.compile(r"\.trash-(\d+)-.*")
_HASH = re.compile(r"(?:^|[-_.])([0-9a-f]{12,64})(?=$|[-_.])")
_LOCK = re.compile(r"(.*\.)?lock")


@dataclass
class Entry:
    kind: str
    key: str
    parts: list[str] = field(default_factory=list)  # names in the kind folder (lock files of the folder aside)
    locks: list[Path] = field(default_factory=list)  # the lock files a build takes for it
    size: int = 0
    last_used: float = 0.0


def entry_key(name: str) -> str:
    m = _HASH.search(name)
    return m.group(1) if m else name.split(".", 1)[0]


def _walk(path: Path) -> tuple[int, float, list[Path]]:
    """(bytes, newest mtime, lock files) of a file or a folder's tree; links are counted as links."""
    st = os.lstat(path)
    size, newest, locks = 0, st.st_mtime, []
    if stat.S_ISDIR(st.st_mode):
        with os.scandir(path) as it:
            for e in it:
                s, m, lk = _walk(Path(e.path))
                size, newest = size + s, max(newest, m)
                locks += lk
                if e.is_file(follow_symlinks=False) and _LOCK.fullmatch(e.name):
                    locks.append(Path(e.path))
    elif stat.S_ISREG(st.st_mode):
        size = st.st_size
    else:
        size = 0
    return size, newest, locks


def _kinds(root: Path) -> list[str]:
    out = []
    with os.scandir(root) as it:
        for e in it:
            if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                out.append(e.name)
    return sorted(out)


def entries(root) -> list[Entry]:
    """Every entry of the cache at `root` (none where it does not exist)."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return []
    found: dict[tuple[str, str], Entry] = {}
    for kind in _kinds(root):
        folder = root / kind
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        lock_files = [n for n in names if n.endswith(".lock")]
        for name in names:
            e = found.setdefault((kind, entry_key(name)), Entry(kind, entry_key(name)))
            path = folder / name
            try:
                size, newest, locks = _walk(path)
            except OSError:  # gone meanwhile (a build replaced it)
                continue
            e.last_used = max(e.last_used, newest)
            if name in lock_files:
                e.locks.append(path)
                continue
            e.parts.append(name)
            e.size += size
            e.locks += locks
    return [e for e in found.values() if e.parts]  # a lock file alone is no entry


def summary(root) -> dict:
    """{location, exists, size_bytes, entries, kinds: {kind: {size_bytes, entries, oldest, newest}}}."""
    root = Path(root)
    es = entries(root)
    kinds: dict[str, dict] = {}
    for e in es:
        k = kinds.setdefault(e.kind, {"size_bytes": 0, "entries": 0, "oldest_use": e.last_used,
                                      "newest_use": e.last_used})
        k["size_bytes"] += e.size
        k["entries"] += 1
        k["oldest_use"] = min(k["oldest_use"], e.last_used)
        k["newest_use"] = max(k["newest_use"], e.last_used)
    return {"location": str(root), "exists": root.is_dir(), "link": root.is_symlink(),
            "size_bytes": sum(e.size for e in es), "entries": len(es), "kinds": kinds}


def _check_root(root: Path, default: bool) -> None:
    if root.is_symlink():
        raise RlhlsError(f"the compile cache '{root}' is a symbolic link: rlhls prunes no folder through a link "
                         "(set RLHLS_CACHE_DIR to the folder it points to)")
    if not default and not _tagged(root):
        raise RlhlsError(f"'{root}' has no {TAG_NAME} of rlhls: it is not a compile cache rlhls made, and nothing "
                         "in it is removed (a build with this RLHLS_CACHE_DIR writes the tag)")


def _tagged(root: Path) -> bool:
    try:
        with open(root / TAG_NAME, "rb") as f:  # a link there is read as what it is: no rlhls tag
            if os.fstat(f.fileno()).st_nlink != 1 or (root / TAG_NAME).is_symlink():
                return False
            return f.read(len(TAG_SIGNATURE)).decode(errors="replace") == TAG_SIGNATURE
    except OSError:
        return False


@contextlib.contextmanager
def _locked(paths):
    """Holds every lock file of `paths` (non-blocking); yields False where a process holds one."""
    fds = []
    try:
        for p in paths:
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue  # gone, or a link: not a lock a build takes
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
        yield True
    finally:
        for fd in fds:
            os.close(fd)  # closing releases the lock


def prune(root, *, older_than_days: float | None = None, max_bytes: int | None = None, clear: bool = False,
          default: bool = False, now: float | None = None) -> dict:
    """Remove entries of the cache at `root`: every one (`clear`), those not used for `older_than_days`,
    then the least recently used until the cache holds at most `max_bytes` (module docstring: what
    stays). `default`: `root` is rlhls's default location (no tag needed). Returns what was removed and
    what stays."""
    root = Path(root)
    if not root.exists():
        return {"location": str(root), "removed": 0, "removed_bytes": 0, "kept": 0, "kept_bytes": 0, "in_use": 0}
    _check_root(root, default)
    sweep_dead(root, _TRASH.pattern)  # what a killed prune left
    now = time.time() if now is None else now
    es = sorted(entries(root), key=lambda e: e.last_used)
    chosen: list[Entry] = []
    if clear:
        chosen = list(es)
    else:
        if older_than_days is not None:
            chosen = [e for e in es if e.last_used < now - older_than_days * 86400.0]
        if max_bytes is not None:
            left = sum(e.size for e in es) - sum(e.size for e in chosen)
            for e in es:
                if left <= max_bytes:
                    break
                if e not in chosen:
                    chosen.append(e)
                    left -= e.size
    removed, in_use = [], 0
    trash: Path | None = None
    try:
        for e in chosen:
            if e.last_used > now - IN_USE_S:
                in_use += 1
                continue
            with _locked(e.locks) as free:
                if not free:
                    in_use += 1
                    continue
                if trash is None:
                    trash = root / f".trash-{os.getpid()}-{secrets.token_hex(4)}"
                    trash.mkdir()
                if _move(root, e, trash):
                    removed.append(e)
    finally:
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)  # never follows a link (it removes the link)
    kept = [e for e in es if e not in removed]
    return {"location": str(root), "removed": len(removed), "removed_bytes": sum(e.size for e in removed),
            "kept": len(kept), "kept_bytes": sum(e.size for e in kept), "in_use": in_use}


def _move(root: Path, e: Entry, trash: Path) -> bool:
    """The entry's parts renamed into the trash (the same file system); False when one could not be
    (what moved stays moved: the entry is then incomplete, which a build rebuilds)."""
    dest = trash / e.kind
    dest.mkdir(exist_ok=True)
    ok = True
    for name in e.parts:
        src = root / e.kind / name
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(src)
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                try:
                    os.rename(src, dest / name)
                except OSError:
                    ok = False
    return ok


def write_tag(root: Path) -> None:
    """The cache folder's CACHEDIR.TAG (once; a folder that cannot be written goes without)."""
    from .fileio import atomic_write_text

    if not (root / TAG_NAME).exists():
        with contextlib.suppress(OSError, RlhlsError):
            atomic_write_text(root / TAG_NAME, TAG_TEXT)
