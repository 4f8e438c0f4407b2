"""Which answers of a class look copied: from the reference solution or from another student.

grade-class calls similarity() after grading. Each answer cell (an nbgrader solution cell) of every submission
becomes one file named after its cell, and copydetect (winnowed fingerprints of the token stream, names
abstracted away, as MOSS does) compares only files of the same cell: a student's `rmsnorm` with the reference
solution's and with every other student's. What the release already gave them (the cell's stub) is boilerplate
and never counts. A pair above the threshold becomes a flag for the CSV and a side-by-side entry in an HTML
report; a flag never changes a score: it tells the instructor where to look.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

REFERENCE = "reference-solution"  # the folder name that stands for the course's own solution in a comparison
THRESHOLD = 0.8  # the share of one file's fingerprints found in the other
_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$", re.M)


def answer_cells(nb_path: Path) -> dict[str, str]:
    """{"<notebook>.<grade_id>": code} of the notebook's answer cells (solution cells), markers taken out."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    cells = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and meta.get("grade_id"):
            cells[f"{nb_path.stem}.{meta['grade_id']}"] = _MARKERS.sub("", cell.source)
    return cells


def _write(folder: Path, cells: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, code in cells.items():
        if code.strip():
            (folder / f"{name}.py").write_text(code)


def _offline(report: Path) -> None:
    """copydetect's report links Bootstrap from a CDN: take those tags out, so opening it downloads nothing."""
    html = report.read_text(encoding="utf-8")
    html = re.sub(r"<link [^>]*cdn\.jsdelivr\.net[^>]*>", "", html)
    html = re.sub(r"<script [^>]*cdn\.jsdelivr\.net[^>]*></script>", "", html)
    report.write_text(html, encoding="utf-8")


def similarity(submissions: dict[str, Path], reference: Path, release: Path, report: Path,
               threshold: float = THRESHOLD) -> dict[str, list[str]]:
    """Flags per student ({student: ["<cell>: 93% like bob's", ...]}) and the HTML report written to report.

    submissions: {student: folder of their submitted notebooks}; reference: the folder of the solution
    notebooks; release: the folder of the released notebooks (their answer cells are the boilerplate).
    """
    from copydetect import CopyDetector

    if not 0 < threshold < 1:
        raise ValueError(f"the similarity threshold is a share between 0 and 1, got {threshold}")
    flags: dict[str, list[str]] = {s: [] for s in submissions}
    with tempfile.TemporaryDirectory(prefix="similarity-") as tmp:
        tmp = Path(tmp)
        for student, folder in submissions.items():
            for nb in sorted(folder.glob("*.ipynb")):
                try:
                    _write(tmp / "students" / student, answer_cells(nb))
                except Exception as exc:  # noqa: BLE001  unreadable: grading already flags and records it
                    flags[student].append(f"{nb.name}: not compared for similarity ({type(exc).__name__})")
        for nb in sorted(reference.glob("*.ipynb")):
            _write(tmp / "reference" / REFERENCE, answer_cells(nb))
        for nb in sorted(release.glob("*.ipynb")):
            _write(tmp / "boilerplate", answer_cells(nb))
        student_dirs = [str(p) for p in sorted((tmp / "students").glob("*"))]
        if not student_dirs:
            return flags
        reference_dirs = student_dirs + [str(p) for p in (tmp / "reference").glob("*")]
        detector = CopyDetector(test_dirs=student_dirs, ref_dirs=reference_dirs,
                                boilerplate_dirs=[str(tmp / "boilerplate")] if (tmp / "boilerplate").is_dir() else [],
                                extensions=["py"], display_t=threshold, same_name_only=True, autoopen=False,
                                silent=True, out_file=str(report))
        detector.run()
        for test_sim, ref_sim, test_file, ref_file, *_ in detector.get_copied_code_list():
            a, b = Path(test_file), Path(ref_file)
            if a.parent.name == b.parent.name:
                continue
            cell = a.stem
            if b.parent.name == REFERENCE:
                flags[a.parent.name].append(f"{cell}: {test_sim:.0%} like the reference solution")
            else:
                flags[a.parent.name].append(f"{cell}: {test_sim:.0%} like {b.parent.name}'s")
                if b.parent.name in flags:
                    flags[b.parent.name].append(f"{cell}: {ref_sim:.0%} like {a.parent.name}'s")
        report.parent.mkdir(parents=True, exist_ok=True)
        detector.generate_html_report()
        if report.is_file():
            _offline(report)
    return {s: sorted(set(f)) for s, f in flags.items()}
