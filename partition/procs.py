"""Child processes that never outlive rlhls: the compilers, solvers and test programs it starts.

``die_with_parent`` is a ``preexec_fn`` (Linux): the child gets SIGKILL when the process that
started it dies, however it dies (a SIGKILL of ``rlhls build --csim`` no longer leaves g++ or CBC
running to their end). ``run`` is ``subprocess.run`` with it; an interrupt of the parent (Ctrl-C,
an exception) kills the child before it is raised on.
"""

from __future__ import annotations

import signal
import subprocess
import sys

__all__ = ["die_with_parent", "run", "popen"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when its parent dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _preexec():
    return die_with_parent if sys.platform.startswith("linux") else None


def popen(args, **kw) -> subprocess.Popen:
    """subprocess.Popen of a child that dies with this process."""
    return subprocess.Popen(args, preexec_fn=_preexec(), **kw)


def run(args, *, timeout=None, capture_output: bool = False, check: bool = False, input=None,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run (same arguments) of a child that dies with this process, and with an
    interrupt of it."""
    if capture_output:
        kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    with popen(args, **kw) as p:
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(p.args, timeout, output=out, stderr=err) from None
        except BaseException:
            p.kill()
            p.wait()
            raise
    done = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check:
        done.check_returncode()
    return done
