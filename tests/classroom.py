"""A small nbgrader course for grading whole classes in tests: notebook 01's set-up cell, its cost model and
its first Triton kernel with the correctness and fusion cells (7 points, all gradable on a CPU).

The cells are the course's own (taken from solutions/01_hbm_cost_model by grade_id); leaving out the
measurements and the interpreter-heavy precision cells keeps a student at a few seconds of grading.
"""

from __future__ import annotations

import atexit
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat

from autograder.publish import build

SOURCE = "01_hbm_cost_model"
ASSIGNMENT = "mini_01"
CELLS = ("setup", "chain_times", "test_cost_model", "fused_chain", "test_fused_chain_correctness",
         "test_fused_chain_fusion")
POINTS = {"test_cost_model": 2, "test_fused_chain_correctness": 3, "test_fused_chain_fusion": 2}


def _source_notebook():
    full = nbformat.read(build.ROOT / "solutions" / SOURCE / f"{SOURCE}.ipynb", as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in full.cells}
    nb = nbformat.v4.new_notebook(metadata=full.metadata)
    nb.cells = [by_id[gid] for gid in CELLS]
    return nb


_MADE: dict[Path, Path] = {}  # build.ROOT -> the course folder made from it, once per test process


def one_trial_settings() -> str:
    """The course's grading.toml with one fresh random trial a check instead of its three. The tests that grade
    through nbgrader (the class runs, the notebooks' round trips) test the path a grading takes (workers,
    sandbox, footprint, gradebook, feedback, every cell of a notebook), not a kernel's grading, which has tests of
    its own: the secret case and the fixed shapes still run at every dtype, and a check costs about half as long
    (correctness runs every shape once per trial and once for the secret case)."""
    text = (build.ROOT / "grading.toml").read_text()
    one, n = re.subn(r"^trials = \d+$", "trials = 1", text, flags=re.M)
    assert n == 1, "grading.toml has no 'trials = N' line"
    return one


def _make(work: Path) -> None:
    shutil.copy(build.ROOT / "nbgrader_config.py", work)
    (work / "grading.toml").write_text(one_trial_settings())
    (work / "solutions" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(_source_notebook(), work / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    subprocess.run(build.nbgrader_command("generate_assignment", ASSIGNMENT, "--force",
                                          f"--db=sqlite:///{work}/gradebook.db", "--log-level=ERROR"),
                   cwd=work, check=True, capture_output=True, env=build.tool_env())


def make_course(work: Path) -> str:
    """The course folder (configuration, source, release, gradebook); returns the gradebook's URL. nbgrader
    makes the release once per test process (about 10 s); every course folder after the first is a copy of it,
    students and grades still empty."""
    made = _MADE.get(build.ROOT)
    if made is None:
        made = Path(tempfile.mkdtemp(prefix="mini-course-"))
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        _make(made)
        _MADE[build.ROOT] = made
    shutil.copytree(made, work, dirs_exist_ok=True)
    return f"sqlite:///{work}/gradebook.db"


def solutions() -> dict[str, str]:
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in _source_notebook().cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def submit(work: Path, student: str, cells: dict[str, str] | None = None) -> Path:
    """Hand in the release with every answer cell solved, then the given cells replaced: grade_id -> source,
    or "top" -> a new code cell above the set-up cell."""
    cells = dict(cells or {})
    nb = nbformat.read(work / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    answers = solutions()
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell.source = cells.pop(gid)
        elif gid in answers:
            cell.source = answers[gid]
    if "top" in cells:
        nb.cells.insert(0, nbformat.v4.new_code_cell(cells.pop("top")))
    assert not cells, f"no such cells in {ASSIGNMENT}: {sorted(cells)}"
    folder = work / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ASSIGNMENT}.ipynb"
    nbformat.write(nb, path)
    return path


def scores(db_url: str, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


def outputs(work: Path, student: str) -> str:
    """Everything the graded notebook shows (what the student's feedback shows)."""
    nb = nbformat.read(work / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            parts.append(o.get("text", "") + o.get("evalue", "") + "".join(o.get("traceback", [])))
    return "\n".join(parts)
