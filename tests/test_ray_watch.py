"""host/ray_watch.py: on SIGTERM the watchdog kills every process of the session it watches (by
command line, and their children, also those whose parent died first), and nothing else."""

import signal
import subprocess
import sys
import time

import psutil


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def test_the_watchdog_kills_the_sessions_processes_and_only_them(tmp_path):
    session = str(tmp_path / "session_2026-11-29_00-00-00_123456_42")
    # a "raylet" naming the session, which starts a "worker" that does not name it
    raylet = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
                               "time.sleep(300)", session])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    watch = subprocess.Popen([sys.executable, "-m", "rlhls.host.ray_watch", session], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the worker started, and the watchdog had a look
            kids = psutil.Process(raylet.pid).children()
            if kids:
                break
            time.sleep(0.1)
        worker = kids[0]
        assert watch.stdout.readline() == "watching\n"  # its SIGTERM handler is in place
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(timeout=60) == 0
        raylet.wait(timeout=60)
        assert worker.wait(timeout=60) is not None or not worker.is_running()
        assert _alive(bystander)
    finally:
        for p in (raylet, bystander, watch):
            if _alive(p):
                p.kill()
                p.wait()
