"""The criteria of a Triton kernel exercise (KernelExercise), by name."""

from __future__ import annotations

from autograder.criteria.correctness import correctness
from autograder.criteria.fusion import fusion
from autograder.criteria.memory import memory
from autograder.criteria.performance import performance
from autograder.criteria.precision import precision

GRADERS = {"correctness": correctness, "precision": precision, "performance": performance, "fusion": fusion,
           "memory": memory}
