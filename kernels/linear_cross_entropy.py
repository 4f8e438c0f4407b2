"""Fused linear + cross-entropy forward: loss_i = logsumexp_v(h_i · w_v) - h_i · w_{t_i}, without the logits.

h (M, K) hidden states, w (V, K) the vocabulary matrix (an lm_head's weight), targets (M,) in [0, V); loss (M,)
float32. The logits h wᵀ are M x V: 8192 tokens x 128256 words is 4 GiB in float32, more than the model's
activations, and PyTorch writes them, reads them for the softmax statistics, and again for the backward.
Fused: each program computes one BLOCK_M x BLOCK_V tile of logits with the GEMM of notebook 04 and, in its
epilogue, reduces it to per-row (max, sum of exp) over its BLOCK_V words and picks out the target's logit
when it falls in the tile; a second, small kernel combines the V / BLOCK_V partials of each row with the
online-softmax rule. Extra memory: 2 M V / BLOCK_V floats of partials instead of M V logits.
Flops 2 M V K, as for the logits alone; bytes e (M K + V K) + a few per row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.streaming_reduction_fusion import (  # noqa: F401  the torch side of the op, shared with the grader
    linear_cross_entropy_eager,
    linear_cross_entropy_flops,
    linear_cross_entropy_reference,
    logits_bytes,
)
from kernels.matmul import dot_precision, grouped_tile, tile_dot
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer, persistent_programs, tma_ready


@triton.jit
def _tile_stats(logits, rm, off_v, part, M, V, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts,
                WIDTH: tl.constexpr):
    # The GEMM's epilogue on a tile of logits for words off_v .. off_v + WIDTH: its share of each row's
    # softmax statistics, in float32, stored as partial number `part` of the row; and the target's logit
    # when it falls in this tile (exactly one tile holds it). A tile wholly past V (the second half of the last
    # tile) has max -inf and sum 0, which the combining step takes as "no words here" (not exp(-inf + inf) = NaN).
    rv = off_v + tl.arange(0, WIDTH)
    logits = tl.where(rv[None, :] < V, logits, -float("inf"))
    tile_max = tl.max(logits, axis=1)
    tile_sum = tl.sum(tl.exp(logits - tl.where(tile_max == -float("inf"), 0.0, tile_max)[:, None]), axis=1)
    rows = rm < M
    where = rm.to(tl.int64) * n_parts + part
    tl.store(part_m_ptr + where, tile_max, mask=rows)
    tl.store(part_s_ptr + where, tile_sum, mask=rows)
    target = tl.load(t_ptr + rm, mask=rows, other=-1)
    here = (target >= off_v) & (target < off_v + WIDTH) & rows
    picked = tl.sum(tl.where(rv[None, :] == target[:, None], logits, 0.0), axis=1)
    tl.store(tgt_ptr + rm, picked, mask=here)


@triton.jit
def _logit_tile_stats_kernel(h_ptr, w_ptr, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, M, V, K, stride_hm, stride_hk,
                             stride_wv, stride_wk, n_vtiles, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_v = grouped_tile(tl.program_id(0), M, V, BLOCK_M, BLOCK_V, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    # w is (V, K): read it as the (K, V) matrix wᵀ by swapping its strides; no transpose is materialised.
    logits = tile_dot(h_ptr, w_ptr, rm, rv, M, V, K, stride_hm, stride_hk, stride_wk, stride_wv,
                      BLOCK_M, BLOCK_V, BLOCK_K, PRECISION)
    _tile_stats(logits, rm, pid_v * BLOCK_V, pid_v, M, V, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_vtiles, BLOCK_V)


@triton.jit
def _combine_kernel(part_m_ptr, part_s_ptr, tgt_ptr, loss_ptr, M, n_vtiles, BLOCK_T: tl.constexpr):
    # One row: fold its tiles' (max, sum) pairs into the log-sum-exp, online, BLOCK_T tiles at a time.
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_T)
    m = tl.full([BLOCK_T], -float("inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK_T], dtype=tl.float32)
    for start in range(0, n_vtiles, BLOCK_T):
        valid = start + offs < n_vtiles
        pm = tl.load(part_m_ptr + row * n_vtiles + start + offs, mask=valid, other=-float("inf"))
        ps = tl.load(part_s_ptr + row * n_vtiles + start + offs, mask=valid, other=0.0)
        m_new = tl.maximum(m, pm)
        ref = tl.where(m_new == -float("inf"), 0.0, m_new)  # no tile seen yet in this lane: avoid -inf - -inf
        s = s * tl.exp(m - ref) + ps * tl.exp(pm - ref)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    tl.store(loss_ptr + row, row_max + tl.log(total) - tl.load(tgt_ptr + row))


def ce_launch_settings(M: int, V: int, K: int, element_size: int = 2) -> dict:
    """The prefill tile of notebook 04's GEMM, narrower in V for float32 (twice the shared memory)."""
    if element_size > 2:
        return dict(BLOCK_M=64, BLOCK_V=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3)
    if M <= 256:
        return dict(BLOCK_M=64, BLOCK_V=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4)
    return dict(BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4)


def _check_inputs(h, w, targets, sync: bool = True) -> tuple[int, int, int]:
    """(M, K, V), or a ValueError naming what is malformed. With sync=False the targets' range is checked on the
    GPU (a device-side assert) instead of read back to the host: a training step then never waits for the GPU,
    and can be recorded in a CUDA graph."""
    if h.dim() != 2 or w.dim() != 2 or h.shape[1] != w.shape[1]:
        raise ValueError(f"want h (M, K) and w (V, K), got {tuple(h.shape)} and {tuple(w.shape)}")
    if h.dtype != w.dtype or not h.is_floating_point():
        raise ValueError(f"h and w must share a floating dtype, got {h.dtype} and {w.dtype}")
    if targets.shape != (h.shape[0],) or targets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"want integer targets of shape ({h.shape[0]},), got {targets.dtype} {tuple(targets.shape)}")
    M, K = h.shape
    V = w.shape[0]
    if M and not sync and targets.is_cuda:
        torch._assert_async(((targets >= 0) & (targets < V)).all(), f"targets must lie in [0, {V})")
    elif M and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise ValueError(f"targets must lie in [0, {V}), got values from {int(targets.min())} to {int(targets.max())}")
    return M, K, V


def linear_cross_entropy(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy of the logits h @ w.T against targets, never holding the logits: loss (M,) float32."""
    M, K, V = _check_inputs(h, w, targets)
    if M == 0:
        return torch.empty(0, dtype=torch.float32, device=h.device)
    cfg = ce_launch_settings(M, V, K, h.element_size())
    n_vtiles = triton.cdiv(V, cfg["BLOCK_V"])
    part_m = torch.empty((M, n_vtiles), dtype=torch.float32, device=h.device)
    part_s = torch.empty((M, n_vtiles), dtype=torch.float32, device=h.device)
    tgt = torch.empty(M, dtype=torch.float32, device=h.device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * n_vtiles,)
    _logit_tile_stats_kernel[grid](h, w, targets, part_m, part_s, tgt, M, V, K, h.stride(0), h.stride(1), w.stride(0),
                                   w.stride(1), n_vtiles, PRECISION=dot_precision(h.dtype), **cfg)
    return _combine(part_m, part_s, tgt)


def _combine(part_m, part_s, tgt) -> torch.Tensor:
    """The loss per row from its partial (max, sum) pairs (M, n_parts) and its target's logit."""
    M, n_parts = part_m.shape
    loss = torch.empty(M, dtype=torch.float32, device=part_m.device)
    _combine_kernel[(M,)](part_m, part_s, tgt, loss, M, n_parts, BLOCK_T=min(1024, triton.next_power_of_2(n_parts)))
    return loss


# --- The Hopper path: persistent programs fed by the TMA copy engine (notebook 04's fast GEMM) -----------

@triton.jit
def _logit_stats_tma_kernel(h_desc, w_desc, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, M, V, K, n_parts,
                            BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, SUBTILES: tl.constexpr,
                            FLATTEN: tl.constexpr):
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(V, BLOCK_V)
    for tile in tl.range(tl.program_id(0), n_tiles, PROGRAMS, flatten=FLATTEN):
        pid_m, pid_v = grouped_tile(tile, M, V, BLOCK_M, BLOCK_V, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_v = pid_v * BLOCK_V
        acc = tl.zeros((BLOCK_M, BLOCK_V), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(h_desc.load([off_m, k]), w_desc.load([off_v, k]).T, acc)  # w (V, K): tiles transposed
        rm = off_m + tl.arange(0, BLOCK_M)
        if SUBTILES == 2:  # statistics of each column half: half the registers live in the epilogue
            acc = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_V // 2)), (0, 2, 1))
            left, right = tl.split(acc)
            _tile_stats(left, rm, off_v, 2 * pid_v, M, V, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts,
                        BLOCK_V // 2)
            _tile_stats(right, rm, off_v + BLOCK_V // 2, 2 * pid_v + 1, M, V, t_ptr, part_m_ptr, part_s_ptr,
                        tgt_ptr, n_parts, BLOCK_V // 2)
        else:
            _tile_stats(acc, rm, off_v, pid_v, M, V, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts, BLOCK_V)


# Tried in order; a setting this Triton or GPU cannot compile is skipped from then on (see kernels.tma). Timed
# on an H200 at 8192 x 4096 -> 128256 bf16 (python -m bench.streaming --sweep): 13.10 ms, against
# cuBLAS computing the logits alone in 12.67 and torch.compile's whole loss in 13.93; flattening the loops and
# halving the epilogue (SUBTILES=2) measured the same, narrower tiles 7 to 11% slower.
CE_TMA_SETTINGS = (
    dict(BLOCK_M=128, BLOCK_V=256, BLOCK_K=64, GROUP_M=8, SUBTILES=1, FLATTEN=False, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_V=128, BLOCK_K=64, GROUP_M=8, SUBTILES=1, FLATTEN=False, num_warps=4, num_stages=4),
)


def linear_cross_entropy_tma(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor,
                             settings: tuple | None = None) -> torch.Tensor:
    """linear_cross_entropy through the TMA engine on Hopper (16-bit, prefill-sized M, row-major h and w);
    the portable kernels elsewhere. Same result."""
    if not (h.shape[0] > 256 and h.dtype in (torch.float16, torch.bfloat16) and hopper_or_newer(h.device)
            and tma_ready(h) and tma_ready(w)):
        return linear_cross_entropy(h, w, targets)
    _check_inputs(h, w, targets)
    return _launch_ce_tma(h, w, targets, settings or CE_TMA_SETTINGS)


def _launch_ce_tma(h, w, targets, settings: tuple) -> torch.Tensor:
    M, K = h.shape
    V = w.shape[0]
    tgt = torch.empty(M, dtype=torch.float32, device=h.device)
    parts = {}

    def launch(cfg):
        bm, bv, bk = cfg["BLOCK_M"], cfg["BLOCK_V"], cfg["BLOCK_K"]
        n_parts = triton.cdiv(V, bv) * cfg["SUBTILES"]
        parts["m"] = torch.empty((M, n_parts), dtype=torch.float32, device=h.device)
        parts["s"] = torch.empty((M, n_parts), dtype=torch.float32, device=h.device)
        programs = persistent_programs(triton.cdiv(M, bm) * triton.cdiv(V, bv), h.device)
        _logit_stats_tma_kernel[(programs,)](descriptor(h, [bm, bk]), descriptor(w, [bv, bk]), targets, parts["m"],
                                             parts["s"], tgt, M, V, K, n_parts, PROGRAMS=programs, **cfg)

    first_that_compiles(_logit_stats_tma_kernel, settings, launch)
    return _combine(parts["m"], parts["s"], tgt)
