"""Autograder for the kernel fusion course.

    from autograder import check
    check("01.fused_chain", fused_chain).assert_passed("correctness")

Importing this package first picks where Triton kernels run (the interpreter when there is no GPU).
"""

from . import runtime

runtime.configure()

from . import registry as _registry  # noqa: E402
from .check import check  # noqa: E402
from .device import profile as device_profile  # noqa: E402
from .report import CriterionResult, Report  # noqa: E402
from .specs import Exercise  # noqa: E402


def exercises() -> list[Exercise]:
    """Every exercise of the course: id, notebook, the student function's name and signature, criteria."""
    return _registry.all_exercises()


__all__ = ["check", "exercises", "device_profile", "Report", "CriterionResult", "Exercise", "runtime"]
