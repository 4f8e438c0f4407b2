"""Roundings the specs' wrong formulas need: what a kernel computes when it rounds where it should not."""

from __future__ import annotations

import torch

TF32_NOTE = "float32 inputs were multiplied in TF32: pass input_precision=\"ieee\" to tl.dot"


def tf32(t: torch.Tensor, round_to_nearest: bool = False) -> torch.Tensor:
    """t with 10 explicit mantissa bits (TF32), rounded to nearest or truncated, as float64: the operands
    tl.dot uses by default for float32 (the matrix units of some GPUs round them, others drop the low bits)."""
    bits = t.float().contiguous().view(torch.int32)
    if round_to_nearest:
        bits = bits + 0x1000
    return (bits & ~0x1FFF).view(torch.float32).double()
