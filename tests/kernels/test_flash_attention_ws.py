"""The warp-specialized FlashAttention forward (kernels/flash_attention_ws.py) against float64: in Triton's
interpreter at small tiles (the flag changes the schedule, not the arithmetic), in float16 (the interpreter's
bfloat16 tl.dot is wrong here, for the course's kernels too), and at its own settings in bfloat16 on a GPU."""

import pytest
import torch

from autograder import runtime
from kernels import flash_attention as fa
from kernels import flash_attention_ws as ws

DEVICE = runtime.device()
SMALL = ({"BLOCK_M": 32, "BLOCK_N": 32, "WARP_SPECIALIZE": True, "num_warps": 4, "num_stages": 2},)


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


def _assert_matches(o, lse, q, k, v, causal, dtype):
    """o within twice dtype's rounding of the float64 reference; lse within 1e-5 of (1 + its largest value)."""
    ref_o, ref_lse = fa.attention_reference(q, k, v, causal)
    assert _rel(o, ref_o) <= 2 * _rel(ref_o.to(dtype), ref_o) + 1e-6
    assert float((lse.double() - ref_lse).abs().max()) < 1e-5 * (1 + float(ref_lse.abs().max()))


@pytest.mark.parametrize("b,h,n,n_kv,d,causal", [
    (1, 2, 100, 100, 64, True),   # ragged: the last query and key tiles are partial
    (2, 1, 130, 70, 64, False),   # fewer keys than queries, not a multiple of the tile
    (1, 1, 96, 96, 128, True),
    (2, 2, 64, 64, 32, False),    # keys a multiple of the tile: the loop without a mask
])
def test_warp_specialized_kernel_matches_reference(b, h, n, n_kv, d, causal):
    dtype = torch.float16
    gen = torch.Generator().manual_seed(n + d)
    q = torch.randn(b, h, n, d, generator=gen).to(dtype).to(DEVICE)
    k, v = (torch.randn(b, h, n_kv, d, generator=gen).to(dtype).to(DEVICE) for _ in range(2))
    o, lse = ws._launch_attention_ws(q, k, v, causal, SMALL)
    assert o.dtype == dtype and lse.shape == (b, h, n)
    _assert_matches(o, lse, q, k, v, causal, dtype)


def test_each_head_reads_only_its_own_keys():
    """A key tile past a head's last key is zeros (the descriptor is the head's own), not the next head's rows:
    NaNs there do not leak into the head before."""
    q, k, v = (torch.randn(1, 2, 40, 64).half().to(DEVICE) for _ in range(3))
    k[0, 1, :4] = float("nan")
    v[0, 1, :4] = float("nan")
    o, lse = ws._launch_attention_ws(q, k, v, False, SMALL)
    assert torch.isfinite(o[0, 0]).all() and torch.isfinite(lse[0, 0]).all()
    _assert_matches(o[:, :1], lse[:, :1], q[:, :1], k[:, :1], v[:, :1], False, torch.float16)


def test_falls_back_where_the_kernel_does_not_apply():
    q, k, v = (torch.randn(1, 2, 50, 64, device=DEVICE) for _ in range(3))  # float32: the portable kernel
    o, _ = ws.flash_attention_ws(q, k, v, True)
    ref_o, _ = fa.attention_reference(q, k, v, True)
    assert _rel(o, ref_o) < 1e-5
    with pytest.raises(ValueError, match="contiguous 16-bit tensors on a Hopper GPU"):
        ws.flash_attention_ws(q, k, v, True, warmup=True)
    with pytest.raises(ValueError, match="causal"):
        ws.flash_attention_ws(q[:, :, :5], k, v, True)


def test_heads_larger_than_the_tiles_allow_go_to_the_portable_kernel(monkeypatch):
    """WS_SETTINGS fit in shared memory up to MAX_HEAD_DIM; a larger head is the portable kernel's, not a failed
    compile."""
    monkeypatch.setattr(ws, "hopper_or_newer", lambda device: True)
    small, large = (torch.randn(1, 2, 64, d, dtype=torch.float16) for d in (ws.MAX_HEAD_DIM, 2 * ws.MAX_HEAD_DIM))
    assert ws.ws_applies(small, small, small) and not ws.ws_applies(large, large, large)
    assert not ws.ws_applies(small.float(), small.float(), small.float())


def test_the_settings_keep_the_key_loop_specializable():
    """num_warps=4 is what the Hopper pass specializes (12 warps once split); the twins with the flag off exist to
    time the same loop without it."""
    assert all(s["num_warps"] == 4 and s["WARP_SPECIALIZE"] for s in ws.WS_SETTINGS)
    assert all(s in ws.WS_SPACE for s in ws.WS_SETTINGS)
    assert any(not s["WARP_SPECIALIZE"] for s in ws.WS_SPACE)


@pytest.mark.gpu
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False), (64, True)])
def test_warp_specialized_kernel_bf16_on_hopper(d, causal):
    q, k, v = (torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if not ws.ws_applies(q, k, v):
        pytest.skip("needs a Hopper GPU with the copy engine")
    for cfg in ws.WS_SETTINGS:
        o, lse = ws.flash_attention_ws(q, k, v, causal, (cfg,))
        _assert_matches(o, lse, q, k, v, causal, torch.bfloat16)
