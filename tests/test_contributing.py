"""docs/contributing.md's recipe for an exercise works: its example spec and reference kernel, read from the page,
are registered as the page says (a spec module on the registry's list, a kernel module of kernels/), and the
grader grades them on Triton's interpreter: the kernel passes correctness and precision, a wrong one fails."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import autograder  # first: picks the interpreter before any @triton.jit runs
import kernels
from autograder import check
from autograder import specs as registry
from autograder.specs.exercise import KernelExercise

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "contributing.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```\n", re.S)


def _page_files() -> dict[str, str]:
    return dict(FILE_BLOCK.findall(PAGE.read_text()))


@pytest.fixture
def example(tmp_path, monkeypatch):
    """The page's files in a temporary folder that joins the packages they name, and the spec module on the
    registry's list: the registry as it would be with the files in place, undone after the test."""
    files = _page_files()
    assert set(files) == {"autograder/specs/example.py", "kernels/scale_shift.py"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert not (ROOT / "autograder/specs/example.py").exists() and not (ROOT / "kernels/scale_shift.py").exists()
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(tmp_path / "autograder/specs")])
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(tmp_path / "kernels")])
    monkeypatch.setattr(registry, "_MODULES", (*registry._MODULES, "example"))
    monkeypatch.setattr(registry, "_registry", None)
    try:
        import kernels.scale_shift as module

        yield module
    finally:
        for package, name in ((registry, "example"), (kernels, "scale_shift")):
            sys.modules.pop(f"{package.__name__}.{name}", None)
            if hasattr(package, name):
                delattr(package, name)


def test_the_example_is_registered_with_its_secret_shapes(example):
    ex = registry.get("00.scale_shift")
    assert isinstance(ex, KernelExercise) and ex.kernel == "scale_shift"
    assert ex.extra_shapes and not set(ex.extra_shapes) & set(ex.shapes)
    assert registry.for_notebook("00_example") == [ex]


def test_the_example_kernel_passes_correctness_and_precision(example):
    report = check("00.scale_shift", example.scale_shift, criteria=["correctness", "precision"])
    assert report["correctness"].status == "passed", report["correctness"].message
    assert report["precision"].status == "passed", report["precision"].message


def test_a_kernel_that_leaves_the_tail_unwritten_fails_correctness(example):
    import triton

    def scale_shift(x, scale, shift):  # the grid rounds down: the last partial block is never launched
        y = x.new_empty(x.shape)
        example._scale_shift_kernel[(x.numel() // 1024,)](x, y, x.numel(), scale, shift, BLOCK=1024)
        return y

    assert triton.cdiv(5003, 1024) != 5003 // 1024
    result = check("00.scale_shift", scale_shift, criteria=["correctness"])["correctness"]
    assert result.status == "failed"
    assert "never written" in result.message, result.message
