"""Row argmax, one program per row: the kernel notebook 06 gives, whose launch settings the students choose.

Each program streams its row in chunks of BLOCK_N, keeping a running maximum per lane (with the first position
that reached it), and reduces the lanes once at the end. Which BLOCK_N and how many warps keep enough loads in
flight depends on the shape: 64 rows of a vocabulary give most SMs one program to feed, 16384 rows give each
many. The tuned launcher is the exercise (kernels/row_argmax_tuned.py).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _row_argmax_kernel(x_ptr, out_ptr, n_cols, stride_row, rows_bucket, BLOCK_N: tl.constexpr):
    # rows_bucket is not read: it is there so that @triton.autotune can key on how many rows there are
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    lanes = tl.arange(0, BLOCK_N)
    best = tl.full([BLOCK_N], float("-inf"), tl.float32)
    best_at = tl.zeros([BLOCK_N], tl.int32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + lanes
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        take = x > best  # strict: a lane keeps the first position that reached its maximum
        best = tl.where(take, x, best)
        best_at = tl.where(take, cols, best_at)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where(best == top, best_at, n_cols), axis=0)  # ties between lanes: the smallest position
    tl.store(out_ptr + row, first.to(tl.int64))
