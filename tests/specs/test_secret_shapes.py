"""The secret extra shapes live in each exercise's spec (extra_shapes, extra_sizes for a step exercise): correctness's
secret case grades them, each is a shape the exercise's inputs can be made in, and no module of guard/ holds any."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from autograder import specs as registry
from autograder.criteria import step
from autograder.criteria.cases import case_inputs, secret_shapes
from autograder.specs.exercise import KernelExercise, StepExercise

ROOT = Path(__file__).resolve().parents[2]
KERNEL_EXERCISES = [ex for ex in registry.all_exercises() if isinstance(ex, KernelExercise) and ex.extra_shapes]


def test_most_kernel_exercises_keep_secret_shapes():
    assert len(KERNEL_EXERCISES) >= 18


@pytest.mark.parametrize("ex", KERNEL_EXERCISES, ids=lambda ex: ex.id)
def test_the_secret_case_grades_the_extra_shapes_after_the_notebooks(ex):
    graded = secret_shapes(ex, seed=12345)
    assert graded[: len(ex.shapes)] == tuple(dict.fromkeys(ex.shapes))
    assert set(ex.extra_shapes) <= set(graded)
    assert all(len(s.dims) == len(ex.shapes[0].dims) for s in ex.extra_shapes), ex.extra_shapes


@pytest.mark.parametrize("ex", KERNEL_EXERCISES, ids=lambda ex: ex.id)
def test_inputs_are_made_at_every_extra_shape(ex):
    started = time.perf_counter()
    for shape in ex.extra_shapes:
        inputs = case_inputs(ex, shape, torch.float32, 7, device="cpu")
        assert any(isinstance(v, torch.Tensor) for v in inputs.values()), shape
    assert time.perf_counter() - started < 60


def test_step_exercises_grade_their_extra_sizes_in_the_secret_case():
    steps = [ex for ex in registry.all_exercises() if isinstance(ex, StepExercise)]
    assert any(ex.extra_sizes for ex in steps)
    for ex in steps:
        assert set(ex.extra_sizes) <= set(step._secret_sizes(ex))


def test_no_module_of_guard_holds_exercise_shapes():
    for path in sorted((ROOT / "autograder" / "guard").glob("*.py")):
        text = path.read_text()
        assert "EXTRA_SHAPES" not in text and "Shape((" not in text, path.name
