"""Seconds to grade each solution notebook, with the demonstrations at full size, sized down, or skipped.

    python -m bench.grading [--modes full,small,grading] [--notebooks 01 02] [--cold] [--label NAME]
                                    [--note TEXT] [--out bench/results/grading]

Each notebook goes through the checker (`python -m autograder check`: a fresh process that runs every cell, then
grades every exercise) once per mode:

    full     what a reader's run of the notebook costs (FUSION_COURSE_SMALL_DEMOS=0)
    small    the grader's switch with the demonstrations run, sized down (FUSION_COURSE_RUN_DEMOS=1): how the
             grader ran a notebook before it skipped them, the "before" of that change
    grading  as the checker, nbgrader's autograde and grade-class run it: the switch on, every demonstration cell
             skipped (autograder.demonstrations)

The exercises are graded the same way in every mode. --cold gives each run empty Triton, Inductor and CUDA caches
of its own, as grade-class gives each student (seeded, as there, with this machine's cache of the grader's own
compilations: autograder.classroom.compile_cache): a student's time in a class run, less Jupyter's. Without it the
runs share this machine's caches, warm after the first. Saves grading-<gpu>[-LABEL].{json,md} (device, versions,
date, label and note; -partial when only some notebooks or modes ran): wall seconds per notebook and where they
went (the notebook's cells, the demonstration cells skipped, each exercise's grading and its criteria).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from tqdm.auto import tqdm

from autograder import demonstrations, runtime
from autograder.checker import notebook as checker
from autograder.classroom import compile_cache
from autograder.measure import device
from bench.common import RESULTS, needs_gpu, record, save, slug

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS / "grading"
# mode -> (the environment it runs in, what its demonstrations do)
MODES = {"full": ({runtime.SMALL_DEMOS_ENV: "0", demonstrations.RUN_DEMOS_ENV: "0"}, "full size"),
         "small": ({runtime.SMALL_DEMOS_ENV: "1", demonstrations.RUN_DEMOS_ENV: "1"}, "sized down, run"),
         "grading": ({runtime.SMALL_DEMOS_ENV: "1", demonstrations.RUN_DEMOS_ENV: "0"}, "skipped")}
OLD_MODES = {"full": "full size", "grading": "grader switch"}  # runs saved before the demonstrations were skipped
GOAL_S = 60.0  # seconds per notebook on an H100, in grading mode

_CELL = re.compile(r"^\[cell (\d+)/\d+\] (?:done in ([\d.]+) s( \(a demonstration, skipped)?|raised)")
_GRADE = re.compile(r"^\[grade\] (\S+) done in ([\d.]+) s(?: \((.*)\))?")


def notebooks(only: list[str] | None) -> list[Path]:
    found = sorted(ROOT.glob("solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.stem.startswith(o) for o in only)]
    return found


def parse_log(log: str) -> dict:
    """{"cells": {n: seconds}, "skipped": [n of each demonstration skipped], "grades": {exercise: seconds},
    "criteria": {exercise: {criterion: seconds}}} from the checker's log."""
    cells, skipped, grades, criteria = {}, [], {}, {}
    for line in log.splitlines():
        if m := _CELL.match(line):
            cells[int(m[1])] = float(m[2]) if m[2] else None
            if m[3]:
                skipped.append(int(m[1]))
        elif m := _GRADE.match(line):
            grades[m[1]] = float(m[2])
            criteria[m[1]] = {name: float(sec) for name, sec in (part.rsplit(" ", 1) for part in (m[3] or "").split(", ") if " " in part)}
    return {"cells": cells, "skipped": skipped, "grades": grades, "criteria": criteria}


@contextlib.contextmanager
def environment(values: dict):
    """os.environ with these variables set for the duration (the checker's process inherits them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cold_caches(folder: Path) -> dict:
    """Empty compiler caches under folder, as grade-class gives a student (classroom.process.child_env), seeded
    with this machine's cache of the grader's own compilations as grade-class seeds them."""
    compile_cache.seed(folder)
    return {var: str(folder / name) for var, name in compile_cache.COMPILE_CACHES.items()}


def grade_once(path: Path, mode: str, cold: bool = False) -> dict:
    env, demos = MODES[mode]
    with tempfile.TemporaryDirectory(prefix="grading-caches-") as caches:
        caches_env = cold_caches(Path(caches)) if cold else {}
        with environment({**env, **caches_env}):
            started = time.perf_counter()
            result = checker.run(path)
            wall = time.perf_counter() - started
    parts = parse_log(result["log"])
    cells = [s for s in parts["cells"].values() if s is not None]
    slowest = sorted(parts["cells"].items(), key=lambda kv: -(kv[1] or 0))[:3]
    return {"notebook": path.stem, "mode": mode, "demonstrations": demos, "wall_s": wall, "cells_s": sum(cells),
            "grading_s": sum(parts["grades"].values()), "grades": parts["grades"], "cells": parts["cells"],
            "skipped_cells": parts["skipped"], "criteria": parts["criteria"],
            "slowest_cells": [[n, s] for n, s in slowest], "passed": checker.passed(result),
            "cell_errors": [e["error"] for e in result["cell_errors"]],
            "failed": [f"{r.exercise}: {c.name}: {' '.join(c.message.split())[:700]}" for r in result["reports"]
                       for c in r.results if c.status == "failed"]}


def demonstrations_of(row: dict) -> str:
    """What a row's demonstration cells did, in the table's words."""
    if "demonstrations" not in row:
        return OLD_MODES[row["mode"]]
    skipped = len(row.get("skipped_cells", []))
    return f"{row['demonstrations']} ({skipped} cell{'s' if skipped > 1 else ''})" if skipped else row["demonstrations"]


def intro(result: dict) -> str:
    if all("demonstrations" not in row for row in result["rows"]):  # a run saved before demonstrations were skipped
        what = "the demonstrations at full size and sized down by the grader's switch (FUSION_COURSE_SMALL_DEMOS=1)"
    else:
        what = ("the demonstration cells run at full size, run sized down by the grader's switch "
                "(FUSION_COURSE_SMALL_DEMOS=1 with FUSION_COURSE_RUN_DEMOS=1, as the grader ran them before it "
                "skipped them) or skipped, as the grader runs a notebook")
    cold = (" Every run started with empty compiler caches of its own, as grade-class gives each student."
            if result.get("cold") else "")
    return (f"The checker's wall time per notebook (a fresh process: every cell, then every exercise graded), with "
            f"{what}.{cold} Goal: at most {GOAL_S:.0f} s per notebook graded, on an H100.")


def markdown(result: dict) -> str:
    d = result["device"]
    partial = " (partial)" if result.get("partial") else ""
    title = (f"### Seconds to grade a solution notebook: {d['name']} ({result['date']}, torch {result['torch']}, "
             f"triton {result['triton']}){partial}")
    lines = [title, "", intro(result), "",
             "| notebook | demonstrations | wall s | cells s | grading s | slowest cells (n: s) | all passed |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        slow = ", ".join(f"{n}: {s:.0f}" for n, s in row["slowest_cells"] if s)
        lines.append(f"| {row['notebook']} | {demonstrations_of(row)} | "
                     f"{row['wall_s']:.0f} | {row['cells_s']:.0f} | {row['grading_s']:.0f} | {slow} | "
                     f"{'yes' if row['passed'] else 'NO: ' + '; '.join(row['failed'] + row['cell_errors'])[:200]} |")
    by_mode = {}
    for row in result["rows"]:
        by_mode.setdefault(row["mode"], []).append(row)
    for rows in by_mode.values():
        walls = [r["wall_s"] for r in rows]
        what = rows[0].get("demonstrations") or OLD_MODES[rows[0]["mode"]]
        lines.append(f"| all | {what} | {sum(walls):.0f} (max {max(walls):.0f}) | | | | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="full,grading",
                        help=f"comma-separated, of {', '.join(MODES)} (default full,grading)")
    parser.add_argument("--notebooks", nargs="*", help="notebook prefixes (01 02 ...); default all")
    parser.add_argument("--cold", action="store_true",
                        help="empty compiler caches for every run, as grade-class gives each student")
    parser.add_argument("--label", default="", help="a name for this run, in its file name (before, after, ...)")
    parser.add_argument("--note", default="", help="a sentence saved with the run (what was measured, against what)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes takes {', '.join(MODES)}, not {', '.join(unknown) or 'nothing'}")
    if args.label and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", args.label):
        parser.error(f"--label {args.label!r}: lower-case letters, digits and dashes, as in a file name")
    paths = notebooks(args.notebooks)
    if not paths:
        parser.error(f"no solution notebook matches {args.notebooks}")
    if not needs_gpu("grading"):
        return 2

    prof = device.profile()
    partial = bool(args.notebooks) or not {"full", "grading"} <= set(modes)
    result = {**record(prof), "partial": partial, "label": args.label, "cold": args.cold, "rows": []}
    if args.note:
        result["note"] = args.note
    label = f"-{args.label}" if args.label else ""
    stem = args.out / f"grading-{slug(prof.name)}{label}{'-partial' if partial else ''}"
    if args.cold:  # as grade-class does before its first student: once per machine, outside the timed runs
        for path in paths:
            said = compile_cache.prime(path.stem)
            if said:
                print(said, flush=True)
    todo = [(p, m) for p in paths for m in modes]
    for path, mode in tqdm(todo, desc="grading notebooks"):
        row = grade_once(path, mode, cold=args.cold)
        result["rows"].append(row)
        print(f"{row['notebook']} {mode}: {row['wall_s']:.1f} s (cells {row['cells_s']:.1f}, grading "
              f"{row['grading_s']:.1f}; {json.dumps(row['grades'])}; slowest cells {row['slowest_cells']}; "
              f"{len(row['skipped_cells'])} demonstrations skipped) passed={row['passed']}", flush=True)
        # Saved after every notebook: a run stopped part way keeps what it measured.
        save(result, stem.with_suffix(".json"))
    rows = result["rows"]
    print(markdown(result))
    print(f"saved {stem}.json")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
