"""A dry run: every Triton kernel a call would launch compiled side by side, none of them run.

A call launches its kernels one after another, and each compiles at its first launch: compiling a model's step
takes the sum of its kernels' compile times, even with one thread per case (criteria.warmup), because each thread
waits on its own chain of kernels. The capstone's warm-up took 13.6 s of an H100 that way, its correctness 16 s
case after case before it.

In a dry run each launch becomes a warm-up handed to Triton's AsyncCompileMode (triton.runtime._async_compile,
in Triton 3.6 to 3.9): its compilation starts in a pool of threads (Triton compiles outside the GIL) and the launch
returns at once, without running; an @triton.autotune kernel submits every configuration it could choose. The
call goes on with outputs no kernel wrote. Every tensor allocated during a dry run is filled with zeros, so that
an index read from such an output stays in range for the torch ops that follow, and a size read from one stays
small. The backward of an autograd Function runs in autograd's own thread: the launches made there are handed to
the same pool.

What a dry run computes is thrown away. An error in it (a value the student's code checks, a shape it refuses)
ends the call early; whatever it submitted still compiles. A kernel that fails to compile keeps its error for its
first real launch, which raises it as it would have. Where the Triton in use has no AsyncCompileMode, or on the
CPU, nothing happens.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autograder import runtime

MAX_THREADS = 16  # Triton compiles outside the GIL (ptxas too): one thread a core of a 16-core GPU machine


class _Zeros(TorchDispatchMode):
    """Every uninitialised allocation comes back filled with zeros."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in _EMPTY and isinstance(out, torch.Tensor):
            out.zero_()
        return out


_EMPTY = {torch.ops.aten.empty, torch.ops.aten.empty_like, torch.ops.aten.empty_strided, torch.ops.aten.new_empty,
          torch.ops.aten.new_empty_strided}


def available() -> bool:
    if not runtime.has_gpu():
        return False
    try:
        from triton.runtime import _async_compile  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def dry_launches(threads: int = MAX_THREADS):
    """Within: Triton launches compile in a pool of threads and run nothing; allocations are zeros. On leaving, every
    compilation submitted is waited for. Yields how many compilations were submitted so far (a callable)."""
    if not available():
        yield lambda: 0
        return
    from triton.runtime import _async_compile, autotuner, jit

    pool = ThreadPoolExecutor(max(1, min(threads, os.cpu_count() or 1)), "fusion-course-dry-run")
    mode = _async_compile.AsyncCompileMode(pool)

    def jit_run(original):
        def run(kernel, *args, grid=None, warmup=False, **kwargs):
            token = _async_compile.active_mode.set(mode) if _async_compile.active_mode.get() is None else None
            try:  # autograd's thread does not inherit the mode: set where it is missing
                return original(kernel, *args, grid=grid, warmup=True, **kwargs)
            finally:
                if token is not None:
                    _async_compile.active_mode.reset(token)
        return run

    def tuner_run(self, *args, **kwargs):
        kwargs.pop("warmup", None)
        return self.warmup(*args, **kwargs)  # every configuration submitted; none timed, none chosen

    saved = [(cls, cls.__dict__["run"]) for cls in (jit.JITFunction, autotuner.Autotuner) if "run" in cls.__dict__]
    replacements = {jit.JITFunction: jit_run(jit.JITFunction.__dict__["run"]), autotuner.Autotuner: tuner_run}
    try:
        for cls, _ in saved:
            cls.run = replacements[cls]
        with _Zeros():
            yield lambda: len(mode.raw_futures)
    finally:
        for cls, original in reversed(saved):
            cls.run = original
        for future in list(mode.raw_futures):
            try:
                mode.future_kernels[future._key].result()  # a compiled kernel goes into its function's cache
            except Exception:  # noqa: BLE001, S110  its first real launch raises the same error
                pass
        pool.shutdown(wait=True)


def run_dry(calls) -> int:
    """Each of calls (no-argument callables) once in a dry run, one after another; their errors swallowed. Returns
    how many compilations they submitted. Where there is no dry run, none is called."""
    if not available():
        return 0
    with dry_launches() as submitted:
        for call in calls:
            try:
                call()
            except Exception:  # noqa: BLE001, S110  the graded call of this case reports it
                pass
        return submitted()
