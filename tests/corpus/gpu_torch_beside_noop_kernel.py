"""torch computes the result with the grader's dispatch modes switched off, and a Triton kernel that does nothing
is launched beside it, so that a Triton launch "received" the output. With every Triton launch turned into a
no-op the answer is still right: it does not come from the student's kernels."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["the result does not come from your kernels", "turned into a no-op"]}

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import _disable_current_modes


@triton.jit
def _touch(y_ptr, n):
    pid = tl.program_id(0)
    tl.load(y_ptr + pid, mask=pid < n)


def fused_chain(x, bias, alpha):
    with _disable_current_modes():
        y = (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
    _touch[(1,)](y, 1)
    return y
