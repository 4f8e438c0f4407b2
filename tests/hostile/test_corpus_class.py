"""The corpus's nbgrader cases: one student per case, graded by `python -m autograder grade-class` in the
course folder (as an instructor runs it), next to alice, who hands in the solutions.

writes_other_student is handed in after the others have been graded: it changes alice's submission, so the
run must stop and name the file; once the file is restored, the run resumes and completes.

These cases test the second line of defence, the footprint check, on its own: they grade with the sandbox off
(FUSION_COURSE_SANDBOX=off), where a student's writes outside the workspace succeed and must be found. With the
sandbox on the same writes fail (tests/guard/test_sandbox.py, and mallory in tests/guard/test_isolation.py).
"""

import csv
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import classroom
import corpus_cases as corpus
from autograder.publish import build

pytestmark = pytest.mark.slow  # one class, graded once: conftest keeps these tests on one worker
NAME = classroom.ASSIGNMENT
STOPPER = "writes_other_student"
CASES = {case.name: case for case in corpus.load("class")}


def _cells(case) -> dict:
    """The cells a case hands in: its source split at '# %% cell <grade_id>' lines."""
    parts = re.split(r"^# %% cell (\S+)\n", case.source, flags=re.M)
    return {gid: body for gid, body in zip(parts[1::2], parts[2::2])}


# As an instructor with several GPUs runs it: one student per GPU at a time (on one GPU or none, one at a time).
SLOTS = ["--gpus", "all"] if torch.cuda.device_count() > 1 else []


def _grade_class(work, *args):
    return subprocess.run([sys.executable, "-m", "autograder", "grade-class", NAME, "--timeout", "120", *SLOTS, *args],
                          cwd=work, capture_output=True, text=True, timeout=3600, check=False,
                          env={**build.tool_env(), "FUSION_COURSE_SANDBOX": "off"})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    work = tmp_path_factory.mktemp("class")
    db = classroom.make_course(work)
    pidfile = work.parent / "daemon.pid"
    os.environ["CORPUS_DAEMON_PIDFILE"] = str(pidfile)
    try:
        classroom.submit(work, "alice")
        for name, case in CASES.items():
            if name != STOPPER:
                classroom.submit(work, name, _cells(case))
        first = _grade_class(work)
        alice = work / "submitted" / "alice" / NAME / f"{NAME}.ipynb"
        kept = alice.read_bytes()
        classroom.submit(work, STOPPER, _cells(CASES[STOPPER]))
        stopped = _grade_class(work)
        alice.write_bytes(kept)  # the instructor restores what the run named
        resumed = _grade_class(work)
    finally:
        del os.environ["CORPUS_DAEMON_PIDFILE"]
    with open(work / "grading" / f"grades-{NAME}.csv") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    return work, db, rows, (first, stopped, resumed), pidfile


def test_the_run_reports_every_student_and_loses_none(graded):
    _, _, rows, (first, _, resumed), _ = graded
    assert first.returncode == 0, first.stdout + first.stderr  # 0: every student recorded, graded or not
    assert set(rows) == set(CASES) | {"alice"}
    summary = resumed.stdout.strip().splitlines()[-1]
    assert f"{len(rows)} students:" in summary and "0 lost" in summary


def test_the_solution_gets_full_marks_and_no_flag_but_its_origin(graded):
    """alice submitted the reference solution: no suspect code, and named only as what it is."""
    _, db, rows, _, _ = graded
    assert rows["alice"]["status"] == "graded", rows["alice"]["reason"]
    flags = rows["alice"]["flags"].split("; ")
    assert any("this is the course's reference kernel" in f for f in flags)
    assert all("course's reference kernel" in f or " like " in f for f in flags), flags
    assert float(rows["alice"]["score"]) == sum(classroom.POINTS.values())
    assert classroom.scores(db, "alice") == {cell: (p, p) for cell, p in classroom.POINTS.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_graded_as_expected(graded, name):
    work, db, rows, _, _ = graded
    case, row = CASES[name], rows[name]
    assert row["status"] == case.STATUS, (row["status"], row["reason"])
    for phrase in case.REASON or ():
        assert phrase in row["reason"], (phrase, row["reason"])
    for phrase in case.FLAGS or ():
        assert phrase in row["flags"], (phrase, row["flags"])
    if case.STATUS != "graded":
        assert float(row["score"]) == 0
        return
    scores = classroom.scores(db, name)
    for cell in case.ZERO or ():
        assert scores[cell][0] == 0, (cell, scores)
    for cell in case.FULL or ():
        assert scores[cell][0] == scores[cell][1] > 0, (cell, scores)
    shown = classroom.outputs(work, name)
    for phrase in case.SHOWS or ():
        assert phrase in shown, phrase


def test_a_run_that_meets_a_change_to_another_students_files_stops_and_names_it(graded):
    _, _, rows, (_, stopped, resumed), _ = graded
    assert stopped.returncode == 3
    assert "grading stopped" in stopped.stderr and f"submitted/alice/{NAME}/{NAME}.ipynb" in stopped.stderr
    assert "Restore them" in stopped.stderr
    assert resumed.returncode == 0 and f"{STOPPER}: tampered earlier, submission unchanged: skipped" in resumed.stdout
    assert rows["alice"]["status"] == "graded"  # graded before, its restored submission unchanged


def test_the_gradebook_written_over_by_a_student_is_restored(graded):
    work, db, rows, _, _ = graded
    from nbgrader.api import Gradebook

    assert rows["writes_gradebook"]["status"] == "tampered"
    with Gradebook(db) as gb:  # readable, and the others' grades are there
        graded_ids = {s.student.id for s in gb.assignment_submissions(NAME)}
        tampered_score = gb.find_submission(NAME, "writes_gradebook").score
    # Every student is in the gradebook; the one who tampered with 0 points, not the 100 it wrote for itself.
    assert "alice" in graded_ids and "writes_gradebook" in graded_ids and tampered_score == 0
    assert b"all grades are 100" not in (work / "gradebook.db").read_bytes()


def test_a_daemon_left_behind_is_ended_with_its_notebook(graded):
    work, _, _, _, pidfile = graded
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert b"too late" not in (work / "gradebook.db").read_bytes()


def test_feedback_can_be_generated_for_the_graded(graded):
    work, db, rows, _, _ = graded
    out = subprocess.run(build.nbgrader_command("generate_feedback", NAME, f"--db={db}", "--log-level=ERROR"),
                         cwd=work, capture_output=True, text=True, env=build.tool_env(),
                         check=False)
    assert out.returncode == 0, out.stderr
    # Every student recorded gets a page, those not graded one that says what happened.
    assert {p.parent.parent.name for p in (work / "feedback").glob(f"*/{NAME}/{NAME}.html")} == set(rows)
    shutil.rmtree(work / "feedback")
