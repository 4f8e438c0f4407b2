"""Streaming-reduction kernels against float64 references: row softmax (one block and the online loop),
FlashAttention forward (causal or not, ragged lengths, the log-sum-exp) and fused linear cross-entropy."""

import math

import pytest
import torch

from autograder import runtime
from kernels import flash_attention as fa
from kernels import linear_cross_entropy as lce
from kernels import softmax as sm

DEVICE = runtime.device()


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


def _within_rounding(got, ref, dtype, factor=3.0, floor=1e-6):
    return _rel(got, ref) <= factor * _rel(ref.to(dtype), ref) + floor


def _assert_attention_matches(o, lse, q, k, v, causal, dtype, *, floor=1e-6, lse_tol=1e-6):
    """o within twice dtype's rounding of the float64 reference (plus floor); every lse within
    lse_tol * (1 + the largest |lse|) of it. Not relative to lse alone: with one key and a small score, lse is
    a float32 dot product near 0 (0.048 once), whose rounding is relative to its terms, not to the sum."""
    ref_o, ref_lse = fa.attention_reference(q, k, v, causal)
    assert _within_rounding(o, ref_o, dtype, factor=2.0, floor=floor)
    assert float((lse.double() - ref_lse).abs().max()) < lse_tol * (1 + float(ref_lse.abs().max()))


def _assert_loss_matches(loss, h, w, t, tol):
    """The largest error of loss against the float64 reference below tol * (1 + its largest |value|)."""
    ref = lce.linear_cross_entropy_reference(h, w, t)
    assert float((loss.double() - ref).abs().max()) < tol * (1 + float(ref.abs().max()))


@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (5, 1000), (2, sm.ONE_BLOCK_MAX), (3, sm.ONE_BLOCK_MAX + 1),
                                 (2, 40000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_softmax_matches_reference_in_one_block_and_online(m, n, dtype):
    x = (5 * torch.randn(m, n)).to(dtype).to(DEVICE)  # a scale of 5: the max matters
    y = sm.softmax(x)
    assert y.dtype == dtype and y.shape == (m, n)
    assert _within_rounding(y, sm.softmax_reference(x), dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")  # the row of -inf: 0/0
def test_softmax_rows_of_minus_infinity_and_strided_input():
    x = torch.full((2, sm.ONE_BLOCK_MAX + 5), -math.inf, device=DEVICE)
    x[0, 3] = 1.0  # one finite entry: probability 1 there, 0 elsewhere, in both code paths
    y = sm.softmax(x)
    assert y[0, 3] == 1.0 and float(y[0].sum()) == 1.0
    assert torch.isnan(y[1]).all()  # as torch.softmax: a row with nothing finite has no distribution
    xt = torch.randn(50, 30, device=DEVICE).t()
    assert _within_rounding(sm.softmax(xt), sm.softmax_reference(xt), torch.float32)


def test_softmax_refuses_bad_input_and_handles_empty():
    with pytest.raises(ValueError, match="floating"):
        sm.softmax(torch.ones(3, 4, dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="(M, N)"):
        sm.softmax(torch.ones(3, device=DEVICE))
    assert sm.softmax(torch.empty(0, 5, device=DEVICE)).shape == (0, 5)
    assert sm.softmax_bytes(torch.empty(10, 20, dtype=torch.bfloat16)) == 800


@pytest.mark.parametrize("b,h,n,d,causal", [(1, 1, 1, 16, False), (1, 2, 7, 32, True), (2, 3, 100, 64, False),
                                            (2, 3, 100, 64, True), (1, 2, 257, 128, True), (1, 1, 65, 64, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_flash_attention_matches_reference(b, h, n, d, causal, dtype):
    q, k, v = (torch.randn(b, h, n, d).to(dtype).to(DEVICE) for _ in range(3))
    o, lse = fa.flash_attention(q, k, v, causal)
    assert o.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (b, h, n)
    _assert_attention_matches(o, lse, q, k, v, causal, dtype, floor=2e-6)


def test_flash_attention_keys_longer_than_queries_and_strided_views():
    q = torch.randn(1, 2, 40, 64, device=DEVICE)
    kv = torch.randn(1, 130, 2, 2, 64, device=DEVICE)  # (B, N_kv, 2, H, D): k and v are strided views
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    o, lse = fa.flash_attention(q, k, v)
    _assert_attention_matches(o, lse, q, k, v, False, torch.float32, floor=2e-6)


@pytest.mark.parametrize("bad,message", [
    (lambda q, k, v: (q[0], k, v, False), "want q"),
    (lambda q, k, v: (q, k, v[..., :32], False), "want q"),
    (lambda q, k, v: (q, k.half(), v.half(), False), "share a floating dtype"),
    (lambda q, k, v: (q[..., :48], k[..., :48], v[..., :48], False), "head_dim 48"),
    (lambda q, k, v: (q[:, :, :5], k, v, True), "causal"),
])
def test_flash_attention_refuses_bad_input(bad, message):
    q, k, v = (torch.randn(1, 2, 8, 64, device=DEVICE) for _ in range(3))
    with pytest.raises(ValueError, match=message):
        fa.flash_attention(*bad(q, k, v))


def test_attention_counts():
    q = torch.empty(2, 4, 128, 64, dtype=torch.bfloat16)
    assert fa.attention_flops(q, q, q) == 4 * 2 * 4 * 128 * 128 * 64
    assert fa.attention_flops(q, q, q, causal=True) == fa.attention_flops(q, q, q) // 2
    assert fa.attention_bytes(q, q, q) == 2 * 4 * q.numel() + 4 * 2 * 4 * 128


@pytest.mark.parametrize("m,k,v", [(1, 8, 5), (7, 64, 1000), (130, 96, 3000), (33, 40, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_linear_cross_entropy_matches_reference(m, k, v, dtype):
    gen = torch.Generator().manual_seed(m * v)
    h = torch.randn(m, k, generator=gen).to(dtype).to(DEVICE)
    w = (3 * torch.randn(v, k, generator=gen) / math.sqrt(k)).to(dtype).to(DEVICE)
    t = torch.randint(0, v, (m,), generator=gen).to(DEVICE)
    loss = lce.linear_cross_entropy(h, w, t)
    assert loss.dtype == torch.float32 and loss.shape == (m,)
    _assert_loss_matches(loss, h, w, t, 1e-4)


def test_linear_cross_entropy_takes_int32_targets_and_strided_hidden_states():
    h = torch.randn(20, 48, device=DEVICE)[::2]
    w = torch.randn(300, 48, device=DEVICE) / 7
    t = torch.randint(0, 300, (10,), device=DEVICE, dtype=torch.int32)
    ref = lce.linear_cross_entropy_reference(h, w, t.long())
    assert float((lce.linear_cross_entropy(h, w, t).double() - ref).abs().max()) < 1e-4


@pytest.mark.parametrize("targets,message", [
    (lambda m, v: torch.full((m,), v), "targets must lie in"),
    (lambda m, v: torch.full((m,), -1), "targets must lie in"),
    (lambda m, v: torch.zeros(m + 1, dtype=torch.long), "integer targets of shape"),
    (lambda m, v: torch.zeros(m), "integer targets of shape"),
])
def test_linear_cross_entropy_refuses_bad_targets(targets, message):
    h, w = torch.randn(6, 16, device=DEVICE), torch.randn(50, 16, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        lce.linear_cross_entropy(h, w, targets(6, 50).to(DEVICE))


def test_linear_cross_entropy_keeps_partials_not_logits():
    h, w = torch.empty(8192, 4096, dtype=torch.bfloat16), torch.empty(128256, 4096, dtype=torch.bfloat16)
    assert lce.logits_bytes(h, w) == 4 * 8192 * 128256  # 3.9 GiB of float32 logits, never allocated
    cfg = lce.ce_launch_settings(8192, 128256, 4096)
    partials = 2 * 4 * 8192 * -(-128256 // cfg["BLOCK_V"])
    assert partials < lce.logits_bytes(h, w) / 100


# The Hopper paths (TMA descriptors) run in the interpreter too, with small tiles: the same tile logic the GPU
# runs, checked here without one. On a GPU the tests below run them at their own settings.
SMALL_ATTENTION_TILES = (dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2),)


@pytest.mark.parametrize("b,h,n,d,causal", [(1, 2, 100, 64, True), (2, 1, 130, 64, False), (1, 1, 96, 128, True),
                                            (2, 2, 70, 64, False)])
def test_tma_attention_path_matches_reference(b, h, n, d, causal):
    q, k, v = (torch.randn(b, h, n, d).half().to(DEVICE) for _ in range(3))
    tiles = fa.ATTENTION_TMA_SETTINGS if runtime.has_gpu() else SMALL_ATTENTION_TILES
    o, lse = fa._launch_attention_tma(q, k, v, causal, tiles)
    assert o.dtype == torch.float16
    _assert_attention_matches(o, lse, q, k, v, causal, torch.float16)


def test_tma_attention_keeps_heads_apart_at_ragged_lengths():
    """A key tile past a head's last key holds the next head's first rows: a NaN there must not leak in."""
    q, k, v = (torch.randn(1, 2, 40, 64).half().to(DEVICE) for _ in range(3))
    k[0, 1, :4] = float("nan")
    v[0, 1, :4] = float("nan")
    tiles = fa.ATTENTION_TMA_SETTINGS if runtime.has_gpu() else SMALL_ATTENTION_TILES
    o, lse = fa._launch_attention_tma(q, k, v, False, tiles)
    assert torch.isfinite(o[0, 0]).all() and torch.isfinite(lse[0, 0]).all()
    ref_o, _ = fa.attention_reference(q[:, :1], k[:, :1], v[:, :1])
    assert _within_rounding(o[:, :1], ref_o, torch.float16, factor=2.0)


def test_tma_attention_falls_back_where_the_engine_does_not_apply():
    q, k, v = (torch.randn(1, 2, 50, 64, device=DEVICE) for _ in range(3))  # float32: the portable kernel
    o, lse = fa.flash_attention_tma(q, k, v, True)
    _assert_attention_matches(o, lse, q, k, v, True, torch.float32, floor=2e-6)
    with pytest.raises(ValueError, match="causal"):
        fa.flash_attention_tma(q[:, :, :5], k, v, True)


@pytest.mark.parametrize("subtiles,flatten", [(1, False), (2, True)])
def test_tma_cross_entropy_path_matches_reference(subtiles, flatten):
    gen = torch.Generator().manual_seed(subtiles)
    h = torch.randn(70, 64, generator=gen).half().to(DEVICE)
    w = (3 * torch.randn(1000, 64, generator=gen) / 8).half().to(DEVICE)
    t = torch.randint(0, 1000, (70,), generator=gen).to(DEVICE)
    cfg = dict(BLOCK_M=32, BLOCK_V=64, BLOCK_K=32, GROUP_M=4, SUBTILES=subtiles, FLATTEN=flatten, num_warps=4,
               num_stages=2)
    _assert_loss_matches(lce._launch_ce_tma(h, w, t, (cfg,)), h, w, t, 1e-4)


def test_tma_cross_entropy_falls_back_and_checks_its_inputs():
    h, w = torch.randn(6, 16, device=DEVICE), torch.randn(50, 16, device=DEVICE)
    t = torch.randint(0, 50, (6,), device=DEVICE)
    ref = lce.linear_cross_entropy_reference(h, w, t)
    assert float((lce.linear_cross_entropy_tma(h, w, t).double() - ref).abs().max()) < 1e-4
    with pytest.raises(ValueError, match="targets must lie in"):
        lce.linear_cross_entropy_tma(h, w, torch.full((6,), 50, device=DEVICE))


def _bf16_gpu_ce_inputs(m, v, k=1024):
    """Hidden states h (m, k), weights w (v, k) scaled by 1/32 and targets, bf16 on the GPU."""
    h = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(v, k, device="cuda") / 32).to(torch.bfloat16)
    t = torch.randint(0, v, (m,), device="cuda")
    return h, w, t


@pytest.mark.gpu
@pytest.mark.parametrize("d,causal", [(64, False), (128, True), (128, False)])
def test_tma_attention_bf16_on_gpu(d, causal):
    q, k, v = (torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = fa._launch_attention_tma(q, k, v, causal, fa.ATTENTION_TMA_SETTINGS)  # below the length it is used at
    _assert_attention_matches(o, lse, q, k, v, causal, torch.bfloat16, lse_tol=1e-5)


@pytest.mark.gpu
def test_tma_cross_entropy_bf16_on_gpu():
    h, w, t = _bf16_gpu_ce_inputs(1000, 32001)
    _assert_loss_matches(lce.linear_cross_entropy_tma(h, w, t), h, w, t, 1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [4096, 40000])
def test_softmax_bf16_on_gpu(n):
    x = (5 * torch.randn(64, n, device="cuda")).to(torch.bfloat16)
    assert _within_rounding(sm.softmax(x), sm.softmax_reference(x), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("d,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_flash_attention_bf16_on_gpu(d, causal):
    q, k, v = (torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = fa.flash_attention(q, k, v, causal)
    _assert_attention_matches(o, lse, q, k, v, causal, torch.bfloat16, lse_tol=1e-5)


@pytest.mark.gpu
def test_linear_cross_entropy_bf16_on_gpu_without_the_logits():
    h, w, t = _bf16_gpu_ce_inputs(1024, 32000)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loss = lce.linear_cross_entropy(h, w, t)
    extra = torch.cuda.max_memory_allocated() - before
    _assert_loss_matches(loss, h, w, t, 1e-3)
    assert extra < lce.logits_bytes(h, w) / 20
