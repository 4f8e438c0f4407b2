"""Results cached by the input's address and shape: the same tensor holding new data gets a stale answer."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["cache"]}

from kernels.fused_chain import fused_chain as _compute

_seen = {}


def fused_chain(x, bias, alpha):
    key = (x.data_ptr(), tuple(x.shape), x.dtype, alpha)
    if key not in _seen:
        _seen[key] = _compute(x, bias, alpha)
    return _seen[key]
