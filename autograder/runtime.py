"""Where kernels run: a CUDA GPU, or Triton's interpreter on the CPU.

Triton reads TRITON_INTERPRET when ``@triton.jit`` decorates a function, so this module must run before any
kernel is defined. Importing ``autograder`` or ``kernels`` imports it first; that is all a notebook needs.
"""

from __future__ import annotations

import os
import sys

from autograder import memcheck

_announced = False

# Set by the grader for the notebooks it runs (the checker, nbgrader's autograde under grade-class): nobody reads
# the demonstrations' plots there, so their sweeps take fewer points and their timings shorter runs. The exercises
# are graded the same way with or without it.
SMALL_DEMOS_ENV = "FUSION_COURSE_SMALL_DEMOS"
# A smaller GPU, simulated on a larger one (tests/notebooks/test_small_gpu.py): PyTorch's allocator is capped at
# this many GiB, and with NO_TMA the Hopper-only paths are switched off, as on an Ampere or Ada card.
MEMORY_GB_ENV = "FUSION_COURSE_MEMORY_GB"
NO_TMA_ENV = "FUSION_COURSE_NO_TMA"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def configure() -> bool:
    """Choose the interpreter when there is no CUDA GPU. Returns True when kernels run on a GPU."""
    global _announced
    if os.environ.get("TRITON_INTERPRET", "") in ("", "0") and not _cuda_available():
        if os.environ.get("TRITON_INTERPRET") == "0":
            # Someone asked for compiled kernels on a machine that cannot run them: say why it will fail.
            print(
                "fusion-course: TRITON_INTERPRET=0 but no CUDA GPU is visible; Triton kernels cannot launch.",
                file=sys.stdout,
            )
            return False
        os.environ["TRITON_INTERPRET"] = "1"
    on_gpu = not interpreted()
    if not on_gpu:
        _autotune_in_interpreter()
        _no_launch_on_fake_tensors()
        _patch_lang_once_per_launch()
        memcheck.install()  # an access out of bounds raises instead of corrupting this process
    if on_gpu and os.environ.get(MEMORY_GB_ENV):
        _cap_memory(os.environ[MEMORY_GB_ENV])
    if not on_gpu and not _announced:
        _announced = True
        # In a notebook: stdout, since nbgrader scores any stderr output in a graded cell as a failure.
        # From a command line (python -m ...): stderr, so that --json output stays parseable.
        stream = sys.stderr if sys.argv[:1] == ["-m"] else sys.stdout
        print(
            "fusion-course: no CUDA GPU found, so Triton kernels run in Triton's interpreter on the CPU.\n"
            "  Results are checked for correctness; speed is NOT measured here (it needs a GPU).",
            file=stream,
        )
    return on_gpu


class _WallClockBench:
    """What @triton.autotune times its configurations with, in the interpreter: each one runs once, timed by
    the wall clock. No GPU driver is active there, and Triton's autotuner asks the active driver for its timer
    (triton 3.7: "0 active drivers"), so without this every autotuned kernel fails on a laptop. The choice it
    makes says nothing about a GPU; what it checks is that every configuration runs."""

    def get_benchmarker(self):
        import time

        def bench(kernel_call, quantiles=None, **_):
            started = time.perf_counter()
            kernel_call()
            ms = (time.perf_counter() - started) * 1e3
            return [ms] * len(quantiles) if quantiles else ms

        return bench

    def __getattr__(self, name):
        raise RuntimeError(f"Triton's interpreter has no GPU driver ({name} was asked for)")


def _autotune_in_interpreter() -> None:
    try:
        from triton.runtime.driver import driver

        driver.active  # noqa: B018  a machine where some driver is active keeps it
    except RuntimeError:
        driver.set_active(_WallClockBench())
    except ImportError:  # a Triton without this module: nothing to stand in for
        pass


def _no_launch_on_fake_tensors() -> None:
    """In the interpreter, a kernel launched on fake tensors does nothing. torch.compile learns what a
    `torch.library.triton_op` returns by running its body on fake tensors (shapes, no data); on a GPU,
    `wrap_triton` records the launch instead of running it, but an interpreted kernel is not one it can record,
    and the interpreter would read the fake tensors' missing data. The body's own allocations already give the
    outputs' shapes, which is all tracing needs; real tensors launch as before."""
    try:
        from torch._subclasses.fake_tensor import is_fake
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # noqa: BLE001  a torch or Triton without them: nothing to adapt
        return
    original = InterpretedFunction.__dict__.get("run")
    if original is None or getattr(original, "skips_fake_tensors", False):
        return

    def run(self, *args, **kwargs):
        import torch

        if any(isinstance(a, torch.Tensor) and is_fake(a) for a in (*args, *kwargs.values())):
            return None
        return original(self, *args, **kwargs)

    run.skips_fake_tensors = True
    InterpretedFunction.run = run


def _patch_lang_once_per_launch() -> None:
    """In the interpreter, a launch patches triton.language for the kernel (and undoes it at its end), and every
    call of a @triton.jit helper from it (tl.cdiv, tl.sigmoid, tl.sum, a student's own helper) patches it again:
    in every program of the grid, each call scans the language's modules anew (triton 3.7: a fifth of an
    elementwise kernel's time in the interpreter). Within one launch nothing undoes a helper's patches before the
    launch ends, so a second call of the same helper would find nothing left to patch and only set the same
    attributes to equivalent functions again: here it skips that, and each helper is patched once per launch.
    The kernels run the same code on the same numbers; only the repeated scans are left out."""
    try:
        import threading

        from triton.runtime import interpreter

        original_patch = interpreter._patch_lang
        original_launch = interpreter.GridExecutor.__dict__["__call__"]
        empty_scope = interpreter._LangPatchScope
    except (ImportError, AttributeError, KeyError):  # a Triton without these: it runs as it is
        return
    if getattr(original_patch, "once_per_launch", False) or not _helper_patches_are_kept(interpreter):
        return
    launch = threading.local()  # the functions patched so far in the launch running on this thread

    def _patch_lang(fn):
        patched = getattr(launch, "patched", None)
        if patched is None:  # outside a launch: as Triton does it
            return original_patch(fn)
        if fn in patched:
            return empty_scope()  # patched earlier in this launch, and not undone since
        scope = original_patch(fn)
        patched.add(fn)
        return scope

    def __call__(self, *args, **kwargs):
        outer = getattr(launch, "patched", None)
        launch.patched = set()
        try:
            return original_launch(self, *args, **kwargs)
        finally:
            launch.patched = outer

    _patch_lang.once_per_launch = True
    interpreter._patch_lang = _patch_lang
    interpreter.GridExecutor.__call__ = __call__


def _helper_patches_are_kept(interpreter) -> bool:
    """True where a @triton.jit helper's call patches the language and keeps the patches (its scope thrown away,
    as in Triton 3.7): only then is patching it again within a launch a repetition. A Triton that undoes a
    helper's patches when the helper returns (a `with` around them) keeps its own way."""
    import inspect

    try:
        source = inspect.getsource(interpreter.InterpretedFunction.__call__)
    except (AttributeError, OSError, TypeError):
        return False
    lines = [line.split("#")[0].strip() for line in source.splitlines()]
    return "_patch_lang(self.fn)" in lines and not any(line.startswith("with _patch_lang") for line in lines)


def interpreted() -> bool:
    """True when Triton kernels run in the interpreter (no GPU, or forced with TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def device() -> str:
    """The torch device that kernels take their tensors on."""
    return "cpu" if interpreted() else "cuda"


def has_gpu() -> bool:
    """True when speed can be measured: a CUDA GPU runs the kernels compiled."""
    return not interpreted() and _cuda_available()


def small_demos() -> bool:
    """True in a notebook the grader runs (FUSION_COURSE_SMALL_DEMOS=1): demonstrations size themselves down."""
    return os.environ.get(SMALL_DEMOS_ENV, "") not in ("", "0")


def demo_points(values, keep: int = 3) -> list:
    """A demonstration's sweep: every value for a reader, about `keep` of them (always the first and the last)
    when the grader runs the notebook."""
    values = list(values)
    if not small_demos() or len(values) <= keep:
        return values
    if keep < 2:
        return values[-1:]
    step = (len(values) - 1) / (keep - 1)
    return [values[round(i * step)] for i in range(keep)]


def cuda_context_broken(exc: BaseException) -> bool:
    """True for the errors after which this process's GPU runs nothing more (an illegal memory access)."""
    return "illegal memory access" in str(exc) or "CUDA error" in str(exc)


class NotTimedHere(NotImplementedError):
    """A demonstration's comparison column that the grader's run leaves out (the timing helpers name it)."""


def demo_compile(fn, **kwargs):
    """torch.compile(fn, **kwargs), for a demonstration's comparison column. When the grader runs the notebook,
    a stand-in that raises NotTimedHere instead: Inductor's first compile in a process takes 10 to 20 s, and
    nobody reads the plot; the timing helpers leave the column out with a line that says why."""
    if not small_demos():
        import torch

        return torch.compile(fn, **kwargs)

    def not_compiled(*args, **kw):
        raise NotTimedHere("torch.compile is not timed while the grader runs this notebook")

    return not_compiled


def _cap_memory(value: str) -> None:
    import torch

    try:
        gib = float(value)
    except ValueError:
        raise ValueError(f"{MEMORY_GB_ENV}={value!r}: expected a number of GiB, such as 16") from None
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if gib <= 0:
        raise ValueError(f"{MEMORY_GB_ENV}={value!r}: expected a positive number of GiB")
    torch.cuda.set_per_process_memory_fraction(min(1.0, gib * 2**30 / total))


def memory_cap_bytes() -> int | None:
    """The simulated card's memory (FUSION_COURSE_MEMORY_GB), or None."""
    value = os.environ.get(MEMORY_GB_ENV)
    return int(float(value) * 2**30) if value else None


def tma_allowed() -> bool:
    """False where FUSION_COURSE_NO_TMA=1 simulates a GPU without Hopper's copy engine."""
    return os.environ.get(NO_TMA_ENV, "") in ("", "0")


def free_gpu_bytes() -> int:
    """Bytes a new allocation can still get: the GPU's free memory plus what PyTorch holds in its cache, within
    the simulated cap where one is set; 0 without a GPU."""
    if not has_gpu():
        return 0
    import torch

    free, _ = torch.cuda.mem_get_info()
    free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    cap = memory_cap_bytes()
    return min(free, cap - torch.cuda.memory_allocated()) if cap else free


def fits(n_bytes: float, share: float = 0.8) -> bool:
    """True when n_bytes more fit in `share` of what is free (always, in the interpreter: host memory)."""
    return not has_gpu() or n_bytes <= share * free_gpu_bytes()
