"""A GEMM with its epilogue fused: out = gelu_tanh(x @ w + b) + r, a transformer MLP's up-projection with its
bias, activation and a residual add applied to the accumulator before anything is written.

x (M, K), w (K, N), b (N,), r (M, N), out (M, N); |y| below is the size of one (M, N) tensor. Bytes through HBM:
    PyTorch:  y = addmm(b, x, w)   read x, w, b, write y     |x| + |w| + |y|
              g = gelu(y)          read y, write g           2|y|
              out = g + r          read g and r, write out   3|y|       in all |x| + |w| + 6|y|
    fused:    read x, w, b and r, write out                  |x| + |w| + 2|y|
The accumulator tile is already in registers when the K loop ends, so bias, GELU and residual cost a few
instructions per element and one read of r; unfused, each is a pass over y. That matters when the GEMM is
short (small K) or memory-bound (decode, M of a few rows); for large M, N and K the 2 M N K flops hide it.
Precision: the epilogue runs in float32 on the float32 accumulator and rounds once, where PyTorch rounds y,
gelu(y) and the sum each to the input dtype.

Two launchers: gemm_gelu_residual, plain pointer loads, runs anywhere (the interpreter too) and is notebook
04's exercise solution; gemm_gelu_residual_tma, the Hopper path: persistent programs, tiles moved by the
TMA copy engine, for the last 15% to cuBLAS (falls back to the first where the engine cannot be used).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder import runtime
from autograder.specs.gemm_epilogue_fusion import (  # noqa: F401  the torch side of the op, shared with the grader
    gemm_gelu_residual_bytes,
    gemm_gelu_residual_eager,
    gemm_gelu_residual_flops,
    gemm_gelu_residual_reference,
)
from kernels.matmul import check_gemm_inputs, dot_precision, grouped_tile, tile_dot
from kernels.tma import (
    descriptor,
    first_that_compiles,
    persistent_programs,
    tma_path_applies,
    tma_ready,
    weight_descriptor,
)


@triton.jit
def gelu_tanh(u, APPROX_TANH: tl.constexpr = False):
    # 0.5 u (1 + tanh(z)) = u * sigmoid(2 z): one exp, no tanh (spelled differently across Triton versions),
    # right at both tails, where exp overflows to inf or underflows to 0. fdiv: a division within 2 ulp in a
    # few instructions instead of the IEEE one's dozen; the epilogue runs while the tensor cores wait.
    z = 0.7978845608028654 * (u + 0.044715 * u * u * u)
    if APPROX_TANH:
        # NVIDIA's tanh.approx: one special-function instruction where exp and the division take two (those
        # units, 16 results a clock per SM, are what a short-K epilogue waits on). Its error, about 2^-11,
        # is a tenth of a bfloat16 rounding but most of a float16 one: bfloat16 outputs only.
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [z], dtype=tl.float32, is_pure=True,
                                      pack=1)
        return 0.5 * u + 0.5 * u * t
    return tl.fdiv(u, 1.0 + tl.exp(-2.0 * z))


def approx_tanh_applies(t: torch.Tensor) -> bool:
    """tanh.approx for the GELU: bfloat16 results, compiled for an NVIDIA GPU (not the interpreter, not ROCm)."""
    return (t.dtype == torch.bfloat16 and t.is_cuda and torch.version.hip is None
            and not runtime.interpreted())


@triton.jit
def _epilogue_store(acc, rm, rn, M, N, b_ptr, r_ptr, out_ptr, stride_b, stride_rm, stride_rn, stride_om,
                    APPROX_TANH: tl.constexpr):
    # On the float32 accumulator while it is still in registers: bias, GELU, residual; one rounding at the store.
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    bias = tl.load(b_ptr + rn * stride_b, mask=rn < N, other=0.0).to(tl.float32)
    res = tl.load(r_ptr + rm.to(tl.int64)[:, None] * stride_rm + rn[None, :] * stride_rn, mask=mask, other=0.0)
    y = gelu_tanh(acc + bias[None, :], APPROX_TANH) + res.to(tl.float32)
    tl.store(out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemm_gelu_residual_kernel(x_ptr, w_ptr, b_ptr, r_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk,
                               stride_wn, stride_b, stride_rm, stride_rn, stride_om,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               GROUP_M: tl.constexpr, HALVES: tl.constexpr, PRECISION: tl.constexpr,
                               APPROX_TANH: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                   BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
    if HALVES:
        # A 128 x 256 accumulator already takes 128 registers a thread; r's tile and GELU's temporaries on top
        # of it spilled to local memory (255 registers, 16 spilled, on an H200). One column half at a time
        # needs half of that room: no spills, and 1.25x faster at the graded shape.
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        half = pid_n * BLOCK_N + tl.arange(0, BLOCK_N // 2)
        _epilogue_store(left, rm, half, M, N, b_ptr, r_ptr, out_ptr, stride_b, stride_rm, stride_rn, stride_om,
                        APPROX_TANH)
        _epilogue_store(right, rm, half + BLOCK_N // 2, M, N, b_ptr, r_ptr, out_ptr, stride_b, stride_rm, stride_rn,
                        stride_om, APPROX_TANH)
    else:
        _epilogue_store(acc, rm, rn, M, N, b_ptr, r_ptr, out_ptr, stride_b, stride_rm, stride_rn, stride_om,
                        APPROX_TANH)


def gemm_launch_settings(M: int, N: int, K: int, element_size: int = 2) -> dict:
    """Tile shape by regime, chosen by timing on an H200 (python -m bench.gemm --sweep). Shared memory
    holds num_stages - 1 pairs of x and w tiles: float32 elements take twice the room, so half the K step."""
    wide = element_size > 2
    if M <= 32:  # decode: the weights dominate the bytes; many narrow tiles keep enough loads in flight
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128 if wide else 256, GROUP_M=1, HALVES=False, num_warps=4,
                    num_stages=3)
    if M <= 256:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32 if wide else 64, GROUP_M=8, HALVES=False, num_warps=4,
                    num_stages=4)
    if K <= 256:  # a few K steps per tile: the epilogue's reads and writes weigh as much as the products, and
        # small tiles let four programs share an SM, one's epilogue running while another's products do
        # (32768 x 256 -> 2048: 1.46x eager on an H200, 1.33x with the large tile; H100 1.70x, 1.58x); two stages
        # suffice for four K steps and leave room in shared memory for more programs
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32 if wide else 64, GROUP_M=8, HALVES=False, num_warps=4,
                    num_stages=2)
    return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, HALVES=True, num_warps=8,
                num_stages=4 if wide else 5)


def _check_epilogue_inputs(x, w, b, r) -> tuple[int, int, int]:
    M, N, K = check_gemm_inputs(x, w)
    if b.dim() != 1 or b.shape[0] != N or r.shape != (M, N):
        raise ValueError(f"x {tuple(x.shape)} @ w {tuple(w.shape)} is ({M}, {N}): want b ({N},) and r ({M}, {N}), "
                         f"got b {tuple(b.shape)} and r {tuple(r.shape)}")
    if b.dtype != x.dtype or r.dtype != x.dtype or b.device != x.device or r.device != x.device:
        raise ValueError(f"b and r must have x's dtype and device ({x.dtype}, {x.device}), got "
                         f"b {b.dtype} on {b.device}, r {r.dtype} on {r.device}")
    return M, N, K


def gemm_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x @ w + b) + r in one kernel: x (M, K), w (K, N), b (N,), r (M, N), any strides."""
    M, N, K = _check_epilogue_inputs(x, w, b, r)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    cfg = gemm_launch_settings(M, N, K, x.element_size())
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _gemm_gelu_residual_kernel[grid](x, w, b, r, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                     b.stride(0), r.stride(0), r.stride(1), out.stride(0),
                                     PRECISION=dot_precision(x.dtype), APPROX_TANH=approx_tanh_applies(x), **cfg)
    return out


# --- The Hopper path: persistent programs fed by the TMA copy engine ---------------------------------------

@triton.jit
def _epilogue_tile(acc, b_ptr, stride_b, r_desc, out_desc, off_m, off_n, N, BLOCK_N: tl.constexpr,
                   APPROX_TANH: tl.constexpr):
    rn = off_n + tl.arange(0, BLOCK_N)
    bias = tl.load(b_ptr + rn * stride_b, mask=rn < N, other=0.0).to(tl.float32)
    res = r_desc.load([off_m, off_n])
    y = gelu_tanh(acc + bias[None, :], APPROX_TANH) + res.to(tl.float32)
    out_desc.store([off_m, off_n], y.to(res.dtype))  # the engine drops rows and columns past the edge


@triton.jit
def _gemm_gelu_residual_tma_kernel(x_desc, w_desc, r_desc, out_desc, b_ptr, stride_b, M, N, K,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                   GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, W_TRANSPOSED: tl.constexpr,
                                   SUBTILES: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                                   APPROX_TANH: tl.constexpr):
    # One program per multiprocessor, each walking tiles PROGRAMS apart: no launch or ramp-up per tile. With
    # FLATTEN the compiler pipelines the two loops as one, so the next tile's first loads are in flight
    # while this tile's epilogue runs.
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = x_desc.load([off_m, k])
            if W_TRANSPOSED:
                b = w_desc.load([off_n, k]).T
            else:
                b = w_desc.load([k, off_n])
            acc = tl.dot(a, b, acc)
        if SUBTILES == 2:  # two column halves: half the shared memory for the r and out tiles
            acc = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(acc)
            _epilogue_tile(left, b_ptr, stride_b, r_desc, out_desc, off_m, off_n, N, BLOCK_N // 2, APPROX_TANH)
            _epilogue_tile(right, b_ptr, stride_b, r_desc, out_desc, off_m, off_n + BLOCK_N // 2, N, BLOCK_N // 2,
                           APPROX_TANH)
        else:
            _epilogue_tile(acc, b_ptr, stride_b, r_desc, out_desc, off_m, off_n, N, BLOCK_N, APPROX_TANH)


# Tried in order: a setting this Triton cannot compile is skipped from then on. Chosen by timing 8192^3 bf16
# on an H200 (python -m bench.gemm --sweep): FLATTEN overlaps each epilogue with the next tile's
# loads (about 3%); SUBTILES=2 halves the shared memory of the r and out tiles, which makes room for the
# flattened pipeline's buffers. Warp specialization measured no faster here.
TMA_SETTINGS = (
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=16, SUBTILES=2, FLATTEN=True, WARP_SPECIALIZE=False,
         num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=16, SUBTILES=2, FLATTEN=False, WARP_SPECIALIZE=False,
         num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SUBTILES=1, FLATTEN=False, WARP_SPECIALIZE=False,
         num_warps=8, num_stages=3),
)


def gemm_gelu_residual_tma(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x @ w + b) + r, through the TMA engine on Hopper; the pointer kernel where that does not apply."""
    _check_epilogue_inputs(x, w, b, r)
    if not (tma_path_applies(x, w) and tma_ready(r)):
        return gemm_gelu_residual(x, w, b, r)
    return _launch_epilogue_tma(x, w, b, r, TMA_SETTINGS)


def _launch_epilogue_tma(x, w, b, r, settings: tuple) -> torch.Tensor:
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)

    def launch(cfg):
        bm, bn, bk, halves = (cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SUBTILES"))
        w_desc, w_transposed = weight_descriptor(w, bk, bn)
        programs = persistent_programs(triton.cdiv(M, bm) * triton.cdiv(N, bn), x.device)
        _gemm_gelu_residual_tma_kernel[(programs,)](
            descriptor(x, [bm, bk]), w_desc, descriptor(r, [bm, bn // halves]), descriptor(out, [bm, bn // halves]),
            b, b.stride(0), M, N, K, PROGRAMS=programs, W_TRANSPOSED=w_transposed,
            APPROX_TANH=approx_tanh_applies(x), **cfg)

    first_that_compiles(_gemm_gelu_residual_tma_kernel, settings, launch)
    return out
