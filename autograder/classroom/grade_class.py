"""Grade a whole class with nbgrader, each student in a workspace and process of its own.

    python -m autograder grade-class ASSIGNMENT [--timeout SECONDS] [--force] [--csv PATH]
                                                [--gpus all|0,1 | --workers N | --cluster slurm ...]

Run it where nbgrader_config.py is (the course root). nbgrader's own `autograde` drops a notebook whose
kernel crashed and reports it like a wrong answer, and runs every student's code where it can write into the
gradebook and into other students' folders. Here, for each student found in submitted/:

1. A private workspace (a temporary folder) gets a copy of the course's nbgrader configuration, the source
   assignment, this student's submission and a gradebook holding no other student.
2. ``python -m autograder.classroom.student`` runs nbgrader's autograde there, in a process of its own with a time
   limit; it ends every process the notebook started before nbgrader writes its results. Where it runs is the
   runner's choice (class_runner): one student at a time here, one per GPU, N CPU workers, or a Slurm job each.
3. Everything the grading of later students depends on (the course folder, the installed packages, Jupyter's
   configuration) must be as it was; otherwise the student is recorded as "tampered", the gradebook is put
   back, and if anything else was changed the run stops and names it (class_loop: with several students in
   flight, they are graded again one at a time to find whose it was).
4. The graded notebook is checked (a graded cell that passed must show the grader's verdict: see
   ``class_gradebook.missing_verdicts``) and its grades are saved into the course's gradebook by nbgrader's own
   SaveAutoGrades, by this process alone; the notebook goes to autograded/ for `nbgrader generate_feedback`.

Every student ends up in the CSV as graded, crashed, timed out, tampered, performance not measured (a GPU busy with
others' work: graded again) or not run (refused or cancelled by the cluster: graded again), with the reason, and
with the flags of a static scan of their cells (autograder.guard.scan), of any edited locked cell, and of answers that
closely match the reference solution or another student's (autograder.classroom.similarity; side by side in
similarity-ASSIGNMENT.html next to the CSV). Re-running is safe: a student whose submission has not changed since
it was graded is skipped (--force grades everyone again), so an interrupted run resumes; a submission during which
the run died twice is recorded as crashed.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from autograder import runtime
from autograder.guard import procs
from autograder.publish.build import tool_env
from autograder.classroom.gradebook import scores as gradebook_scores
from autograder.classroom.loop import (  # noqa: F401  (statuses and GradingStopped re-exported)
    CRASHED,
    GRADED,
    IN_PROGRESS,
    NOT_MEASURED,
    NOT_RUN,
    TAMPERED,
    TIMED_OUT,
    GradingStopped,
)

FIELDS = ["student_id", "assignment", "status", "score", "max_score", "reason", "flags"]
CONFIG_FILES = ("nbgrader_config.py", "grading.toml")  # copied into each workspace (what the config reads)


class Course:
    """The course folder's layout, as its nbgrader_config.py sets it."""

    def __init__(self, root: Path):
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        if not (root / "nbgrader_config.py").exists():
            raise FileNotFoundError(f"{root} has no nbgrader_config.py: run grade-class from the course root")
        from autograder.config import DEFAULT_PATH, ENV_VAR

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
    from autograder.config import ENV_VAR

    env = tool_env()
    shutil.copy(grading_file, work / ".grading.toml")
    env[ENV_VAR] = str(work / ".grading.toml")
    env[runtime.SMALL_DEMOS_ENV] = "1"  # nobody reads the demonstrations' plots in a class run
    private = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "IPYTHONDIR": "ipython",
               "JUPYTER_RUNTIME_DIR": "jupyter-runtime", "MPLCONFIGDIR": "matplotlib"}
    for var, name in private.items():
        env[var] = str(work / ".private" / name)
    _seed_font_cache(work / ".private" / "matplotlib")
    env.update(PYTHONDONTWRITEBYTECODE="1", PWD=str(work))
    env.pop("OLDPWD", None)
    return env


def _seed_font_cache(dest: Path) -> None:
    """Matplotlib's font list, copied into a student's private config folder: an empty folder makes the first
    plot scan every font on the machine again (15 s of each student's grading on a GPU server). A copy keeps
    the folder private: what a notebook writes there reaches nobody else."""
    try:
        import matplotlib
        from matplotlib import font_manager  # noqa: F401  builds this process's font list once, if missing

        found = sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    except Exception:  # noqa: BLE001  no matplotlib here: the notebook finds out for itself
        return
    dest.mkdir(parents=True, exist_ok=True)
    for f in found:
        shutil.copy(f, dest / f.name)


class Running:
    """The grading processes in flight (their pids), shared by the threads that start them: a leftover is any other
    child of this process. One lock orders starting a process and ending leftovers, so a process just started by
    one thread is never taken for another's leftover."""

    def __init__(self):
        self.lock = threading.Lock()
        self._pids: set[int] = set()

    def pids(self) -> set[int]:
        with self.lock:
            return set(self._pids)

    def add(self, pid: int) -> None:
        self._pids.add(pid)  # called with the lock held

    def discard(self, pid: int) -> None:
        with self.lock:
            self._pids.discard(pid)


def grade_one(work: Path, assignment: str, student: str, timeout: float, grading_file: Path,
              extra_env: dict | None = None, running: Running | None = None) -> tuple[str, str]:
    """(status, reason): nbgrader's autograde of one student in its workspace, in a process of its own.

    extra_env: what this student's process gets on top (the GPU it may see). running: the processes of the other
    students graded at the same time, which the clean-up after this one must leave alone."""
    cmd = [sys.executable, "-m", "autograder.classroom.student", str(work), assignment, student]
    running = running or Running()
    env = _child_env(work, grading_file)
    env.update(extra_env or {})
    with running.lock:  # no other thread ends "leftovers" between the start and the record of this process
        before = procs.children()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        running.add(proc.pid)

    def end_leftovers():
        # Orphans climb up to this (subreaper) process: every child that is neither a grading still in flight nor
        # there before this one started is a leftover.
        with running.lock:
            procs.end_children(keep=before | (running._pids - {proc.pid}))

    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.kill_tree(proc.pid)
        end_leftovers()  # what slipped out of the tree while it was being ended
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)  # a survivor still holding the pipe must not hold up the class
        return TIMED_OUT, f"grading did not finish within {timeout:.0f} s (a hang or an endless loop?)"
    finally:
        running.discard(proc.pid)
        end_leftovers()
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


# -- the class -----------------------------------------------------------------------------------------------

def grade_class(root: Path, assignment: str, timeout: float = 3600, force: bool = False,
                csv_path: Path | None = None, db_url: str | None = None, echo=print, gpus: str | None = None,
                workers: int | None = None, cluster: str | None = None, cluster_options: dict | None = None,
                progress: bool = True) -> list[dict]:
    """Grade every student's submission of `assignment`; returns the CSV's rows.

    gpus ("all" or "0,1"): one student per GPU at a time, each process seeing only its GPU; workers: that many
    students at once on the CPU; cluster ("slurm", "local" or "debug"): one submitit job per student, with
    cluster_options for class_runner.submitit_executor (partition, time_min, account, parallel, setup...)."""
    from autograder.classroom.loop import ClassRun
    from autograder.classroom.runners import LocalRunner, SubmititRunner, gpu_slots, submitit_executor

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
    if cluster is not None and (gpus is not None or workers is not None):
        raise ValueError("--cluster grades each student as a job of its own: --gpus and --workers do not apply")
    slots = None if cluster else gpu_slots(gpus, workers)  # a bad --gpus is said before anything is touched
    state_file = root / course.autograded / f".grade-class-{assignment}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() and not force else {}
    # A cluster's nodes must see the workspaces: they go under the course folder (which the nodes share), in a
    # folder the footprint leaves out. On this machine they go to the system's temporary folder.
    shared = root / ".grade-class-work" if cluster else None
    if shared is not None:
        shared.mkdir(exist_ok=True)
    procs.become_subreaper()  # processes a notebook leaves behind come back here to be ended
    try:
        with tempfile.TemporaryDirectory(prefix="grade-class-", dir=shared) as tmp:
            run = ClassRun(course, assignment, db_url, state, state_file, Path(tmp), echo, progress)
            if cluster:
                executor = submitit_executor(Path(tmp) / "submitit", cluster, **(cluster_options or {}))
                runner = SubmititRunner(executor, timeout, course.grading_file)
                echo(f"grading {assignment} as {cluster} jobs, one per student")
            else:
                runner = LocalRunner(slots, timeout, course.grading_file)
                if len(slots) > 1:
                    echo(f"grading {assignment} on {', '.join(s.name for s in slots)}: one student on each at a time")
            suspects = run.run(run.todo(students), runner)
            if suspects:
                echo(f"grading {len(suspects)} students again one at a time: {', '.join(suspects)}")
                run.run(suspects, runner, one_at_a_time=True)
            if run.unmeasured:  # alone now: what shared the GPU may have been this run's own other students
                again, run.unmeasured = run.unmeasured, []
                echo(f"grading {len(again)} students again, one at a time, whose performance was not measured "
                     f"(the GPU was shared): {', '.join(again)}")
                run.run(again, runner, one_at_a_time=True)
    finally:
        procs.become_subreaper(False)
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
    csv_path = Path(csv_path or root / f"grades-{assignment}.csv")
    similar = _similarity(course, assignment, students, csv_path.with_name(f"similarity-{assignment}.html"), echo)
    return _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar)


def _similarity(course: Course, assignment: str, students: list[str], report: Path, echo) -> dict[str, list[str]]:
    """Similarity flags of every student's answers against the reference solution and each other (a flag, never
    a score), and the side-by-side report; a failure of the comparison is said and costs no grade."""
    from autograder.classroom.similarity import similarity

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


def _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar=None) -> list[dict]:
    scores, max_score = gradebook_scores(assignment, db_url)
    rows = []
    for student in students:
        entry = state[student]
        score = scores.get(student, 0.0) if entry["status"] in (GRADED, NOT_MEASURED) else 0.0
        rows.append({"student_id": student, "assignment": assignment, "status": entry["status"],
                     "score": score, "max_score": max_score, "reason": entry["reason"],
                     "flags": "; ".join(entry.get("flags", []) + (similar or {}).get(student, []))})
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    counts = {s: sum(r["status"] == s for r in rows)
              for s in (GRADED, CRASHED, TIMED_OUT, TAMPERED, NOT_MEASURED, NOT_RUN)}
    later = "".join(
        f"; {counts[s]} {what}: run again" for s, what in (
            (NOT_MEASURED, "with performance not measured (GPU shared)"), (NOT_RUN, "not run (refused or cancelled)"))
        if counts[s])
    echo(f"{len(rows)} students: {counts[GRADED]} graded, {counts[CRASHED]} crashed, {counts[TIMED_OUT]} timed out, "
         f"{counts[TAMPERED]} tampered, 0 lost{later}; wrote {csv_path}")
    return rows
