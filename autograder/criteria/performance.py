"""The performance criterion: the student's kernel, the eager version and this GPU's peak timed in turns.

Every version is timed in the same rounds (the peak, yours, eager; the peak, eager, yours; ...) and graded on
ratios of medians: the fraction of the copy bandwidth or matmul rate measured *alongside* the kernel, and the
speed-up over eager measured alongside it too. A GPU that lowers its clocks as it heats up, or a neighbour that
comes and goes, moves all three times together and the ratios hold. Where the kernel takes about as long as
a launch (decode shapes), both versions are recorded in CUDA graphs so that the host's launch cost, which
varies from call to call, stays out of the comparison.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import threading

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.at_size import cached_at_benchmark_size, compact, eager_if_it_fits, reference_at_size
from autograder.criteria.audit import (
    LOOSE,
    ROTATION,
    from_your_kernels,
    not_plain,
    submission_running,
    timed_result_problem,
)
from autograder.criteria.cases import (
    case_seed,
    gpu_case_inputs,
    left_running,
    student_error,
)
from autograder.criteria.outputs import as_outputs, as_tuple, output_problem, relative_error
from autograder.criteria.performance_verdict import verdict
from autograder.measure import capability, gpu_share
from autograder.measure import device as device_mod
from autograder.measure.timing import (
    SampledCalls,
    device_work_ms,
    escaped_work,
    graph_or_plain,
    interleaved_times,
    synced_ms,
)
from autograder.report import FAILED, PASSED, SKIPPED, CriterionResult
from autograder.specs.exercise import KernelExercise, Shape

ROUNDS = 4  # rounds of (peak, yours, eager) and (peak, eager, yours): each follows the peak equally often
REP_MS = 40  # do_bench's time budget per turn and version
ATTEMPTS = 3  # measurements tried where the GPU was shared while timing, before "not measured"
PEAK_FLOOR = 0.85  # a peak below this fraction of the profile's, with no NVML to ask, counts as a shared GPU
SETTLED_SPREAD = 0.15  # turns that spread more than this (of their median) are taken again, up to ATTEMPTS tries
SETTLE_S = 0.2  # seconds of the peak's own work before the first turn, to bring an idle GPU's clocks up
KEPT = 3  # timed calls whose outputs are kept (picked at random) and compared with the reference afterwards


class SubmissionWork(Exception):
    """Work the submission started (a thread, a process, the grader's own lock) ran or could run while timing:
    a failure with its name, never "the GPU is shared"."""


def not_measured(cfg: GradingConfig) -> CriterionResult:
    """The performance result without a GPU: skipped, or failed when the grading configuration requires it."""
    if cfg.require_performance:
        return CriterionResult(
            "performance", FAILED,
            "not measured (no GPU), and this course's grading configuration requires a measurement: "
            "grade on a machine with a CUDA GPU",
        )
    return CriterionResult("performance", SKIPPED, "not measured (no GPU): Triton's interpreter says nothing about speed")


@dataclasses.dataclass
class Peak:
    """A ceiling of this GPU, measured alongside the student's kernel."""

    kind: str  # "copy" | "matmul" | "baseline"
    call: object  # no arguments; timed in turn with the others
    work: float  # bytes (copy) or flops (matmul) per call; 0 for a baseline, whose time is the yardstick
    profile: float | None  # the cached profile's figure for this ceiling (GB/s or TFLOP/s), for the message
    unit: str

    def rate(self, ms: float) -> float:
        scale = 1e9 if self.kind == "copy" else 1e12
        return self.work / (ms * 1e-3) / scale


def copy_peak(prof) -> Peak:
    call, n_bytes = device_mod.copy_probe()
    return Peak("copy", call, n_bytes, prof.copy_gbps, "GB/s")


def matmul_peak(prof, dtype_name: str) -> Peak:
    call, flops = device_mod.matmul_probe(dtype_name)
    return Peak("matmul", call, flops, prof.matmul_tflops.get(dtype_name), "TFLOP/s")


@dataclasses.dataclass
class Timings:
    yours_ms: float
    eager_ms: float | None  # None where the eager version did not fit in memory
    peak_ms: float
    spread: float  # the largest (max - min) / median over the rounds of the three
    note: str = ""
    yours_call: object = None  # what was timed as yours: the plain call, or its CUDA graph's replay


def time_in_turns(yours, eager, peak_call, in_graph: bool, rounds: int = ROUNDS) -> Timings:
    """Medians of `rounds` rounds of (peak, yours, eager), yours and eager swapping places. With in_graph, yours
    and eager are replays of CUDA graphs where they can be recorded; where yours cannot, both are timed as plain
    calls and the note says why."""
    note = ""
    if in_graph:
        yours_t, why = graph_or_plain(yours)
        eager_t, eager_why = graph_or_plain(eager) if why is None and eager is not None else (eager, None)
        if why or eager_why:
            yours_t, eager_t = yours, eager
            note = (f"\nTimed as plain calls, launch cost included: recording the call in a CUDA graph failed "
                    f"({why or eager_why}).")
        yours, eager = yours_t, eager_t
    # A long matmul probe lowers the clocks for whatever runs next: the probe leads every round, and yours and
    # eager swap places after it (in a fixed order, eager measured 0.95x itself on an H200).
    fns = {"peak": peak_call, "yours": yours, **({"eager": eager} if eager is not None else {})}
    times = interleaved_times(fns, rounds=rounds, rep=REP_MS, lead="peak")
    med = {k: statistics.median(v) for k, v in times.items()}
    spread = max((max(v) - min(v)) / med[k] for k, v in times.items())
    return Timings(med["yours"], med.get("eager"), med["peak"], spread, note, yours)


def settle(peak_call, seconds: float = SETTLE_S) -> None:
    """Bring the GPU out of idle before the first turn: a GPU that sat idle (a fresh machine, a student's first
    check) starts at its lowest clocks, and the first rounds measured at them are not the kernel's speed."""
    import time

    import torch

    if not torch.cuda.is_available():
        return
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        peak_call()
        torch.cuda.synchronize()


def measure(yours, eager, peak: Peak, in_graph: bool):
    """(Timings, "") from a measurement no neighbour disturbed, or (None, why not) after ATTEMPTS tries.

    Before each try the grader waits for the GPU to be free; after it, it looks again (this process idle): a GPU
    busy with someone else's work then, or, where NVML cannot tell, a peak far below the profile's, means the turns
    met a neighbour, and the measurement is taken again. A clean measurement whose turns spread by more than
    SETTLED_SPREAD (a first call that met cold clocks, or the host busy compiling beside it) is taken again too,
    up to ATTEMPTS tries, and the try whose turns agreed best is graded: the steadiest, never the fastest."""
    why = ""
    steadiest = None
    settle(peak.call)
    for _ in range(ATTEMPTS):
        running = submission_running()
        if running:
            raise SubmissionWork(running)
        gpu_share.wait_until_free()
        start = gpu_share.now_us()
        t = time_in_turns(yours, eager, peak.call, in_graph)
        after = gpu_share.wait_until_free(wait_s=0, since_us=start)
        if after.spawned:
            raise SubmissionWork(f"a process your code started computed on the GPU while your kernel was timed "
                                 f"({', '.join(after.spawned[:4])}): its work is yours, not a neighbour's")
        now = peak.rate(t.peak_ms) if peak.kind != "baseline" else None
        low = bool(peak.profile) and now is not None and now < PEAK_FLOOR * peak.profile
        if after.shared:
            why = after.describe()
        elif low and not after.readable:
            why = (f"NVML cannot tell, but the {peak.kind} peak measured {now:.0f} {peak.unit}, "
                   f"{now / peak.profile:.2f} of this GPU's profile")
        elif t.spread <= SETTLED_SPREAD:
            return _retaken(t, steadiest), ""
        else:
            steadiest = t if steadiest is None or t.spread < steadiest.spread else steadiest
    if steadiest is not None:
        return _retaken(steadiest, steadiest), ""
    return None, f"{why}; measured {ATTEMPTS} times"


def _retaken(t: Timings, earlier: Timings | None) -> Timings:
    """t, with a note when an earlier try was set aside for the spread of its turns."""
    if earlier is None:
        return t
    return dataclasses.replace(t, note=t.note + (
        f"\nTimed again: the turns of an earlier try spread by more than {SETTLED_SPREAD:.0%} of their median "
        f"(cold clocks or a busy host); graded the steadiest try (spread {t.spread:.0%})."))


def shared_gpu(cfg: GradingConfig, why: str) -> CriterionResult:
    """Neither a pass nor a failure: where the course requires a measurement, the graded cell stops with
    GPUShared (no points yet) and grade-class grades the student again once the GPU is free."""
    return CriterionResult(
        "performance", SKIPPED,
        f"not measured: the GPU is shared ({why}); grade again when it is free. Your kernel's "
        "correctness and the other criteria are not affected.",
        {"gpu_shared": True, "required": bool(cfg.require_performance)})


def one_at_a_time(criterion):
    """A timed criterion of any exercise kind (kernels, optimizer steps, training steps), run while this grading
    holds the GPU's timing lock: another course grading on this GPU (a classmate's check(), a second grade-class
    worker) times its own first, as its inputs, checks and timing would all land in this one's turns. Without a
    GPU: not measured."""

    @functools.wraps(criterion)
    def timed(ex, fn, cfg: GradingConfig, *args, **kwargs) -> CriterionResult:
        if not runtime.has_gpu():
            return not_measured(cfg)
        try:
            with gpu_share.timing_lock() as held:
                if not held:
                    return shared_gpu(cfg, f"another grading kept it for {gpu_share.LOCK_WAIT_S:.0f} s")
                return criterion(ex, fn, cfg, *args, **kwargs)
        except (SubmissionWork, gpu_share.LockedBySubmission) as exc:
            return submission_failure(exc)

    return timed


@one_at_a_time
def performance(ex: KernelExercise, fn, cfg: GradingConfig, own_kernels: bool = True) -> CriterionResult:
    """own_kernels=False: fn's kernels are launched by a compiler (torch.compile), so the check that the result
    comes from Triton launches (from_your_kernels) does not apply."""
    if not ex.perf_shapes:
        return _performance(ex, fn, cfg, ex.perf_shape, own_kernels=own_kernels)
    return _each_shape(ex, fn, cfg, own_kernels)


def submission_failure(exc: Exception) -> CriterionResult:
    return CriterionResult("performance", FAILED, f"not timed: {exc}", {"submission_work": True})


def _each_shape(ex: KernelExercise, fn, cfg: GradingConfig, own_kernels: bool = True) -> CriterionResult:
    """Grade every benchmark shape alone; passed when all pass, the figures of each under its name."""
    results = {part: _performance(ex, fn, cfg, shape, part, own_kernels) for part, shape in ex.perf_shapes.items()}
    figures = {f"{part}_{k}": v for part, r in results.items() for k, v in r.figures.items()}
    message = "\n".join(f"{part} shape: {r.message}" for part, r in results.items())
    statuses = [r.status for r in results.values()]
    shared = [r for r in results.values() if r.figures.get("gpu_shared")]
    if FAILED in statuses:
        return CriterionResult("performance", FAILED, message, figures)
    if shared:  # graded again later, as a whole (grade-class reads these two figures)
        return CriterionResult("performance", SKIPPED, message, {**figures, **shared[0].figures})
    if SKIPPED in statuses:
        return CriterionResult("performance", SKIPPED, message, figures)
    return CriterionResult("performance", PASSED, message, figures)


def _performance(ex: KernelExercise, fn, cfg: GradingConfig, shape: Shape, part: str | None = None,
                 own_kernels: bool = True) -> CriterionResult:
    prof = device_mod.profile()
    cap = capability.current()
    unreachable = capability.performance_unreachable(ex.flops is not None, cap)
    if unreachable:
        return CriterionResult("performance", SKIPPED, unreachable, {"unreachable_here": True})
    dtype = capability.timing_dtype(ex.perf_dtype, cap)  # float16 where bfloat16 is not native
    inputs = gpu_case_inputs(ex, shape, dtype, case_seed(cfg.secret_seed, "performance"))
    args = tuple(inputs.values())
    threads = set(threading.enumerate())
    try:
        out = fn(*args)
        torch.cuda.synchronize()
    except Exception as exc:
        return CriterionResult("performance", FAILED, student_error(exc, ex.function))
    left = left_running(ex, threads)
    if left:
        return CriterionResult("performance", FAILED, left + ": not timed")
    # A fast wrong answer earns nothing: compare with the float64 reference first (loosely: this guards
    # against garbage, the precision criterion judges the digits). Eager bf16 is no yardstick here; its
    # own reductions drift by more than that at this size.
    expected, unchecked = reference_at_size(ex, inputs)
    form = output_problem(ex, out, expected, inputs, dtype) if expected is not None else None
    if form:
        return CriterionResult("performance", FAILED, f"{form} (at the benchmark size {shape}): not timed")
    outs = as_outputs(out, len(expected)) if expected is not None else as_tuple(out)
    odd = not_plain(ex, outs)
    if odd:
        return CriterionResult("performance", FAILED, f"{odd}: not timed")
    if not unchecked and not all(relative_error(o, e) < LOOSE for o, e in zip(outs, expected)):
        return CriterionResult("performance", FAILED, f"wrong result at the benchmark size {shape}: not timed")
    del out
    # The timed calls take turns over input sets whose values differ; set 1 is first seen with Triton's launches
    # turned off: whatever answer comes back then was not computed by the submission's kernels.
    sets = [inputs] + [gpu_case_inputs(ex, shape, dtype, case_seed(cfg.secret_seed, "performance", k))
                       for k in range(1, ROTATION)]
    # References kept in float32: float64 ones for three sets beside the timed outputs ran a 16 GB card out of memory.
    expected = compact(expected)
    refs = {0: expected}

    def reference(i):
        # Set 0's reference and one other at a time: each is as large as the outputs in float32 (1 GiB for
        # add_rmsnorm at 32768 x 4096), and a 16 GB card is short of memory at that size. The samples come in the
        # order of their sets, so none is computed twice.
        if i not in refs:
            for k in [k for k in refs if k != 0]:
                del refs[k]
            refs[i] = compact(as_tuple(ex.reference(**sets[i])))
        return refs[i]
    if own_kernels and not unchecked:
        borrowed = from_your_kernels(ex, fn, sets[1], reference(1))
        refs.pop(1, None)  # computed again after the timing, if a sampled call needs it
        torch.cuda.empty_cache()
        if borrowed:
            return CriterionResult("performance", FAILED, borrowed + ": not timed")

    eager, eager_note = eager_if_it_fits(ex, args)
    dt = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "bf16")
    if ex.perf_baseline is not None:
        peak = Peak("baseline", lambda: ex.perf_baseline(*args), 0, None, "")
    elif ex.flops is not None:
        peak = matmul_peak(prof, dt)
    else:
        peak = copy_peak(prof)
    sampled = SampledCalls(fn, [tuple(s.values()) for s in sets], keep=KEPT)
    t, why = measure(sampled, eager, peak, ex.time_in_cuda_graph)
    peak.call = None  # the probe's buffers (2 GiB for the copy) go back before the checks below
    if t is None:
        return shared_gpu(cfg, why)
    ms = t.yours_ms
    # Every timed call counts: the outputs of calls picked at random while timing (or each graph's) must be right
    # for the inputs they were given.
    wrong = sampled.verify(lambda i, out: None if unchecked else timed_result_problem(ex, out, reference(i), i))
    if wrong:
        return CriterionResult("performance", FAILED, f"{wrong}: the timing means nothing",
                               {"time_ms": ms, "timed_calls": sampled.calls})
    refs.clear()
    # The profiler sees the kernels of every stream: no call may cost the GPU more than the time measured for it.
    escaped = escaped_work(ms, device_work_ms(lambda: fn(*args)))
    if escaped:
        return CriterionResult("performance", FAILED, escaped, {"time_ms": ms})
    # do_bench's events time the current stream only: work on a side stream, or finishing later, escapes them.
    # A loop with the whole device synchronized cannot be escaped; when it is far slower, it is the time.
    # The same call as timed: a graph's replay where yours was recorded (plain calls would add the launches).
    synced = synced_ms(t.yours_call)
    side_note = t.note + eager_note + unchecked
    if synced > 2 * ms + 0.02:
        side_note += (f"\nThe timed turns gave {ms:.3f} ms a call, but with the whole GPU synchronized a call takes "
                      f"{synced:.3f} ms: part of the work escapes the events (a side CUDA stream, work finishing "
                      "after the function returns, or less work while timed?). Graded on the synchronized time.")
        ms = synced
    cached = cached_at_benchmark_size(ex, fn, inputs, outs, None if unchecked else expected, dtype)
    del expected
    if cached:
        return CriterionResult("performance", FAILED, cached + ": the timing means nothing")
    return verdict(ex, fn, args, cfg, shape=shape, part=part, dtype=dtype, dt=dt, prof=prof, peak=peak,
                   t=t, ms=ms, side_note=side_note, rounds=ROUNDS)
