"""check() itself gets new code that returns an all-passed report without calling anything."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["the code of autograder.check.check was replaced"]}

import torch

import autograder


def _always_passed(exercise_id, fn, *, criteria=None):
    from autograder.report import CriterionResult, Report

    return Report(exercise_id, [CriterionResult(c, "passed", "all good") for c in criteria or ["correctness"]])


autograder.check.__code__ = _always_passed.__code__


def fused_chain(x, bias, alpha):
    return torch.zeros_like(x)
