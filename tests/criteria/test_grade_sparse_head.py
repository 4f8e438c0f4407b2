"""The autograder against planted bugs in notebook 05's sparse head (05.sparse_head): the reference kernel passes
every criterion the interpreter grades; a head that forgets the mask, forgets the bias, sums instead of taking
the max, stores the B x S x V logits, or takes two launches fails the criterion meant to catch it."""

from __future__ import annotations

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any @triton.jit below runs
from autograder import check

import torch

from autograder.specs import sparse_head as spec
from kernels import sparse_head as ref

EX = "05.sparse_head"


def test_the_reference_kernel_passes_what_the_interpreter_grades():
    report = check(EX, ref.sparse_head, criteria=["correctness", "precision", "memory", "fusion"])
    for name in ("correctness", "precision", "memory", "fusion"):
        assert report[name].status == "passed", report[name].message


def _ones_mask(h, w, b, mask):
    return ref.sparse_head(h, w, b, torch.ones_like(mask))


def _zero_bias(h, w, b, mask):
    return ref.sparse_head(h, w, torch.zeros_like(b), mask)


@pytest.mark.parametrize("fn, said", [
    (_ones_mask, "padding tokens were not masked out"),
    (_zero_bias, "the bias b was not added"),
])
def test_a_wrong_head_fails_correctness_and_is_named(fn, said):
    r = check(EX, fn, criteria=["correctness"])["correctness"]
    assert r.status == "failed" and said in r.message, r.message


def test_a_head_that_holds_the_logits_fails_memory():
    """The kernel's answer, but the B x S x V logits made on the way (as an unfused head keeps them)."""
    def holding(h, w, b, mask):
        logits = (h @ w.t() + b).float()  # B x S x V, float32
        out = ref.sparse_head(h, w, b, mask)
        del logits
        return out

    r = check(EX, holding, criteria=["memory"])["memory"]
    assert r.status == "failed" and "logits" in r.message, r.message
    assert r.figures["extra_bytes"] >= r.figures["materialised_bytes"]


def test_two_launches_fail_fusion():
    def twice(h, w, b, mask):
        ref.sparse_head(h, w, b, mask)
        return ref.sparse_head(h, w, b, mask)

    r = check(EX, twice, criteria=["fusion"])["fusion"]
    assert r.status == "failed", r.message


def test_bad_inputs_are_refused_by_name():
    h, w, b = torch.randn(2, 3, 16), torch.randn(5, 16), torch.randn(5)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="want b of shape"):
        ref.sparse_head(h, w, torch.randn(4), mask)
    with pytest.raises(ValueError, match="want mask of shape"):
        ref.sparse_head(h, w, b, mask[:, :2])
    with pytest.raises(ValueError, match="want h"):
        ref.sparse_head(h[0], w, b, mask)
    with pytest.raises(ValueError, match="share a floating dtype"):
        ref.sparse_head(h, w.half(), b, mask)


def test_the_max_commutes_with_the_activation():
    """What the kernel relies on: log1p(relu(.)) never decreases, so max then activate equals activate then max,
    padding included (a passage with no kept token weighs 0 everywhere)."""
    gen = torch.Generator().manual_seed(3)
    inputs = spec.sparse_head_inputs(spec.Shape((3, 9, 16, 40), "empty"), torch.float64, "cpu", gen)
    z = inputs["h"] @ inputs["w"].t() + inputs["b"]
    activated_first = (torch.log1p(torch.relu(z)) * inputs["mask"][..., None]).amax(dim=1)
    torch.testing.assert_close(spec.sparse_head_reference(**inputs), activated_first)
    assert bool((spec.sparse_head_reference(**inputs)[-1] == 0).all())
