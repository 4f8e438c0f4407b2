"""FlashAttention backward in one pass over the tiles of P: dK and dV summed in registers as the course's backward
does, and dQ added up in float32 memory by atomic adds, where the course's backward computes it in a second kernel.

Same op, inputs and outputs as kernels/flash_attention_backward.py. With s = q kᵀ / sqrt(D) and P = exp(s - lse),
    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - delta),   dK = dSᵀ Q / sqrt(D),   dQ = dS K / sqrt(D).
The course's backward runs a dK/dV kernel (a program per key block: S, dV, dP, dK, four products a tile) and a
dQ kernel (a program per query block: S and dP again, then dQ, three more): seven products of 2 N N_kv D flops a
head, where five are the work. Here each program of the dK/dV kernel also multiplies its dS tile by its K tile and
adds the result into a float32 dQ accumulator that every key block of the head adds to: five products a tile, at
the price of adding BLOCK_M x D floats into memory per tile (N_kv / BLOCK_N additions to every element of dQ;
ATOMIC="tma" does it as one bulk reduction of the copy engine per tile on Hopper, "pointer" as one atomic add a
float; rows past a head's last query add exact zeros, so neither needs a mask beyond the tensor's end). FlashAttention-2 and -3 compute dQ this way. A last step scales nothing (dS K is scaled before it is
added) and rounds the float32 sum to the inputs' dtype. Extra memory: dQ in float32, 4 B H N D bytes.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.flash_attention import LOG2E
from kernels.flash_attention_backward import _check_backward_inputs, _delta_kernel
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer


@triton.jit
def _dkdv_dq_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, dq_desc, dq_row, offs_n,
                          offs_m0, lo, hi, N, stride_qn, stride_dn, qk_scale, sm_scale, BLOCK_M: tl.constexpr,
                          MASKED: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC: tl.constexpr,
                          PRECISION: tl.constexpr):
    # Queries lo .. hi against this program's keys, keys down and queries across (kernels.flash_attention_backward
    # ._dkdv_over_queries), and each tile's share of dQ added into the float32 accumulator.
    for start in range(lo, hi, BLOCK_M):
        offs_m = start + offs_m0
        rows = offs_m < N
        if MASKED:
            q = tl.load(q_ptrs + start * stride_qn, mask=rows[:, None], other=0.0)
            do = tl.load(do_ptrs + start * stride_dn, mask=rows[:, None], other=0.0)
            lse = tl.load(lse_ptr + offs_m, mask=rows, other=0.0)
            delta = tl.load(delta_ptr + offs_m, mask=rows, other=0.0)
        else:
            q = tl.load(q_ptrs + start * stride_qn)
            do = tl.load(do_ptrs + start * stride_dn)
            lse = tl.load(lse_ptr + offs_m)
            delta = tl.load(delta_ptr + offs_m)
        s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASKED:
            keep = rows[None, :]
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += tl.dot(ds_t, q, input_precision=PRECISION)
        dq = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION) * sm_scale
        if ATOMIC == "tma":  # rows past N (a ragged last tile) hold zeros: adding them to the next head's is harmless
            dq_desc.atomic_add([dq_row + start, 0], dq)
        else:
            tl.atomic_add(dq_ptrs + start * stride_qn, dq, mask=rows[:, None], sem="relaxed")
    return dk, dv


@triton.jit
def _dkdv_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_acc_ptr, dq_desc, H, N, N_KV,
                    stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                    stride_vb, stride_vh, stride_vn, stride_vd, stride_db, stride_dh, stride_dn, stride_dd,
                    qk_scale, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    CAUSAL: tl.constexpr, ATOMIC: tl.constexpr, PRECISION: tl.constexpr):
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
    # dQ's accumulator is (B, H, N, D) float32 and contiguous: this head's rows start at bh N
    dq_ptrs = dq_acc_ptr + bh.to(tl.int64) * N * HEAD_DIM + offs_m0[:, None] * HEAD_DIM + offs_d[None, :]
    lse_ptr += bh.to(tl.int64) * N
    delta_ptr += bh.to(tl.int64) * N
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # As the course's dK/dV kernel: [lo, mid) crosses the diagonal (causal), [mid, whole) is whole tiles, [whole, N)
    # the ragged end; queries above the diagonal never see these keys. (dq's pointers step as q's do: its row
    # stride is D, q's stride_qn, equal for the contiguous inputs this launcher takes.)
    whole = N // BLOCK_M * BLOCK_M
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
        mid = tl.maximum(lo, tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, whole))
    else:
        lo = 0
        mid = 0
    tail = tl.maximum(mid, whole)
    dq_row = bh * N
    dk, dv = _dkdv_dq_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, dq_desc, dq_row,
                                   offs_n, offs_m0, lo, mid, N, stride_qn, stride_dn, qk_scale, sm_scale, BLOCK_M,
                                   True, CAUSAL, ATOMIC, PRECISION)
    dk, dv = _dkdv_dq_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, dq_desc, dq_row,
                                   offs_n, offs_m0, mid, whole, N, stride_qn, stride_dn, qk_scale, sm_scale, BLOCK_M,
                                   False, CAUSAL, ATOMIC, PRECISION)
    dk, dv = _dkdv_dq_over_queries(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, dq_desc, dq_row,
                                   offs_n, offs_m0, tail, N, N, stride_qn, stride_dn, qk_scale, sm_scale, BLOCK_M,
                                   True, CAUSAL, ATOMIC, PRECISION)
    out = bh.to(tl.int64) * N_KV * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]  # dK, dV contiguous
    tl.store(dk_ptr + out, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keys)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=keys)


# Tried in order; a setting this Triton or GPU cannot compile is skipped from then on (kernels.tma.
# first_that_compiles). The first is the course's dK/dV setting at D = 128. Not yet timed: python -m
# bench.hopper measures these against the course's backward and SDPA's.
ATOMIC_SETTINGS = tuple({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s}
                        for bm, bn, w, s in ((64, 128, 8, 2), (64, 64, 4, 3), (32, 128, 8, 3)))


def flash_attention_backward_atomic(q, k, v, o, lse, do, causal: bool = False, settings: tuple | None = None,
                                    atomic: str | None = None, warmup: bool = False):
    """(dq, dk, dv) as flash_attention_backward gives them, in one pass (dQ by atomic adds in float32), for
    contiguous q, k, v and dO. atomic: "tma" (Hopper's bulk reductions, the default there) or "pointer" (the
    default elsewhere). warmup=True compiles the first setting without running it and returns the handles of its
    kernels."""
    _check_backward_inputs(q, k, v, o, lse, do, causal)
    if not all(t.is_contiguous() for t in (q, k, v, do)):
        raise ValueError("the one-pass backward takes contiguous q, k, v and dO")
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    settings = settings or ATOMIC_SETTINGS
    atomic = atomic or ("tma" if hopper_or_newer(q.device) else "pointer")
    if atomic not in ("tma", "pointer"):
        raise ValueError(f"atomic must be 'tma' or 'pointer', got {atomic!r}")
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.zeros((B, H, N, D), dtype=torch.float32, device=q.device)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    lse = lse.contiguous()
    scale = 1.0 / math.sqrt(D)
    common = {"HEAD_DIM": D, "CAUSAL": causal, "PRECISION": "ieee" if q.dtype == torch.float32 else None,
              "ATOMIC": atomic}
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())

    def launch(cfg, warm=False):
        # not read on the pointer path, which adds through dq_acc_ptr
        dq_desc = descriptor(dq_acc.view(-1, D), [cfg["BLOCK_M"], D]) if atomic == "tma" else dq_acc
        grid = (triton.cdiv(n_kv, cfg["BLOCK_N"]), B * H)
        args = (q, k, v, do, lse, delta, dk, dv, dq_acc, dq_desc, H, N, n_kv, *strides, LOG2E * scale, scale)
        if warm:
            return [_delta_kernel.warmup(o, do, delta, H, N, *o.stride(), *do.stride(), grid=(1,), BLOCK_M=64,
                                         HEAD_DIM=D),
                    _dkdv_dq_kernel.warmup(*args, grid=grid, **common, **cfg)]
        return _dkdv_dq_kernel[grid](*args, **common, **cfg)

    if warmup:
        return launch(settings[0], warm=True)
    if B * H == 0 or N == 0 or n_kv == 0:
        return torch.zeros_like(q), dk.zero_(), dv.zero_()
    _delta_kernel[(triton.cdiv(N, 64), B * H)](o, do, delta, H, N, *o.stride(), *do.stride(), BLOCK_M=64, HEAD_DIM=D)
    first_that_compiles(_dkdv_dq_kernel, settings, launch)
    return dq_acc.to(q.dtype), dk, dv
