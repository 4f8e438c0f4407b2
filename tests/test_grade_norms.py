"""The autograder against planted bugs in notebook 02: RMSNorm, add + RMSNorm, LayerNorm, RMSNorm backward.

Every submission below is a small, real Triton kernel and launcher that differs from a correct one (the
``_good_*`` kernels here, or the course's reference in ``kernels/``) by one typical student mistake. Each test
checks that the grader fails the right criterion and names the mistake in its message. Without a GPU the
kernels run in Triton's interpreter, so every test asks only for the criteria it needs; bf16 is graded (and
performance measured) on a GPU only, where the same assertions must hold.
"""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check, runtime

import torch
import triton
import triton.language as tl

from kernels.add_rmsnorm import add_rmsnorm as reference_add_rmsnorm
from kernels.layernorm import layernorm as reference_layernorm
from kernels.rmsnorm import rmsnorm as reference_rmsnorm
from kernels.rmsnorm_backward import rmsnorm_backward as reference_rmsnorm_backward

RMS, ADD, LN, REPAIR, BWD = "02.rmsnorm", "02.add_rmsnorm", "02.layernorm", "02.rmsnorm_repair", "02.rmsnorm_backward"
QUICK = ["correctness", "precision", "fusion"]  # everything the interpreter can judge

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


def _failure_lines(message: str) -> list[str]:
    """The per-case lines of a failed correctness message (the header and the '... more' line dropped)."""
    return [ln for ln in message.splitlines()[1:] if ln.startswith("shape ")]


def _row_launch(kernel, x, weight, eps, **meta):
    """One program per row, the whole row in one block: the launch every one-pass RMSNorm below uses."""
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK_H=triton.next_power_of_2(H), **meta)
    return y


# =========================================================================================================
# RMSNorm (02.rmsnorm, 02.rmsnorm_repair)
# =========================================================================================================

@triton.jit
def _good_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def good_rmsnorm(x, weight, eps):
    return _row_launch(_good_rms_kernel, x, weight, eps)


# --- 1. the tail of the block is stored unmasked (H not a power of two) ----------------------------------

@triton.jit
def _unmasked_store_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty))  # BUG: no mask


def unmasked_store_rmsnorm(x, weight, eps):
    return _row_launch(_unmasked_store_rms_kernel, x, weight, eps)


# --- 2. eps added after the square root ------------------------------------------------------------------

@triton.jit
def _eps_outside_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / (tl.sqrt(tl.sum(x * x, axis=0) / H) + eps)  # BUG: eps outside the sqrt
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def eps_outside_rmsnorm(x, weight, eps):
    return _row_launch(_eps_outside_rms_kernel, x, weight, eps)


# --- 3. the weight is never applied ----------------------------------------------------------------------

@triton.jit
def _no_weight_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd).to(y_ptr.dtype.element_ty), mask=mask)  # BUG: no w


def no_weight_rmsnorm(x, weight, eps):
    return _row_launch(_no_weight_rms_kernel, x, weight, eps)


# --- 4. the mean of squares divides by the block size, not by H -------------------------------------------

@triton.jit
def _mean_over_block_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / BLOCK_H + eps)  # BUG: the padding lanes counted in the mean
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def mean_over_block_rmsnorm(x, weight, eps):
    return _row_launch(_mean_over_block_rms_kernel, x, weight, eps)


# --- 5. the statistic accumulated in the storage dtype (the notebook's buggy kernel) ----------------------

@triton.jit
def _lowp_acc_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)  # BUG: fp16 (bf16) accumulator for fp16 (bf16) x
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0)  # BUG: no upcast
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0).to(tl.float32) / H + eps)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def lowp_acc_rmsnorm(x, weight, eps):
    M, H = x.shape
    y = torch.empty_like(x)
    _lowp_acc_rms_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=64)
    return y


# --- 6. correct, but two passes over x: the statistic, then x read again to normalise ---------------------

@triton.jit
def _two_pass_rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
    for start in range(0, H, BLOCK):  # the second read of x: 3|x| of traffic instead of 2|x|
        cols = start + tl.arange(0, BLOCK)
        mask = cols < H
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def two_pass_rmsnorm(x, weight, eps):
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _two_pass_rms_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=1024, num_warps=4)
    return y


# =========================================================================================================
# add + RMSNorm (02.add_rmsnorm)
# =========================================================================================================

def _add_norm_launch(kernel, x, residual, weight, eps):
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    new_residual = torch.empty((M, H), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, residual, weight, y, new_residual, H, x.stride(0), residual.stride(0), y.stride(0),
                 new_residual.stride(0), eps, BLOCK_H=triton.next_power_of_2(H))
    return y, new_residual


# --- 7. the norm is taken of x, not of the sum x + residual -----------------------------------------------

@triton.jit
def _norm_of_x_kernel(x_ptr, r_ptr, w_ptr, y_ptr, out_r_ptr, H, stride_xm, stride_rm, stride_ym, stride_om, eps,
                      BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(out_r_ptr.dtype.element_ty)
    tl.store(out_r_ptr + row * stride_om + cols, s, mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)  # BUG: x where the sum s belongs
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def norm_of_x_add_rmsnorm(x, residual, weight, eps):
    return _add_norm_launch(_norm_of_x_kernel, x, residual, weight, eps)


# --- 8. only the normalised tensor is returned ------------------------------------------------------------

def one_output_add_rmsnorm(x, residual, weight, eps):
    y, _ = reference_add_rmsnorm(x, residual, weight, eps)
    return y  # BUG: the new residual is dropped


# --- 9. two kernels: the add writes the sum, a second kernel reads it back to normalise -------------------

@triton.jit
def _add_kernel(x_ptr, r_ptr, s_ptr, H, stride_xm, stride_rm, stride_sm, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(s_ptr + row * stride_sm + cols, (x + r).to(s_ptr.dtype.element_ty), mask=mask)


def two_kernels_add_rmsnorm(x, residual, weight, eps):
    M, H = x.shape
    new_residual = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _add_kernel[(M,)](x, residual, new_residual, H, x.stride(0), residual.stride(0), new_residual.stride(0),
                      BLOCK_H=triton.next_power_of_2(H))
    return good_rmsnorm(new_residual, weight, eps), new_residual  # BUG: the sum goes through memory


# =========================================================================================================
# LayerNorm (02.layernorm)
# =========================================================================================================

def _ln_launch(kernel, x, weight, bias, eps):
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, weight, bias, y, H, x.stride(0), y.stride(0), eps, BLOCK_H=triton.next_power_of_2(H))
    return y


# --- 10. the variance as E[x^2] - E[x]^2 (in fp32) ---------------------------------------------------------

@triton.jit
def _one_line_var_ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / H
    var = tl.sum(x * x, axis=0) / H - mean * mean  # BUG: cancels when |mean| >> std
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def one_line_var_layernorm(x, weight, bias, eps):
    return _ln_launch(_one_line_var_ln_kernel, x, weight, bias, eps)


# --- 11. the unbiased variance (divide by H - 1) -----------------------------------------------------------

@triton.jit
def _unbiased_ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / H
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / (H - 1) + eps)  # BUG: Bessel's correction
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def unbiased_layernorm(x, weight, bias, eps):
    return _ln_launch(_unbiased_ln_kernel, x, weight, bias, eps)


# --- 12. the bias is never added -----------------------------------------------------------------------------

@triton.jit
def _no_bias_ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / H
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (xc * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)  # BUG: + b


def no_bias_layernorm(x, weight, bias, eps):
    return _ln_launch(_no_bias_ln_kernel, x, weight, bias, eps)


# =========================================================================================================
# RMSNorm backward (02.rmsnorm_backward)
# =========================================================================================================

@triton.jit
def _good_bwd_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, partial_ptr, M, H, stride_xm, stride_dym, stride_dxm, eps,
                     ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_H], dtype=tl.float32)
    for i in range(ROWS):
        row = (pid * ROWS + i).to(tl.int64)
        m = mask & (row < M)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dym + cols, mask=m, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
        xhat = x * rstd
        g = dy * w
        dx = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / H))
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)
        dw += dy * xhat
    tl.store(partial_ptr + pid * H + cols, dw, mask=mask)


@triton.jit
def _sum_partials_kernel(partial_ptr, dw_ptr, P, H, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for p in range(P):
        acc += tl.load(partial_ptr + p * H + cols, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=mask)


def _bwd_rows(kernel, x, weight, dy, eps):
    """Kernel 1: dx, and one fp32 partial sum of dweight per program. Returns (dx, partial)."""
    M, H = x.shape
    dx = torch.empty((M, H), dtype=x.dtype, device=x.device)
    programs = min(M, 8)
    partial = torch.empty((programs, H), dtype=torch.float32, device=x.device)
    kernel[(programs,)](x, weight, dy, dx, partial, M, H, x.stride(0), dy.stride(0), dx.stride(0), eps,
                        ROWS=triton.cdiv(M, programs), BLOCK_H=triton.next_power_of_2(H))
    return dx, partial


def _sum_partials(partial, weight):
    P, H = partial.shape
    dw = torch.empty((H,), dtype=weight.dtype, device=weight.device)
    _sum_partials_kernel[(triton.cdiv(H, 256),)](partial, dw, P, H, BLOCK=256)
    return dw


# --- 13. dx without the mean term: dx = rstd * g ------------------------------------------------------------

@triton.jit
def _no_mean_term_bwd_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, partial_ptr, M, H, stride_xm, stride_dym, stride_dxm,
                             eps, ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_H], dtype=tl.float32)
    for i in range(ROWS):
        row = (pid * ROWS + i).to(tl.int64)
        m = mask & (row < M)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dym + cols, mask=m, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
        xhat = x * rstd
        g = dy * w
        dx = rstd * g  # BUG: rstd depends on x too; the term - xhat * mean(g * xhat) is missing
        tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)
        dw += dy * xhat
    tl.store(partial_ptr + pid * H + cols, dw, mask=mask)


def no_mean_term_rmsnorm_backward(x, weight, dy, eps):
    dx, partial = _bwd_rows(_no_mean_term_bwd_kernel, x, weight, dy, eps)
    return dx, _sum_partials(partial, weight)


# --- 14. dweight reduced with torch instead of a second kernel -----------------------------------------------

def torch_sum_rmsnorm_backward(x, weight, dy, eps):
    dx, partial = _bwd_rows(_good_bwd_kernel, x, weight, dy, eps)
    return dx, partial.sum(0).to(weight.dtype)  # BUG: a torch reduction outside Triton


def good_rmsnorm_backward(x, weight, dy, eps):
    dx, partial = _bwd_rows(_good_bwd_kernel, x, weight, dy, eps)
    return dx, _sum_partials(partial, weight)


# =========================================================================================================
# Passing submissions
# =========================================================================================================

REFERENCES = {
    RMS: reference_rmsnorm,
    ADD: reference_add_rmsnorm,
    LN: reference_layernorm,
    REPAIR: reference_rmsnorm,
    BWD: reference_rmsnorm_backward,
}


@pytest.fixture(scope="module", params=list(REFERENCES), ids=list(REFERENCES))
def reference_report(request):
    return check(request.param, REFERENCES[request.param], criteria=QUICK)


def test_reference_kernels_pass(reference_report):
    assert [r.name for r in reference_report.results] == QUICK
    for r in reference_report.results:
        assert r.status == "passed", f"{reference_report.exercise} {r.name}: {r.message}"
    assert reference_report["correctness"].figures["failed"] == 0
    allowed = 2 if reference_report.exercise == BWD else 1
    assert reference_report["fusion"].figures["kernel_launches"] == allowed


@needs_no_gpu
@pytest.mark.parametrize("exercise", list(REFERENCES))
def test_reference_performance_is_skipped_without_gpu(exercise):
    r = check(exercise, REFERENCES[exercise], criteria=["performance"])["performance"]
    assert r.status == "skipped", r.message
    assert r.passed


@pytest.mark.parametrize("exercise, fn", [(RMS, good_rmsnorm), (BWD, good_rmsnorm_backward)],
                         ids=["rmsnorm", "rmsnorm_backward"])
def test_correct_base_kernels_pass(exercise, fn):
    """The kernels the planted bugs depart from pass: each failure below is the planted bug's doing."""
    report = check(exercise, fn, criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"


@pytest.fixture(scope="module")
def performance_of():
    """check(exercise, fn, criteria=["performance"]), each pair measured once per module."""
    results = {}

    def get(exercise, fn):
        if (exercise, fn) not in results:
            results[exercise, fn] = check(exercise, fn, criteria=["performance"])["performance"]
        return results[exercise, fn]

    return get


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", [RMS, ADD, LN, REPAIR, BWD])
def test_reference_kernels_pass_performance_on_gpu(exercise, performance_of):
    r = performance_of(exercise, REFERENCES[exercise])
    assert r.status == "passed", r.message
    assert r.figures["fraction_of_peak"] >= r.figures["threshold"]


def test_reference_backward_launches_two_kernels():
    r = check(BWD, reference_rmsnorm_backward, criteria=["fusion"])["fusion"]
    assert r.status == "passed", r.message
    assert r.figures["kernel_launches"] == 2
    assert r.figures["triton_launches"] == 2
    assert r.figures["allowed"] == 2
    assert "torch operations" not in r.message


# =========================================================================================================
# Planted bugs: RMSNorm
# =========================================================================================================

def test_unmasked_tail_store_is_an_out_of_bounds_write():
    r = check(RMS, unmasked_store_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "out-of-bounds write" in r.message
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:  # a power-of-two H has no tail: only the other widths fail
        width = int(line.split()[1].split("x")[1].rstrip(","))
        assert width & (width - 1), line


def test_eps_after_sqrt_is_named():
    r = check(RMS, eps_outside_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "differ from the reference" in r.message
    assert "likely cause: eps added after the square root" in r.message
    assert "weight is not applied" not in r.message and "block size" not in r.message


def test_forgotten_weight_is_named():
    r = check(RMS, no_weight_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "likely cause: the weight is not applied" in r.message
    assert "eps added" not in r.message and "block size" not in r.message


def test_mean_over_block_size_is_named():
    r = check(RMS, mean_over_block_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "divides by the block size" in r.message
    assert "eps added" not in r.message and "weight is not applied" not in r.message


@pytest.mark.parametrize("exercise", [RMS, REPAIR])
def test_low_precision_accumulator_fails_precision_naming_the_growth(exercise):
    r = check(exercise, lowp_acc_rmsnorm, criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "float16: the error grows like H^" in r.message
    assert "low precision" in r.message
    assert "Keep the running sums in float32" in r.message
    assert r.figures["growth_exponent_float16"] > 0.25
    assert r.figures["rel_err_float16@16384"] > r.figures["bound_float16@16384"]
    # fp32 x gives an fp32 accumulator: that dtype is fine
    assert not any(line.startswith("float32") for line in r.message.splitlines()), r.message
    assert all(r.figures[f"rel_err_float32@{h}"] <= r.figures[f"bound_float32@{h}"] for h in (256, 1024, 4096, 16384))


@pytest.fixture(scope="module")
def two_pass_report():
    return check(RMS, two_pass_rmsnorm, criteria=QUICK)


def test_two_pass_kernel_is_correct_precise_and_fused(two_pass_report):
    for r in two_pass_report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
    assert two_pass_report["fusion"].figures["kernel_launches"] == 1


@pytest.mark.gpu
def test_two_pass_kernel_reaches_a_smaller_fraction_of_peak_than_one_pass(performance_of):
    """The second read of x costs bandwidth: only a GPU can tell."""
    two = performance_of(RMS, two_pass_rmsnorm)
    one = performance_of(RMS, reference_rmsnorm)
    assert "fraction_of_peak" in two.figures, two.message
    assert "fraction_of_peak" in one.figures, one.message
    assert two.figures["fraction_of_peak"] < one.figures["fraction_of_peak"], (two.message, one.message)


# =========================================================================================================
# Planted bugs: add + RMSNorm
# =========================================================================================================

def test_norm_of_x_instead_of_sum_is_named():
    r = check(ADD, norm_of_x_add_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "likely cause: x is normalised instead of the sum" in r.message
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:
        assert "normed: " in line and "new_residual: " not in line, line  # the sum itself is stored right


def test_single_output_is_reported_as_the_wrong_kind():
    r = check(ADD, one_output_add_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "add_rmsnorm returned Tensor" in r.message
    assert "expected a tuple of 2 tensors (normed, new_residual)" in r.message


def test_add_then_norm_in_two_kernels_fails_fusion():
    r = check(ADD, two_kernels_add_rmsnorm, criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "launched 2 kernels" in r.message
    assert "at most 1 allowed" in r.message
    assert "torch operations" not in r.message
    assert r.figures["kernel_launches"] == 2


# =========================================================================================================
# Planted bugs: LayerNorm
# =========================================================================================================

def test_one_line_variance_fails_precision_with_the_cancellation_note():
    r = check(LN, one_line_var_layernorm, criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "float32, shape" in r.message and "above the bound" in r.message
    assert "E[x^2] - E[x]^2" in r.message
    assert "mean 300" in r.message


def test_unbiased_variance_is_named():
    r = check(LN, unbiased_layernorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "likely cause: the variance divides by H - 1" in r.message
    assert "bias is not added" not in r.message


def test_forgotten_bias_is_named():
    r = check(LN, no_bias_layernorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "likely cause: the bias is not added" in r.message
    assert "H - 1" not in r.message


# =========================================================================================================
# Planted bugs: RMSNorm backward
# =========================================================================================================

def test_dx_without_mean_term_fails_on_dx():
    r = check(BWD, no_mean_term_rmsnorm_backward, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:
        assert "dx: " in line and "differ from the reference" in line, line
        assert "dweight: " not in line, line  # dweight is computed right


def test_dweight_reduced_with_torch_fails_fusion_naming_the_op():
    r = check(BWD, torch_sum_rmsnorm_backward, criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "torch operations outside the Triton kernel" in r.message
    assert "torch sum" in r.message
    assert r.figures["triton_launches"] == 1


# =========================================================================================================
# stderr
# =========================================================================================================

def test_nothing_reaches_stderr(capfd):
    capfd.readouterr()  # drop anything earlier
    failing = check(RMS, unmasked_store_rmsnorm, criteria=["correctness"])
    passing = check(LN, reference_layernorm, criteria=["fusion"])
    captured = capfd.readouterr()
    assert captured.err == ""
    assert failing["correctness"].status == "failed"
    assert passing["fusion"].status == "passed"
