"""The kernel runs on a side CUDA stream, so do_bench's events (on the current stream) see almost nothing
(KernelBench PR #82). The profiler sees the kernel on every stream, more GPU time than was measured: failed."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["correctness", "performance"]
PASSES = ["correctness"]
FAILS = {"performance": ["impossible measurement: work escaped the timer", "kernels on every stream"]}

import torch

from kernels.fused_chain import fused_chain as _right

_side = []


def fused_chain(x, bias, alpha):
    if not _side:
        _side.append(torch.cuda.Stream())
    _side[0].wait_stream(torch.cuda.current_stream())  # the inputs are ready; the result is left unawaited
    with torch.cuda.stream(_side[0]):
        return _right(x, bias, alpha)
