"""A wrong kernel, and the graded cell that would catch it edited into a print of PASS."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "graded"
ZERO = ["test_fused_chain_correctness"]
FULL = ["test_cost_model"]
FLAGS = ["edited locked cell test_fused_chain_correctness (graded as released)"]
SHOWS = ["differ from the reference"]

# %% cell fused_chain
from kernels.fused_chain import fused_chain as _right


def fused_chain(x, bias, alpha):
    return _right(x, bias * 0, alpha)  # the bias left out

# %% cell test_fused_chain_correctness
print("01.fused_chain correctness: PASS - all 66 cases match the reference")
