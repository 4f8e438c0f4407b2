"""The autograder against planted bugs in "01.fused_chain": y = alpha * silu(x + bias).

Every submission below is a small, real Triton kernel and launcher that differs from a correct one
(``_planted_kernel`` launched by ``_fused_chain`` with no bug switched on, which passes) by one typical
student mistake, switched on by a keyword of ``_fused_chain``. Each test checks that the grader fails the
right criterion and names the mistake in its message. Without a GPU the kernels run in Triton's interpreter,
so every test asks only for the criteria it needs.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

import pytest

import autograder  # first: picks the interpreter before any @triton.jit below runs
from autograder import check, runtime

import torch
import triton
import triton.language as tl

from kernels.fused_chain import fused_chain as reference_fused_chain

EX = "01.fused_chain"
BLOCK_M, BLOCK_N = 8, 1024  # big blocks: the interpreter's cost is per program

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


def _failure_lines(message: str) -> list[str]:
    """The per-case lines of a failed correctness message (the header and the '... more' line dropped)."""
    return [ln for ln in message.splitlines()[1:] if ln.startswith("shape ")]


# --- the planted kernel: correct with no bug switched on ---------------------------------------------------

@triton.jit
def _planted_kernel(x_ptr, b_ptr, y_ptr, M, N, sxm, sxn, sym, syn, alpha, BM: tl.constexpr, BN: tl.constexpr,
                    MASK_STORE: tl.constexpr, ADD_BIAS: tl.constexpr, UPCAST: tl.constexpr,
                    FP32_SIGMOID: tl.constexpr, USE_STRIDES: tl.constexpr, DEVICE_PRINT: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if USE_STRIDES:
        x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0)
    else:  # BUG: row stride N, column stride 1, whatever x's strides
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
    if UPCAST:  # BUG when off: the math runs in the storage dtype (no .to(fp32))
        x = x.to(tl.float32)
        b = b.to(tl.float32)
    if DEVICE_PRINT:  # noqa: SIM102  correct, but noisy (a constexpr: compiled out when off)
        if tl.program_id(0) == 0 and tl.program_id(1) == 0:
            tl.device_print("debug M", M)
    if ADD_BIAS:
        z = x + b[None, :]  # without UPCAST: rounded to the input dtype
    else:  # BUG: bias forgotten
        z = x
    if FP32_SIGMOID:  # tl.sigmoid takes fp32 only: upcast for it, then back; z * s rounded to the input dtype
        y = alpha * (z * tl.sigmoid(z.to(tl.float32)).to(z.dtype))
    else:  # without UPCAST (and fp16 x), Triton refuses tl.sigmoid on fp16
        y = alpha * z * tl.sigmoid(z)
    if MASK_STORE:
        tl.store(y_ptr + rows[:, None] * sym + cols[None, :] * syn, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # BUG: the store is not masked (only the load is)
        tl.store(y_ptr + rows[:, None] * sym + cols[None, :] * syn, y.to(y_ptr.dtype.element_ty))


def _fused_chain(x, bias, alpha, *, mask_store=True, add_bias=True, upcast=True, fp32_sigmoid=False,
                 use_strides=True, floor_grid=False, in_place=False, out_dtype=None, noisy=False):
    """The planted kernel and its launch, a bug switched on by a keyword; with none, a correct submission."""
    M, N = x.shape
    if noisy:  # correct, but noisy: a device print, Python and C-level stderr, a warning
        print(f"debug: x {tuple(x.shape)} {x.dtype}", file=sys.stderr)
        os.write(2, b"debug: a C-level write to fd 2\n")
        warnings.warn("debug: this launcher is noisy", UserWarning)
    if in_place:  # BUG: the result overwrites x, which is returned
        y = x
    else:  # BUG when out_dtype is float32: y should have x's dtype
        y = torch.empty((M, N), dtype=out_dtype or x.dtype, device=x.device)
    # BUG when floor_grid: floor division drops the tail block, so the last column block is never launched
    grid = (triton.cdiv(M, BLOCK_M), N // BLOCK_N if floor_grid else triton.cdiv(N, BLOCK_N))
    _planted_kernel[grid](x, bias, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), alpha,
                          BM=BLOCK_M, BN=BLOCK_N, MASK_STORE=mask_store, ADD_BIAS=add_bias, UPCAST=upcast,
                          FP32_SIGMOID=fp32_sigmoid, USE_STRIDES=use_strides, DEVICE_PRINT=noisy)
    return y


def _fused_chain_with(**bug):
    return lambda x, bias, alpha: _fused_chain(x, bias, alpha, **bug)


# --- no Triton at all ----------------------------------------------------------------------------------

def torch_fallback_submission(x, bias, alpha):
    return alpha * torch.nn.functional.silu(x + bias)


# --- two kernels: x + bias into a temporary, then alpha * silu -------------------------------------------

@triton.jit
def _add_bias_kernel(x_ptr, b_ptr, t_ptr, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(t_ptr + rows[:, None] * N + cols[None, :], x + b[None, :], mask=mask)


@triton.jit
def _silu_scale_kernel(t_ptr, y_ptr, n_elements, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    z = tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty), mask=mask)


def two_kernels_submission(x, bias, alpha):
    M, N = x.shape
    tmp = torch.empty((M, N), dtype=torch.float32, device=x.device)  # an intermediate through memory
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _add_bias_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](x, bias, tmp, M, N, x.stride(0),
                                                                       x.stride(1), BM=BLOCK_M, BN=BLOCK_N)
    _silu_scale_kernel[(triton.cdiv(M * N, 2048),)](tmp, y, M * N, alpha, BLOCK=2048)
    return y


# --- cannot be called as fused_chain(x, bias, alpha) -----------------------------------------------------

def two_argument_submission(x, bias):
    return _fused_chain(x, bias, 1.0)


def unfinished_submission(x, bias, alpha):
    raise NotImplementedError


# =========================================================================================================
# Passing submissions
# =========================================================================================================

@needs_no_gpu
def test_reference_solution_passes_every_criterion(capfd):
    report = check(EX, reference_fused_chain)
    assert [r.name for r in report.results] == ["correctness", "precision", "performance", "fusion"]
    for name in ("correctness", "precision", "fusion"):
        assert report[name].status == "passed", report[name].message
    assert report["performance"].status == "skipped"
    assert report.passed
    report.assert_passed()
    assert capfd.readouterr().err == ""


def test_correct_base_kernel_passes():
    """The kernel every planted bug departs from passes: each failure below is the planted bug's doing."""
    report = check(EX, _fused_chain, criteria=["correctness", "precision", "fusion"])
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
    assert report["correctness"].figures["failed"] == 0


# =========================================================================================================
# Planted bugs
# =========================================================================================================

@pytest.mark.parametrize("bug, named, not_named", [
    ({"mask_store": False}, ["out-of-bounds write", "past the end of the output"], []),
    ({"add_bias": False}, ["differ from the reference"], ["never written", "out-of-bounds"]),
    ({"in_place": True}, ["input x was modified"], ["input bias"]),
], ids=["unmasked-store", "bias-forgotten", "writes-into-x"])
def test_planted_bug_fails_correctness_naming_it(bug, named, not_named):
    r = check(EX, _fused_chain_with(**bug), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    for phrase in named:
        assert phrase in r.message
    for phrase in not_named:
        assert phrase not in r.message


def test_floor_division_grid_leaves_elements_never_written():
    r = check(EX, _fused_chain_with(floor_grid=True), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "never written" in r.message
    # 1024-wide column blocks: N // 1024 == 0 for every N < 1024, so no program covers a narrow input at
    # all; the first cases listed are of that kind whatever dtypes this machine grades.
    pattern = r"shape 1x7, float32, .*: 7 of 7 output elements were never written"
    assert re.search(pattern, r.message), r.message


def test_fp16_math_without_upcast_fails_precision_for_float16():
    r = check(EX, _fused_chain_with(upcast=False, fp32_sigmoid=True), criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "float16" in r.message
    assert "above the bound" in r.message
    assert "float32:" not in r.message  # in float32 the same kernel is exact enough
    assert r.figures["rel_err_float16"] > r.figures["bound_float16"]
    assert r.figures["rel_err_float32"] <= r.figures["bound_float32"]


def test_fp16_sigmoid_error_is_reported_with_the_students_line():
    """Without any upcast Triton itself refuses tl.sigmoid on fp16: the grader passes its error on."""
    r = check(EX, _fused_chain_with(upcast=False), criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "fused_chain raised" in r.message
    assert "Expected dtype" in r.message and "fp16" in r.message
    assert Path(__file__).name in r.message  # where, in the student's code


@pytest.fixture(scope="module")
def ignores_strides_correctness():
    return check(EX, _fused_chain_with(use_strides=False), criteria=["correctness"])["correctness"]


def test_ignoring_strides_fails_on_transposed_input(ignores_strides_correctness):
    r = ignores_strides_correctness
    assert r.status == "failed"
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:
        assert "transposed" in line or "strided" in line, line
        assert "differ from the reference" in line, line
    assert "transposed" in r.message


def test_ignoring_strides_is_wrong_on_every_other_column_view():
    """The planted bug is real for a gapped view too (the case the next test expects the grader to catch)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(17, 6000, generator=gen).to(runtime.device())[:, ::2]
    bias = torch.randn(3000, generator=gen).to(runtime.device())
    assert x.stride() == (6000, 2)
    expected = 0.75 * torch.nn.functional.silu(x + bias)
    assert torch.allclose(_fused_chain(x, bias, 0.75), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_fused_chain(x, bias, 0.75, use_strides=False), expected, atol=1e-2, rtol=1e-2)


def test_ignoring_strides_fails_on_strided_input(ignores_strides_correctness):
    lines = _failure_lines(ignores_strides_correctness.message)
    assert any("strided" in line for line in lines), ignores_strides_correctness.message


def test_torch_fallback_fails_fusion_naming_torch_ops():
    r = check(EX, torch_fallback_submission, criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "no Triton kernel ran" in r.message
    assert "torch operations outside the Triton kernel" in r.message
    assert "torch add" in r.message and "torch silu" in r.message and "torch mul" in r.message
    assert r.figures["triton_launches"] == 0


def test_two_kernels_fail_fusion():
    r = check(EX, two_kernels_submission, criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "launched 2 kernels" in r.message
    assert "_add_bias_kernel" in r.message and "_silu_scale_kernel" in r.message
    assert "torch operations" not in r.message  # the temporary is an allocation, which is allowed
    assert r.figures["kernel_launches"] == 2


def test_wrong_signature_fails_every_criterion_naming_the_signature():
    report = check(EX, two_argument_submission)
    assert [r.name for r in report.results] == ["correctness", "precision", "performance", "fusion"]
    for r in report.results:
        assert r.status == "failed", r.name
        assert "two_argument_submission(x, bias)" in r.message
        assert "fused_chain(x, bias, alpha) -> Tensor" in r.message
        assert "3 positional arguments" in r.message
    with pytest.raises(AssertionError, match="signature"):
        report.assert_passed("correctness")


def test_missing_function_fails_every_criterion():
    report = check(EX, None)
    for r in report.results:
        assert r.status == "failed", r.name
        assert "no function given" in r.message
        assert "fused_chain(x, bias, alpha)" in r.message


def test_not_implemented_is_reported_as_not_done_yet():
    report = check(EX, unfinished_submission, criteria=["correctness", "precision", "fusion"])
    for r in report.results:
        assert r.status == "failed", r.name
        assert "NotImplementedError" in r.message and "not done yet" in r.message, r.message


def test_float32_output_for_float16_input_fails_on_dtype():
    r = check(EX, _fused_chain_with(out_dtype=torch.float32), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "output dtype is float32, expected float16" in r.message
    for line in _failure_lines(r.message):
        assert ", float16, " in line or ", bfloat16, " in line, line  # float32 inputs are handled right


def test_noisy_kernel_keeps_stderr_clean_and_reports_the_noise(capfd):
    capfd.readouterr()  # drop anything earlier
    report = check(EX, _fused_chain_with(noisy=True), criteria=["precision", "fusion"])
    captured = capfd.readouterr()
    assert captured.err == ""
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
        assert "kept off stderr" in r.message
        assert "debug: x" in r.message
        assert "debug: a C-level write to fd 2" in r.message
        assert "UserWarning: debug: this launcher is noisy" in r.message


# =========================================================================================================
# Performance without a GPU, and the API's errors
# =========================================================================================================

@needs_no_gpu
def test_performance_is_skipped_without_gpu():
    r = check(EX, reference_fused_chain, criteria=["performance"])["performance"]
    assert r.status == "skipped"
    assert "not measured (no GPU)" in r.message
    assert r.passed


@needs_no_gpu
def test_performance_fails_without_gpu_when_required(tmp_path, monkeypatch):
    default = Path(autograder.__file__).with_name("grading.toml").read_text()
    assert "require_performance = false" in default
    cfg = tmp_path / "grading.toml"
    cfg.write_text(default.replace("require_performance = false", "require_performance = true"))
    monkeypatch.setenv("FUSION_COURSE_GRADING", str(cfg))
    r = check(EX, reference_fused_chain, criteria=["performance"])["performance"]
    assert r.status == "failed"
    assert "not measured (no GPU)" in r.message
    assert "requires a measurement" in r.message


def test_unknown_exercise_raises_key_error():
    with pytest.raises(KeyError, match=r"no exercise '01\.fused_chian'.*01\.fused_chain"):
        check("01.fused_chian", reference_fused_chain)


def test_unknown_criterion_raises_value_error():
    with pytest.raises(ValueError, match=r"unknown criterion 'speed'.*correctness"):
        check(EX, reference_fused_chain, criteria=["speed"])


def test_criterion_not_graded_for_exercise_raises_value_error():
    with pytest.raises(ValueError, match=r"01\.cost_model is not graded on 'fusion'"):
        check("01.cost_model", lambda *a: (0.0, 0.0), criteria="fusion")


def test_report_lookup_of_unchecked_criterion_raises_key_error():
    report = check(EX, reference_fused_chain, criteria=["performance"])
    with pytest.raises(KeyError, match="no result for criterion 'fusion'"):
        report["fusion"]
