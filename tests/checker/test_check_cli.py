"""python -m autograder check on a student's copy of a notebook: found by what its cells check, not by its file
name; --only grades one exercise; an exercise not started is one line."""

import json
import shutil
import subprocess
import sys

import nbformat
import pytest

NB = "01_hbm_cost_model"


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "autograder", *args], check=False, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def release_copy(root, tmp_path):
    """The release of notebook 01, nothing in it started, saved under a name of the student's own."""
    path = tmp_path / "my work.ipynb"
    shutil.copy(root / "course" / NB / f"{NB}.ipynb", path)
    return path


def _fill_in(path, function: str, body: str):
    """Replace the release's stub of `function` by a working definition."""
    nb = nbformat.read(path, as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source]
    cell.source = body
    nbformat.write(nb, path)


def test_a_renamed_release_is_checked_and_nothing_started_is_one_line_each(release_copy):
    from autograder import specs as registry

    out = _cli("check", str(release_copy), "--quiet")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "holds no graded exercises" not in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    ids = [ex.id for ex in registry.for_notebook(NB)]
    for ex_id in ids:
        assert out.stdout.count(f"{ex_id}: not started") == 1, out.stdout
    assert " FAIL " not in out.stdout, out.stdout  # no criterion rows for exercises nobody began


def test_only_grades_one_exercise(release_copy):
    _fill_in(release_copy, "chain_times",
             "def chain_times(n_ops, size_bytes, bandwidth, launch_s):\n"
             "    t = 2 * size_bytes / bandwidth + launch_s\n"
             "    return n_ops * t, t\n")
    out = _cli("check", str(release_copy), "--only", "01.cost_model", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    [result] = json.loads(out.stdout)
    assert [r["exercise"] for r in result["reports"]] == ["01.cost_model"]
    assert result["passed"] and not result["not_started"]


def test_unknown_only_lists_the_notebooks_exercises(release_copy):
    out = _cli("check", str(release_copy), "--only", "01.cost_model,02.nope")
    assert out.returncode == 2
    assert "no exercise 02.nope" in out.stderr and "01.fused_chain" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_notebook_that_checks_nothing_is_refused(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "scratch.ipynb"
    nbformat.write(nb, path)
    out = _cli("check", str(path))
    assert out.returncode == 2 and "holds no graded exercises" in out.stderr


def test_exercises_are_found_by_their_check_calls(tmp_path):
    from autograder.checker import notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def rmsnorm(x, w, eps):\n    raise NotImplementedError()"),
                nbformat.v4.new_code_cell('check("02.rmsnorm", rmsnorm).assert_passed("correctness")')]
    nb.cells[1].metadata["nbgrader"] = {"grade": True, "grade_id": "test_rmsnorm", "points": 1, "solution": False,
                                        "locked": True, "schema_version": 3}
    path = tmp_path / "anything.ipynb"
    nbformat.write(nb, path)
    assert [ex.id for ex in notebook.notebook_exercises(path)] == ["02.rmsnorm"]
