"""Outputs of different dtypes and performance against a library baseline, on a spec local to this file:
FlashAttention's forward returns o in the inputs' dtype and the log-sum-exp in float32, and is timed
against PyTorch's scaled_dot_product_attention on the same GPU."""

import torch
import torch.nn.functional as F

import pytest

from autograder import config
from autograder.criteria import kernel
from autograder.specs.exercise import KernelExercise, Shape
from kernels import flash_attention as fa


def _attention_inputs(shape, dtype, device, gen):
    return {**{name: torch.randn(*shape.dims, generator=gen).to(dtype).to(device) for name in ("q", "k", "v")},
            "causal": shape.layout == "causal"}


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


ATTENTION = KernelExercise(
    id="test.flash_attention", notebook="none", function="flash_attention",
    signature="flash_attention(q, k, v, causal) -> (o, lse)", summary="FlashAttention forward",
    criteria=("correctness", "performance"), make_inputs=_attention_inputs,
    reference=fa.attention_reference, eager=fa.attention_naive, bytes=fa.attention_bytes, flops=fa.attention_flops,
    shapes=(Shape((1, 2, 7, 32), "causal"), Shape((2, 1, 100, 64)), Shape((1, 2, 130, 64), "causal")),
    perf_shape=Shape((4, 16, 4096, 128)), tolerance={dt: (2e-3, 2e-3) for dt in (torch.float32, torch.float16)}
    | {torch.bfloat16: (1.6e-2, 1.6e-2)},
    output_names=("o", "lse"), output_dtypes=(None, torch.float32), special_values=False,
    perf_baseline=_sdpa, perf_baseline_name="SDPA", default_min_fraction=0.3,
)


def _grade(criterion, fn):
    return kernel.GRADERS[criterion](ATTENTION, fn, config.load())


def test_outputs_of_two_dtypes_pass_when_each_has_its_own():
    r = _grade("correctness", fa.flash_attention)
    assert r.status == "passed", r.message


def test_a_statistic_in_the_inputs_dtype_is_named():
    def lse_rounded(q, k, v, causal):
        o, lse = fa.flash_attention(q, k, v, causal)
        return o, lse.to(q.dtype)

    r = _grade("correctness", lse_rounded)
    assert r.status == "failed" and "lse: output dtype is float16, expected float32" in r.message


def test_outputs_must_keep_their_own_dtypes_in_the_spec():
    assert ATTENTION.out_dtype(torch.float16, 0) == torch.float16
    assert ATTENTION.out_dtype(torch.float16, 1) == torch.float32


@pytest.mark.gpu
def test_performance_against_a_library_on_the_same_gpu():
    r = _grade("performance", fa.flash_attention)
    assert r.status == "passed", r.message
    assert "of SDPA's speed on this GPU" in r.message and r.figures["baseline_ms"] > 0
