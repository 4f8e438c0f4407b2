"""Linear + cross-entropy, forward and backward in one call: the mean loss and its gradients dh, dw without
ever holding the (M, V) logits.

loss = mean_i (logsumexp_v(h_i · w_v) - h_i · w_{t_i}), h (M, K), w (V, K), targets (M,). With p = softmax of
the logits row by row and y the one-hot targets, dlogits = (p - y) / M, and
    dh = dlogits w   (M, K),        dw = dlogitsᵀ h   (V, K).
Eager PyTorch keeps the float32 logits, their softmax and dlogits, M x V each (8192 tokens x 128256 words: 4 GiB
apiece). Here the rows go a chunk at a time, and each chunk's gradients are computed while its logits exist:
    1. logits_c = h_c wᵀ          a GEMM into a float32 buffer of chunk x V
    2. a program per row:         its log-sum-exp (online max and sum), its loss, and dlogits_c = (p - y) / M
                                  written in the inputs' dtype, the tensor cores' operand for the next two GEMMs
    3. dh_c = dlogits_c w         a GEMM: these rows of dh are complete
    4. dw += dlogits_cᵀ h_c       a GEMM whose epilogue adds the previous chunks' sum
Extra memory: the chunk's logits and dlogits, chosen at most an eighth of the logits and 256 MiB.
Flops 6 M V K (the three GEMMs); compared to eager nothing is recomputed. The price of chunking is step 4:
dw (V x K) is read and written once per chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.fusion_for_training import (  # noqa: F401  the torch side, shared with the grader
    linear_cross_entropy_backward_eager,
    linear_cross_entropy_backward_flops,
    linear_cross_entropy_backward_reference,
)
from kernels.linear_cross_entropy import _check_inputs
from kernels.matmul import dot_precision, grouped_tile, tile_dot


@triton.jit
def _ce_rows_kernel(logits_ptr, dlogits_ptr, t_ptr, loss_ptr, N_ROWS, V, stride_l, stride_g, inv_m,
                    ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    # ROWS rows of the chunk (one on a GPU), two passes over their float32 logits. The first finds each row's
    # log-sum-exp online (per lane: a running max, and a running sum rescaled when the max grows); the second
    # writes (p - y) / M.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < N_ROWS
    offs = tl.arange(0, BLOCK_V)
    row_logits = logits_ptr + rows.to(tl.int64)[:, None] * stride_l
    m = tl.full([ROWS, BLOCK_V], -float("inf"), dtype=tl.float32)
    s = tl.zeros([ROWS, BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        x = tl.load(row_logits + cols[None, :], mask=live[:, None] & (cols[None, :] < V), other=-float("inf"))
        m_new = tl.maximum(m, x)
        ref = tl.where(m_new == -float("inf"), 0.0, m_new)  # a lane with nothing seen yet: no -inf - -inf
        s = s * tl.exp(m - ref) + tl.exp(x - ref)
        m = m_new
    row_max = tl.where(live, tl.max(m, axis=1), 0.0)  # rows past the chunk's end: 0, and a sum of 1 below
    lse = row_max + tl.log(tl.where(live, tl.sum(s * tl.exp(m - row_max[:, None]), axis=1), 1.0))
    target = tl.load(t_ptr + rows, mask=live, other=0).to(tl.int32)
    picked = tl.load(logits_ptr + rows.to(tl.int64) * stride_l + target, mask=live, other=0.0)
    tl.atomic_add(loss_ptr, tl.sum(tl.where(live, lse - picked, 0.0), axis=0) * inv_m)
    row_grads = dlogits_ptr + rows.to(tl.int64)[:, None] * stride_g
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        inside = live[:, None] & (cols[None, :] < V)
        x = tl.load(row_logits + cols[None, :], mask=inside, other=-float("inf"))
        g = tl.exp(x - lse[:, None]) - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
        tl.store(row_grads + cols[None, :], (g * inv_m).to(dlogits_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _gemm_into_kernel(x_ptr, w_ptr, c_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      ACCUMULATE: tl.constexpr, PRECISION: tl.constexpr):
    # c = x @ w, or c += x @ w (ACCUMULATE): the sum is formed on the float32 accumulator, rounded once.
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                   BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    c = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :]
    if ACCUMULATE:
        acc += tl.load(c, mask=mask, other=0.0).to(tl.float32)
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=mask)


def gemm_into(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor, accumulate: bool = False):
    """c = x @ w (or c += x @ w) for matrices of any strides; c's rows contiguous."""
    M, K = x.shape
    N = w.shape[1]
    if x.dtype == torch.float32 and x.is_cuda:  # float32 tiles take twice the shared memory
        cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2)
    elif x.is_cuda:
        cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    else:  # the interpreter pays a fixed cost per program and per loop step: few, large tiles
        bm, bn = min(1024, triton.next_power_of_2(M)), min(1024, triton.next_power_of_2(N))
        while bm * bn > 2**18:
            bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
        cfg = dict(BLOCK_M=max(16, bm), BLOCK_N=max(16, bn), BLOCK_K=max(16, min(512, triton.next_power_of_2(K))),
                   GROUP_M=8, num_warps=4, num_stages=1)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _gemm_into_kernel[grid](x, w, c, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), c.stride(0),
                            ACCUMULATE=accumulate, PRECISION=dot_precision(x.dtype), **cfg)


def chunk_rows(M: int, V: int) -> int:
    """Rows per chunk: the chunk's float32 logits at most 256 MiB and an eighth of all of them, 16 rows at least."""
    return max(16, min(2**28 // (4 * V), M // 8) // 16 * 16)


def linear_cross_entropy_forward_backward(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor):
    """(loss, dh, dw): the mean cross-entropy of the logits h @ w.T (float32, 0-d) and its gradients in h's and
    w's dtype, a chunk of rows at a time, never holding more than a chunk's logits."""
    M, K, V = _check_inputs(h, w, targets)
    loss = torch.zeros((), dtype=torch.float32, device=h.device)
    dh = torch.empty((M, K), dtype=h.dtype, device=h.device)
    dw = torch.empty((V, K), dtype=w.dtype, device=w.device)
    if M == 0:
        return loss.fill_(float("nan")), dh, dw.zero_()  # the mean of nothing, as F.cross_entropy gives
    rows = min(M, chunk_rows(M, V))
    logits = torch.empty((rows, V), dtype=torch.float32, device=h.device)
    dlogits = logits if h.dtype == torch.float32 else torch.empty((rows, V), dtype=h.dtype, device=h.device)
    # A program per row on a GPU; in the interpreter, which pays a fixed cost per program, 64 rows each.
    per_program = 1 if h.is_cuda else 64
    block_v = min(4096, triton.next_power_of_2(V))
    for start in range(0, M, rows):
        n = min(rows, M - start)
        h_c, lg, dl = h[start:start + n], logits[:n], dlogits[:n]
        gemm_into(h_c, w.t(), lg)
        _ce_rows_kernel[(triton.cdiv(n, per_program),)](lg, dl, targets[start:start + n], loss, n, V, lg.stride(0),
                                                        dl.stride(0), 1.0 / M, ROWS=per_program, BLOCK_V=block_v)
        gemm_into(dl, w, dh[start:start + n])
        gemm_into(dl.t(), h_c, dw, accumulate=start > 0)
    return loss, dh, dw


def linear_cross_entropy_forward_backward_cublas(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor,
                                                 rows: int | None = None):
    """The same chunked forward and backward with the three products left to torch.mm (cuBLAS), the rows kernel
    alone in Triton: the version a training step uses, where the fusion that matters is the chunking. Each
    chunk's logits come out of the GEMM in the inputs' dtype (as eager's `(h @ w.T).float()` has them), and the
    rows kernel overwrites them with dlogits in place, so a chunk costs one (rows, V) buffer. dW accumulates in
    its own dtype, one rounding per chunk: a quarter of the rows, 2048 at most, keep that to a few. The targets'
    range is checked on the GPU: nothing here waits for it."""
    # Each chunk re-reads and re-writes all of dW (1 GiB at V = 128256, K = 4096 bf16): chunks of 2048 rows
    # (512 MiB of logits there) took 39.2 ms on an H100, 512 rows 46.6 ms, for 0.37 GiB more at the peak.
    M, K, V = _check_inputs(h, w, targets, sync=False)
    loss = torch.zeros((), dtype=torch.float32, device=h.device)
    dh = torch.empty((M, K), dtype=h.dtype, device=h.device)
    dw = torch.empty((V, K), dtype=w.dtype, device=w.device)
    if M == 0:
        return loss.fill_(float("nan")), dh, dw.zero_()
    rows = min(M, rows or max(16, min(2**29 // (h.element_size() * V), 2048, M // 4) // 16 * 16))
    buffer = torch.empty((rows, V), dtype=h.dtype, device=h.device)
    per_program = 1 if h.is_cuda else 64
    block_v = min(4096, triton.next_power_of_2(V))
    for start in range(0, M, rows):
        n = min(rows, M - start)
        h_c, lg = h[start:start + n], buffer[:n]
        torch.mm(h_c, w.t(), out=lg)
        _ce_rows_kernel[(triton.cdiv(n, per_program),)](lg, lg, targets[start:start + n], loss, n, V, lg.stride(0),
                                                        lg.stride(0), 1.0 / M, ROWS=per_program, BLOCK_V=block_v)
        torch.mm(lg, w, out=dh[start:start + n])
        if start == 0:
            torch.mm(lg.t(), h_c, out=dw)
        else:
            dw.addmm_(lg.t(), h_c)
    return loss, dh, dw
