"""Bad usage: alpha is not a parameter (it is fixed at 1)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness", "fusion"]
FAILS = {"correctness": ["fused_chain(x, bias)", "3 positional arguments"], "fusion": ["3 positional arguments"]}

from kernels.fused_chain import fused_chain as _compute


def fused_chain(x, bias):
    return _compute(x, bias, 1.0)
