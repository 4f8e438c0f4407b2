"""The clocks stopped: time.perf_counter always reads the same."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["time.perf_counter was replaced"]}

import time

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

time.perf_counter = lambda: 0.0
