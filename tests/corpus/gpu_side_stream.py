"""The kernel runs on a side CUDA stream, so do_bench's events (on the current stream) see almost nothing.
The grader's device-wide synchronized timing names it, and no impossible speed is reported."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["correctness", "performance"]
PASSES = ["correctness"]
SAYS = {"performance": ["part of the work escapes the events", "Graded on the synchronized time"]}

import torch

from kernels.fused_chain import fused_chain as _right

_side = []


def fused_chain(x, bias, alpha):
    if not _side:
        _side.append(torch.cuda.Stream())
    _side[0].wait_stream(torch.cuda.current_stream())  # the inputs are ready; the result is left unawaited
    with torch.cuda.stream(_side[0]):
        return _right(x, bias, alpha)
