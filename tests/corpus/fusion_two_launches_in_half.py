"""Fused in float32, the dtype a fusion count once used, and two launches (the add, then silu and the scale)
in float16 and bfloat16. Fusion counts a call in every graded dtype: failed, naming the dtype."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["in float16", "launched 2 kernels (_add_bias_kernel, _silu_scale_kernel); at most 1 allowed"]}

import torch
import triton
import triton.language as tl

from kernels.fused_chain import fused_chain as _fused


@triton.jit
def _add_bias_kernel(x_ptr, b_ptr, z_ptr, n, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    z = tl.load(x_ptr + offs, mask=m).to(tl.float32) + tl.load(b_ptr + offs % N, mask=m).to(tl.float32)
    tl.store(z_ptr + offs, z, mask=m)


@triton.jit
def _silu_scale_kernel(z_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    z = tl.load(z_ptr + offs, mask=m)
    tl.store(y_ptr + offs, (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty), mask=m)


def fused_chain(x, bias, alpha):
    if x.dtype == torch.float32:
        return _fused(x, bias, alpha)
    x = x.contiguous()
    z = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 1024),)
    _add_bias_kernel[grid](x, bias, z, x.numel(), x.shape[1], BLOCK=1024)
    _silu_scale_kernel[grid](z, y, x.numel(), alpha, BLOCK=1024)
    return y
