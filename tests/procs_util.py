"""Reading /proc in the tests that kill rlhls: a process's children, liveness, command line; and
stopping processes (SIGSTOP) so that a test looks at their files and kills them at one moment; the
CPU time a piece of work took with its child processes."""

import os
import resource
import signal
import time


def children(pid: int) -> list:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p))
    return out


def descendants(pid: int) -> list:
    kids = children(pid)
    return kids + [d for k in kids for d in descendants(k)]


def alive(pid: int) -> bool:
    """Running (a zombie is not)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return ""


def _threads_stopped(pid: int) -> bool:
    """Every thread of pid stopped (or pid gone): it can no longer write a file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for t in tasks:
        try:
            state = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def freeze(pids, timeout: float = 120.0) -> list:
    """SIGSTOP each of pids and wait until all their threads have stopped: what they wrote stays as
    it is while a test reads it, however loaded the machine. Returns the pids that were there."""
    got = []
    for p in pids:
        try:
            os.kill(p, signal.SIGSTOP)
            got.append(p)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while not all(_threads_stopped(p) for p in got):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {got} did not stop within {timeout} s of SIGSTOP")
        time.sleep(0.001)
    return got


def thaw(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children waited for (a solver it ran and killed): a
    loaded machine stretches the wall time a piece of work takes, not this."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
