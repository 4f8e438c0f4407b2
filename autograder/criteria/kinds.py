"""Every kind of exercise with the table of its graders, side by side: check() looks an exercise's kind up here
rather than asking isinstance of each kind in turn.

A kind is a spec class of specs/exercise.py and a criteria module whose GRADERS maps each criterion the kind is
graded on to a function (exercise, student's function, GradingConfig) -> CriterionResult. A new kind takes a
spec class, such a module, and one line in KINDS (docs/contributing.md).
"""

from __future__ import annotations

import dataclasses

from autograder.criteria import compiled, kernel, numeric, step, training
from autograder.specs.exercise import (
    CompiledExercise,
    Exercise,
    KernelExercise,
    NumericExercise,
    StepExercise,
    TrainingExercise,
)


@dataclasses.dataclass(frozen=True)
class Kind:
    spec: type  # the spec class (a subclass of Exercise)
    graders: dict  # criterion -> grader: the criteria module's own GRADERS, not a copy
    # Criteria whose result a judge holding the course's bars confirms (link/session.py confirm), where one grades.
    judged: tuple[str, ...] = ()


KINDS = (
    Kind(KernelExercise, kernel.GRADERS, judged=("performance",)),
    Kind(StepExercise, step.GRADERS),
    Kind(CompiledExercise, compiled.GRADERS),
    Kind(TrainingExercise, training.GRADERS),
    Kind(NumericExercise, numeric.GRADERS),
)
_BY_SPEC = {kind.spec: kind for kind in KINDS}


def kind_of(ex: Exercise) -> Kind:
    """The kind of ex: that of its spec class, or of the nearest class it derives from."""
    for cls in type(ex).__mro__:
        if cls in _BY_SPEC:
            return _BY_SPEC[cls]
    known = ", ".join(kind.spec.__name__ for kind in KINDS)
    raise TypeError(f"exercise {getattr(ex, 'id', ex)!r} is a {type(ex).__name__}, which no kind of exercise "
                    f"grades ({known}): add its Kind to autograder/criteria/kinds.py")
