"""bench/yardstick.py without a GPU: the regional yardstick is the eager decoder's loss and gradients, its
summary takes medians per variant and cache state, and the command refuses what it cannot do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.specs.decoder import SMALL, decoder_loss_eager, init_parameters
from bench import yardstick

ROOT = Path(__file__).resolve().parents[2]


def test_the_regional_model_is_the_eager_model():
    params = init_parameters(SMALL, seed=3)
    tokens = torch.randint(0, SMALL.vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    targets = torch.roll(tokens, -1, 1)
    regional = yardstick.regional_loss(compile_fn=lambda f: f)  # the regions as written, not compiled
    ours, theirs = regional(params, tokens, targets, SMALL), decoder_loss_eager(params, tokens, targets, SMALL)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    leaves = list(params.values())
    for g, r in zip(torch.autograd.grad(ours, leaves), torch.autograd.grad(theirs, leaves)):
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-7)


def test_the_summary_is_the_median_per_variant_and_cache_state():
    runs = [{"variant": "whole", "caches": "empty", "first_step_s": s, "step_ms": 10.0, "eager_ms": 20.0,
             "speedup_over_eager": 2.0, "loss_rel_diff": 1e-3} for s in (14.0, 16.0, 15.0)]
    runs.append({"variant": "whole", "caches": "empty", "error": "out of memory"})
    row = yardstick.summary(runs)["whole, empty caches"]
    assert row["runs"] == 3 and row["first_step_s"] == 15.0 and row["speedup_over_eager"] == 2.0


@pytest.mark.parametrize("args, said", [(["--runs", "0"], "--runs must be at least 1"), ([], "needs a CUDA GPU")])
def test_the_command_refuses_what_it_cannot_do(args, said):
    if said == "needs a CUDA GPU" and torch.cuda.is_available():
        pytest.skip("a GPU is here: the command would run")
    p = subprocess.run([sys.executable, "-m", "bench.yardstick", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and said in p.stderr, p.stderr[-1000:]
