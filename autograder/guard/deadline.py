"""A time limit per criterion: a submission that keeps one criterion busy (a storm of compilations, a hang in
Python) loses that criterion, "timed out in <criterion>", and the others are still graded.

The limit is grading.toml's ``criterion_timeout_s`` (0 or absent: DEFAULT_GPU_S on a GPU, DEFAULT_CPU_S in
Triton's interpreter, which is slower). It is enforced with a real-time interval timer (SIGALRM) that raises
CriterionTimeout in the grading thread, and again every REPEAT_S until the criterion ends, so a student's bare
``except:`` that swallows the first one meets the next. What it cannot interrupt is a single call that never
returns to Python (a kernel spinning on the GPU inside a synchronize): the checker's and grade-class's
per-notebook time limits, which end the whole process, remain the backstop for that.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

from autograder import runtime

DEFAULT_GPU_S = 300.0
DEFAULT_CPU_S = 600.0
REPEAT_S = 1.0


class CriterionTimeout(BaseException):
    """Raised in the grading thread when a criterion runs past its limit. A BaseException: the graders' own
    ``except Exception`` and a student's do not catch it."""

    def __init__(self, seconds: float):
        super().__init__(f"past the limit of {seconds:.0f} s")
        self.seconds = seconds


def limit_s(cfg) -> float:
    """The limit per criterion from the grading settings, or the default for this machine."""

    chosen = float(getattr(cfg, "criterion_timeout_s", 0) or 0)
    if chosen > 0:
        return chosen
    return DEFAULT_GPU_S if runtime.has_gpu() else DEFAULT_CPU_S


def enforceable() -> bool:
    """Signals reach the main thread only, and only where setitimer exists (not on Windows)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise CriterionTimeout in this thread once `seconds` have passed inside the block (and every REPEAT_S
    after, until it ends). A timer already armed (pytest-timeout's, say) is put back with what was left of it."""
    if not seconds or seconds <= 0 or not enforceable():
        yield
        return

    def expire(signum, frame):
        raise CriterionTimeout(seconds)

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, expire)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = max(previous_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, previous_interval)


def timed_out_message(criterion: str, seconds: float) -> str:
    return (f"timed out in {criterion}: grading it took more than {seconds:.0f} s (the limit per criterion, "
            "criterion_timeout_s in grading.toml). The function hangs, or compiles again and again (a new kernel "
            "for every shape or value?): the other criteria were graded")
