"""The correctness criterion: every graded case and dtype against the float64 reference, special values, the
secret cases, and a probe for answers cached from an earlier call."""

from __future__ import annotations

import math
import os

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria import keep_mask
from autograder.criteria.cases import (
    MAX_LISTED,
    case_inputs,
    case_seed,
    collapse,
    dtype_name,
    graded_dtypes,
    secret_shapes,
)
from autograder.criteria.outputs import (
    as_tuple,
    call_case,
    compare,
    judge_answer,
    run_watched,
    shares_storage,
)
from autograder.guard.watch import Guarded
from autograder.link.session import Answer, cases, open_session
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


class Cases:
    """Correctness's cases, in order, and its verdict: fresh random trials at the exercise's shapes, the secret
    case at every shape (precision's included), then inputs holding NaN and infinities. Made where the verdict
    is made: in check()'s process with the public seed, in the judge when grading is for credit."""

    def __init__(self, ex: KernelExercise, cfg: GradingConfig, device: str | None = None):
        self.ex, self.secret_seed, self.device = ex, cfg.secret_seed, device
        trials = [(f"trial {i + 1}", int.from_bytes(os.urandom(6), "little")) for i in range(cfg.trials)]
        trials.append(("secret case", cfg.secret_seed))
        self.todo = [(label, seed, shape, dtype) for label, seed in trials
                     for shape in (secret_shapes(ex, cfg.secret_seed) if label == "secret case" else ex.shapes)
                     for dtype in graded_dtypes()]
        self.total = len(self.todo) + 1  # the probe for cached results is the first case
        shape = ex.shapes[min(2, len(ex.shapes) - 1)]
        self.specials = [(shape, dtype) for dtype in (torch.float32, torch.float16)] if ex.special_values else []
        self.failures, self.n_cases, self.pending = [], 1, None

    def next_case(self) -> dict | None:
        """The inputs of the next case, or None when grading is done (every case, or enough failures)."""
        if len(self.failures) >= 3 * MAX_LISTED:
            return None  # enough evidence; the message says how many cases ran
        if self.todo:
            label, seed, shape, dtype = self.todo.pop(0)
            inputs = case_inputs(self.ex, shape, dtype, case_seed(seed, shape, dtype), self.device)
            where = f"shape {shape}, {dtype_name(dtype)}, {label}" + (f" (seed {seed})" if label != "secret case" else "")
        elif self.specials and not self.failures:
            shape, dtype = self.specials.pop(0)
            drawn = case_inputs(self.ex, shape, dtype, case_seed(self.secret_seed, "specials", dtype), self.device)
            inputs, where = _with_specials(drawn, 7), f"shape {shape}, {dtype_name(dtype)}, inputs holding NaN/+Inf/-Inf"
        else:
            return None
        self.n_cases += 1
        self.pending = (where, inputs, dtype)
        return inputs

    def answer(self, answer: Answer) -> None:
        if self.pending is None:
            raise ValueError("an answer to no case: ask for the next case first")
        (where, inputs, dtype), self.pending = self.pending, None
        problems = judge_answer(self.ex, inputs, dtype, answer)
        if problems:
            self.failures.append((where, "; ".join(problems)))

    def verdict(self) -> CriterionResult:
        figures = {"cases": self.n_cases, "failed": len(self.failures),
                   "dtypes": ", ".join(map(dtype_name, graded_dtypes()))}
        unfinished = self.pending is not None or (len(self.failures) < 3 * MAX_LISTED and (
            self.todo or (self.specials and not self.failures)))
        if unfinished:
            return CriterionResult("correctness", FAILED, f"grading stopped after {self.n_cases} of {self.total} "
                                   "cases: every case must be answered", figures)
        if self.failures:
            lines = collapse(self.failures)
            listed = "\n".join(lines[:MAX_LISTED])
            n = len(self.failures)
            more = f"\n... and {len(lines) - MAX_LISTED} more distinct failure(s)" if len(lines) > MAX_LISTED else ""
            ran = f"{self.n_cases} cases" if self.n_cases >= self.total else \
                f"the first {self.n_cases} of {self.total} cases (stopped early)"
            return CriterionResult("correctness", FAILED, f"{n} of {ran} failed:\n{listed}{more}", figures)
        note = "" if runtime.has_gpu() else " (bf16 is graded on a GPU only)"
        return CriterionResult("correctness", PASSED, f"all {self.n_cases} cases match the reference{note}", figures)


def correctness(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    session = open_session(ex, "correctness", cfg, Cases)
    # First, whether fn computes at all: a cached result would make every case below misleading.
    cached = _cache_probe(ex, fn, cfg.secret_seed)
    if cached:
        return session.fail(CriterionResult("correctness", FAILED, cached, {"cases": 1, "failed": 1}))
    if ex.keep_rates:  # a dropout drawn in the kernel: the mask it drew, before the values given that mask
        wrong = keep_mask.problem(ex, fn, cfg.secret_seed)
        if wrong:
            return session.fail(CriterionResult("correctness", FAILED, wrong, {"cases": 1, "failed": 1}))
    for inputs in steps(cases(session), f"{ex.id} correctness"):
        session.answer(call_case(ex, fn, inputs))
    return session.verdict()
