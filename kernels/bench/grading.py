"""Seconds to grade each solution notebook, with the demonstrations at full size and as the grader runs them.

    python -m kernels.bench.grading [--modes full,grading] [--notebooks 01,02] [--out kernels/bench/results/grading]

Each notebook goes through the checker (`python -m autograder check`: a fresh process that runs every cell, then
grades every exercise) once per mode. "full" is what a reader's run of the notebook costs; "grading" sets
FUSION_COURSE_SMALL_DEMOS=1, the switch the checker, nbgrader's autograde and grade-class set, with which the
demonstration sweeps size themselves down (autograder.runtime.small_demos). The exercises are graded the same way in
both modes. Saves grading-<gpu>.{json,md} (device, versions, date; -partial when only some notebooks or modes ran):
wall seconds per notebook and where they went (the notebook's cells, each exercise's grading).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from autograder.checker import launch as checker
from autograder.measure import device
from kernels.bench.common import RESULTS, needs_gpu, record, save, slug

ROOT = Path(__file__).resolve().parents[2]
RESULTS = RESULTS / "grading"
MODES = {"full": "0", "grading": "1"}
GOAL_S = 60.0  # seconds per notebook on an H100, in grading mode

_CELL = re.compile(r"^\[cell (\d+)/\d+\] (?:done in ([\d.]+) s|raised)")
_GRADE = re.compile(r"^\[grade\] (\S+) done in ([\d.]+) s(?: \((.*)\))?")


def notebooks(only: list[str] | None) -> list[Path]:
    found = sorted(ROOT.glob("solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.stem.startswith(o) for o in only)]
    return found


def parse_log(log: str) -> dict:
    """{"cells": {n: seconds}, "grades": {exercise: seconds}, "criteria": {exercise: {criterion: seconds}}} from
    the checker's log."""
    cells, grades, criteria = {}, {}, {}
    for line in log.splitlines():
        if m := _CELL.match(line):
            cells[int(m[1])] = float(m[2]) if m[2] else None
        elif m := _GRADE.match(line):
            grades[m[1]] = float(m[2])
            criteria[m[1]] = {name: float(sec) for name, sec in (part.rsplit(" ", 1) for part in (m[3] or "").split(", ") if " " in part)}
    return {"cells": cells, "grades": grades, "criteria": criteria}


def grade_once(path: Path, mode: str) -> dict:

    old = os.environ.get("FUSION_COURSE_SMALL_DEMOS")
    os.environ["FUSION_COURSE_SMALL_DEMOS"] = MODES[mode]
    try:
        started = time.perf_counter()
        result = checker.run(path)
        wall = time.perf_counter() - started
    finally:
        if old is None:
            os.environ.pop("FUSION_COURSE_SMALL_DEMOS", None)
        else:
            os.environ["FUSION_COURSE_SMALL_DEMOS"] = old
    parts = parse_log(result["log"])
    cells = [s for s in parts["cells"].values() if s is not None]
    slowest = sorted(parts["cells"].items(), key=lambda kv: -(kv[1] or 0))[:3]
    return {"notebook": path.stem, "mode": mode, "wall_s": wall, "cells_s": sum(cells),
            "grading_s": sum(parts["grades"].values()), "grades": parts["grades"], "cells": parts["cells"],
            "criteria": parts["criteria"],
            "slowest_cells": [[n, s] for n, s in slowest], "passed": checker.passed(result),
            "cell_errors": [e["error"] for e in result["cell_errors"]],
            "failed": [f"{r.exercise}: {c.name}: {' '.join(c.message.split())[:700]}" for r in result["reports"]
                       for c in r.results if c.status == "failed"]}


def markdown(result: dict) -> str:
    d = result["device"]
    partial = " (partial)" if result.get("partial") else ""
    lines = [f"### Seconds to grade a solution notebook: {d['name']} ({result['date']}, torch {result['torch']}, "
             f"triton {result['triton']}){partial}", "",
             "The checker's wall time per notebook (a fresh process: every cell, then every exercise graded), with "
             "the demonstrations at full size and sized down by the grader's switch (FUSION_COURSE_SMALL_DEMOS=1). "
             f"Goal: at most {GOAL_S:.0f} s per notebook graded, on an H100.", "",
             "| notebook | demonstrations | wall s | cells s | grading s | slowest cells (n: s) | all passed |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        slow = ", ".join(f"{n}: {s:.0f}" for n, s in row["slowest_cells"] if s)
        lines.append(f"| {row['notebook']} | {'full size' if row['mode'] == 'full' else 'grader switch'} | "
                     f"{row['wall_s']:.0f} | {row['cells_s']:.0f} | {row['grading_s']:.0f} | {slow} | "
                     f"{'yes' if row['passed'] else 'NO: ' + '; '.join(row['failed'] + row['cell_errors'])[:200]} |")
    by_mode = {}
    for row in result["rows"]:
        by_mode.setdefault(row["mode"], []).append(row["wall_s"])
    for mode, walls in by_mode.items():
        lines.append(f"| all | {'full size' if mode == 'full' else 'grader switch'} | {sum(walls):.0f} "
                     f"(max {max(walls):.0f}) | | | | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="full,grading", help="full, grading or both (default full,grading)")
    parser.add_argument("--notebooks", nargs="*", help="notebook prefixes (01 02 ...); default all")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes takes {' and '.join(MODES)}, not {', '.join(unknown) or 'nothing'}")
    paths = notebooks(args.notebooks)
    if not paths:
        parser.error(f"no solution notebook matches {args.notebooks}")
    if not needs_gpu("grading"):
        return 2

    prof = device.profile()
    partial = bool(args.notebooks) or set(modes) != set(MODES)
    result = {**record(prof), "partial": partial, "rows": []}
    stem = args.out / f"grading-{slug(prof.name)}{'-partial' if partial else ''}"
    todo = [(p, m) for p in paths for m in modes]
    for path, mode in tqdm(todo, desc="grading notebooks"):
        row = grade_once(path, mode)
        result["rows"].append(row)
        print(f"{row['notebook']} {mode}: {row['wall_s']:.1f} s (cells {row['cells_s']:.1f}, grading "
              f"{row['grading_s']:.1f}; {json.dumps(row['grades'])}; slowest cells {row['slowest_cells']}) "
              f"passed={row['passed']}", flush=True)
        # Saved after every notebook: a run stopped part way keeps what it measured.
        save(result, stem.with_suffix(".json"))
        stem.with_suffix(".md").write_text(markdown(result))
    rows = result["rows"]
    print(markdown(result))
    print(f"saved {stem}.json, .md")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
