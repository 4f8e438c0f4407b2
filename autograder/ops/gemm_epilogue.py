"""The torch side of gemm epilogue: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/gemm_epilogue.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gemm_gelu_residual_eager(x, w, b, r):
    """cuBLAS with the bias in its epilogue (addmm), then GELU and the residual add as two more kernels."""
    return F.gelu(torch.addmm(b, x, w), approximate="tanh") + r


def gemm_gelu_residual_reference(x, w, b, r):
    return F.gelu(x.double() @ w.double() + b.double(), approximate="tanh") + r.double()


def random_epilogue_inputs(m: int, k: int, n: int, device="cuda", dtype=torch.bfloat16):
    """(x, w, b, r) for timing at (m, k) @ (k, n): unit-spread x and r, w scaled so that x @ w has unit spread
    too (the GELU then sees values on both sides of 0), a bias of spread 0.5."""
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = (torch.randn(k, n, device=device) / k**0.5).to(dtype)
    b = (0.5 * torch.randn(n, device=device)).to(dtype)
    r = torch.randn(m, n, device=device, dtype=dtype)
    return x, w, b, r


def gemm_gelu_residual_flops(x, w, b=None, r=None) -> int:
    return 2 * x.shape[0] * x.shape[1] * w.shape[1]


def gemm_gelu_residual_bytes(x, w, b=None, r=None, fused: bool = True) -> int:
    """The fused kernel's minimal traffic: read x, w, b and r once, write out once (unfused: 4|y| more)."""
    e = x.element_size()
    y = x.shape[0] * w.shape[1]
    return e * (x.numel() + w.numel() + w.shape[1] + (2 if fused else 6) * y)
