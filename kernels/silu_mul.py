"""SwiGLU's activation on the output of the MLP's one up-projection GEMM, forward and backward, each one pass.

gu (M, 2F) holds the gate g in its first F columns and u in the last F; s = silu(g) · u (M, F). The backward
gets ds and returns dgu (M, 2F):
    dg = ds · u · σ(g) · (1 + g · (1 - σ(g))),     du = ds · silu(g)
Eager PyTorch makes silu(g), then the product, and autograd saves both factors: read 2|s| write |s| twice
forward, and five tensors through memory backward. Fused: the forward reads gu and writes s (3|s|); the
backward reads gu and ds and writes dgu (5|s|), recomputing σ(g) instead of saving it: the sigmoid is an exp,
free next to the bytes. Only gu is saved, which the GEMM wrote anyway.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_mul_kernel(gu_ptr, s_ptr, F, stride_gu, stride_s, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask, other=0.0).to(tl.float32)
    s = g / (1.0 + tl.exp(-g)) * u
    tl.store(s_ptr + row * stride_s + cols, s.to(s_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_backward_kernel(gu_ptr, ds_ptr, dgu_ptr, F, stride_gu, stride_ds, stride_dgu, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask, other=0.0).to(tl.float32)
    ds = tl.load(ds_ptr + row * stride_ds + cols, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    dg = ds * u * sig * (1.0 + g * (1.0 - sig))
    du = ds * g * sig
    out = dgu_ptr + row * stride_dgu + cols
    tl.store(out, dg.to(dgu_ptr.dtype.element_ty), mask=mask)
    tl.store(out + F, du.to(dgu_ptr.dtype.element_ty), mask=mask)


def _check(gu: torch.Tensor):
    if gu.dim() != 2 or gu.shape[1] % 2:
        raise ValueError(f"want gu (M, 2F): the gate and up halves side by side, got {tuple(gu.shape)}")
    if gu.stride(1) != 1:
        raise ValueError("gu's rows must be contiguous (the rows themselves may be strided)")


def _grid(M: int, F: int, block: int):
    return (M, triton.cdiv(F, block))  # rows on the axis that may exceed 65535


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """s = silu(g) * u for gu = [g | u] (M, 2F); s (M, F) in gu's dtype."""
    _check(gu)
    M, F = gu.shape[0], gu.shape[1] // 2
    s = torch.empty((M, F), dtype=gu.dtype, device=gu.device)
    block = min(1024, triton.next_power_of_2(max(F, 1)))
    if M and F:
        _silu_mul_kernel[_grid(M, F, block)](gu, s, F, gu.stride(0), s.stride(0), BLOCK=block)
    return s


def silu_mul_backward(gu: torch.Tensor, ds: torch.Tensor) -> torch.Tensor:
    """dgu (M, 2F) for s = silu_mul(gu) and the gradient ds (M, F)."""
    _check(gu)
    M, F = gu.shape[0], gu.shape[1] // 2
    if ds.shape != (M, F) or ds.stride(-1) != 1:
        raise ValueError(f"want ds ({M}, {F}) with contiguous rows, got {tuple(ds.shape)} strides {ds.stride()}")
    dgu = torch.empty((M, 2 * F), dtype=gu.dtype, device=gu.device)
    block = min(1024, triton.next_power_of_2(max(F, 1)))
    if M and F:
        _silu_mul_backward_kernel[_grid(M, F, block)](gu, ds, dgu, F, gu.stride(0), ds.stride(0), dgu.stride(0),
                                                      BLOCK=block)
    return dgu


class SiluMulFunction(torch.autograd.Function):
    """s = SiluMulFunction.apply(gu): saves gu alone and recomputes the sigmoid in the backward."""

    @staticmethod
    def forward(ctx, gu):
        ctx.save_for_backward(gu)
        return silu_mul(gu)

    @staticmethod
    def backward(ctx, ds):
        (gu,) = ctx.saved_tensors
        return silu_mul_backward(gu, ds.contiguous())
