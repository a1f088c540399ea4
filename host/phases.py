"""The trainers' phase timer: each algorithm's loop adds the seconds of its phases (environment
step, acting, storing, GAE, update forward/backward, ...) to the metrics row's ``t_<phase>``."""

from __future__ import annotations

import contextlib
import time

__all__ = ["timed"]


@contextlib.contextmanager
def timed(times: dict, phase: str):
    """Add the block's wall seconds to ``times[phase]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - t0
