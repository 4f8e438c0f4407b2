"""The self-learner's checker: python -m autograder check NOTEBOOK.ipynb."""

import json
import subprocess
import sys

import nbformat
import pytest

from autograder import runtime
from autograder.measure import capability
from autograder.publish import build
from autograder.checker import notebook as checker

NB = "01_hbm_cost_model"


def _cli(*args, cwd=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def _write(tmp_path, cells, name=NB):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


# Without a GPU the nbgrader round trip already runs every solution notebook in the interpreter and requires
# full marks on every cell it can grade (alice): here one notebook shows the checker's own route does the same.
# On a GPU every notebook goes through the checker, performance included (it is how notebooks run there).
CHECKED = build.sources() if runtime.has_gpu() else [build.ROOT / "solutions" / NB / f"{NB}.py"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.stem for p in CHECKED])
def test_solution_passes_every_gradable_criterion(root, name):
    from autograder import specs as registry

    out = _cli("check", str(root / "solutions" / name / f"{name}.ipynb"), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    [result] = json.loads(out.stdout)
    assert result["passed"] and not result["cell_errors"]
    statuses = {(r["exercise"], c["name"]): c["status"] for r in result["reports"] for c in r["results"]}
    assert len(statuses) == sum(len(ex.criteria) for ex in registry.for_notebook(name))
    expected_perf = "passed" if runtime.has_gpu() else "skipped"
    for (exercise, criterion), status in statuses.items():
        if capability.missing_hardware(registry.get(exercise).hardware, capability.current()):
            assert status == "skipped", (exercise, criterion)  # bound to a GPU this machine is not (notebook 08)
        else:
            assert status == (expected_perf if criterion == "performance" else "passed")


@pytest.mark.slow
def test_release_fails_and_says_why(root):
    out = _cli("check", str(root / "course" / NB / f"{NB}.ipynb"))
    assert out.returncode == 1
    assert "FAILED" in out.stdout
    assert "chain_times raised NotImplementedError" in out.stdout or "not done yet" in out.stdout
    assert "fused_chain raised NotImplementedError" in out.stdout or "fused_chain is not defined" in out.stdout


def test_crashing_notebook_is_a_recorded_failure(tmp_path):
    path = _write(tmp_path, ["import os", "os._exit(3)"])
    result = checker.run(path, timeout=300)
    assert not checker.passed(result)
    for rep in result["reports"]:
        for r in rep.results:
            assert r.status == "failed" and "exited with code 3" in r.message


def test_hanging_notebook_times_out(tmp_path):
    path = _write(tmp_path, ["import time", "time.sleep(600)"])
    result = checker.run(path, timeout=20)
    assert not checker.passed(result)
    assert all("timed out after 20 s" in r.message for rep in result["reports"] for r in rep.results)


def test_cell_errors_are_reported_and_grading_goes_on(tmp_path):
    cells = ["raise RuntimeError('boom')",
             "def chain_times(n, s, bw, l):\n    return n * (2 * s / bw + l), 2 * s / bw + l"]
    result = checker.run(_write(tmp_path, cells), timeout=300, criteria=["correctness"])
    assert [e["error"] for e in result["cell_errors"]] == ["RuntimeError: boom"]
    assert len(result["cell_seconds"]) == len(cells)  # every code cell timed, the one that raised too
    assert all(isinstance(i, int) and seconds >= 0 for i, seconds in result["cell_seconds"])
    by_id = {r.exercise: r for r in result["reports"]}
    assert by_id["01.cost_model"].passed
    assert "01.fused_chain" in result["not_started"] and "01.fused_chain" not in by_id  # never defined: one line
    assert not checker.passed(result)


def test_json_output_and_criteria_filter(tmp_path):
    cells = ["def chain_times(n, s, bw, l):\n    return n * (2 * s / bw + l), 2 * s / bw + l"]
    out = _cli("check", str(_write(tmp_path, cells)), "--json", "--criteria", "correctness")
    assert out.returncode == 1  # the other exercises are missing
    [result] = json.loads(out.stdout)
    assert {c["name"] for r in result["reports"] for c in r["results"]} == {"correctness"}


def test_bad_usage_gets_a_clear_error(tmp_path):
    missing = _cli("check", str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2 and "no such notebook" in missing.stderr
    other = _write(tmp_path, ["x = 1"], name="99_unknown")
    unknown = _cli("check", str(other))
    assert unknown.returncode == 2 and "holds no graded exercises" in unknown.stderr
    txt = tmp_path / "notes.txt"
    txt.write_text("hi")
    assert _cli("check", str(txt)).returncode == 2
    bad_crit = _cli("check", str(_write(tmp_path, ["x = 1"])), "--criteria", "speed")
    assert bad_crit.returncode == 2 and "unknown criteria" in bad_crit.stderr


def test_list_names_every_exercise():
    out = _cli("list", "--json")
    assert out.returncode == 0
    ids = {e["id"] for e in json.loads(out.stdout)}
    assert {"01.cost_model", "01.layer_traffic", "01.fused_chain"} <= ids
