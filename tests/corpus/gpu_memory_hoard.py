"""The notebook keeps nearly all GPU memory in a tensor it never frees: grading runs out, and says so."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
DEVICE = "gpu"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["GPU memory ran out while grading"]}

import torch

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

_hoard = []
for size in (1 << 30, 1 << 26, 1 << 21):  # 1 GiB blocks, then smaller ones into the gaps
    while True:
        try:
            _hoard.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
