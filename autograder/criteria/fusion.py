"""The fusion criterion: how many kernels one call launches, counted on the GPU (or by Triton's launch entry
points in the interpreter)."""

from __future__ import annotations

import math

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.cases import case_inputs, case_seed, count_gpu_kernels, student_error, sync
from autograder.criteria.outputs import as_outputs, out_of_bounds_first
from autograder.guard.watch import TritonLaunches, Watch
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise


def fusion(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    shape = max(ex.shapes, key=lambda s: math.prod(s.dims))
    inputs = case_inputs(ex, shape, torch.float32, case_seed(cfg.secret_seed, "fusion"))
    args = tuple(inputs.values())
    out_of_bounds = out_of_bounds_first(ex, fn, inputs)
    if out_of_bounds:
        return CriterionResult("fusion", FAILED, out_of_bounds)
    try:
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
    except Exception as exc:
        return CriterionResult("fusion", FAILED, student_error(exc, ex.function))
    ops = sorted(set(watch.torch_ops))
    figures = {"kernel_launches": n_kernels, "triton_launches": launches.count, "allowed": ex.max_launches}
    how = "counted with torch.profiler" if runtime.has_gpu() else "counted at Triton's launch entry (interpreter)"
    problems = []
    if launches.count == 0:
        problems.append(f"no Triton kernel ran: {ex.function} must compute its result in a Triton kernel")
    if ops:
        problems.append(
            f"computes with torch operations outside the Triton kernel ({', '.join(ops)}); "
            "only allocation and views are allowed there"
        )
    if n_kernels > ex.max_launches:
        problems.append(f"launched {n_kernels} kernels ({', '.join(names[:8])}); at most {ex.max_launches} allowed")
    if ex.outputs_share_storage:
        outs = as_outputs(out, len(ex.output_names))
        if outs is None or len({o.untyped_storage().data_ptr() for o in outs}) > 1:
            problems.append(
                f"{', '.join(ex.output_names)} should be views (slices) of the one buffer the kernel wrote, "
                "not separate tensors: a copy per output is extra traffic"
            )
    if problems:
        return CriterionResult("fusion", FAILED, "\n".join(problems) + f" [{how}]", figures)
    return CriterionResult(
        "fusion", PASSED, f"{n_kernels} kernel launch(es), at most {ex.max_launches} allowed, no torch compute [{how}]",
        figures,
    )
