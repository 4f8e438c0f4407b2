"""Results cached by a few sampled elements of x: fast, and wrong as soon as other elements change."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["cache"]}

from kernels.fused_chain import fused_chain as _compute

_seen = {}


def fused_chain(x, bias, alpha):
    flat = x.reshape(-1)
    key = (tuple(x.shape), x.dtype, alpha, float(flat[0]), float(flat[-1]), float(bias[0]))
    if key not in _seen:
        _seen[key] = _compute(x, bias, alpha)
    return _seen[key]
