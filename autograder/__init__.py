"""Autograder for the kernel fusion course.

    from autograder import check
    check("01.fused_chain", fused_chain).assert_passed("correctness")

Importing this package first picks where Triton kernels run (the interpreter when there is no GPU).
"""

import sys

from autograder import demonstrations, runtime

runtime.configure()

from autograder import specs as _registry  # noqa: E402
from autograder.check import check  # noqa: E402
from autograder.guard import integrity  # noqa: E402
from autograder.measure.device import profile as device_profile  # noqa: E402
from autograder.report import CriterionResult, Report  # noqa: E402
from autograder.specs.exercise import Exercise  # noqa: E402


def exercises() -> list[Exercise]:
    """Every exercise of the course: id, notebook, the student function's name and signature, criteria."""
    return _registry.all_exercises()


__all__ = ["check", "exercises", "device_profile", "Report", "CriterionResult", "Exercise", "runtime"]


def _jupyter_shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _verdicts_as_messages(shell) -> None:
    """A failed or unmeasured criterion shows as its message alone: the grader's frames above it are noise to a
    student (and name where the course is installed). The cell still ends in an error, which is what nbgrader
    scores; a student's own errors keep their full tracebacks."""
    from autograder.report import GPUShared, GradeFailed

    def show(self, etype, value, tb, tb_offset=None):
        self._showtraceback(etype, value, [f"{etype.__name__}: {value}"])

    shell.set_custom_exc((GradeFailed, GPUShared), show)


# In a Jupyter kernel this import is the notebook's first cell: record the grader before any student code runs.
if _jupyter_shell() is not None:
    _verdicts_as_messages(_jupyter_shell())
    demonstrations.install(_jupyter_shell())  # before the record: a cell that removes it is named
    _registry.all_exercises()  # load the specs now, so that they are recorded
    integrity.protect(_jupyter_shell(), names={"check": check, "autograder": sys.modules[__name__]})
