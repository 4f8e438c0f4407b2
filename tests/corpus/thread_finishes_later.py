"""Hands the work to a thread and returns at once: the result would be written after it is read (or timed)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["left a thread running when it returned"]}

import threading
import time

from kernels.fused_chain import fused_chain as _compute


def fused_chain(x, bias, alpha):
    y = _compute(x, bias, alpha)

    def later():
        time.sleep(0.5)  # stands for the work still to do

    threading.Thread(target=later, daemon=True).start()
    return y
