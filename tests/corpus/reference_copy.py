"""Reads the grader's own float64 reference and hands back its result, rounded."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["the result was computed by torch"]}

from autograder import specs as registry


def fused_chain(x, bias, alpha):
    return registry.get("01.fused_chain").reference(x, bias, alpha).to(x.dtype)
