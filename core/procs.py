"""Child processes that never outlive rlhls: the compilers, solvers and test programs it starts.

``die_with_parent`` is a ``preexec_fn`` (Linux): the child gets SIGKILL when the process that
started it dies, however it dies (a SIGKILL of ``rlhls partition`` no longer leaves CBC running to
its time limit). A child that starts children of its own (g++: cc1plus, as, ld) runs with
``tree=True``: in a process group of its own under a small ``sh`` that the parent's death
signals and that then kills the whole group. ``run`` is ``subprocess.run`` with either; an
interrupt of the parent (Ctrl-C, an exception) kills the child (its group) before it is raised on;
``halted()`` does the same for the children other threads wait on (a pool of compiles).

``library_output(path)`` sends what libraries and native code print (hls4ml, the ALE, the solvers)
to a log file instead of the console, for a block; ``inform`` is how the library speaks to the
console meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

__all__ = ["die_with_parent", "run", "popen", "halted", "library_output", "inform"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when its parent dies."""
    pre = _preexec()
    if pre is not None:
        pre()


def _preexec(sig=signal.SIGKILL):
    if not sys.platform.startswith("linux"):
        return None

    def pre():
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
        except (OSError, AttributeError):
            pass
    return pre


# the group's leader: on SIGTERM (the parent's death) it kills its whole process group
_TREE = 'trap "kill -KILL 0" TERM; "$@" & wait $!'


def popen(args, *, tree: bool = False, on_death=signal.SIGKILL, **kw) -> subprocess.Popen:
    """subprocess.Popen of a child that dies with this process (``tree``: with its own children;
    ``on_death``: the signal it gets then, for a child that cleans up after its parent)."""
    if tree and sys.platform.startswith("linux"):
        return subprocess.Popen(["/bin/sh", "-c", _TREE, "sh", *args], preexec_fn=_preexec(signal.SIGTERM),
                                start_new_session=True, **kw)
    return subprocess.Popen(args, preexec_fn=_preexec(on_death), **kw)


def _kill(p: subprocess.Popen, tree: bool) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL) if tree else p.kill()
    except (ProcessLookupError, PermissionError):
        pass


_RUNNING: dict = {}  # id -> (Popen, tree): the children ``run`` waits on, in every thread
_HALT = threading.Lock()  # held by ``halted``; taken to start a child
_HALTED = [False]


@contextlib.contextmanager
def halted():
    """For the block, every child ``run`` waits on (in any thread) is killed and none starts
    (KeyboardInterrupt in the thread that asks): an interrupted main thread waits for its worker
    threads' compiles to end now, not when they finish."""
    with _HALT:
        _HALTED[0] = True
        for p, tree in list(_RUNNING.values()):
            _kill(p, tree)
    try:
        yield
    finally:
        _HALTED[0] = False


def run(args, *, timeout=None, capture_output: bool = False, check: bool = False, input=None, tree: bool = False,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run (same arguments) of a child that dies with this process, and with an
    interrupt of it (``tree``: its own children too)."""
    if capture_output:
        kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    tree = tree and sys.platform.startswith("linux")
    with _HALT:
        if _HALTED[0]:
            raise KeyboardInterrupt
        p = popen(args, tree=tree, **kw)
        _RUNNING[id(p)] = (p, tree)
    with p:
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(p, tree)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err) from None
        except BaseException:
            _kill(p, tree)
            p.wait()
            raise
        finally:
            _RUNNING.pop(id(p), None)
    done = subprocess.CompletedProcess(args, p.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def inform(log, msg: str) -> None:
    """An INFO message of the library on logger `log` (named under ``rlhls``): through logging where
    it is set up (the CLI's --quiet / --verbose, a user's ``logging.basicConfig``), else on stderr
    as a script expects."""
    if log.hasHandlers():
        log.info(msg)
    elif not log.disabled and sys.stderr is not None:
        print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def library_output(path: str | os.PathLike[str] | None = None, *, fds: tuple[int, ...] = (1, 2)) -> Iterator[None]:
    """Redirect file descriptors `fds` (stdout, stderr: what native code writes too) and Python's
    sys.stdout / sys.stderr to the file `path` (appended; None: discarded) for the block."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    target = os.devnull if path is None else str(path)
    if target == os.devnull:
        log_fd = os.open(target, os.O_WRONLY)
    else:  # a log in a folder of ours: appended, never through a link (fileio.open_owned)
        from .fileio import open_owned

        log_fd = open_owned(os.path.dirname(target) or ".", os.path.basename(target),
                            os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    log = open(log_fd, "a", encoding="utf-8", errors="replace")
    saved = {fd: os.dup(fd) for fd in fds}
    py = (sys.stdout, sys.stderr)
    try:
        with log:
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
