"""The autograder against planted bugs in notebook 02's fused dropout + add + RMSNorm (02.dropout_add_rmsnorm).

The planted kernel below is correct with every switch off; each switch plants one mistake a student makes with a
dropout drawn in the kernel: every row drawing the same mask, kept values left unscaled, and a mask drawn by torch
in the launcher and loaded by the kernel. Without a GPU the kernels run in Triton's interpreter, so each test asks
only for the criteria it needs.
"""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check
from autograder.criteria import keep_mask

import torch
import triton
import triton.language as tl

from autograder.specs import get
from kernels.dropout_add_rmsnorm import dropout_add_rmsnorm as reference

DROP = "02.dropout_add_rmsnorm"


@triton.jit
def _planted_kernel(x_ptr, y_ptr, w_ptr, out_ptr, h_ptr, keep_ptr, H, stride_xm, stride_ym, stride_om, stride_hm, p,
                    seed, eps, BLOCK_H: tl.constexpr, SAME_MASK: tl.constexpr, UNSCALED: tl.constexpr,
                    LOAD_MASK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * stride_ym + cols, mask=mask, other=0.0).to(tl.float32)
    if LOAD_MASK:  # BUG: a mask tensor, drawn by torch and read from HBM
        keep = tl.load(keep_ptr + row * H + cols, mask=mask, other=0) != 0
    elif SAME_MASK:  # BUG: the offsets number the columns only, so every row draws the same mask
        keep = tl.rand(seed, cols) > p
    else:
        keep = tl.rand(seed, row * H + cols) > p
    scale = 1.0 if UNSCALED else 1.0 / (1.0 - p)  # BUG when UNSCALED: the kept values are not scaled up
    h = (x + tl.where(keep, y * scale, 0.0)).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * stride_hm + cols, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_om + cols, (hf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def planted(same_mask=False, unscaled=False, torch_mask=False):
    def dropout_add_rmsnorm(x, y, weight, p, seed, eps):
        M, H = x.shape
        out, h = torch.empty_like(x), torch.empty_like(x)
        keep = x  # unused unless the mask comes from torch
        if torch_mask:
            gen = torch.Generator().manual_seed(seed)
            keep = (torch.rand(M, H, generator=gen) > p).to(torch.uint8).to(x.device)
        _planted_kernel[(M,)](x, y, weight, out, h, keep, H, x.stride(0), y.stride(0), out.stride(0), h.stride(0), p,
                              seed, eps, BLOCK_H=triton.next_power_of_2(H), SAME_MASK=same_mask, UNSCALED=unscaled,
                              LOAD_MASK=torch_mask)
        return out, h
    return dropout_add_rmsnorm


def test_the_reference_passes_correctness_and_fusion():
    report = check(DROP, reference, criteria=["correctness", "fusion"])
    for r in report.results:
        assert r.status == "passed", f"{r.name}: {r.message}"
    assert report["correctness"].figures["failed"] == 0
    assert report["fusion"].figures["kernel_launches"] == 1


def test_the_planted_kernel_with_no_bug_draws_masks_the_checks_accept():
    assert keep_mask.problem(get(DROP), planted(), 12345) is None


def test_one_mask_for_every_row_fails_naming_the_rows():
    r = check(DROP, planted(same_mask=True), criteria=["correctness"])["correctness"]
    assert r.status == "failed"
    assert "neighbouring rows agree" in r.message and "row * H + col" in r.message


def test_kept_values_left_unscaled_fail_naming_the_scale():
    r = check(DROP, planted(unscaled=True), criteria=["correctness"])["correctness"]
    assert r.status == "failed" and "1 / (1 - p)" in r.message


def test_a_mask_drawn_by_torch_fails_correctness_and_fusion():
    fn = planted(torch_mask=True)
    # Its mask is random and follows the seed: the statistics alone cannot tell, the values and the launch count can.
    assert keep_mask.problem(get(DROP), fn, 7) is None
    report = check(DROP, fn, criteria=["correctness", "fusion"])
    assert report["correctness"].status == "failed"
    fusion = report["fusion"]
    assert fusion.status == "failed" and "torch operations outside the Triton kernel" in fusion.message


def test_a_mask_that_ignores_the_seed_or_changes_between_calls_fails():
    ex = get(DROP)
    calls = []

    def unseeded(x, y, weight, p, seed, eps):  # the seed is ignored: every call draws a new mask
        calls.append(1)
        return reference(x, y, weight, p, len(calls), eps)

    assert "same seed" in keep_mask.problem(ex, unseeded, 5)

    def fixed(x, y, weight, p, seed, eps):  # one mask whatever the seed
        return reference(x, y, weight, p, 99, eps)

    assert "the seed must go into" in keep_mask.problem(ex, fixed, 5)


def test_a_kept_fraction_off_by_a_few_percent_fails():
    def biased(x, y, weight, p, seed, eps):  # keeps 3% too few, the kept values scaled as 1 / (1 - p) asks
        drop = min(p + 0.03, 0.95)
        out, h = reference(x, y, weight, drop, seed, eps)
        return out, h * (1 - drop) / (1 - p)  # exact on the mask check's x = 0, y = 1

    message = keep_mask.problem(get(DROP), biased, 3)
    assert message and "the kernel kept" in message and "tl.rand(seed, offset) > p" in message
