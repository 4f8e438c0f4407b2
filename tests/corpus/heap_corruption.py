"""The student's own test launches an unmasked kernel on a 4-element tensor: 256 KiB written past its end.
The heap is corrupted and the process dies (where exactly depends on the allocator): recorded, not lost."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["before grading finished"]}
DEVICE = "cpu"

import torch
import triton
import triton.language as tl


@triton.jit
def _fill(y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full([BLOCK], -1.0, tl.float32))  # no mask


y = torch.empty(4)
_fill[(1,)](y, BLOCK=65536)
for _ in range(100):  # the allocator trips over its damaged bookkeeping
    junk = [torch.empty(n) for n in range(1, 400)]
    del junk
