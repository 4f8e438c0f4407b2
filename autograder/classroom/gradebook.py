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
from autograder.judge.launch import judge_said, judged_pair, read_verdicts
from autograder.report import PASSED, SKIPPED

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


def judge_disagrees(nb, verdicts: list[dict]) -> list[str]:
    """Graded cells of a criterion the judge decides (correctness, precision, performance of a kernel exercise)
    that scored without the judge passing it; each gets an error output (0 points). The cell's pass came from the
    student's process, the verdict from the judge: they disagree only where that process was made to lie."""
    from nbformat import NotebookNode
    from nbgrader.utils import determine_grade, is_grade, is_solution

    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not is_grade(cell) or is_solution(cell):
            continue
        call = VERDICT_CALL.search(cell.source)
        if call is None or not determine_grade(cell)[0] or not judged_pair(call.group(1), call.group(2)):
            continue
        said = judge_said(verdicts, call.group(1), call.group(2))
        if said in (PASSED, SKIPPED):
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        found.append(f"cell {grade_id} passed, but the judge {'failed' if said else 'made no verdict on'} "
                     f"{call.group(1)} {call.group(2)}: scored 0")
        text = (f"the judge {'failed' if said else 'made no verdict on'} {call.group(1)} {call.group(2)}, so this "
                "cell's pass did not come from the grader: no points")
        cell.outputs.append(NotebookNode(output_type="error", ename="NoJudgeVerdict", evalue=text,
                                         traceback=[f"NoJudgeVerdict: {text}"]))
    return found


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


def _open_submission(course: Course, assignment: str, student: str, db_url: str) -> list[str]:
    """The student and their submission in the gradebook (as nbgrader's autograde makes them); returns the
    assignment's notebook names."""
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.exc import SAWarning

    submitted = course.root / course.submitted / student / assignment
    timestamp = CourseDirectory(config=course.config, root=str(course.root)).get_existing_timestamp(str(submitted))
    with Gradebook(db_url) as gb:  # one session per step, as nbgrader's autograde does it
        gb.update_or_create_student(student)
    with Gradebook(db_url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission, with SQLAlchemy 2
        gb.update_or_create_submission(assignment, student, **({"timestamp": timestamp} if timestamp else {}))
    with Gradebook(db_url) as gb:
        return [nb.name for nb in gb.find_assignment(assignment).notebooks]


def _zero(db_url: str, name: str, assignment: str, student: str) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        for grade in gb.find_submission_notebook(name, assignment, student).grades:
            grade.auto_score, grade.needs_manual_grade = 0, False
        gb.db.commit()


def _save(course: Course, nb, name: str, assignment: str, student: str, db_url: str, dest: Path) -> None:
    """nbgrader's own SaveAutoGrades and AssignLatePenalties on a graded notebook, then the notebook to dest."""
    import nbformat
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    resources = {"nbgrader": {"notebook": name, "assignment": assignment, "student": student, "db_url": db_url}}
    for step in (SaveAutoGrades, AssignLatePenalties):
        nb, resources = step(config=course.config).preprocess(nb, resources)
    nbformat.write(nb, dest / f"{name}.ipynb")


def save_grades(course: Course, work: Path, assignment: str, student: str, db_url: str) -> tuple[list[str], list[str]]:
    """Move the graded notebooks into autograded/ and their grades into the course's gradebook. Returns the flags
    (cells that scored without the grader's verdict) and the cells whose performance was not measured."""
    import nbformat

    produced = work / course.autograded / student / assignment
    dest = course.root / course.autograded / student / assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    expected = _open_submission(course, assignment, student, db_url)
    missing, not_measured, overruled = [], [], []
    verdicts = read_verdicts(work) or []
    for name in expected:
        path = produced / f"{name}.ipynb"
        if not path.exists():  # not submitted: nbgrader scores it 0
            _zero(db_url, name, assignment, student)
            continue
        nb = nbformat.read(path, as_version=4)
        missing += missing_verdicts(nb)
        overruled += judge_disagrees(nb, verdicts)
        not_measured += unmeasured(nb)
        _save(course, nb, name, assignment, student, db_url, dest)
    if (produced / "timestamp.txt").exists():
        shutil.copy(produced / "timestamp.txt", dest / "timestamp.txt")
    flags = [f"cell {gid} passed without the grader's verdict in its output: scored 0" for gid in missing] + overruled
    return flags, not_measured


# What a student whose notebook was not graded reads at the top of their feedback page, by status.
NOT_GRADED_WORDS = {
    "crashed": ("Your notebook crashed while it was being graded",
                ("Run it top to bottom yourself (Kernel, Restart Kernel and Run All Cells) to find the cell that "
                 "fails, fix it and hand the notebook in again.")),
    "timed out": ("Your notebook did not finish within the grading time limit",
                  ("Look for a loop that never ends or a cell that waits; run it top to bottom yourself, then hand "
                   "it in again.")),
    "tampered": ("Your notebook changed files outside its own folder while it was being graded",
                 ("Graded code may only write where it runs. Your instructor will look at it; until then it "
                  "scores 0.")),
    "not run": ("Your notebook could not be graded this time",
                "Nothing is wrong with it as far as we know: it will be graded on the next run."),
}


def not_graded_notebook(path: Path | None, fallback: Path, status: str, reason: str):
    """The student's notebook (or the release, when theirs is missing or unreadable) as their feedback shows it:
    a note on top saying what happened, their outputs cleared, and every graded code cell carrying an error
    output, so that nbgrader scores it 0."""
    import nbformat
    from nbformat import NotebookNode
    from nbgrader.utils import is_grade

    try:
        nb = nbformat.read(path, as_version=4) if path is not None and path.is_file() else None
    except Exception:  # noqa: BLE001  unreadable: the release stands in for it
        nb = None
    own = nb is not None
    release = nbformat.read(fallback, as_version=4)
    known = {c.metadata["nbgrader"]["grade_id"] for c in release.cells if c.metadata.get("nbgrader", {}).get("grade_id")}
    if nb is None:
        nb = release
    for cell in nb.cells:  # a cell the student added or renamed is no cell of nbgrader's
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") not in known:
            cell.get("metadata", {}).pop("nbgrader", None)
    headline, advice = NOT_GRADED_WORDS.get(status, (f"Your notebook was not graded ({status})", ""))
    why = reason.rstrip(".") if reason else "no reason was recorded"
    note = (f"## Not graded: {status}\n\n**{headline}.** What the grader saw: {why}.\n\n"
            f"Every graded cell below scores 0 for this run. {advice}"
            + ("" if own else "\n\n(Your notebook could not be read, so the released notebook is shown.)"))
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        if is_grade(cell):
            text = f"not graded: the notebook {status} ({why})"
            cell.outputs.append(NotebookNode(output_type="error", ename="NotGraded", evalue=text,
                                             traceback=[f"NotGraded: {text}"]))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))
    return nb


def save_not_graded(course: Course, assignment: str, student: str, db_url: str, status: str, reason: str) -> None:
    """A student whose notebook was not graded (crashed, timed out, tampered, not run) in the gradebook with 0
    for every graded cell, and in autograded/ with a page saying why, for `nbgrader generate_feedback`."""
    submitted = course.root / course.submitted / student / assignment
    dest = course.root / course.autograded / student / assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in _open_submission(course, assignment, student, db_url):
        release = course.root / course.release / assignment / f"{name}.ipynb"
        nb = not_graded_notebook(submitted / f"{name}.ipynb", release, status, reason)
        _save(course, nb, name, assignment, student, db_url, dest)
        _zero(db_url, name, assignment, student)  # cells the student deleted included
    if (submitted / "timestamp.txt").exists():
        shutil.copy(submitted / "timestamp.txt", dest / "timestamp.txt")


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


def lost_points(assignment: str, db_url: str) -> dict[str, list[str]]:
    """{student: ["<grade_id> (score/points)", ...]}: every graded cell of the assignment that scored below its
    points, for the CSV's reason (the feedback page says why each one failed)."""
    from nbgrader.api import Gradebook

    lost: dict[str, list[str]] = {}
    with Gradebook(db_url) as gb:
        for sub in gb.assignment_submissions(assignment):
            for nb in sub.notebooks:
                for grade in nb.grades:
                    if grade.max_score and (grade.score or 0.0) < grade.max_score:
                        lost.setdefault(sub.student.id, []).append(
                            f"{grade.name} ({grade.score or 0.0:g}/{grade.max_score:g})")
    return lost
