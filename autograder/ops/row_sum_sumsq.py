"""The torch side of row sum sumsq: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/row_sum_sumsq.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch


def row_sum_sumsq_eager(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sibling reductions, each reading all of x: what two separate lines of PyTorch do."""
    return x.sum(-1, dtype=torch.float32), torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32).square()


def row_sum_sumsq_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xd = x.double()
    return xd.sum(-1), xd.square().sum(-1)


def row_sum_sumsq_bytes(x: torch.Tensor) -> int:
    """Read x once, write two fp32 values a row."""
    return x.numel() * x.element_size() + 2 * 4 * x.shape[0]
