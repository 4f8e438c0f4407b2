"""The course folder as grade-class sees it: its layout, the statuses a student can end in, and the private
workspace and gradebook each student is graded in."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

from autograder.config import DEFAULT_PATH, ENV_VAR

GRADED, CRASHED, TIMED_OUT, TAMPERED, IN_PROGRESS = "graded", "crashed", "timed out", "tampered", "in progress"
NOT_MEASURED = "performance not measured"  # graded, but a GPU shared by others: graded again when it is free
NOT_RUN = "not run"  # the runner did not run it (submission refused, task cancelled): graded again next time
RETRIED = (IN_PROGRESS, NOT_MEASURED, NOT_RUN)  # statuses a later run grades again even when unchanged


class GradingStopped(RuntimeError):
    """A submission changed files that later students' grading depends on; they must be restored first."""


FIELDS = ["student_id", "assignment", "status", "score", "max_score", "reason", "flags", "fraction_of_peak"]
RESULTS = "grading"  # grade-class's results at the course root, ignored by git: CSV, reports, leaderboard, logs


# Copied into each workspace. Not grading.toml: its settings (the bars it overrides) stay with the judge, and the
# student's process gets the package's public defaults.
CONFIG_FILES = ("nbgrader_config.py",)


class Course:
    """The course folder's layout, as its nbgrader_config.py sets it."""

    def __init__(self, root: Path):
        if not (root / "nbgrader_config.py").exists():
            raise FileNotFoundError(f"{root} has no nbgrader_config.py: run grade-class from the course root")
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
        self.results = root / RESULTS

    def missing_kernel(self) -> str | None:
        """Why nbgrader could not start this course's Jupyter kernel here, or None: nbgrader_config.py names the
        kernel it grades with, and a machine where it is not registered fails every student alike."""
        name = self.config.get("Execute", {}).get("kernel_name")
        if not name:  # nbgrader takes each notebook's own kernel
            return None
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        try:
            KernelSpecManager().get_kernel_spec(name)
        except NoSuchKernel:
            python = os.path.basename(sys.executable)
            return (f"nbgrader_config.py grades with the Jupyter kernel {name!r}, which is not installed on this "
                    f"machine, so no notebook could run: register it with `{python} -m ipykernel install "
                    f"--sys-prefix --name {name}` (`make lab` does), then grade again. No student was graded.")
        return None


def submission_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def sqlite_file(db_url: str) -> Path:
    if not db_url.startswith("sqlite:///"):
        raise ValueError(f"grade-class gives each student a private copy of the gradebook and needs an sqlite "
                         f"gradebook (sqlite:///PATH); got {db_url}")
    return Path(db_url[len("sqlite:///"):])


def private_gradebook(db_file: Path, into: Path) -> Path:
    """A copy of the gradebook with the assignments and their cells but no student: what a workspace gets."""
    template = into / "template.db"
    shutil.copy(db_file, template)
    with Gradebook(f"sqlite:///{template}") as gb:
        for student in gb.students:
            gb.remove_student(student.id)  # their submissions and grades go with them
    return template


def workspace(course: Course, assignment: str, student: str, template: Path, tmp: Path) -> Path:
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
