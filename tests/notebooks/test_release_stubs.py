"""The release's answer cells as students get them: each runs without raising, and each exercise's function is a
stub that raises NotImplementedError when called, which the grader reports as "not started".

nbgrader writes `# YOUR CODE HERE` and `raise NotImplementedError()` where each solution region was;
nbgrader_config.py keeps only the comment of a region at the top level of a cell, where the raise would stop the
cell before the definitions after it (and a student would have to delete a line before the cell ran)."""

import ast
import json
import os
import runpy
import subprocess
import sys
from unittest import mock

import pytest
from traitlets.config import Config

from autograder import specs as registry
from autograder.publish import build

NOTEBOOKS = [p.stem for p in build.sources()]

# Runs the release notebooks named on its command line the way a student's first "Run All" defines things: each
# answer cell whole, and of every other code cell only its imports (the demonstrations would time and plot).
# Prints, as JSON, the errors raised and the names each notebook defined.
DEFINE_ONLY = """
import ast, json, sys, tempfile
from pathlib import Path

import autograder  # picks where kernels run (the interpreter without a GPU) before any is defined

errors, defined = [], {}
cells_dir = Path(tempfile.mkdtemp())
for path in map(Path, sys.argv[1:]):
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        meta = cell["metadata"].get("nbgrader", {})
        source = "".join(cell["source"])
        if not meta.get("solution"):
            body = ast.parse(source).body
            source = "\\n".join(ast.unparse(n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom)))
        cell_file = cells_dir / f"{path.stem}_cell{i}.py"  # a file: @triton.jit reads the kernel's source
        cell_file.write_text(source)
        try:
            exec(compile(source, str(cell_file), "exec"), namespace)
        except BaseException as exc:
            errors.append(f"{path.stem}, cell {i} ({meta.get('grade_id')}): {type(exc).__name__}: {exc}")
    defined[path.stem] = sorted(n for n, v in namespace.items() if callable(v))
print(json.dumps({"errors": errors, "defined": defined}))
"""


def _answer_cells(root, name):
    """(grade_id, source) of each code answer cell of the release notebook."""
    nb = json.loads((root / "course" / name / f"{name}.ipynb").read_text())
    return [(c["metadata"]["nbgrader"]["grade_id"], "".join(c["source"])) for c in nb["cells"]
            if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_answer_cell_raises_at_its_top_level(root, name):
    for grade_id, source in _answer_cells(root, name):
        lines = [node.lineno for node in ast.parse(source).body if isinstance(node, ast.Raise)]
        assert not lines, (f"course/{name}, cell {grade_id!r}: a raise at the top level (line {lines[0]}) stops the "
                           "cell before its definitions; put the solution region inside a stub's body")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_exercise_is_a_stub_that_raises_not_implemented(root, name):
    stubs = {node.name: node for _, source in _answer_cells(root, name) for node in ast.parse(source).body
             if isinstance(node, ast.FunctionDef)}
    for ex in registry.for_notebook(name):
        assert ex.function in stubs, f"{ex.id}: no answer cell of course/{name} defines {ex.function}"
        last = stubs[ex.function].body[-1]
        assert isinstance(last, ast.Raise) and ast.unparse(last.exc) == "NotImplementedError()", (
            f"{ex.id}: the stub of {ex.function} must end in `raise NotImplementedError()`, the grader's "
            "'not started'")


def test_the_answer_cells_run_as_released(root):
    """Executed, not only parsed: a decorator, an annotation or a default argument runs at definition time.
    (All seven notebooks in one process, about ten seconds: each cell only defines, nothing is launched.)"""
    paths = [str(root / "course" / name / f"{name}.ipynb") for name in NOTEBOOKS]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", DEFINE_ONLY, *paths], check=False, cwd=root, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == [], "\n".join(result["errors"])
    for name in NOTEBOOKS:
        missing = {ex.function for ex in registry.for_notebook(name)} - set(result["defined"][name])
        assert not missing, f"course/{name} does not define {sorted(missing)} as released"


def _config(root):
    with mock.patch.dict(os.environ):  # the file sets the grading configuration's variable: not for this process
        return runpy.run_path(str(root / "nbgrader_config.py"), init_globals={"get_config": Config})


def test_generate_assignment_cuts_top_level_stubs_to_their_comment_after_clear_solutions(root):
    from nbgrader.preprocessors import ClearSolutions

    config = _config(root)
    steps = config["c"].GenerateAssignment.preprocessors
    assert steps[steps.index(ClearSolutions) + 1] is config["TopLevelStubsAsComments"]
    stub = ClearSolutions().code_stub["python"]
    source = ("# helpers go here\n" + stub + "\n\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"
              + "\n".join("    " + line for line in stub.split("\n")))
    assert config["comment_top_level_stubs"](source, stub) == (
        "# helpers go here\n# YOUR CODE HERE\n\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"
        "    # YOUR CODE HERE\n    raise NotImplementedError()")
