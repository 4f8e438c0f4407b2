"""Bounds that PyTorch meets: the grader's tolerances and precision bounds, applied to PyTorch's own ops and to
the algorithm a notebook teaches, written in torch. A bound they fail is stricter than the arithmetic allows.

These call the grader's own numbers (grade_kernel.tolerance, grade_kernel.precision_bound) on outputs made by
torch, since the criteria themselves fail any output that torch computed instead of a kernel.
"""

import pytest
import torch
import torch.nn.functional as F

from autograder import registry, runtime
from autograder.grade_kernel import _as_tuple, _compare, _inputs, _rel_err, precision_bound, tolerance


def _rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _add_rms_norm(x, residual, weight, eps):
    s = x.float() + residual.float()
    return F.rms_norm(s, (x.shape[-1],), weight.float(), eps).to(x.dtype), s.to(x.dtype)


def _layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _layer_norm_two_pass(x, weight, bias, eps):
    """What notebook 02's hint teaches (and Triton's layer-norm tutorial does): the mean first, then the variance
    of the centred values, all in float32."""
    xf = x.float()
    xc = xf - xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xc * xc).mean(-1, keepdim=True) + eps)
    return (xc * rstd * weight.float() + bias.float()).to(x.dtype)


def _layer_norm_cancelling(x, weight, bias, eps):
    """The variance as E[x^2] - E[x]^2 in float32: the bug the exercise's offset rows exist to catch."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf * xf).mean(-1, keepdim=True) - mean * mean
    return ((xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)


def _softmax(x):
    return torch.softmax(x, -1)


TORCH_VERSIONS = [
    ("02.rmsnorm", _rms_norm), ("02.rmsnorm_repair", _rms_norm), ("02.add_rmsnorm", _add_rms_norm),
    ("02.layernorm", _layer_norm), ("02.layernorm", _layer_norm_two_pass), ("05.softmax", _softmax),
]
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if runtime.has_gpu() else [])


def _worst(exercise_id, fn, dtype):
    """(the correctness cases whose elements fall outside the tolerance, the worst error / bound of precision)."""
    ex = registry.get(exercise_id)
    failed = []
    for shape in ex.shapes:
        inputs = _inputs(ex, shape, dtype, 2024)
        for i, (out, ref) in enumerate(zip(_as_tuple(fn(**inputs)), _as_tuple(ex.reference(**inputs)))):
            mismatch = _compare(out, ref, ex.out_dtype(dtype, i), *tolerance(ex, inputs, dtype))
            if mismatch:
                failed.append(f"{shape}: {mismatch}")
    worst = 0.0
    for shape in ex.precision_shapes or (ex.precision_shape,):
        inputs = _inputs(ex, shape, dtype, 7)
        refs = _as_tuple(ex.reference(**inputs))
        err = max(_rel_err(o, r) for o, r in zip(_as_tuple(fn(**inputs)), refs))
        worst = max(worst, err / precision_bound(ex, inputs, refs, dtype)[0])
    return failed, worst


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("exercise_id, fn", TORCH_VERSIONS, ids=lambda v: getattr(v, "__name__", v))
def test_pytorch_and_the_taught_algorithm_meet_the_bounds(exercise_id, fn, dtype):
    failed, worst = _worst(exercise_id, fn, dtype)
    assert not failed, f"{exercise_id} {fn.__name__} {dtype}: " + "; ".join(failed[:3])
    assert worst <= 1.0, f"{exercise_id} {fn.__name__} {dtype}: error {worst:.2f} times the precision bound"


def test_layernorm_bound_still_fails_the_cancelling_variance():
    failed, worst = _worst("02.layernorm", _layer_norm_cancelling, torch.float32)
    assert any("offset" in f for f in failed) and worst > 10
