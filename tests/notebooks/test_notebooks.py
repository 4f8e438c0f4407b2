"""Notebooks: one source each, solution and release in sync, no drift from kernels/."""

import ast
import json
import re
import subprocess

import nbformat
import pytest

from autograder.publish import build
from autograder import specs as registry

NOTEBOOKS = [p.stem for p in build.sources()]


def _solution_nb(root, name):
    return nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)


def test_there_are_notebooks():
    assert {"01_hbm_cost_model", "02_vertical_fusion", "03_horizontal_fusion", "04_gemm_epilogue_fusion",
            "05_streaming_reduction_fusion"} <= set(NOTEBOOKS)


def test_nbgrader_runs_without_the_iri_grammars():
    """build.nbgrader_command is nbgrader's command line, started without rfc3987-syntax's grammars: nbformat and
    jsonschema are there, lark (which builds the grammars) is not."""
    python, *rest = build.nbgrader_command("--version")
    done = subprocess.run([python, "-X", "importtime", *rest], capture_output=True, text=True, env=build.tool_env(),
                          timeout=300)
    assert done.returncode == 0 and re.search(r"nbgrader version \d", done.stdout), done.stdout + done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"nbformat", "jsonschema"} <= imported and "lark" not in imported


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solution_notebook_is_built_from_its_text_source(root, name):
    built = build.notebook_from_source(root / "solutions" / name / f"{name}.py")
    committed = _solution_nb(root, name)
    assert nbformat.writes(built) == nbformat.writes(committed), (
        f"solutions/{name}/{name}.ipynb is stale: run `make course`"
    )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_have_no_outputs(root, name):
    for folder in ("solutions", "course"):
        nb = nbformat.read(root / folder / name / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{folder}/{name}: outputs committed"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_is_in_sync_with_solutions(root, released, name):
    """The release nbgrader makes in a scratch course folder (the round trip grades the same one) is course/."""
    work = released(name)
    fresh = sorted(p.relative_to(work / "course") for p in (work / "course").rglob("*") if p.is_file())
    committed = sorted(p.relative_to(root / "course" / name) for p in (root / "course" / name).rglob("*") if p.is_file())
    assert [str(p) for p in fresh] == [f"{name}/{p}" for p in committed], "course/ holds other files than nbgrader makes"
    a = json.loads((work / "course" / name / f"{name}.ipynb").read_text())
    b = json.loads((root / "course" / name / f"{name}.ipynb").read_text())
    assert a == b, f"course/{name} is out of sync with solutions/: run `make course`"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_holds_no_solution(root, name):
    text = (root / "course" / name / f"{name}.ipynb").read_text()
    assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
    assert not list((root / "course" / name).glob("*.py")), "the text source (with solutions) leaked into course/"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_exercise_has_a_solution_cell_and_graded_cells(root, name):
    nb = _solution_nb(root, name)
    solution_sources = "\n".join(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    for ex in registry.for_notebook(name):
        assert f"def {ex.function}(" in solution_sources, f"{ex.id}: no solution cell defines {ex.function}"
        for criterion in ex.criteria:
            cells = [c for c in graded if f'check("{ex.id}"' in c.source and f'assert_passed("{criterion}")' in c.source]
            assert len(cells) == 1, f"{ex.id}: expected one graded cell for {criterion}, found {len(cells)}"
            points = cells[0].metadata["nbgrader"]["points"]
            if ex.optional:  # feedback, not credit: a student without the hardware it needs loses nothing
                assert points == 0, f"{ex.id} is optional: its {criterion} cell must carry 0 points, not {points}"
            else:
                assert points > 0, f"{ex.id}: its {criterion} cell carries no points"


def _solution_cells(root, name):
    """(grade_id, source) of the code answer cells in a notebook's text source, before includes are expanded."""
    import jupytext

    nb = jupytext.read(root / "solutions" / name / f"{name}.py", fmt="py:percent")
    return [(c.metadata["nbgrader"]["grade_id"], c.source) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]  # not written answers


def _top_level_names(source: str) -> set[str]:
    return {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_kernel_is_written_twice(root, name):
    """A function of kernels/ is included into a solution cell (build.expand_includes), never pasted there."""
    in_kernels = set().union(*(_top_level_names(p.read_text()) for p in (root / "kernels").glob("*.py")))
    for grade_id, source in _solution_cells(root, name):
        stubs = {m.group(3) for m in build.BODY_INCLUDE.finditer(source)}  # a signature kept, its body included
        pasted = _top_level_names(source) & in_kernels - stubs
        assert not pasted, f"{name} cell {grade_id!r} defines {sorted(pasted)} again: include them from kernels/"


def test_included_kernels_are_the_kernel_files_text(root):
    """The solution notebook shows each included definition exactly as kernels/ has it, decorators included."""
    nb = _solution_nb(root, "02_vertical_fusion")
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rmsnorm"]
    for fn in ("_rmsnorm_kernel", "rmsnorm"):  # stubs that keep the file's signature, with its body included
        assert build.body_source(root / "kernels" / "rmsnorm.py", fn, cell.source) in cell.source
    assert "# include:" not in cell.source and "### BEGIN SOLUTION" in cell.source


def test_an_include_that_names_nothing_is_a_clear_error(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "op.py").write_text("X = 1\n\n\n@dec\ndef f():\n    return X\n")
    assert build.expand_includes("# include: kernels/op.py (X,\n#     f)\n", tmp_path) == (
        "X = 1\n\n\n@dec\ndef f():\n    return X\n")
    with pytest.raises(LookupError, match="no top-level definition of 'g'"):
        build.expand_includes("# include: kernels/op.py (g)", tmp_path)
    with pytest.raises(FileNotFoundError, match="kernels/nope.py"):
        build.expand_includes("# include: kernels/nope.py (f)", tmp_path)


def test_numeric_solutions_agree_with_the_grader(root):
    nb = _solution_nb(root, "01_hbm_cost_model")
    ns = {}
    for grade_id in ("chain_times", "layer_traffic"):
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        exec(cell.source, ns)
    from autograder.specs import hbm_cost_model as nb01

    assert ns["chain_times"](3, 1e9, 2e12, 5e-6) == pytest.approx(nb01.chain_times_reference(3, 1e9, 2e12, 5e-6))
    assert ns["layer_traffic"](*nb01.LLAMA2_7B) == pytest.approx(nb01.layer_traffic_reference(*nb01.LLAMA2_7B))


def _kernels_modules_imported(source: str) -> set[str]:
    """The kernels.<module> names a piece of code imports (import kernels.x, from kernels import x, from kernels.x
    import ...)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("kernels.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kernels":
            parts = node.module.split(".")
            found |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
    return found


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_release_imports_no_reference_solution(root, name):
    """What students get holds only the teaching modules of kernels/ (make handout): a release notebook that
    imported another would fail there, and would hand out an answer where it did not."""
    from autograder.publish.handout import TEACHING_KERNELS

    nb = nbformat.read(root / "course" / name / f"{name}.ipynb", as_version=4)
    imported = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            imported |= _kernels_modules_imported(cell.source)
    assert imported <= set(TEACHING_KERNELS), f"{name} imports kernels.{sorted(imported - set(TEACHING_KERNELS))}"


def test_the_import_finder_sees_every_form():
    code = "import kernels.a\nfrom kernels import b as c\nfrom kernels.d import e\nimport kernelsx\nfrom kernels import (f,\n g)"
    assert _kernels_modules_imported(code) == {"a", "b", "d", "f", "g"}
