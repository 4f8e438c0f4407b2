"""Reads the secret seed and answers only the secret case right (zeros otherwise): the random trials fail it."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["trial 1", "differ from the reference"]}

import torch
import triton
import triton.language as tl

from autograder import config
from kernels.fused_chain import fused_chain as _compute

_SEED = config.load().secret_seed


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], tl.float32).to(y_ptr.dtype.element_ty), mask=offs < n)


def _is_secret(x, bias, alpha):
    from autograder.criteria.cases import case_inputs as _inputs, case_seed as _seed
    from autograder.specs import get

    ex = get("01.fused_chain")
    for shape in ex.shapes:
        if shape.dims == tuple(x.shape):
            case = _inputs(ex, shape, x.dtype, _seed(_SEED, shape, x.dtype))
            if torch.equal(case["x"], x) and case["alpha"] == alpha:
                return True
    return False


def fused_chain(x, bias, alpha):
    if _is_secret(x, bias, alpha):
        return _compute(x, bias, alpha)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
    return y
