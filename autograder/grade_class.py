"""Grade a whole class with nbgrader, one student at a time, each in a workspace and process of its own.

    python -m autograder grade-class ASSIGNMENT [--timeout SECONDS] [--force] [--csv PATH]

Run it where nbgrader_config.py is (the course root). nbgrader's own `autograde` drops a notebook whose
kernel crashed and reports it like a wrong answer, and runs every student's code where it can write into the
gradebook and into other students' folders. Here, for each student found in submitted/:

1. A private workspace (a temporary folder) gets a copy of the course's nbgrader configuration, the source
   assignment, this student's submission and a gradebook holding no other student.
2. ``python -m autograder.grade_one`` runs nbgrader's autograde there, in a process of its own with a time
   limit; it ends every process the notebook started before nbgrader writes its results.
3. Everything the grading of later students depends on (the course folder, the installed packages, Jupyter's
   configuration) must be as it was; otherwise the student is recorded as "tampered", the gradebook is put
   back, and if anything else was changed the run stops and names it.
4. The graded notebook is checked (a graded cell that passed must show the grader's verdict: see
   ``_missing_verdicts``) and its grades are saved into the course's gradebook by nbgrader's own
   SaveAutoGrades; the notebook goes to autograded/ for `nbgrader generate_feedback`.

Every student ends up in the CSV as graded, crashed, timed out or tampered, with the reason, and with the
flags of a static scan of their cells (autograder.scan), of any edited locked cell, and of answers that closely
match the reference solution or another student's (autograder.similarity; side by side in
similarity-ASSIGNMENT.html next to the CSV). Re-running is safe: a
student whose submission has not changed since it was graded is skipped (--force grades everyone again), so an
interrupted run resumes; a submission during which the run died twice is recorded as crashed.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from . import procs
from .build import tool_env
from .footprint import Footprint, watched_roots

GRADED, CRASHED, TIMED_OUT, TAMPERED, IN_PROGRESS = "graded", "crashed", "timed out", "tampered", "in progress"
FIELDS = ["student_id", "assignment", "status", "score", "max_score", "reason", "flags"]
CONFIG_FILES = ("nbgrader_config.py", "grading.toml")  # copied into each workspace (what the config reads)


class GradingStopped(RuntimeError):
    """A submission changed files that later students' grading depends on; they must be restored first."""


class Course:
    """The course folder's layout, as its nbgrader_config.py sets it."""

    def __init__(self, root: Path):
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        if not (root / "nbgrader_config.py").exists():
            raise FileNotFoundError(f"{root} has no nbgrader_config.py: run grade-class from the course root")
        from .config import DEFAULT_PATH, ENV_VAR

        self.root = root
        saved = dict(os.environ)  # the configuration may set variables (the course's sets the grading file)
        try:
            self.config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
            self.grading_file = Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        if not self.grading_file.is_file():
            raise FileNotFoundError(f"the grading settings {self.grading_file} (${ENV_VAR}) do not exist")
        coursedir = CourseDirectory(config=self.config, root=str(root))
        self.source = coursedir.source_directory
        self.release = coursedir.release_directory
        self.submitted = coursedir.submitted_directory
        self.autograded = coursedir.autograded_directory


def _submission_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _sqlite_file(db_url: str) -> Path:
    if not db_url.startswith("sqlite:///"):
        raise ValueError(f"grade-class gives each student a private copy of the gradebook and needs an sqlite "
                         f"gradebook (sqlite:///PATH); got {db_url}")
    return Path(db_url[len("sqlite:///"):])


def _why_it_failed(output: str) -> str:
    text = output.lower()
    if "kernel died" in text or "deadkernel" in text or "kernel crashed" in text:
        return "the notebook's kernel died while running (a crash: segfault, abort, os._exit, out of memory?)"
    if "cellexecutionerror" in text or "timeout" in text:
        return "nbgrader could not execute the notebook"
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return "nbgrader did not grade it: " + (lines[-1][-300:] if lines else "no output")


# -- one student, in a workspace of its own ------------------------------------------------------------------

def _private_gradebook(db_file: Path, into: Path) -> Path:
    """A copy of the gradebook with the assignments and their cells but no student: what a workspace gets."""
    from nbgrader.api import Gradebook

    template = into / "template.db"
    shutil.copy(db_file, template)
    with Gradebook(f"sqlite:///{template}") as gb:
        for student in gb.students:
            gb.remove_student(student.id)  # their submissions and grades go with them
    return template


def _workspace(course: Course, assignment: str, student: str, template: Path, tmp: Path) -> Path:
    work = tmp / f"student-{student}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    for name in CONFIG_FILES:
        if (course.root / name).exists():
            shutil.copy(course.root / name, work / name)
    shutil.copytree(course.root / course.source / assignment, work / course.source / assignment)
    shutil.copytree(course.root / course.submitted / student / assignment,
                    work / course.submitted / student / assignment)
    shutil.copy(template, work / "gradebook.db")
    return work


def _child_env(work: Path, grading_file: Path) -> dict:
    """nbgrader's environment, with every cache and runtime folder the notebook could use kept private, and
    the grading settings a private copy (the course folder's path is nobody's business)."""
    from .config import ENV_VAR

    env = tool_env()
    shutil.copy(grading_file, work / ".grading.toml")
    env[ENV_VAR] = str(work / ".grading.toml")
    private = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "IPYTHONDIR": "ipython",
               "JUPYTER_RUNTIME_DIR": "jupyter-runtime", "MPLCONFIGDIR": "matplotlib"}
    for var, name in private.items():
        env[var] = str(work / ".private" / name)
    env.update(PYTHONDONTWRITEBYTECODE="1", PWD=str(work))
    env.pop("OLDPWD", None)
    return env


def grade_one(work: Path, assignment: str, student: str, timeout: float, grading_file: Path) -> tuple[str, str]:
    """(status, reason): nbgrader's autograde of one student in its workspace, in a process of its own."""
    cmd = [sys.executable, "-m", "autograder.grade_one", str(work), assignment, student]
    before = procs.children()
    env = _child_env(work, grading_file)
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.kill_tree(proc.pid)
        procs.end_children(keep=before)  # what slipped out of the tree while it was being ended
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)  # a survivor still holding the pipe must not hold up the class
        return TIMED_OUT, f"grading did not finish within {timeout:.0f} s (a hang or an endless loop?)"
    finally:
        procs.end_children(keep=before)  # orphans that climbed up to this (subreaper) process
    lines = output.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    graded = list((work / "autograded" / student / assignment).glob("*.ipynb"))
    if proc.returncode == 0 and result.get("success") and graded:
        return GRADED, ""
    if result.get("reason"):
        return CRASHED, result["reason"]
    if proc.returncode and proc.returncode < 0:
        return CRASHED, f"the grading process was ended by {procs.signal_meaning(-proc.returncode)}"
    return CRASHED, _why_it_failed(result.get("log", "") + result.get("error", "") or output)


# -- what the notebook shows, and what was submitted ---------------------------------------------------------

VERDICT_CALL = re.compile(r"""check\(\s*["']([^"']+)["'].*?\.assert_passed\(\s*["']([^"']+)["']""", re.S)


def _missing_verdicts(nb) -> list[str]:
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


def _submission_flags(course: Course, assignment: str, student: str, db_url: str) -> list[str]:
    """Edited locked cells (nbgrader grades the original instead) and what the static scan finds."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import compute_checksum

    from .scan import scan_notebook

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


def _save_grades(course: Course, work: Path, assignment: str, student: str, db_url: str) -> list[str]:
    """Move the graded notebooks into autograded/ and their grades into the course's gradebook."""
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
    missing = []
    for name in expected:
        path = produced / f"{name}.ipynb"
        if not path.exists():  # not submitted: nbgrader scores it 0
            with Gradebook(db_url) as gb:
                for grade in gb.find_submission_notebook(name, assignment, student).grades:
                    grade.auto_score, grade.needs_manual_grade = 0, False
                gb.db.commit()
            continue
        nb = nbformat.read(path, as_version=4)
        missing += _missing_verdicts(nb)
        resources = {"nbgrader": {"notebook": name, "assignment": assignment, "student": student, "db_url": db_url}}
        for step in (SaveAutoGrades, AssignLatePenalties):
            nb, resources = step(config=course.config).preprocess(nb, resources)
        nbformat.write(nb, dest / path.name)
    if (produced / "timestamp.txt").exists():
        shutil.copy(produced / "timestamp.txt", dest / "timestamp.txt")
    return [f"cell {gid} passed without the grader's verdict in its output: scored 0" for gid in missing]


# -- the class -----------------------------------------------------------------------------------------------

def _scores(assignment: str, db_url: str) -> tuple[dict, float]:
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


def _relative(paths, root: Path) -> list[str]:
    return [os.path.relpath(p, root) if Path(p).is_relative_to(root) else p for p in paths]


def grade_class(root: Path, assignment: str, timeout: float = 3600, force: bool = False,
                csv_path: Path | None = None, db_url: str | None = None, echo=print) -> list[dict]:
    root = Path(root).resolve()
    course = Course(root)
    submitted = root / course.submitted
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    if not students:
        raise FileNotFoundError(f"no submissions of {assignment!r} under {submitted}")
    db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    db_file = _sqlite_file(db_url).resolve()
    if not db_file.exists():
        raise FileNotFoundError(f"no gradebook at {db_file}: run `nbgrader generate_assignment {assignment}` first")
    state_file = root / course.autograded / f".grade-class-{assignment}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() and not force else {}

    def save_state():
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=1))
        footprint.refresh([state_file])

    procs.become_subreaper()  # processes a notebook leaves behind come back here to be ended
    try:
        with tempfile.TemporaryDirectory(prefix="grade-class-") as tmp:
            footprint = Footprint(watched_roots(root))
            for i, student in enumerate(students, 1):
                _grade_student(course, assignment, student, f"[{i}/{len(students)}]", Path(tmp), timeout, db_url,
                               state, save_state, footprint, echo)
    finally:
        procs.become_subreaper(False)
    csv_path = Path(csv_path or root / f"grades-{assignment}.csv")
    similar = _similarity(course, assignment, students, csv_path.with_name(f"similarity-{assignment}.html"), echo)
    return _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar)


def _similarity(course: Course, assignment: str, students: list[str], report: Path, echo) -> dict[str, list[str]]:
    """Similarity flags of every student's answers against the reference solution and each other (a flag, never
    a score), and the side-by-side report; a failure of the comparison is said and costs no grade."""
    from .similarity import similarity

    root = course.root
    try:
        flags = similarity({s: root / course.submitted / s / assignment for s in students},
                           root / course.source / assignment, root / course.release / assignment, report)
    except Exception as exc:  # noqa: BLE001  the grades stand without it
        echo(f"similarity not compared ({type(exc).__name__}: {exc}); the grades are not affected")
        return {}
    flagged = sum(bool(f) for f in flags.values())
    echo(f"similarity: {flagged} of {len(students)} students flagged; side by side in {report}")
    return flags


def _grade_student(course, assignment, student, counter, tmp, timeout, db_url, state, save_state, footprint, echo):
    """Grade one student (or skip them), keeping state and the course folder right whatever happens."""
    root, db_file = course.root, _sqlite_file(db_url).resolve()
    journal = db_file.with_name(db_file.name + "-journal")
    digest = _submission_hash(root / course.submitted / student / assignment)
    done = state.get(student)
    same = bool(done) and done["hash"] == digest
    if same and done["status"] != IN_PROGRESS:
        echo(f"{counter} {student}: {done['status']} earlier, submission unchanged: skipped")
        return
    if same and done.get("attempts", 0) >= 2:
        state[student] = dict(done, status=CRASHED, reason="the class run itself died twice while grading this "
                              "submission (does it kill the grader's processes?)")
        save_state()
        echo(f"{counter} {student}: {CRASHED} ({state[student]['reason']})")
        return
    attempts = done.get("attempts", 0) + 1 if same else 1
    state[student] = {"status": IN_PROGRESS, "hash": digest, "attempts": attempts, "reason": "", "flags": []}
    save_state()
    started = time.time()
    flags = _submission_flags(course, assignment, student, db_url)
    template = tmp / "template.db" if (tmp / "template.db").exists() else _private_gradebook(db_file, tmp)
    shutil.copy(db_file, tmp / "gradebook-before.db")
    try:
        work = _workspace(course, assignment, student, template, tmp)
        status, reason = grade_one(work, assignment, student, timeout, course.grading_file)
        changed = footprint.changes()
        unrestorable = []
        if changed:  # put back what can be put back; what cannot stops the run below
            shutil.copy(tmp / "gradebook-before.db", db_file)
            journal.unlink(missing_ok=True)
            save_state()
            footprint.refresh([db_file, journal])
            unrestorable = footprint.changes()
            listed = ", ".join(_relative(changed[:6], root)) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            status, reason = TAMPERED, f"changed files outside its own workspace: {listed}"
        elif status == GRADED:
            flags += _save_grades(course, work, assignment, student, db_url)
            footprint.refresh([root / course.autograded / student / assignment, db_file, journal])
    except KeyboardInterrupt:
        if done is None:
            state.pop(student, None)
        else:
            state[student] = done
        save_state()
        raise
    finally:
        shutil.rmtree(tmp / f"student-{student}", ignore_errors=True)
    state[student] = {"status": status, "hash": digest, "attempts": attempts, "reason": reason, "flags": flags}
    save_state()
    echo(f"{counter} {student}: {status} in {time.time() - started:.0f} s" + (f" ({reason})" if reason else "")
         + (f" [{len(flags)} flag(s)]" if flags else ""))
    if unrestorable:
        raise GradingStopped(
            f"grading stopped: {student}'s notebook changed files that the grading of other students depends on: "
            f"{', '.join(_relative(unrestorable[:10], root))}. Restore them (from version control or a backup) and "
            "run again: the run resumes after the students already graded.")


def _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar=None) -> list[dict]:
    scores, max_score = _scores(assignment, db_url)
    rows = []
    for student in students:
        entry = state[student]
        score = scores.get(student, 0.0) if entry["status"] == GRADED else 0.0
        rows.append({"student_id": student, "assignment": assignment, "status": entry["status"],
                     "score": score, "max_score": max_score, "reason": entry["reason"],
                     "flags": "; ".join(entry.get("flags", []) + (similar or {}).get(student, []))})
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    counts = {s: sum(r["status"] == s for r in rows) for s in (GRADED, CRASHED, TIMED_OUT, TAMPERED)}
    echo(f"{len(rows)} students: {counts[GRADED]} graded, {counts[CRASHED]} crashed, {counts[TIMED_OUT]} timed out, "
         f"{counts[TAMPERED]} tampered, 0 lost; wrote {csv_path}")
    return rows
