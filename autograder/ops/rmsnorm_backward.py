"""The torch side of rmsnorm backward: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/rmsnorm_backward.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch

from .rmsnorm import rmsnorm_reference


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
