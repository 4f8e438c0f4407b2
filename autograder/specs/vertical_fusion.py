"""Notebook 02, vertical fusion: a prediction of RMSNorm's traffic, RMSNorm, add + RMSNorm, LayerNorm, a precision
repair, RMSNorm backward."""

from __future__ import annotations

import dataclasses
import math

import torch

from autograder.guard.watch import to_device_keeping_layout
from autograder.specs.exercise import KernelExercise, NumericExercise, Shape
from autograder.specs.vertical_torch import (  # noqa: F401  re-exported: notebooks and kernels/ import them from here
    rmsnorm_eager,
    rmsnorm_reference,
    rmsnorm_bytes,
    sqrt_fit,
    add_rmsnorm_eager,
    add_rmsnorm_reference,
    add_rmsnorm_bytes,
    layernorm_eager,
    layernorm_reference,
    layernorm_bytes,
    rmsnorm_backward_eager,
    rmsnorm_backward_reference,
    rmsnorm_backward_bytes,
)


# ---------------------------------------------------------------- the exercises

NOTEBOOK = "02_vertical_fusion"


# (a) Predict before measuring: the bytes of RMSNorm three ways -------------------------------------------

def predicted_rmsnorm_bytes_reference(rows: int, cols: int, elem_bytes: int) -> tuple[int, int, int]:
    """HBM bytes of (eager, two-pass, one-pass) RMSNorm of an (rows, cols) tensor, counting the tensors of x's
    size only (the weight is one row). Eager: the norm reads x (1); x * rstd reads x and writes a temporary (2);
    times the weight reads it and writes y (2). Two passes: x twice and y once. One pass: x once, y once."""
    x = rows * cols * elem_bytes
    return 5 * x, 3 * x, 2 * x


def _predict_cases(rng):
    cases = [(32768, 4096, 2), (1, 1, 4)]
    for _ in range(5):
        cases.append((rng.randint(1, 100_000), rng.randint(1, 16384), rng.choice((1, 2, 4, 8))))
    return cases


def _diagnose_predict(args, got, expected):
    elem_bytes = args[2]
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-6)
    if all(close(g * elem_bytes, e) for g, e in zip(got, expected)) and elem_bytes != 1:
        return "these are elements, not bytes: multiply by elem_bytes"
    if close(got[0], 3 * expected[2] / 2):
        return "eager: three kernels, but five trips of x-sized tensors (the norm reads x; x * rstd reads and " \
               "writes; * weight reads and writes)"
    if close(got[2], expected[1]):
        return "the one-pass kernel reads x once and writes y once: 2|x|"
    if close(got[1], expected[2]):
        return "the two-pass kernel reads x twice (once for the statistic, once to normalise): 3|x|"
    return None


PREDICT_RMSNORM_BYTES = NumericExercise(
    id="02.predict_rmsnorm_bytes",
    notebook=NOTEBOOK,
    function="predicted_rmsnorm_bytes",
    signature="predicted_rmsnorm_bytes(rows, cols, elem_bytes) -> (eager, two_pass, one_pass)",
    summary="Predict the HBM bytes of RMSNorm unfused, in two passes and in one pass, before timing them.",
    criteria=("correctness",),
    cases=_predict_cases,
    reference=predicted_rmsnorm_bytes_reference,
    diagnose=_diagnose_predict,
)
# (b) Predict each kernel's bytes before timing it: the model its measurement is drawn against -------------

def _count_cases(rng):
    cases = [(32768, 4096, 2), (1, 4096, 2), (3, 5, 4)]
    for _ in range(5):
        cases.append((rng.randint(1, 100_000), rng.randint(1, 16384), rng.choice((1, 2, 4))))
    return cases


def bytes_prediction(op: str, what: str, full: int, rows_of_weight: int, summary: str) -> NumericExercise:
    """A graded prediction of the bytes one fused kernel moves: `full` trips of x-sized tensors and
    `rows_of_weight` trips of one-row tensors (weights, biases, their gradients)."""

    def reference(rows: int, cols: int, elem_bytes: int) -> int:
        return (full * rows + rows_of_weight) * cols * elem_bytes

    def diagnose(args, got, expected):
        rows, cols, elem_bytes = args
        got = got[0]
        if math.isclose(got * elem_bytes, expected[0], rel_tol=1e-9) and elem_bytes != 1:
            return "these are elements, not bytes: multiply by elem_bytes"
        if math.isclose(got, full * rows * cols * elem_bytes, rel_tol=1e-9) and rows_of_weight:
            return f"count the one-row tensors too ({rows_of_weight} trip(s) of H values): small, but HBM traffic"
        trips = got / (rows * cols * elem_bytes)
        return f"that is about {trips:.2f} trips of an x-sized tensor; {what}"

    reference.__doc__ = f"HBM bytes of the fused {op}: {what}."
    return NumericExercise(
        id=f"02.predict_{op}_bytes",
        notebook=NOTEBOOK,
        function=f"predicted_{op}_bytes",
        signature=f"predicted_{op}_bytes(rows, cols, elem_bytes) -> int",
        summary=summary,
        criteria=("correctness",),
        cases=_count_cases,
        reference=reference,
        diagnose=diagnose,
    )


PREDICT_ADD = bytes_prediction("add_rmsnorm", "read x and residual, write normed and the new residual; read weight",
                               4, 1, "Predict the bytes of fused add + RMSNorm before timing it.")
PREDICT_LAYERNORM = bytes_prediction("layernorm", "read x, write y; read weight and bias", 2, 2,
                                     "Predict the bytes of fused LayerNorm before timing it.")
PREDICT_REPAIR = bytes_prediction("repair", "the two-pass kernel reads x twice (every read missing the cache) and "
                                  "writes y; read weight", 3, 1,
                                  "Predict the bytes of the repaired two-pass RMSNorm, every read from HBM.")
PREDICT_BACKWARD = bytes_prediction("backward", "read x and dy, write dx; read weight, write dweight (the small "
                                    "partial sums left out)", 3, 2,
                                    "Predict the bytes of RMSNorm's backward before timing it.")


EPS = 1e-5
LN_OFFSET = 300.0  # the mean that makes E[x^2] - E[x]^2 cancel in fp32


def norm_rows(shape: Shape, dtype, gen) -> torch.Tensor:
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


def norm_weight(h, dtype, gen, around=1.0):
    return (around + 0.5 * torch.randn(h, generator=gen)).to(dtype)


def _norm_inputs(shape, dtype, device, gen):
    x = norm_rows(shape, dtype, gen)
    return {"x": to_device_keeping_layout(x, device), "weight": norm_weight(x.shape[1], dtype, gen).to(device), "eps": EPS}


def _add_norm_inputs(shape, dtype, device, gen):
    x = norm_rows(shape, dtype, gen)
    residual = norm_rows(Shape(shape.dims, shape.layout), dtype, gen)
    return {"x": to_device_keeping_layout(x, device), "residual": to_device_keeping_layout(residual, device),
            "weight": norm_weight(x.shape[1], dtype, gen).to(device), "eps": EPS}


def _ln_inputs(shape, dtype, device, gen):
    x = norm_rows(shape, dtype, gen)
    h = x.shape[1]
    return {"x": to_device_keeping_layout(x, device), "weight": norm_weight(h, dtype, gen).to(device),
            "bias": (0.5 * torch.randn(h, generator=gen)).to(dtype).to(device), "eps": EPS}


def _bwd_inputs(shape, dtype, device, gen):
    x = norm_rows(shape, dtype, gen)
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    return {"x": to_device_keeping_layout(x, device), "weight": norm_weight(x.shape[1], dtype, gen).to(device),
            "dy": dy.to(device), "eps": EPS}


# Wrong formulas the grader recognises, each named in the feedback.
def _rms_eps_outside(x, weight, eps):
    xd = x.double()
    return xd / (xd.square().mean(-1, keepdim=True).sqrt() + eps) * weight.double()


def _rms_no_weight(x, weight, eps):
    return rmsnorm_reference(x, torch.ones_like(weight), eps)


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
    y, s = add_rmsnorm_reference(x, residual, weight, eps)
    return _rms_eps_outside(s.to(x.dtype), weight, eps), s


def _add_norm_of_x(x, residual, weight, eps):
    _, s = add_rmsnorm_reference(x, residual, weight, eps)
    return rmsnorm_reference(x, weight, eps), s


def _bwd_without_mean_term(x, weight, dy, eps):
    dx, dw = rmsnorm_backward_reference(x, weight, dy, eps)
    xd = x.double()
    rstd = torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    return rstd * dy.double() * weight.double(), dw


def _ln_unbiased(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    var = (xd - mean).square().sum(-1, keepdim=True) / max(1, x.shape[1] - 1)
    return (xd - mean) * torch.rsqrt(var + eps) * weight.double() + bias.double()


def _ln_no_bias(x, weight, bias, eps):
    return layernorm_reference(x, weight, torch.zeros_like(bias), eps)


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
    kernel="rmsnorm",  # its reference solution: kernels/rmsnorm.py
    # One pass over x: 0.97 of copy on an H100, 0.94 on an H200; F.rms_norm reaches 0.81 and torch.compile 0.87 on an
    # H200. Two passes over each row reach 0.70 (H100) and 0.80 (H200, whose larger L2 serves more of the second
    # read): correct and fused, so not failed; unfused eager reaches 0.17-0.22.
    bars=dict(min_fraction_of_peak=0.6, min_speedup_over_eager=1.1),
    function="rmsnorm",
    signature="rmsnorm(x, weight, eps) -> Tensor",
    summary="Fused RMSNorm forward: one read of x, one write of y, fp32 statistics, any H up to 16384.",
    extra_shapes=(Shape((3, 12289)), Shape((6, 2047), "padded")),
    make_inputs=_norm_inputs,
    reference=rmsnorm_reference,
    eager=rmsnorm_eager,
    bytes=rmsnorm_bytes,
    diagnoses=RMS_DIAGNOSES,
)

ADD_RMSNORM = KernelExercise(
    **NORM_COMMON,
    id="02.add_rmsnorm",
    kernel="add_rmsnorm",  # its reference solution: kernels/add_rmsnorm.py
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    function="add_rmsnorm",
    signature="add_rmsnorm(x, residual, weight, eps) -> (normed, new_residual)",
    summary="Residual add + RMSNorm in one kernel: 2 reads, 2 writes.",
    extra_shapes=(Shape((3, 12289)), Shape((6, 2047), "padded")),
    make_inputs=_add_norm_inputs,
    reference=add_rmsnorm_reference,
    eager=add_rmsnorm_eager,
    bytes=add_rmsnorm_bytes,
    output_names=("normed", "new_residual"),
    diagnoses=(
        ("eps added after the square root: use 1/sqrt(mean(s^2) + eps)", _add_norm_eps_outside),
        ("x is normalised instead of the sum x + residual", _add_norm_of_x),
    ),
)

LAYERNORM = KernelExercise(**{**NORM_COMMON, **dict(
    shapes=NORM_SHAPES + (Shape((9, 2048), "offset"),),
    extra_shapes=(Shape((3, 12289)), Shape((5, 5121), "offset")),
    id="02.layernorm",
    kernel="layernorm",  # its reference solution: kernels/layernorm.py
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    function="layernorm",
    signature="layernorm(x, weight, bias, eps) -> Tensor",
    summary="Fused LayerNorm forward with weight and bias; mean and variance from one pass over x.",
    make_inputs=_ln_inputs,
    reference=layernorm_reference,
    eager=layernorm_eager,
    bytes=layernorm_bytes,
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
    kernel="rmsnorm",  # its reference solution: kernels/rmsnorm.py
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    function="rmsnorm_repaired",
    signature="rmsnorm_repaired(x, weight, eps) -> Tensor",
    summary="Repair a provided RMSNorm whose statistic is accumulated in low precision.",
)

RMSNORM_BACKWARD = KernelExercise(
    id="02.rmsnorm_backward",
    kernel="rmsnorm_backward",  # its reference solution: kernels/rmsnorm_backward.py
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="rmsnorm_backward",
    signature="rmsnorm_backward(x, weight, dy, eps) -> (dx, dweight)",
    summary="Stretch: RMSNorm backward in Triton (dx per row, dweight reduced across rows).",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_bwd_inputs,
    reference=rmsnorm_backward_reference,
    eager=rmsnorm_backward_eager,
    bytes=rmsnorm_backward_bytes,
    shapes=(Shape((1, 7)), Shape((5, 1000)), Shape((37, 4099)), Shape((3, 16384)), Shape((130, 768)),
            Shape((17, 3000), "padded")),
    extra_shapes=(Shape((3, 12289)), Shape((70, 513))),
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

EXERCISES = (PREDICT_RMSNORM_BYTES, RMSNORM, PREDICT_ADD, ADD_RMSNORM, PREDICT_LAYERNORM, LAYERNORM, PREDICT_REPAIR,
             RMSNORM_REPAIR, PREDICT_BACKWARD, RMSNORM_BACKWARD)
