"""The torch side of fused chain: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/fused_chain.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch


def fused_chain_eager(x: torch.Tensor, bias: torch.Tensor, alpha: float) -> torch.Tensor:
    """The unfused version: three kernels, three round trips through memory."""
    return alpha * torch.nn.functional.silu(x + bias)


def fused_chain_reference(x: torch.Tensor, bias: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exact up to float64 rounding: the yardstick for correctness and precision."""
    z = x.double() + bias.double()
    return alpha * z * torch.sigmoid(z)


def fused_chain_bytes(x: torch.Tensor, bias: torch.Tensor, alpha: float = 1.0) -> int:
    """The fewest bytes any implementation must move: read x and bias once, write y once."""
    return 2 * x.numel() * x.element_size() + bias.numel() * bias.element_size()
