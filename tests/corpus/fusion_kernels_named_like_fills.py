"""Two of three launches named like the library's own fill and memset kernels, hoping a count that skips those
names skips them. Every kernel the call runs counts, whatever its name (on a GPU: every kernel, copy and memset
the profiler sees during the call; the grader's own allocations are made before it starts)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["launched 3 kernels", "memset_d32_kernel", "vectorized_elementwise_kernel", "at most 1 allowed"]}

import torch
import triton
import triton.language as tl


@triton.jit
def memset_d32_kernel(x_ptr, b_ptr, z_ptr, n, N, BLOCK: tl.constexpr):  # z = x + bias
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    z = tl.load(x_ptr + offs, mask=m).to(tl.float32) + tl.load(b_ptr + offs % N, mask=m).to(tl.float32)
    tl.store(z_ptr + offs, z, mask=m)


@triton.jit
def vectorized_elementwise_kernel(z_ptr, n, BLOCK: tl.constexpr):  # z = silu(z), in place
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    z = tl.load(z_ptr + offs, mask=m)
    tl.store(z_ptr + offs, z * tl.sigmoid(z), mask=m)


@triton.jit
def _scale_kernel(z_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, (alpha * tl.load(z_ptr + offs, mask=m)).to(y_ptr.dtype.element_ty), mask=m)


def fused_chain(x, bias, alpha):
    x = x.contiguous()
    z = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    memset_d32_kernel[grid](x, bias, z, n, x.shape[1], BLOCK=1024)
    vectorized_elementwise_kernel[grid](z, n, BLOCK=1024)
    _scale_kernel[grid](z, y, n, alpha, BLOCK=1024)
    return y
