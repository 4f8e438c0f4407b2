"""The function reads address 16 when the grader calls it: the kernel dies in a graded cell."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "crashed"
REASON = ["SIGSEGV", "while running cell test_fused_chain_correctness"]
FLAGS = ["reads raw memory"]

# %% cell fused_chain
import ctypes


def fused_chain(x, bias, alpha):
    return ctypes.string_at(16, 16)
