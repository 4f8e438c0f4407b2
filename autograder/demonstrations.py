"""Demonstration cells: what a notebook runs for its reader and the grader skips.

A notebook's demonstrations measure, sweep, profile and plot for the student: the cost model against the GPU,
your kernel against eager PyTorch and torch.compile, what Inductor generated. Nobody reads them when the grader
runs the notebook (FUSION_COURSE_SMALL_DEMOS=1: the checker, nbgrader's autograde under grade-class), and they
were most of its time. A demonstration cell says so on its first line:

    # demonstration (not graded; the grader skips this cell)

Under the grader's switch such a cell runs as one line, DEMONSTRATION_SKIPPED, and nothing else; without it (a
student's JupyterLab, nbgrader's validate) it runs in full, as every other cell. No later cell may need a name
that only a demonstration defines (tests/notebooks/test_demonstrations.py reads every notebook's cells to make
sure).

Why a comment on the first line, and where it is read:

- the checker (autograder.checker.execute) runs a notebook's code without Jupyter, as on a GPU machine where none
  is installed: it reads the first line of each cell from the notebook's JSON and runs `as_run(source)`;
- in a Jupyter kernel, `import autograder` (the set-up cell, the first a notebook runs) adds an IPython input
  transformer that hands every cell's source through the same `as_run` before IPython compiles it. It is
  registered before the grader records the kernel's state (guard.integrity), so a cell that removes it is
  named, and it is put back;
- under nbgrader's autograde the marker cannot be taken away: demonstration cells are read-only, and
  OverwriteCells restores the instructor's source of every read-only cell, first line included. A cell tag in
  the metadata would not be restored (OverwriteCells restores a cell's source, type, lock and points), and the
  kernel never sees a cell's metadata;
- the marker is plain Python: the text sources, ruff and the dependency test read a demonstration as any cell.

Not chosen: a cell magic (`%%demonstration`) is not Python, so the text source, ruff and the dependency test
could not read the cell, and the checker would have to imitate IPython; an `if` the build wraps around each
demonstration would indent every line the student reads; nbclient's skip-execution tag works under nbgrader
only, prints nothing, and is not restored.

A try cell (`check("02.rmsnorm", rmsnorm)` alone, marked as a demonstration) shows a student every criterion at
once before the graded cells check them one by one. Under nbgrader's autograde (NBGRADER_EXECUTION=autograde,
which nbgrader itself sets) it is skipped even without the switch: the graded cells after it do the same work,
and a plain `nbgrader autograde` did it twice (in the interpreter, notebook 05's try cell of the linear
cross-entropy alone took 23 s). Its line says so (TRY_SKIPPED).

FUSION_COURSE_RUN_DEMOS=1 runs the demonstrations under the grader's switch anyway, sized down as the switch
sizes them (runtime.demo_points): what grading cost before they were skipped (bench.grading's "small"
mode), and a way to see a demonstration fail as the grader would run it.
"""

from __future__ import annotations

import os
import re

from autograder import runtime

MARKER = "# demonstration (not graded; the grader skips this cell)"
DEMONSTRATION_SKIPPED = "Demonstration skipped while grading: it measures and plots for the reader, and is not graded."
RUN_DEMOS_ENV = "FUSION_COURSE_RUN_DEMOS"
# nbgrader's own variable: "autograde" while it grades a submission, "validate" while it validates one.
NBGRADER_EXECUTION = "NBGRADER_EXECUTION"
TRY_SKIPPED = "Try cell skipped while nbgrader grades: the graded cells below run the same check."
_TRY = re.compile(r"""check\(\s*["'][\w.\-]+["']\s*,\s*\w+\s*\)""")

# "# demonstration" at the start of the first line that is not blank, then its end or the rest of the sentence.
_MARKED = re.compile(r"# demonstration(?:$|[\s:(])")


def is_demonstration(source: str) -> bool:
    """True when a cell's first line that is not blank starts with "# demonstration"."""
    for line in source.splitlines():
        if line.strip():
            return bool(_MARKED.match(line.strip()))
    return False


def skipped_here() -> bool:
    """True where demonstrations are skipped: the grader's switch is on, and FUSION_COURSE_RUN_DEMOS is not."""
    return runtime.small_demos() and not _forced()


def is_try(source: str) -> bool:
    """True for a try cell: a demonstration whose one statement checks an exercise on every criterion,
    `check("02.rmsnorm", rmsnorm)`, as the graded cells after it do one criterion at a time."""
    code = [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]
    return is_demonstration(source) and len(code) == 1 and bool(_TRY.fullmatch(code[0].strip()))


def as_run(source: str) -> str:
    """The code a cell runs: the one line a skipped demonstration prints, or the cell itself (the same object)."""
    if not is_demonstration(source):
        return source
    if skipped_here():
        return f"print({DEMONSTRATION_SKIPPED!r})\n"
    if os.environ.get(NBGRADER_EXECUTION) == "autograde" and not _forced() and is_try(source):
        return f"print({TRY_SKIPPED!r})\n"
    return source


def _forced() -> bool:
    return os.environ.get(RUN_DEMOS_ENV, "") not in ("", "0")


def _skip_demonstrations(lines: list[str]) -> list[str]:
    source = "".join(lines)
    run = as_run(source)
    return lines if run is source else run.splitlines(keepends=True)


_skip_demonstrations.skips_demonstrations = True


def install(shell) -> None:
    """Hand every cell a Jupyter kernel runs through as_run (once per kernel; nothing without IPython)."""
    if shell is None:
        return
    transformers = shell.input_transformers_post
    if not any(getattr(t, "skips_demonstrations", False) for t in transformers):
        transformers.append(_skip_demonstrations)
