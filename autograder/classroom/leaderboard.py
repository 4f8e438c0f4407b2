"""The class leaderboard: per exercise, the fraction of the device's peak each student's graded kernel reached.

In grade-class the figures are each student's judge's: once the student's process has ended, process.save_judged
writes the performance verdicts' figures (the criterion's `fraction_of_peak`, or `fraction_of_compiled` for a
training step; graded at several shapes, the worst shape's) to FIGURES_NAME in the workspace, one JSON line an
exercise, the format record() writes for a process that grades in place with RECORD_ENV set (the student's own is
never given it). The class process reads the file back before the workspace is removed (read()), keeps the figures
in its state, and writes the page and a CSV after the run (write()). Without a GPU nothing is timed: "not measured".
The leaderboard is a picture of the class, never a grade.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import html
import json
import os
import re
from pathlib import Path

from autograder import specs as registry

RECORD_ENV = "FUSION_COURSE_RECORD_FIGURES"
FIGURES_NAME = ".performance-figures.jsonl"
NOT_MEASURED = "not measured"


def fraction_of(figures: dict) -> float | None:
    """The fraction of the peak a performance result reached; graded at several shapes, the worst shape's."""
    for key in ("fraction_of_compiled", "fraction_of_peak"):
        if figures.get(key) is not None:
            return float(figures[key])
    parts = [k[: -len("_fraction_of_peak")] for k in figures if k.endswith("_fraction_of_peak")]
    found = [float(figures[f"{p}_fraction_of_peak"]) for p in parts if figures[f"{p}_fraction_of_peak"] is not None]
    return min(found) if found else None


def record(report, cfg) -> None:
    """Append the report's performance figures to the file grade-class reads back (called by check())."""
    if not os.environ.get(RECORD_ENV) or not cfg.source:
        return
    for result in report.results:
        if result.name == "performance":
            line = {"exercise": report.exercise, "status": result.status, "fraction": fraction_of(result.figures)}
            with open(Path(cfg.source).with_name(FIGURES_NAME), "a") as f:
                f.write(json.dumps(line) + "\n")


def read(work: Path) -> dict[str, float | None]:
    """{exercise: fraction of the peak, or None when it was not timed} from a graded workspace; the last
    measurement of an exercise counts (the graded cell runs after the student's own checks)."""
    path = work / FIGURES_NAME
    found: dict[str, float | None] = {}
    if not path.is_file():
        return found
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            found[str(entry["exercise"])] = None if entry["fraction"] is None else float(entry["fraction"])
        except (ValueError, KeyError, TypeError):
            continue  # a line the notebook mangled: nothing to show for it
    return found


def exercises(source: Path) -> list[str]:
    """The exercises graded on performance that the assignment's notebooks check, in notebook order."""
    import nbformat


    ids: list[str] = []
    for nb_path in sorted(source.glob("*.ipynb")):
        for cell in nbformat.read(nb_path, as_version=4).cells:
            for ex_id in re.findall(r"""check\(\s*["']([0-9]{2}\.\w+)["']""", cell.source if cell.cell_type == "code" else ""):
                try:
                    ex = registry.get(ex_id)
                except (KeyError, ValueError):
                    continue
                if "performance" in ex.criteria and ex_id not in ids:
                    ids.append(ex_id)
    return ids


def pseudonym(student: str, key: int) -> str:
    """A stable name for a student that does not reveal them: keyed by the course's secret seed."""
    digest = hmac.new(str(key).encode(), student.encode(), hashlib.sha256).hexdigest()
    return f"student-{digest[:6]}"


def cell(value) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}"


def column(figures: dict, exercise_ids: list[str]) -> str:
    """The grades CSV's column: '01.fused_chain 0.97; 02.rmsnorm not measured'."""
    return "; ".join(f"{ex} {cell(figures.get(ex))}" for ex in exercise_ids)


def write(assignment: str, figures: dict[str, dict], exercise_ids: list[str], html_path: Path, csv_path: Path,
          anonymous: bool = False, key: int = 0) -> None:
    """The leaderboard as a self-contained HTML page and a CSV: one row per student (or pseudonym), one column per
    exercise, best mean fraction first; students with nothing measured last, in name order."""

    def name(s: str) -> str:
        return pseudonym(s, key) if anonymous else s

    def mean(s: str) -> float:
        got = [v for ex in exercise_ids if (v := figures[s].get(ex)) is not None]
        return sum(got) / len(got) if got else -1.0

    order = sorted(figures, key=lambda s: (-mean(s), name(s)))
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "student", *exercise_ids])
        for rank, s in enumerate(order, 1):
            w.writerow([rank, name(s), *(cell(figures[s].get(ex)) for ex in exercise_ids)])
    best = {ex: max((v for s in order if (v := figures[s].get(ex)) is not None), default=None) for ex in exercise_ids}
    rows = []
    for rank, s in enumerate(order, 1):
        tds = []
        for ex in exercise_ids:
            v = figures[s].get(ex)
            style = ' class="best"' if v is not None and v == best[ex] else (' class="none"' if v is None else "")
            tds.append(f"<td{style}>{html.escape(cell(v))}</td>")
        rows.append(f"<tr><td>{rank}</td><th>{html.escape(name(s))}</th>{''.join(tds)}</tr>")
    head = "".join(f"<th>{html.escape(ex)}</th>" for ex in exercise_ids)
    measured = any(v is not None for s in order for v in figures[s].values())
    note = ("Each figure is the fraction of this GPU's peak (copy bandwidth, matmul rate, or the yardstick the "
            "exercise names) that the student's graded kernel reached, timed in turns with the peak.") if measured \
        else "Nothing was timed: this class was graded without a GPU, so every fraction is not measured."
    html_path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>Leaderboard: {html.escape(assignment)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 10px;text-align:right}th{background:#f4f4f4}td.best{background:#dff3e3;font-weight:bold}"
        "td.none{color:#888}</style></head><body>"
        f"<h1>Leaderboard: {html.escape(assignment)}</h1><p>{html.escape(note)}</p>"
        f"<table><tr><th>rank</th><th>student</th>{head}</tr>{''.join(rows)}</table></body></html>\n",
        encoding="utf-8")
