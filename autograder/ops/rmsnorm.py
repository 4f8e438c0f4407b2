"""The torch side of rmsnorm: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/rmsnorm.py, which imports these; the grader never imports it."""

from __future__ import annotations

import math

import torch


def rmsnorm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Unfused, 3 full-size kernels (~5|x|): the norm of each row, x * rstd, * weight."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    rstd = torch.rsqrt(norm.square() / x.shape[-1] + eps)
    return (x * rstd.to(x.dtype)) * weight


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps) * weight.double()


def rmsnorm_bytes(x: torch.Tensor, weight: torch.Tensor, eps: float = 0.0) -> int:
    """Read x and weight once, write y once."""
    return 2 * x.numel() * x.element_size() + weight.numel() * weight.element_size()


def sqrt_fit(h, err) -> float:
    """Least-squares c in err ~ c * sqrt(h) (for the precision plot)."""
    num = sum(e * math.sqrt(v) for v, e in zip(h, err))
    return num / sum(h)
