"""Precision is measured at shapes drawn from the grading's seed, so that a kernel exact only at the shapes it
guesses are measured (the notebook's 8 rows, a power-of-two width) fails, graded with the judge and without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import triton

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import config, runtime, specs
from autograder.criteria.cases import precision_shapes, secret_shapes
from autograder.judge.launch import JudgeProcess, judge_said
from autograder.link.session import ENV_VAR as JUDGE_ENV
from autograder.report import FAILED
from autograder.specs.exercise import KernelExercise

CORPUS_CASE = Path(__file__).resolve().parents[1] / "corpus" / "precise_only_at_eight_rows.py"
MEASURED = [ex for ex in specs.all_exercises() if isinstance(ex, KernelExercise) and precision_shapes(ex)]


@pytest.mark.parametrize("exercise", MEASURED, ids=lambda ex: ex.id)
def test_drawn_shapes_keep_the_lengths_order_and_their_block(exercise):
    nominal = precision_shapes(exercise)
    for seed in (1, 2024, 987654321):
        drawn = precision_shapes(exercise, seed)
        axis = exercise.reduced_axis
        lengths = [s.dims[axis] for s in drawn]
        assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths), drawn
        for n, d in zip(nominal, drawn):
            assert triton.next_power_of_2(d.dims[axis]) == triton.next_power_of_2(n.dims[axis]), (n, d)
            assert d.layout == n.layout and len(d.dims) == len(n.dims)
        assert set(drawn) <= set(secret_shapes(exercise, seed))  # correctness's secret case grades them too


def test_no_fixed_row_count_picks_out_the_measured_calls():
    ex = specs.get("02.rmsnorm")
    rows = {s.dims[0] for seed in range(40) for s in precision_shapes(ex, seed)}
    widths = {s.dims[1] for seed in range(40) for s in precision_shapes(ex, seed)}
    assert len(rows) >= 6 and len(widths) >= 100
    assert precision_shapes(ex, 7) == precision_shapes(ex, 7)  # drawn from the seed alone


STUDENT = """
import importlib.util, json, sys
from autograder import check

spec = importlib.util.spec_from_file_location("case", sys.argv[1])
case = importlib.util.module_from_spec(spec)
spec.loader.exec_module(case)
r = check("02.rmsnorm", case.rmsnorm, criteria=["precision"])["precision"]
print(json.dumps({"status": r.status, "message": r.message}))
"""


@pytest.mark.skipif(runtime.has_gpu(), reason="the interpreter's float16 sums are what the case relies on")
def test_a_kernel_exact_only_at_guessed_shapes_fails_under_the_judge(tmp_path):
    grading = tmp_path / "grading.toml"
    grading.write_text("trials = 1\nsecret_seed = 246813579\nrequire_performance = false\n")
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, **{config.ENV_VAR: str(grading)})
    env.pop(JUDGE_ENV, None)
    with JudgeProcess(work / ".judge.sock", grading) as judge:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(STUDENT), str(CORPUS_CASE)], cwd=work,
                              env=judge.student_env(env), capture_output=True, text=True, timeout=900, check=False)
        verdicts = judge.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == FAILED and "float16" in result["message"], result
    assert judge_said(verdicts, "02.rmsnorm", "precision") == FAILED
