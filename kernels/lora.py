"""A fused LoRA layer: y = x W^T + s (x A^T) B^T, the low-rank adapter computed inside the base GEMM.

x (M, K), W (N, K) (nn.Linear's layout), A (r, K), B (N, r), s a float; |y| one (M, N) tensor. Bytes through HBM:
    PyTorch:  base = x @ W.T          read x and W, write base              |x| + |W| + |y|
              xa = x @ A.T            read x again and A, write xa          |x| + |A| + M r
              l = xa @ B.T            read xa and B, write l                M r + |B| + |y|
              sl = s * l              read l, write sl                      2|y|
              y = base + sl           read base and sl, write y             3|y|
                                                         in all   2|x| + |W| + |A| + |B| + 2 M r + 7|y|
    fused:    read x, W, A and B once, write y                               |x| + |W| + |A| + |B| + |y|
Flops 2 M N K + 2 M r (K + N) either way, plus what the fused kernel recomputes: every program of a tile-row
computes the same (BLOCK_M, r) tile of x A^T, r / BLOCK_N more products than the base GEMM (12% at r = 16,
BLOCK_N = 128). The x tile each K step loads feeds both tl.dot calls, so x is read once; A's tile is r columns.
Precision: both accumulators are float32; s x A^T is rounded to the inputs' dtype once, for the epilogue's
tl.dot (as PyTorch rounds x A^T), and y once, at the store.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.lora import (  # noqa: F401  the torch side of the op, shared with the grader
    lora_bytes,
    lora_eager,
    lora_flops,
    lora_merged,
    lora_reference,
    merge_lora,
)
from kernels.matmul import dot_precision, grouped_tile

MAX_RANK = 128  # the (BLOCK_M, r) accumulator lives in registers beside the output tile


@triton.jit
def _lora_kernel(x_ptr, w_ptr, a_ptr, b_ptr, y_ptr, M, N, K, R, scale, stride_xm, stride_xk, stride_wn, stride_wk,
                 stride_ar, stride_ak, stride_bn, stride_br, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                 GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, BLOCK_R)
    rk = tl.arange(0, BLOCK_K)
    # W (N, K) and A (r, K) read as their transposes, (K, N) and (K, r) tiles: the strides swap, nothing is copied
    x_tile = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :] * stride_xk
    w_tile = w_ptr + rk[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn
    a_tile = a_ptr + rk[:, None] * stride_ak + rr[None, :] * stride_ar
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    xa = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        in_k = rk < K - k
        x = tl.load(x_tile, mask=(rm[:, None] < M) & in_k[None, :], other=0.0)  # read once, used twice
        acc = tl.dot(x, tl.load(w_tile, mask=in_k[:, None] & (rn[None, :] < N), other=0.0), acc,
                     input_precision=PRECISION)
        xa = tl.dot(x, tl.load(a_tile, mask=in_k[:, None] & (rr[None, :] < R), other=0.0), xa,
                    input_precision=PRECISION)
        x_tile += BLOCK_K * stride_xk
        w_tile += BLOCK_K * stride_wk
        a_tile += BLOCK_K * stride_ak
    # Epilogue: s x A^T, rounded once to the inputs' dtype for the tensor cores, times this tile's columns of B^T,
    # added into the same float32 accumulator. Rows of B past r are zeros: they add nothing.
    bt = tl.load(b_ptr + rr[:, None] * stride_br + rn.to(tl.int64)[None, :] * stride_bn,
                 mask=(rr[:, None] < R) & (rn[None, :] < N), other=0.0)
    acc = tl.dot((xa * scale).to(bt.dtype), bt, acc, input_precision=PRECISION)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def lora_launch_settings(M: int, N: int, K: int, element_size: int = 2) -> dict:
    """The tiles of kernels/gemm_epilogue.py's regimes, without its 128 x 256 tile: the x A^T accumulator needs
    registers of its own."""
    wide = element_size > 2  # float32: twice the shared memory per stage
    if M <= 32:  # decode: the weights dominate the bytes; many narrow tiles keep enough loads in flight
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64 if wide else 128, GROUP_M=1, num_warps=4, num_stages=3)
    if M <= 256 or K <= 256:  # few rows, or few K steps: small tiles, several programs per multiprocessor
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32 if wide else 64, GROUP_M=8, num_warps=4,
                    num_stages=2 if K <= 256 else 4)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32 if wide else 64, GROUP_M=8, num_warps=8, num_stages=3)


def check_lora_inputs(x, w, a, b, scale) -> tuple[int, int, int, int]:
    """(M, N, K, r), or a ValueError that says what is wrong."""
    tensors = {"x": x, "w": w, "a": a, "b": b}
    if any(not isinstance(t, torch.Tensor) or t.dim() != 2 for t in tensors.values()):
        raise ValueError("want 2-D tensors x (M, K), w (N, K), a (r, K), b (N, r), got "
                         + ", ".join(f"{n} {tuple(getattr(t, 'shape', ()))}" for n, t in tensors.items()))
    M, K = x.shape
    N, r = w.shape[0], a.shape[0]
    if w.shape[1] != K or a.shape[1] != K or tuple(b.shape) != (N, r):
        raise ValueError(f"x is ({M}, {K}): want w (N, {K}), a (r, {K}) and b (N, r), got w {tuple(w.shape)}, "
                         f"a {tuple(a.shape)}, b {tuple(b.shape)}")
    if not 1 <= r <= MAX_RANK:
        raise ValueError(f"the rank r = {r} must be between 1 and {MAX_RANK}")
    if not x.is_floating_point() or any(t.dtype != x.dtype for t in (w, a, b)):
        raise ValueError(f"x, w, a and b must share a floating dtype, got {[t.dtype for t in tensors.values()]}")
    if any(t.device != x.device for t in (w, a, b)):
        raise ValueError(f"x, w, a and b must be on one device, got {[str(t.device) for t in tensors.values()]}")
    if isinstance(scale, torch.Tensor) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a Python float, got {type(scale).__name__}")
    return M, N, K, r


def lora_linear(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """x @ w.T + scale * (x @ a.T) @ b.T in one kernel: x (M, K), w (N, K), a (r, K), b (N, r), any strides."""
    M, N, K, r = check_lora_inputs(x, w, a, b, scale)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    cfg = lora_launch_settings(M, N, K, x.element_size())
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _lora_kernel[grid](x, w, a, b, y, M, N, K, r, float(scale), x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                       a.stride(0), a.stride(1), b.stride(0), b.stride(1), y.stride(0),
                       BLOCK_R=max(16, triton.next_power_of_2(r)), PRECISION=dot_precision(x.dtype), **cfg)
    return y
