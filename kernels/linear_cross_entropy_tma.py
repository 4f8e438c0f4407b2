"""Linear + cross-entropy, forward and backward, with every product in Triton on Hopper: the course's chunked
algorithm (kernels/linear_cross_entropy_backward.py) with its three GEMMs as persistent kernels fed by the TMA
copy engine (notebook 04's fast GEMM), where the course's Triton version uses pointer-load GEMMs and the
capstone's version leaves the products to cuBLAS.

loss = mean_i (logsumexp_v(h_i · w_v) - h_i · w_{t_i}), h (M, K), w (V, K), targets (M,); dlogits = (p - y) / M,
dh = dlogits w, dw = dlogitsᵀ h. Per chunk of rows (h_c, M_c of the M rows):
    1. logits_c = h_c wᵀ       a GEMM whose epilogue stores the tile in the inputs' dtype and, from the float32
                                accumulator, each row's max and sum of exp over the tile and the target's logit
    2. a program per row:       the row's log-sum-exp from its tiles' partials, its loss into the mean, and
                                dlogits = (softmax - onehot) / M written over the row's logits: one read and one
                                write of the chunk's logits, where the course's row kernel reads them twice
    3. dh_c = dlogits_c w       a GEMM reading w as it lies, (V, K)
    4. dw += dlogits_cᵀ h_c     a GEMM reading dlogits_c's tiles transposed; its epilogue adds the previous chunks'
                                sum (dw in the inputs' dtype, rounded once a chunk, as the cuBLAS version does)
Flops 6 M V K. Extra memory beyond dh and dw: the chunk's logits, M_c V elements, and 8 bytes a row and tile of
partials. The price of chunking is 4.: dw (V x K) is read and written once a chunk, so fewer, larger chunks are
faster and hold more memory (rows=). At 8192 x 4096 -> 128256 bf16, dh and dw are 1.04 GiB and 1024-row chunks
add 0.26 GiB (2048 rows: 0.5 GiB), against 3.0 GiB for torch.compile's training step on an H100
(bench/results/training/): the course's goal, no slower than torch.compile in at most half its memory,
leaves room for chunks of about 1900 rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.linear_cross_entropy import _check_inputs, _combine, _tile_stats
from kernels.linear_cross_entropy_backward import linear_cross_entropy_forward_backward
from kernels.matmul import grouped_tile
from kernels.tma import descriptor, first_that_compiles, persistent_programs, tma_path_applies, tma_ready

STORE, ACCUMULATE, STATS = 0, 1, 2  # what a GEMM's epilogue does with its tile


@triton.jit
def _epilogue(acc, c_desc, off_m, off_n, M, N, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts, part,
              BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, EPILOGUE: tl.constexpr):
    # One column block of an output tile: statistics of the logits (STATS), dw's previous sum added
    # (ACCUMULATE), then stored in the output's dtype; the copy engine drops rows and columns past the edges.
    if EPILOGUE == 2:  # the statistics of the logits as stored: the row kernel's softmax reads the rounded ones
        acc = acc.to(c_desc.dtype).to(tl.float32)
        _tile_stats(acc, off_m + tl.arange(0, BLOCK_M), off_n, part, M, N, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr,
                    n_parts, WIDTH)
    if EPILOGUE == 1:
        acc += c_desc.load([off_m, off_n]).to(tl.float32)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _gemm_tma_kernel(a_desc, b_desc, c_desc, M, N, K, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     PROGRAMS: tl.constexpr, A_TRANSPOSED: tl.constexpr, B_TRANSPOSED: tl.constexpr,
                     EPILOGUE: tl.constexpr, FLATTEN: tl.constexpr):
    # c = a @ b for a (M, K) and b (K, N), each given as a descriptor of itself or, TRANSPOSED, of its transpose
    # (a (K, M) matrix read in [BLOCK_K, BLOCK_M] tiles): one program per multiprocessor, walking tiles PROGRAMS
    # apart. The epilogue works on two column halves, which halves the shared memory its tiles take.
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            if A_TRANSPOSED:
                a = a_desc.load([k, off_m]).T
            else:
                a = a_desc.load([off_m, k])
            if B_TRANSPOSED:
                b = b_desc.load([off_n, k]).T
            else:
                b = b_desc.load([k, off_n])
            acc = tl.dot(a, b, acc)
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        _epilogue(left, c_desc, off_m, off_n, M, N, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts, 2 * pid_n,
                  BLOCK_M, BLOCK_N // 2, EPILOGUE)
        _epilogue(right, c_desc, off_m, off_n + BLOCK_N // 2, M, N, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, n_parts,
                  2 * pid_n + 1, BLOCK_M, BLOCK_N // 2, EPILOGUE)


@triton.jit
def _dlogits_kernel(logits_ptr, row_loss_ptr, tgt_ptr, t_ptr, loss_ptr, V, stride_l, inv_m, BLOCK_V: tl.constexpr):
    # One row: its log-sum-exp is its loss plus its target's logit (the partials were folded by _combine); the
    # loss goes into the mean, and (softmax - onehot) / M replaces the row's logits, one tile of words at a time.
    row = tl.program_id(0).to(tl.int64)
    row_loss = tl.load(row_loss_ptr + row)
    lse = row_loss + tl.load(tgt_ptr + row)
    tl.atomic_add(loss_ptr, row_loss * inv_m)
    target = tl.load(t_ptr + row).to(tl.int32)
    offs = tl.arange(0, BLOCK_V)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        x = tl.load(logits_ptr + row * stride_l + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)
        tl.store(logits_ptr + row * stride_l + cols, (g * inv_m).to(logits_ptr.dtype.element_ty), mask=cols < V)


# Tried in order for each of the three products; a setting this Triton or GPU cannot compile is skipped from then on
# (kernels.tma.first_that_compiles). The first is kernels/gemm_epilogue.py's TMA tile (timed there at 0.96 of cuBLAS
# at 8192^3 bf16 on an H200), flattened: the next tile's loads start under this one's epilogue. Compiled for sm_90
# by Triton 3.6 it takes 177 KB of shared memory (208 KB where the epilogue adds dW's previous sum): see
# tests/kernels/test_hopper_compile.py.
CE_GEMM_SETTINGS = tuple(
    {"BLOCK_M": 128, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": flatten, "num_warps": 8,
     "num_stages": stages}
    for bn, flatten, stages in ((256, True, 3), (128, False, 4)))


def chunk_rows_tma(M: int, V: int, element_size: int = 2) -> int:
    """Rows per chunk: its logits at most 256 MiB and a quarter of all, a multiple of 128, 128 at least."""
    return max(128, min(2**28 // (element_size * V), M // 4) // 128 * 128)


def tma_ce_applies(h: torch.Tensor, w: torch.Tensor) -> bool:
    """Hopper, 16-bit, row-major h and w the copy engine can read, rows of logits it can write (V e a multiple of
    16 bytes), and more than 256 rows (fewer are not a GEMM's work)."""
    return tma_path_applies(h, w.t()) and tma_ready(w)


def linear_cross_entropy_forward_backward_tma(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor,
                                              rows: int | None = None, settings: tuple | None = None,
                                              warmup: bool = False):
    """(loss, dh, dw) as linear_cross_entropy_forward_backward gives them, with the products on the TMA engine
    where tma_ce_applies (the course's Triton version elsewhere). rows: rows per chunk (chunk_rows_tma by default).
    settings: GEMM settings to try in order (CE_GEMM_SETTINGS by default). warmup=True compiles the first
    setting's kernels without running them and returns their handles."""
    M, _, V = _check_inputs(h, w, targets, sync=False)
    if not tma_ce_applies(h, w):
        if warmup:
            raise ValueError("the TMA path needs row-major 16-bit h and w on a Hopper GPU and more than 256 rows")
        return linear_cross_entropy_forward_backward(h, w, targets)
    return _launch_ce_tma(h, w, targets, rows or chunk_rows_tma(M, V, h.element_size()),
                          settings or CE_GEMM_SETTINGS, warmup)


def _gemm(a, b, c, cfg, a_transposed=False, b_transposed=False, epilogue=STORE, stats=None, warmup=False):
    """c = a @ b (or c += a @ b) on the TMA kernel; a and b given as they lie in memory (transposed: their
    transposes are the operands). stats: (targets, part_m, part_s, tgt) for the logits' epilogue."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    M = a.shape[1] if a_transposed else a.shape[0]
    K = a.shape[0] if a_transposed else a.shape[1]
    N = b.shape[0] if b_transposed else b.shape[1]
    a_desc = descriptor(a, [bk, bm] if a_transposed else [bm, bk])
    b_desc = descriptor(b, [bn, bk] if b_transposed else [bk, bn])
    c_desc = descriptor(c, [bm, bn // 2])
    t, part_m, part_s, tgt = stats if stats else (c, c, c, c)  # not read unless the epilogue takes statistics
    programs = persistent_programs(triton.cdiv(M, bm) * triton.cdiv(N, bn), c.device)
    args = (a_desc, b_desc, c_desc, M, N, K, t, part_m, part_s, tgt, part_m.shape[-1] if stats else 0)
    meta = {"PROGRAMS": programs, "A_TRANSPOSED": a_transposed, "B_TRANSPOSED": b_transposed, "EPILOGUE": epilogue,
            **cfg}
    if warmup:
        return _gemm_tma_kernel.warmup(*args, grid=(programs,), **meta)
    return _gemm_tma_kernel[(programs,)](*args, **meta)


def _launch_ce_tma(h, w, targets, rows: int, settings: tuple, warmup: bool = False):
    M, K = h.shape
    V = w.shape[0]
    rows = min(M, rows)
    loss = torch.zeros((), dtype=torch.float32, device=h.device)
    dh = torch.empty((M, K), dtype=h.dtype, device=h.device)
    dw = torch.empty((V, K), dtype=w.dtype, device=w.device)
    logits = torch.empty((rows, V), dtype=h.dtype, device=h.device)  # then dlogits, in place
    tgt = torch.empty(rows, dtype=torch.float32, device=h.device)
    state = {}

    def chunk(cfg, start, n, warm=False):
        h_c, lg, t_c = h[start:start + n], logits[:n], targets[start:start + n]
        n_parts = 2 * triton.cdiv(V, cfg["BLOCK_N"])
        if state.get("parts") is None or state["parts"][0].shape[1] != n_parts:
            state["parts"] = [torch.empty((rows, n_parts), dtype=torch.float32, device=h.device) for _ in range(2)]
        part_m, part_s = (p[:n] for p in state["parts"])
        products = ((h_c, w, lg, False, True, STATS, (t_c, part_m, part_s, tgt)),
                    (lg, w, dh[start:start + n], False, False, STORE, None),
                    (lg, h_c, dw, True, False, ACCUMULATE if start else STORE, None))
        if warm:  # the first chunk's products, and dw's accumulating product of the later ones
            return [_gemm(*p[:3], cfg, *p[3:], warmup=True) for p in products] + [
                _gemm(lg, h_c, dw, cfg, True, False, ACCUMULATE, warmup=True)]
        if start == 0:
            loss.zero_()  # a setting that fails part-way through the first chunk leaves nothing behind
        _gemm(*products[0][:3], cfg, *products[0][3:])
        row_loss = _combine(part_m, part_s, tgt[:n])
        _dlogits_kernel[(n,)](lg, row_loss, tgt, t_c, loss, V, lg.stride(0), 1.0 / M, BLOCK_V=2048)
        for p in products[1:]:
            _gemm(*p[:3], cfg, *p[3:])

    if warmup:
        return chunk(settings[0], 0, rows, warm=True)

    def first_chunk(cfg):  # finds the setting that compiles; the other chunks use it
        chunk(cfg, 0, rows)
        state["cfg"] = cfg

    first_that_compiles(_gemm_tma_kernel, settings, first_chunk)
    for start in range(rows, M, rows):
        chunk(state["cfg"], start, min(rows, M - start))
    return loss, dh, dw
