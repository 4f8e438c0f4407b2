"""check(): grade one student function on an exercise's criteria."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import traceback

import torch

from autograder import config as config_mod
from autograder import runtime
from autograder import specs as registry
from autograder.criteria import like_gpu, warmup
from autograder.criteria.kinds import kind_of
from autograder.guard import deadline, fingerprint, integrity
from autograder.guard.watch import quiet
from autograder.link import session
from autograder.measure import capability, gpu_share
from autograder.measure.meters import TritonLaunches
from autograder.report import FAILED, SKIPPED, CriterionResult, Report
from autograder.specs.exercise import CRITERIA, check_callable

QUICK_TUNING = ("correctness", "precision")  # criteria whose cases nothing times
TIMED = "performance"  # the criterion that times, every kind's: it holds the GPU's timing lock alone


def check(exercise_id: str, fn, *, criteria=None) -> Report:
    """Grade fn on the exercise's criteria (all of them, or those named) and return a Report.

    Nothing is written to stderr: warnings and stray output are captured into the messages. Raises
    integrity.TamperingError when the notebook replaced part of the grader, torch or triton (see integrity).
    """
    integrity.verify()
    ex = registry.get(exercise_id)
    if criteria is None:
        chosen = list(ex.criteria)
    else:
        chosen = [criteria] if isinstance(criteria, str) else list(criteria)
        for c in chosen:
            if c not in CRITERIA:
                raise ValueError(f"unknown criterion {c!r}; the criteria are {', '.join(CRITERIA)}")
            if c not in ex.criteria:
                raise ValueError(f"{ex.id} is not graded on {c!r}; it is graded on {', '.join(ex.criteria)}")
    elsewhere = _elsewhere(ex)
    if elsewhere:  # an exercise bound to a kind of GPU: skipped with the reason, never failed for the hardware
        return Report(ex.id, [CriterionResult(c, SKIPPED, elsewhere, {"hardware": ex.hardware}) for c in chosen])
    cfg = _settings()
    kind = kind_of(ex)  # its graders, one table per kind of exercise (criteria/kinds.py)
    problem = check_callable(ex, fn)
    notes = []
    limit = deadline.limit_s(cfg)
    if not problem:
        broken = []
        try:
            with _compiling(limit):
                _, broken = warmup.compile_ahead(ex, fn, chosen)
        except deadline.CriterionTimeout:
            notes.append(f"the first calls of {ex.function} (compiling ahead) took more than {limit:.0f} s")
        notes += [f"{ex.function} broke the GPU's CUDA context on its first call at {case} (an access far out of "
                  "bounds?): the cases graded after it could not run" for case in broken[:3]]
    TritonLaunches.ran.clear()
    results = []
    for name in chosen:
        if problem:
            results.append(CriterionResult(name, FAILED, problem))
            continue
        # Waited for outside the criterion's time limit: another grading's timing on this GPU goes first.
        with contextlib.nullcontext() if name == TIMED else _untimed():
            result = _grade(ex, fn, cfg, kind, name, limit)
        results.append(result)
    integrity.verify()  # the graded function ran in between
    report = Report(ex.id, results, notes=notes + fingerprint.notes_for_kernels(TritonLaunches.ran.values()))
    return report


def compile_ahead(graded) -> int:
    """Compile the kernels of several exercises side by side before check() grades them one at a time (the
    checker does so for a notebook): graded = [(exercise id, fn, criteria or None), ...]. Returns how many
    compilations were submitted. Never raises: whatever goes wrong here, each check() compiles what it needs."""
    if not runtime.has_gpu():
        return 0
    chosen = []
    for exercise_id, fn, criteria in graded:
        ex = registry.get(exercise_id)
        if not _elsewhere(ex) and not check_callable(ex, fn):
            chosen.append((ex, fn, [c for c in (criteria or ex.criteria) if c in ex.criteria]))
    try:
        with _compiling(deadline.limit_s(_settings())):
            return warmup.compile_side_by_side(chosen)
    except Exception:  # noqa: BLE001  a timeout too: each check() compiles ahead again and reports it
        return 0


def _grade(ex, fn, cfg, kind, name: str, limit: float) -> CriterionResult:
    """One criterion's result, within its time limit; a timeout or a grader bug is a result too, never a crash."""
    started = time.perf_counter()
    held_before = _held_gib()  # the notebook's live tensors (and earlier exercises' leftovers)
    with quiet() as noise:
        try:
            # The small cases choose an autotuned kernel's launch settings by one timed call (warmup.py).
            tuning = warmup.quick_tuning(fn) if name in QUICK_TUNING else contextlib.nullcontext()
            with deadline.time_limit(limit), tuning, like_gpu.strict():
                result = kind.graders[name](ex, fn, cfg)
                if name in kind.judged:
                    result = session.confirm(ex, result)  # the course's bars, where a judge holds them
        except deadline.CriterionTimeout as exc:  # recorded, and the next criterion is graded
            result = CriterionResult(name, FAILED, deadline.timed_out_message(name, exc.seconds))
        except Exception as exc:  # a grader bug must still produce a result, not a crash
            result = CriterionResult(name, FAILED, _grader_failure(exc, held_before))
    result.seconds = round(time.perf_counter() - started, 2)
    if noise:
        result.message += "\n(captured while grading, kept off stderr:)\n" + "\n".join(noise)[-2000:]
    return result


def _elsewhere(ex) -> str | None:
    """Why an exercise bound to a kind of GPU is not graded here; None where it is."""
    return capability.missing_hardware(ex.hardware, capability.current()) if ex.hardware else None


@contextlib.contextmanager
def _compiling(limit: float):
    """Where a submission's kernels are compiled ahead: the GPU's lock held shared, within the time limit, under the
    GPU's rules, its output dropped (the graded calls print it again)."""
    with _untimed(), quiet(), contextlib.redirect_stdout(io.StringIO()), deadline.time_limit(limit), \
            like_gpu.strict():
        yield


def _untimed():
    """The GPU's lock held shared while this grading compiles or runs an untimed criterion (measure/gpu_share.py):
    it waits for another grading's timing on this GPU, and none starts while it runs. Nothing without a GPU."""
    return gpu_share.untimed_work() if runtime.has_gpu() else contextlib.nullcontext()


def _settings() -> config_mod.GradingConfig:
    """The grading settings: the file's; where a judge grades, the package's public defaults with the settings
    the judge shares and a seed of this process's own (the course's never enters it)."""
    cfg = config_mod.load()
    if not session.judged():
        return cfg
    shared = session.settings()
    return dataclasses.replace(cfg, secret_seed=int(shared["seed"]), trials=int(shared["trials"]),
                               require_performance=bool(shared["require_performance"]),
                               criterion_timeout_s=float(shared["criterion_timeout_s"]))


def _held_gib() -> float | None:
    """GiB held by live tensors on the GPU now; None without CUDA."""
    return torch.cuda.memory_allocated() / 2**30 if torch.cuda.is_available() else None


NOTEBOOK_HOLDS_GIB = 1.0  # live tensors before a criterion above this are named as the notebook's


def _grader_failure(exc: Exception, held_before: float | None = None) -> str:
    """The message when grading itself raised: the device's state is the usual cause, not a grader bug.
    held_before: GiB of live tensors when the criterion began (the notebook's), to tell them from the
    criterion's own (its inputs, references and outputs at the benchmark size, and the function's)."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        now = _held_gib()
        if now is None or held_before is None:
            held = "" if now is None else f" ({now:.1f} GiB held by live tensors)"
            return (f"GPU memory ran out while grading{held}: the notebook keeps large tensors alive, or the "
                    f"function allocates far more than its output. Free them (del, torch.cuda.empty_cache()) or "
                    f"allocate less. [{text}]")
        held = (f" ({now:.1f} GiB held by live tensors when it ran out, {held_before:.1f} GiB of them before this "
                f"criterion began)")
        if held_before > NOTEBOOK_HOLDS_GIB:
            return (f"GPU memory ran out while grading{held}: the notebook keeps {held_before:.1f} GiB of tensors "
                    f"alive. Free them (del, torch.cuda.empty_cache()) before grading, or allocate less. [{text}]")
        return (f"GPU memory ran out while grading{held}: not the notebook's tensors, but this criterion's own at "
                f"its benchmark size (inputs, references, outputs) and what the function allocates. Does it "
                f"allocate far more than its output? If not, this GPU has too little memory for the grader's "
                f"benchmark: please report it. [{text}]")
    if runtime.cuda_context_broken(exc):
        return (f"the GPU can no longer run anything in this process: an earlier kernel accessed memory out of "
                f"bounds (a load or store without a correct mask?) and broke the CUDA context; restart the kernel. "
                f"[{text}]")
    return (f"the grader itself failed ({text}); please report this\n"
            + "".join(traceback.format_exception(exc)[-3:]))
