"""Notebook 05, FlashAttention first as a tiled loop in plain PyTorch: the FlashAttention-2 block loop checked
against float64 (correctness, precision) and shown to be tiled (memory: no tensor as large as the N x N scores)."""

from __future__ import annotations

import torch

from autograder.specs.exercise import KernelExercise, Shape
from autograder.specs.streaming_reduction_fusion import FLASH_ATTENTION, NOTEBOOK, attention_inputs
from autograder.specs.streaming_torch import attention_naive, attention_reference

TILE = 128  # the largest score tile, a side, that the memory criterion lets through (float64 allowed)


def _largest_tile_bytes(inputs: dict) -> int:
    """The most one tensor of a tiled loop may take: o itself, or a TILE x TILE tile of scores per head, in
    float64 (a loop that upcasts passes); whichever is larger. The N x N scores of a long sequence take more."""
    b, h, n, d = inputs["q"].shape
    return 8 * b * h * max(n * d, TILE * TILE)


def _scores_bytes(inputs: dict) -> int:
    b, h, n, _ = inputs["q"].shape
    return 4 * b * h * n * inputs["k"].shape[2]


FLASH_ATTENTION_TORCH = KernelExercise(
    id="05.flash_attention_torch",
    kernel="flash_attention_torch",  # its reference solution: kernels/flash_attention_torch.py
    notebook=NOTEBOOK,
    function="flash_attention_torch",
    signature="flash_attention_torch(q, k, v, causal) -> (o, lse)",
    summary="FlashAttention-2's forward as a loop over query blocks and key blocks in plain PyTorch: running max, "
            "running sum, rescaled accumulator, one normalisation at the end; o and the log-sum-exp (float32).",
    criteria=("correctness", "precision", "memory"),
    make_inputs=attention_inputs,
    reference=attention_reference,
    eager=attention_naive,
    shapes=FLASH_ATTENTION.shapes,
    extra_shapes=(Shape((1, 1, 33, 16), "causal"), Shape((2, 2, 129, 64), "causal bnhd")),
    precision_shapes=FLASH_ATTENTION.precision_shapes,
    reduced_dim="N",
    reduced_axis=2,
    tolerance=FLASH_ATTENTION.tolerance,
    precision_factor=FLASH_ATTENTION.precision_factor,
    precision_floor_from_inputs=FLASH_ATTENTION.precision_floor_from_inputs,
    precision_note="Keep the running max, the running sum and the accumulator in float32; round o once, at the end.",
    special_values=False,
    output_names=("o", "lse"),
    output_dtypes=(None, torch.float32),
    # One head of 2048 queries: the float32 scores take 16 MiB, a 128 x 128 tile 128 KiB, o in float64 1 MiB (the
    # bound). Two heads of 8192 (512 MiB of scores) told the same apart and took 31 s of a cold check on an H200:
    # the meter sees each of a Python loop's ~250,000 operations (bench/results/grading/, 2026-11-29).
    memory_shape=Shape((1, 1, 2048, 64)),
    memory_shape_cpu=Shape((1, 1, 2048, 16)),
    memory_bound=_largest_tile_bytes,
    materialised_bytes=_scores_bytes,
    memory_what="the N x N float32 scores",
    memory_measure="largest",
    plain_torch=True,
    diagnoses=FLASH_ATTENTION.diagnoses,
)

EXERCISES = (FLASH_ATTENTION_TORCH,)
