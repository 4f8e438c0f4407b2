"""What every kernel criterion shares: the graded dtypes, seeded inputs for a case, and errors told in the
student's terms (their own frames, the named hint)."""

from __future__ import annotations

import os
import random
import re
import threading
import traceback
import warnings

import torch

from autograder import runtime
from autograder.criteria import kernel_errors
from autograder.criteria.kernel_errors import LIBRARY_PATHS
from autograder.measure import capability
from autograder.specs.exercise import KernelExercise, Shape

MAX_LISTED = 5


def sync():
    if runtime.has_gpu():
        torch.cuda.synchronize()


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def graded_dtypes() -> list[torch.dtype]:
    # bf16 arithmetic is wrong in Triton's interpreter, and not native below compute capability 8.0.

    return capability.graded_dtypes(capability.current())


def case_seed(base: int, *parts) -> int:
    h = base
    for p in parts:
        for ch in str(p):
            h = (h * 1000003 + ord(ch)) % (2**62)
    return h


def collapse(failures: list[tuple[str, str]]) -> list[str]:
    """One line per distinct problem, in the order first met: a problem that several cases share (an error that
    stops the kernel whatever its input) is told once, with how many cases met it and where first."""
    groups: dict[str, list[str]] = {}
    for where, problem in failures:
        groups.setdefault(problem, []).append(where)
    return [f"{wheres[0]}: {problem}" if len(wheres) == 1 else
            f"{wheres[0]} and {len(wheres) - 1} more case(s), {len(wheres)} with one error: {problem}"
            for problem, wheres in groups.items()]


def precision_shapes(ex: KernelExercise, seed: int | None = None) -> tuple[Shape, ...]:
    """The shapes the precision criterion measures, smallest reduced length first: the exercise's own, or with a
    seed (the grading's secret seed) each one drawn around it (drawn_shape), so that no test on a kernel's shapes
    can pick out the calls whose error is measured."""
    shapes = ex.precision_shapes or ((ex.precision_shape,) if ex.precision_shape is not None else ())
    return shapes if seed is None else tuple(drawn_shape(ex, s, seed) for s in shapes)


def drawn_shape(ex: KernelExercise, shape: Shape, seed: int) -> Shape:
    """A precision shape drawn from the seed: the reduced length n drawn above n/2 and above the power of two below
    it, up to n (its next power of two, and so a block sized from it, stays the same; the lengths keep their order) and the leading dimension (rows,
    tokens, batch) within half of its size either way; the other dimensions are the exercise's."""
    dims = list(shape.dims)
    gen = random.Random(case_seed(seed, "precision shape", shape))
    axis = ex.reduced_axis % len(dims)
    if dims[axis] > 2:
        n = dims[axis]
        dims[axis] = gen.randint(max(n // 2, 1 << ((n - 1).bit_length() - 1)) + 1, n)
    if axis != 0:
        dims[0] = gen.randint(max(1, dims[0] // 2), dims[0] + dims[0] // 2)
    return Shape(tuple(dims), shape.layout)


def secret_shapes(ex: KernelExercise, seed: int | None = None) -> tuple[Shape, ...]:
    """The shapes of correctness's secret case: the exercise's, the extra ones no notebook shows, and every shape
    precision measures (drawn from the same seed). Precision calls fn on the secret case's own inputs (same seed,
    same shape), so nothing a call is handed tells which criterion makes it."""
    return tuple(dict.fromkeys((*ex.shapes, *ex.extra_shapes, *precision_shapes(ex, seed))))


def case_inputs(ex: KernelExercise, shape: Shape, dtype, seed: int, device=None) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return ex.make_inputs(shape, dtype, device or runtime.device(), gen)


def gpu_case_inputs(ex: KernelExercise, shape: Shape, dtype, seed: int) -> dict:
    """Benchmark-size inputs drawn on the GPU by a CUDA generator: data of the same kind (another draw of it) in
    milliseconds, where the CPU takes seconds for hundreds of MiB; made on the CPU where an input maker cannot
    run on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    try:
        with torch.device("cuda"):
            return ex.make_inputs(shape, dtype, "cuda", gen)
    except (RuntimeError, TypeError):
        return case_inputs(ex, shape, dtype, seed, device="cuda")


def student_error(exc: BaseException, function: str) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    library = LIBRARY_PATHS
    raised_by_student = bool(frames) and not any(part in frames[-1].filename for part in library)
    if isinstance(exc, NotImplementedError) and raised_by_student and not str(exc).strip():
        # The release's placeholder (`raise NotImplementedError()`); one raised inside a library keeps its words.
        return f"{function} raised NotImplementedError: the exercise is not done yet"
    where = ""
    for fr in reversed(frames):  # the innermost frame in the student's own code
        if not any(part in fr.filename for part in library):
            where = f"{os.path.basename(fr.filename)}:{fr.lineno}: {fr.line}"
            break
    inside = kernel_errors.kernel_line(exc)
    # Triton's CompilationError opens with a position ("at 9:20:") and carries the reason in its chain of
    # causes (triton 3.6, nested once per jit function) or in its last line (later versions); the interpreter
    # wraps the error as InterpreterError(repr(error)) from it.
    root = kernel_errors.root_cause(exc)
    reason = reason_line(root)
    if inside:  # the error stopped a kernel: its own line, the launch beside it, the error without its wrappers
        launched = f" (launched at {where})" if where else ""
        explained = kernel_errors.explain(exc, inside)
        return f"{function} raised {reason}{inside}{launched}" + (f"\n{explained}" if explained else hint_for(exc))
    text = first_line(exc)
    if reason and reason not in (text, f"{type(exc).__name__}: {text}"):
        text += f" ... {reason}"
    at = f" (at {where})" if where else ""
    explained = kernel_errors.explain(exc)
    return f"{function} raised {type(exc).__name__}: {text}{at}" + (f"\n{explained}" if explained else hint_for(exc))


def hint_for(exc: BaseException) -> str:
    """What a common, cryptic failure usually means."""
    text = str(exc).lower()
    if "out of memory" in text or "can't allocate memory" in text:
        return "\nMemory ran out: the function allocates far more than its output (or the notebook holds large tensors)."
    if isinstance(exc, TypeError) and "object is not subscriptable" in text and "function" in text:
        return "\nkernel[grid](...) needs a Triton kernel: is @triton.jit missing above the kernel's def?"
    return ""


def first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def reason_line(exc: BaseException) -> str:
    """The line of an exception that says what went wrong (not where)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if any(ch.isalnum() for ch in ln)]
    if not lines:
        return type(exc).__name__
    if re.fullmatch(r"at \d+:\d+:", lines[0]):  # a position; the message is at the end
        return lines[-1] if len(lines) > 1 else lines[0]
    return f"{type(exc).__name__}: {lines[0]}"


# Threads that libraries start for themselves (kernel I/O, progress bars, compile workers).
LIBRARY_THREADS = ("torch", "triton", "ipykernel", "IPython", "zmq", "tqdm", "jupyter_client", "matplotlib")


def left_running(ex: KernelExercise, before: set) -> str | None:
    """A thread the call started and left running: the result may be written after it was checked or timed."""
    for t in threading.enumerate():
        target = getattr(t, "_target", None)
        module = getattr(target, "__module__", "") or ""
        # A Thread subclass has no target: its class says whose it is (ipykernel 7 starts a SubshellThread when a
        # notebook's widget, such as the grader's own progress bar, first talks to the kernel).
        library = module.startswith(LIBRARY_THREADS) or (target is None and type(t).__module__.startswith(LIBRARY_THREADS))
        if t not in before and t.is_alive() and not library:
            what = getattr(target, "__qualname__", t.name)
            return (f"{ex.function} left a thread running when it returned ({what}): its work may finish after "
                    "the result is read or the timer stops; finish (or enqueue) all work before returning")
    return None


def count_gpu_kernels(run) -> tuple[int, list[str]]:
    """(how many, their names) of the kernels, copies and memsets the GPU ran for run(), on any stream and whatever
    their names: a name is the student's to choose (a Triton kernel may be called `memset_...` or `fill_...`), so
    none is left out. The grader's own work is kept out by where it happens instead: whatever is still queued is
    finished before the profiler starts, so the caller makes its inputs first and profiles only the call."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with warnings.catch_warnings():  # the profiler's own notices are not the student's business
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(names), names
