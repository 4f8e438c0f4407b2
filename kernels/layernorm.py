"""Fused LayerNorm forward: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim of x (M, H).

One read of x, one write of y (2|x|). The row stays in registers, so the statistics need no second trip to
HBM: the mean first, then the variance of the centred values. The one-line formula E[x^2] - E[x]^2 cancels
catastrophically when |mean| >> std: fp32 keeps about 7 digits, and with mean 300 and std 1, E[x^2] = 90001
leaves the variance only the last two of them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.vertical_fusion import (  # noqa: F401  the torch side of the op, shared with the grader
    layernorm_bytes,
    layernorm_eager,
    layernorm_reference,
)


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    # Shift by the row's first element before summing: the sums then hold deviations of the size of the
    # spread, not of the mean, and fp32 keeps their digits (a row of 300 +- 1 would lose them otherwise).
    # A scalar load of it (a cache hit): picking it out of x with tl.sum(tl.where(...)) would cost a third
    # reduction across the warps, 5% of the time on an H200 (0.91 of copy bandwidth instead of 0.96).
    shift = tl.load(x_ptr + row * stride_xm, mask=H > 0, other=0.0).to(tl.float32)
    d = tl.where(mask, x - shift, 0.0)
    mean_d = tl.sum(d, axis=0) / H
    xc = tl.where(mask, d - mean_d, 0.0)  # the padding lanes must not count in the variance
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over rows of x (M, H), H <= 16384."""
    if x.dim() != 2 or weight.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
        raise ValueError(f"want x (M, H), weight and bias (H,), got {tuple(x.shape)}, {tuple(weight.shape)}, "
                         f"{tuple(bias.shape)}")
    if x.stride(1) != 1 or x.shape[1] > 16384:
        raise ValueError("rows must be contiguous (they may be strided) and at most 16384 wide")
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    BLOCK_H = triton.next_power_of_2(H)
    num_warps = min(16, max(1, BLOCK_H // 1024))  # 32 values a thread: measured best at H = 4096
    _layernorm_kernel[(M,)](x, weight, bias, y, H, x.stride(0), y.stride(0), eps, BLOCK_H=BLOCK_H,
                            num_warps=num_warps)
    return y
