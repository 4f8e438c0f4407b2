"""Keeping the grader honest while it shares a process with the code it grades.

A notebook's graded cells call ``check()`` in the same Python process that ran the student's cells, so a
student's cell could replace what the grader relies on: ``check`` itself, a criterion, an exercise's
tolerances, ``torch.allclose``, ``triton.testing.do_bench``, the grading configuration. ``protect()`` records
all of that before any student code runs (``import autograder`` in a Jupyter kernel, the first cell of every
course notebook; the checker's runner before the first cell), each caller having loaded the exercises' specs
first; from then on

- ``check()`` calls ``verify()`` before and after grading, which raises ``TamperingError`` naming everything
  that differs from the record (an AssertionError, so a graded cell scores 0 whatever the Report's methods
  have become);
- in a Jupyter kernel a hook runs before every cell: it puts the recorded objects back (so the next graded
  cell runs the real grader) and remembers what it had to restore, which the next ``check()`` names. A cell
  that rebinds one of the notebook's own names for the grader (``check``, ``autograder``: the package hands
  them to ``protect()``) gets the grader's back with a note on stdout: that is a name clash, not tampering.

What this cannot stop (the code runs with the grader's rights): code that edits the grader's state and
puts it back within one call, or that reaches the recorded originals through the garbage collector. The
class run adds checks from outside the process (``autograder.guard.scan``, ``grade_class``). docs/hostile-submissions.md
lists every defence and its limits. What the record holds, and how it is compared and put back, is
guard/integrity_record.py.
"""

from __future__ import annotations

import os
import sys

from autograder.guard.integrity_record import Record
from autograder.measure import device

_UNSET = object()


class TamperingError(AssertionError):
    """Raised by check() when what the grader relies on was changed after the grader was imported."""


# -- the process-wide record --------------------------------------------------------------------------------

_record: Record | None = None
_names_seen: set[str] = set()  # notebook names once bound to the grader's own objects


def active() -> bool:
    return _record is not None


def protect(shell=None, names: dict[str, object] | None = None) -> None:
    """Record what the grader relies on (once per process): every module of the grader and of kernels/ loaded by
    now, so the caller loads the exercises' specs first. In a Jupyter kernel (shell), also check before each
    cell, and put back any of `names` (the notebook's names for the grader: {"check": the package's check, ...})
    that a cell bound to something else."""
    global _record
    if _record is not None:
        return

    device.profile(progress=False)  # on a GPU: the measured peaks every performance grade divides by
    _record = Record()
    if shell is not None:
        _record.watch_ipython(shell, names or {}, _before_cell)
        # Under nbgrader the set-up cell is the first cell run: the input history holds a blank entry and it.
        history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", [])
        ran_before = len(history) > 2
        _record.early_code = bool(os.environ.get("NBGRADER_EXECUTION")) and ran_before
        shell.events.register("pre_run_cell", _record.hook)


def verify() -> None:
    """Raise TamperingError naming every change since protect(); nothing to check when not protected."""
    if _record is None:
        return
    found = _record.problems()
    if found:
        listed = "\n".join(f"  - {p}" for p in found[:12])
        more = f"\n  ... and {len(found) - 12} more" if len(found) > 12 else ""
        raise TamperingError(
            "grading refused: the notebook changed what the grader relies on after it was imported:\n"
            f"{listed}{more}\nGrading needs the grader, torch and triton as they were installed: remove the "
            "code that replaces them and run the notebook again from the top."
        )


def seal(container) -> None:
    """The grader itself filled `container` (a recorded dict or list): make what it holds now the record, so
    that only an entry added or changed by anything else is tampering. Nothing to do when not protected."""
    if _record is None:
        return
    _record.seal(container)


def restore() -> list[str]:
    """Put back everything recorded that was changed (the next check() names it). Without Jupyter's hook, the
    checker's runner calls this before it grades, so that a replaced check() cannot answer for itself."""
    return _record.restore() if _record is not None else []


def _before_cell(record: Record, *_args) -> None:
    """Before every cell of a Jupyter kernel: put the grader back, and the notebook's names for it."""
    put_back = record.restore()
    machinery = [what for what in put_back if what.startswith(("IPython's", "the grader's before-cell"))]
    if machinery:
        # This cell was already transformed by what was put back, so it may not be what it says. On stderr,
        # because nbgrader scores a graded cell that writes there 0: a rewritten cell earns nothing.
        print(f"fusion-course: the notebook changed how Jupyter runs cells ({'; '.join(machinery)}); this cell may "
              "not run as written and earns no points", file=sys.stderr)
    user_ns = record.ipython.user_ns
    for name, real in record.names.items():
        value = user_ns.get(name, _UNSET)
        if value is real:
            _names_seen.add(name)
        elif name in _names_seen:
            user_ns[name] = real
            print(f"fusion-course: `{name}` was redefined in this notebook; the grader's `{name}` was put back "
                  "(the graded cells use it). Give your own object another name.")
