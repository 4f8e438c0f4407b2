"""nbgrader configuration for the course. nbgrader reads this file from the directory it runs in: the
repository root. Source notebooks (with solutions) live in solutions/, the student release in course/."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "kernel-fusion"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
# The notebooks' text sources (NN_name.py, jupytext) stay out of the release: they hold the solutions.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py"]

# Grade with the kernel `make lab` / `make test` register, and give a cell time for GPU benchmarks and
# for the interpreter's slower correctness runs.
c.Execute.kernel_name = "fusion-course"
c.Execute.timeout = 900
c.Execute.interrupt_on_timeout = True

# The grader's settings for a class: performance must be measured (a CPU-only grading machine fails it
# rather than skipping it). Edit grading.toml, or point FUSION_COURSE_GRADING elsewhere before grading; the
# course's secret seed is read from .grading-secret.toml beside it (written by `make course`, git-ignored).
os.environ.setdefault("FUSION_COURSE_GRADING", os.path.join(os.path.dirname(os.path.abspath(__file__)), "grading.toml"))
