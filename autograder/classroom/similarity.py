"""Which answers of a class look copied: from the reference solution or from another student.

grade-class calls similarity() after grading. Each answer cell (an nbgrader solution cell) of every submission
becomes one file named after its cell, and copydetect (winnowed fingerprints of the token stream, names
abstracted away, as MOSS does) compares only files of the same cell: a student's `rmsnorm` with the reference
solution's and with every other student's. What the release already gave them (the cell's stub) is boilerplate
and never counts; where the stub already holds most of the reference answer, a pair must also be more alike
than the class's answers to that cell typically are (cutoff). A pair above the threshold becomes a flag for the
CSV and a side-by-side entry in a self-contained HTML report (write_report: strongest pairs first, by student and
exercise, the matching regions marked); a flag never changes a score: it tells the instructor where to look.
"""

from __future__ import annotations

import re
import statistics
import tempfile
from pathlib import Path

from autograder import specs as registry

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


def exercise_ids(reference: Path) -> dict[str, str]:
    """{"<notebook>.<grade_id>": exercise id} for the answer cells of the reference notebooks: the exercise whose
    function the cell defines (its grade_id when no exercise does)."""

    exercises = list(registry.all_exercises())
    found = {}
    for nb in sorted(reference.glob("*.ipynb")):
        for name, code in answer_cells(nb).items():
            grade_id = name.split(".", 1)[1]
            defined = set(re.findall(r"^def (\w+)\(", code, re.M))
            matches = [ex for ex in exercises if ex.function == grade_id] or \
                      [ex for ex in exercises if ex.function in defined]
            matches.sort(key=lambda ex: ex.notebook != nb.stem)  # this notebook's own exercise first
            found[name] = matches[0].id if matches else grade_id
    return found


_PAGE_STYLE = """body{font-family:sans-serif;margin:2em;color:#222}h2{margin-top:2em;font-size:1.1em}
table.pairs{border-collapse:collapse}table.pairs td,table.pairs th{border:1px solid #ccc;padding:3px 8px}
.side{display:flex;gap:1em}.side>div{flex:1;min-width:0}.side pre{background:#f7f7f7;border:1px solid #ddd;
padding:.6em;overflow-x:auto;font-size:12px}.highlight-red{background:#ffd5d5}.highlight-green{background:#d3f5d3}"""


def write_report(pairs: list[dict], threshold: float, report: Path) -> None:
    """A self-contained page (no external style sheet, script or font): a table of the pairs, strongest first,
    then each pair's answers side by side with the matching regions marked."""
    import html as h

    rows, blocks = [], []
    for i, p in enumerate(pairs, 1):
        rows.append(f"<tr><td><a href='#pair{i}'>{i}</a></td><td>{h.escape(p['exercise'])}</td>"
                    f"<td>{h.escape(p['a'])}</td><td>{p['a_share']:.0%}</td><td>{h.escape(p['b'])}</td>"
                    f"<td>{p['b_share']:.0%}</td></tr>")
        # copydetect's marked code is already escaped; only its two span classes are markup.
        blocks.append(f"<h2 id='pair{i}'>{i}. {h.escape(p['exercise'])}: {h.escape(p['a'])} and {h.escape(p['b'])}"
                      f"</h2><div class='side'><div><b>{h.escape(p['a'])}</b> ({p['a_share']:.0%} of it matches)"
                      f"<pre>{p['a_code']}</pre></div><div><b>{h.escape(p['b'])}</b> ({p['b_share']:.0%} of it "
                      f"matches)<pre>{p['b_code']}</pre></div></div>")
    body = (f"<table class='pairs'><tr><th>#</th><th>exercise</th><th>student</th><th>share matching</th>"
            f"<th>like</th><th>share matching</th></tr>{''.join(rows)}</table>{''.join(blocks)}" if pairs
            else "<p>No pair of answers shares that much.</p>")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Similar answers</title>"
        f"<style>{_PAGE_STYLE}</style></head><body><h1>Similar answers</h1><p>Pairs of answer cells sharing at least "
        f"{threshold:.0%} of their fingerprints (winnowed token n-grams, names abstracted away; the released stub "
        "does not count), strongest first. Marked: the matching regions. A flag is a reason to look, never a "
        f"verdict or a grade.</p>{body}</body></html>\n", encoding="utf-8")


FIXED_BY_STUB = 0.5  # the share of the reference answer's fingerprints that its released stub already holds
MIN_PAIRS = 3  # pairs of students' answers to a cell from which what is typical of them is taken


def _fixed_by_stub(tmp: Path, detector_class) -> list[str]:
    """The answer cells whose released stub already holds most of the reference solution's answer: there every
    answer is alike by construction, whoever wrote it."""
    reference, stubs = tmp / "reference", tmp / "boilerplate"
    if not reference.is_dir() or not stubs.is_dir():
        return []
    detector = detector_class(test_dirs=[str(p) for p in reference.glob("*")], ref_dirs=[str(stubs)],
                              extensions=["py"], display_t=0.0, same_name_only=True, autoopen=False, silent=True)
    detector.run()
    matrix = detector.similarity_matrix
    return [Path(t).stem for i, t in enumerate(detector.test_files) for j, _ in enumerate(detector.ref_files)
            if matrix[i, j, 0] >= FIXED_BY_STUB]


def _student_likeness(detector, cell: str) -> list[float]:
    """How alike each pair of students' answers to the cell is (the larger of the two shares), each pair once."""
    found, matrix = [], detector.similarity_matrix
    for i, test_file in enumerate(detector.test_files):
        for j, ref_file in enumerate(detector.ref_files):
            a, b = Path(test_file), Path(ref_file)
            if (a.stem == cell and b.stem == cell and b.parent.name != REFERENCE and a.parent.name < b.parent.name
                    and matrix[i, j, 0] >= 0):  # -1: not compared
                found.append(float(max(matrix[i, j, 0], matrix[i, j, 1])))
    return found


def cutoff(likeness: list[float], threshold: float) -> float:
    """The share a pair of answers to a cell whose stub fixes the code must exceed to be flagged: halfway from the
    students' median pair to identical, or the threshold if higher (or with fewer than MIN_PAIRS pairs)."""
    if len(likeness) < MIN_PAIRS:
        return threshold
    typical = statistics.median(likeness)
    return max(threshold, typical + (1 - typical) / 2)


def similarity(submissions: dict[str, Path], reference: Path, release: Path, report: Path,
               threshold: float = THRESHOLD) -> dict[str, list[str]]:
    """Flags per student ({student: ["<exercise>: 93% like bob's", ...]}) and the HTML report written to report.

    submissions: {student: folder of their submitted notebooks}; reference: the folder of the solution
    notebooks; release: the folder of the released notebooks (their answer cells are the boilerplate).
    """
    from copydetect import CopyDetector

    if not 0 < threshold < 1:
        raise ValueError(f"the similarity threshold is a share between 0 and 1, got {threshold}")
    flags: dict[str, list[str]] = {s: [] for s in submissions}
    pairs: list[dict] = []
    exercise_of = exercise_ids(reference)
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
        if student_dirs:
            reference_dirs = student_dirs + [str(p) for p in (tmp / "reference").glob("*")]
            detector = CopyDetector(test_dirs=student_dirs, ref_dirs=reference_dirs,
                                    boilerplate_dirs=[str(tmp / "boilerplate")] if (tmp / "boilerplate").is_dir() else [],
                                    extensions=["py"], display_t=threshold, same_name_only=True, autoopen=False,
                                    silent=True)
            detector.run()
            cutoffs = {cell: cutoff(_student_likeness(detector, cell), threshold)
                       for cell in _fixed_by_stub(tmp, CopyDetector)}
            for test_sim, ref_sim, test_file, ref_file, test_code, ref_code, _ in detector.get_copied_code_list():
                a, b = Path(test_file), Path(ref_file)
                if a.parent.name == b.parent.name or test_sim <= cutoffs.get(a.stem, threshold):
                    continue
                ex = exercise_of.get(a.stem, a.stem)
                other = "the reference solution" if b.parent.name == REFERENCE else b.parent.name
                if b.parent.name == REFERENCE:
                    flags[a.parent.name].append(f"{ex}: {test_sim:.0%} like the reference solution")
                else:
                    flags[a.parent.name].append(f"{ex}: {test_sim:.0%} like {b.parent.name}'s")
                    if b.parent.name in flags:
                        flags[b.parent.name].append(f"{ex}: {ref_sim:.0%} like {a.parent.name}'s")
                pairs.append({"exercise": ex, "a": a.parent.name, "b": other, "a_share": float(test_sim),
                              "b_share": float(ref_sim), "a_code": test_code, "b_code": ref_code})
    pairs.sort(key=lambda p: (-max(p["a_share"], p["b_share"]), p["exercise"], p["a"], p["b"]))
    write_report(pairs, threshold, report)
    return {s: sorted(set(f)) for s, f in flags.items()}
