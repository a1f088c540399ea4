"""Writing files safely: the one module every layer writes through.

It lives in ``partition/`` because that is the lowest layer that writes files (``designs/``
knows nothing of files), so ``flow/``, ``host/`` and the command line can all import it.

* ``atomic_write_bytes`` / ``atomic_write_text`` / ``write_json``: a file is written to a temporary
  name beside its target, flushed, given the user's umask and renamed into place, so a killed
  process leaves the old file or the new one, never half of one.
* ``check_out`` refuses an output that is a file, a non-empty folder rlhls did not write (no
  ``OWNER`` record in it), or a folder another command owns (a build folder as a run's ``--out``);
  ``force`` is the only way over, and it still never deletes a file rlhls did not write.
* The ``OWNER`` record is data, never an instruction: ``read_record`` refuses one whose file list
  names anything outside its folder (``..``, an absolute path, a path through a symbolic link), so
  nothing outside ``--out`` is ever touched.
* ``folder_lock`` gives one process at a time a run folder (``.<name>.lock`` beside it).
* ``scratch_dir`` / ``process_scratch``: temporary folders named ``rlhls-<pid>-...``; those of a
  process that was killed are removed by the next one made (``sweep_dead``).
* Names up to the file system's 255 bytes work as outputs: temp and lock names beside them are
  shortened (``side_name``); a longer name is one line (``check_name``).
* ``staged_folder`` builds a folder beside its target and publishes it: renamed into place when the
  target does not exist or holds only rlhls' own files, else merged file by file (files of the
  old record that the new output lacks are removed, anything else is left alone).

Every OS error (a folder that cannot be created, permission denied, a full disk) becomes one
``RlhlsError`` line naming the path and the reason, after the temporary files are removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import reprlib
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath

from .errors import RlhlsError

__all__ = ["OWNER", "atomic_write_bytes", "atomic_writer", "atomic_write_text", "write_json", "check_out",
           "staged_folder", "owned_files", "read_record", "side_name", "scratch_dir", "process_scratch",
           "sweep_dead", "pid_alive", "check_name", "folder_command", "folder_lock", "FolderLock", "os_error",
           "make_dirs", "parse_json", "read_json", "read_limited", "MAX_JSON_BYTES", "path_arg", "owned_file",
           "open_owned", "within", "check_file_out", "image_ours", "PNG_METADATA", "GIF_COMMENT"]

OWNER = ".rlhls.json"  # {"command": ..., "files": [...]}: which files of a folder rlhls wrote


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


NAME_MAX = 255  # bytes in one file name: Linux's file systems (ext4, xfs, btrfs, tmpfs)
_SIDE_ROOM = 40  # a temp name's extra: a dot, a tag, mkstemp's 8 random characters, a pid and a clock


def side_name(name: str, tag: str) -> str:
    """``.<name><tag>``: the start of a temp or lock file's name beside `name`, shortened (with a
    hash of the whole name) where `name` is near the file system's limit, so that every name the
    file system takes works as an output."""
    full = f".{name}{tag}"
    if len(full.encode()) + _SIDE_ROOM <= NAME_MAX:
        return full
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    keep = name.encode()[:NAME_MAX - _SIDE_ROOM - len(tag.encode()) - 15].decode("utf-8", "ignore")
    return f".{keep}~{digest}{tag}"


def check_name(path, what: str = "--out") -> None:
    """One line for a path with a component longer than a file name may be (before any OS call
    that would fail on it with a bare ENAMETOOLONG)."""
    for part in Path(path).parts:
        if len(part.encode()) > NAME_MAX:
            raise RlhlsError(f"{what} '{path}': the name '{part[:40]}...' is {len(part.encode())} bytes, longer "
                             f"than a file name may be ({NAME_MAX})")


def path_arg(value, call: str, name: str) -> Path:
    """`value`, a path a Python caller gave as ``call(name=value)``, as a Path; one line for what
    the OS cannot take as one (a number, bytes, None, a NUL character)."""
    shown = reprlib.repr(value)
    try:
        text = os.fspath(value)
    except Exception:  # noqa: BLE001 -- not a path, or a path-like object whose __fspath__ fails
        text = None
    if not isinstance(text, str):
        raise RlhlsError(f"{call}({name}={shown}): expected a path (a str or pathlib.Path)")
    if "\0" in text:
        raise RlhlsError(f"{call}({name}={shown}): a path cannot hold a NUL character")
    return Path(text)


def os_error(path, exc: OSError, verb: str = "write") -> RlhlsError:
    """One line naming the path and the OS's reason."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: a file-size limit
        reason = "file too large (file-size limit reached)"
    return RlhlsError(f"cannot {verb} '{path}': {reason}")


def make_dirs(path) -> list[Path]:
    """Create `path` and its missing parents; returns the folders created (outermost first)."""
    path = Path(path)
    check_name(path, "folder")
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
    with atomic_writer(path) as fh:
        fh.write(data)


@contextlib.contextmanager
def atomic_writer(path):
    """``with atomic_writer(path) as fh:`` write into a binary temp file beside `path`; on success it
    is flushed to disk and replaces `path`, on any error it goes and `path` stays as it was."""
    path = Path(path)
    if path.is_dir():
        raise RlhlsError(f"cannot write '{path}': it is a folder")
    if not path.parent.is_dir():
        raise RlhlsError(f"cannot write '{path}': folder '{path.parent}' does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=side_name(path.name, "."), suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            yield fh
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


MAX_JSON_BYTES = 64 << 20  # a record, config or plan of rlhls' own is kilobytes; a file past this is not one


def parse_json(text):
    """``json.loads`` for a file someone may have crafted: every way it can fail is a ValueError
    (nesting past Python's recursion limit raises RecursionError inside the parser; an integer of
    more digits than Python converts raises ValueError already)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_limited(path, max_bytes: int, holds: str = "a record of rlhls holds") -> bytes:
    """A regular file's bytes, at most `max_bytes`: OSError when it cannot be read, ValueError when
    it is not a regular file or is larger (the size is checked before the file is read; `holds`
    says in the message what such a file is)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in a crafted folder must not block the open
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        size = st.st_size
        if size > max_bytes:
            raise ValueError(f"{size} bytes, more than {holds} ({max_bytes})")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"more than {max_bytes} bytes")
    return data


def read_json(path, *, max_bytes: int = MAX_JSON_BYTES):
    """A JSON file's value; OSError when it cannot be read, ValueError when it is not JSON (or too
    large, too deeply nested, not UTF-8). The size is checked before the file is read."""
    data = read_limited(path, max_bytes)
    try:
        return parse_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def _parts(rel) -> tuple:
    pure = PurePosixPath(rel)
    if not isinstance(rel, str) or not rel or "\x00" in rel or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"not a path inside a folder: {rel!r}")
    return pure.parts


def _refuse(path, st, folder, write: bool, *, dir: bool = False) -> None:
    """RlhlsError when the entry `st` (an lstat) at `path` is not one rlhls may use in its folder."""
    nothing = "nothing was written" if write else "nothing outside it was read"
    if stat.S_ISLNK(st.st_mode):
        raise RlhlsError(f"'{path}' is a symbolic link: rlhls reads and writes only the files of '{folder}' itself, "
                         f"never through a link ({nothing}; remove the link or choose another folder)")
    if dir and not stat.S_ISDIR(st.st_mode):
        raise RlhlsError(f"'{path}' is not a folder: rlhls expected its own folder there ({nothing})")
    if not dir and not stat.S_ISREG(st.st_mode):
        raise RlhlsError(f"'{path}' is not a regular file: rlhls reads and writes only regular files of "
                         f"'{folder}' ({nothing})")
    if write and not dir and st.st_nlink > 1:
        raise RlhlsError(f"'{path}' has {st.st_nlink} hard links: it may be a file of yours elsewhere too, and rlhls "
                         f"writes in place only files of its own ({nothing}; replace it with a copy or choose "
                         "another folder)")


def owned_file(folder, rel, *, write: bool = False, dir: bool = False) -> Path:
    """``folder/rel`` when it is missing or a regular file (`dir`: a folder) of `folder` itself: no part of
    `rel` is a symbolic link, and one that rlhls will `write` in place (append, truncate) has no other hard
    link (which may be a user's file elsewhere). `folder` is the user's path: a link to it, or a parent
    through a link, is their choice and followed. RlhlsError naming the entry otherwise. A check up
    front; ``open_owned`` is the open that cannot be led out."""
    parts = _parts(rel)
    path = Path(folder)
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = os.lstat(path)
        except OSError:
            break  # missing (nothing to follow), or unreadable: the real open says why
        last = i == len(parts) - 1
        _refuse(path, st, folder, write, dir=dir or not last)
    return Path(folder, *parts)


_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY  # a folder opened to walk through (search right only)


def open_owned(folder, rel, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """``os.open`` of ``folder/rel`` with no symbolic link followed below `folder` (``O_NOFOLLOW`` on every
    part, each opened relative to the one before) and the file checked as ``owned_file`` checks it (opened
    to write: no other hard link) before anything is written; RlhlsError for an entry refused, OSError for
    an ordinary failure (FileNotFoundError when missing)."""
    parts = _parts(rel)
    write = bool(flags & (os.O_WRONLY | os.O_RDWR))
    dfd = os.open(folder, _DIR)
    path = Path(folder)
    try:
        for i, part in enumerate(parts):
            path = path / part
            last = i == len(parts) - 1
            try:
                fd = os.open(part, (flags | os.O_NONBLOCK if last else _DIR) | os.O_NOFOLLOW, mode, dir_fd=dfd)
                if not last and not stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise NotADirectoryError(part)
            except OSError:
                try:
                    st = os.stat(part, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    st = None
                if st is not None:
                    _refuse(path, st, folder, write, dir=not last)
                raise
            if last:
                try:
                    _refuse(path, os.fstat(fd), folder, write)
                    os.set_blocking(fd, True)  # O_NONBLOCK only kept a FIFO from blocking the open
                except BaseException:
                    os.close(fd)
                    raise
                return fd
            os.close(dfd)
            dfd = fd
        raise ValueError(f"not a path inside a folder: {rel!r}")  # no part at all ('.')
    finally:
        os.close(dfd)


def within(folder, path) -> Path:
    """`path` (a path under `folder`) when it stays inside `folder` once '..' and every symbolic link
    are resolved (a link to a file of the folder is fine); RlhlsError naming it otherwise. For files a
    read-only command looks at in a folder someone may have crafted: nothing outside it is read."""
    root = os.path.realpath(folder)
    real = os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise RlhlsError(f"'{path}' leads out of '{folder}' (to '{real}'): rlhls reads only the folder's own "
                         "files (nothing outside it was read)")
    return Path(path)


def _inside(folder: Path, rel) -> bool:
    """`rel` names a path inside `folder`: relative, no '..', and not through a link leading out."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        return False
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        return False
    root = os.path.realpath(folder)
    parent = os.path.realpath(os.path.join(folder, *pure.parts[:-1]))
    return parent == root or parent.startswith(root + os.sep)


def read_record(folder) -> dict | None:
    """`folder`'s ownership record ``{'command': str, 'files': [relative paths]}``, or None when it
    has none (or one that is not a record). A record naming a path outside the folder is refused:
    it is data someone may have crafted, and rlhls deletes and replaces the files it lists."""
    rec = Path(folder) / OWNER
    owned_file(folder, OWNER)  # a record that is a link to a file elsewhere is refused, not read
    try:
        data = read_json(rec)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return None
    files = data["files"]
    bad = next((f for f in files if not _inside(Path(folder), f)), None)
    if bad is not None or any(not isinstance(f, str) for f in files):
        raise RlhlsError(f"'{rec}' lists {bad!r}, which is not a file inside '{folder}': the record is refused "
                         "(nothing was written or deleted); remove it or choose another --out")
    command = data.get("command")
    return {"command": command if isinstance(command, str) else None, "files": list(files)}


def owned_files(folder) -> list[str] | None:
    """The files rlhls recorded writing in `folder` (relative paths), or None when it has no record."""
    rec = read_record(folder)
    return None if rec is None else rec["files"]


class FolderLock:
    """An exclusive lock on a folder (``.<name>.lock`` beside it) for this process; see
    ``folder_lock``. ``close()`` (or the end of a ``with`` block, or of the process) releases it."""

    _held: dict = {}  # lock path -> {fd, holders, created, thread, reenter}: the locks this process holds

    def __init__(self, path: str):
        self.path = path
        self.fd = self._held[path]["fd"]

    def close(self) -> None:
        with _GUARD:
            entry = self._held.get(self.path)
            if self.fd is None or entry is None:
                return
            self.fd = None
            entry["holders"] -= 1
            if entry["holders"] > 0:
                return
            del self._held[self.path]
        with contextlib.suppress(OSError):  # removed while held: a process that waits on it sees the change and reopens
            os.unlink(self.path)
        _remove_dirs(entry["created"])  # only the empty ones: a folder that never got written
        with contextlib.suppress(OSError):
            os.close(entry["fd"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the modules may be gone: the OS releases it
            self.close()


_GUARD = threading.RLock()  # FolderLock._held between this process's threads


def folder_lock(folder, *, wait: float = 0.0, reenter: bool = False) -> FolderLock:
    """One writer at a time writes `folder`: an exclusive lock on ``.<name>.lock`` beside it
    (removed again when released). A folder another process holds is waited for up to `wait`
    seconds, then refused in one line. One this process holds (an open ``rlhls.Flow``, another
    thread's training) is refused at once, except where both holders pass `reenter` and are the
    same thread: an experiment's try holds its run folder while the training it runs takes it again
    (nested holders)."""
    import fcntl

    folder = Path(folder).absolute()
    check_name(folder)
    path = str(folder.parent / (side_name(folder.name, "") + ".lock"))
    held = FolderLock._held
    deadline = time.monotonic() + wait
    created = None
    while True:
        with _GUARD:  # a thread's look at what this process holds and its taking of the lock are one step
            entry = held.get(path)
            if entry is not None:
                if reenter and entry["reenter"] and entry["thread"] == threading.get_ident():
                    entry["holders"] += 1
                    return FolderLock(path)
                raise RlhlsError(f"'{folder}' is being written by this process already (an open rlhls.Flow or a "
                                 "training into it): close that one first, or choose another --out")
            if created is None:
                _probe_parent(folder)
                created = make_dirs(folder.parent)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
            except OSError as e:
                _remove_dirs(created)
                raise os_error(path, e, "create lock") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = ""
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        holder = f" (pid {int(os.pread(fd, 32, 0).split()[0])})"
                    os.close(fd)
                    _remove_dirs(created)
                    more = f" after {wait:g} s" if wait else ""
                    raise RlhlsError(f"'{folder}' is being written by another rlhls process{holder}{more}: wait for "
                                     "it to finish, or choose another --out") from None
                os.close(fd)
            else:
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(path))
                except FileNotFoundError:
                    same = False
                if same:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                    held[path] = {"fd": fd, "holders": 1, "created": created, "thread": threading.get_ident(),
                                  "reenter": reenter}
                    return FolderLock(path)
                os.close(fd)  # its holder removed it on release: take the path's current file
                continue
        time.sleep(0.2)


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


def check_file_out(path, *, header: str | None = None, ours=None, force: bool = False, what: str = "--out") -> None:
    """Refuse to replace an existing file unless it is one of ours or `force`: a text file whose first
    line starts with `header` (a CSV rlhls wrote is rewritten), or one ``ours(path)`` recognises (an
    image with rlhls' mark: ``image_ours``); with neither, every existing file is refused. Anything
    else of the user's is kept. Checked before the slow work that makes the file."""
    path = Path(path)
    check_name(path, what)
    if path.is_dir():
        raise RlhlsError(f"{what} '{path}' is a folder; expected a file path")
    if (path.exists() or path.is_symlink()) and not force:
        if header is None and ours is None:
            raise RlhlsError(f"{what} '{path}' exists: rlhls does not replace a file it cannot tell it wrote "
                             "(pass --force to replace it)")
        if not path.exists():
            mine = False  # a link to nothing: the user's all the same
        elif ours is not None:
            mine = ours(path)
        else:
            assert header is not None  # neither given was refused above
            try:  # through no link, and no FIFO that would block the open
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    mine = stat.S_ISREG(os.fstat(fd).st_mode) and f.readline(4096).decode(
                        "utf-8", "replace").startswith(header)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    mine = False  # a link: the user's
                else:
                    raise os_error(path, e, "read") from None
        if not mine:
            raise RlhlsError(f"{what} '{path}' exists and is not a file rlhls wrote (pass --force to replace it)")
    if not path.exists():
        _probe_parent(path, "write")


PNG_METADATA = {"Software": "rlhls"}  # savefig(metadata=...): the mark of a PNG rlhls wrote as a file of its own
GIF_COMMENT = b"rlhls"  # Pillow's GIF comment: the mark of a GIF rlhls wrote


def image_ours(path) -> bool:
    """Whether `path` is a PNG or GIF with rlhls' mark in its header (a PNG ``tEXt`` chunk
    ``Software`` = ``rlhls...`` before its image data, a GIF comment ``rlhls...`` before its first
    image): an image rlhls wrote, which it may replace. Anything else (unreadable included) is not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            d = f.read(1 << 16)
    except OSError:
        return False
    mark = PNG_METADATA["Software"].encode()
    try:
        if d[:8] == b"\x89PNG\r\n\x1a\n":
            i = 8
            while i + 8 <= len(d):
                n, kind = int.from_bytes(d[i:i + 4], "big"), d[i + 4:i + 8]
                if kind in (b"IDAT", b"IEND"):
                    return False
                if kind == b"tEXt":
                    key, _, value = d[i + 8:i + 8 + n].partition(b"\0")
                    if key == b"Software" and value.startswith(mark):
                        return True
                i += 12 + n
        elif d[:6] in (b"GIF87a", b"GIF89a"):
            packed = d[10]
            i = 13 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0)  # past the global colour table
            while d[i] == 0x21:  # extensions before the first image
                label, i, data = d[i + 1], i + 2, b""
                while d[i]:
                    data += d[i + 1:i + 1 + d[i]]
                    i += 1 + d[i]
                i += 1
                if label == 0xFE and data.startswith(GIF_COMMENT):
                    return True
    except IndexError:
        pass
    return False


def folder_command(folder, ours=None, command: str | None = None) -> str | None:
    """Which rlhls command owns `folder`: its record's, else `command` where ``ours(folder)``
    recognises a folder written before the record existed; None for a folder that is not ours."""
    rec = read_record(folder)
    if rec is not None:
        return rec["command"] or command
    if ours is not None and ours(Path(folder)):
        return command
    return None


def check_out(out, *, command: str, force: bool = False, ours=None, what: str = "--out", hint: str = "") -> None:
    """Refuse `out` when it is a file, a non-empty folder without rlhls' record, or a folder of
    another command than `command` (unless `force`). `ours(out) -> bool` recognises this
    command's folders written before the record existed."""
    out = Path(out)
    check_name(out, what)
    if out.exists() and not out.is_dir():
        raise RlhlsError(f"{what} '{out}' is a file; expected a folder (nothing was written)")
    if not out.is_dir():
        _probe_parent(out)
        return
    try:
        empty = not any(out.iterdir())
    except OSError as e:
        raise os_error(out, e, "read folder") from None
    if empty:
        return
    owner = folder_command(out, ours, command)  # a hostile record is refused even with force
    if owner == command:
        return
    if force:
        _no_linked_folders(out)  # a merge would write through it: refused now, before the work
        return
    if owner is not None:
        hint = hint or "choose another --out, or pass --force: only files rlhls wrote there are replaced"
        raise RlhlsError(f"{what} '{out}' is a folder of 'rlhls {owner}', not of 'rlhls {command}' ({hint})")
    raise RlhlsError(f"{what} '{out}' is not empty and was not written by rlhls "
                     f"({hint or 'pass --force to write into it; no file of yours is deleted'})")


def _no_linked_folders(out: Path) -> None:
    """One line when a folder rlhls may write into holds a symbolic link to a folder."""
    for root, dirs, _ in os.walk(out):  # os.walk follows no link
        for d in dirs:
            p = Path(root) / d
            if p.is_symlink():
                raise RlhlsError(f"'{p}' is a symbolic link: rlhls reads and writes only the files of '{out}' itself, "
                                 "never through a link (nothing was written; remove the link or choose another folder)")


def _all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


@contextlib.contextmanager
def staged_folder(out, *, command: str, ours=None):
    """``with staged_folder(out, command='build') as tmp:`` write into `tmp`; on success the folder
    is published at `out` (see the module docstring), on any error nothing is left behind."""
    out = Path(out).absolute()
    created = make_dirs(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=side_name(out.name, ".tmp-"), dir=out.parent))
    except OSError as e:
        _remove_dirs(created)
        raise os_error(out.parent, e, "write into") from None
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)
        yield tmp
        new = [f for f in _all_files(tmp) if f != OWNER]
        write_json(tmp / OWNER, {"command": command, "files": new})
        _publish(tmp, out, new, ours, command)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise os_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise


def _publish(tmp: Path, out: Path, new: list[str], ours, command: str) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    rec = read_record(out)  # checked: every entry inside `out`
    # another command's files (a --force over its folder) are left as the user's
    old = rec["files"] if rec is not None and rec["command"] in (None, command) else None
    if rec is None and ours is not None and ours(out):
        old = _all_files(out)  # an rlhls folder written before the record: every file is ours
    present = _all_files(out)
    if old is not None and set(present) <= set(old) | {OWNER}:
        # only our own files: swap the folders (the old one is moved aside first)
        aside = out.parent / (side_name(out.name, ".old-") + f"{os.getpid()}-{time.monotonic_ns()}")
        os.rename(out, aside)
        os.rename(tmp, out)
        shutil.rmtree(aside, ignore_errors=True)
        return
    # the folder holds files rlhls did not write: replace ours one by one, leave the rest
    mine = set(old or ()) | {OWNER}
    for rel in new:
        dst = out / rel
        if os.path.dirname(rel):  # a folder of the output that is a link would lead the file out
            owned_file(out, os.path.dirname(rel), dir=True)
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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def sweep_dead(folder, pattern: str) -> None:
    """Remove the files and folders matching `pattern` (a regex whose group 1 is the pid of the
    process that made them) in `folder` whose process is gone: what a killed process left."""
    import re

    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return
    for p in entries:
        m = re.fullmatch(pattern, p.name)
        if m and not pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _new_scratch(tag: str) -> Path:
    import re

    base = tempfile.gettempdir()
    sweep_dead(base, r"rlhls-(\d+)-.*")
    tag = re.sub(r"[^A-Za-z0-9_.]+", "_", tag)[:60]
    return Path(tempfile.mkdtemp(prefix=f"rlhls-{os.getpid()}-{tag}-", dir=base))


@contextlib.contextmanager
def scratch_dir(tag: str):
    """A temporary folder for one step's own files (a compile, a solver's model), removed after the
    block; those a killed process left behind (``rlhls-<pid>-...`` of a pid that is gone) are
    removed when the next one is made."""
    d = _new_scratch(tag)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


_PROCESS_SCRATCH: dict = {}  # pid -> its folder (a forked child makes its own)


def process_scratch() -> Path:
    """One scratch folder for this process's lifetime (``rlhls-<pid>-process-...``; a solver's model
    files): removed when the process exits, swept by the next process if this one is killed."""
    pid = os.getpid()
    d = _PROCESS_SCRATCH.get(pid)
    if d is None or not d.is_dir():
        import atexit

        d = _PROCESS_SCRATCH[pid] = _new_scratch("process")

        def remove(folder: Path = d) -> None:
            if os.getpid() == pid:  # not from a forked child
                shutil.rmtree(folder, ignore_errors=True)

        atexit.register(remove)
    return d
