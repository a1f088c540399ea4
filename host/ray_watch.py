"""The watchdog of a local Ray instance: ``python -m rlhls.host.ray_watch SESSION_DIR``.

A local Ray instance's processes are the driver's (gcs_server, raylet, ...) and the raylet's
(agents, workers); after a SIGKILL of the driver they take a minute to notice. The driver starts
this watchdog with its death signal (``procs.popen(on_death=SIGTERM)``, host/engine.py): it keeps
the set of the session's processes (every process whose command line names the session folder, and
their descendants; agents outlive the raylet, so a process once met stays in the set), and on
SIGTERM kills them all at once. A process is known by its pid and its creation time, so a pid the
system reused meanwhile is never killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

POLL_S = 0.5


def _session_processes(session: str, me: int) -> dict:
    """{pid: creation time} of the processes of the Ray session (by command line) and their descendants."""
    found = {}
    for p in psutil.process_iter(["cmdline", "create_time"]):
        if p.pid != me and session in " ".join(p.info["cmdline"] or ()):
            found[p.pid] = p.info["create_time"]
    for pid in list(found):
        try:
            for child in psutil.Process(pid).children(recursive=True):
                found.setdefault(child.pid, child.create_time())
        except psutil.Error:  # gone meanwhile
            pass
    return found


def main(session: str) -> None:
    me = os.getpid()
    seen: dict[int, float] = {}  # pid -> its creation time

    def look():
        for pid, created in _session_processes(session, me).items():
            seen.setdefault(pid, created)
            if seen[pid] != created:  # the pid was reused by another process of the session
                seen[pid] = created
        for pid, created in list(seen.items()):  # descendants of those met before, the session gone
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    seen.setdefault(child.pid, child.create_time())
            except psutil.Error:
                pass

    def stop(*_):
        look()
        for pid, created in seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created:
                    p.kill()
            except psutil.Error:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    look()
    print("watching", flush=True)  # from now on a SIGTERM kills the session
    while True:
        look()
        time.sleep(POLL_S)


if __name__ == "__main__":
    main(sys.argv[1])
