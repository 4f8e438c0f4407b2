"""RMSNorm variants that notebook 02 measures or hands to the reader: none of them answers an exercise.

* rmsnorm_two_pass: one loop over the row for the statistic, a second that reads x again to normalise and store.
  Registers stay bounded for any H, but x crosses HBM twice (3|x| of traffic against the one-pass 2|x|).
  Section 2 times it next to the eager version, PyTorch's own and the reader's one-pass kernel.
* rmsnorm_lowp_accumulator: the same two loops with the running sum of squares rounded to a chosen dtype after
  every addition: the experiment of section 5, which plots the error against H for bf16, fp16 and fp32
  accumulators. It is wrong on purpose and for that experiment only.
* rmsnorm_buggy: the kernel the precision-repair exercise (Exercise 4) starts from, as someone wrote it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_two_pass_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, H, BLOCK):  # pass 1: the statistic
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
    for start in range(0, H, BLOCK):  # pass 2: read x again, normalise, store
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_two_pass(x: torch.Tensor, weight: torch.Tensor, eps: float, BLOCK: int = 1024) -> torch.Tensor:
    """Any H, bounded registers, but x is read twice (the second read may hit L2 for short rows)."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("want a 2-D x with a contiguous last dimension")
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _rmsnorm_two_pass_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=BLOCK, num_warps=4)
    return y


@triton.jit
def _rmsnorm_lowp_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr,
                         ACC_DTYPE: tl.constexpr):
    # The precision bug on purpose: the running sum of squares is rounded to ACC_DTYPE after every add.
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=ACC_DTYPE)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc = (acc.to(tl.float32) + x * x).to(ACC_DTYPE)
    rstd = 1.0 / tl.sqrt(tl.sum(acc.to(tl.float32), axis=0) / H + eps)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


def rmsnorm_lowp_accumulator(x: torch.Tensor, weight: torch.Tensor, eps: float, acc_dtype=torch.bfloat16,
                             BLOCK: int = 32) -> torch.Tensor:
    """RMSNorm whose statistic is accumulated in acc_dtype: for the precision experiment only."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("want a 2-D x with a contiguous last dimension")
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _rmsnorm_lowp_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=BLOCK,
                               ACC_DTYPE=_TL_DTYPES[acc_dtype], num_warps=1)
    return y


@triton.jit
def _buggy_rmsnorm_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0).to(tl.float32) / H + eps)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_buggy(x, weight, eps):
    M, H = x.shape
    y = torch.empty_like(x)
    _buggy_rmsnorm_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=64)
    return y
