"""The function reads address 16 when graded: a segmentation fault in the middle of grading."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["killed by SIGSEGV", "before grading finished"]}

import ctypes


def fused_chain(x, bias, alpha):
    return ctypes.string_at(16, 16)  # a read of address 16
