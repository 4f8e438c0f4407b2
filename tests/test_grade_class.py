"""grade-class: every student ends up in the CSV, crashed and hung notebooks included; re-runs resume."""

import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import build
from autograder.grade_class import grade_class

pytestmark = pytest.mark.slow
NAME = "01_hbm_cost_model"


def _submit(work, student, first_cell_extra=""):
    release = nbformat.read(work / "course" / NAME / f"{NAME}.ipynb", as_version=4)
    source = nbformat.read(work / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in solutions:
            cell.source = solutions[gid] + first_cell_extra
            first_cell_extra = ""
    folder = work / "submitted" / student / NAME
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(release, folder / f"{NAME}.ipynb")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    work = tmp_path_factory.mktemp("class")
    for f in ("nbgrader_config.py", "grading.toml"):
        shutil.copy(build.ROOT / f, work)
    shutil.copytree(build.ROOT / "solutions" / NAME, work / "solutions" / NAME)
    db = f"sqlite:///{work}/gradebook.db"
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", NAME, "--force", f"--db={db}"],
                   cwd=work, check=True, capture_output=True, env=build.tool_env())
    _submit(work, "alice")
    _submit(work, "crasher", "\nimport os\nos._exit(1)  # kills the kernel\n")
    _submit(work, "hanger", "\nimport time\ntime.sleep(100000)\n")
    log = []
    rows = grade_class(work, NAME, timeout=45, db_url=db, echo=log.append)
    return work, db, rows, log


def test_every_student_is_in_the_csv_with_a_status_and_reason(course):
    work, _, rows, log = course
    by = {r["student_id"]: r for r in rows}
    assert set(by) == {"alice", "crasher", "hanger"}
    assert by["alice"]["status"] == "graded" and by["alice"]["score"] == 11 and by["alice"]["max_score"] == 14
    assert by["crasher"]["status"] == "crashed" and by["crasher"]["score"] == 0 and by["crasher"]["reason"]
    assert by["hanger"]["status"] == "timed out" and "45 s" in by["hanger"]["reason"]
    with open(work / f"grades-{NAME}.csv") as f:
        assert {r["student_id"]: r["status"] for r in csv.DictReader(f)} == {
            "alice": "graded", "crasher": "crashed", "hanger": "timed out"}
    assert "3 students: 1 graded, 1 crashed, 1 timed out, 0 lost" in log[-1]


def test_rerun_skips_unchanged_submissions_and_regrades_changed_ones(course):
    work, db, first, _ = course
    log = []
    again = grade_class(work, NAME, timeout=45, db_url=db, echo=log.append)
    assert again == first
    assert sum("skipped" in line for line in log) == 3
    _submit(work, "crasher")  # the student fixes the notebook and hands it in again
    log = []
    rows = grade_class(work, NAME, timeout=45, db_url=db, echo=log.append)
    assert {r["student_id"]: r["status"] for r in rows}["crasher"] == "graded"
    assert sum("skipped" in line for line in log) == 2


def test_bad_usage_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nbgrader_config.py"):
        grade_class(tmp_path, NAME)
    shutil.copy(build.ROOT / "nbgrader_config.py", tmp_path)
    with pytest.raises(FileNotFoundError, match="no submissions"):
        grade_class(tmp_path, NAME)
