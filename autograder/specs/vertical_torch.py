"""Notebook 02's operations on the torch side: the unfused eager versions, the float64 references and the bytes of
RMSNorm, add + RMSNorm, LayerNorm and RMSNorm's backward. The exercises of notebook 02 grade against them and the
kernels of kernels/ import them; nothing here is graded itself."""

from __future__ import annotations

import math

import torch

# ---------------------------------------------------------------- the torch side: rmsnorm
# The torch side of rmsnorm: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/rmsnorm.py, which imports these; the grader never imports it.

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


# ---------------------------------------------------------------- the torch side: add_rmsnorm
# The torch side of add rmsnorm: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/add_rmsnorm.py, which imports these; the grader never imports it.

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


# ---------------------------------------------------------------- the torch side: layernorm
# The torch side of layernorm: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/layernorm.py, which imports these; the grader never imports it.

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


# ---------------------------------------------------------------- the torch side: rmsnorm_backward
# The torch side of rmsnorm backward: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/rmsnorm_backward.py, which imports these; the grader never imports it.

def rmsnorm_backward_eager(x, weight, dy, eps):
    """What autograd does for the eager RMSNorm: many kernels."""
    xr = x.detach().requires_grad_()
    wr = weight.detach().requires_grad_()
    xf = xr.float()
    y = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype) * wr
    y.backward(dy)
    return xr.grad, wr.grad


def rmsnorm_backward_reference(x, weight, dy, eps):
    """Float64 autograd through the reference forward."""
    xd = x.detach().double().requires_grad_()
    wd = weight.detach().double().requires_grad_()
    rmsnorm_reference(xd, wd, eps).backward(dy.double())
    return xd.grad, wd.grad


def rmsnorm_backward_bytes(x, weight, dy, eps=0.0) -> int:
    """Read x and dy, write dx; weight and dweight once each."""
    return 3 * x.numel() * x.element_size() + 2 * weight.numel() * weight.element_size()
