"""The training criterion tells a broken run from a right one: notebook 07's decoder with one piece's backward
wrong, or a weight read from a stale copy, trained beside eager PyTorch (tests/training_bugs.py). In the
interpreter the run is 4 steps within 0.005, which catches more of these than the 8 steps within 0.08 it
replaced. On a GPU the same bugs are trained for the run's 200 bfloat16 steps, and the verdict the criterion would
give after fewer steps is printed (run with -s), the evidence for a shorter run there."""

import dataclasses
import json
import os

import pytest
import torch

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
import training_bugs as bugs
from autograder import check, runtime
from autograder import specs as registry
from autograder.config import load
from autograder.criteria import training
from autograder.criteria.cases import case_seed

DECODER = registry.get("07.decoder")
# What the interpreter's run must catch: a cached weight the optimizer's updates never reach, and a norm's
# backward without its projection term. (Most wrong backwards barely move 4 steps' losses: correctness catches
# those, gradient by gradient.)
CAUGHT = ["stale_lm_head", "stale_wo", "stale_wqkv", "stale_embed", "norm_without_projection"]


def _stale(name):
    cache = {}

    def loss(params, tokens, targets, config):
        w = params[name]
        key = (w.data_ptr(), tuple(w.shape), w.dtype)
        cache.setdefault(key, w.detach().clone())
        return DECODER.eager({**params, name: cache[key] + (w - w.detach())}, tokens, targets, config)
    return loss


def _bug(name):
    stale = {"stale_wo": "layers.0.wo", "stale_wqkv": "layers.0.wqkv", "stale_embed": "embed"}
    return _stale(stale[name]) if name in stale else bugs.BROKEN[name]


def _gap(fn, case, seed) -> float:
    yours = training.train(DECODER, fn, case, torch.float32, seed)
    eager = training.train(DECODER, DECODER.eager, case, torch.float32, seed)
    k = min(DECODER.loss_window, case.steps)
    return abs(sum(yours[-k:]) - sum(eager[-k:])) / k


@pytest.mark.skipif(runtime.has_gpu(), reason="the interpreter's run (a GPU grades the bfloat16 one)")
@pytest.mark.parametrize("name", CAUGHT)
def test_the_interpreters_run_fails_a_broken_one(name):
    result = check("07.decoder", _bug(name), criteria=["training"])["training"]
    assert result.status == "failed" and "apart by" in result.message, result.message
    assert result.figures["gap"] > 2 * result.figures["allowed"], result.message  # not by a hair
    # The GPU test's verdicts after fewer steps are the criterion's own at the run's full length.
    assert verdicts_after(result.figures, DECODER.training_cpu.steps)["gap"] == pytest.approx(result.figures["gap"])


@pytest.mark.skipif(runtime.has_gpu(), reason="the interpreter's run (a GPU grades the bfloat16 one)")
@pytest.mark.parametrize("base", [None, 5, 777, 2026, 12345])  # None: the package's own seed
def test_the_shorter_run_catches_all_the_longer_one_did(base):
    seed = case_seed(load().secret_seed if base is None else base, "training-run")
    now = DECODER.training_cpu
    before = dataclasses.replace(now, steps=8)  # the run until 2026-11-28: 8 steps within the GPU's floor, 0.08
    names = CAUGHT + ["attention_without_delta", "silu_derivative_sigmoid_only", "embedding_gradient_overwritten"]
    caught_before = {n for n in names if _gap(_bug(n), before, seed) > DECODER.loss_floor}
    caught_now = {n for n in names if _gap(_bug(n), now, seed) > DECODER.loss_floor_float32}
    assert now.steps < before.steps and caught_before <= caught_now, (caught_before, caught_now)
    assert {"stale_lm_head", "stale_wo"} <= caught_now and len(caught_now) >= 4, caught_now
    if base is None:
        assert caught_now == set(CAUGHT), caught_now


@pytest.mark.skipif(runtime.has_gpu(), reason="the interpreter's run")
def test_the_course_decoder_trains_as_eager_does():
    from kernels.decoder import decoder_loss

    result = check("07.decoder", decoder_loss, criteria=["training"])["training"]
    assert result.status == "passed" and result.figures["gap"] < 0.01 * result.figures["allowed"], result.message


def verdicts_after(figures: dict, steps: int) -> dict:
    """The training criterion's figures had the run stopped after `steps` steps (its batches are drawn step by
    step, so a shorter run is the longer one's beginning)."""
    k = min(DECODER.loss_window, steps)
    mean = {name: sum(figures[key][:steps][-k:]) / k for name, key in
            (("yours", "losses"), ("eager", "eager_losses"), ("eager32", "eager_float32_losses"))}
    drift = abs(mean["eager"] - mean["eager32"])
    allowed = max(DECODER.loss_floor, DECODER.loss_factor * drift)
    gap = abs(mean["yours"] - mean["eager32"])
    return {"gap": gap, "drift": drift, "allowed": allowed, "passed": gap <= allowed}


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.has_gpu(), reason="needs a CUDA GPU")
def test_the_gpu_run_tells_broken_from_right_and_what_fewer_steps_would_say():
    """The criterion's own run for the grading's seed, and for the seeds in TRAINING_POWER_SEEDS (comma-separated:
    where the bfloat16 runs part ways depends on the initial model and the batches); the table and every loss
    curve go to TRAINING_POWER_JSON when set."""
    from kernels.decoder import decoder_loss

    runs = {"course reference": decoder_loss, **{n: _bug(n) for n in CAUGHT},
            **{n: bugs.BROKEN[n] for n in ("attention_without_delta", "silu_derivative_sigmoid_only",
                                          "embedding_gradient_overwritten")}}
    cfg = load()
    seeds = [cfg.secret_seed] + [int(s) for s in os.environ.get("TRAINING_POWER_SEEDS", "").split(",") if s.strip()]
    steps = DECODER.training_gpu.steps
    print("after N steps, the last min(20, N) losses' mean: gap to eager float32 / eager bfloat16's drift"
          f" (allowed: max({DECODER.loss_floor:g}, {DECODER.loss_factor:g}x drift); ! beyond it)")
    saved = {}
    for seed in seeds:
        graded = dataclasses.replace(cfg, secret_seed=seed)
        results = {name: training.training(DECODER, fn, graded) for name, fn in runs.items()}
        table = {name: {n: verdicts_after(r.figures, n) for n in (8, 10, 12, 16, 25, 50, 100, 150, steps)
                        if n <= steps} for name, r in results.items() if "losses" in r.figures}
        print(f"seed {seed}")
        for name, row in table.items():
            print(f"{name:32s}", "  ".join(f"{n}:{v['gap']:.3f}/{v['drift']:.3f}{'' if v['passed'] else '!'}"
                                           for n, v in row.items()))
        reference = results["course reference"].figures
        saved[seed] = {"table": table, "losses": {n: r.figures.get("losses") for n, r in results.items()},
                       "eager": reference.get("eager_losses"), "eager32": reference.get("eager_float32_losses")}
        assert results["course reference"].status == "passed", (seed, results["course reference"].message)
        assert results["stale_lm_head"].status == "failed", (seed, results["stale_lm_head"].message)
    if os.environ.get("TRAINING_POWER_JSON"):
        with open(os.environ["TRAINING_POWER_JSON"], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "steps": steps,
                       "seeds": saved}, f)
