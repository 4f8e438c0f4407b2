"""The memory criterion: what one call allocates beyond its inputs, against what the fused algorithm needs and
what the materialised intermediate would take."""

from __future__ import annotations

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.cases import case_inputs, case_seed, dtype_name, gpu_case_inputs, student_error, sync
from autograder.criteria.outputs import (
    as_outputs,
    as_tuple,
    out_of_bounds_first,
    output_problem,
    relative_error,
)
from autograder.guard.largest import largest_allocation
from autograder.measure.meters import TritonLaunches
from autograder.measure import capability
from autograder.measure.timing import extra_bytes
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**28 else f"{n / 2**20:.3g} MiB"


def memory(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """Peak memory a call allocates beyond its inputs, at the exercise's memory shape, against its bound.

    On a GPU the caching allocator's peak (exact); in the interpreter the sum of every storage torch creates
    during the call, an upper bound of the peak. Either way a version that materialises the intermediate
    (whose size the message gives) cannot stay under the bound.
    """

    dtype = capability.timing_dtype(ex.perf_dtype, capability.current()) if runtime.has_gpu() else torch.float32
    shape = ex.memory_shape if runtime.has_gpu() else ex.memory_shape_cpu or ex.memory_shape
    seed = case_seed(cfg.secret_seed, "memory")
    inputs = gpu_case_inputs(ex, shape, dtype, seed) if runtime.has_gpu() else case_inputs(ex, shape, dtype, seed)
    args = tuple(inputs.values())
    bound, materialised = ex.memory_bound(inputs), ex.materialised_bytes(inputs)
    launches = TritonLaunches()
    out_of_bounds = out_of_bounds_first(ex, fn, inputs)
    if out_of_bounds:
        return CriterionResult("memory", FAILED, out_of_bounds)
    try:
        fn(*args)  # warm-up: compilation and autotuning stay out of the measurement
        sync()
        if ex.memory_measure == "largest":  # a tiled loop in plain torch: no tile may be as large as the whole
            out, extra = largest_allocation(lambda: fn(*args))
            how = "the largest single tensor created during the call"
        else:
            out, extra = extra_bytes(lambda: fn(*args), launches)
            how = ("the CUDA allocator's peak" if runtime.has_gpu() else
                   "every allocation added up (the interpreter: an upper bound of the peak)")
    except Exception as exc:
        return CriterionResult("memory", FAILED, student_error(exc, ex.function))
    expected = as_tuple(ex.reference(**inputs))
    figures = {"extra_bytes": extra, "bound_bytes": bound, "materialised_bytes": materialised}
    where = f"shape {shape}, {dtype_name(dtype)}"
    form = output_problem(ex, out, expected, inputs, dtype)
    if form:
        return CriterionResult("memory", FAILED, f"{form} ({where}): memory not judged", figures)
    outs = as_outputs(out, len(expected))
    if not all(relative_error(o, e) < 5e-2 for o, e in zip(outs, expected)):
        return CriterionResult("memory", FAILED, f"wrong result at {where}: memory not judged (see correctness)",
                               figures)
    if launches.count == 0 and not ex.plain_torch:
        return CriterionResult("memory", FAILED, f"no Triton kernel ran: {ex.function} must compute its result in "
                               "a Triton kernel", figures)
    msg = (f"{_gib(extra)} allocated beyond the inputs (outputs included; {how}); allowed {_gib(bound)}. "
           f"{ex.memory_what} alone would take {_gib(materialised)}. {where}.")
    if ex.memory_measure == "largest":
        msg = (f"the largest tensor created during the call takes {_gib(extra)}; allowed {_gib(bound)}. "
               f"{ex.memory_what} alone would take {_gib(materialised)}. {where}.")
    if extra <= bound:
        return CriterionResult("memory", PASSED, msg, figures)
    hint = (f"\nThat is {extra / materialised:.2g} times {ex.memory_what}: it is being materialised. Reduce it "
            "tile by tile inside the kernel and keep only per-row statistics." if extra >= 0.5 * materialised
            else "")
    return CriterionResult("memory", FAILED, msg + hint, figures)
