"""The torch side of softmax: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/softmax.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch


def softmax_eager(x: torch.Tensor) -> torch.Tensor:
    """The textbook formula op by op: five kernels, each a pass over the row."""
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def softmax_bytes(x: torch.Tensor) -> int:
    """The fewest bytes: read x once, write y once."""
    return 2 * x.numel() * x.element_size()
