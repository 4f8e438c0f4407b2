"""One source of truth for the performance bars: each exercise's spec holds them, and an override in a
grading.toml is refused here when it would fail a reference solution on the committed headroom figures."""

import json
from pathlib import Path

import pytest

from autograder import config
from autograder import specs as registry
from autograder.specs.exercise import TrainingExercise
from bench.headroom import thresholds

ROOT = Path(__file__).resolve().parents[2]
HEADROOM = sorted((ROOT / "bench" / "results" / "headroom").glob("headroom-*.json"))
GRADING_FILES = [ROOT / "grading.toml", ROOT / "autograder" / "grading.toml"]


def reference_failures(cfg) -> list[str]:
    """Every reference solution row of the committed headroom tables that cfg's bars would fail."""
    out = []
    for table in HEADROOM:
        device = json.loads(table.read_text())
        for row in device["rows"]:
            s = row["summary"]
            if row["role"] != "solution" or "fraction_min" not in s:
                continue
            bar, min_speedup = thresholds(registry.get(row["exercise"]), cfg)
            if s["fraction_min"] < bar or (min_speedup > 0 and s["speedup_min"] <= min_speedup):
                out.append(f"{row['exercise']} ({row['what']}) on {device['device']['name']}: the reference reached "
                           f"{s['fraction_min']:.2f} of the peak and {s['speedup_min']:.2f}x eager; the bars ask "
                           f"{bar:.2f} and more than {min_speedup:.2f}x")
    return out


def test_the_headroom_figures_are_there():
    assert len(HEADROOM) >= 2, HEADROOM


@pytest.mark.parametrize("path", GRADING_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_grading_file_fails_a_reference_solution(path):
    assert reference_failures(config.load(path)) == []


def test_a_drifted_override_is_caught(tmp_path):
    drifted = tmp_path / "grading.toml"
    drifted.write_text('[performance."04.swiglu"]\nmin_fraction_of_peak = 0.42\n'
                       '[performance."04.gemm_gelu_residual"]\nmin_fraction_of_peak = 0.28\n')
    failures = reference_failures(config.load(drifted))
    assert any(f.startswith("04.swiglu (kernels/swiglu.py: swiglu) on NVIDIA H200") for f in failures), failures
    assert any(f.startswith("04.gemm_gelu_residual") for f in failures), failures


def test_the_instructors_file_overrides_no_bar_and_names_no_seed():
    cfg = config.load(ROOT / "grading.toml")
    assert cfg.performance == {} and cfg.require_performance
    assert "secret_seed" not in (ROOT / "grading.toml").read_text().split("# The secret seed")[0]


def test_every_exercise_with_a_performance_criterion_has_its_bars_in_its_spec():
    missing = []
    for ex in registry.all_exercises():
        if "performance" not in ex.criteria:
            continue
        first = "min_fraction_of_compiled" if isinstance(ex, TrainingExercise) else "min_fraction_of_peak"
        for key in (first, "min_speedup_over_eager"):
            if key not in ex.bars:
                missing.append(f"{ex.id}: {key}")
    assert missing == [], f"exercises graded on performance without a bar in their spec: {missing}"
