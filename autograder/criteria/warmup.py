"""Compile a submission's kernels for every graded case at once, before the cases are graded one by one.

A first check() compiles the student's kernel once per specialization that its cases cover (each dtype, each
shape's divisibility, each tile setting the launcher picks): 33 cases and 47 s for notebook 04's GEMM on an
H100. Triton compiles outside the GIL, so calling the function on each case's inputs from a few threads
compiles side by side: 11 s for the same cases (triton 3.6). Each case is first called dry (criteria.dry_run:
the kernels of one call compile beside each other, none runs), then for real from the pool. The results and
errors of these calls are thrown away; the graded calls that follow, one at a time with every guard and hook in place, are the ones that count,
and they find the compiled kernels in memory. The benchmark sizes that fusion and performance call join the dry
run (compiled beside the cases, run by those criteria alone), and the checker runs the dry calls of a notebook's
exercises all in one (compile_side_by_side) before grading them one by one: a cold check of notebook 07 compiled
for 44 s of its 115 on an H200 one exercise after another. On the CPU (Triton's interpreter) nothing is compiled:
no warm-up.

A kernel under @triton.autotune would pick its configurations while other calls share the GPU: every choice
made during the warm-up is forgotten afterwards (the compiled configurations stay), so the graded calls, the
benchmark-size one above all, choose alone.

A training exercise (the capstone's decoder) is warmed up the same way: one forward and backward for each model
and batch shape its criteria run (each correctness model in each dtype, the training run's, the timed one's), side
by side; its first graded step then compiles nothing.

While the small cases are graded (correctness, precision), an @triton.autotune kernel times each of its
configurations at each new key with Triton's benchmark, 25 ms of warm-up and 100 ms of runs a configuration: 11 s of
06.row_argmax's 14 s on an H100, spent choosing launch settings for rows of 7 columns that nothing times.
quick_tuning() lets those choices be made by one timed call each, and forgets them afterwards, as the warm-up does,
so that the criteria that time the kernel (fusion, performance) tune it with Triton's own benchmark.
"""

from __future__ import annotations

import contextlib
import functools
import os
from concurrent.futures import ThreadPoolExecutor

import torch

from autograder import config, runtime
from autograder.criteria import dry_run, fusion, training
from autograder.criteria.cases import case_inputs, gpu_case_inputs, graded_dtypes, precision_shapes, secret_shapes
from autograder.guard.watch import Guarded
from autograder.measure import capability
from autograder.specs.exercise import KernelExercise, TrainingExercise


def cases(ex: KernelExercise, criteria, seed: int | None = None) -> list:
    """(shape, dtype) of every case the named criteria run at small sizes, each once: the precision shapes as the
    criteria draw them from the grading's seed (`seed`, else the grading file's), not the nominal ones no graded
    call uses (a drawn length's other divisibility compiled again, one kernel at a time, in the graded calls)."""
    seed = config.load().secret_seed if seed is None else seed
    shapes = []
    if "correctness" in criteria:
        shapes += list(secret_shapes(ex, seed))
    if "precision" in criteria:
        shapes += list(precision_shapes(ex, seed))
    unique = list(dict.fromkeys(s for s in shapes if s is not None))
    return [(shape, dtype) for shape in unique for dtype in graded_dtypes()]


def compile_ahead(ex: KernelExercise, fn, criteria) -> tuple[int, list[str]]:
    """Call fn once on each case's inputs from a pool of threads. Returns how many calls were made, and the cases
    whose call broke the CUDA context (an access far out of bounds): every graded call after that fails alike,
    so the report names the case here instead."""
    if not _warmed(ex):
        return 0, []
    todo = _cases_of(ex, criteria)
    broken: list[str] = []

    def call(case):
        try:
            _call(ex, fn, case)
        except Exception as exc:  # noqa: BLE001  the graded call of this case reports it
            shape, dtype = case
            if runtime.cuda_context_broken(exc):
                broken.append(f"{'model' if isinstance(ex, TrainingExercise) else 'shape'} {shape}, "
                              f"{str(dtype).removeprefix('torch.')}")

    tuners = autotuners(fn)
    chosen_before = {id(t): set(t.cache) for t in tuners}
    # First every case dry (each kernel of a call compiling beside the others, nothing run), then each for real.
    dry_run.run_dry(dry_calls(ex, fn, criteria))
    if len(todo) > 1:
        threads = min(dry_run.MAX_THREADS, os.cpu_count() or 1, len(todo))
        with ThreadPoolExecutor(threads, "fusion-course-warmup") as pool:
            list(pool.map(call, todo))
    _forget(tuners, chosen_before)
    return len(todo), sorted(broken)


def compile_side_by_side(graded) -> int:
    """The dry calls of several exercises, graded = [(exercise, fn, criteria), ...], in one dry run: the kernels
    of a whole notebook compile beside each other instead of one exercise's after another's, and each exercise's
    compile_ahead then finds them compiled. Returns how many compilations were submitted."""
    return dry_run.run_dry([call for ex, fn, criteria in graded if _warmed(ex)
                            for call in dry_calls(ex, fn, criteria)])


def dry_calls(ex, fn, criteria) -> list:
    """The calls a dry run makes for an exercise: each case compile_ahead calls for real, then, for a kernel
    exercise, each benchmark size that fusion and performance call (its largest case shape is a case already):
    compiled ahead, run by those criteria alone."""
    calls = [functools.partial(_call, ex, fn, case) for case in _cases_of(ex, criteria)]
    if isinstance(ex, KernelExercise) and {"fusion", "performance"} & set(criteria):
        calls += [functools.partial(_call, ex, fn, (p.shape, p.dtype), True)
                  for p in fusion.counting_points(ex, capability.current()) if p.benchmark]
    return calls


def _warmed(ex) -> bool:
    return runtime.has_gpu() and isinstance(ex, (KernelExercise, TrainingExercise))


def _cases_of(ex, criteria) -> list:
    return training.warm_cases(ex, criteria) if isinstance(ex, TrainingExercise) else cases(ex, criteria)


def _call(ex, fn, case, benchmark: bool = False) -> None:
    """fn on one case's inputs (a training exercise: one forward and backward of its model); the result dropped."""
    shape, dtype = case
    if isinstance(ex, TrainingExercise):
        training.first_step(ex, fn, shape, dtype)
        return
    if benchmark:  # drawn on the GPU and handed over as they are, as fusion and performance do
        fn(*gpu_case_inputs(ex, shape, dtype, 0).values())
    else:  # guard-padded copies, as the graded calls get: the same pointer alignment, so the same specialization
        inputs = case_inputs(ex, shape, dtype, 0)
        fn(*(Guarded.copy_of(v, k).tensor if isinstance(v, torch.Tensor) else v for k, v in inputs.items()))
    torch.cuda.synchronize()


def _forget(tuners: list, chosen_before: dict) -> None:
    """Drop every launch setting an autotuner chose since chosen_before was taken (its compiled kernels stay)."""
    for t in tuners:
        for key in set(t.cache) - chosen_before[id(t)]:
            t.cache.pop(key, None)


def _one_timed_call(kernel_call, quantiles=None, **_):
    """An autotuner's benchmark made of one call, timed with CUDA events: enough to choose among launch settings for
    a case that nothing times, and about a thousandth of Triton's 125 ms a configuration."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    kernel_call()  # the first call of a configuration compiles it
    start.record()
    kernel_call()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    return [ms] * len(quantiles) if quantiles else ms


_MISSING = object()  # an instance that had not looked its benchmark up yet


@contextlib.contextmanager
def quick_tuning(fn):
    """Within: every autotuner fn reaches chooses its launch settings by one timed call a configuration. After: the
    choices made within are forgotten and each autotuner's own benchmark is back. Nothing changes where the
    autotuner's class keeps its benchmark otherwise than Triton 3.6-3.9 do (an instance's cached `do_bench`)."""
    tuners = [t for t in autotuners(fn) if _benchmark_is_cached(t)] if runtime.has_gpu() else []
    chosen_before = {id(t): set(t.cache) for t in tuners}
    saved = {id(t): t.__dict__.get("do_bench", _MISSING) for t in tuners}
    for t in tuners:
        t.__dict__["do_bench"] = _one_timed_call
    try:
        yield len(tuners)
    finally:
        for t in tuners:
            if saved[id(t)] is _MISSING:
                t.__dict__.pop("do_bench", None)
            else:
                t.__dict__["do_bench"] = saved[id(t)]
        _forget(tuners, chosen_before)


def _benchmark_is_cached(tuner) -> bool:
    """Whether the autotuner finds its benchmark through an attribute an instance can shadow (functools'
    cached_property, as in Triton 3.4 and later)."""
    return isinstance(getattr(type(tuner), "do_bench", None), functools.cached_property)


def autotuners(fn) -> list:
    """The @triton.autotune kernels fn can reach through its module's (or notebook's) globals and closure, each
    once; @triton.heuristics wrappers are looked through."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    seen, found = set(), []
    names = dict(getattr(fn, "__globals__", {}) or {})
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            names[f"<closure {id(cell)}>"] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for value in names.values():
        for _ in range(4):  # Heuristics(Autotuner(JITFunction)) and the like
            if isinstance(value, Autotuner) and id(value) not in seen and isinstance(getattr(value, "cache", None), dict):
                seen.add(id(value))
                found.append(value)
            try:
                inner = getattr(value, "__wrapped__", None)
                value = inner if callable(inner) else getattr(value, "fn", None)
            except Exception:  # noqa: BLE001  an object whose attribute lookup raises (a lazy module)
                break
            if value is None:
                break
    return found
