"""The correctness criterion itself replaced by one that always passes."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["autograder.criteria.kernel.GRADERS was changed"]}

import torch

from autograder.criteria import kernel
from autograder.report import CriterionResult

kernel.GRADERS["correctness"] = lambda ex, fn, cfg: CriterionResult("correctness", "passed", "all good")


def fused_chain(x, bias, alpha):
    return torch.zeros_like(x)
