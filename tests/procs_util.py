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


def _running_threads(pid: int) -> list:
    """(thread, state, wait channel) of each thread of pid not stopped (none when pid is gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for t in tasks:
        try:
            state = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
            wchan = open(f"/proc/{pid}/task/{t}/wchan").read()
        except OSError:
            continue
        if state not in ("T", "t", "Z", "X"):
            out.append((int(t), state, wchan))
    return out


def parent(pid: int) -> int:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def freeze(pids, timeout: float = 10.0):
    """SIGSTOP each of pids and wait until all their threads have stopped: what they wrote stays as
    it is while a test reads it, however loaded the machine. Returns the pids stopped, or None (all
    of them continued again) when one has not stopped within `timeout`: the caller looks again later.
    A child not yet exec'd (its parent's command line, the parent among pids) is left running: a
    parent in vfork waits for its exec uninterruptibly and would not stop."""
    pids = list(pids)
    got = []
    for p in pids:
        if parent(p) in pids and cmdline(p) == cmdline(parent(p)):
            continue
        try:
            os.kill(p, signal.SIGSTOP)
            got.append(p)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(_running_threads(p) for p in got):
        if time.monotonic() > deadline:
            thaw(got)
            return None
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
