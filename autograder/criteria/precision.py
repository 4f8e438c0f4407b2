"""The precision criterion: the error against float64 measured over growing lengths, against what rounding to
the output dtype must cost."""

from __future__ import annotations

import math

import torch

from autograder.config import GradingConfig
from autograder.criteria.cases import case_inputs, case_seed, dtype_name, graded_dtypes, precision_shapes
from autograder.criteria.outputs import (
    as_outputs,
    as_tuple,
    diagnose_outputs,
    guarded_call,
    not_by_a_kernel,
    output_problem,
    relative_error,
)
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


def precision(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    figures, failures, hint = {}, [], None
    shapes = precision_shapes(ex)
    for dtype in graded_dtypes():
        name = dtype_name(dtype)
        errs, excess, ratios = [], [], []
        for shape in shapes:
            # The secret case's inputs at this shape (correctness grades them too): the same draw, the same seed.
            inputs = case_inputs(ex, shape, dtype, case_seed(cfg.secret_seed, shape, dtype))
            refs = as_tuple(ex.reference(**inputs))
            out, watch, problems = guarded_call(ex, fn, inputs)
            if problems:
                return CriterionResult("precision", FAILED, "; ".join(problems), figures)
            form = output_problem(ex, out, refs, inputs, dtype)
            if form:
                return CriterionResult("precision", FAILED, form, figures)
            outs = as_outputs(out, len(refs))
            not_computed = not_by_a_kernel(ex, watch, outs)
            if not_computed:
                return CriterionResult("precision", FAILED, not_computed, figures)
            err = max(relative_error(o, r) for o, r in zip(outs, refs))
            bound, ideal, rounded_to, floor_note = precision_bound(ex, inputs, refs, dtype)
            errs.append(err)
            excess.append(max(err - ideal, 0.0))  # what the kernel adds to the output's own rounding
            ratios.append(err / bound if bound > 0 else math.inf)
            key = name if len(shapes) == 1 else f"{name}@{shape.dims[ex.reduced_axis]}"
            figures[f"rel_err_{key}"] = err
            figures[f"bound_{key}"] = bound
            if not math.isfinite(err):
                failures.append(
                    f"{name}, shape {shape}: the output holds inf or NaN where the exact result is finite: an "
                    f"intermediate left {name}'s range ({torch.finfo(dtype).max:.6g} at most); keep sums and products "
                    "in float32"
                )
            elif not err <= bound:  # NaN fails too
                hint = hint or (diagnose_outputs(ex, outs, inputs) if ex.diagnoses else None)
                failures.append(
                    f"{name}, shape {shape}: ||out - ref|| / ||ref|| = {err:.3g}, above the bound {bound:.3g} "
                    f"(rounding the exact result to {rounded_to} alone costs {ideal:.3g}{floor_note})"
                )
        if len(shapes) > 1:
            lengths = [s.dims[ex.reduced_axis] for s in shapes]
            p = _slope(lengths, excess)
            figures[f"growth_exponent_{name}"] = p
            if any(r > 1 for r in ratios) and p > 0.25:
                failures.append(
                    f"{name}: the error grows like {ex.reduced_dim}^{p:.2f} with the reduced length (from "
                    f"{errs[0]:.2g} at {ex.reduced_dim}={lengths[0]} to {errs[-1]:.2g} at {ex.reduced_dim}={lengths[-1]}): "
                    "the signature of accumulating in low precision. Keep the running sums in float32."
                )
    if failures:
        # A recognised wrong formula explains the error better than the generic advice on accumulators.
        note = f"\n{hint}" if hint else (f"\n{ex.precision_note}" if ex.precision_note else "")
        return CriterionResult("precision", FAILED, "\n".join(failures) + note, figures)
    worst = max(v / figures["bound_" + k[len("rel_err_"):]] for k, v in figures.items() if k.startswith("rel_err_"))
    return CriterionResult(
        "precision", PASSED, f"relative error within bounds for every dtype and size (worst at {worst:.2f} of its bound)",
        figures,
    )
