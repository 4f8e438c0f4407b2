"""The correctness criterion: every graded case and dtype against the float64 reference, special values, the
secret cases, and a probe for answers cached from an earlier call."""

from __future__ import annotations

import math
import os

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.cases import (
    MAX_LISTED,
    case_inputs,
    case_seed,
    dtype_name,
    graded_dtypes,
    secret_shapes,
)
from autograder.criteria.outputs import as_tuple, compare, run_case, run_watched, shares_storage
from autograder.guard.watch import Guarded
from autograder.progress import steps
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise


def _cache_probe(ex: KernelExercise, fn, seed: int) -> str | None:
    """Call fn again on the same tensors holding new data, after a few elements change, and on equal data in
    new tensors. An honest kernel follows every change and returns a new tensor each time; a function that
    caches its results, keyed on the tensors' identity or address or on (part of) their data, does not."""
    shape = next((s for s in ex.shapes if s.layout == "contiguous" and math.prod(s.dims) >= 64), ex.shapes[-1])
    dtype = torch.float32
    first = case_inputs(ex, shape, dtype, case_seed(seed, "cache", 1))
    second = {k: v if isinstance(v, torch.Tensor) else first[k] for k, v in
              case_inputs(ex, shape, dtype, case_seed(seed, "cache", 2)).items()}
    held = {k: Guarded.copy_of(v, f"input {k}") for k, v in first.items() if isinstance(v, torch.Tensor)}
    out_a, problems = run_watched(ex, fn, first, dtype, held)
    if problems:
        return None  # not a caching problem: the trials below find and report it
    kept = [o.clone() for o in out_a]
    for k, g in held.items():
        g.tensor.copy_(second[k])
    out_b, problems = run_watched(ex, fn, second, dtype, held)
    where = f"shape {shape}, float32"
    if problems:
        refs_a = as_tuple(ex.reference(**first))
        stale = out_b is not None and all(compare(o, r, ex.out_dtype(dtype, i), *ex.tolerance[dtype]) is None
                                          for i, (o, r) in enumerate(zip(out_b, refs_a)))
        if stale:
            return (f"{where}: called again on the same tensors holding new data, {ex.function} returned the "
                    "previous result: results are cached (keyed on the tensors' identity or address), not computed")
        return (f"{where}, the same tensors called again with new data: " + "; ".join(problems))
    if shares_storage(out_a, out_b):
        return (f"{where}: two calls returned the same output tensor: results are cached or one buffer is reused; "
                "allocate the output on every call")
    if not all(torch.equal(o, k) for o, k in zip(out_a, kept)):
        return (f"{where}: the first call's output changed when {ex.function} was called again: it writes into a "
                "buffer it returned before; allocate the output on every call")
    name = ex.free_input or next(iter(held))
    third = dict(second, **{name: second[name].clone()})
    flat = third[name].view(-1)
    gen = torch.Generator().manual_seed(case_seed(seed, "cache", 3))
    pos = torch.randperm(flat.numel(), generator=gen)[:8].to(flat.device)
    flat[pos] = torch.randn(8, generator=gen).to(device=flat.device, dtype=dtype)
    held[name].tensor.copy_(third[name])
    out_c, problems = run_watched(ex, fn, third, dtype, held)
    if problems:
        return (f"{where}: after 8 elements of {name} changed in place, the output did not follow: results are "
                "cached (keyed on part of the data?), not computed. " + "; ".join(problems))
    out_d, problems = run_watched(ex, fn, third, dtype)  # equal data in new tensors
    if problems:
        return (f"{where}, equal inputs in new tensors: " + "; ".join(problems))
    if shares_storage(out_c, out_d):
        return (f"{where}: for equal inputs in new tensors {ex.function} returned the tensor of an earlier call: "
                "results are cached (keyed on the data), not computed")
    return None


def _with_specials(inputs: dict, seed: int) -> dict:
    """Put NaN, +Inf and -Inf into the first tensor input."""
    name = next(k for k, v in inputs.items() if isinstance(v, torch.Tensor))
    x = inputs[name].clone()
    flat = x.view(-1) if x.is_contiguous() else None
    if flat is None or flat.numel() < 3:
        return inputs
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randperm(flat.numel(), generator=gen)[:3].to(flat.device)
    flat[pos] = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=x.dtype, device=x.device)
    return {**inputs, name: x}


def correctness(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    # First, whether fn computes at all: a cached result would make every case below misleading.
    cached = _cache_probe(ex, fn, cfg.secret_seed)
    if cached:
        return CriterionResult("correctness", FAILED, cached, {"cases": 1, "failed": 1})
    trials = [(f"trial {i + 1}", int.from_bytes(os.urandom(6), "little")) for i in range(cfg.trials)]
    trials.append(("secret case", cfg.secret_seed))
    failures, n_cases = [], 1  # the probe for cached results, above, is the first case
    cases = []
    for label, seed in trials:
        shapes = secret_shapes(ex) if label == "secret case" else ex.shapes
        cases += [(label, seed, shape, dtype) for shape in shapes for dtype in graded_dtypes()]
    for label, seed, shape, dtype in steps(cases, f"{ex.id} correctness"):
        if len(failures) >= 3 * MAX_LISTED:
            break  # enough evidence; the message says how many cases ran
        n_cases += 1
        problems = run_case(ex, fn, case_inputs(ex, shape, dtype, case_seed(seed, shape, dtype)), dtype)
        if problems:
            where = f"shape {shape}, {dtype_name(dtype)}, {label}" + (f" (seed {seed})" if label != "secret case" else "")
            failures.append(f"{where}: " + "; ".join(problems))
    if ex.special_values and not failures:
        for dtype in (torch.float32, torch.float16):
            n_cases += 1
            shape = ex.shapes[min(2, len(ex.shapes) - 1)]
            inputs = _with_specials(case_inputs(ex, shape, dtype, case_seed(cfg.secret_seed, "specials", dtype)), 7)
            problems = run_case(ex, fn, inputs, dtype)
            if problems:
                failures.append(f"shape {shape}, {dtype_name(dtype)}, inputs holding NaN/+Inf/-Inf: " + "; ".join(problems))
    figures = {"cases": n_cases, "failed": len(failures), "dtypes": ", ".join(map(dtype_name, graded_dtypes()))}
    if failures:
        listed = "\n".join(failures[:MAX_LISTED])
        more = f"\n... and {len(failures) - MAX_LISTED} more failing case(s)" if len(failures) > MAX_LISTED else ""
        total = len(cases) + 1
        ran = f"{n_cases} cases" if n_cases >= total else f"the first {n_cases} of {total} cases (stopped early)"
        return CriterionResult("correctness", FAILED, f"{len(failures)} of {ran} failed:\n{listed}{more}", figures)
    note = "" if runtime.has_gpu() else " (bf16 is graded on a GPU only)"
    return CriterionResult("correctness", PASSED, f"all {n_cases} cases match the reference{note}", figures)
