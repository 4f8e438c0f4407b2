"""Batch-and-skip: computes the first call for a shape and hands back a copy of that result for every later call
of the shape (gpu-mode/reference-kernels PRs #102, #104; tensara PR #238). The timed calls rotate over input sets
whose values differ, and sampled timed outputs are compared with each set's reference: failed."""
EXERCISE = "02.rmsnorm"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["a timed call", "returned a wrong result", "the timing means nothing"]}

from kernels.rmsnorm import rmsnorm as _right

_done = {}


def rmsnorm(x, weight, eps):
    key = (tuple(x.shape), x.dtype)
    if key not in _done or x.numel() < 1 << 22:  # correct at the small shapes, where a cache would show
        _done[key] = _right(x, weight, eps)
        return _done[key]
    return _done[key].clone()
