"""The bias is read one column off, with NaN as the padding value: the last column comes out NaN."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["NaN where the reference is a number"]}

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, b_ptr, y_ptr, M, N, sxm, sxn, alpha, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols + 1, mask=cols + 1 < N, other=float("nan")).to(tl.float32)  # one column off
    z = x + b
    tl.store(y_ptr + row * N + cols, (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty), mask=mask)


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _kernel[(M,)](x, bias, y, M, N, x.stride(0), x.stride(1), alpha, BLOCK=triton.next_power_of_2(N))
    return y
