"""kernels/linear_cross_entropy_tma.py: the loss and both gradients against float64, through the TMA GEMMs in
Triton's interpreter at small tiles (ragged chunks, and a vocabulary whose last half tile holds no word), the
fallback where the copy engine does not apply, and at its own settings on a Hopper GPU."""

import pytest
import torch

from autograder import runtime
from autograder.specs.fusion_for_training import linear_cross_entropy_backward_eager
from autograder.specs.fusion_for_training import linear_cross_entropy_backward_reference
from kernels import linear_cross_entropy_backward as lcb
from kernels import linear_cross_entropy_tma as lct

DEVICE = runtime.device()
SMALL = ({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "FLATTEN": False, "num_warps": 4,
          "num_stages": 2},)


def _inputs(m, k, v, seed=0, dtype=torch.float16, device=DEVICE):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(m, k, generator=gen).to(dtype).to(device)
    w = (torch.randn(v, k, generator=gen) / 4).to(dtype).to(device)
    return h, w, torch.randint(0, v, (m,), generator=gen).to(device)


def _errors(got, want) -> list[float]:
    """The relative errors of dh and dw."""
    return [float((g.double() - r).norm() / r.norm()) for g, r in zip(got[1:], want[1:])]


def _assert_matches(got, h, w, t, tol, as_eager=False):
    """Loss and gradients within tol of float64; as_eager: and the gradients no further from it than eager
    PyTorch's in the same dtype (its logits rounded to that dtype, as the TMA path stores them) by more than a
    quarter."""
    loss, dh, dw = got
    want = linear_cross_entropy_backward_reference(h, w, t)
    assert abs(float(loss) - float(want[0])) < tol * (1 + abs(float(want[0])))
    assert dh.dtype == dw.dtype == h.dtype
    errors = _errors(got, want)
    assert max(errors) < tol, errors
    if as_eager:
        eager = _errors(linear_cross_entropy_backward_eager(h, w, t), want)
        assert all(e <= 1.25 * b + 1e-4 for e, b in zip(errors, eager)), f"dh, dw: {errors} against eager's {eager}"


@pytest.mark.parametrize("m,k,v,rows", [
    (200, 64, 1000, 64),  # four chunks, the last of 8 rows
    (70, 32, 200, 32),    # V = 200: the right half of the last 64-word tile holds no word
    (64, 64, 96, 64),     # one chunk
])
def test_tma_path_matches_float64(m, k, v, rows):
    h, w, t = _inputs(m, k, v, seed=m + v)
    _assert_matches(lct._launch_ce_tma(h, w, t, rows, SMALL), h, w, t, 2e-3)


def test_the_softmax_is_taken_of_the_logits_as_stored():
    """Sharp logits (tens) in fp16 lose a few thousandths each when the chunk is stored; statistics taken from
    the float32 accumulator instead of the stored values then disagree with them, and the gradients came out 5-10
    times further from float64 than eager's (bf16 on an H200: 0.037 against eager's 0.013)."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(64, 64, generator=gen).half().to(DEVICE)
    w = (torch.randn(640, 64, generator=gen) * 3).half().to(DEVICE)
    t = torch.randint(0, 640, (64,), generator=gen).to(DEVICE)
    _assert_matches(lct._launch_ce_tma(h, w, t, 64, SMALL), h, w, t, 2e-2, as_eager=True)


def test_a_setting_that_fails_part_way_leaves_the_loss_unchanged(monkeypatch):
    """The first chunk is where a setting is found to compile: a failure there must not count its loss twice."""
    h, w, t = _inputs(64, 32, 128, seed=3)
    calls = []
    real = lct._gemm

    def flaky(*args, **kwargs):
        calls.append(args[3]["BLOCK_N"])
        if args[3]["BLOCK_N"] == 128 and len(calls) == 2:  # the dh product of the first setting
            raise RuntimeError("out of resources: shared memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(lct, "_gemm", flaky)
    settings = (dict(SMALL[0], BLOCK_N=128), SMALL[0])
    _assert_matches(lct._launch_ce_tma(h, w, t, 64, settings), h, w, t, 2e-3)
    assert 64 in calls


def test_falls_back_where_the_copy_engine_does_not_apply():
    h, w, t = _inputs(40, 32, 100, seed=1, dtype=torch.float32)
    got = lct.linear_cross_entropy_forward_backward_tma(h, w, t)
    want = lcb.linear_cross_entropy_forward_backward(h, w, t)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ValueError, match="Hopper"):
        lct.linear_cross_entropy_forward_backward_tma(h, w, t, warmup=True)
    with pytest.raises(ValueError, match="want h"):
        lct.linear_cross_entropy_forward_backward_tma(h, w.t(), t)


def test_chunks_are_multiples_of_128_rows_within_256_mib():
    assert lct.chunk_rows_tma(8192, 128256) == 1024  # 2^28 bytes / (2 x 128256) = 1046 rows, down to 1024
    assert lct.chunk_rows_tma(2048, 32000) == 512  # a quarter of the rows
    assert lct.chunk_rows_tma(100, 32000) == 128


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [None, 512])
def test_tma_path_bf16_on_hopper(rows):
    h, w, t = _inputs(1000, 1024, 32008, dtype=torch.bfloat16, device="cuda")  # the last tile: 8 words
    if not lct.tma_ce_applies(h, w):
        pytest.skip("needs a Hopper GPU with the copy engine")
    _assert_matches(lct.linear_cross_entropy_forward_backward_tma(h, w, t, rows), h, w, t, 2e-2, as_eager=True)


@pytest.mark.gpu
def test_tma_path_bf16_on_hopper_at_an_even_vocabulary():
    h, w, t = _inputs(1024, 1024, 32000, dtype=torch.bfloat16, device="cuda")
    if not lct.tma_ce_applies(h, w):
        pytest.skip("needs a Hopper GPU with the copy engine")
    _assert_matches(lct.linear_cross_entropy_forward_backward_tma(h, w, t), h, w, t, 2e-2, as_eager=True)
