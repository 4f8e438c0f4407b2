"""The torch side of add rmsnorm: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/add_rmsnorm.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch

from .rmsnorm import rmsnorm_eager


def add_rmsnorm_eager(x, residual, weight, eps):
    s = x + residual
    return rmsnorm_eager(s, weight, eps), s


def add_rmsnorm_reference(x, residual, weight, eps):
    # The new residual as the storage dtype holds it; the norm of that value, exactly.
    s = (x.double() + residual.double()).to(x.dtype).double()
    y = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + eps) * weight.double()
    return y, s


def add_rmsnorm_bytes(x, residual, weight, eps=0.0) -> int:
    """Read x and residual, write y and the new residual (weight is negligible but counted)."""
    return 4 * x.numel() * x.element_size() + weight.numel() * weight.element_size()
