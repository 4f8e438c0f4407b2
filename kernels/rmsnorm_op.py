"""RMSNorm forward and backward as custom operators that torch.compile keeps in its graph (notebook 06,
exercise 1).

`torch.library.triton_op` declares an operator whose body launches Triton kernels through `wrap_triton`:
Dynamo records one call of the operator instead of tracing into Python it cannot follow, and Inductor sees the
kernels inside, so it compiles a model around them in one graph and fuses the operations before and after.
`register_autograd` gives it a backward, itself a second operator (the two kernels of notebook 02's backward),
so the backward graph holds it too. The forward saves x and the weight; the backward recomputes each row's
rstd from x, one more sum over a row it reads anyway, instead of saving it.
"""

from __future__ import annotations

import torch
import triton
from torch.library import triton_op, wrap_triton

from kernels.rmsnorm import _rmsnorm_kernel
from kernels.rmsnorm_backward import _programs, _rmsnorm_bwd_kernel, _sum_partials_kernel


@triton_op("fusion_course::rmsnorm", mutates_args={})
def rmsnorm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    BLOCK_H = triton.next_power_of_2(H)
    wrap_triton(_rmsnorm_kernel)[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK_H=BLOCK_H,
                                       num_warps=min(16, max(1, BLOCK_H // 1024)))
    return y


@triton_op("fusion_course::rmsnorm_backward", mutates_args={})
def rmsnorm_backward_op(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    M, H = x.shape
    dx = torch.empty((M, H), dtype=x.dtype, device=x.device)
    dw = torch.empty((H,), dtype=weight.dtype, device=x.device)
    programs = _programs(M, x.device)
    partial = torch.empty((programs, H), dtype=torch.float32, device=x.device)
    BLOCK_H = triton.next_power_of_2(H)
    wrap_triton(_rmsnorm_bwd_kernel)[(programs,)](
        x, weight, dy, dx, partial, M, H, x.stride(0), dy.stride(0), dx.stride(0), eps,
        ROWS_PER_PROGRAM=triton.cdiv(M, programs), BLOCK_H=BLOCK_H, num_warps=min(16, max(1, BLOCK_H // 1024)))
    wrap_triton(_sum_partials_kernel)[(triton.cdiv(H, 64),)](partial, dw, programs, H, BLOCK_P=32, BLOCK=64,
                                                            num_warps=4)
    return dx, dw


def _rmsnorm_op_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rmsnorm_op_backward(ctx, dy):
    x, weight = ctx.saved_tensors
    dx, dw = rmsnorm_backward_op(x, weight, dy.contiguous(), ctx.eps)
    return dx, dw, None


RMSNORM_OP_AUTOGRAD = rmsnorm_op.register_autograd(_rmsnorm_op_backward, setup_context=_rmsnorm_op_setup)
