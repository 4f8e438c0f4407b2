"""Bad usage: the @triton.jit kernel itself is handed in where the launcher belongs."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["is a Triton kernel (@triton.jit)", "launches the kernel"]}

import triton
import triton.language as tl


@triton.jit
def fused_chain(x_ptr, b_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n).to(tl.float32)
    tl.store(y_ptr + offs, alpha * x * tl.sigmoid(x), mask=offs < n)
