"""The repair warm-up of notebook 01 ("01.warmup_repair"): a clamp kernel handed out with two bugs.

The kernels graded here are the notebook's own, cut from its text source: the one handed out (a run-time bound in
`tl.arange`, and a store without its mask), the solution's repair, and two repairs gone half-way. Each is graded
in Triton's interpreter on the CPU; the grader must pass the repair and name what is wrong with the others.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import check, runtime

EX = "01.warmup_repair"
NAME = "01_hbm_cost_model"
ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "solutions" / NAME / f"{NAME}.py"
RELEASE = ROOT / "course" / NAME / f"{NAME}.ipynb"
TOP_LEVEL_SOLUTION = re.compile(r"^### BEGIN SOLUTION\n.*?^### END SOLUTION\n", re.S | re.M)

needs_no_gpu = pytest.mark.skipif(runtime.has_gpu(), reason="grades in the interpreter, as the CPU machines do")


def _answer_cell() -> str:
    """The source of the `clamp` answer cell in the notebook's text source."""
    text = SOURCE.read_text()
    start = text.index('"grade_id": "clamp"')
    body = text[text.index("\n", start) + 1:]
    return body[: body.index("\n# %%")]


def _handed_out() -> str:
    """The cell with the repaired kernel left out, and the launcher's solution kept: the kernel as released."""
    cell = TOP_LEVEL_SOLUTION.sub("", _answer_cell(), count=1)
    return cell.replace("    ### BEGIN SOLUTION\n", "").replace("    ### END SOLUTION\n", "")


def _clamp(source: str, tmp_path: Path):
    """The `clamp` a cell's source defines (from a file: @triton.jit reads its kernel's source)."""
    path = tmp_path / f"cell_{abs(hash(source))}.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + source)
    namespace = {"__name__": path.stem}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102  the notebook's own cell
    return namespace["clamp"]


def _correctness(source: str, tmp_path: Path):
    return check(EX, _clamp(source, tmp_path), criteria=["correctness"])["correctness"]


@needs_no_gpu
def test_the_repaired_kernel_passes(tmp_path):
    result = _correctness(_answer_cell(), tmp_path)
    assert result.passed, result.message


@needs_no_gpu
def test_the_kernel_as_handed_out_fails_on_its_compile_error(tmp_path):
    source = _handed_out()
    assert "tl.arange(0, n)" in source
    result = _correctness(source, tmp_path)
    assert not result.passed
    assert "arange" in result.message and "constexpr" in result.message, result.message


@needs_no_gpu
@pytest.mark.parametrize("mistake", [
    # the compile error repaired, the store still unmasked
    ("tl.arange(0, n)", "tl.arange(0, BLOCK)"),
    # both repaired, but the mask lets lane n through
    ("tl.arange(0, n)", "tl.arange(0, BLOCK)", "offs < n", "offs <= n", "tl.store(y_ptr + offs, y)\n",
     "tl.store(y_ptr + offs, y, mask=mask)\n"),
], ids=["store-unmasked", "mask-one-too-far"])
def test_a_half_done_repair_fails_with_the_write_past_the_end_named(tmp_path, mistake):
    source = _handed_out()
    for old, new in zip(mistake[::2], mistake[1::2]):
        assert old in source, old
        source = source.replace(old, new)
    result = _correctness(source, tmp_path)
    assert not result.passed
    assert "out-of-bounds" in result.message and "mask" in result.message, result.message


def test_the_release_hands_out_the_broken_kernel_and_a_stub_launcher():
    cells = json.loads(RELEASE.read_text())["cells"]
    (cell,) = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "clamp"]
    source = "".join(cell["source"])
    assert "tl.arange(0, n)" in source and "tl.store(y_ptr + offs, y)\n" in source
    assert "tl.arange(0, BLOCK)" not in source and "tl.store(y_ptr + offs, y, mask=mask)" not in source
    assert source.rstrip().endswith("raise NotImplementedError()")
