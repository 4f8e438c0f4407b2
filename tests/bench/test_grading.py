"""bench.grading: its modes' environments, the cells it reads from the checker's log, its labelled files."""

import os

import pytest

from autograder import demonstrations, runtime
from autograder.classroom import compile_cache
from bench import grading

LOG = """[cell 1/3] running ...
[cell 1/3] done in 4.2 s
[cell 2/3] running ...
Demonstration skipped while grading: it measures and plots for the reader, and is not graded.
[cell 2/3] done in 0.0 s (a demonstration, skipped while grading)
[cell 3/3] running ...
[cell 3/3] raised NameError: name 'x' is not defined
[grade] 01.fused_chain done in 1.9 s (correctness 0.2, performance 1.7)
"""


def test_the_log_gives_each_cell_its_seconds_and_the_demonstrations_skipped():
    parts = grading.parse_log(LOG)
    assert parts["cells"] == {1: 4.2, 2: 0.0, 3: None}
    assert parts["skipped"] == [2]
    assert parts["grades"] == {"01.fused_chain": 1.9}
    assert parts["criteria"] == {"01.fused_chain": {"correctness": 0.2, "performance": 1.7}}


@pytest.mark.parametrize(("mode", "small", "run_demos"), [("full", "0", "0"), ("small", "1", "1"),
                                                          ("grading", "1", "0")])
def test_each_mode_runs_the_checker_in_its_environment(mode, small, run_demos, monkeypatch):
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "was set")
    monkeypatch.delenv(demonstrations.RUN_DEMOS_ENV, raising=False)
    env, _ = grading.MODES[mode]
    with grading.environment(env):
        assert os.environ[runtime.SMALL_DEMOS_ENV] == small
        assert os.environ[demonstrations.RUN_DEMOS_ENV] == run_demos
        assert demonstrations.skipped_here() == (mode == "grading")
    assert os.environ[runtime.SMALL_DEMOS_ENV] == "was set" and demonstrations.RUN_DEMOS_ENV not in os.environ


def test_cold_runs_get_caches_of_their_own(tmp_path):
    env = grading.cold_caches(tmp_path)
    assert set(env) == set(compile_cache.COMPILE_CACHES)
    assert all(v.startswith(str(tmp_path)) for v in env.values())


def _result(rows, **kw):
    return {"device": {"name": "NVIDIA H100 80GB HBM3"}, "date": "2026-11-26", "torch": "2.11", "triton": "3.6",
            "rows": rows, **kw}


def _row(mode, **kw):
    return {"notebook": "07_fusion_for_training", "mode": mode, "wall_s": 50.0, "cells_s": 10.0, "grading_s": 20.0,
            "slowest_cells": [[1, 4.0]], "passed": True, "failed": [], "cell_errors": [], **kw}


def test_a_run_saved_before_the_demonstrations_were_skipped_reads_as_it_did():
    text = grading.markdown(_result([_row("grading")]))
    assert "| grader switch |" in text and "sized down by the grader's switch (FUSION_COURSE_SMALL_DEMOS=1)." in text


def test_a_run_says_what_its_demonstrations_did_and_its_caches():
    rows = [_row("small", demonstrations="sized down, run", skipped_cells=[]),
            _row("grading", demonstrations="skipped", skipped_cells=[3, 4, 7])]
    text = grading.markdown(_result(rows, cold=True))
    assert "| sized down, run |" in text and "| skipped (3 cells) |" in text
    assert "| all | skipped | 50 (max 50) |" in text
    assert "empty compiler caches of its own" in text


def test_bad_arguments_are_clear_errors(capsys):
    for argv, said in ((["--modes", "fast"], "--modes takes full, small, grading"),
                       (["--label", "Before Run"], "lower-case letters, digits and dashes"),
                       (["--notebooks", "99"], "no solution notebook matches")):
        with pytest.raises(SystemExit):
            grading.main(argv)
        assert said in capsys.readouterr().err
