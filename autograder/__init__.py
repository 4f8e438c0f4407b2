"""Autograder for the kernel fusion course.

    from autograder import check
    check("01.fused_chain", fused_chain).assert_passed("correctness")

Importing this package first picks where Triton kernels run (the interpreter when there is no GPU).
"""

import sys

from . import runtime

runtime.configure()

from . import integrity  # noqa: E402
from . import registry as _registry  # noqa: E402
from .check import check  # noqa: E402
from .device import profile as device_profile  # noqa: E402
from .report import CriterionResult, Report  # noqa: E402
from .specs import Exercise  # noqa: E402


def exercises() -> list[Exercise]:
    """Every exercise of the course: id, notebook, the student function's name and signature, criteria."""
    return _registry.all_exercises()


__all__ = ["check", "exercises", "device_profile", "Report", "CriterionResult", "Exercise", "runtime"]


def _jupyter_shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


# In a Jupyter kernel this import is the notebook's first cell: record the grader before any student code runs.
if _jupyter_shell() is not None:
    integrity.protect(_jupyter_shell())
