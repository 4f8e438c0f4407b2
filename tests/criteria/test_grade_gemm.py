"""The autograder against planted bugs in notebook 04: a GEMM with a fused epilogue, and a fused SwiGLU.

Each submission differs from a correct one by one typical mistake; each test checks that the grader fails
the right criterion and names the mistake. Without a GPU the kernels run in Triton's interpreter, so tests
ask only for the criteria they need; performance, bf16 and TF32 (the interpreter multiplies float32 exactly
whatever input_precision says) are checked on a GPU by the gpu-marked tests.
"""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check, runtime

import torch
import triton
import triton.language as tl

from kernels import gemm_epilogue as ge
from kernels import swiglu as sw
from kernels.matmul import dot_precision, grouped_tile

EPILOGUE, SWIGLU = "04.gemm_gelu_residual", "04.swiglu"
QUICK = ["correctness", "precision", "fusion"]
REFERENCES = {EPILOGUE: ge.gemm_gelu_residual, SWIGLU: sw.swiglu}
TMA_PATHS = {EPILOGUE: ge.gemm_gelu_residual_tma, SWIGLU: sw.swiglu_tma}

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


@pytest.fixture(scope="module", params=list(REFERENCES), ids=list(REFERENCES))
def reference_report(request):
    return check(request.param, REFERENCES[request.param], criteria=QUICK)


def test_reference_kernels_pass(reference_report):
    for r in reference_report.results:
        assert r.status == "passed", f"{reference_report.exercise} {r.name}: {r.message}"
    assert reference_report["correctness"].figures["failed"] == 0


@pytest.mark.parametrize("exercise", list(TMA_PATHS))
def test_tma_launchers_pass(exercise):
    # Without Hopper (or in the interpreter) they fall back to the pointer kernels; on a GPU this grades the
    # TMA kernels themselves wherever their conditions hold.
    report = check(exercise, TMA_PATHS[exercise], criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{exercise} {r.name}: {r.message}"


@needs_no_gpu
@pytest.mark.parametrize("exercise", list(REFERENCES))
def test_reference_performance_is_skipped_without_gpu(exercise):
    r = check(exercise, REFERENCES[exercise], criteria=["performance"])["performance"]
    assert r.status == "skipped" and "no GPU" in r.message


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", list(REFERENCES))
def test_reference_kernels_pass_performance_on_gpu(exercise):
    r = check(exercise, REFERENCES[exercise], criteria=["performance"])["performance"]
    assert r.status == "passed", r.message
    assert r.figures["fraction_of_peak"] >= r.figures["threshold"]


# =========================================================================================================
# 04.gemm_gelu_residual
# =========================================================================================================

@triton.jit
def _gemm_kernel(x_ptr, w_ptr, b_ptr, r_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn,
                 stride_b, stride_rm, stride_rn, stride_om,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 PRECISION: tl.constexpr, EPILOGUE: tl.constexpr, K_LOOP: tl.constexpr,
                 LOW_PRECISION_ACC: tl.constexpr, ROUND_BEFORE_GELU: tl.constexpr, GELU_ERF: tl.constexpr,
                 RESIDUAL_INSIDE: tl.constexpr, BIAS_AFTER: tl.constexpr, NO_BIAS: tl.constexpr,
                 MASK_STORE: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :] * stride_xk
    w_tile = w_ptr + rk[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # BUG when K_LOOP is off: only the first BLOCK_K of the reduction is summed
    for k in range(0, K if K_LOOP else 1, BLOCK_K):
        a = tl.load(x_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(w_tile, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        if LOW_PRECISION_ACC:  # BUG when set: the running sum is rounded to x's dtype after every K step
            acc = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
        x_tile += BLOCK_K * stride_xk
        w_tile += BLOCK_K * stride_wk
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    out = out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :]
    if EPILOGUE:
        bias = tl.load(b_ptr + rn * stride_b, mask=rn < N, other=0.0).to(tl.float32)
        res = tl.load(r_ptr + rm.to(tl.int64)[:, None] * stride_rm + rn[None, :] * stride_rn, mask=mask,
                      other=0.0).to(tl.float32)
        u = acc
        if not (BIAS_AFTER or NO_BIAS):  # BUG when either is set: no bias here
            u += bias[None, :]
        if RESIDUAL_INSIDE:  # BUG when set: gelu(x @ w + b + r)
            u += res
        if ROUND_BEFORE_GELU:  # BUG when set: x @ w + b rounded to x's dtype, a second rounding
            u = u.to(x_ptr.dtype.element_ty).to(tl.float32)
        if GELU_ERF:  # BUG when set: the exact (erf) GELU, not the tanh approximation
            y = 0.5 * u * (1.0 + tl.math.erf(u * 0.7071067811865476))
        else:
            y = ge.gelu_tanh(u)
        if BIAS_AFTER:
            y += bias[None, :]
        if not RESIDUAL_INSIDE:
            y += res
    else:  # the GEMM alone, for two-kernel versions
        y = acc
    if MASK_STORE:
        tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:  # BUG: the edge tiles write past the last row (and into the next row past the last column)
        tl.store(out, y.to(out_ptr.dtype.element_ty))


def _gemm(x, w, b=None, r=None, *, precision="default", out_dtype=None, epilogue=True, k_loop=True,
          low_precision_acc=False, round_before_gelu=False, gelu_erf=False, residual_inside=False,
          bias_after=False, no_bias=False, mask_store=True):
    """The reference kernel's tiling, with one bug switched on by a keyword. epilogue=False: just x @ w."""
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty((M, N), dtype=out_dtype or x.dtype, device=x.device)
    cfg = {k: v for k, v in ge.gemm_launch_settings(M, N, K, x.element_size()).items() if k != "HALVES"}
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    b = x if b is None else b  # not read without the epilogue
    r = x if r is None else r
    _gemm_kernel[grid](x, w, b, r, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                       b.stride(0), r.stride(0), r.stride(1), out.stride(0),
                       PRECISION=dot_precision(x.dtype) if precision == "default" else precision,
                       EPILOGUE=epilogue, K_LOOP=k_loop, LOW_PRECISION_ACC=low_precision_acc,
                       ROUND_BEFORE_GELU=round_before_gelu, GELU_ERF=gelu_erf,
                       RESIDUAL_INSIDE=residual_inside, BIAS_AFTER=bias_after, NO_BIAS=no_bias,
                       MASK_STORE=mask_store, **cfg)
    return out


def _epilogue_with(**bug):
    """A gemm_gelu_residual submission: the planted kernel with the bug named by a keyword of _gemm."""
    return lambda x, w, b, r: _gemm(x, w, b, r, **bug)


@triton.jit
def _epilogue_only_kernel(y_ptr, b_ptr, r_ptr, out_ptr, M, N, stride_ym, stride_b, stride_rm, stride_rn,
                          stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # The epilogue as a kernel of its own: y = x @ w is read back from memory.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    y = tl.load(y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], mask=mask, other=0.0)
    bias = tl.load(b_ptr + rn * stride_b, mask=rn < N, other=0.0).to(tl.float32)
    res = tl.load(r_ptr + rm.to(tl.int64)[:, None] * stride_rm + rn[None, :] * stride_rn, mask=mask,
                  other=0.0).to(tl.float32)
    out = (ge.gelu_tanh(y.to(tl.float32) + bias[None, :]) + res).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rm.to(tl.int64)[:, None] * stride_om + rn[None, :], out, mask=mask)


def _epilogue_only(y, b, r):
    M, N = y.shape
    out = torch.empty((M, N), dtype=r.dtype, device=r.device)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    _epilogue_only_kernel[grid](y, b, r, out, M, N, y.stride(0), b.stride(0), r.stride(0), r.stride(1),
                                out.stride(0), BLOCK_M=64, BLOCK_N=64)
    return out


def test_summing_only_the_first_k_tile_fails_correctness_without_a_wrong_diagnosis():
    r = check(EPILOGUE, _epilogue_with(k_loop=False), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "elements differ from the reference" in r.message, r.message
    assert "likely cause" not in r.message, r.message  # no epilogue formula explains a truncated sum


def test_unmasked_store_is_an_out_of_bounds_write():
    # Ragged shapes: the edge tiles write past the output's last row, into the grader's guard. The
    # precision shapes (32 x 64) are whole tiles, so only correctness sees it.
    r = check(EPILOGUE, _epilogue_with(mask_store=False), criteria=["correctness"])["correctness"]
    assert r.status == "failed", r.message
    assert "out-of-bounds write" in r.message and "past the end of the output" in r.message, r.message
    assert "a store without a correct mask?" in r.message, r.message


def test_float32_output_for_float16_inputs_is_refused():
    r = check(EPILOGUE, _epilogue_with(out_dtype=torch.float32), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "output dtype is float32, expected float16" in r.message, r.message


def test_low_precision_accumulator_fails_precision_naming_the_growth():
    # float16: the running sum loses bits at each of K / BLOCK_K steps (64 steps at K = 16384); float32
    # inputs are unaffected. Correctness sees it only now and then (a few elements past 2e-3), so precision
    # is the criterion that must catch it.
    r = check(EPILOGUE, _epilogue_with(low_precision_acc=True), criteria=["precision"])["precision"]
    assert r.status == "failed", r.message
    assert "float16" in r.message and "grows like K^" in r.message, r.message
    assert "float32, shape" not in r.message, r.message
    assert "Keep one float32 accumulator" in r.message, r.message


def test_rounding_before_the_gelu_passes_precision_as_torch_compile_does():
    # x @ w + b rounded to float16 before the GELU: two roundings, which is what torch.compile of the eager code
    # does (its GEMM writes y in the inputs' dtype; 1.24 times one rounding on an H100). The bound lets PyTorch's
    # own route through (tests/specs/test_bounds.py), so this passes, below the bound at every K.
    r = check(EPILOGUE, _epilogue_with(round_before_gelu=True), criteria=["precision"])["precision"]
    assert r.status == "passed", r.message
    for k in (256, 1024, 4096, 16384):
        assert r.figures[f"rel_err_float16@{k}"] <= r.figures[f"bound_float16@{k}"]


def test_torch_matmul_with_a_triton_epilogue_fails_fusion():
    # The output is written by the Triton epilogue, so correctness passes; fusion sees the torch product.
    r = check(EPILOGUE, lambda x, w, b, r: _epilogue_only(x @ w, b, r), criteria=["fusion"])["fusion"]
    assert r.status == "failed", r.message
    assert "computes with torch operations outside the Triton kernel (torch mm)" in r.message, r.message


def test_epilogue_as_a_second_kernel_is_correct_but_fails_fusion():
    def two_kernels(x, w, b, r):
        return _epilogue_only(_gemm(x, w, out_dtype=torch.float32, epilogue=False), b, r)

    report = check(EPILOGUE, two_kernels, criteria=["correctness", "fusion"])
    assert report["correctness"].status == "passed", report["correctness"].message
    msg = report["fusion"].message
    assert report["fusion"].status == "failed", msg
    assert "launched 2 kernels (_gemm_kernel, _epilogue_only_kernel); at most 1 allowed" in msg, msg


# =========================================================================================================
# 04.swiglu
# =========================================================================================================

@triton.jit
def _swiglu_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K, stride_xm, stride_xk, stride_gk, stride_gn,
                   stride_uk, stride_un, stride_hm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr,
                   SWAP_GATE_UP: tl.constexpr, SIGMOID_ONLY: tl.constexpr, ROUND_GATE: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :] * stride_xk
    g_tile = wg_ptr + rk[:, None] * stride_gk + rn.to(tl.int64)[None, :] * stride_gn
    u_tile = wu_ptr + rk[:, None] * stride_uk + rn.to(tl.int64)[None, :] * stride_un
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        w_mask = (rk[:, None] < K - k) & (rn[None, :] < N)
        a = tl.load(x_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        gate = tl.dot(a, tl.load(g_tile, mask=w_mask, other=0.0), gate, input_precision=PRECISION)
        up = tl.dot(a, tl.load(u_tile, mask=w_mask, other=0.0), up, input_precision=PRECISION)
        x_tile += BLOCK_K * stride_xk
        g_tile += BLOCK_K * stride_gk
        u_tile += BLOCK_K * stride_uk
    if SWAP_GATE_UP:  # BUG when set: silu(x @ w_up) * (x @ w_gate)
        gate, up = up, gate
    if ROUND_GATE:  # BUG when set: the gate rounded to x's dtype before the SiLU, a second rounding
        gate = gate.to(x_ptr.dtype.element_ty).to(tl.float32)
    if SIGMOID_ONLY:  # BUG when set: sigmoid(gate) * up, the gate's own factor forgotten
        h = tl.sigmoid(gate) * up
    else:
        h = tl.fdiv(gate, 1.0 + tl.exp(-gate)) * up
    tl.store(h_ptr + rm.to(tl.int64)[:, None] * stride_hm + rn[None, :], h.to(h_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _swiglu(x, w_gate, w_up, *, precision="default", swap_gate_up=False, sigmoid_only=False,
            round_gate=False):
    """The reference kernel's tiling, with one bug switched on by a keyword."""
    M, K = x.shape
    N = w_gate.shape[1]
    h = torch.empty((M, N), dtype=x.dtype, device=x.device)
    cfg = sw.swiglu_launch_settings(M, N, K, x.element_size())
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _swiglu_kernel[grid](x, w_gate, w_up, h, M, N, K, x.stride(0), x.stride(1), w_gate.stride(0),
                         w_gate.stride(1), w_up.stride(0), w_up.stride(1), h.stride(0),
                         PRECISION=dot_precision(x.dtype) if precision == "default" else precision,
                         SWAP_GATE_UP=swap_gate_up, SIGMOID_ONLY=sigmoid_only, ROUND_GATE=round_gate, **cfg)
    return h


def _swiglu_with(**bug):
    """A swiglu submission: the planted kernel with the bug named by a keyword of _swiglu."""
    return lambda x, w_gate, w_up: _swiglu(x, w_gate, w_up, **bug)


@triton.jit
def _silu_mul_kernel(g_ptr, u_ptr, h_ptr, M, N, stride_gm, stride_um, stride_hm, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    row = rm.to(tl.int64)[:, None]
    g = tl.load(g_ptr + row * stride_gm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_um + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    h = tl.fdiv(g, 1.0 + tl.exp(-g)) * u
    tl.store(h_ptr + row * stride_hm + rn[None, :], h.to(h_ptr.dtype.element_ty), mask=mask)


def _swiglu_three_kernels(x, w_gate, w_up):
    """Two GEMM launches (float32 results), then SiLU * up: right, but g and u make a trip through memory."""
    g = _gemm(x, w_gate, out_dtype=torch.float32, epilogue=False)
    u = _gemm(x, w_up, out_dtype=torch.float32, epilogue=False)
    M, N = g.shape
    h = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    _silu_mul_kernel[grid](g, u, h, M, N, g.stride(0), u.stride(0), h.stride(0), BLOCK_M=64, BLOCK_N=64)
    return h


def test_gate_rounded_before_the_silu_passes_precision_as_torch_compile_does():
    # silu(round(g)) * u: two roundings, fewer than torch.compile of the eager code makes (it rounds g and u at
    # the GEMMs' outputs: 1.9 to 2.1 times one rounding on an H100), so within the bound that lets PyTorch through.
    r = check(SWIGLU, _swiglu_with(round_gate=True), criteria=["precision"])["precision"]
    assert r.status == "passed", r.message


def test_two_gemms_and_an_elementwise_kernel_fail_fusion():
    r = check(SWIGLU, _swiglu_three_kernels, criteria=["fusion"])["fusion"]
    assert r.status == "failed", r.message
    msg = r.message
    assert "launched 3 kernels (_gemm_kernel, _gemm_kernel, _silu_mul_kernel); at most 1 allowed" in msg, msg


# =========================================================================================================
# Both exercises: the planted kernels pass without a bug; their wrong formulas are named
# =========================================================================================================

PLANTED = {EPILOGUE: _epilogue_with, SWIGLU: _swiglu_with}  # exercise -> (keyword of the bug -> submission)


@pytest.mark.parametrize("exercise", list(PLANTED))
def test_planted_kernel_without_a_bug_passes(exercise):
    report = check(exercise, PLANTED[exercise](), criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"


@pytest.mark.parametrize("exercise, bug, named", [
    (EPILOGUE, "gelu_erf", "likely cause: GELU's erf form"),
    (EPILOGUE, "residual_inside", "likely cause: the residual went inside the GELU"),
    (EPILOGUE, "bias_after", "likely cause: the bias was added after the GELU"),
    (EPILOGUE, "no_bias", "likely cause: the bias b is missing"),
    (SWIGLU, "swap_gate_up", "likely cause: gate and up are swapped"),
    (SWIGLU, "sigmoid_only", "likely cause: sigmoid(gate) * up"),
], ids=["gemm_gelu_residual-gelu-erf", "gemm_gelu_residual-residual-inside", "gemm_gelu_residual-bias-after",
        "gemm_gelu_residual-no-bias", "swiglu-gate-up-swapped", "swiglu-sigmoid-not-silu"])
def test_wrong_formulas_are_named(exercise, bug, named):
    r = check(exercise, PLANTED[exercise](**{bug: True}), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and named in r.message, r.message


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", list(PLANTED))
def test_tf32_products_are_named_on_gpu(exercise):
    # The interpreter multiplies float32 exactly whatever input_precision says: TF32 shows on a GPU only.
    r = check(exercise, PLANTED[exercise](precision="tf32"), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "TF32" in r.message, r.message


def test_nothing_reaches_stderr(capfd):
    check(EPILOGUE, _epilogue_with(mask_store=False), criteria=["correctness"])
    check(SWIGLU, _swiglu_with(sigmoid_only=True), criteria=["correctness"])
    assert capfd.readouterr().err == ""
