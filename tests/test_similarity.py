"""Similarity flags: an answer copied from the reference solution or from another student is flagged, with the
pair and its score, and shown side by side; an answer of one's own is not; nothing here touches a score."""

import re

import nbformat
import pytest

from autograder.publish import build
from autograder.classroom import similarity

NB = "01_hbm_cost_model"
CELL = "fused_chain"


def _reference_answer(root) -> str:
    nb = nbformat.read(root / "solutions" / NB / f"{NB}.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == CELL]
    return cell.source


OWN = '''
import torch
import triton
import triton.language as tl


@triton.jit
def chain_kernel(src, b_src, dst, n_cols, n_total, scale, TILE: tl.constexpr):
    start = tl.program_id(0) * TILE
    idx = start + tl.arange(0, TILE)
    inside = idx < n_total
    col = idx % n_cols
    v = tl.load(src + idx, mask=inside).to(tl.float32)
    shift = tl.load(b_src + col, mask=inside).to(tl.float32)
    v = v + shift
    out = scale * v / (1.0 + tl.exp(-v))
    tl.store(dst + idx, out.to(dst.dtype.element_ty), mask=inside)


def fused_chain(x, bias, alpha):
    x = x.contiguous()
    y = torch.empty_like(x)
    total = x.numel()
    chain_kernel[(triton.cdiv(total, 1024),)](x, bias, y, x.shape[1], total, alpha, TILE=1024)
    return y
'''


def _notebook(folder, code_by_cell):
    nb = nbformat.v4.new_notebook()
    for grade_id, code in code_by_cell.items():
        cell = nbformat.v4.new_code_cell(code)
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": True, "grade": False, "locked": False}
        nb.cells.append(cell)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{NB}.ipynb")
    return folder


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    root = build.ROOT
    tmp = tmp_path_factory.mktemp("similarity")
    reference = _reference_answer(root)
    renamed = re.sub(r"\b_fused_chain_kernel\b", "_my_kernel", reference)
    renamed = re.sub(r"#.*", "", renamed)
    submissions = {
        "alice": _notebook(tmp / "alice", {CELL: renamed}),  # the reference, renamed and without comments
        "bob": _notebook(tmp / "bob", {CELL: OWN}),
        "carol": _notebook(tmp / "carol", {CELL: OWN.replace("chain_kernel", "k").replace("TILE", "B")}),
        "dave": _notebook(tmp / "dave", {CELL: "# YOUR CODE HERE\nraise NotImplementedError()"}),
        "erin": _notebook(tmp / "erin", {CELL: "# YOUR CODE HERE\nraise NotImplementedError()"}),
    }
    report = tmp / "similarity-01.html"
    flags = similarity.similarity(submissions, root / "solutions" / NB, root / "course" / NB, report)
    return flags, report


def test_a_copy_of_the_reference_solution_is_flagged(compared):
    flags, _ = compared
    assert any(f.startswith(f"{NB}.{CELL}: ") and f.endswith("like the reference solution") for f in flags["alice"])


def test_two_students_with_one_answer_are_both_flagged_with_each_other(compared):
    flags, _ = compared
    assert any("like carol's" in f for f in flags["bob"]), flags["bob"]
    assert any("like bob's" in f for f in flags["carol"]), flags["carol"]
    assert not any("reference" in f for f in flags["bob"] + flags["carol"])


def test_the_released_stub_is_boilerplate_not_a_match(compared):
    flags, _ = compared
    assert flags["dave"] == [] and flags["erin"] == []


def test_the_report_shows_the_pairs_and_downloads_nothing(compared):
    _, report = compared
    html = report.read_text()
    assert "alice" in html and "carol" in html and "highlight-red" in html
    assert "cdn." not in html and "https://" not in html.split("<body")[0]


def test_a_threshold_outside_0_1_is_refused(tmp_path):
    with pytest.raises(ValueError, match="between 0 and 1"):
        similarity.similarity({}, tmp_path, tmp_path, tmp_path / "r.html", threshold=80)
