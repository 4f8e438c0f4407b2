"""A row sum whose masked load has no other=: the lanes past the row's end are summed too. Triton's interpreter
fills them with 0 and the sum comes out right; a GPU leaves whatever the registers held. The grader fills them
with NaN in the interpreter, so the mistake fails on a laptop as it can on a GPU."""
EXERCISE = "01.warmup_row_sum"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["NaN where the reference is a number", "other=0.0"]}
DEVICE = "cpu"

import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n, stride_m, stride_n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_m + cols * stride_n, mask=cols < n)
    tl.store(out_ptr + row, tl.sum(x.to(tl.float32), axis=0))


def row_sum(x):
    m, n = x.shape
    out = torch.empty(m, dtype=x.dtype, device=x.device)
    _row_sum_kernel[(m,)](x, out, n, x.stride(0), x.stride(1), BLOCK=triton.next_power_of_2(n))
    return out
