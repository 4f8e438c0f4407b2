"""The statistics patched: statistics.median, which takes the medians of the timed rounds, returns a tiny time
(gpu-mode/reference-kernels issue #162)."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["statistics.median was replaced"]}

import statistics

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

statistics.median = lambda values: 1e-9
