"""FlashAttention-2's forward pass as a tiled loop in plain PyTorch: the algorithm of kernels/flash_attention.py,
block by block, with no Triton in the way, to read, to step through and to check a kernel against tile by tile.

o = softmax(q kᵀ / sqrt(D)) v per head and lse = each row's natural log-sum-exp of the scaled scores. The loop
order is FlashAttention-2's: the outer loop over blocks of queries (what one Triton program owns), the inner
loop over blocks of keys and values; per query row a running max m, a running sum l and an accumulator acc,
rescaled by exp(m_old - m_new) whenever the max grows, and one division by l at the end. With a causal mask
(query i sees keys j <= i) the key blocks wholly above the diagonal are never visited.

Memory: no tensor larger than a (block_m, block_n) score tile per head besides o itself; the N x N scores never
exist. Bytes a kernel with this loop moves: q, k, v read and o written, plus 4 bytes a row of lse (the re-reads
of k and v per query block left to L2). Flops: 4 N N_kv D per head (two products), half with a causal mask.
"""

from __future__ import annotations

import math

import torch

from autograder.specs.streaming_torch import (  # noqa: F401  the torch side of the op, shared with the grader
    attention_bytes,
    attention_flops,
    attention_naive,
    attention_reference,
)


def flash_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                          block_m: int = 64, block_n: int = 64):
    """(o, lse) of attention over q (B, H, N, D), k and v (B, H, N_kv, D), computed block by block in float32.

    o has q's shape and dtype; lse (B, H, N) float32. block_m queries and block_n keys a step."""
    if q.dim() != 4 or k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"q (B, H, N, D), k and v (B, H, N_kv, D) expected, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if block_m < 1 or block_n < 1:
        raise ValueError(f"block sizes must be positive, got block_m={block_m}, block_n={block_n}")
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    scale = 1.0 / math.sqrt(D)
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    for start_m in range(0, N, block_m):
        q_blk = q[:, :, start_m:start_m + block_m].float()
        rows = q_blk.shape[2]
        m = torch.full((B, H, rows), -math.inf, device=q.device)
        l = torch.zeros((B, H, rows), device=q.device)
        acc = torch.zeros((B, H, rows, D), device=q.device)
        stop = min(n_kv, start_m + rows) if causal else n_kv  # causal: no key block past the diagonal
        for start_n in range(0, stop, block_n):
            k_blk = k[:, :, start_n:start_n + block_n].float()
            v_blk = v[:, :, start_n:start_n + block_n].float()
            s = (q_blk @ k_blk.transpose(-1, -2)) * scale  # (B, H, rows, cols): one tile of scores
            if causal and start_n + k_blk.shape[2] > start_m + 1:  # the tile reaches past the diagonal
                qi = torch.arange(start_m, start_m + rows, device=q.device)[:, None]
                kj = torch.arange(start_n, start_n + k_blk.shape[2], device=q.device)[None, :]
                s = s.masked_fill(kj > qi, -math.inf)
            # Every row sees key 0 in the first block it visits, so m is finite from the first block on.
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)  # what was summed under the old max, measured from the new one
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ v_blk
            m = m_new
        o[:, :, start_m:start_m + rows] = (acc / l[..., None]).to(q.dtype)  # one normalisation, at the end
        lse[:, :, start_m:start_m + rows] = m + torch.log(l)
    return o, lse

