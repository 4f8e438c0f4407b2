"""FlashAttention forward for Hopper, warp-specialized by Triton: one warp group only issues the TMA copies of
K and V while two compute warp groups share the query tile (12 warps: the producer and consumer layout of
cuDNN's and FlashAttention-3's kernels), built from one flag on the key loop, `tl.range(..., warp_specialize=True)`.

Same op, inputs and outputs as kernels/flash_attention.py: o = softmax(Q Kᵀ / sqrt(D)) V and each row's
log-sum-exp, for contiguous 16-bit (B, H, N, D) tensors on Hopper; other inputs go to the portable kernel. Flops
4 B H N N_kv D, half with a causal mask.

What Triton's Hopper warp-specialization pass (nvgpu-warp-specialization, in Triton 3.6 and 3.7) needs, found by
compiling variants of the course's kernels for sm_90 (tests/kernels/test_hopper_compile.py checks the first on
this one):
- num_warps=4. The pass then splits the query tile between two consumer warp groups and adds a producer group:
  12 warps. With num_warps=8 the flag is accepted and silently ignored: the kernel compiles to the same code.
  The course's TMA kernel runs 8 warps and two key loops (below), so the note in kernels/flash_attention.py that
  warp specialization timed no faster there is what a schedule never applied would time.
- Every load it schedules is a TMA descriptor load, Q's included: a pointer load fails the pass ("unsupported
  load type for producer commit").
- Q's descriptor is made in the kernel (tl.make_tensor_descriptor), which the pass re-blocks for the two
  consumer groups; a host descriptor's block is fixed, and the pass fails ("descriptor block and tensor must
  have the same number of elements").
- One key loop and nothing loaded after it. The course's two loops (tiles wholly visible, then the diagonal
  ones under a mask) fail the pass; a diagonal step peeled out of the loop, or an `if` choosing the mask inside
  it, leave the kernel unspecialized without a word. So here the causal mask (and the mask of a ragged last key
  tile) is applied to every tile of the loop: a compare and a select per score more than the course's kernel.
Descriptors made in a kernel need a global scratch allocation per program (128 bytes each): the launcher sets
Triton's allocator to torch's.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.flash_attention import (
    LOG2E,
    _check_attention_inputs,
    _online_softmax_step,
    _visible,
    flash_attention,
)
from kernels.tma import first_that_compiles, hopper_or_newer, tma_ready


@triton.jit
def _flash_attention_ws_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, N, N_KV, qk_scale, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                               MASKED: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    block_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    # Causal: the last query blocks have the most keys; launching them first (above) keeps the tail short.
    bh = tl.program_id(1).to(tl.int64)
    # One head's rows as a (N, D) matrix: the copy engine fills rows past its end with zeros, so no tile ever
    # reads the next head's keys. Made here, not on the host: see the module's docstring.
    q_desc = tl.make_tensor_descriptor(q_ptr + bh * N * HEAD_DIM, shape=[N, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(k_ptr + bh * N_KV * HEAD_DIM, shape=[N_KV, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr + bh * N_KV * HEAD_DIM, shape=[N_KV, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([block_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = tl.minimum((block_m + 1) * BLOCK_M, N_KV) if CAUSAL else N_KV
    for start in tl.range(0, end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        s = tl.dot(q, k_desc.load([start, 0]).T)
        if MASKED:  # causal, or keys not a multiple of BLOCK_N: every tile, as one loop must be uniform
            s = _visible(s, offs_m, start + offs_n, N_KV, CAUSAL)
        p, alpha, m_i, l_i = _online_softmax_step(s, m_i, l_i, qk_scale)
        v = v_desc.load([start, 0])  # rows past N_KV are zeros: p is 0 there and adds nothing
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    o = acc / l_i[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    rows = bh * N + offs_m
    tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < N)
    tl.store(lse_ptr + rows, (m_i + tl.math.log2(l_i)) / 1.4426950408889634, mask=offs_m < N)


# Tried in order; a setting this Triton cannot compile or this GPU cannot hold is skipped from then on
# (kernels.tma.first_that_compiles). The one setting whose results were right on an H200 with Triton 3.6
# (python -m bench.hopper, at (4, 16, 4096, D) bf16, D 64 and 128, causal and not: the sweeps of
# bench/results/hopper/): every other warp-specialized setting there, 128-row query tiles and 64 x 64
# tiles, returned wrong outputs, where the same source compiled without the flag (8 warps) is right. So only it is
# tried: falling back to a setting that compiles but computes wrong would be worse than failing. Compiled for
# sm_90: 12 warps, 168 registers a thread, no spill, 164 KB of shared memory at D = 128 (too much above 128:
# ws_applies sends larger heads to the portable kernel).
WS_SETTINGS = (
    {"BLOCK_M": 64, "BLOCK_N": 128, "WARP_SPECIALIZE": True, "num_warps": 4, "num_stages": 2},
)

# What python -m bench.hopper sweeps: the flag on at 4 warps over every tile and stage count that fits in
# shared memory at D = 128 (Triton 3.6 for sm_90: 115 to 214 KB), and two twins with the flag off at 8 warps,
# which time the same loop without the producer warp group.
WS_SPACE = WS_SETTINGS + tuple(
    {"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": ws, "num_warps": w, "num_stages": s}
    for bm, bn, s, w, ws in ((128, 128, 2, 4, True), (128, 64, 3, 4, True), (128, 64, 2, 4, True),
                             (128, 64, 4, 4, True), (128, 64, 5, 4, True), (64, 64, 3, 4, True),
                             (128, 128, 2, 8, False), (128, 64, 3, 8, False)))
MAX_HEAD_DIM = 128  # the largest head whose tiles WS_SETTINGS fit in a block's shared memory


def ws_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Hopper or newer, 16-bit, contiguous tensors the copy engine can read, heads of at most MAX_HEAD_DIM
    dimensions: where this kernel runs."""
    return (q.dtype in (torch.float16, torch.bfloat16) and hopper_or_newer(q.device) and q.shape[3] <= MAX_HEAD_DIM
            and all(t.is_contiguous() and tma_ready(t) for t in (q, k, v)))


def _scratch(size: int, alignment: int, stream):
    # Global memory for the descriptors a kernel makes (tl.make_tensor_descriptor): Triton asks at each launch.
    return torch.empty(size, dtype=torch.int8, device="cuda")


def flash_attention_ws(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       settings: tuple | None = None, warmup: bool = False):
    """(o, lse) as flash_attention gives them, from the warp-specialized kernel where ws_applies (the portable
    kernel elsewhere). settings: launch settings to try in order (WS_SETTINGS by default). warmup=True compiles
    the first setting without running it and returns Triton's handle to the compiled kernel (a future under
    triton.AsyncCompileMode): how a benchmark compiles many settings at once."""
    _check_attention_inputs(q, k, v, causal)
    if ws_applies(q, k, v):
        return _launch_attention_ws(q, k, v, causal, settings or WS_SETTINGS, warmup)
    if warmup:
        raise ValueError("the warp-specialized kernel needs contiguous 16-bit tensors on a Hopper GPU, heads of "
                         f"at most {MAX_HEAD_DIM} dimensions")
    return flash_attention(q, k, v, causal)


def _launch_attention_ws(q, k, v, causal: bool, settings: tuple, warmup: bool = False):
    """The kernel on contiguous q, k, v (any GPU the descriptors run on, or the interpreter)."""
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if (N == 0 or B * H == 0) and not warmup:
        return o, lse
    triton.set_allocator(_scratch)

    def launch(cfg, warm=False):
        grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
        args = (q, k, v, o, lse, N, n_kv, LOG2E / math.sqrt(D))
        meta = dict(HEAD_DIM=D, CAUSAL=causal, MASKED=causal or n_kv % cfg["BLOCK_N"] != 0, **cfg)
        if warm:
            return _flash_attention_ws_kernel.warmup(*args, grid=grid, **meta)
        return _flash_attention_ws_kernel[grid](*args, **meta)

    if warmup:
        return launch(settings[0], warm=True)
    first_that_compiles(_flash_attention_ws_kernel, settings, launch)
    return o, lse
