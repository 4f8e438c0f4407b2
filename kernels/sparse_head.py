"""A SPLADE-style sparse head, fused: weights[b, v] = max over unmasked tokens s of log(1 + relu(h[b, s] · w[v] + b[v])).

h (B, S, H) hidden states, w (V, H) and b (V,) the masked-language-model head, mask (B, S) the real tokens;
weights (B, V) float32. Unfused, the logits h wᵀ + b are B x S x V (16 passages of 512 tokens over BERT's 30522
words: 1 GB in float32), written once and read three times. log(1 + relu(z)) never decreases in z, so the max
over the sequence can be taken on the logits themselves and the activation applied once per (b, v) at the end.
Fused: one program per (vocabulary tile, passage) runs the GEMM of notebook 04 over blocks of BLOCK_S tokens,
adds the bias, sets masked and out-of-range tokens to -inf, and folds each block into a running max held in
registers; nothing of size S x V is stored. Flops 2 B S H V, as for the logits alone; bytes e (B S H + V H + V)
+ B S + 4 B V. The programs of one vocabulary tile are numbered side by side, so its w tile is read from HBM once
and from L2 by the other passages.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.sparse_head import (  # noqa: F401  the torch side of the op, shared with the grader
    sparse_head_eager,
    sparse_head_flops,
    sparse_head_reference,
    sparse_logits_bytes,
)
from kernels.matmul import dot_precision, tile_dot


@triton.jit
def _sparse_head_kernel(h_ptr, w_ptr, b_ptr, mask_ptr, out_ptr, B, S, H, V, stride_hb, stride_hs, stride_hh,
                        stride_wv, stride_wh, stride_mb, stride_ms, stride_ob,
                        BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                        PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    batch = pid % B  # the passages of one vocabulary tile are neighbours: they share its w tile in L2
    rv = (pid // B) * BLOCK_V + tl.arange(0, BLOCK_V)
    bias = tl.load(b_ptr + rv, mask=rv < V, other=0.0).to(tl.float32)
    best = tl.full([BLOCK_V], -float("inf"), dtype=tl.float32)
    h_row = h_ptr + batch.to(tl.int64) * stride_hb
    for s0 in range(0, S, BLOCK_S):
        rs = s0 + tl.arange(0, BLOCK_S)
        # w is (V, H): read as the (H, V) matrix wᵀ by swapping its strides.
        z = tile_dot(h_row, w_ptr, rs, rv, S, V, H, stride_hs, stride_hh, stride_wh, stride_wv,
                     BLOCK_S, BLOCK_V, BLOCK_H, PRECISION) + bias[None, :]
        keep = tl.load(mask_ptr + batch.to(tl.int64) * stride_mb + rs * stride_ms, mask=rs < S, other=0) != 0
        z = tl.where(keep[:, None], z, -float("inf"))
        best = tl.maximum(best, tl.max(z, axis=0))
    # log(1 + relu(max)): 0 where no token was kept (max = -inf)
    tl.store(out_ptr + batch.to(tl.int64) * stride_ob + rv, tl.log(1.0 + tl.maximum(best, 0.0)), mask=rv < V)


def sparse_head_settings(S: int, H: int, element_size: int) -> dict:
    """Tiles of notebook 04's GEMM: 64 tokens x 128 words, narrower in H for float32 (twice the shared memory)."""
    block_s = 64 if S > 32 else 16
    if element_size > 2:
        return dict(BLOCK_S=block_s, BLOCK_V=64, BLOCK_H=32, num_warps=4, num_stages=3)
    return dict(BLOCK_S=block_s, BLOCK_V=128, BLOCK_H=64, num_warps=4, num_stages=3)


def _check_head_inputs(h, w, b, mask) -> tuple[int, int, int, int]:
    """(B, S, H, V), or a ValueError naming what is malformed."""
    if h.dim() != 3 or w.dim() != 2 or h.shape[2] != w.shape[1]:
        raise ValueError(f"want h (B, S, H) and w (V, H), got {tuple(h.shape)} and {tuple(w.shape)}")
    if b.shape != (w.shape[0],):
        raise ValueError(f"want b of shape ({w.shape[0]},), got {tuple(b.shape)}")
    if mask.shape != h.shape[:2]:
        raise ValueError(f"want mask of shape {tuple(h.shape[:2])}, got {tuple(mask.shape)}")
    if not h.is_floating_point() or w.dtype != h.dtype or b.dtype != h.dtype:
        raise ValueError(f"h, w and b must share a floating dtype, got {h.dtype}, {w.dtype} and {b.dtype}")
    return h.shape[0], h.shape[1], h.shape[2], w.shape[0]


def sparse_head(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weights (B, V) float32: the masked max over the sequence of log1p(relu(h @ w.T + b)), one launch."""
    B, S, H, V = _check_head_inputs(h, w, b, mask)
    out = torch.empty((B, V), dtype=torch.float32, device=h.device)
    if B == 0 or V == 0:
        return out
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)  # the same bytes, a type Triton loads
    cfg = sparse_head_settings(S, H, h.element_size())
    grid = (B * triton.cdiv(V, cfg["BLOCK_V"]),)
    _sparse_head_kernel[grid](h, w, b, mask, out, B, S, H, V, h.stride(0), h.stride(1), h.stride(2), w.stride(0),
                              w.stride(1), mask.stride(0), mask.stride(1), out.stride(0),
                              PRECISION=dot_precision(h.dtype), **cfg)
    return out
