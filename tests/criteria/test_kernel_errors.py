"""Errors that stop a kernel, told at the kernel's own line, once, and in plain words for the commonest
first-timer mistakes (each reproduced here by a tiny kernel run in Triton's interpreter)."""

import ast

import pytest
import torch
import triton
import triton.language as tl

from autograder import check, runtime
from autograder.criteria import kernel_errors, like_gpu
from autograder.criteria.cases import collapse, student_error

pytestmark = pytest.mark.skipif(runtime.has_gpu(), reason="the errors as Triton's interpreter raises them")


@triton.jit
def _runtime_arange_kernel(x_ptr, y_ptr, n):
    offs = tl.arange(0, n)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def _torch_inside_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, torch.sigmoid(x), mask=offs < n)


@triton.jit
def _copy_block_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


def runtime_arange(x):
    y = torch.empty_like(x)
    _runtime_arange_kernel[(1,)](x, y, x.numel())
    return y


def torch_inside(x):
    y = torch.empty_like(x)
    _torch_inside_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y


def block_of_100(x):
    y = torch.empty_like(x)
    _copy_block_kernel[(triton.cdiv(x.numel(), 100),)](x, y, x.numel(), BLOCK=100)
    return y


def _raised(call) -> BaseException:
    try:
        call()
    except Exception as exc:  # noqa: BLE001  the error under test
        return exc
    raise AssertionError("the kernel ran")


def _told(call) -> str:
    with like_gpu.strict():
        return student_error(_raised(call), "f")


def test_a_runtime_arange_bound_is_told_at_its_line_with_the_fix():
    message = _told(lambda: runtime_arange(torch.randn(10)))
    assert "in kernel _runtime_arange_kernel at test_kernel_errors.py:" in message
    assert "offs = tl.arange(0, n)" in message and "launched at test_kernel_errors.py" in message
    assert "tl.constexpr" in message and "triton.next_power_of_2(n)" in message
    assert "InterpreterError" not in message


def test_a_torch_call_inside_a_kernel_is_named_as_such():
    message = _told(lambda: torch_inside(torch.randn(10)))
    assert "torch.sigmoid(x)" in message
    assert "A torch function cannot run inside a @triton.jit kernel" in message and "tl.exp" in message


def test_a_block_that_is_not_a_power_of_two_is_named():
    message = _told(lambda: block_of_100(torch.randn(10)))
    assert "in kernel _copy_block_kernel" in message and "must be a power of two" in message


def test_a_dot_tile_below_16_fails_in_the_interpreter_as_on_a_gpu():
    a, b, c = torch.randn(8, 8), torch.randn(8, 8), torch.empty(8, 8)
    _dot_kernel[(1,)](a, b, c, B=8)  # Triton's interpreter multiplies any tile
    message = _told(lambda: _dot_kernel[(1,)](a, b, c, B=8))
    assert "tl.dot(a, b)" in message and "BLOCK_K at least 16" in message
    _dot_kernel[(1,)](a, b, c, B=8)  # and does again once the grader is done


def test_mismatched_dot_dtypes_are_named():
    a, b, c = torch.randn(16, 16, dtype=torch.float16), torch.randn(16, 16), torch.empty(16, 16)
    message = _told(lambda: _dot_kernel[(1,)](a, b, c, B=16))
    assert "same dtype" in message and ".to(tl.float32)" in message


def test_a_compilation_error_points_at_the_kernel_line():
    """On a GPU the compiler's error carries the kernel's source and the node it stopped at."""
    from triton.compiler.errors import CompilationError

    src = "def _k(x_ptr, n):\n    offs = tl.arange(0, n)\n    tl.store(x_ptr + offs, 0.0)\n"
    node = ast.parse(src).body[0].body[0]
    try:
        try:
            raise ValueError("arange's arguments must be of type tl.constexpr")
        except ValueError as inner:
            raise CompilationError(src, node, str(inner)) from inner
    except CompilationError as exc:
        message = student_error(exc, "f")
    assert "in kernel _k, line 2 of its source: offs = tl.arange(0, n)" in message
    assert "BLOCK: tl.constexpr" in message


def test_a_kernel_called_without_a_grid_is_named():
    message = student_error(_raised(lambda: _copy_block_kernel(torch.randn(4), torch.empty(4), 4, BLOCK=4)), "f")
    assert "launched with a grid" in message and "kernel[grid](...)" in message


def test_an_error_outside_any_kernel_keeps_its_words():
    exc = _raised(lambda: torch.randn(3) @ torch.randn(4))
    assert kernel_errors.kernel_line(exc) == "" and kernel_errors.explain(exc) == ""
    assert "f raised RuntimeError" in student_error(exc, "f")


def test_identical_failures_are_told_once():
    lines = collapse([("a", "boom"), ("b", "boom"), ("c", "other"), ("d", "boom")])
    assert lines == ["a and 2 more case(s), 3 with one error: boom", "c: other"]


def test_an_error_every_case_meets_is_printed_once():
    def block_copy(x):
        return runtime_arange(x)

    result = check("01.warmup_copy", block_copy, criteria="correctness")["correctness"]
    assert result.status == "failed"
    assert "shape 1, float32, trial 1" in result.message and "more case(s), 15 with one error" in result.message
    assert result.message.count("arange's arguments must be of type tl.constexpr") == 1
