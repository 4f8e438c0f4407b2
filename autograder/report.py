"""What a check returns: one result per criterion, readable in a terminal and in a notebook."""

from __future__ import annotations

import dataclasses
import html
import json

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_MARK = {PASSED: "PASS", FAILED: "FAIL", SKIPPED: "skip"}
PHYSICAL_PEAKS = ("copy", "matmul")  # ceilings no kernel exceeds (a baseline's speed can be beaten)


class GradeFailed(AssertionError):
    """A criterion failed; its message is the feedback (a notebook shows it without the grader's frames)."""


class GPUShared(AssertionError):
    """A performance cell whose measurement the GPU's other users spoiled: no points for now, and grade-class
    grades the student again when the GPU is free (never a failing grade)."""


@dataclasses.dataclass
class CriterionResult:
    name: str
    status: str  # passed | failed | skipped
    message: str
    figures: dict = dataclasses.field(default_factory=dict)
    seconds: float | None = None  # how long grading this criterion took (the grader's own bookkeeping)

    def __post_init__(self):
        # A fraction of a physical ceiling (copy bandwidth, matmul rate) above 1 is a measurement that missed work,
        # never a pass, whichever code built the result.
        frac = self.figures.get("fraction_of_peak")
        if (self.status == PASSED and self.figures.get("peak_kind") in PHYSICAL_PEAKS
                and isinstance(frac, (int, float)) and frac > 1.0):
            self.status = FAILED
            self.message = (f"impossible measurement: work escaped the timer ({frac:.2f} of this GPU's "
                            f"{self.figures['peak_kind']} ceiling)\n{self.message}")

    @property
    def passed(self) -> bool:
        """Skipped counts as not failed: performance without a GPU is skipped, not failed."""
        return self.status != FAILED


@dataclasses.dataclass
class Report:
    exercise: str
    results: list[CriterionResult]
    notes: list[str] = dataclasses.field(default_factory=list)  # named for the reader and the instructor, not scored

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def __getitem__(self, criterion: str) -> CriterionResult:
        for r in self.results:
            if r.name == criterion:
                return r
        raise KeyError(f"{self.exercise}: no result for criterion {criterion!r}; have {[r.name for r in self.results]}")

    def assert_passed(self, criterion: str | None = None) -> None:
        """Raise AssertionError carrying the feedback if the criterion (or any, when None) failed."""
        chosen = [self[criterion]] if criterion else self.results
        failed = [r for r in chosen if r.status == FAILED]
        shared = [r for r in chosen if r.status == SKIPPED and r.figures.get("gpu_shared") and r.figures.get("required")]
        if shared and not failed:
            raise GPUShared("\n".join(f"{self.exercise}: {r.name} {r.message}" for r in shared))
        if failed:
            lines = [f"{self.exercise}: {r.name} failed\n{_indent(r.message)}" for r in failed]
            raise GradeFailed("\n".join(lines))
        print(self.summary(criterion))

    def summary(self, criterion: str | None = None) -> str:
        chosen = [self[criterion]] if criterion else self.results
        lines = [f"{self.exercise} {r.name}: {_MARK[r.status]} - {_first_line(r.message)}" for r in chosen]
        return "\n".join(lines + [f"{self.exercise} note: {n}" for n in self.notes])

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "passed": self.passed, "notes": list(self.notes),
                "results": [dataclasses.asdict(r) for r in self.results]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=str)

    def __str__(self) -> str:
        return format_table([self])

    def _repr_html_(self) -> str:
        rows = []
        for r in self.results:
            color = {PASSED: "#1a7f37", FAILED: "#cf222e", SKIPPED: "#9a6700"}[r.status]
            figs = "<br>".join(f"{html.escape(k)} = {html.escape(_fmt(v))}" for k, v in r.figures.items())
            rows.append(
                f"<tr><td>{html.escape(r.name)}</td><td style='color:{color};font-weight:bold'>{_MARK[r.status]}</td>"
                f"<td style='text-align:left;white-space:pre-wrap'>{html.escape(r.message)}</td>"
                f"<td style='text-align:left'>{figs}</td></tr>"
            )
        notes = "".join(f"<p><b>note:</b> {html.escape(n)}</p>" for n in self.notes)
        return (
            f"<b>{html.escape(self.exercise)}</b>{notes}<table><tr><th>criterion</th><th>result</th><th>message</th>"
            f"<th>figures</th></tr>{''.join(rows)}</table>"
        )


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _first_line(s: str) -> str:
    return s.splitlines()[0] if s else ""


def _indent(s: str) -> str:
    return "\n".join("  " + line for line in s.splitlines())


def format_table(reports: list[Report]) -> str:
    """A plain-text table, exercise x criterion, with the message and the figures."""
    rows = [("exercise", "criterion", "result", "message / figures")]
    for rep in reports:
        for r in rep.results:
            items = [f"{k}={_fmt(v)}" for k, v in r.figures.items()]
            if len(items) > 6:  # the full set is in --json and in the notebook's HTML table
                items = items[:6] + [f"+{len(items) - 6} more"]
            figs = ", ".join(items)
            text = r.message + (f"\n[{figs}]" if figs else "")
            lines = text.splitlines() or [""]
            rows.append((rep.exercise, r.name, _MARK[r.status], lines[0]))
            rows.extend(("", "", "", line) for line in lines[1:])
        rows.extend((rep.exercise, "note", "", n) for n in rep.notes)
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
        if i == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * 20)
    return "\n".join(out)
