"""The corpus of bad submissions (tests/corpus/*.py): reading a case and grading it the way it asks.

Each case file is what a student handed in for one exercise (a notebook cell), headed by literal settings
that the harness reads with ast, without running the file:

    EXERCISE   the exercise id, e.g. "01.fused_chain"
    ROUTE      "check":   imported here and passed to check() in this process (harmless to the test process)
               "checker": run by the checker (python -m autograder check) in a fresh process, after the
                          notebook's set-up cell: crashes, hangs and tampering go this way
               "class":   handed in as a student's notebook and graded by grade-class with nbgrader
                          (tests/hostile/test_corpus_class.py)
    CRITERIA   the criteria to grade (check, checker)
    FAILS      {criterion: [phrases]}: the criterion must fail, its message containing every phrase
    PASSES     criteria that must pass (optional)
    SAYS       {criterion: [phrases]}: in its message, whether it passes or fails (optional)
    DEVICE     "gpu": only a CUDA GPU can run it (the test carries the gpu marker); "cpu": it is about
               Triton's interpreter (skipped on a GPU); absent: both
    TIMEOUT    seconds the checker may take (optional)
  class route (the source's "# %% cell <grade_id>" lines start the cells it hands in: an answer cell, a
  locked cell, or "top" for a new code cell above the set-up cell):
    STATUS     grade-class's status for the student
    REASON     phrases in grade-class's reason
    FLAGS      phrases in grade-class's flags
    ZERO       graded cells that must score 0
    FULL       graded cells that must score full points
    SHOWS      phrases the graded notebook's outputs must contain (what the feedback shows)

This module imports neither nbformat nor nbgrader: the GPU machine runs the gpu-marked cases without Jupyter.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).with_name("corpus")
ROUTES = ("check", "checker", "class")
SETTINGS = {"EXERCISE", "ROUTE", "CRITERIA", "FAILS", "PASSES", "SAYS", "DEVICE", "TIMEOUT", "STATUS", "REASON",
            "FLAGS", "ZERO", "FULL", "SHOWS"}
REQUIRED = {"check": {"EXERCISE", "CRITERIA"}, "checker": {"EXERCISE", "CRITERIA"}, "class": {"EXERCISE", "STATUS"}}
SETUP_CELL = "import autograder\nfrom autograder import check\n"  # what every course notebook starts with


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    path: Path
    source: str
    settings: dict

    def __getattr__(self, key):
        if key.isupper():
            return self.settings.get(key)
        raise AttributeError(key)

    @property
    def function(self) -> str:
        from autograder import specs as registry

        return registry.get(self.EXERCISE).function

    @property
    def notebook(self) -> str:
        from autograder import specs as registry

        return registry.get(self.EXERCISE).notebook


def read_settings(source: str, where: str) -> dict:
    settings = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper() and name in SETTINGS:
                settings[name] = ast.literal_eval(node.value)
    route = settings.get("ROUTE")
    if route not in ROUTES:
        raise ValueError(f"{where}: ROUTE must be one of {ROUTES}, got {route!r}")
    missing = REQUIRED[route] - settings.keys()
    if missing:
        raise ValueError(f"{where}: a {route} case needs {sorted(missing)}")
    if route != "class" and not (settings.get("FAILS") or settings.get("SAYS")):
        raise ValueError(f"{where}: a {route} case expects nothing: give FAILS or SAYS")
    return settings


def load(route: str | None = None) -> list[Case]:
    cases = []
    for path in sorted(CORPUS.glob("*.py")):
        source = path.read_text()
        case = Case(path.stem, path, source, read_settings(source, str(path)))
        if route is None or case.ROUTE == route:
            cases.append(case)
    return cases


def params(route: str) -> list:
    """pytest parameters, one per case of the route; GPU cases carry the gpu marker."""
    from autograder import runtime

    interpreter_only = pytest.mark.skipif(runtime.has_gpu(), reason="about Triton's interpreter")
    marks = {"gpu": [pytest.mark.gpu], "cpu": [interpreter_only], None: []}
    return [pytest.param(c, id=c.name, marks=marks[c.DEVICE]) for c in load(route)]


def grade_in_process(case: Case):
    """Import the case (it is a real file: compiled Triton reads its source) and check() its function."""
    from autograder import check

    spec = importlib.util.spec_from_file_location(f"corpus_{case.name}", case.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return check(case.EXERCISE, getattr(module, case.function), criteria=case.CRITERIA)


def notebook_json(cells: list[str]) -> dict:
    """A minimal notebook (plain JSON: no nbformat needed)."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": src} for i, src in enumerate(cells)]}


def grade_in_checker(case: Case, folder: Path):
    """The checker on a notebook made of the set-up cell and the case: returns the case exercise's Report."""
    from autograder.checker import notebook as checker

    path = folder / f"{case.notebook}.ipynb"
    path.write_text(json.dumps(notebook_json([SETUP_CELL, case.source])))
    result = checker.run(path, timeout=case.TIMEOUT or 300, criteria=case.CRITERIA)
    [report] = [r for r in result["reports"] if r.exercise == case.EXERCISE]
    return report


def assert_graded_as_expected(case: Case, report) -> None:
    for criterion, phrases in (case.FAILS or {}).items():
        r = report[criterion]
        assert r.status == "failed", f"{case.name}: {criterion} should fail, got {r.status}: {r.message}"
        for phrase in phrases:
            assert phrase in r.message, f"{case.name}: {criterion} message lacks {phrase!r}:\n{r.message}"
    for criterion in case.PASSES or ():
        r = report[criterion]
        assert r.status == "passed", f"{case.name}: {criterion} should pass: {r.message}"
    for criterion, phrases in (case.SAYS or {}).items():
        for phrase in phrases:
            assert phrase in report[criterion].message, f"{case.name}: {criterion} lacks {phrase!r}"
    for r in report.results:  # whatever a submission does, no speed above the copy bandwidth is reported
        assert r.figures.get("fraction_of_peak", 0) <= 1.1, f"{case.name}: impossible speed: {r.message}"
