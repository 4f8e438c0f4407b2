"""Triton's interpreter made as strict as a GPU while the grader runs a student's kernel: masked-off lanes
loaded without other= hold NaN, a load with other= behaves as written, and nothing changes outside grading but
the time (the overflow check the interpreter computes and then drops is not computed)."""

import contextlib

import pytest
import torch
import triton
import triton.language as tl

from autograder import check, runtime
from autograder.criteria import like_gpu

pytestmark = pytest.mark.skipif(runtime.has_gpu(), reason="about Triton's interpreter")


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n, stride_m, stride_n, BLOCK: tl.constexpr, OTHER: tl.constexpr,
                    UPCAST: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ptrs = x_ptr + row * stride_m + cols * stride_n
    if OTHER:
        x = tl.load(ptrs, mask=cols < n, other=0.0)
    else:
        x = tl.load(ptrs, mask=cols < n)
    if UPCAST:
        x = x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def _row_sum(other: bool, upcast: bool):
    def row_sum(x):
        m, n = x.shape
        out = torch.empty(m, dtype=x.dtype, device=x.device)
        _row_sum_kernel[(m,)](x, out, n, x.stride(0), x.stride(1), BLOCK=triton.next_power_of_2(n), OTHER=other,
                              UPCAST=upcast)
        return out

    return row_sum


def test_a_row_sum_without_other_fails_on_the_cpu():
    result = check("01.warmup_row_sum", _row_sum(other=False, upcast=True), criteria="correctness")["correctness"]
    assert result.status == "failed" and "NaN where the reference is a number" in result.message


@pytest.mark.parametrize("upcast", [True, False], ids=["upcast", "no-upcast"])
def test_a_row_sum_with_other_passes(upcast):
    """other=0.0 behaves as written; an upcast to float32, needed or not, costs nothing."""
    result = check("01.warmup_row_sum", _row_sum(other=True, upcast=upcast), criteria="correctness")["correctness"]
    assert result.status == "passed", result.message


def test_the_fill_holds_only_while_grading():
    x = torch.randn(3, 5)
    lenient = _row_sum(other=False, upcast=True)
    torch.testing.assert_close(lenient(x), x.sum(dim=1))  # the interpreter as Triton ships it: masked lanes are 0
    with like_gpu.strict():
        with like_gpu.strict():  # graders nest
            assert torch.isnan(lenient(x)).all()
        assert torch.isnan(lenient(x)).all()
        torch.testing.assert_close(_row_sum(other=True, upcast=True)(x), x.sum(dim=1))
    torch.testing.assert_close(lenient(x), x.sum(dim=1))


@triton.jit
def _triple_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr) * 3)


def test_the_overflow_check_that_changes_nothing_is_not_computed():
    """The interpreter recomputes every 32-bit add, sub and mul in int64 to check that it fits (a third of its
    time on an elementwise kernel) and drops the check outside debug mode: on the CPU it is not computed unless
    debug is on, and the result wraps as on a GPU, while grading and outside."""
    import dataclasses

    from triton.runtime import interpreter

    x = torch.tensor([2**30], dtype=torch.int32)
    for grading in (True, False):
        out = torch.zeros(1, dtype=torch.int32)
        with like_gpu.strict() if grading else contextlib.nullcontext():
            _triple_kernel[(1,)](x, out)
        assert int(out) == -(2**30), grading  # 3 * 2**30 wrapped to 32 bits
    options = interpreter.interpreter_builder.options
    if hasattr(options, "sanitize_overflow"):
        assert options.sanitize_overflow is False and options.debug is False
        debugging = dataclasses.replace(options, debug=True, sanitize_overflow=True)
        assert like_gpu._unchecked(debugging) is debugging
        assert like_gpu._unchecked(dataclasses.replace(options, sanitize_overflow=True)).sanitize_overflow is False
