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


# --- notebook 03 ------------------------------------------------------------------------------------------
from kernels import multi_tensor_adamw as mta  # noqa: E402
from kernels import qkv_projection as qkv  # noqa: E402
from kernels import row_sum_sumsq as rss  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 1), (3, 1025), (70, 33), (2, 5000)])
@pytest.mark.parametrize("transposed", [False, True])
def test_row_sum_sumsq_matches_reference(shape, transposed):
    x = torch.randn(*shape, device=DEVICE) + 0.5
    if transposed:
        x = torch.randn(shape[1], shape[0], device=DEVICE).t() + 0.5
    s, ss = rss.row_sum_sumsq(x)
    rs, rss_ = rss.row_sum_sumsq_reference(x)
    assert s.dtype == ss.dtype == torch.float32
    torch.testing.assert_close(s.double(), rs, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ss.double(), rss_, atol=1e-4, rtol=1e-5)


def test_row_sum_sumsq_handles_no_rows_and_refuses_1d():
    s, ss = rss.row_sum_sumsq(torch.empty(0, 7, device=DEVICE))
    assert s.shape == ss.shape == (0,)
    with pytest.raises(ValueError, match="2-D"):
        rss.row_sum_sumsq(torch.randn(5, device=DEVICE))


@pytest.mark.parametrize("m,n_q,kv,k", [(1, 64, 32, 64), (37, 96, 48, 257), (300, 64, 16, 100)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float16, 2e-3)])
def test_qkv_projection_matches_reference_and_returns_views(m, n_q, kv, k, dtype, tol):
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    w = (torch.randn(n_q + 2 * kv, k, device=DEVICE) / k**0.5).to(dtype)
    got = qkv.qkv_projection(x, w, kv)
    for g, r, width in zip(got, qkv.qkv_projection_reference(x, w, kv), (n_q, kv, kv)):
        assert g.shape == (m, width) and g.dtype == dtype
        torch.testing.assert_close(g.double(), r.to(dtype).double(), atol=tol, rtol=tol)
    assert len({g.untyped_storage().data_ptr() for g in got}) == 1


def test_qkv_projection_refuses_bad_widths():
    with pytest.raises(ValueError, match="kv_width"):
        qkv.qkv_projection(torch.randn(2, 8, device=DEVICE), torch.randn(10, 8, device=DEVICE), 5)
    with pytest.raises(ValueError, match="want x"):
        qkv.qkv_projection(torch.randn(2, 8, device=DEVICE), torch.randn(10, 9, device=DEVICE), 2)


def test_qkv_bytes_count_x_once_fused_and_three_times_not():
    x, w = torch.empty(16, 64, dtype=torch.bfloat16), torch.empty(96, 64, dtype=torch.bfloat16)
    assert qkv.qkv_projection_bytes(x, w) == 2 * (16 * 64 + 96 * 64 + 16 * 96)
    assert qkv.qkv_projection_bytes(x, w, fused=False) - qkv.qkv_projection_bytes(x, w) == 2 * 2 * 16 * 64
    assert qkv.qkv_projection_flops(x, w) == 2 * 16 * 64 * 96


def _adam_lists(sizes, seed=0):
    return mta.random_adamw_state(sizes, DEVICE, torch.Generator().manual_seed(seed))


ADAM_SIZES = (1, 7, 1024, 1025, 0, 5000)
ADAM_HYPER = dict(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1)


@pytest.mark.parametrize("impl", ["multi-tensor", "per-tensor", "eager", "torch"])
def test_adamw_implementations_agree_with_the_float64_reference_over_steps(impl):
    lists = _adam_lists(ADAM_SIZES)
    expected = [[t.double() for t in lst] for lst in lists]
    for step in (1, 2, 3):
        grads = _adam_lists(ADAM_SIZES, seed=step)[1]
        lists[1] = grads
        new = mta.adamw_step_reference(expected[0], grads, expected[2], expected[3], step, **ADAM_HYPER)
        expected = [new[0], grads, new[1], new[2]]
        if impl == "multi-tensor":
            mta.adamw_step(*lists, step, **ADAM_HYPER)
        elif impl == "per-tensor":
            mta.adamw_step_per_tensor(*lists, step, **ADAM_HYPER)
        elif impl == "eager":
            mta.adamw_step_eager(*lists, step, **ADAM_HYPER)
        else:
            mta.torch_adamw(*lists, step, **ADAM_HYPER, foreach=False)()
    for got, ref in zip((lists[0], lists[2], lists[3]), (expected[0], expected[2], expected[3])):
        for g, r in zip(got, ref):
            scale = float(r.abs().max()) if r.numel() else 0.0
            torch.testing.assert_close(g.double(), r, atol=1e-6 * scale, rtol=1e-5)


def test_adamw_tables_are_reused_for_the_same_tensors_and_rebuilt_for_others():
    lists = _adam_lists((3000, 10))
    first = mta._tables(lists, 1)
    assert mta._tables(lists, 2) is first
    other = _adam_lists((3000, 10))
    assert mta._tables(other, 1) is not first
    assert first.n_tensors == 2 and first.n_blocks == 3 + 1


@pytest.mark.parametrize("bad, message", [
    (lambda L: (L[0], L[1][:1], L[2], L[3]), "grads has 1 tensors, params has 2"),
    (lambda L: (L[0], [L[1][0], L[1][1].double()], L[2], L[3]), r"grads\[1\] must be a tensor like params\[1\]"),
    (lambda L: (L[0], L[1], [L[2][0], torch.randn(20, device=DEVICE)[::2]], L[3]), "contiguous"),
    (lambda L: (L[0], L[1], "exp_avgs", L[3]), "exp_avgs must be a list"),
])
def test_adamw_refuses_bad_lists_clearly(bad, message):
    lists = _adam_lists((30, 10))
    with pytest.raises((TypeError, ValueError), match=message):
        mta.adamw_step(*bad(lists), 1, **ADAM_HYPER)


def test_adamw_refuses_step_zero():
    with pytest.raises(ValueError, match="step counts from 1"):
        mta.adamw_step(*_adam_lists((4,)), 0, **ADAM_HYPER)


def test_adamw_bytes_and_model_like_sizes():
    assert mta.adamw_bytes([torch.empty(10), torch.empty(5)]) == 7 * 4 * 15
    sizes = mta.model_like_sizes(torch.Generator().manual_seed(0), total=10**6, n=30)
    assert len(sizes) == 30 and 0.9e6 < sum(sizes[:20]) <= 1e6 + 20 and all(s % 1024 for s in sizes)
