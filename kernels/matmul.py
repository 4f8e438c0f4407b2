"""A tiled matmul in Triton, out = x @ w: the GEMM that notebook 04 fuses its epilogues into.

x (M, K), w (K, N), out (M, N). A program owns one BLOCK_M x BLOCK_N tile of out: it walks K in steps of
BLOCK_K, loads an x tile and a w tile each step, accumulates tl.dot into one float32 accumulator, and rounds
and stores the tile once at the end. Flops 2 M N K; bytes at least e (M K + K N + M N), e the element size.
Every program in a tile-row reads the same x tiles and every program in a tile-column the same w tiles, so
the order in which programs run decides how many of those reads L2 serves (grouped_tile).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Tiles numbered down groups of GROUP_M tile-rows, column by column: the programs in flight at once
    # cover a GROUP_M-tall band, so its x rows and the w columns they meet stay in L2.
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_m = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_m, (tile % per_group) // group_m


@triton.jit
def tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    # x[rm, :] @ w[:, rn] in float32. Masked loads fill the ragged edges with zeros, which add nothing.
    rk = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :] * stride_xk
    w_tile = w_ptr + rk[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(x_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(w_tile, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)  # one fp32 accumulator for the whole K loop
        x_tile += BLOCK_K * stride_xk
        w_tile += BLOCK_K * stride_wk
    return acc


@triton.jit
def _matmul_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, stride_om,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   PRECISION: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                   BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
    out = out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def dot_precision(dtype: torch.dtype):
    # tl.dot rounds float32 operands to TF32 (11 significant bits) unless told otherwise; torch's fp32 matmul does not.
    return "ieee" if dtype == torch.float32 else None


def check_gemm_inputs(x: torch.Tensor, *weights: torch.Tensor) -> tuple[int, int, int]:
    """(M, N, K) of x (M, K) @ w (K, N) for each weight, or a ValueError that says what is wrong."""
    if x.dim() != 2 or any(w.dim() != 2 for w in weights):
        raise ValueError(f"want x (M, K) and weights (K, N), got {[tuple(t.shape) for t in (x, *weights)]}")
    if not x.is_floating_point() or any(w.dtype != x.dtype for w in weights):
        raise ValueError(f"x and the weights must share a floating dtype, got {[t.dtype for t in (x, *weights)]}")
    if any(w.shape != weights[0].shape for w in weights) or weights[0].shape[0] != x.shape[1]:
        raise ValueError(f"x is {tuple(x.shape)}: the weights must all be ({x.shape[1]}, N), got "
                         f"{[tuple(w.shape) for w in weights]}")
    if any(t.device != x.device for t in weights):
        raise ValueError(f"x and the weights must be on one device, got {[str(t.device) for t in (x, *weights)]}")
    return x.shape[0], weights[0].shape[1], x.shape[1]


def matmul(x: torch.Tensor, w: torch.Tensor, **tile) -> torch.Tensor:
    """x @ w with the tile settings given (keys of MATMUL_TILE): notebook 04 times it over tiles and orders."""
    M, N, K = check_gemm_inputs(x, w)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _launch_matmul(x, w, out, {**MATMUL_TILE, **tile})
    return out


MATMUL_TILE = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)


def _launch_matmul(x, w, out, tile: dict):
    M, K = x.shape
    N = w.shape[1]
    grid = (triton.cdiv(M, tile["BLOCK_M"]) * triton.cdiv(N, tile["BLOCK_N"]),)
    return _matmul_kernel[grid](x, w, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                out.stride(0), PRECISION=dot_precision(x.dtype), **tile)


def tile_resources(x: torch.Tensor, w: torch.Tensor, **tile) -> dict:
    """What one program of the compiled kernel holds: registers per thread, spilled bytes, shared memory.
    Compiled kernels only (on a GPU); the interpreter compiles nothing."""
    out = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
    compiled = _launch_matmul(x, w, out, {**MATMUL_TILE, **tile})
    return {"registers": compiled.n_regs, "spilled_bytes": compiled.n_spills, "shared_bytes": compiled.metadata.shared,
            "threads": 32 * compiled.metadata.num_warps}


def matmul_flops(x: torch.Tensor, w: torch.Tensor) -> int:
    return 2 * x.shape[0] * x.shape[1] * w.shape[1]


def matmul_bytes(x: torch.Tensor, w: torch.Tensor) -> int:
    """Each operand read once, the output written once: what a perfect tile order would move."""
    return x.element_size() * (x.numel() + w.numel() + x.shape[0] * w.shape[1])
