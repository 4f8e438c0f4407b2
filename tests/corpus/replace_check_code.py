"""check() gets the code of a function that returns an all-passed report."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "graded"
ZERO = ["test_fused_chain_correctness", "test_fused_chain_fusion"]
FULL = ["test_cost_model"]
FLAGS = ["assigns autograder.check.__code__: replaces a function's code"]
SHOWS = ["grading refused", "the code of autograder.check.check was replaced"]

# %% cell fused_chain
import torch

import autograder


def _always_passed(exercise_id, fn, *, criteria=None):
    from autograder.report import CriterionResult, Report

    return Report(exercise_id, [CriterionResult(c, "passed", "all good") for c in criteria or ["correctness"]])


autograder.check.__code__ = _always_passed.__code__


def fused_chain(x, bias, alpha):
    return torch.zeros_like(x)
