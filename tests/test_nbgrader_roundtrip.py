"""A real nbgrader round trip on the CPU: release, three submissions, autograde, export, feedback."""

import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import build

pytestmark = pytest.mark.slow
NAME = "01_hbm_cost_model"

# What each student hands in for each solution cell (by grade_id); None keeps the release's stub.
TORCH_FALLBACK = '''
import torch
def fused_chain(x, bias, alpha):
    # right numbers (fp32 math, one rounding), but torch does the work: no Triton kernel
    return (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
'''
NO_LAUNCH = '''
def chain_times(n_ops, size_bytes, bandwidth, launch_s):
    t = 2 * size_bytes / bandwidth
    return n_ops * t, t + launch_s          # forgets the launches of the unfused chain
'''


def _nbgrader(work, *args):
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, f"--db=sqlite:///{work}/gradebook.db", "--log-level=ERROR"],
        cwd=work, capture_output=True, text=True, env=build.tool_env(), timeout=1200,
    )


def _submit(work, student, answers):
    release = nbformat.read(work / "course" / NAME / f"{NAME}.ipynb", as_version=4)
    source = nbformat.read(work / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = solutions[gid] if answers[gid] == "solution" else answers[gid]
    folder = work / "submitted" / student / NAME
    folder.mkdir(parents=True)
    nbformat.write(release, folder / f"{NAME}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = build.ROOT
    work = tmp_path_factory.mktemp("course")
    for f in ("nbgrader_config.py", "grading.toml"):
        shutil.copy(root / f, work)
    shutil.copytree(root / "solutions" / NAME, work / "solutions" / NAME)
    r = _nbgrader(work, "generate_assignment", NAME, "--force")
    assert r.returncode == 0, r.stderr
    everything = {"chain_times": "solution", "layer_traffic": "solution", "fused_chain": "solution"}
    _submit(work, "alice", everything)  # the full solution
    _submit(work, "bob", {})  # the untouched release
    _submit(work, "carol", {**everything, "chain_times": NO_LAUNCH, "fused_chain": TORCH_FALLBACK})
    r = _nbgrader(work, "autograde", NAME, "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _nbgrader(work, "export", "--to", str(work / "grades.csv"))
    assert r.returncode == 0, r.stderr
    with open(work / "grades.csv") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    r = _nbgrader(work, "generate_feedback", NAME, "--force")
    assert r.returncode == 0, r.stderr
    return work, rows


def _scores(work, student):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work}/gradebook.db") as gb:
        nb = gb.find_submission_notebook(NAME, NAME, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


CPU_GRADABLE = {"test_cost_model", "test_layer_traffic", "test_fused_chain_correctness",
                "test_fused_chain_precision", "test_fused_chain_fusion"}


def test_solution_gets_full_marks_on_every_cpu_gradable_cell(graded):
    work, _ = graded
    scores = _scores(work, "alice")
    assert set(scores) == CPU_GRADABLE | {"test_fused_chain_performance"}
    for cell in CPU_GRADABLE:
        assert scores[cell][0] == scores[cell][1] > 0, (cell, scores[cell])
    # grading.toml requires performance to be measured: a grading machine without a GPU gives 0, not a pass.
    assert scores["test_fused_chain_performance"][0] == 0


def test_untouched_release_scores_zero(graded):
    work, rows = graded
    assert all(score == 0 for score, _ in _scores(work, "bob").values())
    assert float(rows["bob"]["raw_score"]) == 0


def test_planted_bugs_fail_exactly_the_expected_cells(graded):
    work, _ = graded
    failed = {cell for cell, (score, _) in _scores(work, "carol").items() if score == 0}
    assert failed == {"test_cost_model", "test_fused_chain_fusion", "test_fused_chain_performance"}


def test_csv_has_every_student_with_the_right_totals(graded):
    work, rows = graded
    assert set(rows) == {"alice", "bob", "carol"}
    total = float(rows["alice"]["max_score"])
    assert total == 14
    assert float(rows["alice"]["raw_score"]) == 11  # all but the 3 performance points
    assert float(rows["carol"]["raw_score"]) == 11 - 2 - 2


def test_feedback_names_the_failures(graded):
    work, _ = graded
    html = (work / "feedback" / "carol" / NAME / f"{NAME}.html").read_text()
    assert "no Triton kernel ran" in html
    assert "launch overhead" in html  # the named bug of the cost model
    assert "not measured (no GPU)" in html
