"""The leaderboard's figures: what check() records in a grading process and grade-class reads back (the GPU's
numbers faked here; tests/classroom/test_grade_class.py covers the CPU's "not measured")."""

import csv

from autograder import config
from autograder.classroom import leaderboard
from autograder.report import CriterionResult, Report


def test_recorded_fractions_reach_the_page_the_csv_and_the_pseudonyms(tmp_path, monkeypatch):
    settings = tmp_path / ".grading.toml"
    settings.write_text("trials = 1\n")
    cfg = config.load(settings)
    monkeypatch.setenv(leaderboard.RECORD_ENV, "1")
    leaderboard.record(Report("02.rmsnorm", [CriterionResult("performance", "passed", "", {"fraction_of_peak": 0.5})]), cfg)
    leaderboard.record(Report("02.rmsnorm", [CriterionResult("performance", "passed", "", {"fraction_of_peak": 0.9})]), cfg)
    leaderboard.record(Report("06.row_argmax", [CriterionResult("performance", "passed", "", {
        "decode_fraction_of_peak": 2.5, "training_fraction_of_peak": 1.7})]), cfg)
    figures = leaderboard.read(tmp_path)
    assert figures == {"02.rmsnorm": 0.9, "06.row_argmax": 1.7}  # the last check; the worst shape
    exercises = ["02.rmsnorm", "06.row_argmax"]
    board = {"alice": figures, "bob": {"02.rmsnorm": 0.95}}
    leaderboard.write("x", board, exercises, tmp_path / "b.html", tmp_path / "b.csv", anonymous=True, key=7)
    with open(tmp_path / "b.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == [leaderboard.pseudonym("alice", 7), leaderboard.pseudonym("bob", 7)]
    assert rows[1]["06.row_argmax"] == "not measured" and rows[0]["02.rmsnorm"] == "0.90"
    assert leaderboard.pseudonym("alice", 7) != leaderboard.pseudonym("alice", 8)  # keyed by the course's seed
    assert "alice" not in (tmp_path / "b.html").read_text()
    assert leaderboard.column(figures, exercises) == "02.rmsnorm 0.90; 06.row_argmax 1.70"
