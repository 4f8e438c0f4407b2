"""Similarity flags: an answer copied from the reference solution or from another student is flagged, with the
pair and its score, and shown side by side; an answer of one's own is not; nothing here touches a score."""

import re

import nbformat
import pytest

from autograder.publish import build
from autograder.classroom import similarity

NB = "01_hbm_cost_model"
CELL = "fused_chain"
EXERCISE = "01.fused_chain"  # what the report and the flags call the answer cell fused_chain


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
    assert any(f.startswith(f"{EXERCISE}: ") and f.endswith("like the reference solution") for f in flags["alice"])


def test_two_students_with_one_answer_are_both_flagged_with_each_other(compared):
    flags, _ = compared
    assert any("like carol's" in f for f in flags["bob"]), flags["bob"]
    assert any("like bob's" in f for f in flags["carol"]), flags["carol"]
    assert not any("reference" in f for f in flags["bob"] + flags["carol"])


def test_the_released_stub_is_boilerplate_not_a_match(compared):
    flags, _ = compared
    assert flags["dave"] == [] and flags["erin"] == []


def test_the_report_shows_the_pairs_side_by_side_strongest_first_and_downloads_nothing(compared):
    _, report = compared
    html = report.read_text()
    rows = re.findall(r"<tr><td><a href='#pair\d+'>\d+</a></td><td>([^<]*)</td><td>([^<]*)</td><td>(\d+)%</td>"
                      r"<td>([^<]*)</td><td>(\d+)%</td></tr>", html)
    pairs = {frozenset((a, b)) for _, a, _, b, _ in rows}
    assert frozenset(("alice", "the reference solution")) in pairs and frozenset(("bob", "carol")) in pairs, rows
    assert {ex for ex, *_ in rows} == {EXERCISE}
    strongest = [max(int(x), int(y)) for _, _, x, _, y in rows]
    assert strongest == sorted(strongest, reverse=True)
    assert html.count("<div class='side'>") == len(rows) and "<span class='highlight-red'>" in html
    assert not re.search(r"https?://|<link|<script|@import|url\(", html)  # self-contained: opening it fetches nothing


def test_the_instructor_sets_the_threshold(tmp_path):
    """A launcher rewritten around the same kernel shares about three quarters of its fingerprints."""
    rewritten = OWN.split("def fused_chain")[0] + """
def fused_chain(x, bias, alpha):
    out = torch.zeros_like(x)
    rows, cols = x.shape
    for r in range(rows):
        chain_kernel[(triton.cdiv(cols, 256),)](x[r], bias, out[r], cols, cols, alpha, TILE=256)
    return out
"""
    folders = {"bob": _notebook(tmp_path / "bob", {CELL: OWN}), "carol": _notebook(tmp_path / "carol", {CELL: rewritten})}
    found = {}
    for threshold in (0.6, 0.9):
        found[threshold] = similarity.similarity(folders, build.ROOT / "solutions" / NB, build.ROOT / "course" / NB,
                                                 tmp_path / f"{threshold}.html", threshold=threshold)
    assert any("like carol's" in f for f in found[0.6]["bob"]), found
    assert found[0.9] == {"bob": [], "carol": []}
    assert "No pair of answers" in (tmp_path / "0.9.html").read_text()


def test_a_threshold_outside_0_1_is_refused(tmp_path):
    with pytest.raises(ValueError, match="between 0 and 1"):
        similarity.similarity({}, tmp_path, tmp_path, tmp_path / "r.html", threshold=80)


EXTRA = '''

def row_scale(x, s):
    out = torch.empty_like(x)
    rows, cols = x.shape
    for r in range(rows):
        acc = 0.0
        for c in range(cols):
            acc = acc + float(x[r, c]) * s
            out[r, c] = acc / (c + 1)
    return out
'''


def test_a_cell_whose_stub_fixes_the_code_is_held_to_its_own_baseline(tmp_path):
    """Where the released stub already holds most of the reference answer, every answer is alike by construction:
    no pair stands out. Alike answers to a cell the students wrote themselves are still flagged."""
    written = _reference_answer(build.ROOT)  # code of another shape than OWN (boilerplate counts in every cell)
    stub = OWN.replace("def fused_chain(", "def chained(")  # no exercise's function: the flags say "given"
    reference = _notebook(tmp_path / "reference", {"given": stub + EXTRA, "written": written})
    release = _notebook(tmp_path / "release", {"given": stub, "written": "# YOUR CODE HERE\nraise NotImplementedError()"})
    students = {name: _notebook(tmp_path / name, {"given": stub + EXTRA, "written": written})
                for name in ("ann", "ben", "cat", "dan")}
    flags = similarity.similarity(students, reference, release, tmp_path / "r.html")
    assert all(any(f.startswith(EXERCISE + ":") for f in flags[name]) for name in students), flags
    assert not any(f.startswith("given:") for found in flags.values() for f in found), flags


def test_the_cutoff_rises_with_how_alike_a_cells_answers_are():
    assert similarity.cutoff([0.1, 0.2], 0.8) == 0.8  # too few pairs to say what is typical
    assert similarity.cutoff([0.1, 0.2, 0.3], 0.8) == 0.8
    assert similarity.cutoff([0.9, 0.9, 0.95], 0.8) == pytest.approx(0.95)
