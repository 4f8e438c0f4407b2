"""The reference kernels against their torch references (interpreter on the CPU, compiled on a GPU)."""

import pytest
import torch

from autograder import runtime
from kernels import fused_chain as fc
from kernels import op_chain as oc

DEVICE = runtime.device()


@pytest.mark.parametrize("n_ops", range(1, oc.MAX_OPS + 1))
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
def test_op_chain_matches_reference(n_ops, dtype, tol):
    x = torch.randn(10_007, device=DEVICE).to(dtype)  # not a multiple of the block
    got = oc.op_chain(x, n_ops)
    ref = oc.op_chain_reference(x, n_ops)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), ref.to(dtype).double(), atol=tol, rtol=tol)


def test_op_chain_eager_is_n_kernels_worth_of_ops():
    x = torch.randn(100)
    assert torch.equal(oc.op_chain_eager(x, 2), (x * 1.25) + 0.5)


@pytest.mark.parametrize("bad", [0, oc.MAX_OPS + 1])
def test_op_chain_rejects_bad_length(bad):
    with pytest.raises(ValueError, match="n_ops"):
        oc.op_chain(torch.randn(8, device=DEVICE), bad)


def test_op_chain_bytes():
    x = torch.empty(1000, dtype=torch.float16)
    assert oc.op_chain_bytes(x, 4) == 4000
    assert oc.op_chain_bytes(x, 4, fused=False) == 16000


@pytest.mark.parametrize("shape", [(1, 1), (3, 1025), (70, 33)])
def test_fused_chain_matches_reference(shape):
    x = torch.randn(*shape, device=DEVICE)
    bias = torch.randn(shape[1], device=DEVICE)
    torch.testing.assert_close(fc.fused_chain(x, bias, 0.7).double(), fc.fused_chain_reference(x, bias, 0.7), atol=1e-5, rtol=1e-5)
    xt = torch.randn(shape[1], shape[0], device=DEVICE).t()
    torch.testing.assert_close(fc.fused_chain(xt, bias, 0.7).double(), fc.fused_chain_reference(xt, bias, 0.7), atol=1e-5, rtol=1e-5)


def test_fused_chain_rejects_mismatched_bias():
    with pytest.raises(ValueError, match="bias"):
        fc.fused_chain(torch.randn(4, 8, device=DEVICE), torch.randn(7, device=DEVICE), 1.0)


def test_fused_chain_bytes_counts_one_read_and_one_write():
    x, b = torch.empty(10, 20, dtype=torch.bfloat16), torch.empty(20, dtype=torch.bfloat16)
    assert fc.fused_chain_bytes(x, b) == 2 * 200 * 2 + 40
