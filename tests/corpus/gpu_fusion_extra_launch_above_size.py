"""One launch up to 4M elements (above every case shape, precision's included), two above: the benchmark size
(16384 x 8192) runs unfused. On a GPU, fusion also counts a call at the benchmark size in the dtype it is timed
in: failed, naming the size. The interpreter cannot run that size in reasonable time, so on the CPU this
submission passes fusion with "benchmark size counted on GPU only" in the message (test_fusion.py)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["at the benchmark size 16384x8192 in ", "launched 2 kernels", "at most 1 allowed"]}

import torch
import triton
import triton.language as tl

from kernels.fused_chain import fused_chain as _fused

LARGE = 1 << 22


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
    if x.numel() <= LARGE:
        return _fused(x, bias, alpha)
    x = x.contiguous()
    z = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 1024),)
    _add_bias_kernel[grid](x, bias, z, x.numel(), x.shape[1], BLOCK=1024)
    _silu_scale_kernel[grid](z, y, x.numel(), alpha, BLOCK=1024)
    return y
