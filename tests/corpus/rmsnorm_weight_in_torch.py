"""The kernel normalises, then PyTorch multiplies by the weight in place: the output is torch's work."""
EXERCISE = "02.rmsnorm"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["the result was computed by torch (mul_)"]}

import torch
import triton
import triton.language as tl


@triton.jit
def _normalise(x_ptr, y_ptr, H, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < H, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd).to(y_ptr.dtype.element_ty), mask=cols < H)


def rmsnorm(x, weight, eps):
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _normalise[(M,)](x, y, H, x.stride(0), y.stride(0), eps, BLOCK=triton.next_power_of_2(H))
    y.mul_(weight)  # the weight, applied outside the kernel
    return y
