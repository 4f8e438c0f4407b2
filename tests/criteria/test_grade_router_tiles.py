"""The autograder against planted bugs in notebook 05's router and its FlashAttention-2 loop in plain torch.

05.moe_router: the reference passes; a router that does not renormalise, one that breaks ties towards the higher
index, and one that routes in two launches each fail the criterion meant to catch them, with the mistake named.
05.flash_attention_torch: the tiled loop passes correctness, precision and memory; softmax(q kᵀ) v in one shot
is correct but fails memory, its N x N scores named; the grader's largest-tensor meter counts what it should.
"""

from __future__ import annotations

import math

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import config
from autograder import specs as registry
from autograder.criteria import kernel
from autograder.guard.largest import largest_allocation
from autograder.specs.streaming_torch import attention_naive, attention_scores

import torch
import triton
import triton.language as tl

from kernels import flash_attention_torch as fat
from kernels import moe_router as mr

ROUTER, TILED = "05.moe_router", "05.flash_attention_torch"


def _grade(exercise: str, criterion: str, fn):
    return kernel.GRADERS[criterion](registry.get(exercise), fn, config.load())


# =========================================================================================================
# 05.moe_router
# =========================================================================================================

@triton.jit
def _router_kernel(x_ptr, w_ptr, i_ptr, T, E, stride_xt, stride_xe, K: tl.constexpr, K_PAD: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, RENORMALISE: tl.constexpr,
                   LOWEST_FIRST: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    x = tl.load(x_ptr + rows[:, None] * stride_xt + cols[None, :] * stride_xe,
                mask=(rows[:, None] < T) & (cols[None, :] < E), other=-float("inf")).to(tl.float32)
    x = tl.where(rows[:, None] < T, x, 0.0)
    row_max = tl.max(x, axis=1)
    total = tl.sum(tl.exp(x - row_max[:, None]), axis=1)  # the softmax's sum over every expert
    slots = tl.arange(0, K_PAD)
    top = tl.full([BLOCK_T, K_PAD], -float("inf"), dtype=tl.float32)
    idx = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
    for j in tl.static_range(K):
        value = tl.max(x, axis=1)
        if LOWEST_FIRST:
            best = tl.argmax(x, axis=1, tie_break_left=True)
        else:  # BUG when off: of equal logits the highest index is taken first
            best = tl.max(tl.where(x == value[:, None], cols[None, :], -1), axis=1)
        top = tl.where(slots[None, :] == j, value[:, None], top)
        idx = tl.where(slots[None, :] == j, best[:, None], idx)
        x = tl.where(cols[None, :] == best[:, None], -float("inf"), x)
    e = tl.where(slots[None, :] < K, tl.exp(top - row_max[:, None]), 0.0)
    if RENORMALISE:
        weights = e / tl.sum(e, axis=1)[:, None]
    else:  # BUG: the top k probabilities of the full softmax, not summing to 1
        weights = e / total[:, None]
    out = rows[:, None] * K + slots[None, :]
    keep = (rows[:, None] < T) & (slots[None, :] < K)
    tl.store(w_ptr + out, weights, mask=keep)
    tl.store(i_ptr + out, idx.to(tl.int64), mask=keep)


def _router(renormalise=True, lowest_first=True, launches=1):
    def moe_router(logits, k):
        T, E = logits.shape
        weights = torch.empty((T, k), dtype=torch.float32, device=logits.device)
        indices = torch.empty((T, k), dtype=torch.int64, device=logits.device)
        cuts = [round(T * i / launches) for i in range(launches + 1)]
        for lo, hi in zip(cuts, cuts[1:]):  # BUG when launches > 1: one launch per share of the tokens
            if hi > lo:
                _router_kernel[(triton.cdiv(hi - lo, 16),)](
                    logits[lo:hi], weights[lo:hi], indices[lo:hi], hi - lo, E, logits.stride(0), logits.stride(1),
                    K=k, K_PAD=triton.next_power_of_2(k), BLOCK_T=16, BLOCK_E=triton.next_power_of_2(E),
                    RENORMALISE=renormalise, LOWEST_FIRST=lowest_first)
        return weights, indices

    return moe_router


def test_the_reference_router_passes_correctness_and_fusion():
    for criterion in ("correctness", "fusion"):
        r = _grade(ROUTER, criterion, mr.moe_router)
        assert r.status == "passed", (criterion, r.message)


def test_the_planted_router_without_its_bugs_passes():
    r = _grade(ROUTER, "correctness", _router())
    assert r.status == "passed", r.message


def test_weights_not_renormalised_fail_and_are_named():
    r = _grade(ROUTER, "correctness", _router(renormalise=False))
    assert r.status == "failed"
    assert "weights" in r.message and "not renormalised" in r.message


def test_ties_broken_towards_the_higher_index_fail_on_the_tie_cases_only():
    r = _grade(ROUTER, "correctness", _router(lowest_first=False))
    assert r.status == "failed"
    failing = [ln for ln in r.message.splitlines() if ln.startswith("shape ")]
    assert failing and all("ties" in ln for ln in failing), r.message
    assert "lowest index first" in r.message


def test_a_router_in_two_launches_fails_fusion():
    r = _grade(ROUTER, "fusion", _router(launches=2))
    assert r.status == "failed" and "launched 2 kernels" in r.message, r.message


def test_the_graders_inputs_hold_no_tie_except_in_the_tie_cases():
    ex = registry.get(ROUTER)
    gen = torch.Generator().manual_seed(0)
    for shape in ex.shapes:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            logits = ex.make_inputs(shape, dtype, "cpu", gen)["logits"].float()
            distinct = all(len(set(row.tolist())) == len(row) for row in logits)
            assert distinct != ("ties" in shape.layout), (shape, dtype)


# =========================================================================================================
# 05.flash_attention_torch
# =========================================================================================================

def _one_shot(q, k, v, causal):
    """softmax(q kᵀ / sqrt(D)) v in one go, in float32: right, and holding the N x N scores."""
    s = attention_scores(q.float(), k.float(), causal)
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype), torch.logsumexp(s, dim=-1)


def test_the_tiled_loop_passes_every_criterion():
    for criterion in ("correctness", "precision", "memory"):
        r = _grade(TILED, criterion, fat.flash_attention_torch)
        assert r.status == "passed", (criterion, r.message)


def test_attention_in_one_shot_is_right_but_fails_the_tiling_check():
    assert _grade(TILED, "correctness", _one_shot).status == "passed"
    r = _grade(TILED, "memory", _one_shot)
    assert r.status == "failed"
    assert "the N x N float32 scores" in r.message and "it is being materialised" in r.message


def test_query_blocks_against_every_key_at_once_fail_the_tiling_check():
    r = _grade(TILED, "memory", lambda q, k, v, causal: fat.flash_attention_torch(q, k, v, causal, 256, 4096))
    assert r.status == "failed" and "largest tensor" in r.message


def test_the_largest_tensor_meter_sees_new_storages_not_views():
    x = torch.randn(1000)
    with torch.no_grad():
        _, largest = largest_allocation(lambda: (x[:10].clone(), x.view(10, 100), x.add_(1), torch.empty(300)))
    assert largest == 300 * 4
    n = 512
    q = torch.randn(1, 1, n, 16)
    assert largest_allocation(lambda: attention_naive(q, q, q))[1] >= 4 * n * n
    assert largest_allocation(lambda: fat.flash_attention_torch(q, q, q))[1] < 4 * n * n / 16
    assert math.isclose(largest_allocation(lambda: torch.zeros(7, dtype=torch.float64))[1], 56)
