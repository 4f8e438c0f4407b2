"""The one-pass FlashAttention backward (kernels/flash_attention_backward_atomic.py, dQ by atomic adds) against
float64 and the course's backward: in Triton's interpreter with one atomic add a float, and on a Hopper GPU with
the copy engine's bulk reductions too."""

import pytest
import torch

from autograder import runtime
from kernels import flash_attention as fa
from kernels import flash_attention_backward as fb
from kernels import flash_attention_backward_atomic as fba

DEVICE = runtime.device()
SMALL = ({"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2},)


def _case(b, h, n, d, causal, dtype=torch.float16, device=DEVICE, seed=0):
    gen = torch.Generator().manual_seed(seed + n)
    q, k, v, do = (torch.randn(b, h, n, d, generator=gen).to(dtype).to(device) for _ in range(4))
    o, lse = fa.flash_attention(q, k, v, causal)
    return q, k, v, o, lse, do, causal


def _assert_close(got, want, tol):
    for g, w in zip(got, want):
        assert float((g.double() - w.double()).norm() / w.double().norm()) < tol


@pytest.mark.parametrize("b,h,n,d,causal", [(1, 2, 100, 64, True), (2, 1, 130, 32, False), (1, 1, 96, 128, True),
                                            (1, 2, 64, 64, False)])
def test_one_pass_backward_matches_float64(b, h, n, d, causal):
    args = _case(b, h, n, d, causal)
    got = fba.flash_attention_backward_atomic(*args, settings=SMALL)
    assert [g.dtype for g in got] == [torch.float16] * 3
    _assert_close(got, fb.attention_backward_reference(*args), 2e-3)
    _assert_close(got, fb.flash_attention_backward(*args), 2e-3)


def test_one_pass_backward_refuses_what_it_cannot_take():
    q, k, v, o, lse, do, _ = _case(1, 2, 40, 32, False)
    with pytest.raises(ValueError, match="contiguous"):
        fba.flash_attention_backward_atomic(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, o, lse, do)
    with pytest.raises(ValueError, match="atomic must be"):
        fba.flash_attention_backward_atomic(q, k, v, o, lse, do, atomic="shared")
    with pytest.raises(ValueError, match="causal"):
        fba.flash_attention_backward_atomic(q[:, :, :5], k, v, o[:, :, :5], lse[:, :, :5], do[:, :, :5], True)


@pytest.mark.gpu
@pytest.mark.parametrize("atomic", ["tma", "pointer"])
@pytest.mark.parametrize("causal", [False, True])
def test_one_pass_backward_bf16_on_gpu(atomic, causal):
    args = _case(2, 4, 1000, 128, causal, dtype=torch.bfloat16, device="cuda")  # ragged: 1000 rows
    if atomic == "tma" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the copy engine's reductions need a Hopper GPU")
    got = fba.flash_attention_backward_atomic(*args, atomic=atomic)
    _assert_close(got, fb.attention_backward_reference(*args), 2e-2)
