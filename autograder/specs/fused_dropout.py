"""Notebook 02, fused dropout + residual add + RMSNorm: the torch side of the op (the keep mask Triton's tl.rand
draws, recomputed in torch; the float64 reference given that mask; the eager version; the bytes) and the exercise.

The keep mask is part of the spec: element (i, j) of an (M, H) tensor is kept where tl.rand(seed, i * H + j) > p,
so a kernel and the reference draw the same mask from the same seed, and a backward pass can draw it again.
"""

from __future__ import annotations

import torch

from autograder.guard.watch import to_device_keeping_layout
from autograder.specs.exercise import KernelExercise, Shape
from autograder.specs.vertical_fusion import (
    NORM_COMMON,
    PERF,
    add_rmsnorm_eager,
    bytes_prediction,
    norm_rows,
    norm_weight,
)

# ---------------------------------------------------------------- the torch side: Philox, as tl.rand computes it
# Philox-4x32 with 10 rounds (Salmon et al., 2011), the generator behind tl.rand, in int64 torch arithmetic:
# every value is an unsigned 32-bit number held in an int64, and a 32 x 32-bit product is split in 16-bit halves
# so that nothing overflows.

_MASK32 = 0xFFFFFFFF
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_TO_UNIT = 4.6566127342e-10  # the largest scale with (2**31 - 1) * scale < 1 in float32, as Triton's


def _mul_hi_lo(a: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32 bits of a * b, for a tensor a and a constant b of unsigned 32-bit values."""
    low = a * (b & 0xFFFF)  # below 2**48
    mid = a * (b >> 16) + (low >> 16)  # below 2**49: a * b = mid * 2**16 + (low & 0xFFFF)
    return mid >> 16, ((mid & 0xFFFF) << 16) | (low & 0xFFFF)


def philox_uniform(seed: int, offsets: torch.Tensor) -> torch.Tensor:
    """tl.rand(seed, offsets) in torch: float32 numbers in [0, 1), one for each (non-negative) offset."""
    offsets = offsets.to(torch.int64)
    c0, c1 = offsets & _MASK32, (offsets >> 32) & _MASK32
    c2 = c3 = torch.zeros_like(c0)
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(10):
        hi_b, lo_b = _mul_hi_lo(c2, _ROUND_B)
        hi_a, lo_a = _mul_hi_lo(c0, _ROUND_A)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _MASK32, (k1 + _KEY_B) & _MASK32
    signed = torch.where(c0 >= 2**31, c0 - 2**32, c0)  # the bits read as an int32
    folded = torch.where(signed < 0, -signed - 1, signed)
    return folded.to(torch.float32) * torch.tensor(_TO_UNIT, dtype=torch.float32, device=offsets.device)


# Elements a piece of the reference works on at once: Philox in int64 keeps about ten tensors of 8 bytes an element
# alive, so the whole 32768 x 4096 benchmark at once (1 GiB each) ran a 16 GB card out of memory in the grader's
# own reference (tests/notebooks/test_small_gpu.py on an H200, 2026-11-29). Rows are independent: a piece of rows
# gives the same numbers.
PIECE_ELEMENTS = 2**23


def _row_pieces(m: int, h: int) -> list[tuple[int, int]]:
    step = max(1, PIECE_ELEMENTS // max(h, 1))
    return [(r, min(m, r + step)) for r in range(0, max(m, 1), step)]


def _keep_rows(r0: int, r1: int, h: int, p: float, seed: int, device=None) -> torch.Tensor:
    """Rows r0..r1 of the keep mask of an (M, h) tensor."""
    offsets = torch.arange(r0 * h, r1 * h, device=device, dtype=torch.int64).view(r1 - r0, h)
    return philox_uniform(seed, offsets) > torch.tensor(p, dtype=torch.float32, device=device)


def keep_mask(shape: tuple[int, int], p: float, seed: int, device=None) -> torch.Tensor:
    """The (M, H) boolean keep mask of the spec: tl.rand(seed, i * H + j) > p, drawn a piece of rows at a time."""
    m, h = shape
    keep = torch.empty((m, h), dtype=torch.bool, device=device)
    for r0, r1 in _row_pieces(m, h):
        keep[r0:r1] = _keep_rows(r0, r1, h, p, seed, device)
    return keep


def _reference_rows(x, y, weight, p, seed, eps, r0: int, r1: int):
    keep = _keep_rows(r0, r1, x.shape[1], p, seed, x.device)
    h = (x[r0:r1].double() + torch.where(keep, y[r0:r1].double() / (1.0 - p), 0.0)).to(x.dtype).double()
    return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * weight.double(), h


def dropout_add_rmsnorm_reference(x, y, weight, p, seed, eps):
    """Float64 (out, h) given the spec's mask: h = x + keep * y / (1 - p), rounded to x's dtype as stored, and the
    RMSNorm of that stored h. A large input is done a piece of rows at a time, into the two results."""
    m, n = x.shape
    out = torch.empty((m, n), dtype=torch.float64, device=x.device)
    h = torch.empty((m, n), dtype=torch.float64, device=x.device)
    for r0, r1 in _row_pieces(m, n):
        out[r0:r1], h[r0:r1] = _reference_rows(x, y, weight, p, seed, eps, r0, r1)
    return out, h


def dropout_add_rmsnorm_eager(x, y, weight, p, seed, eps):
    """Unfused PyTorch: dropout with torch's own generator (a mask tensor; seed unused), then add + RMSNorm."""
    return add_rmsnorm_eager(x, torch.nn.functional.dropout(y, p, training=True), weight, eps)


def dropout_add_rmsnorm_bytes(x, y, weight, p=0.0, seed=0, eps=0.0) -> int:
    """Read x and y, write out and h; no mask tensor (weight is negligible but counted)."""
    return 4 * x.numel() * x.element_size() + weight.numel() * weight.element_size()


# ---------------------------------------------------------------- the exercise

def _inputs(shape, dtype, device, gen):
    x = norm_rows(shape, dtype, gen)
    y = norm_rows(Shape(shape.dims, shape.layout), dtype, gen)
    p = float(torch.empty(()).uniform_(0.05, 0.6, generator=gen))
    seed = int(torch.randint(0, 2**31 - 1, (), generator=gen))
    return {"x": to_device_keeping_layout(x, device), "y": to_device_keeping_layout(y, device),
            "weight": norm_weight(x.shape[1], dtype, gen).to(device), "p": p, "seed": seed, "eps": 1e-5}


def _same_mask_every_row(x, y, weight, p, seed, eps):
    keep = keep_mask((1, x.shape[1]), p, seed, x.device).expand(x.shape)
    h = (x.double() + torch.where(keep, y.double() / (1.0 - p), 0.0)).to(x.dtype).double()
    return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * weight.double(), h


def _unscaled(x, y, weight, p, seed, eps):
    return dropout_add_rmsnorm_reference(x, y * (1.0 - p), weight, p, seed, eps)


def _norm_of_x_plus_y(x, y, weight, p, seed, eps):
    _, h = dropout_add_rmsnorm_reference(x, y, weight, p, seed, eps)
    s = (x.double() + y.double()).to(x.dtype).double()
    return s * torch.rsqrt(s.square().mean(-1, keepdim=True) + eps) * weight.double(), h


DROPOUT_ADD_RMSNORM = KernelExercise(**{**NORM_COMMON, **dict(
    id="02.dropout_add_rmsnorm",
    kernel="dropout_add_rmsnorm",  # its reference solution: kernels/dropout_add_rmsnorm.py
    # The reference at the timed shape: 0.704 of copy bandwidth at worst on an H100; on two H200s, 2 cold checks
    # (2026-11-28), 0.498-0.500 (spread 1.00), what one kernel time on both would give (0.70 x 3.35 / 4.8 TB/s): the
    # mask's Philox rounds are arithmetic, and an H200 has an H100's SMs with 1.4x its memory bandwidth. The bar,
    # 0.41, is the H200's worst cold run / 1.2 (bench/results/coldstart/).
    bars=dict(min_fraction_of_peak=0.41, min_speedup_over_eager=1.1),
    function="dropout_add_rmsnorm",
    signature="dropout_add_rmsnorm(x, y, weight, p, seed, eps) -> (out, h)",
    summary="Dropout drawn in the kernel from a seed, residual add and RMSNorm in one launch: no mask tensor.",
    criteria=("correctness", "performance", "fusion"),
    make_inputs=_inputs,
    reference=dropout_add_rmsnorm_reference,
    eager=dropout_add_rmsnorm_eager,
    bytes=dropout_add_rmsnorm_bytes,
    perf_shape=PERF,
    output_names=("out", "h"),
    keep_rates=(0.1, 0.5, 0.8),
    diagnoses=(
        ("every row uses the same mask: the offsets must number the elements of the whole tensor, row * H + col",
         _same_mask_every_row),
        ("the kept values are not scaled by 1 / (1 - p)", _unscaled),
        ("the norm is of x + y: y must be dropped out first", _norm_of_x_plus_y),
    ),
)})

PREDICT_DROPOUT = bytes_prediction("dropout_add_rmsnorm", "read x and y, write out and h, read weight: the mask "
                                   "is drawn in registers and never stored", 4, 1,
                                   "Predict the bytes of fused dropout + add + RMSNorm before timing it.")

EXERCISES = (PREDICT_DROPOUT, DROPOUT_ADD_RMSNORM)
