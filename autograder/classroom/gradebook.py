"""What grade-class reads from a graded notebook and writes into the course's gradebook: the grader's verdict
in every graded cell that scored, the submission's flags (edited locked cells, the static scan), and the grades
saved by nbgrader's own SaveAutoGrades. Only the class process calls these: it alone writes the gradebook."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.guard.scan import scan_notebook

if TYPE_CHECKING:
    from autograder.classroom.course import Course

VERDICT_CALL = re.compile(r"""check\(\s*["']([^"']+)["'].*?\.assert_passed\(\s*["']([^"']+)["']""", re.S)


def missing_verdicts(nb) -> list[str]:
    """Graded cells that scored without showing the grader's verdict; each gets an error output (0 points).

    A cell calling check(...).assert_passed(criterion) prints "<exercise> <criterion>: PASS - ..." (or "skip")
    when it passes. A cell that scored without it did not run as written: its code was rewritten before it ran,
    or its error was swallowed (IPython's transformers or exception handlers replaced by the notebook).
    """
    from nbformat import NotebookNode
    from nbgrader.utils import determine_grade, is_grade, is_solution

    missing = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not is_grade(cell) or is_solution(cell):
            continue
        call = VERDICT_CALL.search(cell.source)
        score, _ = determine_grade(cell)
        if call is None or not score:
            continue
        shown = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        if not re.search(rf"^{re.escape(call.group(1))} {re.escape(call.group(2))}: (PASS|skip) - ", shown, re.M):
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            missing.append(grade_id)
            text = ("this graded cell finished without the grader's verdict in its output, so its code did not run "
                    "as written (cells rewritten or errors swallowed by the notebook): no points")
            cell.outputs.append(NotebookNode(output_type="error", ename="NoVerdict", evalue=text,
                                             traceback=[f"NoVerdict: {text}"]))
    return missing


def unmeasured(nb) -> list[str]:
    """Graded cells whose performance was not measured because the GPU was shared (they stopped with GPUShared,
    scoring nothing for now): the student is graded again when the GPU is free."""
    found = []
    for cell in nb.cells:
        if cell.cell_type == "code" and any(o.get("output_type") == "error" and o.get("ename") == "GPUShared"
                                            for o in cell.get("outputs", [])):
            found.append(cell.metadata.get("nbgrader", {}).get("grade_id", "?"))
    return found


def submission_flags(course: Course, assignment: str, student: str, db_url: str) -> list[str]:
    """Edited locked cells (nbgrader grades the original instead) and what the static scan finds."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import compute_checksum

    flags = []
    with Gradebook(db_url) as gb:
        for path in sorted((course.root / course.submitted / student / assignment).glob("*.ipynb")):
            try:
                nb = nbformat.read(path, as_version=4)
            except Exception as exc:  # unreadable JSON: nbgrader will say so too
                flags.append(f"{path.name}: not a readable notebook ({type(exc).__name__})")
                continue
            for cell in nb.cells:
                grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                if not grade_id:
                    continue
                try:
                    source = gb.find_source_cell(grade_id, path.stem, assignment)
                except MissingEntry:
                    continue
                if source.locked and compute_checksum(cell) != source.checksum:
                    flags.append(f"edited locked cell {grade_id} (graded as released)")
            flags += scan_notebook(nb)
    return flags


def save_grades(course: Course, work: Path, assignment: str, student: str, db_url: str) -> tuple[list[str], list[str]]:
    """Move the graded notebooks into autograded/ and their grades into the course's gradebook. Returns the flags
    (cells that scored without the grader's verdict) and the cells whose performance was not measured."""
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades
    from sqlalchemy.exc import SAWarning

    produced = work / course.autograded / student / assignment
    dest = course.root / course.autograded / student / assignment
    submitted = course.root / course.submitted / student / assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    timestamp = CourseDirectory(config=course.config, root=str(course.root)).get_existing_timestamp(str(submitted))
    with Gradebook(db_url) as gb:  # one session per step, as nbgrader's autograde does it
        gb.update_or_create_student(student)
    with Gradebook(db_url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission, with SQLAlchemy 2
        gb.update_or_create_submission(assignment, student, **({"timestamp": timestamp} if timestamp else {}))
    with Gradebook(db_url) as gb:
        expected = [nb.name for nb in gb.find_assignment(assignment).notebooks]
    missing, not_measured = [], []
    for name in expected:
        path = produced / f"{name}.ipynb"
        if not path.exists():  # not submitted: nbgrader scores it 0
            with Gradebook(db_url) as gb:
                for grade in gb.find_submission_notebook(name, assignment, student).grades:
                    grade.auto_score, grade.needs_manual_grade = 0, False
                gb.db.commit()
            continue
        nb = nbformat.read(path, as_version=4)
        missing += missing_verdicts(nb)
        not_measured += unmeasured(nb)
        resources = {"nbgrader": {"notebook": name, "assignment": assignment, "student": student, "db_url": db_url}}
        for step in (SaveAutoGrades, AssignLatePenalties):
            nb, resources = step(config=course.config).preprocess(nb, resources)
        nbformat.write(nb, dest / path.name)
    if (produced / "timestamp.txt").exists():
        shutil.copy(produced / "timestamp.txt", dest / "timestamp.txt")
    flags = [f"cell {gid} passed without the grader's verdict in its output: scored 0" for gid in missing]
    return flags, not_measured


def scores(assignment: str, db_url: str) -> tuple[dict, float]:
    from nbgrader.api import Gradebook, MissingEntry

    scores = {}
    with Gradebook(db_url) as gb:
        try:
            max_score = gb.find_assignment(assignment).max_score
        except MissingEntry:
            max_score = 0.0
        for sub in gb.assignment_submissions(assignment):
            scores[sub.student.id] = sub.score
    return scores, max_score
