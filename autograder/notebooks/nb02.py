"""Notebook 02, vertical fusion: RMSNorm, add + RMSNorm, LayerNorm, a precision repair, RMSNorm backward."""

from __future__ import annotations

import dataclasses
import math

import torch

from ..ops import add_rmsnorm as addn
from ..ops import layernorm as ln
from ..ops import rmsnorm as rn
from ..ops import rmsnorm_backward as rb
from ..sandbox import to_device_keeping_layout
from ..specs import KernelExercise, Shape

NOTEBOOK = "02_vertical_fusion"
EPS = 1e-5
LN_OFFSET = 300.0  # the mean that makes E[x^2] - E[x]^2 cancel in fp32


def _rows(shape: Shape, dtype, gen) -> torch.Tensor:
    """(M, H) rows on the CPU whose scales span 1e-3 .. 10, so that eps matters in some rows.

    layout "padded": each row sits in a wider buffer (row stride > H); "offset": rows centred on LN_OFFSET.
    The base is scaled and cast before the view is taken, so the view keeps its layout.
    """
    m, h = shape.dims
    width = h + 37 if shape.layout == "padded" else h
    scale = torch.exp(torch.empty(m, 1).uniform_(math.log(1e-3), math.log(10.0), generator=gen))
    if shape.layout == "offset":
        scale = torch.ones(m, 1)
    base = torch.randn(m, width, generator=gen) * scale
    if shape.layout == "offset":
        base = base + LN_OFFSET
    return base.to(dtype)[:, :h]


def _weight(h, dtype, gen, around=1.0):
    return (around + 0.5 * torch.randn(h, generator=gen)).to(dtype)


def _norm_inputs(shape, dtype, device, gen):
    x = _rows(shape, dtype, gen)
    return {"x": to_device_keeping_layout(x, device), "weight": _weight(x.shape[1], dtype, gen).to(device), "eps": EPS}


def _add_norm_inputs(shape, dtype, device, gen):
    x = _rows(shape, dtype, gen)
    residual = _rows(Shape(shape.dims, shape.layout), dtype, gen)
    return {"x": to_device_keeping_layout(x, device), "residual": to_device_keeping_layout(residual, device),
            "weight": _weight(x.shape[1], dtype, gen).to(device), "eps": EPS}


def _ln_inputs(shape, dtype, device, gen):
    x = _rows(shape, dtype, gen)
    h = x.shape[1]
    return {"x": to_device_keeping_layout(x, device), "weight": _weight(h, dtype, gen).to(device),
            "bias": (0.5 * torch.randn(h, generator=gen)).to(dtype).to(device), "eps": EPS}


def _bwd_inputs(shape, dtype, device, gen):
    x = _rows(shape, dtype, gen)
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    return {"x": to_device_keeping_layout(x, device), "weight": _weight(x.shape[1], dtype, gen).to(device), "dy": dy.to(device), "eps": EPS}


# Wrong formulas the grader recognises, each named in the feedback.
def _rms_eps_outside(x, weight, eps):
    xd = x.double()
    return xd / (xd.square().mean(-1, keepdim=True).sqrt() + eps) * weight.double()


def _rms_no_weight(x, weight, eps):
    return rn.rmsnorm_reference(x, torch.ones_like(weight), eps)


def _rms_mean_over_block(x, weight, eps):
    xd = x.double()
    block = 1 << max(0, (x.shape[1] - 1).bit_length())
    return xd * torch.rsqrt(xd.square().sum(-1, keepdim=True) / block + eps) * weight.double()


RMS_DIAGNOSES = (
    ("eps added after the square root: use 1/sqrt(mean(x^2) + eps)", _rms_eps_outside),
    ("the weight is not applied", _rms_no_weight),
    ("the mean of squares divides by the block size, not by H", _rms_mean_over_block),
)


def _add_norm_eps_outside(x, residual, weight, eps):
    y, s = addn.add_rmsnorm_reference(x, residual, weight, eps)
    return _rms_eps_outside(s.to(x.dtype), weight, eps), s


def _add_norm_of_x(x, residual, weight, eps):
    _, s = addn.add_rmsnorm_reference(x, residual, weight, eps)
    return rn.rmsnorm_reference(x, weight, eps), s


def _bwd_without_mean_term(x, weight, dy, eps):
    dx, dw = rb.rmsnorm_backward_reference(x, weight, dy, eps)
    xd = x.double()
    rstd = torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    return rstd * dy.double() * weight.double(), dw


def _ln_unbiased(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    var = (xd - mean).square().sum(-1, keepdim=True) / max(1, x.shape[1] - 1)
    return (xd - mean) * torch.rsqrt(var + eps) * weight.double() + bias.double()


def _ln_no_bias(x, weight, bias, eps):
    return ln.layernorm_reference(x, weight, torch.zeros_like(bias), eps)


def _ln_eps_outside(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    std = (xd - mean).square().mean(-1, keepdim=True).sqrt()
    return (xd - mean) / (std + eps) * weight.double() + bias.double()


def _mean_over_spread(x: torch.Tensor) -> float:
    """The largest |mean| / standard deviation over the rows that vary (a constant row's centred values are 0)."""
    xd = x.double()
    std = xd.std(-1, correction=0)
    ratio = xd.mean(-1).abs()[std > 0] / std[std > 0]
    return float(ratio.max()) if ratio.numel() else 0.0


def _ln_float32_mean(inputs: dict, dtype) -> tuple[float, str]:
    """Any float32 algorithm rounds the row's mean to float32, an error of up to eps * |mean|, which the centred
    values x - mean carry whole: relative to their spread, eps * |mean| / std. PyTorch's F.layer_norm and the
    two-pass algorithm measure 0.5 to 1 times that; the bound is 4 times."""
    ratio = _mean_over_spread(inputs["x"])
    return 4 * 2.0**-24 * ratio, f"float32 arithmetic on rows whose mean is {ratio:.0f} times their spread"


def _ln_float32_mean_atol(inputs: dict, dtype) -> float:
    """The same rounding of the mean, elementwise: scaled by rstd and the largest weight."""
    return _ln_float32_mean(inputs, dtype)[0] * float(inputs["weight"].double().abs().max())


NORM_SHAPES = (
    Shape((1, 1)),
    Shape((1, 7)),
    Shape((5, 1000)),
    Shape((37, 4099)),  # not a power of two: the tail of the block is masked
    Shape((3, 16384)),  # the widest row allowed
    Shape((64, 768)),
    Shape((17, 3000), "padded"),  # rows further apart than H
)
GROWTH_SHAPES = tuple(Shape((8, h)) for h in (256, 1024, 4096, 16384))
NORM_TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
PERF = Shape((32768, 4096))
ACCUMULATE_NOTE = (
    "Statistics belong in float32: upcast after tl.load and keep sums and the mean of squares in float32; "
    "round only the values you store."
)

# What every row-normalisation exercise shares: graded on all four criteria over the same shapes, with the
# precision measured at H = 256 .. 16384 to see whether the error grows with the row.
NORM_COMMON = dict(
    notebook=NOTEBOOK,
    criteria=("correctness", "precision", "performance", "fusion"),
    shapes=NORM_SHAPES,
    precision_shapes=GROWTH_SHAPES,
    perf_shape=PERF,
    tolerance=NORM_TOL,
    precision_floor={torch.float32: 2e-6},
    precision_note=ACCUMULATE_NOTE,
    special_values=False,  # one NaN poisons its row's statistic: nothing to learn from it here
)

RMSNORM = KernelExercise(
    **NORM_COMMON,
    id="02.rmsnorm",
    function="rmsnorm",
    signature="rmsnorm(x, weight, eps) -> Tensor",
    summary="Fused RMSNorm forward: one read of x, one write of y, fp32 statistics, any H up to 16384.",
    make_inputs=_norm_inputs,
    reference=rn.rmsnorm_reference,
    eager=rn.rmsnorm_eager,
    bytes=rn.rmsnorm_bytes,
    diagnoses=RMS_DIAGNOSES,
)

ADD_RMSNORM = KernelExercise(
    **NORM_COMMON,
    id="02.add_rmsnorm",
    function="add_rmsnorm",
    signature="add_rmsnorm(x, residual, weight, eps) -> (normed, new_residual)",
    summary="Residual add + RMSNorm in one kernel: 2 reads, 2 writes.",
    make_inputs=_add_norm_inputs,
    reference=addn.add_rmsnorm_reference,
    eager=addn.add_rmsnorm_eager,
    bytes=addn.add_rmsnorm_bytes,
    output_names=("normed", "new_residual"),
    diagnoses=(
        ("eps added after the square root: use 1/sqrt(mean(s^2) + eps)", _add_norm_eps_outside),
        ("x is normalised instead of the sum x + residual", _add_norm_of_x),
    ),
)

LAYERNORM = KernelExercise(**{**NORM_COMMON, **dict(
    shapes=NORM_SHAPES + (Shape((9, 2048), "offset"),),
    id="02.layernorm",
    function="layernorm",
    signature="layernorm(x, weight, bias, eps) -> Tensor",
    summary="Fused LayerNorm forward with weight and bias; mean and variance from one pass over x.",
    make_inputs=_ln_inputs,
    reference=ln.layernorm_reference,
    eager=ln.layernorm_eager,
    bytes=ln.layernorm_bytes,
    precision_shapes=tuple(Shape((8, h), "offset") for h in (256, 1024, 4096, 16384)),
    tolerance={torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)},
    atol_from_inputs=_ln_float32_mean_atol,
    precision_floor_from_inputs=_ln_float32_mean,
    precision_note=(
        "These rows have mean 300 and spread 1: the variance as E[x^2] - E[x]^2 cancels in fp32. Take the "
        "mean first and the variance of the centred values (the row is already in registers), or shift by "
        "one element of the row before summing."
    ),
    diagnoses=(
        ("the variance divides by H - 1; LayerNorm uses the biased variance (divide by H)", _ln_unbiased),
        ("the bias is not added", _ln_no_bias),
        ("eps added after the square root: use 1/sqrt(var + eps)", _ln_eps_outside),
    ),
)})

# The repair is graded exactly like exercise 1; only the function's name and purpose differ.
RMSNORM_REPAIR = dataclasses.replace(
    RMSNORM,
    id="02.rmsnorm_repair",
    function="rmsnorm_repaired",
    signature="rmsnorm_repaired(x, weight, eps) -> Tensor",
    summary="Repair a provided RMSNorm whose statistic is accumulated in low precision.",
)

RMSNORM_BACKWARD = KernelExercise(
    id="02.rmsnorm_backward",
    notebook=NOTEBOOK,
    function="rmsnorm_backward",
    signature="rmsnorm_backward(x, weight, dy, eps) -> (dx, dweight)",
    summary="Stretch: RMSNorm backward in Triton (dx per row, dweight reduced across rows).",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_bwd_inputs,
    reference=rb.rmsnorm_backward_reference,
    eager=rb.rmsnorm_backward_eager,
    bytes=rb.rmsnorm_backward_bytes,
    shapes=(Shape((1, 7)), Shape((5, 1000)), Shape((37, 4099)), Shape((3, 16384)), Shape((130, 768)),
            Shape((17, 3000), "padded")),
    precision_shapes=GROWTH_SHAPES,
    perf_shape=PERF,
    tolerance={torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 1e-2), torch.bfloat16: (1e-1, 5e-2)},
    precision_factor=2.0,
    precision_floor={torch.float32: 1e-5},
    precision_note=ACCUMULATE_NOTE + " dweight sums over every row: accumulate it in float32 too.",
    output_names=("dx", "dweight"),
    diagnoses=(("dx leaves out the term - xhat * mean(g * xhat) that comes from rstd depending on x",
                _bwd_without_mean_term),),
    max_launches=2,
    special_values=False,
)

EXERCISES = (RMSNORM, ADD_RMSNORM, LAYERNORM, RMSNORM_REPAIR, RMSNORM_BACKWARD)
