"""Every malformed output gets a failure that names it, in every criterion: never "the grader itself failed".

The function under test is the course's fused_chain kernel with its result spoiled in one way after the launch
(so each case launches a real kernel, as a student's would).
"""

import pytest
import torch

from autograder import check, runtime
from kernels.fused_chain import fused_chain

EX = "01.fused_chain"


def _placeholder(x, bias, alpha):
    raise NotImplementedError()  # what the release's answer cell holds


def _library_not_implemented(x, bias, alpha):
    fused_chain(x, bias, alpha)
    return torch.ops.aten._nested_tensor_from_mask(x, x.bool())  # raises inside torch


MALFORMED = {
    "returns None": (lambda x, b, a: (fused_chain(x, b, a), None)[1], "returned None"),
    "returns a float": (lambda x, b, a: (fused_chain(x, b, a), 3.0)[1], "returned float"),
    "returns a tuple of two": (lambda x, b, a: (fused_chain(x, b, a), fused_chain(x, b, a)), "a tuple of 2"),
    "wrong shape": (lambda x, b, a: fused_chain(x, b, a).reshape(-1), "output has shape"),
    "wrong dtype": (lambda x, b, a: fused_chain(x.double(), b.double(), a), "output dtype is float64"),
    "requires grad": (lambda x, b, a: fused_chain(x, b, a).requires_grad_(), "requires grad"),
    "aliases an input": (lambda x, b, a: x.copy_(fused_chain(x, b, a)), "shares memory with input x"),
}


@pytest.mark.parametrize("criterion", ["correctness", "precision"])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_output_is_named(case, criterion):
    fn, words = MALFORMED[case]
    r = check(EX, fn, criteria=[criterion])[criterion]
    assert r.status == "failed" and "grader itself failed" not in r.message, r.message
    assert words in r.message, r.message


def test_the_placeholder_says_not_done_but_a_library_keeps_its_words():
    placeholder = check(EX, _placeholder, criteria=["correctness"])["correctness"]
    assert "not done yet" in placeholder.message
    library = check(EX, _library_not_implemented, criteria=["correctness"])["correctness"]
    assert "not done yet" not in library.message and "raised" in library.message, library.message


@pytest.mark.gpu
@pytest.mark.parametrize("criterion", ["correctness", "precision", "performance"])
def test_an_output_on_the_cpu_is_named_on_a_gpu(criterion):
    r = check(EX, lambda x, b, a: fused_chain(x, b, a).cpu(), criteria=[criterion])[criterion]
    assert r.status == "failed" and "grader itself failed" not in r.message, r.message
    assert "output is on cpu" in r.message, r.message


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["returns None", "wrong shape", "requires grad", "aliases an input"])
def test_performance_names_a_malformed_output_on_a_gpu(case):
    fn, words = MALFORMED[case]
    r = check(EX, fn, criteria=["performance"])["performance"]
    assert r.status == "failed" and words in r.message, r.message


def test_grading_on_the_cpu_runs_in_the_interpreter():
    assert runtime.has_gpu() or runtime.interpreted()
