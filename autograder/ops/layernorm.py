"""The torch side of layernorm: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/layernorm.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch


def layernorm_eager(x, weight, bias, eps):
    """Unfused: mean, centre, variance, normalise, scale, shift as separate kernels."""
    mean = x.float().mean(-1, keepdim=True)
    xc = x.float() - mean
    var = xc.square().mean(-1, keepdim=True)
    return ((xc * torch.rsqrt(var + eps)).to(x.dtype) * weight + bias)


def layernorm_reference(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    var = (xd - mean).square().mean(-1, keepdim=True)
    return (xd - mean) * torch.rsqrt(var + eps) * weight.double() + bias.double()


def layernorm_bytes(x, weight, bias, eps=0.0) -> int:
    return 2 * x.numel() * x.element_size() + 2 * weight.numel() * weight.element_size()
