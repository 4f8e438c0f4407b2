"""A backward must scale what it returns by the gradient it is handed: the graders of notebook 07's backward
exercises hand one other than 1, and a backward that ignores it fails correctness (in the interpreter)."""

import dataclasses

import pytest
import torch

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import config
from autograder import specs as registry
from autograder.criteria import training
from autograder.specs import decoder as dec
from autograder.specs.exercise import TrainingCase
import kernels.decoder as decoder_kernels

SMALL_CASE = TrainingCase(dec.DecoderConfig(vocab=96, dim=32, layers=1, heads=2, hidden=24), 1, 12)


class _UnscaledLoss(decoder_kernels.LinearCrossEntropyFunction):
    """The capstone's loss whose backward returns dh and dW as the forward made them: right only for dloss = 1."""

    @staticmethod
    def backward(ctx, dloss):
        dh, dw = ctx.saved_tensors
        return dh, dw, None


def _small_decoder():
    return dataclasses.replace(registry.get("07.decoder"), cases_cpu=(SMALL_CASE,), cases_gpu=(SMALL_CASE,))


def test_the_incoming_gradient_is_drawn_from_the_seed_and_is_never_one():
    drawn = [training.incoming_gradient(s) for s in range(200)]
    assert drawn == [training.incoming_gradient(s) for s in range(200)]
    assert all(0.35 <= g <= 0.71 or 1.41 <= g <= 2.83 for g in drawn)
    assert min(drawn) < 0.5 and max(drawn) > 2.0


def test_the_decoder_that_scales_passes_and_the_one_that_forgets_fails(monkeypatch):
    ex, cfg = _small_decoder(), config.load(config.DEFAULT_PATH)
    passed = training.training_correctness(ex, decoder_kernels.decoder_loss, cfg)
    assert passed.status == "passed", passed.message
    assert "other than 1" in passed.message
    monkeypatch.setattr(decoder_kernels, "LinearCrossEntropyFunction", _UnscaledLoss)
    failed = training.training_correctness(ex, decoder_kernels.decoder_loss, cfg)
    assert failed.status == "failed"
    assert "must multiply what it returns by the gradient it receives" in failed.message, failed.message
    assert "the gradients of embed" in failed.message, failed.message


@pytest.mark.parametrize("ignores", ["do", "nothing"])
def test_flash_attention_backward_is_graded_for_a_random_output_gradient(ignores):
    """The output of attention is not reduced: its gradient do is a random tensor, and a backward that treats it
    as ones (as if the loss were o.sum()) fails."""
    from kernels.flash_attention_backward import flash_attention_backward

    def backward(q, k, v, o, lse, do, causal=False):
        return flash_attention_backward(q, k, v, o, lse, torch.ones_like(do) if ignores == "do" else do, causal)

    ex = dataclasses.replace(registry.get("07.flash_attention_backward"), shapes=(registry.get(
        "07.flash_attention_backward").shapes[2],))
    from autograder.criteria import correctness

    result = correctness.correctness(ex, backward, config.load(config.DEFAULT_PATH))
    assert result.status == ("failed" if ignores == "do" else "passed"), result.message
