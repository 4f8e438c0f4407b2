"""The message when GPU memory runs out while a criterion grades: the notebook's live tensors (held before the
criterion began) are told apart from the criterion's own, so that a student is not told to free tensors the
notebook does not hold."""

import torch

import importlib

check_mod = importlib.import_module("autograder.check")  # the package re-exports the function check()

OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 MiB.")


def _gpu_holding(monkeypatch, gib: float):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a, **k: int(gib * 2**30))


def test_a_notebook_holding_little_is_not_blamed(monkeypatch):
    _gpu_holding(monkeypatch, 10.1)
    said = check_mod._grader_failure(OOM, held_before=0.0)
    assert "10.1 GiB held by live tensors when it ran out, 0.0 GiB of them before this criterion began" in said
    assert "not the notebook's tensors" in said and "keeps" not in said
    assert "Tried to allocate 1024.00 MiB" in said


def test_a_notebook_holding_much_is_named(monkeypatch):
    _gpu_holding(monkeypatch, 10.1)
    said = check_mod._grader_failure(OOM, held_before=6.0)
    assert "the notebook keeps 6.0 GiB of tensors alive" in said and "del" in said


def test_the_notebooks_share_is_read_before_each_criterion(monkeypatch):
    _gpu_holding(monkeypatch, 2.5)
    assert check_mod._held_gib() == 2.5
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_mod._held_gib() is None
    said = check_mod._grader_failure(OOM, held_before=None)
    assert said.startswith("GPU memory ran out while grading: the notebook keeps large tensors alive")


def test_other_failures_are_unchanged():
    said = check_mod._grader_failure(ValueError("boom"), held_before=0.0)
    assert said.startswith("the grader itself failed (ValueError: boom)")
