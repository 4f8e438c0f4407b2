"""An RMSNorm that keeps its statistic in float32 only where it guesses the precision criterion is looking (8 rows
and a power-of-two width, the shapes the notebook's precision plot uses), and sums the squares in float16
everywhere else. The grader measures precision at shapes drawn from its seed, so the guess misses."""
EXERCISE = "02.rmsnorm"
ROUTE = "check"
CRITERIA = ["precision"]
FAILS = {"precision": ["float16", "above the bound"]}
DEVICE = "cpu"

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, H, BLOCK):  # the running sum of squares, rounded to ACC after every add
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc = (acc.to(tl.float32) + x * x).to(ACC)
    rstd = 1.0 / tl.sqrt(tl.sum(acc.to(tl.float32), axis=0) / H + eps)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x, weight, eps):
    m, h = x.shape
    y = torch.empty_like(x)
    exact = m == 8 and h & (h - 1) == 0  # where the precision criterion used to look
    acc = tl.float32 if exact or x.dtype == torch.float32 else tl.float16
    _rmsnorm_kernel[(m,)](x, weight, y, h, x.stride(0), y.stride(0), eps, BLOCK=64, ACC=acc)
    return y
