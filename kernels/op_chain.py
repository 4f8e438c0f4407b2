"""A chain of n elementwise ops (n = 1..8) on a contiguous tensor, for measuring the cost model.

Each op is one kernel in eager PyTorch, so the unfused chain reads and writes the tensor n times:
    unfused bytes = n * 2|x|,  fused bytes = 2|x|   (|x| = numel * element size)
The fused Triton kernel applies all n ops in registers between one load and one store.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.measure.timing import bench_ms

MAX_OPS = 8


def _eager_op(i: int, x: torch.Tensor) -> torch.Tensor:
    # One kernel each in eager mode; values stay bounded whatever the chain length.
    if i == 0:
        return x * 1.25
    if i == 1:
        return x + 0.5
    if i == 2:
        return torch.sin(x)
    if i == 3:
        return x * x
    if i == 4:
        return torch.sigmoid(x)
    if i == 5:
        return x - 0.25
    if i == 6:
        return torch.abs(x)
    return torch.cos(x)


@triton.jit
def _op_chain_kernel(x_ptr, y_ptr, n_elements, N_OPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    for i in tl.static_range(N_OPS):  # unrolled at compile time: one specialised kernel per n
        if i == 0:
            v = v * 1.25
        elif i == 1:
            v = v + 0.5
        elif i == 2:
            v = tl.sin(v)
        elif i == 3:
            v = v * v
        elif i == 4:
            v = tl.sigmoid(v)
        elif i == 5:
            v = v - 0.25
        elif i == 6:
            v = tl.abs(v)
        else:
            v = tl.cos(v)
    tl.store(y_ptr + offs, v.to(y_ptr.dtype.element_ty), mask=mask)


def _check(x: torch.Tensor, n_ops: int) -> None:
    if not 1 <= n_ops <= MAX_OPS:
        raise ValueError(f"n_ops must be in 1..{MAX_OPS}, got {n_ops}")
    if not x.is_contiguous():
        raise ValueError("op_chain wants a contiguous tensor")


def op_chain(x: torch.Tensor, n_ops: int, BLOCK: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """All n ops in one Triton kernel: one read of x, one write of y."""
    _check(x, n_ops)
    y = torch.empty_like(x)
    n = x.numel()
    _op_chain_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, N_OPS=n_ops, BLOCK=BLOCK, num_warps=num_warps)
    return y


def op_chain_eager(x: torch.Tensor, n_ops: int) -> torch.Tensor:
    """n kernels, n round trips through memory."""
    _check(x, n_ops)
    for i in range(n_ops):
        x = _eager_op(i, x)
    return x


def op_chain_reference(x: torch.Tensor, n_ops: int) -> torch.Tensor:
    return op_chain_eager(x.double(), n_ops)


def op_chain_bytes(x: torch.Tensor, n_ops: int, fused: bool = True) -> int:
    """Bytes through memory: 2|x| fused, n * 2|x| unfused."""
    one_pass = 2 * x.numel() * x.element_size()
    return one_pass if fused else n_ops * one_pass


def time_versions(x: torch.Tensor, n_ops: int) -> dict[str, float]:
    """Median ms of the chain run unfused (eager), fused by torch.compile, and fused by hand (Triton).

    Used by notebook 01 and by the benchmark, so both measure the same thing the same way.
    """

    compiled = torch.compile(lambda t: op_chain_eager(t, n_ops), dynamic=False)
    compiled(x)  # compile outside the timed region
    return {
        "eager": bench_ms(lambda: op_chain_eager(x, n_ops)),
        "compiled": bench_ms(lambda: compiled(x)),
        "triton": bench_ms(lambda: op_chain(x, n_ops)),
    }
