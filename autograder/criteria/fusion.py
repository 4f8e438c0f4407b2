"""The fusion criterion: how many kernels a call launches, counted on the GPU (torch.profiler) or at Triton's launch
entry points (the interpreter), and whether torch computes anything beside them.

A call is counted where the grade could be earned: at the largest case shape in every graded dtype and, on a GPU,
at each benchmark size in the dtype the performance criterion times it (performance._performance picks the same
shape and dtype). A submission fused only in float32, or only below some size, fails where it is not. Each count
follows one warm-up call on the same inputs, so compilation and autotuning stay out of it.

On a GPU every kernel, copy and memset the profiler sees counts, whatever its name: the grader's own work (making
the inputs, the warm-up) is finished before the profiler starts, so only the student's call is profiled.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.cases import (
    case_inputs,
    case_seed,
    count_gpu_kernels,
    dtype_name,
    gpu_case_inputs,
    student_error,
    sync,
)
from autograder.criteria.outputs import as_outputs, out_of_bounds_first
from autograder.guard.watch import Watch
from autograder.measure import capability
from autograder.measure.meters import TritonLaunches
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise, Shape

ON_GPU = "counted with torch.profiler: every kernel, copy and memset of the call"
INTERPRETED = "counted at Triton's launch entry (interpreter); benchmark size counted on GPU only (too slow to interpret)"


@dataclasses.dataclass(frozen=True)
class Point:
    """One place a call is counted: what the message calls it, its shape and its dtype."""

    place: str  # "shape 37x4099" or "the benchmark size 16384x8192"
    shape: Shape
    dtype: torch.dtype
    benchmark: bool = False
    key: str = ""  # the figure's name: launches_<key>

    def __str__(self) -> str:
        return f"{self.place} in {dtype_name(self.dtype)}"


def benchmark_shapes(ex: KernelExercise) -> dict[str, Shape]:
    """The shapes the performance criterion times: each of perf_shapes by name, else perf_shape."""
    if ex.perf_shapes:
        return dict(ex.perf_shapes)
    return {"": ex.perf_shape} if ex.perf_shape is not None else {}


def counting_points(ex: KernelExercise, cap: capability.Capability | None) -> list[Point]:
    """Where fusion counts on this device (cap None: the interpreter): the largest case shape in every graded
    dtype, then, on a GPU, every benchmark shape in the dtype it is timed in."""
    largest = max(ex.shapes, key=lambda s: math.prod(s.dims))
    points = [Point(f"shape {largest}", largest, dt, key=dtype_name(dt)) for dt in capability.graded_dtypes(cap)]
    if cap is None:
        return points
    timed = capability.timing_dtype(ex.perf_dtype, cap)
    for part, shape in benchmark_shapes(ex).items():
        name = f" ({part})" if part else ""
        points.append(Point(f"the benchmark size {shape}{name}", shape, timed, True,
                            "benchmark" + (f"_{part}" if part else "")))
    return points


@dataclasses.dataclass
class Count:
    kernels: int
    triton: int
    names: list[str]
    problems: list[str]


def count_call(ex: KernelExercise, fn, inputs: dict) -> Count:
    """One warm-up call, then one counted call on the same inputs; what is wrong with the counted call's launches
    (against ex.max_launches) and with the warm-up's outputs."""
    args = tuple(inputs.values())
    out = fn(*args)  # warm-up: compilation and autotuning stay out of the count
    sync()
    launches = TritonLaunches()
    watch = Watch(launches, poison=False)
    if runtime.has_gpu():
        def run():
            with launches, watch:
                fn(*args)
        n_kernels, names = count_gpu_kernels(run)
    else:
        with launches, watch:
            fn(*args)
        n_kernels, names = launches.count, launches.names
    problems = []
    if launches.count == 0:
        problems.append(f"no Triton kernel ran: {ex.function} must compute its result in a Triton kernel")
    ops = sorted(set(watch.torch_ops))
    if ops:
        problems.append(f"computes with torch operations outside the Triton kernel ({', '.join(ops)}); "
                        "only allocation and views are allowed there")
    if n_kernels > ex.max_launches:
        problems.append(f"launched {n_kernels} kernels ({', '.join(names[:8])}); at most {ex.max_launches} allowed")
    if ex.outputs_share_storage:
        outs = as_outputs(out, len(ex.output_names))
        if outs is None or len({o.untyped_storage().data_ptr() for o in outs}) > 1:
            problems.append(f"{', '.join(ex.output_names)} should be views (slices) of the one buffer the kernel "
                            "wrote, not separate tensors: a copy per output is extra traffic")
    return Count(n_kernels, launches.count, names, problems)


def places(points: list[Point]) -> str:
    """'shape 37x4099 in float32 and float16; the benchmark size 16384x8192 in bfloat16'."""
    by_place: dict[str, list[str]] = {}
    for p in points:
        by_place.setdefault(p.place, []).append(dtype_name(p.dtype))
    return "; ".join(f"{place} in {and_list(names)}" for place, names in by_place.items())


def and_list(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def fusion(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    points = counting_points(ex, capability.current())
    counts: dict[Point, Count] = {}
    for p in points:
        # The inputs of correctness's secret case at this shape and dtype, or of the performance criterion's first
        # set: nothing a call is handed tells that fusion is the one counting it.
        if p.benchmark:
            inputs = gpu_case_inputs(ex, p.shape, p.dtype, case_seed(cfg.secret_seed, "performance"))
        else:
            inputs = case_inputs(ex, p.shape, p.dtype, case_seed(cfg.secret_seed, p.shape, p.dtype))
        out_of_bounds = out_of_bounds_first(ex, fn, inputs)
        if out_of_bounds:
            return CriterionResult("fusion", FAILED, f"{p}: {out_of_bounds}")
        try:
            counts[p] = count_call(ex, fn, inputs)
        except Exception as exc:  # noqa: BLE001  whatever the student's code raises is reported
            return CriterionResult("fusion", FAILED, f"{p}: {student_error(exc, ex.function)}")
        del inputs  # a benchmark size's inputs go before the next are made
    failing = [p for p in points if counts[p].problems]
    worst = failing[0] if failing else max(points, key=lambda p: counts[p].kernels)
    figures = {"kernel_launches": counts[worst].kernels, "triton_launches": counts[worst].triton,
               "allowed": ex.max_launches, **{f"launches_{p.key}": counts[p].kernels for p in points}}
    how = ON_GPU if runtime.has_gpu() else INTERPRETED
    if failing:
        # The same problems at several places are said once, with every place they were found.
        groups: dict[tuple, list[Point]] = {}
        for p in failing:
            groups.setdefault(tuple(counts[p].problems), []).append(p)
        lines = [f"at {places(ps)}: {problem}" for problems, ps in groups.items() for problem in problems]
        return CriterionResult("fusion", FAILED, "\n".join(lines) + f" [{how}]", figures)
    low, high = min(c.kernels for c in counts.values()), max(c.kernels for c in counts.values())
    n = f"{high} kernel launch(es)" if low == high else f"{low} to {high} kernel launches"
    return CriterionResult(
        "fusion", PASSED, f"{n} a call at {places(points)}, at most {ex.max_launches} allowed, no torch compute "
        f"[{how}]", figures,
    )
