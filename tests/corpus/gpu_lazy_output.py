"""Returns a tensor subclass: a placeholder whose values could be computed when they are read, after the timer
stopped (gpu-mode/reference-kernels issue #162, PR #161). Outputs must be plain torch.Tensor objects."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["not a plain torch.Tensor", "LazyResult"]}

import torch

from kernels.fused_chain import fused_chain as _right


class LazyResult(torch.Tensor):
    pass


def fused_chain(x, bias, alpha):
    return _right(x, bias, alpha).as_subclass(LazyResult)
