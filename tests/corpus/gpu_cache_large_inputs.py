"""Caches results by address only for benchmark-sized inputs: correct on small shapes, and timed on hits."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["correctness", "performance"]
PASSES = ["correctness"]
FAILS = {"performance": ["cache", "the timing means nothing"]}

from kernels.fused_chain import fused_chain as _right

_seen = {}


def fused_chain(x, bias, alpha):
    if x.numel() < 1 << 24:
        return _right(x, bias, alpha)
    key = (x.data_ptr(), x.shape, alpha)
    if key not in _seen:
        _seen[key] = _right(x, bias, alpha)
    return _seen[key]
