"""A right kernel whose launcher prints to stderr (Python and C level) and warns: no graded cell may lose
points for it (nbgrader scores a graded cell that writes to stderr as failed)."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "graded"
FULL = ["test_cost_model", "test_fused_chain_correctness", "test_fused_chain_fusion"]

# %% cell fused_chain
import os
import sys
import warnings

from kernels.fused_chain import fused_chain as _right

print("debug: defining fused_chain", file=sys.stderr)


def fused_chain(x, bias, alpha):
    print(f"debug: x {tuple(x.shape)}", file=sys.stderr)
    os.write(2, b"debug: a C-level write\n")
    warnings.warn("debug: this launcher is noisy")
    return _right(x, bias, alpha)
