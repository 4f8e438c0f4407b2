"""check(): grade one student function on an exercise's criteria."""

from __future__ import annotations

import traceback

from . import config as config_mod
from . import registry
from . import grade_kernel, grade_numeric, grade_step
from .report import FAILED, CriterionResult, Report
from .sandbox import quiet
from .specs import CRITERIA, KernelExercise, StepExercise, check_callable


def check(exercise_id: str, fn, *, criteria=None) -> Report:
    """Grade fn on the exercise's criteria (all of them, or those named) and return a Report.

    Nothing is written to stderr: warnings and stray output are captured into the messages.
    """
    ex = registry.get(exercise_id)
    if criteria is None:
        chosen = list(ex.criteria)
    else:
        chosen = [criteria] if isinstance(criteria, str) else list(criteria)
        for c in chosen:
            if c not in CRITERIA:
                raise ValueError(f"unknown criterion {c!r}; the criteria are {', '.join(CRITERIA)}")
            if c not in ex.criteria:
                raise ValueError(f"{ex.id} is not graded on {c!r}; it is graded on {', '.join(ex.criteria)}")
    cfg = config_mod.load()
    if isinstance(ex, KernelExercise):
        graders = grade_kernel.GRADERS
    elif isinstance(ex, StepExercise):
        graders = grade_step.GRADERS
    else:
        graders = grade_numeric.GRADERS
    problem = check_callable(ex, fn)
    results = []
    for name in chosen:
        if problem:
            results.append(CriterionResult(name, FAILED, problem))
            continue
        with quiet() as noise:
            try:
                result = graders[name](ex, fn, cfg)
            except Exception as exc:  # a grader bug must still produce a result, not a crash
                result = CriterionResult(
                    name, FAILED, f"the grader itself failed ({type(exc).__name__}: {exc}); please report this\n"
                    + "".join(traceback.format_exception(exc)[-3:]),
                )
        if noise:
            result.message += "\n(captured while grading, kept off stderr:)\n" + "\n".join(noise)[-2000:]
        results.append(result)
    return Report(ex.id, results)
