"""The store is not masked: the last tile writes past the end of y."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["out-of-bounds write", "past the end of the output", "a store without a correct mask?"]}

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, b_ptr, y_ptr, M, N, sxm, sxn, alpha, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    z = x + b
    tl.store(y_ptr + row * N + cols, (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty))  # no mask


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _kernel[(M,)](x, bias, y, M, N, x.stride(0), x.stride(1), alpha, BLOCK=triton.next_power_of_2(N))
    return y
