"""Fused dropout + add + RMSNorm (kernels/dropout_add_rmsnorm.py) against its torch side: Philox as tl.rand draws it,
the float64 reference given that mask, and the byte count."""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs

import torch
import triton
import triton.language as tl

from autograder.specs.fused_dropout import keep_mask, philox_uniform
from kernels.dropout_add_rmsnorm import (
    DropoutAddRMSNormFunction,
    dropout_add_rmsnorm,
    dropout_add_rmsnorm_bytes,
    dropout_add_rmsnorm_reference,
)


@triton.jit
def _rand_kernel(out_ptr, seed, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.rand(seed, offs), mask=offs < N)


@pytest.mark.parametrize("seed", [0, 1, 4321, 2**31 - 2])
def test_torch_philox_is_bit_for_bit_tl_rand(seed):
    n = 3000
    out = torch.empty(n, device=autograder.runtime.device())
    _rand_kernel[(triton.cdiv(n, 1024),)](out, seed, n, BLOCK=1024)
    assert torch.equal(out.cpu(), philox_uniform(seed, torch.arange(n)))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
def test_kernel_matches_the_reference_on_strided_rows(dtype, tol):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, 800, generator=gen)[:, :777].to(dtype)  # rows 800 apart, 777 wide
    y = torch.randn(9, 777, generator=gen).to(dtype)
    w = (1 + 0.2 * torch.randn(777, generator=gen)).to(dtype)
    out, h = dropout_add_rmsnorm(x, y, w, 0.25, 77, 1e-5)
    ref_out, ref_h = dropout_add_rmsnorm_reference(x, y, w, 0.25, 77, 1e-5)
    assert torch.allclose(h.double(), ref_h, atol=tol, rtol=tol)
    assert torch.allclose(out.double(), ref_out, atol=tol, rtol=tol)
    dropped = ~keep_mask((9, 777), 0.25, 77)
    assert torch.equal(h[dropped], x[dropped])  # a dropped element leaves the residual as it was


def test_the_mask_keeps_about_one_minus_p_and_rows_differ():
    kept = keep_mask((64, 1024), 0.3, 5)
    assert abs(kept.double().mean().item() - 0.7) < 0.01
    assert not torch.equal(kept[0], kept[1])


def test_bytes_are_two_reads_and_two_writes_and_bad_arguments_are_named():
    x = torch.empty(4, 8, dtype=torch.float16)
    assert dropout_add_rmsnorm_bytes(x, x, x[0]) == 4 * 64 + 16
    with pytest.raises(ValueError, match="drop probability"):
        dropout_add_rmsnorm(x, x, x[0], 1.0, 0, 1e-5)
    with pytest.raises(ValueError, match="seed"):
        dropout_add_rmsnorm(x, x, x[0], 0.5, -1, 1e-5)


def test_the_backward_draws_the_mask_again_and_matches_float64_autograd():
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randn(6, 300, generator=gen).requires_grad_() for _ in range(2))
    w = (1 + 0.1 * torch.randn(300, generator=gen)).requires_grad_()
    d_out, d_h = torch.randn(2, 6, 300, generator=gen).unbind(0)
    torch.autograd.backward(DropoutAddRMSNormFunction.apply(x, y, w, 0.3, 11, 1e-5), (d_out, d_h))
    leaves = [t.detach().double().requires_grad_() for t in (x, y, w)]
    torch.autograd.backward(dropout_add_rmsnorm_reference(*leaves, 0.3, 11, 1e-5), (d_out.double(), d_h.double()))
    for mine, ref in zip((x, y, w), leaves):
        assert ((mine.grad.double() - ref.grad).norm() / ref.grad.norm()).item() < 1e-5
    dropped = ~keep_mask((6, 300), 0.3, 11)
    assert (y.grad[dropped] == 0).all()  # a dropped element of y gets no gradient


def test_the_reference_done_a_piece_of_rows_at_a_time_gives_the_same_numbers(monkeypatch):
    """At the benchmark size the float64 reference and its int64 Philox go a piece of rows at a time (a 16 GB card
    ran out of memory on the whole): the same mask, outputs and gradients as in one piece."""
    from autograder.specs import fused_dropout

    gen = torch.Generator().manual_seed(3)
    x, y = (torch.randn(50, 333, generator=gen).to(torch.bfloat16) for _ in range(2))
    w = torch.randn(333, generator=gen).to(torch.bfloat16)
    whole = fused_dropout.dropout_add_rmsnorm_reference(x, y, w, 0.35, 2024, 1e-5)
    mask = keep_mask((50, 333), 0.35, 2024)
    leaves = [t.double().requires_grad_() for t in (x, y, w)]
    fused_dropout.dropout_add_rmsnorm_reference(*leaves, 0.35, 2024, 1e-5)[0].sum().backward()
    grads = [t.grad for t in leaves]
    monkeypatch.setattr(fused_dropout, "PIECE_ELEMENTS", 7 * 333 + 5)  # 7 rows a piece, the last one short
    assert len(fused_dropout._row_pieces(50, 333)) == 8
    pieces = fused_dropout.dropout_add_rmsnorm_reference(x, y, w, 0.35, 2024, 1e-5)
    assert all(torch.equal(a, b) for a, b in zip(whole, pieces))
    assert torch.equal(keep_mask((50, 333), 0.35, 2024), mask)
    leaves = [t.double().requires_grad_() for t in (x, y, w)]
    fused_dropout.dropout_add_rmsnorm_reference(*leaves, 0.35, 2024, 1e-5)[0].sum().backward()
    assert torch.equal(leaves[0].grad, grads[0]) and torch.equal(leaves[1].grad, grads[1])
    # the weight's gradient sums over rows: a piece at a time adds them in another order (float64's last bits)
    assert torch.allclose(leaves[2].grad, grads[2], rtol=1e-12, atol=0)
