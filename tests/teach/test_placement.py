"""Every picture shows what its section teaches: a diagram's registry entry (autograder.teach.diagrams) names its
notebook, its section(s) and its subject as key words, and each place a notebook shows it must agree (the alt
text, the drawing and the section's prose all name the key words). The old placements that once disagreed are
kept below as negative examples: each must still be caught."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
jupytext = pytest.importorskip("jupytext")

from autograder.publish import build
from autograder.teach import diagrams, placement

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(ROOT.glob("solutions/[0-9][0-9]_*/[0-9][0-9]_*.py"))


@pytest.fixture(scope="module")
def drawn():
    return {name: diagrams.drawn_text(d.draw) for name, d in diagrams.DIAGRAMS.items()}


def markdown_cells(src: Path) -> list[str]:
    return [c.source for c in jupytext.read(src, fmt="py:percent").cells if c.cell_type == "markdown"]


def section_showing(cells: list[str], name: str, heading: str = "") -> placement.Section:
    (sec,) = [s for s in placement.sections(cells) if name in s.figures and heading in s.heading]
    return sec


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_every_figure_sits_in_its_section(src, drawn):
    cells = markdown_cells(src)
    assert placement.notebook_disagreements(src.stem, cells, diagrams.DIAGRAMS, drawn) == []
    for cell in cells:
        for alt, name in placement.FIGURE_LINK.findall(cell):
            assert alt == "", f"{src.name}: write ![](figures/{name}); the alt text lives in the registry"


def test_sections_split_at_level_one_and_two_headings_only():
    cells = ["# Title\nintro ![](figures/a.svg)", "## 1. One\ntext\n### Exercise 1.x\ncard ![](figures/b.svg)",
             "more of one", "## 2. Two\nother"]
    secs = placement.sections(cells)
    assert [s.heading for s in secs] == ["(before the first heading)", "Title", "1. One", "2. Two"]
    assert secs[2].figures == ["b.svg"] and "more of one" in secs[2].text and "exercise 1.x" in secs[2].text
    assert "figures/" not in secs[2].text


# ---------------------------------------------------------------------------------------------------------
# The old placements, each of which drew something other than what its cell taught


def test_old_05_cross_entropy_picture_is_caught(drawn):
    """05's cross-entropy section showed the chunked-rows picture of 07 (C x V logits, dz, dH_c, dW +=) under
    prose about vocabulary tiles reduced to (max, sum of exp) pairs."""
    src = ROOT / "solutions/05_streaming_reduction_fusion/05_streaming_reduction_fusion.py"
    cells = [c.replace("figures/vocab_tile_cross_entropy.svg", "figures/chunked_cross_entropy.svg")
             for c in markdown_cells(src)]
    problems = placement.notebook_disagreements(src.stem, cells, diagrams.DIAGRAMS, drawn)
    assert any("chunked_cross_entropy.svg" in p and "belongs to notebook 07" in p for p in problems)
    assert any("chunked_cross_entropy.svg" in p and "missing from the section's prose" in p for p in problems)
    # even registered for 05, it would not fit the prose of the section
    entry = replace(diagrams.DIAGRAMS["chunked_cross_entropy.svg"], notebook=src.stem)
    sec = section_showing(cells, "chunked_cross_entropy.svg")
    assert placement.disagreements("chunked_cross_entropy.svg", entry, src.stem, sec, drawn["chunked_cross_entropy.svg"])


def test_old_03_shared_input_picture_is_caught(drawn):
    """03's section on siblings that share an input showed the AdamW address table under alt text about two
    kernels reading X."""
    src = ROOT / "solutions/03_horizontal_fusion/03_horizontal_fusion.py"
    cells = [c.replace("figures/shared_input_siblings.svg", "figures/multi_tensor_launch.svg")
             for c in markdown_cells(src)]
    sec = section_showing(cells, "multi_tensor_launch.svg", heading="share an input")
    problems = placement.disagreements("multi_tensor_launch.svg", diagrams.DIAGRAMS["multi_tensor_launch.svg"],
                                       src.stem, sec, drawn["multi_tensor_launch.svg"])
    assert any("belongs under a heading" in p for p in problems)
    assert any("missing from the section's prose" in p for p in problems)
    # and the old registry entry, whose alt text described the address table, did not fit either
    old = diagrams.Diagram(src.stem, diagrams.DIAGRAMS["multi_tensor_launch.svg"].draw,
                           ("A multi-tensor optimizer step: instead of one launch per parameter tensor, one launch "
                            "whose programs look up their tensor and block in an address table."),
                           ("Siblings that share an input",), ("address table",))
    assert placement.disagreements("horizontal_fusion.svg", old, src.stem, sec, drawn["multi_tensor_launch.svg"])


# What the old QKV drawing wrote: W_qkv = cat([Wq, Wk, Wv], dim=1), equal widths, split by d.
OLD_QKV_DRAWING = "\n".join([
    "Horizontal fusion: one GEMM for Q, K and V", "three GEMMs: x is read three times", "x", "@", "Wq", "q",
    "Wk", "k", "Wv", "v", "stacked: x is read once", "M x d", "W_qkv = cat([Wq, Wk, Wv], dim=1): d x 3d",
    "(concatenated once, at load time)", "M x 3d: one output", "1 launch, 3x the work per launch",
    "q, k, v = out.split(d, dim=-1): three views, no copy",
    "reads |x| + |W_qkv|: saves 2|x| of reads,\nand one large GEMM keeps the tensor cores busier"])
OLD_QKV_ALT = ("Three GEMMs x@Wq, x@Wk, x@Wv read x three times; stacking the weights into one d x 3d matrix makes "
               "one GEMM that reads x once and writes q, k and v side by side.")


def test_old_03_qkv_picture_is_caught(drawn):
    """03's QKV section teaches nn.Linear's (N, K) weights stacked by rows with n_kv < n_q; the old drawing
    concatenated equal-width d x d blocks along dim=1."""
    src = ROOT / "solutions/03_horizontal_fusion/03_horizontal_fusion.py"
    sec = section_showing(markdown_cells(src), "qkv_stacking.svg")
    entry = diagrams.DIAGRAMS["qkv_stacking.svg"]
    assert placement.disagreements("qkv_stacking.svg", entry, src.stem, sec, drawn["qkv_stacking.svg"]) == []
    old = replace(entry, alt=OLD_QKV_ALT)
    problems = placement.disagreements("qkv_stacking.svg", old, src.stem, sec, OLD_QKV_DRAWING)
    assert any("missing from the drawing" in p and "'n_kv'" in p for p in problems)
    assert any("missing from its alt text" in p for p in problems)


# ---------------------------------------------------------------------------------------------------------
# The build takes the alt text from the registry, and only from there


def test_build_writes_the_registry_alt_text(tmp_path):
    folder = ROOT / "solutions/03_horizontal_fusion/figures"
    out = build.embed_figures("see ![](figures/qkv_stacking.svg) here", folder)
    assert out.startswith(f"see ![{diagrams.DIAGRAMS['qkv_stacking.svg'].alt}](data:image/svg+xml;base64,")
    assert build.figure_links("![](figures/qkv_stacking.svg)") == [(diagrams.DIAGRAMS["qkv_stacking.svg"].alt,
                                                                   "qkv_stacking.svg")]


@pytest.mark.parametrize("markdown, message", [
    ("![two kernels read X](figures/shared_input_siblings.svg)", "alt text is kept in"),
    ("![](figures/chunked_cross_entropy.svg)", "registered for 07_fusion_for_training"),
    ("![](figures/no_such_picture.svg)", "not in autograder.teach.diagrams.DIAGRAMS"),
])
def test_build_refuses_a_figure_that_disagrees(markdown, message):
    with pytest.raises(LookupError, match=message):
        build.embed_figures(markdown, ROOT / "solutions/03_horizontal_fusion/figures")
