"""Looks up the call stack and does no work when do_bench is the caller: timed, it is infinitely fast
(benchmark detection). The outputs of timed calls picked at random are compared afterwards: failed."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["a timed call", "returned a wrong result", "the timing means nothing"]}

import sys

import torch

from kernels.fused_chain import fused_chain as _right


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "do_bench":
            return True
        frame = frame.f_back
    return False


def fused_chain(x, bias, alpha):
    if _timed():
        return torch.empty_like(x)
    return _right(x, bias, alpha)
