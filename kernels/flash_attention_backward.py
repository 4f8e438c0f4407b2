"""FlashAttention backward: dQ, dK, dV from q, k, v, the forward's o and log-sum-exp, and dO, without S or P.

With s = q kᵀ / sqrt(D), p = softmax(s) row by row and o = p v, the chain rule gives, per head,
    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - delta),   dQ = dS K / sqrt(D),   dK = dSᵀ Q / sqrt(D),
where delta_i = Σ_j P_ij dP_ij = dO_i · O_i (one number per query row, computed from O instead of P).
Nothing N x N is stored: each tile of P is rebuilt where it is needed as exp(s - lse), from the forward's
saved log-sum-exp, one subtraction instead of a second online softmax.

Three launches: delta (a row reduction over dO ∘ O); dK and dV, a program per block of keys walking the
queries that see them (both sums run over queries, so they stay in its registers); dQ, a program per block
of queries walking the keys, as the forward does. Splitting the two avoids atomic adds on dQ at the price
of computing each tile of P twice. Flops: 5 products of 2 N N_kv D per head (2.5x the forward's 2), half
with a causal mask; bytes at least e (|q| + |k| + |v| + |o| + |dO| + |dQ| + |dK| + |dV|) + 8 N per head.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from autograder.specs.fusion_for_training import (  # noqa: F401  the torch side, shared with the grader
    attention_backward_bytes,
    attention_backward_eager,
    attention_backward_flops,
    attention_backward_reference,
)
from kernels.flash_attention import LOG2E, _check_out, _key_ranges


@triton.jit
def _delta_kernel(o_ptr, do_ptr, delta_ptr, H, N, stride_ob, stride_oh, stride_on, stride_od,
                  stride_db, stride_dh, stride_dn, stride_dd, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    # delta_i = dO_i · O_i in float32, for BLOCK_M query rows of one head.
    block_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < N
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od,
                mask=rows, other=0.0)
    do = tl.load(do_ptr + b * stride_db + h * stride_dh + offs_m[:, None] * stride_dn + offs_d[None, :] * stride_dd,
                 mask=rows, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(delta_ptr + bh.to(tl.int64) * N + offs_m, delta, mask=offs_m < N)


@triton.jit
def _dkdv_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, offs_n, offs_m0, lo, hi, N,
                       stride_qn, stride_dn, qk_scale, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
                       CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # Queries lo .. hi against this program's keys, in the transposed orientation (keys down, queries across)
    # so that dK += dSᵀ Q and dV += Pᵀ dO are plain products of what is in registers.
    for start in range(lo, hi, BLOCK_M):
        offs_m = start + offs_m0
        if MASKED:
            q = tl.load(q_ptrs + start * stride_qn, mask=offs_m[:, None] < N, other=0.0)
            do = tl.load(do_ptrs + start * stride_dn, mask=offs_m[:, None] < N, other=0.0)
            lse = tl.load(lse_ptr + offs_m, mask=offs_m < N, other=0.0)
            delta = tl.load(delta_ptr + offs_m, mask=offs_m < N, other=0.0)
        else:
            q = tl.load(q_ptrs + start * stride_qn)
            do = tl.load(do_ptrs + start * stride_dn)
            lse = tl.load(lse_ptr + offs_m)
            delta = tl.load(delta_ptr + offs_m)
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :] * 1.4426950408889634)  # P rebuilt: exp(s - lse)
        if MASKED:
            keep = offs_m[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, H, N, N_KV,
                 stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd, stride_db, stride_dh, stride_dn, stride_dd,
                 stride_gb, stride_gh, stride_gn, qk_scale, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                 CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    block_n, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    start_n = block_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < N_KV
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=keys, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=keys, other=0.0)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m0[:, None] * stride_qn + offs_d[None, :] * stride_qd
    do_ptrs = do_ptr + b * stride_db + h * stride_dh + offs_m0[:, None] * stride_dn + offs_d[None, :] * stride_dd
    lse_ptr += bh.to(tl.int64) * N
    delta_ptr += bh.to(tl.int64) * N
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # Query blocks [lo, mid) cross the diagonal (causal) and are masked; [mid, whole) see every key here and
    # are not; [whole, N) is the ragged end. Queries above the diagonal never see these keys: not visited.
    whole = N // BLOCK_M * BLOCK_M
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
        mid = tl.maximum(lo, tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, whole))
    else:
        lo = 0
        mid = 0
    tail = tl.maximum(mid, whole)
    dk, dv = _dkdv_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, offs_n, offs_m0, lo, mid, N,
                                stride_qn, stride_dn, qk_scale, BLOCK_M, True, CAUSAL, PRECISION)
    dk, dv = _dkdv_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, offs_n, offs_m0, mid, whole, N,
                                stride_qn, stride_dn, qk_scale, BLOCK_M, False, CAUSAL, PRECISION)
    dk, dv = _dkdv_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, offs_n, offs_m0, tail, N, N,
                                stride_qn, stride_dn, qk_scale, BLOCK_M, True, CAUSAL, PRECISION)
    out = b * stride_gb + h * stride_gh + offs_n[:, None] * stride_gn + offs_d[None, :]  # dK and dV alike
    tl.store(dk_ptr + out, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=keys)


@triton.jit
def _dq_over_keys(dq, q, do, lse, delta, k_ptrs, v_ptrs, offs_m, offs_n0, lo, hi, N_KV, stride_kn, stride_vn,
                  qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                  PRECISION: tl.constexpr):
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + offs_n0
        if MASKED:
            k = tl.load(k_ptrs + start * stride_kn, mask=offs_n[:, None] < N_KV, other=0.0)
            v = tl.load(v_ptrs + start * stride_vn, mask=offs_n[:, None] < N_KV, other=0.0)
        else:
            k = tl.load(k_ptrs + start * stride_kn)
            v = tl.load(v_ptrs + start * stride_vn)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if MASKED:
            keep = offs_n[None, :] < N_KV
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    return dq


@triton.jit
def _dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, H, N, N_KV,
               stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
               stride_vb, stride_vh, stride_vn, stride_vd, stride_db, stride_dh, stride_dn, stride_dd,
               stride_gb, stride_gh, stride_gn, qk_scale, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # Causal: the last query blocks walk the most keys; starting them first keeps the tail short.
    block_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < N
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                mask=rows, other=0.0)
    do = tl.load(do_ptr + b * stride_db + h * stride_dh + offs_m[:, None] * stride_dn + offs_d[None, :] * stride_dd,
                 mask=rows, other=0.0)
    lse = tl.load(lse_ptr + bh.to(tl.int64) * N + offs_m, mask=offs_m < N, other=0.0) * 1.4426950408889634
    delta = tl.load(delta_ptr + bh.to(tl.int64) * N + offs_m, mask=offs_m < N, other=0.0)
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n0[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n0[:, None] * stride_vn + offs_d[None, :] * stride_vd
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    full, end = _key_ranges(block_m, N_KV, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_over_keys(dq, q, do, lse, delta, k_ptrs, v_ptrs, offs_m, offs_n0, 0, full, N_KV, stride_kn, stride_vn,
                       qk_scale, BLOCK_N, False, CAUSAL, PRECISION)
    dq = _dq_over_keys(dq, q, do, lse, delta, k_ptrs, v_ptrs, offs_m, offs_n0, full, end, N_KV, stride_kn,
                       stride_vn, qk_scale, BLOCK_N, True, CAUSAL, PRECISION)
    out = b * stride_gb + h * stride_gh + offs_m[:, None] * stride_gn + offs_d[None, :]
    tl.store(dq_ptr + out, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rows)


def attention_backward_settings(head_dim: int, dtype: torch.dtype) -> tuple[dict, dict]:
    """(dK/dV launch, dQ launch): tiles by head size, from timing each kernel alone over tile settings at
    (4, 16, 4096, D) bf16 on an H100, causal and not (python -m bench.training --sweep). Float32 tiles
    take twice the room."""
    if dtype == torch.float32:
        small = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
        return small, small
    dq = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    if head_dim <= 64:
        return dict(BLOCK_M=32, BLOCK_N=128, num_warps=8, num_stages=3), dq
    return dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2), dq


def _check_backward_inputs(q, k, v, o, lse, do, causal: bool):
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"want q (B, H, N, D) and k, v (B, H, N_kv, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if o.shape != q.shape or do.shape != q.shape:
        raise ValueError(f"o and do must have q's shape {tuple(q.shape)}, got {tuple(o.shape)} and {tuple(do.shape)}")
    if lse.shape != q.shape[:3] or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 of shape {tuple(q.shape[:3])}, got {lse.dtype} {tuple(lse.shape)}")
    if not (q.dtype == k.dtype == v.dtype == o.dtype == do.dtype) or not q.is_floating_point():
        raise ValueError(f"q, k, v, o and do must share a floating dtype, got "
                         f"{[t.dtype for t in (q, k, v, o, do)]}")
    if q.shape[3] not in (16, 32, 64, 128, 256):
        raise ValueError(f"head_dim {q.shape[3]} is not supported: use 16, 32, 64, 128 or 256")
    if causal and k.shape[2] != q.shape[2]:
        raise ValueError(f"causal attention here needs as many keys as queries, got N={q.shape[2]}, "
                         f"N_kv={k.shape[2]}")


def flash_attention_backward(q, k, v, o, lse, do, causal: bool = False, out=None):
    """(dq, dk, dv) of attention(q, k, v) for the output gradient do, given the forward's o and lse (B, H, N).
    With `out` = (dq, dk, dv), views of any strides but the last (dk's the same as dv's), the gradients are
    written there: slices of one (B, N, 3, H, D) buffer are the fused QKV projection's gradient, no copy."""
    _check_backward_inputs(q, k, v, o, lse, do, causal)
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    if out is None:
        dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    else:
        dq, dk, dv = out
        for name, t, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
            _check_out(t, like, f"out's {name}")
        if dk.stride() != dv.stride():
            raise ValueError(f"out's dk and dv must share strides, got {dk.stride()} and {dv.stride()}")
    if B * H == 0 or N == 0 or n_kv == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    lse = lse.contiguous()
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    _delta_kernel[(triton.cdiv(N, 64), B * H)](o, do, delta, H, N, *o.stride(), *do.stride(), BLOCK_M=64, HEAD_DIM=D)
    kv_cfg, q_cfg = attention_backward_settings(D, q.dtype)
    scale = 1.0 / math.sqrt(D)
    common = dict(HEAD_DIM=D, CAUSAL=causal, PRECISION="ieee" if q.dtype == torch.float32 else None)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    _dkdv_kernel[(triton.cdiv(n_kv, kv_cfg["BLOCK_N"]), B * H)](
        q, k, v, do, lse, delta, dk, dv, H, N, n_kv, *strides, *dk.stride()[:3], LOG2E * scale, scale, **common,
        **kv_cfg)
    _dq_kernel[(triton.cdiv(N, q_cfg["BLOCK_M"]), B * H)](
        q, k, v, do, lse, delta, dq, H, N, n_kv, *strides, *dq.stride()[:3], LOG2E * scale, scale, **common,
        **q_cfg)
    return dq, dk, dv
