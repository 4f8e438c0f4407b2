"""Fused dropout + residual add + RMSNorm: h = x + dropout(y, p);  out = rmsnorm(h) * weight. Returns (out, h).

Element (i, j) of y is kept where tl.rand(seed, i * H + j) > p and then scaled by 1 / (1 - p); the keep mask
is drawn inside the kernel from the seed, never stored: the backward (DropoutAddRMSNormFunction) draws the same
mask again from the same seed. Bytes through HBM (|x| per activation):
    unfused: dropout (read y, write the result and a one-byte mask), add (read 2, write 1),
             RMSNorm in 3 kernels (~5)                                          ~10|x| and the mask
    fused:   read x and y, write out and h                                                   4|x|
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.fused_dropout import (  # noqa: F401  the torch side of the op, shared with the grader
    dropout_add_rmsnorm_bytes,
    dropout_add_rmsnorm_eager,
    dropout_add_rmsnorm_reference,
)
from kernels.rmsnorm_backward import rmsnorm_backward


@triton.jit
def _dropout_add_rmsnorm_kernel(x_ptr, y_ptr, w_ptr, out_ptr, h_ptr, H, stride_xm, stride_ym, stride_om,
                                stride_hm, p, seed, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    # One random number per element of the logical (M, H) tensor: the offset is the element's index in it, so
    # no two elements (in one row or across rows) share a draw, whatever the rows' strides.
    keep = tl.rand(seed, row * H + cols) > p
    h = (x + tl.where(keep, y * (1.0 / (1.0 - p)), 0.0)).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * stride_hm + cols, h, mask=mask)
    hf = h.to(tl.float32)  # the norm of the residual as stored, as in add + RMSNorm
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_om + cols, (hf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def dropout_add_rmsnorm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, p: float, seed: int, eps: float):
    """(rmsnorm(h) * weight, h) with h = x + dropout(y, p), the mask drawn in the kernel from seed: one launch,
    2 reads and 2 writes."""
    if x.dim() != 2 or y.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"want x, y (M, H) and weight (H,), got {tuple(x.shape)}, {tuple(y.shape)}, "
                         f"{tuple(weight.shape)}")
    if x.stride(1) != 1 or y.stride(1) != 1 or x.shape[1] > 16384:
        raise ValueError("rows must be contiguous (they may be strided) and at most 16384 wide")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"the drop probability p must be in [0, 1), got {p}")
    if not 0 <= seed < 2**31:
        raise ValueError(f"the seed must be in [0, 2**31), got {seed}")
    M, H = x.shape
    out = torch.empty((M, H), dtype=x.dtype, device=x.device)
    h = torch.empty((M, H), dtype=x.dtype, device=x.device)
    BLOCK_H = triton.next_power_of_2(H)
    num_warps = min(16, max(1, BLOCK_H // 1024))  # as add + RMSNorm; the random numbers add integer work only
    _dropout_add_rmsnorm_kernel[(M,)](x, y, weight, out, h, H, x.stride(0), y.stride(0), out.stride(0), h.stride(0),
                                      p, seed, eps, BLOCK_H=BLOCK_H, num_warps=num_warps)
    return out, h


@triton.jit
def _dropout_backward_kernel(dh_ptr, dy_ptr, H, stride_hm, stride_ym, p, seed, BLOCK_H: tl.constexpr):
    """dy = dh * keep / (1 - p) for one row, keep drawn again from (seed, row * H + col) as the forward drew it."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    dh = tl.load(dh_ptr + row * stride_hm + cols, mask=mask, other=0.0).to(tl.float32)
    keep = tl.rand(seed, row * H + cols) > p
    tl.store(dy_ptr + row * stride_ym + cols, tl.where(keep, dh * (1.0 / (1.0 - p)), 0.0).to(dy_ptr.dtype.element_ty),
             mask=mask)


def dropout_backward(dh: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """The gradient reaching y through h = x + dropout(y, p): dh where the forward kept, scaled, else 0; the mask
    drawn again from the seed, never loaded."""
    M, H = dh.shape
    dy = torch.empty((M, H), dtype=dh.dtype, device=dh.device)
    BLOCK_H = triton.next_power_of_2(H)
    _dropout_backward_kernel[(M,)](dh, dy, H, dh.stride(0), dy.stride(0), p, seed, BLOCK_H=BLOCK_H,
                                   num_warps=min(16, max(1, BLOCK_H // 1024)))
    return dy


class DropoutAddRMSNormFunction(torch.autograd.Function):
    """(out, h) = dropout_add_rmsnorm(x, y, weight, p, seed, eps) with a backward that keeps no mask: it saves h
    (the residual stream, needed anyway) and the seed, and draws the mask again."""

    @staticmethod
    def forward(ctx, x, y, weight, p, seed, eps):
        out, h = dropout_add_rmsnorm(x, y, weight, p, seed, eps)
        ctx.save_for_backward(h, weight)
        ctx.p, ctx.seed, ctx.eps = p, seed, eps
        return out, h

    @staticmethod
    def backward(ctx, dout, dh_direct):
        h, weight = ctx.saved_tensors
        dh, dweight = rmsnorm_backward(h, weight, dout.contiguous(), ctx.eps)  # through the norm
        if dh_direct is not None:
            dh = dh + dh_direct  # h is an output too: the residual stream's own gradient
        return dh, dropout_backward(dh, ctx.p, ctx.seed), dweight, None, None, None
