"""What an instructor hands out (make handout): the release notebooks and the grader, with no solution in them.

The package is installed in a fresh virtual environment that sees this one's libraries (torch, triton, ...) but
not the repository, and used from a folder outside it, as on a student's machine.
"""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autograder.publish import handout

NB = "01_hbm_cost_model"


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """(hand-out folder, the fresh venv's python, a working folder outside the repository)."""
    base = tmp_path_factory.mktemp("handout")
    out = base / "handout"
    wheel = handout.build(out)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # This environment's third-party libraries, as a plain path: its .pth files (the editable install of the
    # repository among them) are not run, so the repository is not importable from the new venv.
    Path(site, "course-libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, env=_env())
    work = base / "student"
    work.mkdir()
    return out, python, work


def _env():
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return env


def _run(python, args, cwd, timeout=900):
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env())


def test_the_handout_holds_release_notebooks_a_wheel_and_no_solution(root, student):
    out, _, _ = student
    notebooks = sorted(p.relative_to(out / "course") for p in (out / "course").glob("*/*.ipynb"))
    assert notebooks == sorted(p.relative_to(root / "course") for p in (root / "course").glob("*/*.ipynb"))
    for nb in (out / "course").rglob("*.ipynb"):
        assert "### BEGIN SOLUTION" not in nb.read_text(), nb
    [wheel] = out.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    kernels = {n.split("/")[1] for n in names if n.startswith("kernels/")}
    assert kernels == {f"{m}.py" for m in handout.TEACHING_KERNELS}
    assert not [n for n in names if n.startswith(("solutions/", "course/", "tests/"))]
    assert "autograder/reference_kernels.json" in names and "autograder/grading.toml" in names
    assert (out / "constraints.txt").is_file() and wheel.name in (out / "README.md").read_text()


def test_no_reference_kernel_can_be_imported_where_the_handout_is_installed(root, student):
    _, python, work = student
    answers = [p.stem for p in handout.answer_modules(root)]
    code = (
        "import importlib, json, autograder\n"
        "found = {}\n"
        f"for m in {answers!r} + {list(handout.TEACHING_KERNELS[1:])!r}:\n"
        "    try:\n"
        "        found[m] = importlib.import_module('kernels.' + m).__file__\n"
        "    except ModuleNotFoundError as exc:\n"
        "        found[m] = None\n"
        "print(json.dumps({'autograder': autograder.__file__, 'found': found}))\n"
    )
    done = _run(python, ["-c", code], work)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(root) not in seen["autograder"], "the grader came from the repository, not the installed hand-out"
    assert {m for m, f in seen["found"].items() if f} == set(handout.TEACHING_KERNELS[1:])
    assert all(str(root) not in f for f in seen["found"].values() if f)


@pytest.mark.slow
def test_the_installed_grader_grades_a_notebook_and_names_a_pasted_reference_kernel(root, student):
    """A student who pasted the solution notebook's code: graded in full, and the pasted kernel named."""
    _, python, work = student
    submission = work / f"{NB}.ipynb"
    submission.write_text((root / "solutions" / NB / f"{NB}.ipynb").read_text())
    done = _run(python, ["-m", "autograder", "check", str(submission), "--json", "--quiet"], work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [result] = json.loads(done.stdout)
    assert result["passed"] and not result["cell_errors"]
    notes = {r["exercise"]: r["notes"] for r in result["reports"]}
    assert any("course's reference kernel for 01.fused_chain (kernels/fused_chain.py: _fused_chain_kernel)" in n for n in notes["01.fused_chain"])


def test_a_submission_importing_a_solution_fails_with_the_import_named(student):
    _, python, work = student
    code = ("import autograder\n"
            "try:\n"
            "    from kernels.fused_chain import fused_chain\n"
            "except ModuleNotFoundError as exc:\n"
            "    print('refused:', exc)\n")
    done = _run(python, ["-c", code], work)
    assert "refused: No module named 'kernels.fused_chain'" in done.stdout, done.stdout + done.stderr
