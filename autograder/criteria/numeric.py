"""Correctness for exercises whose answer is a number (or a tuple of numbers): cost models, byte counts."""

from __future__ import annotations

import math
import random

from autograder.config import GradingConfig
from autograder.criteria.cases import student_error
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import NumericExercise


def _as_numbers(value) -> tuple[float, ...] | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),)
    if isinstance(value, (tuple, list)):
        try:
            return tuple(float(v) for v in value)
        except (TypeError, ValueError):
            return None
    try:  # numpy or torch scalars
        return (float(value),)
    except (TypeError, ValueError):
        return None


def numeric_correctness(ex: NumericExercise, fn, cfg: GradingConfig) -> CriterionResult:
    rngs = [("trial", random.Random()) for _ in range(cfg.trials)] + [("secret case", random.Random(cfg.secret_seed))]
    failures, n = [], 0
    for label, rng in rngs:
        for args in ex.cases(rng):
            n += 1
            expected = _as_numbers(ex.reference(*args))
            try:
                got_raw = fn(*args)
            except Exception as exc:
                return CriterionResult("correctness", FAILED, student_error(exc, ex.function), {"cases": n})
            got = _as_numbers(got_raw)
            shown = args if label != "secret case" else "(secret arguments)"
            if got is None or len(got) != len(expected):
                failures.append(
                    f"{ex.function}{shown} returned {got_raw!r}; expected {len(expected)} number(s) like {ex.signature}"
                )
                continue
            if not all(math.isclose(g, e, rel_tol=ex.rtol, abs_tol=1e-30) for g, e in zip(got, expected)):
                hint = ex.diagnose(args, got, expected) if ex.diagnose else None
                msg = f"{ex.function}{shown} returned {_fmt(got)}, expected {_fmt(expected)}"
                failures.append(msg + (f"\n  likely cause: {hint}" if hint else ""))
    figures = {"cases": n, "failed": len(failures)}
    if failures:
        return CriterionResult("correctness", FAILED, f"{len(failures)} of {n} cases wrong:\n" + "\n".join(failures[:4]), figures)
    return CriterionResult("correctness", PASSED, f"all {n} cases match the model (rel. tol. {ex.rtol:g})", figures)


def _fmt(nums) -> str:
    return "(" + ", ".join(f"{x:.6g}" for x in nums) + ")"


GRADERS = {"correctness": numeric_correctness}
