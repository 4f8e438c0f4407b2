"""grade-class says at its start what the grading settings require that this machine cannot measure, and gives
it as the reason of the points it costs."""

import csv
import dataclasses
import os
import sys

from autograder import config
from autograder.classroom import grade_class


def test_required_gpu_criteria_without_a_gpu_are_said():
    required = dataclasses.replace(config.load(), require_performance=True)
    said = grade_class.unmeasurable_here(required, gpu=False)
    assert "no CUDA GPU" in said and "require_performance = true" in said and "scores 0" in said
    assert grade_class.unmeasurable_here(required, gpu=True) is None
    assert grade_class.unmeasurable_here(dataclasses.replace(required, require_performance=False), gpu=False) is None


def test_a_graded_student_who_lost_points_reads_where_and_why(tmp_path, monkeypatch):
    monkeypatch.setattr(grade_class, "gradebook_scores", lambda assignment, db: ({"ada": 7.0, "bo": 10.0}, 10.0))
    monkeypatch.setattr(grade_class, "gradebook_lost_points",
                        lambda assignment, db: {"ada": ["test_rmsnorm_performance (0/3)"]})
    state = {s: {"status": grade_class.GRADED, "reason": "", "flags": []} for s in ("ada", "bo")}
    out = tmp_path / "grades.csv"
    grade_class._write_csv(tmp_path, "a1", ["ada", "bo"], state, "sqlite://", out, lambda *_: None,
                           unmeasurable="no GPU here")
    rows = {r["student_id"]: r for r in csv.DictReader(out.open())}
    assert rows["ada"]["reason"] == "points lost in test_rmsnorm_performance (0/3); no GPU here"
    assert rows["bo"]["reason"] == ""


def test_the_cells_that_lost_points_are_read_from_the_gradebook(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    from autograder.classroom.gradebook import lost_points

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])  # alembic
    with Gradebook(url) as gb:
        gb.add_assignment("a1")
        gb.add_notebook("nb", "a1")
        for cell, points in (("test_rmsnorm_correctness", 3), ("test_rmsnorm_performance", 2)):
            gb.add_grade_cell(cell, "nb", "a1", max_score=points, cell_type="code")
        for student in ("ada", "bo"):
            gb.add_student(student)
            gb.add_submission("a1", student)
            for cell, score in (("test_rmsnorm_correctness", 3), ("test_rmsnorm_performance", 2 if student == "bo" else 0)):
                gb.find_grade(cell, "nb", "a1", student).auto_score = score
        gb.db.commit()
    assert lost_points("a1", url) == {"ada": ["test_rmsnorm_performance (0/2)"]}
