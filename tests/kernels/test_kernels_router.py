"""The mixture-of-experts router and FlashAttention-2's loop in plain torch against their references: the
router's top k, its renormalised weights and its rule for ties; the tiled attention against SDPA and float64,
causal or not, ragged blocks, keys longer than queries, every block size."""

import pytest
import torch
import torch.nn.functional as F

from autograder import runtime
from kernels import flash_attention_torch as fat
from kernels import moe_router as mr

DEVICE = runtime.device()


@pytest.mark.parametrize("t,e,k", [(1, 8, 1), (5, 8, 8), (37, 64, 2), (70, 256, 8), (9, 160, 2), (3, 33, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_router_matches_topk_of_softmax_renormalised(t, e, k, dtype):
    logits = (3 * torch.randn(t, e)).to(dtype).to(DEVICE)
    weights, indices = mr.moe_router(logits, k)
    assert weights.dtype == torch.float32 and indices.dtype == torch.int64 and weights.shape == (t, k)
    ref_w, ref_i = mr.router_reference(logits, k)  # float16 rounding makes ties: the stable rule decides them
    assert torch.equal(indices.cpu(), ref_i.cpu())
    assert torch.allclose(weights.double(), ref_w, atol=1e-6, rtol=1e-5)
    eager_w, _ = mr.router_eager(logits, k)  # what PyTorch gives: the same weights, whatever its order of ties
    assert torch.allclose(weights, eager_w, atol=1e-6, rtol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(t, device=DEVICE), atol=1e-6)


def test_router_breaks_ties_lowest_index_first_and_reads_strided_logits():
    row = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 3.0, -1.0]], device=DEVICE)
    weights, indices = mr.moe_router(row, 3)
    assert indices.tolist() == [[1, 2, 4]]
    assert torch.allclose(weights, torch.full((1, 3), 1 / 3, device=DEVICE))
    wide = torch.randn(40, 100, device=DEVICE)
    view = wide[:, 10:74]  # rows inside a wider buffer
    w, i = mr.moe_router(view, 2)
    ref_w, ref_i = mr.router_reference(view, 2)
    assert torch.equal(i.cpu(), ref_i.cpu()) and torch.allclose(w.double(), ref_w, atol=1e-6)


@pytest.mark.parametrize("bad,message", [(lambda: mr.moe_router(torch.randn(4, 8, device=DEVICE), 9), "k must"),
                                         (lambda: mr.moe_router(torch.randn(8, device=DEVICE), 1), "logits must")])
def test_router_refuses_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


@pytest.mark.parametrize("n,n_kv", [(1, 1), (7, 7), (100, 100), (130, 200), (65, 33)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(64, 64), (16, 32), (128, 16)])
def test_tiled_attention_matches_sdpa_and_float64(n, n_kv, causal, blocks):
    q, k, v = torch.randn(2, 3, n, 32), torch.randn(2, 3, n_kv, 32), torch.randn(2, 3, n_kv, 32)
    o, lse = fat.flash_attention_torch(q, k, v, causal, *blocks)
    ref_o, ref_lse = fat.attention_reference(q, k, v, causal)
    assert o.dtype == q.dtype and lse.dtype == torch.float32
    assert float((o.double() - ref_o).abs().max()) < 1e-5
    assert float((lse.double() - ref_lse).abs().max()) < 1e-5
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert float((o - sdpa).abs().max()) < 1e-5


def test_tiled_attention_keeps_half_precision_outputs_and_refuses_bad_shapes():
    q = torch.randn(1, 2, 40, 16).half()
    o, lse = fat.flash_attention_torch(q, q, q, True)
    assert o.dtype == torch.float16 and lse.dtype == torch.float32
    with pytest.raises(ValueError, match="expected"):
        fat.flash_attention_torch(q, q[..., :8], q, False)
    with pytest.raises(ValueError, match="positive"):
        fat.flash_attention_torch(q, q, q, False, block_m=0)
