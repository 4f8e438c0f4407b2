"""The precision criterion: the error against float64 measured over growing lengths, against what rounding to
the output dtype must cost."""

from __future__ import annotations

import math

import torch

from autograder.config import GradingConfig
from autograder.criteria.cases import case_inputs, case_seed, dtype_name, graded_dtypes, precision_shapes
from autograder.criteria.outputs import (
    as_tuple,
    call_case,
    diagnose_outputs,
    form_problem,
    relative_error,
)
from autograder.link.session import Answer, cases, open_session
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise


def _slope(lengths, errs) -> float:
    """Least-squares exponent p of err ~ length**p (log-log fit over every point)."""
    pts = [(math.log(n), math.log(e)) for n, e in zip(lengths, errs) if e > 0]
    if len(pts) < 2:
        return 0.0
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def precision_bound(ex: KernelExercise, inputs: dict, refs: tuple, dtype) -> tuple[float, float, str, str]:
    """(bound on ||out - ref|| / ||ref||, what rounding the exact result to the output dtype costs, that dtype's
    name, a note when the bound comes from the arithmetic the inputs force)."""
    # Rounding the exact result to the output dtype (float32 outputs of float16 inputs too).
    ideal, rounded_to = max((relative_error(r.to(ex.out_dtype(dtype, i)), r), dtype_name(ex.out_dtype(dtype, i)))
                            for i, r in enumerate(refs))
    bound = max(ex.precision_factor * ideal, ex.precision_floor.get(dtype, 0.0))
    floor_note = ""
    if ex.precision_floor_from_inputs is not None:
        floor, why = ex.precision_floor_from_inputs(inputs, dtype)
        if floor > bound:
            bound, floor_note = floor, f"; the bound is what {why} may cost"
    return bound, ideal, rounded_to, floor_note


class Cases:
    """Precision's cases (the secret case's inputs at every precision shape, per graded dtype) and its verdict: the
    error of each against its bound, and how the error grows with the reduced length. Made where the verdict is
    made: in check()'s process with the public seed, in the judge when grading is for credit."""

    def __init__(self, ex: KernelExercise, cfg: GradingConfig, device: str | None = None):
        self.ex, self.seed, self.device = ex, cfg.secret_seed, device
        # The exercise's shapes name the figures (rel_err_float16@16384); the calls use those drawn from the seed.
        self.shapes = precision_shapes(ex)
        drawn = dict(zip(self.shapes, precision_shapes(ex, self.seed)))
        self.todo = [(dtype, shape, drawn[shape]) for dtype in graded_dtypes() for shape in self.shapes]
        self.measured: dict = {}  # dtype -> [(shape, err, bound, ideal)]
        self.figures, self.failures, self.hint, self.stopped, self.pending = {}, {}, None, None, None

    def next_case(self) -> dict | None:
        if self.stopped is not None or not self.todo:
            return None
        dtype, nominal, shape = self.todo.pop(0)
        # The secret case's inputs at this shape (correctness grades them too): the same draw, the same seed.
        inputs = case_inputs(self.ex, shape, dtype, case_seed(self.seed, shape, dtype), self.device)
        self.pending = (dtype, nominal, shape, inputs)
        return inputs

    def answer(self, answer: Answer) -> None:
        if self.pending is None:
            raise ValueError("an answer to no case: ask for the next case first")
        (dtype, nominal, shape, inputs), self.pending = self.pending, None
        ex, name = self.ex, dtype_name(dtype)
        if answer.outs is None or answer.problems:
            self.stopped = "; ".join(answer.problems)
            return
        refs = as_tuple(ex.reference(**inputs))
        form = next((p for p in (form_problem(ex, i, o, r, dtype) for i, (o, r) in enumerate(zip(answer.outs, refs)))
                     if p), None) or answer.late
        if form:
            self.stopped = form
            return
        err = max(relative_error(o, r) for o, r in zip(answer.outs, refs))
        bound, ideal, rounded_to, floor_note = precision_bound(ex, inputs, refs, dtype)
        self.measured.setdefault(dtype, []).append((shape, err, bound, ideal))
        key = name if len(self.shapes) == 1 else f"{name}@{nominal.dims[ex.reduced_axis]}"
        self.figures[f"rel_err_{key}"] = err
        self.figures[f"bound_{key}"] = bound
        found = self.failures.setdefault(dtype, [])
        if not math.isfinite(err):
            found.append(
                f"{name}, shape {shape}: the output holds inf or NaN where the exact result is finite: an "
                f"intermediate left {name}'s range ({torch.finfo(dtype).max:.6g} at most); keep sums and products "
                "in float32"
            )
        elif not err <= bound:  # NaN fails too
            self.hint = self.hint or (diagnose_outputs(ex, answer.outs, inputs) if ex.diagnoses else None)
            found.append(
                f"{name}, shape {shape}: ||out - ref|| / ||ref|| = {err:.3g}, above the bound {bound:.3g} "
                f"(rounding the exact result to {rounded_to} alone costs {ideal:.3g}{floor_note})"
            )

    def _growth(self, dtype) -> str | None:
        """The failure when the error grows with the reduced length (low-precision accumulation), else None."""
        ex, name, measured = self.ex, dtype_name(dtype), self.measured.get(dtype, [])
        if len(self.shapes) < 2 or len(measured) < 2:
            return None
        lengths = [s.dims[ex.reduced_axis] for s, _, _, _ in measured]
        errs = [e for _, e, _, _ in measured]
        p = _slope(lengths, [max(e - ideal, 0.0) for _, e, _, ideal in measured])  # what the kernel adds
        self.figures[f"growth_exponent_{name}"] = p
        if any(e / b > 1 if b > 0 else True for _, e, b, _ in measured) and p > 0.25:
            return (f"{name}: the error grows like {ex.reduced_dim}^{p:.2f} with the reduced length (from "
                    f"{errs[0]:.2g} at {ex.reduced_dim}={lengths[0]} to {errs[-1]:.2g} at {ex.reduced_dim}={lengths[-1]}): "
                    "the signature of accumulating in low precision. Keep the running sums in float32.")
        return None

    def verdict(self) -> CriterionResult:
        if self.stopped is not None:
            return CriterionResult("precision", FAILED, self.stopped, self.figures)
        if self.todo or self.pending is not None:
            return CriterionResult("precision", FAILED, "grading stopped before every case was answered", self.figures)
        failures = []
        for dtype in graded_dtypes():
            failures += self.failures.get(dtype, [])
            growth = self._growth(dtype)
            if growth:
                failures.append(growth)
        if failures:
            # A recognised wrong formula explains the error better than the generic advice on accumulators.
            note = f"\n{self.hint}" if self.hint else (f"\n{self.ex.precision_note}" if self.ex.precision_note else "")
            return CriterionResult("precision", FAILED, "\n".join(failures) + note, self.figures)
        figures = self.figures
        worst = max(v / figures["bound_" + k[len("rel_err_"):]] for k, v in figures.items() if k.startswith("rel_err_"))
        return CriterionResult(
            "precision", PASSED,
            f"relative error within bounds for every dtype and size (worst at {worst:.2f} of its bound)", figures,
        )


def precision(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    session = open_session(ex, "precision", cfg, Cases)
    for inputs in cases(session):
        session.answer(call_case(ex, fn, inputs))
    return session.verdict()
