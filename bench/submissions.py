"""The class bench.scale grades: students who hand in a notebook's reference solution, and students whose
answers carry one planted mistake (BUGS: one a notebook, a formula a student gets wrong, so that the exercise's
graded cells fail while the notebook still runs to the end), in a course folder built as an instructor's is.

    build_course(folder, "01_hbm_cost_model", n, env)   # -> ["s01-solution", "s02-buggy", ...], 2n students

The folder gets the repository's nbgrader_config.py and grading.toml, the assignment's solution notebook as
nbgrader's source, the release `nbgrader generate_assignment` makes from it, its gradebook, and submitted/<student>/:
the release with every answer cell filled in (the reference's answer without nbgrader's markers, or the same with
the mistake).
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import subprocess
from pathlib import Path

from autograder.publish import build

ROOT = Path(__file__).resolve().parents[1]
SOLUTION, BUGGY = "solution", "buggy"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


@dataclasses.dataclass(frozen=True)
class Bug:
    """One answer cell's mistake: `right` (found exactly once in the reference answer) becomes `wrong`."""

    cell: str  # the answer cell's grade_id
    right: str
    wrong: str
    what: str


# One planted mistake a notebook: a formula a student gets wrong, which the notebook still runs with.
BUGS = {
    "01_hbm_cost_model": Bug("fused_chain", "y = alpha * z * tl.sigmoid(z)", "y = alpha * z",
                             "01.fused_chain without its SiLU: y = alpha * (x + bias)"),
    "02_vertical_fusion": Bug("rmsnorm", "tl.sum(x * x, axis=0) / H +", "tl.sum(x * x, axis=0) / BLOCK_H +",
                              "02.rmsnorm's mean of squares taken over the padded block, not the row"),
    "03_horizontal_fusion": Bug("row_sum_sumsq", "acc_sq += x * x", "acc_sq += x",
                                "03.row_sum_sumsq adds x, not its square, to the sum of squares"),
    "04_gemm_epilogue_fusion": Bug("swiglu", "h = tl.fdiv(gate, 1.0 + tl.exp(-gate)) * up", "h = gate * up",
                                   "04.swiglu without the SiLU of its gate"),
    "05_streaming_reduction_fusion": Bug("softmax", "(e / tl.sum(e, axis=0))", "(e / tl.max(e, axis=0))",
                                         "05.softmax divides by the row's largest exponential, not their sum"),
    "06_compiler_fusion": Bug("rmsnorm_op", "xhat * (tl.sum(g * xhat, axis=0) / H)", "xhat * tl.sum(g * xhat, axis=0)",
                              "06.rmsnorm_op's backward forgets to divide the projection by H"),
    "07_fusion_for_training": Bug("linear_cross_entropy_forward_backward",
                                  " - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)", "",
                                  "07's fused cross-entropy leaves the one-hot target out of the gradient"),
}


def answers(source_nb) -> dict[str, str]:
    """grade_id -> the reference answer of every answer cell of a solution notebook, without nbgrader's markers."""
    out = {}
    for cell in source_nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            out[meta["grade_id"]] = "\n".join(line for line in cell.source.splitlines()
                                              if line.strip() not in MARKERS)
    return out


def broken(good: dict[str, str], assignment: str) -> dict[str, str]:
    """The same answers with the assignment's planted mistake (BUGS)."""
    if assignment not in BUGS:
        raise ValueError(f"no planted mistake for {assignment!r}; the assignments are {', '.join(BUGS)}")
    bug = BUGS[assignment]
    source = good.get(bug.cell)
    if source is None:
        raise ValueError(f"{assignment} has no answer cell {bug.cell!r}")
    if source.count(bug.right) != 1:
        raise ValueError(f"{assignment}'s cell {bug.cell} holds {bug.right!r} {source.count(bug.right)} times, not "
                         "once: the planted mistake in bench/scale.py needs updating")
    return {**good, bug.cell: source.replace(bug.right, bug.wrong)}


def submission(release_nb, answered: dict[str, str]):
    """The release with every answer cell holding its answer: what a student hands in."""
    nb = copy.deepcopy(release_nb)
    left = dict(answered)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in left:
            cell.source = left.pop(grade_id)
    if left:
        raise ValueError(f"the release has no cells {sorted(left)}")
    return nb


def student_names(n: int) -> list[str]:
    """2n students, the two kinds alternating in grade-class's (sorted) order: s01-solution, s02-buggy, ..."""
    return [f"s{i + 1:02d}-{SOLUTION if i % 2 == 0 else BUGGY}" for i in range(2 * n)]


def kind_of(student: str) -> str:
    return BUGGY if student.endswith(BUGGY) else SOLUTION


def build_course(course: Path, assignment: str, n: int, env: dict) -> list[str]:
    """The course folder: configuration, source, release, gradebook, and the 2n submissions. Returns the students."""
    import nbformat

    course.mkdir(parents=True)
    for name in ("nbgrader_config.py", "grading.toml"):
        shutil.copy(ROOT / name, course / name)
    shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment,
                    ignore=shutil.ignore_patterns("*.py", ".ipynb_checkpoints", "__pycache__"))
    done = subprocess.run(build.nbgrader_command("generate_assignment", assignment, "--force",
                                                 f"--db=sqlite:///{course / 'gradebook.db'}", "--log-level=ERROR"),
                          cwd=course, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{(done.stdout + done.stderr)[-3000:]}")
    release = course / "course" / assignment
    good = answers(nbformat.read(course / "solutions" / assignment / f"{assignment}.ipynb", as_version=4))
    handed_in = {SOLUTION: good, BUGGY: broken(good, assignment)}
    release_nb = nbformat.read(release / f"{assignment}.ipynb", as_version=4)
    students = student_names(n)
    for student in students:
        folder = course / "submitted" / student / assignment
        shutil.copytree(release, folder)
        nbformat.write(submission(release_nb, handed_in[kind_of(student)]), folder / f"{assignment}.ipynb")
    return students
