"""Run All goes through: the cells that check an exercise carry the tag `raises-exception`, so a fresh release
runs to its last cell; and nbgrader still scores such a cell from its error (a failing tagged cell gets 0)."""

import subprocess

import nbformat
import pytest

import classroom
from autograder.publish import build, runall


def _cell(source="x = 1", cell_type="code", **nbgrader):
    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def test_graded_and_demonstration_cells_are_tagged_and_nothing_else():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("import autograder"),
        _cell("def f(): raise NotImplementedError()", grade=False, solution=True, grade_id="f"),
        _cell('# demonstration (not graded; the grader skips this cell)\ncheck("01.x", f)', grade=False,
              solution=False, grade_id="f-try"),
        _cell('check("01.x", f).assert_passed("correctness")', grade=True, solution=False, grade_id="test_f",
              points=2),
        _cell("**Answer.**", "markdown", grade=True, solution=True, grade_id="q-why", points=1),
        _cell("plot(f)", grade=False, solution=False, grade_id="f-plot"),
    ]
    runall.tag_cells_that_may_raise(runall.tag_cells_that_may_raise(nb))
    assert [c.metadata.get("tags", []) for c in nb.cells] == [[], [], ["raises-exception"], ["raises-exception"],
                                                              [], []]


@pytest.mark.parametrize("name", [src.stem for src in build.sources()])
def test_every_check_in_the_built_notebooks_may_raise_and_no_other_cell(root, name):
    for folder in ("solutions", "course"):
        nb = nbformat.read(root / folder / name / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            md = cell.metadata.get("nbgrader", {})
            tagged = runall.RAISES in cell.metadata.get("tags", [])
            checks = cell.cell_type == "code" and not md.get("solution") and (
                md.get("grade") or cell.source.startswith(runall.DEMONSTRATION))
            assert tagged == bool(checks), f"{folder}/{name}: {md.get('grade_id')} tagged={tagged}"


@pytest.mark.slow
def test_nbgrader_scores_a_failing_tagged_cell_zero(tmp_path):
    # The class of tests/classroom.py: notebook 01's set-up, cost model and first kernel, cells taken from the
    # committed solution notebook, so tagged as the build tags them. alice hands in the solution, bob a kernel
    # that forgets alpha.
    work = tmp_path
    db = classroom.make_course(work)
    release = work / "course" / classroom.ASSIGNMENT / f"{classroom.ASSIGNMENT}.ipynb"
    nb = nbformat.read(release, as_version=4)
    tagged = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if runall.RAISES in c.metadata.get("tags", [])}
    assert tagged == set(classroom.POINTS), "the release keeps the tags of the source's graded cells"
    answer = classroom.solutions()["fused_chain"]
    classroom.submit(work, "alice")
    classroom.submit(work, "bob", {"fused_chain": answer.replace("y = alpha * z * tl.sigmoid(z)",
                                                                 "y = z * tl.sigmoid(z)")})
    r = subprocess.run(build.nbgrader_command("autograde", classroom.ASSIGNMENT, "--force", f"--db={db}",
                                              "--log-level=ERROR"),
                       cwd=work, capture_output=True, text=True, env=build.tool_env(), timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    alice, bob = classroom.scores(db, "alice"), classroom.scores(db, "bob")
    assert alice == {gid: (p, p) for gid, p in classroom.POINTS.items()}
    assert bob["test_fused_chain_correctness"] == (0, 3)  # the tag lets Run All go on; the score is still 0
    assert bob["test_cost_model"] == (2, 2) and bob["test_fused_chain_fusion"] == (2, 2)
