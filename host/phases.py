"""The trainers' phase timer: each algorithm's loop adds the seconds of its phases (environment
step, acting, storing, GAE, update forward/backward, ...) to the metrics row's ``t_<phase>``.

And the experiments' timing of repeats: CPU time (``cpu_clock``, ``cpu_times``), the median with its
spread (``spread``) and whether the repeats agree (``settled``)."""

from __future__ import annotations

import contextlib
import time

__all__ = ["timed", "cpu_clock", "cpu_times", "spread", "settled", "SETTLE_TOL"]

SETTLE_TOL = 0.05  # two measurements of a headline agree when within 5 % of each other
_clock = [time.perf_counter]  # what ``timed`` reads: wall seconds unless ``cpu_clock`` is in force


@contextlib.contextmanager
def timed(times: dict, phase: str):
    """Add the block's seconds (wall, or CPU time inside ``cpu_clock``) to ``times[phase]``."""
    clock = _clock[0]
    t0 = clock()
    try:
        yield
    finally:
        times[phase] = times.get(phase, 0.0) + clock() - t0


@contextlib.contextmanager
def cpu_clock():
    """Inside the block ``timed`` reads this process's CPU time (``time.process_time``): what other
    work on a shared machine does not inflate. A child process (a compiler) is not counted."""
    was = _clock[0]
    _clock[0] = time.process_time
    try:
        yield
    finally:
        _clock[0] = was


def cpu_times(fn, repeats: int, warm: int = 1) -> list[float]:
    """CPU seconds of `repeats` calls of `fn`, after `warm` untimed calls (one-time compiles, caches)."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(max(1, repeats)):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def _median(xs: list) -> float:
    s = sorted(xs)
    n = len(s)
    return float(s[n // 2]) if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def spread(xs) -> dict:
    """{'median', 'min', 'max', 'n'} of the measurements `xs` (at least one)."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("spread: no measurement")
    return {"median": _median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def settled(xs, tol: float = SETTLE_TOL) -> bool | None:
    """Whether the medians of the first and the second half of the measurements `xs` (in the order
    taken) agree within `tol` of the larger; None under 2 measurements (nothing to compare)."""
    xs = [float(x) for x in xs]
    half = len(xs) // 2
    if not half:
        return None
    a, b = _median(xs[:half]), _median(xs[half:])
    return abs(a - b) <= tol * max(abs(a), abs(b))
