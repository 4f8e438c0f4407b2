"""Bad usage: a plain Python function where a Triton kernel is required (@triton.jit forgotten)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["is @triton.jit missing above the kernel's def?"]}

import torch
import triton
import triton.language as tl


def _kernel(x_ptr, b_ptr, y_ptr, M, N, alpha, BLOCK: tl.constexpr):  # no @triton.jit
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N)
    tl.store(y_ptr + row * N + cols, alpha * x, mask=cols < N)


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty_like(x)
    _kernel[(M,)](x, bias, y, M, N, alpha, BLOCK=triton.next_power_of_2(N))
    return y
