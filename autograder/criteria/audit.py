"""What the performance criterion checks around its timing, so that a time is the student's kernel's and nothing
else's: a rate above this GPU's ceiling, outputs that are not plain tensors, timed results that differ from the
reference, results that survive with every Triton launch switched off, and threads or processes the submission
left running."""

from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
import threading

import torch

from autograder.criteria.cases import (
    sync,
)
from autograder.criteria.outputs import as_outputs, relative_error
from autograder.guard.watch import Watch
from autograder.measure import gpu_share
from autograder.measure.meters import TritonLaunches
from autograder.measure.timing import device_work_ms, escaped_work, synced_ms
from autograder.specs.exercise import KernelExercise

ROTATION = 3  # input sets of different values the timed calls take in turn
LOOSE = 5e-2  # relative error a timed result may have: this guards against garbage, precision judges the digits


RATE_NOISE = 0.15  # a rate this far above the GPU's ceiling (plus the turns' spread, up to MAX_SPREAD) is impossible


MAX_SPREAD = 0.25


def impossible_rate(ex: KernelExercise, args: tuple, ms: float, prof, dt: str, peak, peak_ms: float,
                    noise: float) -> str | None:
    """Why a time cannot be right, or None: the bytes the op must move over that time beat this GPU's copy
    bandwidth, or its flops its matmul rate, by more than the measurement's noise (whatever the exercise is graded
    against: a baseline's speed too). The ceilings measured in turns with the kernel where there are, else the
    device profile's."""
    copy = peak.rate(peak_ms) if peak.kind == "copy" else prof.copy_gbps
    mm = peak.rate(peak_ms) if peak.kind == "matmul" else prof.matmul_tflops.get(dt)
    seconds = ms * 1e-3
    checks = []
    if ex.bytes is not None and copy:
        checks.append((ex.bytes(*args) / seconds / 1e9, copy, "GB/s", "bytes the op must move", "copy bandwidth"))
    if ex.flops is not None and mm:
        checks.append((ex.flops(*args) / seconds / 1e12, mm, "TFLOP/s", "flops the op must do", f"{dt} matmul rate"))
    for rate, ceiling, unit, what, name in checks:
        if rate > ceiling * (1 + noise):
            return (f"impossible measurement: work escaped the timer. {ms:.4f} ms a call means {rate:.0f} {unit} "
                    f"for the {what}, {rate / ceiling:.1f}x this GPU's {name} ({ceiling:.0f} {unit}); no kernel "
                    "can do that, so the timed calls did not do the work (a cache, a side stream, a thread, or "
                    "less work while timed)")
    return None


def not_plain(ex: KernelExercise, outs) -> str | None:
    """A returned object that is not a plain torch.Tensor (a subclass, a lazy placeholder) is refused by name:
    its values could be computed when they are read, after the timer stopped."""
    for o in outs or ():
        if type(o) is not torch.Tensor:
            return (f"{ex.function} returned a {type(o).__module__}.{type(o).__qualname__}, not a plain "
                    "torch.Tensor: tensor subclasses and placeholders are refused (their values could be "
                    "computed when read, outside the timed call)")
    return None


def timed_result_problem(ex: KernelExercise, out, expected: tuple, i: int) -> str | None:
    """What is wrong with the output of a timed call on input set i (form, type or values), or None."""
    outs = as_outputs(out, len(expected))
    if outs is None:
        return f"a timed call (input set {i}) returned {type(out).__name__}, not the outputs"
    odd = not_plain(ex, outs)
    if odd:
        return f"a timed call (input set {i}): {odd}"
    for o, e in zip(outs, expected):
        if tuple(o.shape) != tuple(e.shape) or not relative_error(o, e) < LOOSE:
            return (f"a timed call (input set {i} of {ROTATION}, picked at random among the timed calls) returned "
                    f"a wrong result: the calls timed are checked too, so doing less when timed, or returning a "
                    f"result kept from another call, shows")
    return None


class NoLaunches:
    """While active, every Triton launch returns without running: the entry points TritonLaunches wraps (a jit
    function's, the interpreter's, the autotuner's and heuristics' run) and a compiled kernel's own launcher."""

    def __enter__(self):
        from triton.runtime import autotuner, interpreter, jit

        def skip(*args, **kwargs):
            return None

        self._saved = []
        for cls in (jit.JITFunction, interpreter.InterpretedFunction, autotuner.Autotuner, autotuner.Heuristics):
            if "run" in cls.__dict__:
                self._saved.append((cls, "run", cls.__dict__["run"]))
                setattr(cls, "run", skip)
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:  # pragma: no cover  (a Triton without the class: nothing more to patch)
            CompiledKernel = None
        if CompiledKernel is not None and "__getitem__" in CompiledKernel.__dict__:
            self._saved.append((CompiledKernel, "__getitem__", CompiledKernel.__dict__["__getitem__"]))
            setattr(CompiledKernel, "__getitem__", lambda self, grid: skip)
        return self

    def __exit__(self, *exc):
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)
        self._saved.clear()
        return False


def from_your_kernels(ex: KernelExercise, fn, inputs: dict, expected: tuple) -> str | None:
    """None, or why the result does not come from the submission's kernels: called once on inputs it has never
    seen with every Triton launch a no-op and every new tensor poisoned (the Watch's guarded buffers), fn still
    returned an output that matches the reference. Whatever computed it (torch under a disabled dispatch mode, a
    library, the host), it was not the student's kernels."""
    try:
        with NoLaunches(), Watch(TritonLaunches(), poison=True):
            out = fn(*inputs.values())
        sync()
    except Exception:  # noqa: BLE001  a launcher that needs its kernel's result: the kernels do the work
        sync_quietly()
        return None
    outs = as_outputs(out, len(expected))
    if outs is None:
        return None
    for k, (o, e) in enumerate(zip(outs, expected)):
        if isinstance(o, torch.Tensor) and tuple(o.shape) == tuple(e.shape) and relative_error(o, e) < LOOSE:
            name = f" ({ex.output_names[k]})" if len(expected) > 1 else ""
            return (f"the result does not come from your kernels: with every Triton launch turned into a no-op, "
                    f"{ex.function} still returned the right answer{name} for inputs it had not seen (computed by "
                    "torch or another library beside the kernels)")
    return None


def sync_quietly():
    try:
        sync()
    except Exception:  # noqa: BLE001  the error already raised is the one that matters
        pass


def _installed_folders() -> tuple[str, ...]:
    """The folders packages are installed in: the interpreter's own, and any folder on the path that pip installed
    into (it holds a `*.dist-info`: `pip install --target DIR` with PYTHONPATH=DIR, as on a machine whose Python
    cannot be written). Read once, when the grader is imported, before any submission can add a folder."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    for entry in sys.path:
        try:
            if os.path.isabs(entry) and any(name.endswith(".dist-info") for name in os.listdir(entry)):
                roots.add(entry)
        except OSError:  # a missing folder or a zip on the path
            continue
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots if r))


_LIBRARY_ROOTS = _installed_folders()


def _library_file(path: str) -> bool:
    return (not path or path.startswith("<frozen") or path.startswith(_LIBRARY_ROOTS)
            or any(part in path for part in ("site-packages", "dist-packages", os.sep + "autograder" + os.sep,
                                             os.sep + "triton" + os.sep, os.sep + "torch" + os.sep)))


def submission_threads() -> list[str]:
    """Live threads running the submission's own code (a function defined outside the libraries and the standard
    library: a notebook cell's, a student module's), whenever they were started."""
    found = []
    for t in threading.enumerate():
        if t is threading.main_thread() or t is threading.current_thread() or not t.is_alive():
            continue
        target = getattr(t, "_target", None) or getattr(t, "function", None)  # a Thread's, a Timer's
        code = getattr(target, "__code__", None) or getattr(getattr(target, "__func__", None), "__code__", None)
        if code is None and target is None:  # a Thread subclass: its own run method
            code = getattr(type(t).run, "__code__", None)
        path = getattr(code, "co_filename", "")
        if not _library_file(path):
            what = getattr(target, "__qualname__", None) or type(t).__qualname__
            found.append(f"{t.name} ({what}, {os.path.basename(path)})")
    return found


def submission_running() -> str | None:
    """Why the timing cannot start: a thread or a process of the submission is alive (it could launch work
    between the timed calls, or hold the GPU), or None."""
    threads = submission_threads()
    if threads:
        return (f"a thread your code started is still running ({'; '.join(threads[:3])}): it could run GPU work "
                "between the timed calls. Finish (join) every thread before grading")
    procs = gpu_share.submission_processes()
    if procs:
        return (f"a process your code started is still running ({'; '.join(procs[:3])}): it could load the GPU "
                "while your kernel is timed. End every process it starts before grading")
    return None


# ---------------------------------------------------------------------------------------------------------------
# The audit every timed criterion of every exercise kind goes through once its turns are measured: a kernel's
# performance (criteria/performance.py and its verdict, performance_verdict.py, make these checks inline, in
# this order), a step's and a training step's.


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """The least work one timed call must do, and this GPU's rate for that work: a time that beats it is not a
    time of the work."""

    work: float  # bytes (GB/s) or flops (TFLOP/s) a call must move or do
    rate: float | None  # this GPU's ceiling in `unit`; None: not known here, nothing checked
    unit: str  # "GB/s" | "TFLOP/s"
    what: str  # what the work is, e.g. "bytes the step must move"
    name: str  # what the ceiling is, e.g. "copy bandwidth"

    def beaten(self, ms: float, noise: float) -> str | None:
        if not self.rate or self.work <= 0:
            return None
        achieved = self.work / (max(ms, 1e-9) * 1e-3) / (1e9 if self.unit == "GB/s" else 1e12)  # 0 ms: no work timed
        if achieved <= self.rate * (1 + noise):
            return None
        return (f"impossible measurement: work escaped the timer. {ms:.4f} ms a call means {achieved:.0f} "
                f"{self.unit} for the {self.what}, {achieved / self.rate:.1f}x this GPU's {self.name} "
                f"({self.rate:.0f} {self.unit}); no kernel can do that, so the timed calls did not do the work "
                "(a cache, a side stream, a thread, or less work while timed)")


@dataclasses.dataclass
class Audited:
    """What the audit leaves of a timing: the time to grade, the failure (None: none found) and a note."""

    ms: float
    failure: str | None = None
    note: str = ""


def audit_timing(call, ms: float, spread: float, ceilings=(), sampled=None, problem=None) -> Audited:
    """The checks a time must pass before it is graded, in the order the kernel's performance criterion makes
    them. `call` (no arguments) is what was timed as yours, plainly called; `ms` its time from the turns and
    `spread` theirs; `sampled` (a measure.timing.SampledCalls) with `problem(set, output) -> str | None` checks
    the outputs of calls picked at random while timing. Then the profiler's view of every stream must not show
    more GPU work a call than was timed, a loop with the whole device synchronized replaces a time it far
    exceeds, and the time must not beat any of the ceilings by more than the measurement's noise."""
    if sampled is not None and problem is not None:
        wrong = sampled.verify(problem)
        if wrong:
            return Audited(ms, f"{wrong}: the timing means nothing")
    escaped = escaped_work(ms, device_work_ms(call))
    if escaped:
        return Audited(ms, escaped)
    synced, note = synced_ms(call), ""
    if synced > 2 * ms + 0.02:
        note = (f"\nThe timed turns gave {ms:.3f} ms a call, but with the whole GPU synchronized a call takes "
                f"{synced:.3f} ms: part of the work escapes the events (a side CUDA stream, work finishing after the "
                "function returns, or less work while timed?). Graded on the synchronized time.")
        ms = synced
    noise = RATE_NOISE + min(spread, MAX_SPREAD)
    beyond = next((why for why in (c.beaten(ms, noise) for c in ceilings) if why), None)
    return Audited(ms, beyond, note)
