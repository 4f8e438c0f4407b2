"""Run All goes through a notebook nobody has solved yet.

JupyterLab's "Run All" (and nbclient, and `jupyter nbconvert --execute`) stops at the first cell that raises,
unless that cell carries the tag `raises-exception`. In a fresh release, the cells that check an exercise raise
for every stub not yet written: the graded test cells (`assert_passed`) and the demonstration cells that try the
student's function. The build tags exactly those, so the worked kernels, drawings and plots below them run too.

nbgrader is not affected: its autograde runs every cell whatever happens and scores a graded cell from its error
output, tag or none (tests/publish/test_runall.py shows a failing tagged cell still scores 0).
"""

from __future__ import annotations

RAISES = "raises-exception"
DEMONSTRATION = "# demonstration"  # the first line of every cell that tries an exercise, ungraded


def may_raise(cell) -> bool:
    """A graded test cell, or a demonstration cell that tries an exercise: expected to fail until it is solved."""
    if cell.get("cell_type") != "code":
        return False
    md = cell.get("metadata", {}).get("nbgrader", {})
    grade_id = md.get("grade_id", "")
    if md.get("solution"):
        return False  # an answer cell defines; an error there is the student's to see and fix
    return bool(md.get("grade")) or grade_id == "try" or grade_id.endswith("-try") \
        or cell.get("source", "").lstrip().startswith(DEMONSTRATION)


def tag_cells_that_may_raise(nb):
    """Add the tag `raises-exception` to every cell may_raise picks (once); returns nb."""
    for cell in nb.cells:
        if may_raise(cell):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if RAISES not in tags:
                tags.append(RAISES)
    return nb
