"""grade-class: every student ends up in the CSV, crashed and hung notebooks included; re-runs resume."""

import csv
import shutil
from pathlib import Path

import pytest

import classroom
from autograder.publish import build
from autograder.classroom.grade_class import grade_class

pytestmark = pytest.mark.slow  # one class, graded once: conftest keeps these tests on one worker
NAME = classroom.ASSIGNMENT
FULL = sum(classroom.POINTS.values())


def _with_solution(extra: str) -> dict:
    return {"fused_chain": classroom.solutions()["fused_chain"] + extra}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    work = tmp_path_factory.mktemp("class")
    db = classroom.make_course(work)
    classroom.submit(work, "alice")
    classroom.submit(work, "crasher", _with_solution("\nimport os\nos._exit(1)  # kills the kernel\n"))
    classroom.submit(work, "hanger", _with_solution("\nimport time\ntime.sleep(100000)\n"))
    log = []
    rows = grade_class(work, NAME, timeout=60, db_url=db, echo=log.append)
    return work, db, rows, log


def test_every_student_is_in_the_csv_with_a_status_and_reason(course):
    work, _, rows, log = course
    by = {r["student_id"]: r for r in rows}
    assert set(by) == {"alice", "crasher", "hanger"}
    assert by["alice"]["status"] == "graded" and by["alice"]["score"] == FULL and by["alice"]["max_score"] == FULL
    assert by["crasher"]["status"] == "crashed" and by["crasher"]["score"] == 0 and by["crasher"]["reason"]
    assert by["hanger"]["status"] == "timed out" and "60 s" in by["hanger"]["reason"]
    with open(work / f"grades-{NAME}.csv") as f:
        assert {r["student_id"]: r["status"] for r in csv.DictReader(f)} == {
            "alice": "graded", "crasher": "crashed", "hanger": "timed out"}
    assert "3 students: 1 graded, 1 crashed, 1 timed out, 0 tampered, 0 lost" in log[-1]
    assert "exited with code 1" in by["crasher"]["reason"] and "cell fused_chain" in by["crasher"]["reason"]
    assert "calls os._exit" in by["crasher"]["flags"]
    # alice submitted the reference solution: named by its kernel's fingerprint and by similarity, score kept.
    alice = by["alice"]["flags"].split("; ")
    assert any("this is the course's reference kernel for 01.fused_chain (kernels/fused_chain.py: _fused_chain_kernel)" in f for f in alice)
    assert any(f.endswith("like the reference solution") for f in alice)
    assert any("like crasher's" in f for f in alice)  # the crasher pasted the same answer
    assert all("reference" in f or " like " in f for f in alice), alice
    assert (work / f"similarity-{NAME}.html").is_file()


def test_grades_reach_the_course_gradebook_and_autograded_folder(course):
    work, db, _, _ = course
    assert classroom.scores(db, "alice") == {cell: (p, p) for cell, p in classroom.POINTS.items()}
    assert (work / "autograded" / "alice" / NAME / f"{NAME}.ipynb").exists()
    assert "PASS" in classroom.outputs(work, "alice")


def test_rerun_skips_unchanged_submissions_and_regrades_changed_ones(course):
    work, db, first, _ = course
    log = []
    again = grade_class(work, NAME, timeout=60, db_url=db, echo=log.append)
    assert again == first
    assert sum("skipped" in line for line in log) == 3
    classroom.submit(work, "crasher")  # the student fixes the notebook and hands it in again
    log = []
    rows = grade_class(work, NAME, timeout=60, db_url=db, echo=log.append)
    assert {r["student_id"]: r["status"] for r in rows}["crasher"] == "graded"
    assert sum("skipped" in line for line in log) == 2


def test_a_student_during_whom_the_run_died_twice_is_recorded_as_crashed(course):
    import json

    work, db, _, _ = course
    state_file = work / "autograded" / f".grade-class-{NAME}.json"
    state = json.loads(state_file.read_text())
    state["alice"].update(status="in progress", attempts=2)  # as a run killed twice while grading alice leaves it
    state_file.write_text(json.dumps(state))
    log = []
    rows = grade_class(work, NAME, timeout=60, db_url=db, echo=log.append)
    alice = {r["student_id"]: r for r in rows}["alice"]
    assert alice["status"] == "crashed" and "died twice" in alice["reason"]


def test_bad_usage_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nbgrader_config.py"):
        grade_class(tmp_path, NAME)
    shutil.copy(build.ROOT / "nbgrader_config.py", tmp_path)
    with pytest.raises(FileNotFoundError, match="grading settings .*grading.toml"):
        grade_class(tmp_path, NAME)
    shutil.copy(build.ROOT / "grading.toml", tmp_path)
    with pytest.raises(FileNotFoundError, match="no submissions"):
        grade_class(tmp_path, NAME)
    (tmp_path / "submitted" / "bob" / NAME).mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no gradebook"):
        grade_class(tmp_path, NAME)
    with pytest.raises(ValueError, match="sqlite"):
        grade_class(tmp_path, NAME, db_url="postgresql://somewhere/grades")


def test_each_student_gets_a_private_copy_of_the_font_list(tmp_path):
    """A private, empty matplotlib folder made every student's first plot scan the machine's fonts again."""
    import matplotlib

    from autograder.classroom import process as gc

    grading = tmp_path / "grading.toml"
    grading.write_text("")
    env = gc.child_env(tmp_path, grading)
    private = env["MPLCONFIGDIR"]
    assert private.startswith(str(tmp_path))
    ours = sorted(p.name for p in Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    theirs = sorted(p.name for p in Path(private).glob("fontlist-*.json"))
    assert ours and theirs == ours
