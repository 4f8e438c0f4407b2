"""Build what an instructor hands out: the release notebooks and the grader, without any solution.

    python -m autograder.publish.handout [--out dist/handout]     (make handout)

The hand-out holds
  course/<notebook>/          the release notebooks, as nbgrader made them in course/
  fusion_course_grader-*.whl  the grader as an installable package: autograder/ and, of kernels/, only the
                              teaching modules the notebooks build on (TEACHING_KERNELS); no reference solution
  constraints.txt             the versions the course was tested with
  README.md                   how a student installs and opens it
Every other module of kernels/ is the answer to an exercise: it is not in the package, and the grader does not
need it (tests/test_grader_standalone.py). The grader still knows the answers by fingerprint only (fingerprint.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "fusion-course-grader"
# kernels/ modules that the release notebooks import and a student may read: none answers an exercise.
TEACHING_KERNELS = ("__init__", "op_chain", "matmul", "tma", "rmsnorm_variants", "row_argmax")


def answer_modules(root: Path = ROOT) -> list[Path]:
    """The kernels/ modules that hold a reference solution: everything but the teaching modules."""
    return sorted(p for p in (root / "kernels").glob("*.py") if p.stem not in TEACHING_KERNELS)


def _pyproject(root: Path) -> str:
    """The hand-out package's pyproject: the course's own dependencies, only the grader's files."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    as_toml = json.dumps  # a TOML string or array of strings is written as JSON writes it
    return "\n".join([
        "[build-system]", 'requires = ["setuptools>=69"]', 'build-backend = "setuptools.build_meta"', "",
        "[project]", f"name = {as_toml(PACKAGE)}", f"version = {as_toml(project['version'])}",
        'description = "The kernel fusion course\'s grader and teaching kernels, without the solutions."',
        f"requires-python = {as_toml(project['requires-python'])}",
        f"dependencies = {as_toml(project['dependencies'])}", "",
        "[project.optional-dependencies]", f"course = {as_toml(_student_side(project['optional-dependencies']['course']))}",
        "",
        "[project.scripts]", 'fusion-grader = "autograder.__main__:main"', "",
        "[tool.setuptools.packages.find]", 'include = ["autograder*", "kernels"]', "",
        "[tool.setuptools.package-data]", 'autograder = ["*.toml", "*.json"]', "",
    ])


def _student_side(requirements: list[str]) -> list[str]:
    """What a student's Jupyter needs of the course extra: not the instructor's build and similarity tools."""
    instructor_only = ("setuptools", "copydetect", "jupytext", "submitit")
    return [r for r in requirements if not r.startswith(instructor_only)]


def _stage(root: Path, stage: Path) -> None:
    shutil.copytree(root / "autograder", stage / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (stage / "kernels").mkdir()
    for name in TEACHING_KERNELS:
        shutil.copy2(root / "kernels" / f"{name}.py", stage / "kernels" / f"{name}.py")
    (stage / "pyproject.toml").write_text(_pyproject(root))


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """The grader package as a wheel in out/, built offline with this Python's setuptools."""
    with tempfile.TemporaryDirectory(prefix="handout-") as tmp:
        stage = Path(tmp) / "pkg"
        stage.mkdir()
        _stage(root, stage)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                               "--no-build-isolation", "--wheel-dir", str(out), str(stage)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"building the grader wheel failed (is setuptools installed?):\n{done.stderr[-3000:]}")
    wheels = sorted(out.glob(PACKAGE.replace("-", "_") + "-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip reported success but left no {PACKAGE} wheel in {out}")
    return wheels[-1]


STUDENT_README = """# Kernel fusion course: student hand-out

Set-up (a GPU machine with CUDA, or a laptop: without a GPU the kernels run in Triton's interpreter and only
correctness is graded, not speed):

    python3 -m venv .venv
    .venv/bin/pip install -c constraints.txt "{wheel}[course]"
    .venv/bin/python -m ipykernel install --sys-prefix --name fusion-course --display-name "Python 3 (fusion course)"
    .venv/bin/jupyter lab course/            (add --allow-root when you run as root)

Check a notebook from the command line, as the grader will:

    .venv/bin/fusion-grader check course/01_hbm_cost_model/01_hbm_cost_model.ipynb
"""


def build(out: Path, root: Path = ROOT) -> Path:
    """The whole hand-out in out/ (replaced if it exists); returns the wheel."""
    if not (root / "course").is_dir():
        raise FileNotFoundError(f"{root / 'course'} does not exist: run `make course` first")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(root / "course", out / "course", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy2(root / "constraints.txt", out / "constraints.txt")
    wheel = build_wheel(out, root)
    (out / "README.md").write_text(STUDENT_README.format(wheel=wheel.name))
    return wheel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "handout", help="where (default: dist/handout)")
    args = parser.parse_args(argv)
    wheel = build(args.out.resolve())
    print(f"hand-out in {args.out}: course/ ({len(list((args.out / 'course').glob('*/*.ipynb')))} notebooks), "
          f"{wheel.name}, constraints.txt, README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
