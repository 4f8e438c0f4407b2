"""kernels/attention_tuning.py: the course's FlashAttention kernels launched with any setting give the course's
results (bit for bit at the course's own setting, within rounding at another), and the sweep's space leaves out
exactly the settings that cannot fit in shared memory."""

import pytest
import torch

from autograder import runtime
from kernels import attention_tuning as tuning
from kernels import flash_attention as fa
from kernels import flash_attention_backward as fb

DEVICE = runtime.device()


def _inputs(b, h, n, d, extra=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen).half().to(DEVICE) for _ in range(3 + extra))


@pytest.mark.parametrize("causal", [False, True])
def test_the_portable_kernel_at_the_course_setting_gives_the_course_result(causal):
    q, k, v = _inputs(1, 2, 70, 64)
    cfg = fa.attention_launch_settings(70, 64, q.dtype)
    o, lse = tuning.flash_attention_with(q, k, v, causal, cfg)
    ref_o, ref_lse = fa.flash_attention(q, k, v, causal)
    assert torch.equal(o, ref_o) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("cfg", [{"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2},
                                 {"BLOCK_M": 64, "BLOCK_N": 16, "num_warps": 8, "num_stages": 3}])
def test_other_settings_match_the_reference(cfg):
    q, k, v = _inputs(2, 1, 90, 32)
    ref_o, ref_lse = fa.attention_reference(q, k, v, True)
    for launch in (tuning.flash_attention_with, tuning.flash_attention_tma_with):
        o, lse = launch(q, k, v, True, cfg)
        assert float((o.double() - ref_o).abs().max()) < 4e-3
        assert float((lse.double() - ref_lse).abs().max()) < 1e-4


def test_the_tma_launcher_refuses_what_the_copy_engine_cannot_read():
    q, k, v = (t.float() for t in _inputs(1, 1, 32, 32))
    with pytest.raises(ValueError, match="contiguous 16-bit"):
        tuning.flash_attention_tma_with(q, k, v, False, {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4,
                                                          "num_stages": 2})


def test_the_backward_at_the_course_setting_gives_the_course_result():
    q, k, v, do = _inputs(1, 2, 80, 64, extra=1)
    o, lse = fa.flash_attention(q, k, v, True)
    kv_cfg, q_cfg = fb.attention_backward_settings(64, q.dtype)
    got = tuning.flash_attention_backward_with(q, k, v, o, lse, do, True, kv_cfg, q_cfg)
    want = fb.flash_attention_backward(q, k, v, o, lse, do, True)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_the_backward_at_another_setting_matches_the_reference():
    q, k, v, do = _inputs(1, 1, 70, 32, extra=1, seed=1)
    o, lse = fa.flash_attention(q, k, v, False)
    small = {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    got = tuning.flash_attention_backward_with(q, k, v, o, lse, do, False, small, dict(small, BLOCK_M=32))
    want = fb.attention_backward_reference(q, k, v, o, lse, do, False)
    for g, w in zip(got, want):
        assert float((g.double() - w).norm() / w.norm()) < 5e-3


def test_the_space_leaves_out_what_does_not_fit_and_starts_from_the_course():
    first = fa.attention_launch_settings(4096, 128, torch.bfloat16)
    kept, left_out = tuning.forward_space(128, first)
    assert kept[0] == first
    assert len(kept) + len(left_out) == 32  # 2 x 2 x 4 x 2
    # 128 x 128 tiles with 3 stages: 224 KB, the setting the course's TMA kernel uses; with 4, 288 KB
    assert {"BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 3, "num_warps": 8} in kept
    assert "shared memory" in left_out["128x128 s4 w8"]
    assert all(tuning.forward_shared_bytes(c, 128) <= tuning.SHARED_BYTES for c in kept)
    assert tuning.forward_space(64, first)[1] == {}  # at D = 64 everything fits
    changed = [sum(c[a] != first[a] for a in tuning.FORWARD_AXES) for c in kept]
    assert changed == sorted(changed)  # nearest settings first


def test_a_setting_reads_as_one_short_name():
    cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "WARP_SPECIALIZE": True, "num_warps": 4, "num_stages": 3}
    assert tuning.setting_name(cfg) == "128x64 s3 w4 warp_specialize=True"
