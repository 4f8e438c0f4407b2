"""The autograder against planted bugs in notebook 02: RMSNorm, add + RMSNorm, LayerNorm, RMSNorm backward.

Every submission below is a small, real Triton kernel and launcher that differs from a correct one (the
planted kernels here with no bug switched on, or the course's reference in ``kernels/``) by one typical
student mistake, switched on by a keyword of the launcher (a constexpr of the kernel). Each test checks that
the grader fails the right criterion and names the mistake in its message. Without a GPU the kernels run in
Triton's interpreter, so every test asks only for the criteria it needs; bf16 is graded (and performance
measured) on a GPU only, where the same assertions must hold.
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
from kernels.rmsnorm_variants import rmsnorm_buggy, rmsnorm_two_pass

RMS, ADD, LN, REPAIR, BWD = "02.rmsnorm", "02.add_rmsnorm", "02.layernorm", "02.rmsnorm_repair", "02.rmsnorm_backward"
QUICK = ["correctness", "precision", "fusion"]  # everything the interpreter can judge

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


def _failure_lines(message: str) -> list[str]:
    """The per-case lines of a failed correctness message (the header and the '... more' line dropped)."""
    return [ln for ln in message.splitlines()[1:] if ln.startswith("shape ")]


# =========================================================================================================
# The planted kernels: one per kind of kernel, each bug switched on by a keyword of its launcher
# =========================================================================================================

def _rows(kernel, x, *params, eps, **meta):
    """y = kernel(x, *params, eps), one program per row of x (M, H): the launch of every forward kernel."""
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    kernel[(M,)](x, *params, y, H, x.stride(0), y.stride(0), eps, **meta)
    return y


# --- RMSNorm, the whole row in one block (02.rmsnorm, 02.rmsnorm_repair) ---------------------------------

@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr, MASK_STORE: tl.constexpr,
                EPS_INSIDE: tl.constexpr, WEIGHT: tl.constexpr, MEAN_OVER_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    # BUG when MEAN_OVER_H is off: the mean of squares divides by the block size, padding lanes included
    mean_sq = tl.sum(x * x, axis=0) / (H if MEAN_OVER_H else BLOCK_H)
    if EPS_INSIDE:
        rstd = 1.0 / tl.sqrt(mean_sq + eps)
    else:  # BUG: eps added after the square root
        rstd = 1.0 / (tl.sqrt(mean_sq) + eps)
    y = x * rstd
    if WEIGHT:  # BUG when off: the weight is never applied
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if MASK_STORE:
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # BUG: the tail of the block is stored unmasked (H not a power of two)
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty))


def _rmsnorm(x, weight, eps, *, mask_store=True, eps_inside=True, weight_applied=True, mean_over_h=True):
    """The one-pass kernel; with no keyword, a correct rmsnorm(x, weight, eps)."""
    return _rows(_rms_kernel, x, weight, eps=eps, BLOCK_H=triton.next_power_of_2(x.shape[1]),
                 MASK_STORE=mask_store, EPS_INSIDE=eps_inside, WEIGHT=weight_applied, MEAN_OVER_H=mean_over_h)


def _rmsnorm_with(**bug):
    return lambda x, weight, eps: _rmsnorm(x, weight, eps, **bug)


# --- RMSNorm in two passes over the row, BLOCK at a time ------------------------------------------------

# The notebook's own kernels (kernels/rmsnorm_variants.py, which students get): the repair exercise's kernel, an
# fp16 (bf16) accumulator for fp16 (bf16) x, and the correct two-pass kernel, which reads x twice.
_lowp_acc_rmsnorm = rmsnorm_buggy
_two_pass_rmsnorm = rmsnorm_two_pass


# --- add + RMSNorm (02.add_rmsnorm) ----------------------------------------------------------------------

@triton.jit
def _add_norm_of_x_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, H, stride_xm, stride_rm, stride_ym, stride_sm,
                          eps, BLOCK_H: tl.constexpr, NORMALISE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(s_ptr + row * stride_sm + cols, (x + r).to(s_ptr.dtype.element_ty), mask=mask)
    if NORMALISE:  # off: the add alone, the first of two kernels
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)  # BUG: x where the sum x + r belongs
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _add_norm_of_x(x, residual, weight, eps, normalise=True):
    """(y, new_residual): the sum stored right, but the norm taken of x, not of the sum."""
    M, H = x.shape
    y, new_residual = (torch.empty((M, H), dtype=x.dtype, device=x.device) for _ in range(2))
    _add_norm_of_x_kernel[(M,)](x, residual, weight, y, new_residual, H, x.stride(0), residual.stride(0),
                                y.stride(0), new_residual.stride(0), eps, BLOCK_H=triton.next_power_of_2(H),
                                NORMALISE=normalise)
    return y, new_residual


def _one_output_add_rmsnorm(x, residual, weight, eps):
    y, _ = reference_add_rmsnorm(x, residual, weight, eps)
    return y  # BUG: the new residual is dropped


def _two_kernels_add_rmsnorm(x, residual, weight, eps):
    _, new_residual = _add_norm_of_x(x, residual, weight, eps, normalise=False)  # kernel 1: the add
    return _rmsnorm(new_residual, weight, eps), new_residual  # BUG: the sum goes through memory


# --- LayerNorm (02.layernorm) ----------------------------------------------------------------------------

@triton.jit
def _ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr,
               CENTRED_VAR: tl.constexpr, BESSEL: tl.constexpr, BIAS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / H
    if CENTRED_VAR:
        xc = tl.where(mask, x - mean, 0.0)
        # BUG when BESSEL is set: the unbiased variance (divided by H - 1)
        var = tl.sum(xc * xc, axis=0) / (H - 1 if BESSEL else H)
    else:  # BUG: the variance as E[x^2] - E[x]^2 (in fp32), which cancels when |mean| >> std
        xc = x - mean
        var = tl.sum(x * x, axis=0) / H - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    y = xc * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if BIAS:  # BUG when off: the bias is never added
        y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _layernorm(x, weight, bias, eps, *, centred_var=True, bessel=False, add_bias=True):
    return _rows(_ln_kernel, x, weight, bias, eps=eps, BLOCK_H=triton.next_power_of_2(x.shape[1]),
                 CENTRED_VAR=centred_var, BESSEL=bessel, BIAS=add_bias)


def _layernorm_with(**bug):
    return lambda x, weight, bias, eps: _layernorm(x, weight, bias, eps, **bug)


# --- RMSNorm backward (02.rmsnorm_backward) ---------------------------------------------------------------

@triton.jit
def _rms_bwd_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, partial_ptr, M, H, stride_xm, stride_dym, stride_dxm, eps,
                    ROWS: tl.constexpr, BLOCK_H: tl.constexpr, MEAN_TERM: tl.constexpr):
    # Kernel 1 (as the reference's): dx, and one fp32 partial sum of dweight per program.
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
        if MEAN_TERM:
            dx = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / H))
        else:  # BUG: dx = rstd * g; rstd depends on x too, and the term - xhat * mean(g * xhat) is missing
            dx = rstd * g
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


def _rmsnorm_backward(x, weight, dy, eps, *, mean_term=True, torch_sum=False):
    """(dx, dweight) in two kernels; with no keyword, a correct rmsnorm_backward(x, weight, dy, eps)."""
    M, H = x.shape
    dx = torch.empty((M, H), dtype=x.dtype, device=x.device)
    programs = min(M, 8)
    partial = torch.empty((programs, H), dtype=torch.float32, device=x.device)
    _rms_bwd_kernel[(programs,)](x, weight, dy, dx, partial, M, H, x.stride(0), dy.stride(0), dx.stride(0),
                                 eps, ROWS=triton.cdiv(M, programs), BLOCK_H=triton.next_power_of_2(H),
                                 MEAN_TERM=mean_term)
    if torch_sum:  # BUG: dweight reduced by torch outside Triton, not by a second kernel
        return dx, partial.sum(0).to(weight.dtype)
    dw = torch.empty((H,), dtype=weight.dtype, device=weight.device)
    _sum_partials_kernel[(triton.cdiv(H, 256),)](partial, dw, programs, H, BLOCK=256)
    return dx, dw


def _rmsnorm_backward_with(**bug):
    return lambda x, weight, dy, eps: _rmsnorm_backward(x, weight, dy, eps, **bug)


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


@pytest.mark.parametrize("exercise, fn", [(RMS, _rmsnorm), (BWD, _rmsnorm_backward)],
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
# Planted bugs: wrong formulas, named
# =========================================================================================================

@pytest.mark.parametrize("exercise, fn, named, not_named", [
    (RMS, _rmsnorm_with(eps_inside=False),
     ["differ from the reference", "likely cause: eps added after the square root"],
     ["weight is not applied", "block size"]),
    (RMS, _rmsnorm_with(weight_applied=False), ["likely cause: the weight is not applied"],
     ["eps added", "block size"]),
    (RMS, _rmsnorm_with(mean_over_h=False), ["divides by the block size"], ["eps added", "weight is not applied"]),
    (LN, _layernorm_with(bessel=True), ["likely cause: the variance divides by H - 1"], ["bias is not added"]),
    (LN, _layernorm_with(add_bias=False), ["likely cause: the bias is not added"], ["H - 1"]),
], ids=["rmsnorm-eps-after-sqrt", "rmsnorm-no-weight", "rmsnorm-mean-over-block-size",
        "layernorm-unbiased-variance", "layernorm-no-bias"])
def test_wrong_formula_is_named(exercise, fn, named, not_named):
    r = check(exercise, fn, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    for phrase in named:
        assert phrase in r.message
    for phrase in not_named:  # and no other wrong formula
        assert phrase not in r.message


# =========================================================================================================
# Planted bugs: RMSNorm
# =========================================================================================================

def test_unmasked_tail_store_is_an_out_of_bounds_write():
    r = check(RMS, _rmsnorm_with(mask_store=False), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "out-of-bounds write" in r.message
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:  # a power-of-two H has no tail: only the other widths fail
        width = int(line.split()[1].split("x")[1].rstrip(","))
        assert width & (width - 1), line


@pytest.mark.parametrize("exercise", [RMS, REPAIR])
def test_low_precision_accumulator_fails_precision_naming_the_growth(exercise):
    r = check(exercise, _lowp_acc_rmsnorm, criteria=["precision"])["precision"]
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
    return check(RMS, _two_pass_rmsnorm, criteria=QUICK)


def test_two_pass_kernel_is_correct_precise_and_fused(two_pass_report):
    for r in two_pass_report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
    assert two_pass_report["fusion"].figures["kernel_launches"] == 1


@pytest.mark.gpu
def test_two_pass_kernel_reaches_a_smaller_fraction_of_peak_than_one_pass(performance_of):
    """The second read of x costs bandwidth: only a GPU can tell."""
    two = performance_of(RMS, _two_pass_rmsnorm)
    one = performance_of(RMS, reference_rmsnorm)
    assert "fraction_of_peak" in two.figures, two.message
    assert "fraction_of_peak" in one.figures, one.message
    assert two.figures["fraction_of_peak"] < one.figures["fraction_of_peak"], (two.message, one.message)
    # Not a failing grade: a correct one-kernel version whose second read L2 partly serves (0.70 of copy on an
    # H100, 0.80 on an H200, whose L2 is larger); the unfused eager version is the one that must fail.
    assert one.status == "passed", one.message


# =========================================================================================================
# Planted bugs: add + RMSNorm
# =========================================================================================================

def test_norm_of_x_instead_of_sum_is_named():
    r = check(ADD, _add_norm_of_x, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "likely cause: x is normalised instead of the sum" in r.message
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:
        assert "normed: " in line and "new_residual: " not in line, line  # the sum itself is stored right


def test_single_output_is_reported_as_the_wrong_kind():
    r = check(ADD, _one_output_add_rmsnorm, criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "add_rmsnorm returned Tensor" in r.message
    assert "expected a tuple of 2 tensors (normed, new_residual)" in r.message


def test_add_then_norm_in_two_kernels_fails_fusion():
    r = check(ADD, _two_kernels_add_rmsnorm, criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "launched 2 kernels" in r.message
    assert "at most 1 allowed" in r.message
    assert "torch operations" not in r.message
    assert r.figures["kernel_launches"] == 2


# =========================================================================================================
# Planted bugs: LayerNorm
# =========================================================================================================

def test_one_line_variance_fails_precision_with_the_cancellation_note():
    r = check(LN, _layernorm_with(centred_var=False), criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "float32, shape" in r.message and "above the bound" in r.message
    assert "E[x^2] - E[x]^2" in r.message
    assert "mean 300" in r.message


# =========================================================================================================
# Planted bugs: RMSNorm backward
# =========================================================================================================

def test_dx_without_mean_term_fails_on_dx():
    r = check(BWD, _rmsnorm_backward_with(mean_term=False), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    lines = _failure_lines(r.message)
    assert lines, r.message
    for line in lines:
        assert "dx: " in line and "differ from the reference" in line, line
        assert "dweight: " not in line, line  # dweight is computed right


def test_dweight_reduced_with_torch_fails_fusion_naming_the_op():
    r = check(BWD, _rmsnorm_backward_with(torch_sum=True), criteria=["fusion"])["fusion"]
    assert r.status == "failed"
    assert "torch operations outside the Triton kernel" in r.message
    assert "torch sum" in r.message
    assert r.figures["triton_launches"] == 1


# =========================================================================================================
# stderr
# =========================================================================================================

def test_nothing_reaches_stderr(capfd):
    capfd.readouterr()  # drop anything earlier
    failing = check(RMS, _rmsnorm_with(mask_store=False), criteria=["correctness"])
    passing = check(LN, reference_layernorm, criteria=["fusion"])
    captured = capfd.readouterr()
    assert captured.err == ""
    assert failing["correctness"].status == "failed"
    assert passing["fusion"].status == "passed"
