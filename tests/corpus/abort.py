"""The function aborts the process (as a failed check in C code does)."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["killed by SIGABRT"]}

import os


def fused_chain(x, bias, alpha):
    os.abort()
