"""The experiment engine: the runs of an ``rlhls experiment`` as Ray tasks (host/experiments/__init__.py
re-exports it).

    outcomes = run_all([Run("exp1-s0", folder, fn=train_one, kwargs={...}, steps=4096), ...],
                       jobs=None, address=None, retries=2, say=print, progress=True, out=experiment_folder)
    results = map_runs(fn, items, jobs=2)          # ProcessPoolExecutor.map's shape: results in order

A ``Run`` is an id, its run folder (or None) and a picklable function with keyword arguments, called
in the worker's process (a training run: host/experiments ``train_run``, in process through
``host.train.train_design``, resuming its folder's checkpoint as the try starts).
Each run is one Ray task (one CPU; Ray reuses its worker processes, as a process pool does) on a
local Ray instance
started for the command with this machine's cores (quiet, no dashboard web UI, shut down at the end), or
on the cluster at ``address`` (``"auto"``: the one ``ray start --head`` started on this node). A Ray
session a caller already holds (``ray.is_initialized()``) is used as it is and left running.
``jobs`` caps the runs in flight (default: the cluster's CPUs). With ``jobs == 1`` and no address
the runs execute in this process one after another (no Ray: tiny runs cost no start-up).

Failures. A run that raises is recorded ``failed`` with its error in one line and the others go
on. A worker that dies (killed, out of memory, a lost node) is Ray's system failure: the task is
retried up to ``retries`` times, and each try resumes from the run's checkpoint (a run function
resumes when its folder holds one); past that the run is recorded ``failed``
("worker died"). A run is ``skipped`` without a task when it is finished already: ``finished()``
where given, else its folder's metrics reached ``steps`` with a checkpoint beside them. So running
an interrupted experiment again keeps the finished runs and resumes the partial ones. A try first
takes its run folder's lock (``.<run>.lock`` beside the folder): a try of the same run that outlives
a killed driver or worker ends before the next one reads the folder.

Progress (stderr, tqdm): runs done / running / failed and the environment steps per second of the
run folders (their metrics.csv). ``out``: ``<out>/runs.csv`` lists every run's status, steps,
seconds, the steps its last try resumed at (0: from the start) and error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, folder_lock

from .checkpoint import checkpoint_steps
from .figures import csv_text
from .runfolder import CHECKPOINT, finished_steps

__all__ = ["Run", "Outcome", "run_all", "map_runs", "ray_session", "failed_lines", "RUNS_CSV"]

RUNS_CSV = "runs.csv"
TICK_S = 1.0  # progress refresh and the driver's wait granularity


@dataclass
class Run:
    """One run of an experiment: `fn(**kwargs)`, writing `folder`."""

    id: str
    folder: str | Path | None = None
    fn: Callable | None = None
    kwargs: dict = field(default_factory=dict)
    steps: int | None = None        # environment steps the run trains (finished check, steps/s)
    finished: Callable | None = None  # () -> bool on the driver; overrides the steps check

    def __post_init__(self):
        if not callable(self.fn):
            raise ValueError(f"run {self.id!r}: fn must be a function")

    def is_finished(self) -> bool:
        if self.finished is not None:
            return bool(self.finished())
        if self.folder is None or not self.steps:
            return False
        return (Path(self.folder) / CHECKPOINT).is_file() and finished_steps(Path(self.folder)) >= self.steps


@dataclass
class Outcome:
    id: str
    status: str                     # done | skipped | failed
    result: object = None
    error: str = ""
    seconds: float = 0.0
    start_steps: int = 0            # env steps the folder held when the (last) try began: > 0 = resumed
    steps: int = 0                  # env steps the folder holds at the end

    @property
    def ok(self) -> bool:
        return self.status != "failed"


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:  # as the command line says it: the reason and the file
        return f"{type(e).__name__}: {e.strerror}{f' {str(e.filename)!r}' if e.filename else ''}"[:400]
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else '(no message)'}"[:400]


def _folder_steps(folder) -> int:
    if folder is None:
        return 0
    return finished_steps(Path(folder))


def _resume_steps(folder) -> int:
    """The env steps a try goes on from: its folder's checkpoint (a run folder without one, e.g.
    copied without it, trains from the start whatever its metrics.csv says)."""
    if folder is None:
        return 0
    return checkpoint_steps(Path(folder) / CHECKPOINT) or 0


# how long a try waits for an earlier try of the same run that still holds its folder
LOCK_WAIT_S = 300.0


def execute(run: Run) -> dict:
    """One try of a run, in the process that calls it (a Ray worker, or the driver's serial path):
    {'result' | 'error', 'seconds', 'start_steps', 'pid'}."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"start_steps": 0, "pid": os.getpid()}
    lock = None
    try:
        # first: an earlier try (an orphan of a killed driver or worker, on its way out) may still be
        # writing the folder (reenter: the training the try runs in this thread takes it again)
        lock = None if run.folder is None else folder_lock(run.folder, wait=LOCK_WAIT_S, reenter=True)
        out["start_steps"] = _resume_steps(run.folder)
        assert run.fn is not None  # a Run without one is refused when made
        out["result"] = run.fn(**run.kwargs)
    except Exception as e:  # the run failed (its own error): recorded, the others go on
        out["error"] = _one_line(e)
    finally:
        if lock is not None:
            lock.close()
    out["seconds"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------- Ray

def check_reachable(address: str) -> None:
    """A host:port that does not answer fails here in seconds (ray.init waits on it for minutes)."""
    a = address.split("://", 1)[-1]
    if address == "auto" or ":" not in a:
        return
    host, _, port = a.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5.0) as sock:
            # Ray's GCS is a gRPC server: it answers HTTP/2's client preface with a SETTINGS frame
            sock.settimeout(5.0)
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
            head = b""
            with contextlib.suppress(OSError):
                while len(head) < 9:
                    chunk = sock.recv(9 - len(head))
                    if not chunk:
                        break
                    head += chunk
    except (OSError, ValueError) as e:
        raise RlhlsError(f"--address {address}: no Ray cluster answers there ({type(e).__name__}: {e}); "
                         "start one with 'ray start --head' or use --address auto on its head node") from None
    if len(head) < 9 or head[3] != 4:
        raise RlhlsError(f"--address {address}: something answers there, but not a Ray cluster (no gRPC server); "
                         "give the head node's GCS address (host:6379 by default)")


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None):
    """A Ray session for the block: the caller's own if one is up, else a local instance with this
    machine's cores (or `num_cpus`) or the cluster at `address`, shut down afterwards."""
    try:
        import ray
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise RlhlsError(f"Ray is not installed ({e}); pip install -e . installs it") from None
    if address:
        check_reachable(address)
    if ray.is_initialized():
        yield ray
        return
    # Ray's workers get OMP_NUM_THREADS=1 (one CPU a task), which numpy's OpenBLAS follows: no runtime_env
    # (its env_vars cost every worker ~2 s of start-up)
    kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        if address:
            _init_within(ray, INIT_DEADLINE_S, address=address, **kw)
        else:
            # "local": a new instance even where another one runs on this machine (never joined unasked)
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, **kw)
    except Exception as e:
        where = f"--address {address}" if address else "a local Ray instance"
        raise RlhlsError(f"{where}: Ray could not start ({_one_line(e)})") from None
    watch = None if address else _watch_local_ray(ray)
    try:
        yield ray
    finally:
        ray.shutdown()
        if watch is not None:
            watch.kill()
            watch.wait()


def _watch_local_ray(ray):
    """The watchdog of this driver's local Ray instance (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        session = ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # noqa: BLE001 -- Ray's internals moved: no watchdog, Ray's own timeouts remain
        return None
    from rlhls.core import procs

    # host/ray_watch.py: kills the instance's processes at once when this driver dies
    return procs.popen([sys.executable, "-m", "rlhls.host.ray_watch", session], on_death=signal.SIGTERM,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


INIT_DEADLINE_S = 30.0  # joining a cluster: longer than a healthy head takes, short of a user's patience


def _init_within(ray, deadline: float, **kw) -> None:
    """ray.init(**kw), given up after `deadline` seconds with one line (a head that accepts the
    connection but never completes the handshake makes ray.init wait without end); what Ray
    prints meanwhile goes nowhere."""
    import threading

    from rlhls.core.procs import library_output

    done, err = threading.Event(), []

    def go():
        try:
            ray.init(**kw)
        except Exception as e:  # reported by the caller
            err.append(e)
        finally:
            done.set()
    with library_output(None, fds=(2,)):
        threading.Thread(target=go, daemon=True).start()
        finished = done.wait(deadline)
    if not finished:
        raise RlhlsError(f"Ray did not connect within {deadline:.0f} s")
    if err:
        raise err[0]


def _remote(ray, retries: int):
    @ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False)
    def rlhls_run(run):
        return execute(run)
    return rlhls_run


# ----------------------------------------------------------------------------- driver

class _Progress:
    def __init__(self, runs: list, show: bool):
        self.runs, self.t0 = runs, time.perf_counter()
        self.base: dict[str, int] = {}  # run -> the steps its folder held when it started
        self.bar = None
        if show and sys.stderr.isatty():  # a redirected stderr gets the lines of `say`, no carriage returns
            from tqdm import tqdm

            self.bar = tqdm(total=len(runs), unit="run", file=sys.stderr, dynamic_ncols=True, leave=True)

    def write(self, msg: str, say) -> None:
        if self.bar is not None:
            self.bar.write(msg, file=sys.stderr)
        elif say is not None:
            say(msg)

    def refresh(self, done: int, running: list, failed: int, ended: list) -> None:
        if self.bar is None:
            return
        now = sum(_folder_steps(r.folder) - self.base.get(r.id, 0) for r in running if r.folder is not None)
        now += sum(o.steps - o.start_steps for o in ended if o.status == "done")
        rate = now / max(1e-9, time.perf_counter() - self.t0)
        self.bar.n = done + failed
        speed = f", {rate:,.0f} steps/s" if any(r.folder is not None for r in self.runs) else ""
        self.bar.set_postfix_str(f"done {done}, running {len(running)}, failed {failed}{speed}", refresh=True)

    @contextlib.contextmanager
    def ticking(self, refresh):
        """refresh() every TICK_S in a thread while the block runs (a run in this process)."""
        if self.bar is None:
            yield
            return
        import threading

        stop = threading.Event()

        def loop():
            while True:
                refresh()
                if stop.wait(TICK_S):
                    return

        th = threading.Thread(target=loop, daemon=True)
        th.start()
        try:
            yield
        finally:
            stop.set()
            th.join()

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _outcome(run: Run, res: dict | None, error: str = "") -> Outcome:
    res = res or {}
    err = error or res.get("error", "")
    return Outcome(run.id, "failed" if err else "done", res.get("result"), err, float(res.get("seconds", 0.0)),
                   int(res.get("start_steps", 0)), _folder_steps(run.folder))


def run_all(runs: list, *, jobs: int | None = None, address: str | None = None, retries: int = 2, say=None,
            progress: bool = True, out=None) -> list:
    """Run `runs` (module docstring); returns their Outcomes in the order of `runs`. Ctrl-C cancels
    the runs in flight (their checkpoints stay) and re-raises."""
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        raise RlhlsError(f"runs: duplicate id {next(i for i in ids if ids.count(i) > 1)!r}")
    outcomes: dict[str, Outcome] = {}
    todo = []
    for r in runs:
        if r.is_finished():
            outcomes[r.id] = Outcome(r.id, "skipped", steps=_folder_steps(r.folder),
                                     start_steps=_folder_steps(r.folder))
        else:
            todo.append(r)
    bar = _Progress(runs, progress)
    k = [len(outcomes)]

    def finish(run: Run, o: Outcome) -> None:
        outcomes[run.id] = o
        k[0] += 1
        if o.ok:
            what = f"done in {o.seconds:.0f} s" + (f" (resumed at {o.start_steps} steps)" if o.start_steps else "")
        else:
            what = f"FAILED: {o.error}"
        bar.write(f"[{k[0]}/{len(runs)}] {run.id}: {what}", say)

    if outcomes:
        bar.write(f"{len(outcomes)} run(s) finished already: kept", say)
    ended: list[Outcome] = []
    try:
        if todo and (jobs or 0) == 1 and not address:
            for r in todo:
                bar.base[r.id] = _resume_steps(r.folder)
                with bar.ticking(lambda: bar.refresh(_count(outcomes, True), [r], _count(outcomes, False), ended)):
                    o = _outcome(r, execute(r))
                finish(r, o)
                ended.append(o)
        elif todo:
            with ray_session(address) as ray:
                cap = max(1, int(jobs or ray.cluster_resources().get("CPU", 1)))
                task = _remote(ray, retries)
                pending = list(todo)
                inflight: dict[Any, Run] = {}  # Ray object ref -> its run
                try:
                    while pending or inflight:
                        while pending and len(inflight) < cap:
                            r = pending.pop(0)
                            bar.base[r.id] = _resume_steps(r.folder)
                            inflight[task.remote(r)] = r
                        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=TICK_S)
                        for ref in ready:
                            r = inflight.pop(ref)
                            try:
                                o = _outcome(r, ray.get(ref))
                            except Exception as e:  # the worker died past its retries, or the node
                                o = _outcome(r, None, error=_worker_error(e))
                            finish(r, o)
                            ended.append(o)
                        bar.refresh(_count(outcomes, True), list(inflight.values()), _count(outcomes, False), ended)
                except BaseException:
                    for ref in inflight:
                        with contextlib.suppress(Exception):
                            ray.cancel(ref, force=True)
                    raise
        bar.refresh(_count(outcomes, True), [], _count(outcomes, False), ended)
    except KeyboardInterrupt:
        bar.write(f"interrupted: {len(outcomes)} of {len(runs)} run(s) ended; the others keep their checkpoints "
                  "(--resume continues them)", say)
        raise
    finally:
        bar.close()
        if out is not None:
            _write_runs_csv(Path(out), runs, outcomes)
    return [outcomes[r.id] for r in runs]


def _count(outcomes: dict, ok: bool) -> int:
    return sum(1 for o in outcomes.values() if o.ok == ok)


def _worker_error(e: BaseException) -> str:
    name = type(e).__name__
    if "WorkerCrashed" in name or "NodeDied" in name or "OutOfMemory" in name:
        return f"{name}: the worker died (past its retries); run the experiment again with --resume"
    return _one_line(getattr(e, "cause", None) or e)


def _write_runs_csv(out: Path, runs: list, outcomes: dict) -> None:
    if not out.is_dir():
        return
    rows = [{"id": r.id, "status": outcomes[r.id].status if r.id in outcomes else
             "partial" if _folder_steps(r.folder) else "not run",
             "folder": "" if r.folder is None else str(r.folder), "steps": outcomes[r.id].steps if r.id in outcomes
             else _folder_steps(r.folder), "seconds": round(outcomes[r.id].seconds, 1) if r.id in outcomes else "",
             "resumed_at": (outcomes[r.id].start_steps if r.id in outcomes and outcomes[r.id].status != "skipped"
                            else ""),
             "error": outcomes[r.id].error if r.id in outcomes else ""} for r in runs]
    atomic_write_text(out / RUNS_CSV, csv_text(rows, ["id", "status", "folder", "steps", "seconds", "resumed_at",
                                                      "error"]))


def failed_lines(outcomes: list) -> list:
    """Markdown lines naming the failed runs and their errors (nothing when none failed)."""
    bad = [o for o in outcomes if not o.ok]
    if not bad:
        return []
    return ["", f"## Failed runs ({len(bad)})", "", *[f"- `{o.id}`: {o.error}" for o in bad],
            "", "Run the same command with `--resume` to retry them (finished runs are kept).", ""]


def map_runs(fn, items, *, jobs: int | None = None, address: str | None = None, retries: int = 2,
             say=None, progress: bool = False, ids=None) -> list:
    """``ProcessPoolExecutor.map(fn, items)`` on the engine: fn(item) for each item, results in order;
    RlhlsError naming the first failed item after all have run."""
    items = list(items)
    ids = list(ids) if ids is not None else [f"{getattr(fn, '__name__', 'run')}[{i}]" for i in range(len(items))]
    outs = run_all([Run(i, fn=_call, kwargs={"fn": fn, "item": x}) for i, x in zip(ids, items)], jobs=jobs,
                   address=address, retries=retries, say=say, progress=progress)
    bad = [o for o in outs if not o.ok]
    if bad:
        raise RlhlsError(f"{len(bad)} of {len(outs)} run(s) failed; first {bad[0].id}: {bad[0].error}")
    return [o.result for o in outs]


def _call(fn, item):
    return fn(item)
