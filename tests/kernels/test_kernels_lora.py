"""Notebook 04's fused LoRA kernel against float64: ragged shapes, every rank the course allows, nn.Linear's
layout and transposed views, its byte and flop counts, and clear errors for bad inputs."""

import pytest
import torch

from autograder import runtime
from autograder.specs import lora as spec
from kernels import lora

DEVICE = runtime.device()


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


def _args(m, n, r, k, dtype, transposed=False, scale=1.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) / k**0.5
    a = torch.randn(r, k, generator=g) / k**0.5
    b = 0.5 * torch.randn(n, r, generator=g) / r**0.5
    x, w, a, b = (t.to(dtype).to(DEVICE) for t in (x, w, a, b))
    if transposed:  # W and A as .t() views of column-major storage: strides (1, N) and (1, r)
        w, a = w.t().contiguous().t(), a.t().contiguous().t()
    return x, w, a, b, scale


@pytest.mark.parametrize("m,n,r,k", [(1, 1, 1, 1), (2, 5, 8, 9), (37, 70, 8, 100), (130, 96, 16, 257),
                                     (64, 128, 64, 64), (33, 40, 24, 80)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_lora_linear_matches_reference(m, n, r, k, dtype):
    args = _args(m, n, r, k, dtype)
    ref = spec.lora_reference(*args)
    y = lora.lora_linear(*args)
    assert y.dtype == dtype and y.shape == (m, n) and y.is_contiguous()
    # within a few roundings of the output dtype (the kernel rounds s x A^T and y once each)
    assert _rel(y, ref) <= 3 * _rel(ref.to(dtype), ref) + 2e-5


def test_lora_linear_reads_transposed_weights_and_padded_rows():
    x, w, a, b, s = _args(40, 48, 16, 56, torch.float32, transposed=True)
    padded = torch.zeros(40, 72, device=DEVICE)[:, :56]
    padded.copy_(x)
    y = lora.lora_linear(padded, w, a, b, s)
    assert _rel(y, spec.lora_reference(x, w, a, b, s)) < 2e-6


def test_the_adapter_and_the_scale_both_reach_the_output():
    x, w, a, b, _ = _args(32, 64, 16, 96, torch.float32)
    base = x.double() @ w.double().t()
    for s in (0.5, 2.0):
        y = lora.lora_linear(x, w, a, b, s).double()
        assert torch.allclose(y - base, s * ((x.double() @ a.double().t()) @ b.double().t()), atol=1e-4)


def test_merged_and_unfused_versions_agree_with_the_reference():
    x, w, a, b, s = _args(16, 48, 8, 64, torch.float32)
    ref = spec.lora_reference(x, w, a, b, s)
    assert _rel(spec.lora_eager(x, w, a, b, s), ref) < 1e-5
    assert _rel(spec.lora_merged(x, spec.merge_lora(w, a, b, s)), ref) < 1e-5


def test_counts_of_bytes_and_flops():
    m, n, r, k = 10, 30, 4, 20
    x, w = torch.empty(m, k, dtype=torch.float16), torch.empty(n, k, dtype=torch.float16)
    a, b = torch.empty(r, k, dtype=torch.float16), torch.empty(n, r, dtype=torch.float16)
    assert spec.lora_flops(x, w, a, b) == 2 * m * n * k + 2 * m * r * (k + n)
    weights = n * k + r * k + n * r
    assert spec.lora_bytes(x, w, a, b) == 2 * (m * k + weights + m * n)
    assert spec.lora_bytes(x, w, a, b, fused=False) == 2 * (2 * m * k + weights + 2 * m * r + 7 * m * n)
    flops, extra = spec.lora_overhead_reference(m, k, n, r)
    assert flops == pytest.approx((spec.lora_flops(x, w, a, b) - 2 * m * n * k) / (2 * m * n * k))
    unfused_extra = spec.lora_bytes(x, w, a, b, fused=False) - 2 * (m * k + n * k + m * n)
    assert extra == pytest.approx(unfused_extra / (2 * (m * k + n * k + m * n)))


@pytest.mark.parametrize("bad,message", [
    (lambda x, w, a, b, s: (x, w[:, :-1], a, b, s), "want w"),
    (lambda x, w, a, b, s: (x, w, a, b[:-1], s), "want w"),
    (lambda x, w, a, b, s: (x, w, a.double(), b, s), "share a floating dtype"),
    (lambda x, w, a, b, s: (x[0], w, a, b, s), "2-D tensors"),
    (lambda x, w, a, b, s: (x, w, a, b, torch.tensor(s)), "Python float"),
    (lambda x, w, a, b, s: (x, w, torch.zeros(200, x.shape[1], dtype=x.dtype, device=x.device),
                            torch.zeros(w.shape[0], 200, dtype=x.dtype, device=x.device), s), "rank r = 200"),
])
def test_lora_linear_refuses_bad_inputs_clearly(bad, message):
    with pytest.raises(ValueError, match=message):
        lora.lora_linear(*bad(*_args(8, 8, 4, 16, torch.float32)))
