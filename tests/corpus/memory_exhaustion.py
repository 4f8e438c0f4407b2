"""Allocates a workspace of 16 TiB: the allocation fails, and the message says memory ran out."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["Memory ran out"]}

import torch

from kernels.fused_chain import fused_chain as _compute


def fused_chain(x, bias, alpha):
    workspace = torch.empty(1 << 42, dtype=torch.float32, device=x.device)  # meant to be 1 << 12
    return _compute(x, bias, alpha) if workspace.numel() else None
