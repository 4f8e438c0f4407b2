"""The autograder against planted bugs in notebook 04's fused LoRA (04.lora) and its prediction.

Each submission is the reference kernel's tiling with one typical mistake; each test checks that the grader fails
the criterion meant to catch it and names the mistake. In the interpreter only the criteria named run; speed and
bf16 are graded on a GPU (the gpu-marked test).
"""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check, runtime

import torch
import triton
import triton.language as tl

from autograder.specs import lora as spec
from kernels import lora
from kernels.matmul import dot_precision, grouped_tile

LORA, PREDICT = "04.lora", "04.predict_lora_overhead"
QUICK = ["correctness", "precision", "fusion"]


@triton.jit
def _planted_kernel(x_ptr, w_ptr, a_ptr, b_ptr, y_ptr, M, N, K, R, scale, stride_xm, stride_xk, stride_wn,
                    stride_wk, stride_ar, stride_ak, stride_bn, stride_br, stride_ym,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                    GROUP_M: tl.constexpr, PRECISION: tl.constexpr, ADAPTER: tl.constexpr, SCALE: tl.constexpr,
                    LOW_PRECISION_ACC: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, BLOCK_R)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    xa = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        kk = k + rk
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * stride_wk + rn[None, :] * stride_wn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        a = tl.load(a_ptr + kk[:, None] * stride_ak + rr[None, :] * stride_ar,
                    mask=(kk[:, None] < K) & (rr[None, :] < R), other=0.0)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)
        if LOW_PRECISION_ACC:  # BUG when set: the running sum is rounded to x's dtype after every K step
            acc = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
        xa = tl.dot(x, a, xa, input_precision=PRECISION)
    if ADAPTER:  # BUG when off: the adapter's term is never added
        bt = tl.load(b_ptr + rr[:, None] * stride_br + rn[None, :] * stride_bn,
                     mask=(rr[:, None] < R) & (rn[None, :] < N), other=0.0)
        if SCALE:  # BUG when off: s forgotten
            xa = xa * scale
        acc = tl.dot(xa.to(bt.dtype), bt, acc, input_precision=PRECISION)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _planted(x, w, a, b, scale, *, adapter=True, use_scale=True, low_precision_acc=False):
    M, K = x.shape
    N, r = w.shape[0], a.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    cfg = lora.lora_launch_settings(M, N, K, x.element_size())
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _planted_kernel[grid](x, w, a, b, y, M, N, K, r, float(scale), x.stride(0), x.stride(1), w.stride(0),
                          w.stride(1), a.stride(0), a.stride(1), b.stride(0), b.stride(1), y.stride(0),
                          BLOCK_R=max(16, triton.next_power_of_2(r)), PRECISION=dot_precision(x.dtype),
                          ADAPTER=adapter, SCALE=use_scale, LOW_PRECISION_ACC=low_precision_acc, **cfg)
    return y


def _with(**bug):
    return lambda x, w, a, b, scale: _planted(x, w, a, b, scale, **bug)


def _three_launches(x, w, a, b, scale):
    """The unfused route in Triton: the base GEMM, then x A^T, then base + s (x A^T) B^T: three launches."""
    base = _planted(x, w, a, b, scale, adapter=False)  # x W^T, written to memory
    xa = _planted(x, a, a, b, scale, adapter=False)  # x A^T, (M, r), written to memory
    return _add_scaled(base, xa, b, scale)


@triton.jit
def _axpy_gemm_kernel(base_ptr, xa_ptr, b_ptr, y_ptr, M, N, R, scale, stride_bm, stride_xam, stride_bn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    # y = base + s * xa @ B^T, base and xa read back from memory
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, BLOCK_R)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    xa = tl.load(xa_ptr + rm[:, None] * stride_xam + rr[None, :], mask=(rm[:, None] < M) & (rr[None, :] < R),
                 other=0.0).to(tl.float32)
    bt = tl.load(b_ptr + rr[:, None] + rn[None, :] * stride_bn, mask=(rr[:, None] < R) & (rn[None, :] < N),
                 other=0.0).to(tl.float32)
    base = tl.load(base_ptr + rm[:, None] * stride_bm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    y = base + scale * tl.dot(xa, bt, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * stride_bm + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _add_scaled(base, xa, b, scale):
    M, N = base.shape
    R = xa.shape[1]
    b = b.contiguous()
    y = torch.empty_like(base)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    _axpy_gemm_kernel[grid](base, xa, b, y, M, N, R, float(scale), base.stride(0), xa.stride(0), b.stride(0),
                            BLOCK_M=32, BLOCK_N=32, BLOCK_R=max(16, triton.next_power_of_2(R)))
    return y


def test_reference_kernel_passes():
    report = check(LORA, lora.lora_linear, criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
    assert report["correctness"].figures["failed"] == 0


def test_planted_kernel_without_a_bug_passes():
    report = check(LORA, _with(), criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"


@pytest.mark.parametrize("bug, named", [
    (dict(adapter=False), "likely cause: the adapter's term is missing"),
    (dict(use_scale=False), "likely cause: the scale s is missing"),
], ids=["skips-the-adapter", "forgets-the-scale"])
def test_wrong_formulas_fail_correctness_and_are_named(bug, named):
    r = check(LORA, _with(**bug), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and named in r.message, r.message


def test_scale_on_the_whole_output_is_named():
    def scaled_everything(x, w, a, b, scale):
        return scale * _planted(x, w, a, b, 1.0)

    r = check(LORA, scaled_everything, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "likely cause: s scales the whole output" in r.message, r.message


def test_three_kernels_are_correct_but_fail_fusion():
    report = check(LORA, _three_launches, criteria=["correctness", "fusion"])
    assert report["correctness"].status == "passed", report["correctness"].message
    msg = report["fusion"].message
    assert report["fusion"].status == "failed", msg
    assert "launched 3 kernels (_planted_kernel, _planted_kernel, _axpy_gemm_kernel); at most 1 allowed" in msg, msg


def test_low_precision_accumulator_fails_precision():
    r = check(LORA, _with(low_precision_acc=True), criteria=["precision"])["precision"]
    assert r.status == "failed" and "float16" in r.message and "grows like K^" in r.message, r.message


@pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")
def test_performance_is_skipped_without_gpu():
    r = check(LORA, lora.lora_linear, criteria=["performance"])["performance"]
    assert r.status == "skipped" and "no GPU" in r.message


@pytest.mark.gpu
def test_reference_kernel_passes_performance_on_gpu():
    r = check(LORA, lora.lora_linear, criteria=["performance"])["performance"]
    assert r.status == "passed", r.message


# --- the prediction ------------------------------------------------------------------------------------------

def test_the_prediction_reference_passes():
    assert check(PREDICT, spec.lora_overhead_reference).passed


@pytest.mark.parametrize("wrong, named", [
    (lambda m, k, n, r: spec.lora_overhead_reference(m, k, n, r)[::-1], "swapped"),
    (lambda m, k, n, r: (spec.lora_overhead_reference(m, k, n, r)[0],
                         (m * k + r * k + n * r + 6 * m * n) / (m * k + n * k + m * n)),
     "read back by the next: 2 M r"),
    (lambda m, k, n, r: (spec.lora_overhead_reference(m, k, n, r)[0],
                         (r * k + 2 * m * r + n * r + 6 * m * n) / (m * k + n * k + m * n)), "reads x a second"),
], ids=["swapped", "no-round-trip", "x-read-once"])
def test_wrong_predictions_are_named(wrong, named):
    r = check(PREDICT, wrong)["correctness"]
    assert r.status == "failed" and named in r.message, r.message
