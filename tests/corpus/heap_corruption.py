"""The student's own test launches an unmasked kernel on a 4-element tensor: 256 KiB written past its end. In the
interpreter the bounds check stops the store before it corrupts the heap: the cell raises, the process lives on,
and the function (which launches the same kind of store, far past its guards) is graded and named."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["out-of-bounds store in _fill", "without a correct mask"]}
DEVICE = "cpu"

import torch
import triton
import triton.language as tl


@triton.jit
def _fill(y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full([BLOCK], -1.0, tl.float32))  # no mask


def fused_chain(x, bias, alpha):
    y = torch.empty(4)
    _fill[(1,)](y, BLOCK=262144)  # past the grader's guards too
    return y


y = torch.empty(4)
_fill[(1,)](y, BLOCK=65536)
for _ in range(100):  # without the check, the allocator would trip over its damaged bookkeeping here
    junk = [torch.empty(n) for n in range(1, 400)]
    del junk
