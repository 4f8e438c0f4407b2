"""The autograder against planted bugs in notebook 03: sibling reductions, fused QKV, multi-tensor AdamW.

Each submission differs from a correct one by one typical mistake; each test checks that the grader fails
the right criterion and names the mistake. Without a GPU the kernels run in Triton's interpreter, so tests
ask only for the criteria they need; performance (and bf16) are checked on a GPU by the gpu-marked tests.
"""

from __future__ import annotations

import math

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check, runtime

import torch
import triton
import triton.language as tl

from kernels import multi_tensor_adamw as mta
from kernels import qkv_projection as qkv
from kernels import row_sum_sumsq as rss

STATS, QKV, ADAMW = "03.row_sum_sumsq", "03.qkv_projection", "03.adamw_step"
QUICK = ["correctness", "precision", "fusion"]
REFERENCES = {STATS: rss.row_sum_sumsq, QKV: qkv.qkv_projection, ADAMW: mta.adamw_step}

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="checks the grader's behaviour without a GPU")


@pytest.fixture(scope="module", params=list(REFERENCES), ids=list(REFERENCES))
def reference_report(request):
    return check(request.param, REFERENCES[request.param], criteria=QUICK)


def test_reference_kernels_pass(reference_report):
    for r in reference_report.results:
        assert r.status == "passed", f"{reference_report.exercise} {r.name}: {r.message}"
    assert reference_report["correctness"].figures["failed"] == 0


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
# 03.row_sum_sumsq
# =========================================================================================================

@triton.jit
def _stats_kernel(x_ptr, sum_ptr, sumsq_ptr, N, stride_xm, stride_xn, BLOCK_N: tl.constexpr,
                  UPCAST_FIRST: tl.constexpr, LOW_PRECISION_SUM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0)
        if UPCAST_FIRST:
            xf = x.to(tl.float32)
            sq = xf * xf
        else:  # BUG when set: the square is rounded to x's dtype (fp16: inf past |x| = 256)
            sq = (x * x).to(tl.float32)
            xf = x.to(tl.float32)
        if LOW_PRECISION_SUM:  # BUG when set: the running sums are rounded to x's dtype after every add
            acc = (acc + xf).to(x.dtype).to(tl.float32)
            acc_sq = (acc_sq + sq).to(x.dtype).to(tl.float32)
        else:
            acc += xf
            acc_sq += sq
    tl.store(sum_ptr + row, tl.sum(acc, axis=0))
    tl.store(sumsq_ptr + row, tl.sum(acc_sq, axis=0))


def _stats(x, upcast_first=True, low_precision_sum=False, block=1024):
    M, N = x.shape
    s = torch.empty(M, dtype=torch.float32, device=x.device)
    ss = torch.empty(M, dtype=torch.float32, device=x.device)
    _stats_kernel[(M,)](x, s, ss, N, x.stride(0), x.stride(1), BLOCK_N=block, UPCAST_FIRST=upcast_first,
                        LOW_PRECISION_SUM=low_precision_sum)
    return s, ss


def test_one_row_per_program_kernel_passes():
    report = check(STATS, _stats, criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"


def test_squaring_before_the_upcast_is_named():
    r = check(STATS, lambda x: _stats(x, upcast_first=False), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "float16" in r.message and "x * x is computed before upcasting" in r.message, r.message


def test_low_precision_running_sum_fails_precision_naming_the_overflow():
    r = check(STATS, lambda x: _stats(x, low_precision_sum=True, block=64), criteria=["precision"])["precision"]
    assert r.status == "failed"
    assert "float16" in r.message and "left float16's range (65504 at most)" in r.message, r.message
    assert "likely cause" not in r.message, r.message  # not mistaken for the squares-before-upcast bug


@pytest.mark.parametrize("wrong, named", [
    (lambda x: (x.float().sum(-1), x.float().sum(-1).square()), "square of the sum"),
    (lambda x: (x.float().mean(-1), x.float().square().mean(-1)), "means (divided by N)"),
    (lambda x: (x.float().square().sum(-1), x.float().sum(-1)), "swapped"),
], ids=["square-of-sum", "means", "swapped"])
def test_wrong_formulas_are_named(wrong, named):
    r = check(STATS, wrong, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and named in r.message, r.message


def test_outputs_in_the_input_dtype_are_refused():
    r = check(STATS, lambda x: tuple(t.to(x.dtype) for t in _stats(x)), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "dtype is float16, expected float32" in r.message, r.message


def test_two_sibling_kernels_fail_fusion():
    def two_launches(x):
        s, _ = _stats(x)
        _, ss = _stats(x)
        return s, ss

    r = check(STATS, two_launches, criteria=["fusion"])["fusion"]
    assert r.status == "failed" and "launched 2 kernels" in r.message, r.message


# =========================================================================================================
# 03.qkv_projection
# =========================================================================================================

def _qkv_launch(x, w_qkv, kv_width, precision="ieee", acc_dtype=None):
    M, K = x.shape
    N = w_qkv.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4)
    grid = (triton.cdiv(M, 16) * triton.cdiv(N, 32),)
    kernel = _qkv_low_acc_kernel if acc_dtype is not None else qkv._qkv_kernel
    extra = dict(ACC=acc_dtype) if acc_dtype is not None else dict(PRECISION=precision)
    kernel[grid](x, w_qkv, out, M, N, K, x.stride(0), x.stride(1), w_qkv.stride(0), w_qkv.stride(1), out.stride(0),
                 **extra, **cfg)
    return qkv.split_qkv(out, kv_width)


@triton.jit
def _qkv_low_acc_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk, stride_om,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                        ACC: tl.constexpr):
    # BUG: the running sum over K is rounded to ACC (the inputs' dtype) after every block of K.
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for k in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * stride_xm + (k + rk)[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + (k + rk)[:, None] * stride_wk,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = (acc.to(tl.float32) + tl.dot(a, b)).to(ACC)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_small_tile_kernel_passes():
    report = check(QKV, _qkv_launch, criteria=QUICK)
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"


def test_copies_instead_of_views_fail_fusion():
    r = check(QKV, lambda x, w, kv: tuple(t.contiguous() for t in _qkv_launch(x, w, kv)), criteria=["fusion"])["fusion"]
    assert r.status == "failed" and "views (slices) of the one buffer" in r.message, r.message


def test_three_gemm_launches_fail_fusion():
    def three(x, w, kv):
        q = _qkv_launch(x, w, kv)[0]
        k = _qkv_launch(x, w, kv)[1]
        v = _qkv_launch(x, w, kv)[2]
        return q, k, v

    r = check(QKV, three, criteria=["fusion"])["fusion"]
    assert r.status == "failed" and "launched 3 kernels" in r.message, r.message


def test_torch_matmul_fails_fusion():
    r = check(QKV, qkv.qkv_projection_concat, criteria=["fusion"])["fusion"]
    assert r.status == "failed" and "torch operations" in r.message and "no Triton kernel ran" in r.message, r.message


def test_swapped_k_and_v_are_named():
    def swapped(x, w, kv):
        q, k, v = _qkv_launch(x, w, kv)
        return q, v, k

    r = check(QKV, swapped, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "k and v are swapped" in r.message, r.message


def test_fp16_accumulator_fails_precision_naming_the_growth():
    def low(x, w, kv):
        return _qkv_launch(x, w, kv, acc_dtype=tl.float16 if x.dtype == torch.float16 else tl.float32)

    r = check(QKV, low, criteria=["precision"])["precision"]
    assert r.status == "failed" and "float16" in r.message and "grows like" in r.message, r.message


@pytest.mark.gpu
def test_tf32_products_are_named_on_gpu():
    r = check(QKV, lambda x, w, kv: _qkv_launch(x, w, kv, precision="tf32"), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "TF32" in r.message, r.message


# =========================================================================================================
# 03.adamw_step
# =========================================================================================================

def _launch_with(params, grads, exp_avgs, exp_avg_sqs, *, decay, step_size, rsqrt_bc2, beta1, beta2, eps):
    """The reference kernel with its per-step scalars supplied by the caller (to plant formula bugs)."""
    t = mta._tables((params, grads, exp_avgs, exp_avg_sqs), 1)
    if t.n_blocks:
        mta._adamw_kernel[(t.n_blocks,)](t.addr, t.numel, t.block_tensor, t.block_start, t.n_tensors, 0.0, beta1, beta2,
                                         eps, decay, step_size, rsqrt_bc2, DTYPE=tl.float32, BLOCK=mta.ADAMW_BLOCK)


def no_bias_correction(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    _launch_with(params, grads, exp_avgs, exp_avg_sqs, decay=1 - lr * weight_decay, step_size=lr, rsqrt_bc2=1.0,
                 beta1=beta1, beta2=beta2, eps=eps)


def decay_without_lr(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    _launch_with(params, grads, exp_avgs, exp_avg_sqs, decay=1 - weight_decay, step_size=lr / (1 - beta1**step),
                 rsqrt_bc2=1 / math.sqrt(1 - beta2**step), beta1=beta1, beta2=beta2, eps=eps)


def step_off_by_one(params, grads, exp_avgs, exp_avg_sqs, step, *hyper):
    mta.adamw_step(params, grads, exp_avgs, exp_avg_sqs, step + 1, *hyper)


def adam_with_l2(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    g2 = [g + weight_decay * p for p, g in zip(params, grads)]
    mta.adamw_step(params, g2, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, 0.0)


@pytest.mark.parametrize("fn, named", [
    (no_bias_correction, "no bias correction"),
    (decay_without_lr, "not multiplied by lr"),
    (step_off_by_one, "uses step + 1"),
    (adam_with_l2, "Adam with L2"),
], ids=["no-bias-correction", "decay-without-lr", "step-plus-one", "l2"])
def test_wrong_updates_are_named(fn, named):
    r = check(ADAMW, fn, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and named in r.message, r.message


@triton.jit
def _unmasked_tensor_kernel(p_ptr, g_ptr, m_ptr, v_ptr, lr, beta1, beta2, eps, decay, step_size, rsqrt_bc2,
                            BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # BUG: no mask, so the last block of every tensor writes past its end
    mta._adamw_block(p_ptr, g_ptr, m_ptr, v_ptr, offs, None, lr, beta1, beta2, eps, decay, step_size, rsqrt_bc2)


def unmasked_per_tensor(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        if p.numel():
            _unmasked_tensor_kernel[(triton.cdiv(p.numel(), 256),)](
                p, g, m, v, lr, beta1, beta2, eps, 1 - lr * weight_decay, lr / (1 - beta1**step),
                1 / math.sqrt(1 - beta2**step), BLOCK=256)


def test_one_launch_per_tensor_is_correct_but_fails_fusion_naming_the_growth():
    report = check(ADAMW, mta.adamw_step_per_tensor, criteria=["correctness", "fusion"])
    assert report["correctness"].status == "passed", report["correctness"].message
    msg = report["fusion"].message
    assert report["fusion"].status == "failed" and "grows with the number of tensors" in msg, msg
    assert "4 tensors took 4" in msg and "64 took 64" in msg, msg


def test_unmasked_tail_is_an_out_of_bounds_write_next_to_a_named_tensor():
    """Named either by the guard check after the call (the write past params[i]) or, in the interpreter, by its
    bounds check as the unmasked load runs (past the end of p_ptr)."""
    r = check(ADAMW, unmasked_per_tensor, criteria=["correctness"])["correctness"]
    assert r.status == "failed", r.message
    assert "out-of-bounds write next to params[" in r.message or (
        "out-of-bounds load" in r.message and "past the end of p_ptr" in r.message and "mask" in r.message), r.message


def test_returning_new_tensors_is_not_an_update_in_place():
    def functional(params, grads, exp_avgs, exp_avg_sqs, step, lr, *rest):
        return [p - lr * g for p, g in zip(params, grads)]

    r = check(ADAMW, functional, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "not updated in place (it returned list)" in r.message, r.message


def test_writing_into_the_gradients_is_caught():
    def scribbles(params, grads, *rest):
        mta.adamw_step(params, grads, *rest)
        if grads and grads[-1].numel():
            grads[-1].fill_(0.0)

    r = check(ADAMW, scribbles, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "was modified: adamw_step may only read grads" in r.message, r.message


def test_torch_update_fails_correctness_and_fusion():
    report = check(ADAMW, mta.adamw_step_eager, criteria=["correctness", "fusion"])
    msg = report["correctness"].message
    assert report["correctness"].status == "failed" and "updated it with torch (" in msg and "lerp_" in msg, msg
    msg = report["fusion"].message
    assert report["fusion"].status == "failed" and "no Triton kernel ran" in msg and "torch" in msg, msg


def test_low_precision_arithmetic_fails_precision():
    def via_bf16(params, grads, exp_avgs, exp_avg_sqs, step, *hyper):
        mta.adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, *hyper)
        for p in params:  # the stored parameters lose everything below bf16's 8 bits
            p.copy_(p.to(torch.bfloat16))

    r = check(ADAMW, via_bf16, criteria=["precision"])["precision"]
    assert r.status == "failed" and "the update of params" in r.message, r.message


def test_wrong_signature_is_refused_clearly():
    r = check(ADAMW, lambda params, grads, step: None, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "grader calls adamw_step(params, grads, exp_avgs" in r.message, r.message


def test_nothing_reaches_stderr(capfd):
    check(ADAMW, step_off_by_one, criteria=["correctness"])
    check(STATS, lambda x: _stats(x, upcast_first=False), criteria=["correctness"])
    assert capfd.readouterr().err == ""
