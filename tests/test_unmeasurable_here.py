"""grade-class says at its start what the grading settings require that this machine cannot measure, and gives
it as the reason of the points it costs."""

import csv
import dataclasses

from autograder import config
from autograder.classroom import grade_class


def test_required_gpu_criteria_without_a_gpu_are_said():
    required = dataclasses.replace(config.load(), require_performance=True)
    said = grade_class.unmeasurable_here(required, gpu=False)
    assert "no CUDA GPU" in said and "require_performance = true" in said and "scores 0" in said
    assert grade_class.unmeasurable_here(required, gpu=True) is None
    assert grade_class.unmeasurable_here(dataclasses.replace(required, require_performance=False), gpu=False) is None


def test_a_graded_student_who_lost_points_reads_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(grade_class, "gradebook_scores", lambda assignment, db: ({"ada": 7.0, "bo": 10.0}, 10.0))
    state = {s: {"status": grade_class.GRADED, "reason": "", "flags": []} for s in ("ada", "bo")}
    out = tmp_path / "grades.csv"
    grade_class._write_csv(tmp_path, "a1", ["ada", "bo"], state, "sqlite://", out, lambda *_: None,
                           unmeasurable="no GPU here")
    rows = {r["student_id"]: r for r in csv.DictReader(out.open())}
    assert rows["ada"]["reason"] == "no GPU here" and rows["bo"]["reason"] == ""
