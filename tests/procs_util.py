"""Reading /proc in the tests that kill rlhls: a process's children, liveness, command line."""

import os


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
