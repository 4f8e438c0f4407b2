"""Demonstration cells (autograder.demonstrations): marked by their first line, skipped under the grader's switch
in the checker and in a Jupyter kernel, run in full without it; and never the only source of a name that a later
cell needs."""

import ast
import builtins
import shutil
import subprocess
import symtable
import sys

import nbformat
import pytest

from autograder import demonstrations, runtime
from autograder.checker import notebook as checker
from autograder.publish import build

NOTEBOOKS = [p.stem for p in build.sources()]
NB = "01_hbm_cost_model"  # a notebook name the checker knows: its exercises are graded
CHAIN_TIMES = "def chain_times(n, s, bw, l):\n    return n * (2 * s / bw + l), 2 * s / bw + l"
DEMO = demonstrations.MARKER + "\nshown = 'the demonstration ran'\nprint(shown)"
NAMESPACE = {"__name__", "__file__", "__builtins__", "get_ipython", "display", "In", "Out"}


def _cells(name):
    nb = nbformat.read(build.ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


# -- the marker and the switch -----------------------------------------------------------------------------------


def test_the_marker_is_the_first_line_that_is_not_blank():
    assert demonstrations.is_demonstration(DEMO)
    assert demonstrations.is_demonstration("\n\n" + DEMO)
    assert demonstrations.is_demonstration("# demonstration: the sweep over N\nx = 1")
    assert not demonstrations.is_demonstration("x = 1\n" + demonstrations.MARKER)
    assert not demonstrations.is_demonstration("# demonstrations of masks follow\nx = 1")
    assert not demonstrations.is_demonstration("")


def test_a_demonstration_is_one_line_under_the_switch_only(monkeypatch):
    monkeypatch.delenv(demonstrations.RUN_DEMOS_ENV, raising=False)
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    assert demonstrations.as_run(DEMO) is DEMO
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
    assert demonstrations.as_run(DEMO) == f"print({demonstrations.DEMONSTRATION_SKIPPED!r})\n"
    assert demonstrations.as_run(CHAIN_TIMES) is CHAIN_TIMES  # any other cell runs as it is
    monkeypatch.setenv(demonstrations.RUN_DEMOS_ENV, "1")  # what grading cost before (bench.grading)
    assert demonstrations.as_run(DEMO) is DEMO


def test_a_try_cell_is_skipped_while_nbgrader_grades_the_cells_after_it(monkeypatch):
    """A try cell checks every criterion the graded cells after it check one by one: under nbgrader's autograde
    it prints one line instead, even without the grader's switch. Validation, a student's kernel and every
    other demonstration run it in full; so does FUSION_COURSE_RUN_DEMOS."""
    try_cell = demonstrations.MARKER + '\ncheck("02.rmsnorm", rmsnorm)\n'
    monkeypatch.delenv(demonstrations.RUN_DEMOS_ENV, raising=False)
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    assert demonstrations.is_try(try_cell) and not demonstrations.is_try(DEMO)
    assert not demonstrations.is_try('check("02.rmsnorm", rmsnorm)')  # unmarked: a cell of the student's
    assert not demonstrations.is_try(demonstrations.MARKER + '\nr = check("02.rmsnorm", rmsnorm)\nprint(r)')
    assert not demonstrations.is_try(demonstrations.MARKER + '\ncheck("02.rmsnorm", rmsnorm, criteria=["fusion"])')
    for execution, skipped in ((None, False), ("validate", False), ("autograde", True)):
        if execution:
            monkeypatch.setenv(demonstrations.NBGRADER_EXECUTION, execution)
        want = f"print({demonstrations.TRY_SKIPPED!r})\n" if skipped else try_cell
        assert demonstrations.as_run(try_cell) == want, execution
        assert demonstrations.as_run(DEMO) is DEMO  # another demonstration runs: a reader's plot, in full
    monkeypatch.setenv(demonstrations.RUN_DEMOS_ENV, "1")
    assert demonstrations.as_run(try_cell) is try_cell
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
    monkeypatch.delenv(demonstrations.RUN_DEMOS_ENV)
    assert demonstrations.as_run(try_cell) == f"print({demonstrations.DEMONSTRATION_SKIPPED!r})\n"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_try_cell_is_a_check_of_an_exercise_its_graded_cells_check(name):
    """The cells recognised as try cells are the notebook's `-try` cells that check, and each checks an exercise
    whose graded cells follow it: skipping one under autograde loses no grading."""
    nb = nbformat.read(build.ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        if not demonstrations.is_try(cell.source):
            continue
        assert cell.metadata["nbgrader"]["grade_id"].endswith("-try")
        exercise = cell.source.split('"')[1]
        graded_after = [c for c in code[i + 1:] if c.metadata.get("nbgrader", {}).get("grade")]
        assert any(f'check("{exercise}"' in c.source for c in graded_after), (name, exercise)


def test_an_ipython_kernel_skips_demonstrations_under_the_switch(monkeypatch, capsys):
    pytest.importorskip("IPython")  # a GPU machine may have no Jupyter: the checker's route is tested below
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    try:
        demonstrations.install(shell)
        demonstrations.install(shell)  # a second import adds nothing
        assert sum(getattr(t, "skips_demonstrations", False) for t in shell.input_transformers_post) == 1
        monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
        shell.run_cell(DEMO)
        assert capsys.readouterr().out.strip() == demonstrations.DEMONSTRATION_SKIPPED
        assert "shown" not in shell.user_ns
        monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
        shell.run_cell(DEMO)
        assert capsys.readouterr().out.strip() == "the demonstration ran"
    finally:
        shell.clear_instance()


# -- the checker -----------------------------------------------------------------------------------------------


def _notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (CHAIN_TIMES, DEMO, "print('after the demonstration')")]
    path = tmp_path / f"{NB}.ipynb"
    nbformat.write(nb, path)
    return path


def _check(path):
    return checker.run(path, timeout=600, criteria=["correctness"], only=["01.cost_model"])


def test_the_checker_skips_demonstrations_under_the_grader_switch(tmp_path, monkeypatch):
    monkeypatch.delenv(runtime.SMALL_DEMOS_ENV, raising=False)  # the checker sets it: the grader runs the notebook
    monkeypatch.delenv(demonstrations.RUN_DEMOS_ENV, raising=False)
    result = _check(_notebook(tmp_path))
    log = result["log"]
    assert log.count(demonstrations.DEMONSTRATION_SKIPPED) == 1, log
    assert "the demonstration ran" not in log
    assert "[cell 2/3] done in 0.0 s (a demonstration, skipped while grading)" in log
    assert "after the demonstration" in log  # the cells after it run
    assert checker.passed(result), log


def test_the_checker_runs_demonstrations_without_the_switch(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    result = _check(_notebook(tmp_path))
    log = result["log"]
    assert "the demonstration ran" in log
    assert demonstrations.DEMONSTRATION_SKIPPED not in log and "skipped while grading" not in log
    assert checker.passed(result), log


def test_nbgrader_autograde_under_the_switch_skips_a_demonstration_the_student_unmarked(tmp_path):
    """grade-class's route: nbgrader restores the read-only cell's marker, the kernel skips the cell."""
    pytest.importorskip("nbgrader")
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in _cells(NB)}
    demo = nbformat.v4.new_code_cell(DEMO, metadata={"nbgrader": {
        "grade": False, "grade_id": "demo", "locked": True, "schema_version": 3, "solution": False}})
    source = nbformat.v4.new_notebook(metadata=nbformat.read(
        build.ROOT / "solutions" / NB / f"{NB}.ipynb", as_version=4).metadata)
    source.cells = [by_id["setup"], demo, by_id["chain_times"], by_id["test_cost_model"]]
    for f in ("nbgrader_config.py", "grading.toml"):
        shutil.copy(build.ROOT / f, tmp_path)
    (tmp_path / "solutions" / "demo_nb").mkdir(parents=True)
    nbformat.write(source, tmp_path / "solutions" / "demo_nb" / "demo_nb.ipynb")
    db = f"sqlite:///{tmp_path}/gradebook.db"

    def nbgrader(*args, **env):
        done = subprocess.run(build.nbgrader_command(*args, f"--db={db}", "--log-level=ERROR"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
                              env={**build.tool_env(), **env})
        assert done.returncode == 0, done.stdout + done.stderr

    nbgrader("generate_assignment", "demo_nb", "--force")
    handed_in = nbformat.read(tmp_path / "course" / "demo_nb" / "demo_nb.ipynb", as_version=4)
    for cell in handed_in.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "demo":
            cell.source = cell.source.replace(demonstrations.MARKER + "\n", "")  # run it anyway, says the student
        elif gid == "chain_times":
            cell.source = by_id["chain_times"].source
    (tmp_path / "submitted" / "ada" / "demo_nb").mkdir(parents=True)
    nbformat.write(handed_in, tmp_path / "submitted" / "ada" / "demo_nb" / "demo_nb.ipynb")
    nbgrader("autograde", "demo_nb", "--force", "--create", **{runtime.SMALL_DEMOS_ENV: "1"})
    graded = nbformat.read(tmp_path / "autograded" / "ada" / "demo_nb" / "demo_nb.ipynb", as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in graded.cells}
    said = "".join(o.get("text", "") for o in cells["demo"].outputs)
    assert said.strip() == demonstrations.DEMONSTRATION_SKIPPED, cells["demo"].outputs
    assert not any(o.get("output_type") == "error" for o in cells["test_cost_model"].outputs)


# -- the notebooks ---------------------------------------------------------------------------------------------


def _scope_names(table) -> tuple[set, set]:
    """(read, bound) names of the module's namespace in one statement's symbol table: names read at its top or
    as globals inside its functions, classes and comprehensions; names it assigns, imports or defines there."""
    read, bound = set(), set()
    for sym in table.get_symbols():
        name = sym.get_name()
        if table.get_type() == "module":
            if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
                bound.add(name)
            elif sym.is_referenced():
                read.add(name)
        elif sym.is_global():
            if sym.is_declared_global() and sym.is_assigned():
                bound.add(name)
            elif sym.is_referenced():
                read.add(name)
    for child in table.get_children():
        r, b = _scope_names(child)
        read |= r
        bound |= b
    return read, bound


def cell_names(source: str) -> tuple[set, set]:
    """(names a cell reads from the notebook's namespace, names it leaves there). Statement by statement: a name
    bound by an earlier statement of the cell is not read from the namespace; one both read and bound by the
    same statement (a loop's variable) counts as bound. A function's globals count as read where it is defined."""
    read, bound = set(), set()
    for stmt in ast.parse(source).body:
        r, b = _scope_names(symtable.symtable(ast.unparse(stmt), "<cell>", "exec"))
        read |= r - bound - b
        bound |= b
    return read - set(dir(builtins)) - NAMESPACE, bound


def test_the_name_analysis_follows_the_scopes():
    source = ("import math as m\nA = 1\ndef f(x, y=B):\n    z = x + C\n    return [w * D for w in z]\n"
              "for i in range(3):\n    E = i + A\nclass K:\n    F = G\nprint(H, len(A))")
    read, bound = cell_names(source)
    assert read == {"B", "C", "D", "G", "H"}
    assert bound == {"m", "A", "f", "i", "E", "K"}


def _demonstration_problems(name: str) -> list[str]:
    bound_by: dict[str, list[bool]] = {}  # name -> for each earlier cell binding it: is that cell a demonstration?
    problems = []
    for cell in _cells(name):
        demo = demonstrations.is_demonstration(cell.source)
        meta = cell.metadata.get("nbgrader", {})
        where = f"{name}, cell {meta.get('grade_id') or cell.get('id')}"
        if demo:
            if meta.get("grade") or meta.get("solution"):
                problems.append(f"{where}: a graded or solution cell is marked as a demonstration")
            if not meta.get("locked"):
                problems.append(f"{where}: a demonstration must be read-only (nbgrader restores its marker)")
            if cell.source.lstrip().splitlines()[0] != demonstrations.MARKER:
                problems.append(f"{where}: write the marker as it is: {demonstrations.MARKER}")
        read, bound = cell_names(cell.source)
        if not demo:
            for n in sorted(read):
                if bound_by.get(n) and all(bound_by[n]):
                    problems.append(f"{where} reads {n}, which only a demonstration above defines")
        for n in bound:
            bound_by.setdefault(n, []).append(demo)
    return problems


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_cell_needs_a_name_only_a_demonstration_defines(name):
    assert not _demonstration_problems(name), "\n".join(_demonstration_problems(name))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_marks_its_demonstrations(name):
    assert any(demonstrations.is_demonstration(c.source) for c in _cells(name))


def test_the_dependency_check_sees_a_name_only_a_demonstration_defines(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    meta = {"nbgrader": {"grade": False, "solution": False, "locked": True, "grade_id": "g"}}
    nb.cells = [nbformat.v4.new_code_cell(demonstrations.MARKER + "\nSIZES = [1, 2]", metadata=meta),
                nbformat.v4.new_code_cell("def f():\n    return SIZES", metadata={"nbgrader": {"grade_id": "uses"}})]
    folder = tmp_path / "solutions" / "99_x"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "99_x.ipynb")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert _demonstration_problems("99_x") == ["99_x, cell uses reads SIZES, which only a demonstration above defines"]
