"""A store 2^40 elements past y: on a GPU, an illegal memory access that breaks the process's CUDA context."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
DEVICE = "gpu"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["illegal memory access"]}

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs + (1 << 40), x, mask=offs < n)


def fused_chain(x, bias, alpha):
    y = torch.empty_like(x)
    _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
