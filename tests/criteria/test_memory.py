"""The memory criterion: peak extra memory of a call against a bound that a version materialising its
intermediate cannot meet. Exercised on the fused linear cross-entropy (the logits are the intermediate)
with a spec local to this file."""

import math

import pytest
import torch
import torch.nn.functional as F

from autograder import config
from autograder.criteria import kernel
from autograder.measure.meters import AllocationMeter
from autograder.specs.exercise import KernelExercise, Shape
from kernels import linear_cross_entropy as lce
from kernels import matmul as mm


def _ce_inputs(shape, dtype, device, gen):
    m, k, v = shape.dims
    return {"h": torch.randn(m, k, generator=gen).to(dtype).to(device),
            "w": (torch.randn(v, k, generator=gen) / math.sqrt(k)).to(dtype).to(device),
            "targets": torch.randint(0, v, (m,), generator=gen).to(device)}


def _logits_bytes(inputs):
    return lce.logits_bytes(inputs["h"], inputs["w"])


CE = KernelExercise(
    id="test.linear_cross_entropy", notebook="none", function="linear_cross_entropy",
    signature="linear_cross_entropy(h, w, targets) -> loss", summary="fused linear cross-entropy",
    criteria=("memory",), make_inputs=_ce_inputs, reference=lce.linear_cross_entropy_reference,
    eager=lce.linear_cross_entropy_eager, memory_shape=Shape((4096, 1024, 32768)),
    memory_shape_cpu=Shape((256, 64, 8192)),
    memory_bound=lambda inputs: _logits_bytes(inputs) // 8, materialised_bytes=_logits_bytes,
    memory_what="the float32 logits", output_dtype=torch.float32,
)


def _grade(fn):
    return kernel.memory(CE, fn, config.load())


def _logits_by_triton_then_torch(h, w, targets):
    """A Triton GEMM writes the whole logits tensor; torch's cross-entropy reads it: materialised."""
    logits = mm.matmul(h, w.t(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
    return F.cross_entropy(logits.float(), targets, reduction="none")


def _right_memory_wrong_numbers(h, w, targets):
    return lce.linear_cross_entropy(h, w, (targets + 1) % w.shape[0])


def test_the_fused_version_stays_far_under_the_bound():
    r = _grade(lce.linear_cross_entropy)
    assert r.status == "passed", r.message
    assert r.figures["extra_bytes"] < r.figures["materialised_bytes"] / 20
    assert "allowed" in r.message and "the float32 logits alone would take" in r.message


def test_materialised_logits_fail_and_are_named():
    r = _grade(_logits_by_triton_then_torch)
    assert r.status == "failed"
    assert r.figures["extra_bytes"] >= r.figures["materialised_bytes"]
    assert "it is being materialised" in r.message


def test_torch_alone_is_not_judged_on_memory():
    r = _grade(lce.linear_cross_entropy_eager)
    assert r.status == "failed" and "no Triton kernel ran" in r.message


def test_a_wrong_result_is_not_judged_on_memory():
    r = _grade(_right_memory_wrong_numbers)
    assert r.status == "failed" and "wrong result" in r.message


def test_a_raising_function_is_reported():
    def broken(h, w, targets):
        raise RuntimeError("boom")

    r = _grade(broken)
    assert r.status == "failed" and "raised RuntimeError: boom" in r.message


def test_the_meter_counts_each_new_storage_once_and_not_the_inputs():
    x = torch.randn(1000)
    with AllocationMeter() as meter:
        y = x * 2  # a new 4000-byte storage
        y.add_(1)  # in place: nothing new
        z = y.view(10, 100)  # a view: nothing new
        w = torch.empty(250)  # 1000 bytes
    assert meter.bytes == 4000 + 1000
    assert z.shape == (10, 100) and w.numel() == 250


@pytest.mark.gpu
def test_memory_on_gpu_uses_the_allocator_peak():
    r = _grade(lce.linear_cross_entropy)
    assert r.status == "passed", r.message
    assert "the CUDA allocator's peak" in r.message
    r = _grade(_logits_by_triton_then_torch)
    assert r.status == "failed" and "it is being materialised" in r.message
