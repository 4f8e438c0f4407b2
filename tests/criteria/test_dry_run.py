"""The dry run (criteria.dry_run): allocations come back as zeros, Triton's launch entry points are put back
whatever the call did, and nothing happens where it cannot help (the CPU, a Triton without AsyncCompileMode). On
a GPU: a dry run of the capstone's step compiles its kernels and runs none, and the real step compiles nothing."""

import pytest
import torch

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import runtime
from autograder.criteria import dry_run


def test_allocations_in_a_dry_run_are_zeros():
    seen = []
    with dry_run._Zeros():
        for t in (torch.empty(1000), torch.empty_like(torch.ones(7, 3)), torch.empty_strided((4, 4), (1, 4)),
                  torch.ones(3).new_empty(50)):
            seen.append(bool((t == 0).all()))
    assert seen == [True] * 4


def test_the_launch_entry_points_come_back_even_when_the_call_raises(monkeypatch):
    from triton.runtime import autotuner, jit

    before = (jit.JITFunction.__dict__["run"], autotuner.Autotuner.__dict__["run"])
    monkeypatch.setattr(dry_run, "available", lambda: True)
    inside = []

    def call():
        inside.append((jit.JITFunction.__dict__["run"] is not before[0],
                       autotuner.Autotuner.__dict__["run"] is not before[1], bool((torch.empty(64) == 0).all())))
        raise ValueError("a student's check on a value no kernel wrote")

    assert dry_run.run_dry([call, call]) == 0  # both calls made, their errors swallowed, nothing compiled
    assert inside == [(True, True, True)] * 2
    assert (jit.JITFunction.__dict__["run"], autotuner.Autotuner.__dict__["run"]) == before


def test_nothing_happens_on_the_cpu():
    if runtime.has_gpu():
        pytest.skip("a GPU is here")
    from triton.runtime import jit

    before = jit.JITFunction.__dict__["run"]
    with dry_run.dry_launches() as submitted:
        assert jit.JITFunction.__dict__["run"] is before and submitted() == 0


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.has_gpu(), reason="needs a CUDA GPU")
def test_a_dry_step_compiles_the_decoders_kernels_and_the_real_one_compiles_nothing():
    import triton

    from autograder import specs as registry
    from autograder.criteria import training
    from kernels.decoder import decoder_loss

    ex = registry.get("07.decoder")
    case = ex.cases_gpu[1]
    submitted = dry_run.run_dry([lambda: training.first_step(ex, decoder_loss, case, torch.bfloat16)])
    assert submitted >= 5  # RMSNorm, attention, SwiGLU's activation, cross-entropy: forward and backward
    compiled = []
    hook = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiled.append(k) or False
    try:
        training.first_step(ex, decoder_loss, case, torch.bfloat16)
    finally:
        triton.knobs.runtime.jit_post_compile_hook = hook
    assert compiled == []
