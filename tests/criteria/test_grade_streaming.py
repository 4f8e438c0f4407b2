"""The autograder against planted bugs in notebook 05: row softmax, FlashAttention forward, and the linear layer
fused with cross-entropy.

Each submission is a small, real Triton kernel and launcher that differs from a correct one (the planted kernels
below with no bug switched on, or the course's reference in ``kernels/``) by one typical mistake of streaming
reductions: a max never subtracted, a running sum not rescaled when the max grows, padding that enters the
softmax, a log-sum-exp in the wrong base, an intermediate materialised... Each test grades one criterion with
``kernel.GRADERS`` and checks that it fails and that its message names the mistake. Without a GPU the
kernels run in Triton's interpreter (fp32 and fp16; bf16 and performance are graded on a GPU, by the gpu-marked
tests at the end).
"""

from __future__ import annotations

import math

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check, config, runtime
from autograder.criteria import kernel
from autograder.criteria.cases import precision_shapes
from autograder import specs as registry

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernels import flash_attention as fa
from kernels import linear_cross_entropy as lce
from kernels import matmul as mm
from kernels import softmax as sm
from kernels.matmul import dot_precision, grouped_tile, tile_dot

SOFTMAX, ATTENTION, CE = "05.softmax", "05.flash_attention", "05.linear_cross_entropy"
REFERENCES = {SOFTMAX: sm.softmax, ATTENTION: fa.flash_attention, CE: lce.linear_cross_entropy}
CPU_CRITERIA = {SOFTMAX: ["correctness", "precision", "fusion"], ATTENTION: ["correctness", "precision", "fusion"],
                CE: ["correctness", "precision", "memory"]}

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


def _grade(exercise: str, criterion: str, fn):
    return kernel.GRADERS[criterion](registry.get(exercise), fn, config.load())


def _failure_lines(message: str) -> list[str]:
    """The per-case lines of a failed correctness message (the header and the '... more' line dropped)."""
    return [ln for ln in message.splitlines()[1:] if ln.startswith("shape ")]


# =========================================================================================================
# 05.softmax
# =========================================================================================================

@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_xn, stride_ym, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr,
                    SUBTRACT_MAX: tl.constexpr, PAD_ZERO: tl.constexpr, LOG: tl.constexpr, DIVIDE: tl.constexpr,
                    RESCALE: tl.constexpr, PER_CHUNK: tl.constexpr, LOW_PRECISION_SUM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:  # the whole row in one block
        if PAD_ZERO:  # BUG when set: the lanes past N read 0, and exp(0 - max) joins the row's sum
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=-float("inf")).to(tl.float32)
        if SUBTRACT_MAX:  # BUG when off: exp(x) overflows float32 once x passes 88.7
            x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        total = tl.sum(e, axis=0)
        if LOG:  # BUG when set: log_softmax
            y = x - tl.log(total)
        elif DIVIDE:
            y = e / total
        else:  # BUG: never normalised
            y = e
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)
    elif PER_CHUNK:  # BUG: each chunk of the row normalised on its own, as if it were a row
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + (start + cols) * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(y_row + start + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # The online softmax (Milakov and Gimelshein): a running max m and a running sum d of exp(x - m) for
        # the row, d rescaled by exp(m_old - m_new) whenever the max grows; then a second sweep writes.
        m = tl.max(tl.full([BLOCK_N], -float("inf"), dtype=tl.float32), axis=0)
        d = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), axis=0)
        for start in range(0, N, BLOCK_N):
            x = tl.load(x_row + (start + cols) * stride_xn, mask=start + cols < N, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            ref = tl.where(m_new == -float("inf"), 0.0, m_new)  # nothing finite yet: exp(-inf - -inf) is NaN
            if RESCALE:
                d = d * tl.exp(m - ref) + tl.sum(tl.exp(x - ref), axis=0)
            else:  # BUG: what was summed under the old max is kept as if the max had not moved
                d = d + tl.sum(tl.exp(x - ref), axis=0)
            if LOW_PRECISION_SUM:  # BUG when set: the running sum kept in x's dtype (float16)
                d = d.to(x_ptr.dtype.element_ty).to(tl.float32)
            m = m_new
        ref = tl.where(m == -float("inf"), 0.0, m)
        for start in range(0, N, BLOCK_N):
            x = tl.load(x_row + (start + cols) * stride_xn, mask=start + cols < N, other=-float("inf"))
            y = tl.exp(x.to(tl.float32) - ref) / d
            tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=start + cols < N)


def _softmax(x, *, one_block_max=sm.ONE_BLOCK_MAX, chunk=4096, subtract_max=True, pad_zero=False, log=False,
             divide=True, rescale=True, per_chunk=False, low_precision_sum=False):
    """Whole rows up to one_block_max in one block, longer rows in chunks; one bug switched on by a keyword."""
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    one_block = N <= one_block_max
    block = triton.next_power_of_2(N) if one_block else chunk
    _softmax_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=block, ONE_BLOCK=one_block,
                          SUBTRACT_MAX=subtract_max, PAD_ZERO=pad_zero, LOG=log, DIVIDE=divide, RESCALE=rescale,
                          PER_CHUNK=per_chunk, LOW_PRECISION_SUM=low_precision_sum)
    return y


def _softmax_with(**bug):
    return lambda x: _softmax(x, **bug)


def _softmax_first_block_only(x):
    """BUG: one block per row, capped at 16384 lanes (past that a block spills its registers): a longer row's
    tail is never read nor written."""
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=min(triton.next_power_of_2(N), 16384),
                          ONE_BLOCK=True, SUBTRACT_MAX=True, PAD_ZERO=False, LOG=False, DIVIDE=True, RESCALE=True,
                          PER_CHUNK=False, LOW_PRECISION_SUM=False)
    return y


@triton.jit
def _softmax_columns_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr):
    # A 2-D tile: every row, BLOCK_N columns. BUG: reduced along axis 0, so each column is normalised.
    rows = tl.arange(0, BLOCK_M)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask,
                other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0)[None, :])
    y = e / tl.sum(e, axis=0)[None, :]
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _softmax_over_columns(x):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_columns_kernel[(triton.cdiv(N, 64),)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                                                   BLOCK_M=triton.next_power_of_2(M), BLOCK_N=64)
    return y


@triton.jit
def _row_stats_kernel(x_ptr, max_ptr, sum_ptr, N, stride_xm, stride_xn, BLOCK_N: tl.constexpr):
    # Each row's max, then its sum of exp(x - max): two sweeps over the row, statistics to memory.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    m = tl.max(tl.full([BLOCK_N], -float("inf"), dtype=tl.float32), axis=0)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + (start + cols) * stride_xn, mask=start + cols < N, other=-float("inf"))
        m = tl.maximum(m, tl.max(x.to(tl.float32), axis=0))
    d = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), axis=0)
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row * stride_xm + (start + cols) * stride_xn, mask=start + cols < N, other=-float("inf"))
        d += tl.sum(tl.exp(x.to(tl.float32) - m), axis=0)
    tl.store(max_ptr + row, m)
    tl.store(sum_ptr + row, d)


@triton.jit
def _normalise_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, N, stride_xm, stride_xn, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    m = tl.load(max_ptr + row)
    d = tl.load(sum_ptr + row)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * stride_xm + (start + cols) * stride_xn, mask=mask, other=-float("inf"))
        tl.store(y_ptr + row * stride_ym + start + cols, (tl.exp(x.to(tl.float32) - m) / d).to(y_ptr.dtype.element_ty),
                 mask=mask)


def _row_stats(x):
    M, N = x.shape
    row_max = torch.empty(M, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(M, dtype=torch.float32, device=x.device)
    _row_stats_kernel[(M,)](x, row_max, row_sum, N, x.stride(0), x.stride(1), BLOCK_N=1024)
    return row_max, row_sum


def _softmax_two_kernels(x):
    """Right, but in two launches: the statistics go through memory and x is read three times."""
    M, N = x.shape
    row_max, row_sum = _row_stats(x)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _normalise_kernel[(M,)](x, row_max, row_sum, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=1024)
    return y


def _softmax_max_in_torch(x):
    """BUG: the max subtracted by torch before the kernel: two more passes over x, and x - max written."""
    return _softmax(x - x.amax(dim=1, keepdim=True))


def _softmax_exp_in_torch(x):
    """BUG: the kernel computes each row's log-sum-exp; torch computes y = exp(x - lse)."""
    row_max, row_sum = _row_stats(x)
    return torch.exp(x.float() - (row_max + row_sum.log())[:, None]).to(x.dtype)


# =========================================================================================================
# 05.flash_attention
# =========================================================================================================

@triton.jit
def _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, lo, hi, n_kv, stride_kn, stride_vn, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
            DIAGONAL: tl.constexpr, MASK_KEYS: tl.constexpr, RESCALE_ACC: tl.constexpr,
            LOW_PRECISION_ACC: tl.constexpr):
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs_n
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[None, :] < n_kv, other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        if MASKED:
            if MASK_KEYS:
                keep = cols[None, :] < n_kv
            else:  # BUG: the keys past N_kv were loaded as 0, and their score 0 stays in the softmax
                keep = cols[None, :] >= 0
            if CAUSAL:
                if DIAGONAL:
                    keep = keep & (offs_m[:, None] >= cols[None, :])
                else:  # BUG: query i sees keys j < i only, not itself
                    keep = keep & (offs_m[:, None] > cols[None, :])
            s = tl.where(keep, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < n_kv, other=0.0)
        else:
            v = tl.load(v_ptrs)
        if RESCALE_ACC:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        else:  # BUG: what was accumulated under the old max is not rescaled when the max grows
            acc = acc + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        if LOW_PRECISION_ACC:  # BUG when set: the output accumulator kept in the inputs' dtype
            acc = acc.to(v.dtype).to(tl.float32)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, N_KV,
                      stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                      stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_on,
                      qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                      CAUSAL: tl.constexpr, PRECISION: tl.constexpr, DIAGONAL: tl.constexpr,
                      MASK_KEYS: tl.constexpr, RESCALE_ACC: tl.constexpr, LOW_PRECISION_ACC: tl.constexpr,
                      LSE_NATURAL: tl.constexpr, LSE_MAX: tl.constexpr):
    # The reference kernel's structure (kernels/flash_attention.py): scores in base 2, tiles wholly visible
    # first, then the tiles that straddle the diagonal or the end of K/V.
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N, other=0.0)
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        full = (block_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = tl.minimum((block_m + 1) * BLOCK_M, N_KV)
    else:
        full = N_KV // BLOCK_N * BLOCK_N
        end = N_KV
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, 0, full, N_KV, stride_kn, stride_vn,
                            qk_scale, BLOCK_N, False, CAUSAL, PRECISION, DIAGONAL, MASK_KEYS, RESCALE_ACC,
                            LOW_PRECISION_ACC)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, full, end, N_KV, stride_kn,
                            stride_vn, qk_scale, BLOCK_N, True, CAUSAL, PRECISION, DIAGONAL, MASK_KEYS, RESCALE_ACC,
                            LOW_PRECISION_ACC)
    o = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N)
    if LSE_MAX:
        lse = m_i + tl.math.log2(l_i)
    else:  # BUG: log2(l) alone; l sums exp2(s - m), so the max m belongs in the log-sum-exp
        lse = tl.math.log2(l_i)
    if LSE_NATURAL:
        lse = lse / 1.4426950408889634
    # (BUG when LSE_NATURAL is off: the log-sum-exp of the base-2 scores, in base 2)
    tl.store(lse_ptr + bh.to(tl.int64) * N + offs_m, lse.to(lse_ptr.dtype.element_ty), mask=offs_m < N)


def _attention(q, k, v, causal=False, *, scale=True, apply_causal=True, diagonal=True, mask_keys=True,
               rescale_acc=True, low_precision_acc=False, lse_natural=True, lse_max=True, lse_in_input_dtype=False,
               tiles=None):
    """The reference kernel's tiling and launch settings, with one bug switched on by a keyword."""
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    # BUG when lse_in_input_dtype is set: the log-sum-exp stored like o, in q's dtype
    lse = torch.empty((B, H, N), dtype=q.dtype if lse_in_input_dtype else torch.float32, device=q.device)
    cfg = tiles or fa.attention_launch_settings(N, D, q.dtype)
    # BUG when scale is off: the scores are q k^T, not q k^T / sqrt(D) (LOG2E: the kernel works in base 2)
    qk_scale = fa.LOG2E / math.sqrt(D) if scale else fa.LOG2E
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
    _attention_kernel[grid](
        q, k, v, o, lse, H, N, n_kv, *q.stride(), *k.stride(), *v.stride(), *o.stride()[:3], qk_scale,
        HEAD_DIM=D, CAUSAL=causal and apply_causal, PRECISION="ieee" if q.dtype == torch.float32 else None,
        DIAGONAL=diagonal, MASK_KEYS=mask_keys, RESCALE_ACC=rescale_acc, LOW_PRECISION_ACC=low_precision_acc,
        LSE_NATURAL=lse_natural, LSE_MAX=lse_max, **cfg)
    return o, lse


def _attention_with(**bug):
    return lambda q, k, v, causal: _attention(q, k, v, causal, **bug)


def _attention_scores_in_torch(q, k, v, causal):
    """The textbook version with a Triton softmax: S and P are (B, H, N, N_kv) tensors in memory."""
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = _softmax(s.reshape(-1, s.shape[-1])).reshape(s.shape)
    return (p @ v.float()).to(q.dtype), torch.logsumexp(s, dim=-1)


# =========================================================================================================
# 05.linear_cross_entropy
# =========================================================================================================

@triton.jit
def _ce_tile_kernel(h_ptr, w_ptr, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, M, V, K, stride_hm, stride_hk,
                    stride_wv, stride_wk, n_vtiles, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr,
                    SUBTRACT_MAX: tl.constexpr, ROUND_LOGITS: tl.constexpr, BASE_2: tl.constexpr,
                    ONLY_TARGET_TILE: tl.constexpr):
    # The reference's first kernel (kernels/linear_cross_entropy.py): a tile of logits from notebook 04's GEMM,
    # reduced in its epilogue to each row's (max, sum of exp) over the tile, and the target's logit picked.
    pid_m, pid_v = grouped_tile(tl.program_id(0), M, V, BLOCK_M, BLOCK_V, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    logits = tile_dot(h_ptr, w_ptr, rm, rv, M, V, K, stride_hm, stride_hk, stride_wk, stride_wv,
                      BLOCK_M, BLOCK_V, BLOCK_K, PRECISION)
    if ROUND_LOGITS:  # BUG when set: the logits rounded to h's dtype, as an unfused model stores them
        logits = logits.to(h_ptr.dtype.element_ty).to(tl.float32)
    if BASE_2:  # BUG when set: base-2 logits (exp2 is one instruction), never converted back at the end
        logits = logits * 1.4426950408889634
    logits = tl.where(rv[None, :] < V, logits, -float("inf"))
    if SUBTRACT_MAX:
        tile_max = tl.max(logits, axis=1)
    else:  # BUG: sums of exp(logit) straight away; exp overflows float32 once a logit passes 88.7
        tile_max = tl.zeros([BLOCK_M], dtype=tl.float32)
    if BASE_2:
        tile_sum = tl.sum(tl.math.exp2(logits - tile_max[:, None]), axis=1)
    else:
        tile_sum = tl.sum(tl.exp(logits - tile_max[:, None]), axis=1)
    rows = rm < M
    part = rm.to(tl.int64) * n_vtiles + pid_v
    tl.store(part_m_ptr + part, tile_max, mask=rows)
    tl.store(part_s_ptr + part, tile_sum, mask=rows)
    target = tl.load(t_ptr + rm, mask=rows, other=-1)
    picked = tl.sum(tl.where(rv[None, :] == target[:, None], logits, 0.0), axis=1)
    if ONLY_TARGET_TILE:
        here = (target >= pid_v * BLOCK_V) & (target < pid_v * BLOCK_V + BLOCK_V) & rows
    else:  # BUG: every tile stores its pick, 0 where the target is elsewhere: the last tile to run wins
        here = rows
    tl.store(tgt_ptr + rm, picked, mask=here)


@triton.jit
def _ce_combine_kernel(part_m_ptr, part_s_ptr, tgt_ptr, loss_ptr, n_vtiles, BLOCK_T: tl.constexpr,
                       SUBTRACT_TARGET: tl.constexpr, BASE_2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_T)
    m = tl.full([BLOCK_T], -float("inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK_T], dtype=tl.float32)
    for start in range(0, n_vtiles, BLOCK_T):
        valid = start + offs < n_vtiles
        pm = tl.load(part_m_ptr + row * n_vtiles + start + offs, mask=valid, other=-float("inf"))
        ps = tl.load(part_s_ptr + row * n_vtiles + start + offs, mask=valid, other=0.0)
        m_new = tl.maximum(m, pm)
        ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        if BASE_2:
            s = s * tl.math.exp2(m - ref) + ps * tl.math.exp2(pm - ref)
        else:
            s = s * tl.exp(m - ref) + ps * tl.exp(pm - ref)
        m = m_new
    row_max = tl.max(m, axis=0)
    if BASE_2:
        lse = row_max + tl.math.log2(tl.sum(s * tl.math.exp2(m - row_max), axis=0))
    else:
        lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), axis=0))
    if SUBTRACT_TARGET:
        lse -= tl.load(tgt_ptr + row)
    # (BUG when SUBTRACT_TARGET is off: the loss is the log-sum-exp alone)
    tl.store(loss_ptr + row, lse.to(loss_ptr.dtype.element_ty))


def _ce(h, w, targets, *, subtract_max=True, round_logits=False, base_2=False, only_target_tile=True,
        subtract_target=True, loss_in_input_dtype=False, int64_targets_only=False, tiles=None):
    """The reference's two kernels, with one bug switched on by a keyword. The default tiles are the
    reference's; tests in the interpreter pass wider ones (fewer programs, the same arithmetic)."""
    if int64_targets_only and targets.dtype != torch.int64:  # BUG: int32 targets are valid input
        raise TypeError(f"targets must be int64 (torch.long), got {targets.dtype}")
    M, K = h.shape
    V = w.shape[0]
    # BUG when loss_in_input_dtype is set: the loss in h's dtype, not float32
    loss = torch.empty(M, dtype=h.dtype if loss_in_input_dtype else torch.float32, device=h.device)
    cfg = tiles or lce.ce_launch_settings(M, V, K, h.element_size())
    n_vtiles = triton.cdiv(V, cfg["BLOCK_V"])
    part_m = torch.empty((M, n_vtiles), dtype=torch.float32, device=h.device)
    part_s = torch.empty((M, n_vtiles), dtype=torch.float32, device=h.device)
    tgt = torch.empty(M, dtype=torch.float32, device=h.device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * n_vtiles,)
    _ce_tile_kernel[grid](h, w, targets, part_m, part_s, tgt, M, V, K, h.stride(0), h.stride(1), w.stride(0),
                          w.stride(1), n_vtiles, PRECISION=dot_precision(h.dtype), SUBTRACT_MAX=subtract_max,
                          ROUND_LOGITS=round_logits, BASE_2=base_2, ONLY_TARGET_TILE=only_target_tile, **cfg)
    _ce_combine_kernel[(M,)](part_m, part_s, tgt, loss, n_vtiles, BLOCK_T=min(1024, triton.next_power_of_2(n_vtiles)),
                             SUBTRACT_TARGET=subtract_target, BASE_2=base_2)
    return loss


# In the interpreter every program pays a fixed Python cost, so fewer, wider tiles over V grade several times
# faster; the arithmetic is the same. On a GPU the reference's tiles are used.
CE_TILES = None if runtime.has_gpu() else dict(BLOCK_M=16, BLOCK_V=512, BLOCK_K=64, GROUP_M=8)


def _ce_with(**bug):
    return lambda h, w, targets: _ce(h, w, targets, tiles=CE_TILES, **bug)


def _ce_logits_materialised(h, w, targets):
    """A Triton GEMM writes the whole (M, V) logits tensor; torch's cross-entropy reads it back."""
    logits = mm.matmul(h, w.t())
    return F.cross_entropy(logits.float(), targets.long(), reduction="none")


# =========================================================================================================
# The references pass; so do the planted kernels with no bug switched on
# =========================================================================================================

def _listed_shapes(message: str) -> list[tuple[tuple[int, ...], str]]:
    """(dims, layout) of each failing case listed in a correctness message."""
    shapes = []
    for line in _failure_lines(message):
        dims, _, layout = line[len("shape "):].split(",")[0].partition(" ")
        shapes.append((tuple(int(d) for d in dims.split("x")), layout))
    return shapes


@pytest.mark.parametrize("exercise, criterion", [(ex, c) for ex in REFERENCES for c in CPU_CRITERIA[ex]],
                         ids=[f"{ex}-{c}" for ex in REFERENCES for c in CPU_CRITERIA[ex]])
def test_reference_passes(exercise, criterion):
    r = _grade(exercise, criterion, REFERENCES[exercise])
    assert r.status == "passed", f"{exercise} {criterion}: {r.message}"


@needs_no_gpu
@pytest.mark.parametrize("exercise", [SOFTMAX, ATTENTION])
def test_reference_performance_is_skipped_without_gpu(exercise):
    r = _grade(exercise, "performance", REFERENCES[exercise])
    assert r.status == "skipped" and "no GPU" in r.message, r.message


@pytest.mark.parametrize("exercise, criterion, fn", [
    (SOFTMAX, "correctness", _softmax),
    (SOFTMAX, "precision", _softmax),
    (ATTENTION, "correctness", _attention),
    (CE, "correctness", _ce_with()),
], ids=["softmax-correctness", "softmax-precision", "attention-correctness", "ce-correctness"])
def test_planted_kernels_without_a_bug_pass(exercise, criterion, fn):
    """The kernels the bugs below are planted in pass: each failure below is the planted bug's doing."""
    r = _grade(exercise, criterion, fn)
    assert r.status == "passed", f"{criterion}: {r.message}"


# =========================================================================================================
# Planted bugs: softmax
# =========================================================================================================

def test_softmax_without_the_max_overflows():
    # Every case's first row has scale 30: exp(x) passes float32's 3.4e38 once x > 88.7 and y = inf / inf.
    # Only the one-block path has the bug; rows past 16384 go through the online loop, which subtracts.
    r = _grade(SOFTMAX, "correctness", _softmax_with(subtract_max=False))
    assert r.status == "failed", r.message
    assert "NaN where the reference is a number" in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all(dims[1] <= sm.ONE_BLOCK_MAX for dims, _ in shapes), r.message


def test_softmax_padding_read_as_zero_enters_the_sum():
    # other=0.0 instead of -inf: the lanes past N add exp(0 - max) to the sum. A power-of-two N has no such
    # lanes, and no known wrong formula explains the others.
    r = _grade(SOFTMAX, "correctness", _softmax_with(pad_zero=True))
    assert r.status == "failed" and "elements differ from the reference" in r.message, r.message
    assert "likely cause" not in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all(dims[1] & (dims[1] - 1) for dims, _ in shapes), r.message


SOFTMAX_DIAGNOSES = {"log-softmax": "likely cause: log_softmax", "not-normalised": "likely cause: exp(x - max) is "
                     "never divided by the row's sum", "over-columns": "likely cause: softmax over columns (dim 0)"}


@pytest.mark.parametrize("bug, fn", [
    ("log-softmax", _softmax_with(log=True)),
    ("not-normalised", _softmax_with(divide=False)),
    ("over-columns", _softmax_over_columns),
], ids=list(SOFTMAX_DIAGNOSES))
def test_softmax_wrong_formulas_are_named(bug, fn):
    r = _grade(SOFTMAX, "correctness", fn)
    assert r.status == "failed" and SOFTMAX_DIAGNOSES[bug] in r.message, r.message
    # and no other formula: log_softmax's large values once made "never divided" outputs look like it
    assert not any(named in r.message for other, named in SOFTMAX_DIAGNOSES.items() if other != bug), r.message


def test_softmax_of_the_first_block_only_leaves_the_tail_unwritten():
    r = _grade(SOFTMAX, "correctness", _softmax_first_block_only)
    assert r.status == "failed" and "output elements were never written" in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all(dims[1] > 16384 for dims, _ in shapes), r.message


@pytest.mark.parametrize("bug", ["per_chunk", "no_rescale"])
def test_softmax_long_rows_wrongly_combined_fail_correctness(bug):
    # per_chunk: each 4096-chunk normalised as if it were a row. no_rescale: the online loop's running sum
    # keeps terms measured from an old max. Rows that fit one block are right; no wrong formula is named.
    fn = _softmax_with(per_chunk=True) if bug == "per_chunk" else _softmax_with(rescale=False)
    r = _grade(SOFTMAX, "correctness", fn)
    assert r.status == "failed" and "elements differ from the reference" in r.message, r.message
    assert "likely cause" not in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all(dims[1] > sm.ONE_BLOCK_MAX for dims, _ in shapes), r.message


def test_softmax_running_sum_in_float16_fails_precision_naming_the_growth():
    # Every row through the online loop in chunks of 1024, the running sum rounded to float16 after each:
    # N / 1024 roundings (64 at N = 65536). float32 inputs keep a float32 sum.
    r = _grade(SOFTMAX, "precision", _softmax_with(low_precision_sum=True, one_block_max=0, chunk=1024))
    assert r.status == "failed", r.message
    assert "float16: the error grows like N^" in r.message and "accumulating in low precision" in r.message, r.message
    longest = precision_shapes(registry.get(SOFTMAX), config.load().secret_seed)[-1]  # drawn from the seed
    assert f"float16, shape {longest}" in r.message and "float32, shape" not in r.message, r.message
    assert "keep the running max and the running sum in float32" in r.message, r.message
    assert r.figures["growth_exponent_float16"] > 0.25


def test_softmax_in_two_kernels_fails_fusion():
    r = _grade(SOFTMAX, "fusion", _softmax_two_kernels)
    assert r.status == "failed", r.message
    assert "launched 2 kernels (_row_stats_kernel, _normalise_kernel); at most 1 allowed" in r.message, r.message
    assert "torch operations" not in r.message, r.message


def test_softmax_max_taken_by_torch_fails_fusion():
    r = _grade(SOFTMAX, "fusion", _softmax_max_in_torch)
    assert r.status == "failed", r.message
    assert "computes with torch operations outside the Triton kernel (torch amax, torch sub)" in r.message, r.message


def test_softmax_exp_computed_by_torch_fails_correctness():
    # The kernel only measures each row; torch computes and writes y. The numbers are right.
    r = _grade(SOFTMAX, "correctness", _softmax_exp_in_torch)
    assert r.status == "failed", r.message
    assert "the result was computed by torch (" in r.message and "not by a Triton kernel" in r.message, r.message
    assert "differ from the reference" not in r.message, r.message


# =========================================================================================================
# Planted bugs: FlashAttention
# =========================================================================================================

@pytest.mark.parametrize("bug, named", [
    ("scale", "likely cause: the scores are not scaled by 1/sqrt(D)"),
    ("apply_causal", "likely cause: the causal mask is not applied"),
    ("diagonal", "likely cause: the causal mask hides the diagonal too"),
    ("lse_natural", "likely cause: the log-sum-exp is in base 2"),
    ("lse_max", "likely cause: the log-sum-exp lacks the row's max"),
], ids=["no-scale", "causal-ignored", "diagonal-hidden", "lse-base-2", "lse-without-max"])
def test_attention_wrong_formulas_are_named(bug, named):
    r = _grade(ATTENTION, "correctness", _attention_with(**{bug: False}))
    assert r.status == "failed" and named in r.message, r.message
    lines = _failure_lines(r.message)
    assert lines and all(named in line for line in lines), r.message
    if bug in ("apply_causal", "diagonal"):  # the non-causal shapes are right
        assert all("causal" in layout for _, layout in _listed_shapes(r.message)), r.message
    if bug == "diagonal":  # query 0 sees no key at all: 0 / 0
        assert "NaN where the reference is a number" in r.message, r.message
    if bug in ("lse_natural", "lse_max"):  # o is right
        assert all(" o: " not in line for line in lines), r.message


def test_attention_accumulator_not_rescaled_fails_on_o():
    # acc += p v without acc *= alpha: right while the max stays put, so only from the second key tile on.
    r = _grade(ATTENTION, "correctness", _attention_with(rescale_acc=False))
    assert r.status == "failed", r.message
    lines = _failure_lines(r.message)
    assert lines and all(" o: " in line and "lse: " not in line for line in lines), r.message
    assert "likely cause" not in r.message, r.message
    assert all(dims[2] > 32 for dims, _ in _listed_shapes(r.message)), r.message  # more than one key tile


def test_attention_keys_past_the_end_enter_the_softmax():
    # The last key tile is loaded with other=0 but its scores are not set to -inf: each padding key adds
    # exp(0 - m) to the row's sum. The causal mask happens to hide them, so only non-causal ragged N fail.
    r = _grade(ATTENTION, "correctness", _attention_with(mask_keys=False))
    assert r.status == "failed" and "elements differ from the reference" in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all("causal" not in layout and dims[2] % 32 for dims, layout in shapes), r.message
    # No wrong formula explains it. With one key (N = 1) every formula gives the same o, and the single lse
    # (here log(exp(s) + 31)) lands within 10% of the unscaled score's in about one case in twelve, which
    # the grader then names: a coincidence of one number, tolerated there only.
    lines = _failure_lines(r.message)
    assert all("likely cause" not in line for line in lines if not line.startswith("shape 1x1x1x16,")), r.message


def test_attention_lse_in_the_inputs_dtype_is_refused():
    r = _grade(ATTENTION, "correctness", _attention_with(lse_in_input_dtype=True))
    assert r.status == "failed", r.message
    assert "lse: output dtype is float16, expected float32" in r.message, r.message
    assert "float32, trial" not in r.message, r.message  # float32 inputs: float32 lse, right


def test_attention_accumulator_in_float16_fails_precision_naming_the_growth():
    # o's accumulator rounded to float16 after each key tile: its error grows with the number of keys.
    # Every correctness case stays within float16's tolerance; precision is the criterion that sees it.
    r = _grade(ATTENTION, "precision", _attention_with(low_precision_acc=True))
    assert r.status == "failed", r.message
    assert "float16: the error grows like N^" in r.message and "accumulating in low precision" in r.message, r.message
    assert "float32, shape" not in r.message and "float32: the error grows" not in r.message, r.message
    assert "the output accumulator in float32" in r.message, r.message
    assert r.figures["rel_err_float16@1024"] > r.figures["bound_float16@1024"]


def test_attention_scores_in_torch_fail_fusion():
    r = _grade(ATTENTION, "fusion", _attention_scores_in_torch)
    assert r.status == "failed", r.message
    assert "computes with torch operations outside the Triton kernel (" in r.message, r.message
    assert "torch bmm" in r.message and "torch logsumexp" in r.message, r.message


# =========================================================================================================
# Planted bugs: linear cross-entropy
# =========================================================================================================

@pytest.mark.parametrize("bug, named", [
    (dict(subtract_target=False), "likely cause: the target's logit is not subtracted"),
    (dict(base_2=True), "likely cause: the loss is in base 2"),
], ids=["no-target", "base-2"])
def test_ce_wrong_formulas_are_named(bug, named):
    r = _grade(CE, "correctness", _ce_with(**bug))
    assert r.status == "failed" and named in r.message, r.message


def test_ce_logits_rounded_to_float16_fail_precision_and_are_named():
    # One rounding of each logit to float16 (about 5e-4 relative) where float32 accumulation over K = 64
    # costs 2e-6: ten times the bound at every V. float32 inputs are not rounded.
    r = _grade(CE, "precision", _ce_with(round_logits=True))
    assert r.status == "failed", r.message
    for shape in precision_shapes(registry.get(CE), config.load().secret_seed):  # one per V, drawn from the seed
        assert f"float16, shape {shape}: ||out - ref|| / ||ref||" in r.message, r.message
    assert "float32, shape" not in r.message and "grows like" not in r.message, r.message
    assert "likely cause: the logits were rounded to the inputs' dtype before the softmax" in r.message, r.message
    assert "rounding the exact result to float32 alone" in r.message, r.message  # the loss is float32


def test_ce_without_the_max_overflows_at_confident_logits():
    # Sums of exp(logit) with no max taken out: at logit spread 40 ("confident") exp overflows float32.
    r = _grade(CE, "correctness", _ce_with(subtract_max=False))
    assert r.status == "failed" and "got inf" in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all("confident" in layout for _, layout in shapes), r.message


def test_ce_target_stored_by_every_tile_fails_correctness():
    # Without the "target in this tile" mask every tile stores its pick (0 elsewhere); the last one to run
    # wins (on a GPU, whichever). Right only where V fits one tile. Where nearly every row's target lies
    # outside the last tile, the loss is logsumexp alone and that is what the message may name.
    r = _grade(CE, "correctness", _ce_with(only_target_tile=False))
    assert r.status == "failed" and "elements differ from the reference" in r.message, r.message
    block_v = (CE_TILES or {}).get("BLOCK_V", 128)
    assert all(dims[2] > block_v for dims, _ in _listed_shapes(r.message)), r.message


def test_ce_refusing_int32_targets_fails_on_the_int32_case():
    r = _grade(CE, "correctness", _ce_with(int64_targets_only=True))
    assert r.status == "failed", r.message
    assert "linear_cross_entropy raised TypeError: targets must be int64" in r.message, r.message
    shapes = _listed_shapes(r.message)
    assert shapes and all("int32" in layout for _, layout in shapes), r.message


def test_ce_loss_in_the_inputs_dtype_is_refused():
    r = _grade(CE, "correctness", _ce_with(loss_in_input_dtype=True))
    assert r.status == "failed" and "output dtype is float16, expected float32" in r.message, r.message


def test_ce_materialised_logits_fail_memory():
    r = _grade(CE, "memory", _ce_logits_materialised)
    assert r.status == "failed", r.message
    assert r.figures["extra_bytes"] >= r.figures["materialised_bytes"]
    assert "the float32 logits alone would take" in r.message and "it is being materialised" in r.message, r.message


# =========================================================================================================
# stderr
# =========================================================================================================

def test_nothing_reaches_stderr(capfd):
    capfd.readouterr()
    failing = check(SOFTMAX, _softmax_with(subtract_max=False), criteria=["correctness"])
    passing = check(ATTENTION, fa.flash_attention, criteria=["fusion"])
    assert capfd.readouterr().err == ""
    assert failing["correctness"].status == "failed" and passing["fusion"].status == "passed"


# =========================================================================================================
# On a GPU: performance, bf16, the allocator's peak
# =========================================================================================================

@pytest.mark.gpu
@pytest.mark.parametrize("exercise", [SOFTMAX, ATTENTION])
def test_reference_passes_performance_on_gpu(exercise):
    r = _grade(exercise, "performance", REFERENCES[exercise])
    assert r.status == "passed", r.message
    assert r.figures["fraction_of_peak"] >= r.figures["threshold"] and r.figures["speedup_over_eager"] > 1
    if exercise == ATTENTION:
        assert "of SDPA's speed on this GPU" in r.message, r.message


@pytest.mark.gpu
@pytest.mark.parametrize("exercise, criterion", [(ex, c) for ex in REFERENCES for c in ("correctness", "precision")],
                         ids=[f"{ex}-{c}" for ex in REFERENCES for c in ("correctness", "precision")])
def test_reference_passes_bf16_on_gpu(exercise, criterion):
    r = _grade(exercise, criterion, REFERENCES[exercise])
    assert r.status == "passed", r.message
    if criterion == "correctness":
        assert "bfloat16" in r.figures["dtypes"]
    else:
        assert any(k.startswith("rel_err_bfloat16") for k in r.figures), r.figures


@pytest.mark.gpu
def test_attention_in_tiny_tiles_fails_performance_on_gpu():
    # 16 x 16 tiles and one warp: right, but far from the tensor cores' rate.
    slow = _attention_with(tiles=dict(BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1))
    r = _grade(ATTENTION, "performance", slow)
    assert r.status == "failed", r.message
    assert r.figures["fraction_of_peak"] < r.figures["threshold"], r.message
    assert "of SDPA's speed on this GPU" in r.message and "needs 0.30" in r.message, r.message


@pytest.mark.gpu
def test_ce_memory_on_gpu_uses_the_allocator_peak():
    r = _grade(CE, "memory", lce.linear_cross_entropy)
    assert r.status == "passed" and "the CUDA allocator's peak" in r.message, r.message
    r = _grade(CE, "memory", _ce_logits_materialised)
    assert r.status == "failed" and "it is being materialised" in r.message, r.message
