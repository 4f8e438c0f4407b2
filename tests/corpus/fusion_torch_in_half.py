"""A Triton kernel for float32 inputs, PyTorch for the others: fusion counts a call in every graded dtype and
names the torch operations, and the dtype they ran in."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["in float16", "no Triton kernel ran", "torch operations outside the Triton kernel",
                    "torch silu"]}

import torch

from kernels.fused_chain import fused_chain as _fused


def fused_chain(x, bias, alpha):
    if x.dtype == torch.float32:
        return _fused(x, bias, alpha)
    return (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
