"""Row argmax with launch settings chosen per shape by triton.autotune (notebook 06, exercise 3).

Measured on an H100 (fractions of copy bandwidth; bench/results/): at 64 rows of 128256 (decode) only a
16384-wide chunk over 32 warps keeps enough loads in flight (0.31; 1024 over 4 warps: 0.09); at 16384 rows of
32000 the small programs win (0.98-0.99; 16384 over 32 warps: 0.65). The key holds the row length and a
power-of-two bucket of the row count, so a choice made on a few rows is not reused for many. No configuration
here spills registers (the widest keeps 16 values of each running vector a thread).
"""

from __future__ import annotations

import torch
import triton

from kernels.row_argmax import _row_argmax_kernel

ROW_ARGMAX_CONFIGS = [
    triton.Config({"BLOCK_N": 1024}, num_warps=4),
    triton.Config({"BLOCK_N": 4096}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_N": 8192}, num_warps=16),
    triton.Config({"BLOCK_N": 16384}, num_warps=32),
]
_row_argmax_tuned = triton.autotune(configs=ROW_ARGMAX_CONFIGS, key=["n_cols", "rows_bucket"])(_row_argmax_kernel)


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """The index of each row's largest value (the first one among equals), as int64."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"row_argmax takes a 2-D tensor with contiguous rows, got shape {tuple(x.shape)} "
                         f"and strides {x.stride()}")
    m, n = x.shape
    out = torch.empty(m, dtype=torch.int64, device=x.device)
    _row_argmax_tuned[(m,)](x, out, n, x.stride(0), triton.next_power_of_2(min(m, 4096)))
    return out


def row_argmax_at(x, block_n: int = 1024, num_warps: int = 4):
    """The argmax of each row of a 2-D x with one launch setting for every shape (what the tuned launcher improves
    on): right at a training shape, slow at a decode shape."""
    m, n = x.shape
    out = torch.empty(m, dtype=torch.int64, device=x.device)
    _row_argmax_kernel[(m,)](x, out, n, x.stride(0), 1, BLOCK_N=block_n, num_warps=num_warps)
    return out
