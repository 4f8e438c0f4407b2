"""The course's schematic drawings: every committed SVG is what autograder.teach.diagrams draws today, byte for
byte, each has alt text worth reading, and none is heavy enough to bloat a notebook."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("matplotlib")

from autograder.teach import diagrams

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
MAX_BYTES = 150 * 1024
KEYS = sorted(diagrams.DIAGRAMS)


def test_table_names_existing_notebooks_and_svg_files():
    assert KEYS, "no diagrams"
    for name in KEYS:
        assert (SOLUTIONS / diagrams.DIAGRAMS[name].notebook).is_dir(), name
        assert re.fullmatch(r"[a-z0-9_]+\.svg", name), name


def test_no_stray_svg():
    """Every SVG under a notebook's figures/ is a registered diagram of that notebook (a moved picture leaves
    no copy behind)."""
    on_disk = {(p.parents[1].name, p.name) for p in SOLUTIONS.glob("*/figures/*.svg")}
    assert on_disk == {(d.notebook, name) for name, d in diagrams.DIAGRAMS.items()}


@pytest.mark.parametrize("name", KEYS)
def test_alt_text(name):
    entry = diagrams.DIAGRAMS[name]
    assert callable(entry.draw)
    assert len(entry.alt) >= 40, f"alt text of {name} is too short to describe the picture"
    assert "\n" not in entry.alt and "]" not in entry.alt and "[" not in entry.alt, (
        "alt text must fit inside ![...](...)")
    assert entry.sections and entry.keywords, f"{name} names no section or no key words"


@pytest.mark.parametrize("name", KEYS)
def test_committed_svg_is_current(name, tmp_path):
    committed = SOLUTIONS / diagrams.DIAGRAMS[name].notebook / "figures" / name
    assert committed.is_file(), f"{committed} missing: run python -m autograder.teach.diagrams"
    func = diagrams.DIAGRAMS[name].draw
    fresh = tmp_path / name
    diagrams.save_svg(diagrams.render(func), fresh)
    data = fresh.read_bytes()
    assert len(data) < MAX_BYTES, f"{name} is {len(data)} bytes"
    assert b"<dc:date>" not in data, "the SVG carries a date, so it would change on every run"
    assert data == committed.read_bytes(), (
        f"{committed} differs from what {func.__name__}() draws now: run python -m autograder.teach.diagrams"
    )


def test_measured_hierarchy_with_and_without_gpu(tmp_path):
    no_gpu = SimpleNamespace(name="cpu", copy_gbps=None, matmul_tflops={})
    gpu = SimpleNamespace(name="Some GPU", copy_gbps=3012.4, matmul_tflops={"bf16": 701.2, "fp16": 698.0})
    texts = {}
    for label, profile in [("cpu", no_gpu), ("gpu", gpu)]:
        fig = diagrams.memory_hierarchy_measured(profile)
        texts[label] = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
        diagrams.save_svg(fig, tmp_path / f"{label}.svg")
        assert (tmp_path / f"{label}.svg").stat().st_size < MAX_BYTES
    assert "not measured: no GPU" in texts["cpu"]
    assert "3,012 GB/s" in texts["gpu"] and "bf16 701" in texts["gpu"] and "fp16 698" in texts["gpu"]
