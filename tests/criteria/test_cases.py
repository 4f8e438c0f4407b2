"""Precision draws its inputs from correctness's case pool: every call precision makes is also made by
correctness's secret case, on the same shape and the same data, so a submission cannot tell from what it is
handed which criterion is calling it (and behave well only where the error is measured)."""

from __future__ import annotations

import hashlib

import pytest
import torch

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import check, specs
from autograder.criteria.cases import precision_shapes, secret_shapes
from autograder.specs.exercise import KernelExercise
from kernels import multi_tensor_adamw as mta
from kernels.rmsnorm import rmsnorm as reference_rmsnorm


def _digest(value) -> tuple:
    """What a call is handed, as the submission could see it: shapes, strides, dtypes and the data."""
    if isinstance(value, torch.Tensor):
        raw = value.detach().cpu().contiguous().view(-1).view(torch.uint8)  # bytes of any dtype (numpy has no bf16)
        data = hashlib.sha256(raw.numpy().tobytes()).hexdigest()
        return ("tensor", tuple(value.shape), value.stride(), str(value.dtype), data)
    if isinstance(value, (list, tuple)):
        return tuple(_digest(v) for v in value)
    return ("value", repr(value))


def _recording(fn, seen: list):
    def recorded(*args):
        seen.append(tuple(_digest(a) for a in args))
        return fn(*args)

    return recorded


@pytest.mark.parametrize("exercise", [ex for ex in specs.all_exercises() if isinstance(ex, KernelExercise)
                                      and "precision" in ex.criteria], ids=lambda ex: ex.id)
def test_every_precision_shape_is_a_secret_case_of_correctness(exercise):
    assert set(precision_shapes(exercise)) <= set(secret_shapes(exercise))


@pytest.mark.parametrize("exercise, fn", [("02.rmsnorm", reference_rmsnorm), ("03.adamw_step", mta.adamw_step)])
def test_precision_calls_are_calls_correctness_makes(exercise, fn):
    by_correctness, by_precision = [], []
    report = check(exercise, _recording(fn, by_correctness), criteria=["correctness"])
    assert report.passed, report
    report = check(exercise, _recording(fn, by_precision), criteria=["precision"])
    assert report.passed, report
    assert by_precision
    unseen = [call for call in by_precision if call not in by_correctness]
    assert not unseen, f"{len(unseen)} of precision's {len(by_precision)} calls were never made by correctness"
