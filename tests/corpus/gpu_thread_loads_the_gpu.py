"""A slow kernel and a thread of the submission's own that keeps the GPU busy between calls: the neighbour it
fakes would make the grader report "the GPU is shared" and grade again forever. A thread the submission started
is the submission's: performance fails, naming it."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
DEVICE = "gpu"
CRITERIA = ["correctness", "performance"]
PASSES = ["correctness"]
FAILS = {"performance": ["a thread your code started is still running", "_keep_busy"]}

import threading

import torch

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)


def _keep_busy():
    a = torch.randn(2048, 2048, device="cuda")
    while True:
        a = (a @ a).tanh_()
        torch.cuda.synchronize()


threading.Thread(target=_keep_busy, daemon=True).start()
