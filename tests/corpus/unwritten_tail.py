"""The grid rounds down: the rows of the last, partial block are never written."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["output elements were never written"]}

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, b_ptr, y_ptr, M, N, sxm, sxn, alpha, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    z = x + b[None, :]
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty),
             mask=mask)


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (max(1, M // 4),)  # should be triton.cdiv(M, 4)
    _kernel[grid](x, bias, y, M, N, x.stride(0), x.stride(1), alpha, ROWS=4, BLOCK=triton.next_power_of_2(N))
    return y
