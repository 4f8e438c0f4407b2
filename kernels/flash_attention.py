"""FlashAttention forward: O = softmax(Q Kᵀ / sqrt(D)) V without ever writing S = Q Kᵀ or P = softmax(S).

q (B, H, N, D), k and v (B, H, N_kv, D); o like q, and lse (B, H, N) float32, each row's log-sum-exp (what a
backward pass needs to rebuild P). A program owns BLOCK_M query rows of one head. It loops over K/V in
tiles of BLOCK_N keys: S_tile = Q K_tileᵀ (tensor cores), an online-softmax update of the row max m and
row sum l (rescaling what was accumulated by exp(m_old - m_new)), and acc += P_tile V_tile, all in
registers. Memory: O(N) (o and lse) instead of the O(N²) S and P of the textbook version. Bytes: q, k, v
read and o written once per program row-block of K/V passes: at least e (|q| + |k| + |v| + |o|), with K and V
re-read once per query block (from L2, mostly). Flops: 4 B H N N_kv D (half that with a causal mask).
Causal: query i sees keys j <= i; tiles entirely above the diagonal are skipped, not masked.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from autograder.specs.streaming_reduction_fusion import (  # noqa: F401  the torch side of the op, shared with the grader
    attention_bytes,
    attention_flops,
    attention_naive,
    attention_reference,
    attention_scores,
)
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer, tma_ready

LOG2E = 1.4426950408889634


@triton.jit
def _online_softmax_step(s, m_i, l_i, qk_scale):
    # s: raw scores q·k of one key tile (-inf where masked). In base 2: exp2 is one instruction, and
    # scale-and-subtract is one fused multiply-add per score.
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)  # rescales what was summed under the old max
    return p, alpha, m_new, l_i * alpha + tl.sum(p, axis=1)


@triton.jit
def _visible(s, offs_m, cols, n_kv, CAUSAL: tl.constexpr):
    # -inf for the keys a query may not see: past the end of K/V, and (causal) after the query itself.
    keep = cols[None, :] < n_kv
    if CAUSAL:
        keep = keep & (offs_m[:, None] >= cols[None, :])
    return tl.where(keep, s, -float("inf"))


@triton.jit
def _key_ranges(block_m, N_KV, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # (full, end): key tiles 0 .. full are wholly visible to every row of the query block and need no mask;
    # full .. end straddle the diagonal (causal) or the end of K/V. Tiles above the diagonal are never visited.
    if CAUSAL:
        full = (block_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = tl.minimum((block_m + 1) * BLOCK_M, N_KV)
    else:
        full = N_KV // BLOCK_N * BLOCK_N
        end = N_KV
    return full, end


@triton.jit
def _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, lo, hi, n_kv, stride_kn, stride_vn, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # Keys lo .. hi, BLOCK_N at a time. MASKED: the tiles that straddle the diagonal or the end of K/V.
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs_n
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[None, :] < n_kv, other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = tl.dot(q, k, input_precision=PRECISION)
        if MASKED:
            s = _visible(s, offs_m, cols, n_kv, CAUSAL)
        p, alpha, m_i, l_i = _online_softmax_step(s, m_i, l_i, qk_scale)
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < n_kv, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, N_KV,
                            stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_on,
                            qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                            CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    full, end = _key_ranges(block_m, N_KV, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, 0, full, N_KV, stride_kn, stride_vn,
                            qk_scale, BLOCK_N, False, CAUSAL, PRECISION)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, full, end, N_KV, stride_kn,
                            stride_vn, qk_scale, BLOCK_N, True, CAUSAL, PRECISION)
    o = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N)
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634  # back to natural log
    tl.store(lse_ptr + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)


def attention_launch_settings(n: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Query and key tiles by head size, chosen by timing on an H200; float32 tiles take twice the room."""
    if dtype == torch.float32 or n <= 64:
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    if head_dim <= 64:
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def _check_attention_inputs(q, k, v, causal: bool):
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"want q (B, H, N, D) and k, v (B, H, N_kv, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise ValueError(f"q, k and v must share a floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    D, N, n_kv = q.shape[3], q.shape[2], k.shape[2]
    if D not in (16, 32, 64, 128, 256):
        raise ValueError(f"head_dim {D} is not supported: use 16, 32, 64, 128 or 256")
    if causal and n_kv != N:
        raise ValueError(f"causal attention here needs as many keys as queries, got N={N}, N_kv={n_kv}")


def _check_out(out: torch.Tensor, like: torch.Tensor, name: str) -> None:
    if out.shape != like.shape or out.dtype != like.dtype or out.device != like.device or out.stride(-1) != 1:
        raise ValueError(f"{name} must be a {like.dtype} tensor of shape {tuple(like.shape)} on {like.device} with "
                         f"contiguous rows, got {out.dtype} {tuple(out.shape)} strides {out.stride()} on {out.device}")


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    out: torch.Tensor | None = None):
    """(o, lse): attention over the last two dimensions of q (B, H, N, D) and k, v (B, H, N_kv, D). With `out`
    (a (B, H, N, D) view of any strides but the last), o is written there: a (B, N, H, D) buffer seen through
    .transpose(1, 2) gives the (B·N, H·D) matrix the next projection reads, without a copy."""
    _check_attention_inputs(q, k, v, causal)
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    if out is not None:
        _check_out(out, q, "out")
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if N == 0 or B * H == 0:
        return o, lse
    cfg = attention_launch_settings(N, D, q.dtype)
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
    _flash_attention_kernel[grid](
        q, k, v, o, lse, H, N, n_kv, *q.stride(), *k.stride(), *v.stride(), *o.stride()[:3],
        LOG2E / math.sqrt(D), HEAD_DIM=D, CAUSAL=causal, PRECISION="ieee" if q.dtype == torch.float32 else None,
        **cfg)
    return o, lse


# --- The Hopper path: Q, K and V tiles moved by the TMA copy engine ---------------------------------------

@triton.jit
def _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, offs_n, lo, hi, n_kv, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    # As _attend, but each K or V tile is one request to the copy engine, from the (B H N_kv, D) matrix whose
    # rows kv_row .. kv_row + N_kv are this head's keys. A tile reaching past them holds the next head's
    # rows: the MASKED stage gives those keys -inf scores and zeroes those values (p = 0 would not clear a NaN).
    for start in range(lo, hi, BLOCK_N):
        k = k_desc.load([kv_row + start, 0])
        s = tl.dot(q, k.T)  # k.T: a view of the tile in shared memory, read as it lies by the tensor cores
        if MASKED:
            s = _visible(s, offs_m, start + offs_n, n_kv, CAUSAL)
        p, alpha, m_i, l_i = _online_softmax_step(s, m_i, l_i, qk_scale)
        v = v_desc.load([kv_row + start, 0])
        if MASKED:
            v = tl.where((start + offs_n)[:, None] < n_kv, v, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_i


@triton.jit
def _flash_attention_tma_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, N, N_KV, qk_scale, BLOCK_M: tl.constexpr,
                                BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    # Causal: the last query blocks have the most keys; launching them first keeps the tail short.
    block_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([bh * N + block_m * BLOCK_M, 0])  # rows past N (the next head's) are computed, not stored
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    full, end = _key_ranges(block_m, N_KV, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, bh * N_KV, offs_m, offs_n, 0, full, N_KV, qk_scale,
                                BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, bh * N_KV, offs_m, offs_n, full, end, N_KV,
                                qk_scale, BLOCK_N, True, CAUSAL)
    o = acc / l_i[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    rows = bh.to(tl.int64) * N + offs_m
    tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < N)
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634
    tl.store(lse_ptr + rows, lse, mask=offs_m < N)


# Tried in order; a setting this Triton or GPU cannot compile is skipped from then on (see kernels.tma). Timed
# on an H200 at (4, 16, 4096, 128) bf16 in turns with SDPA: 128 x 128 tiles 0.80 of SDPA's speed, causal
# or not; 128 x 64 tiles 0.74 to 0.78; warp specialization no faster; a fourth stage slower (and with 128 x 128
# tiles it does not fit in shared memory). Tiles loaded from 4-d descriptors (B, H, N, D) and reshaped were
# 10% slower than these from the 2-d (B H N, D) view: the reshape costs a pass through shared memory.
ATTENTION_TMA_SETTINGS = (
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
)


def flash_attention_tma(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        settings: tuple | None = None):
    """flash_attention through the TMA engine on Hopper, for contiguous 16-bit (B, H, N, D) tensors with heads
    of 128 dimensions or more and sequences of 2048 or more (below that, building the descriptors on the host
    each call costs more than the copy engine saves); the portable kernel elsewhere. Same outputs. At D = 64 the
    portable kernel is 1.15x faster (4, 16, 4096, 64 on an H100 and an H200, both dtypes, causal and not)."""
    _check_attention_inputs(q, k, v, causal)
    if not (q.dtype in (torch.float16, torch.bfloat16) and hopper_or_newer(q.device)
            and all(t.is_contiguous() and tma_ready(t) for t in (q, k, v))
            and min(q.shape[2], k.shape[2]) >= 2048 and q.shape[3] >= 128):
        return flash_attention(q, k, v, causal)
    return _launch_attention_tma(q, k, v, causal, settings or ATTENTION_TMA_SETTINGS)


def _launch_attention_tma(q, k, v, causal: bool, settings: tuple):
    """The TMA kernel on contiguous q, k, v, seen as (B H N, D) matrices."""
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if N == 0 or B * H == 0:
        return o, lse

    def launch(cfg):
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        _flash_attention_tma_kernel[(triton.cdiv(N, bm), B * H)](
            descriptor(q.view(-1, D), [bm, D]), descriptor(k.view(-1, D), [bn, D]),
            descriptor(v.view(-1, D), [bn, D]), o, lse, N, n_kv, LOG2E / math.sqrt(D), HEAD_DIM=D, CAUSAL=causal,
            **cfg)

    first_that_compiles(_flash_attention_tma_kernel, settings, launch)
    return o, lse
