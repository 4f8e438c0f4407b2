"""Where a cold check's seconds go: each solution notebook through the checker's child under cProfile, in a fresh
process with empty caches (as bench.coldstart runs it), and the grader's own functions ranked by the time spent
inside them and below.

    python -m bench.grading_profile [--only 07 05] [--out DIR] [--top 40]

Writes, per notebook, NOTEBOOK.prof (pstats; `python -m pstats` opens it) and NOTEBOOK-profile.txt (the top
functions by cumulative time, then those of autograder/ alone), and grading-profile-<gpu>.json: wall seconds,
the seconds of every cell and exercise, and the autograder functions' cumulative seconds. cProfile slows Python
by a few tens of percent and leaves GPU time as it is: read the ranks, not the absolute figures.
"""

from __future__ import annotations

import argparse
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.measure import device
from bench.coldstart import fresh_env, installed
from bench.common import RESULTS, needs_gpu, record, save, slug
from bench.grading import notebooks as solution_notebooks

RESULTS = RESULTS / "grading"
OURS = ("autograder/", "kernels/")
# The checker's child, profiled: it leaves through os._exit (see autograder.checker.execute), which would lose
# what `python -m cProfile` writes at exit, so the profile is written before that.
_CHILD = """
import cProfile, os, sys
from autograder.checker import execute
profiler = cProfile.Profile()
profiler.enable()
try:
    code = execute.main(sys.argv[2:])
finally:
    profiler.disable()
    profiler.dump_stats(sys.argv[1])
sys.stdout.flush()
os._exit(code)
"""


def ranked(prof: Path, top: int) -> tuple[str, list[dict]]:
    """The profile's text (top functions overall and of the grader's own) and the grader's rows as data."""
    text = io.StringIO()
    stats = pstats.Stats(str(prof), stream=text)
    stats.sort_stats("cumulative").print_stats(top)
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        if any(part in file for part in OURS):
            where = file[file.rfind("autograder/") if "autograder/" in file else file.rfind("kernels/"):]
            rows.append({"function": f"{where}:{line}({name})", "calls": calls, "self_s": round(tottime, 2),
                         "cumulative_s": round(cumtime, 2)})
    rows.sort(key=lambda r: -r["cumulative_s"])
    text.write("\n== autograder/ and kernels/ by cumulative seconds\n")
    text.writelines(f"{r['cumulative_s']:9.2f} {r['self_s']:8.2f} {r['calls']:8d}  {r['function']}\n"
                    for r in rows[:top])
    return text.getvalue(), rows[:top]


def profile(path: Path, out: Path, top: int, machine: dict | None = None) -> dict:
    """One cold check of a notebook, profiled: its row."""
    with tempfile.TemporaryDirectory(prefix="grading-profile-") as tmp:
        env = dict(fresh_env(Path(tmp), "0", machine), MPLBACKEND="Agg", FUSION_COURSE_SMALL_DEMOS="1")
        prof, result = out / f"{path.stem}.prof", Path(tmp) / "result.json"
        cmd = [sys.executable, "-c", _CHILD, str(prof), str(path.resolve()), str(result)]
        started = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        (out / f"{path.stem}.log").write_text(p.stdout + p.stderr)
        if p.returncode != 0 or not result.exists() or not prof.exists():
            return {"notebook": path.stem, "wall_s": round(wall, 1), "error": (p.stdout + p.stderr)[-600:]}
        data = json.loads(result.read_text())
    text, rows = ranked(prof, top)
    (out / f"{path.stem}-profile.txt").write_text(text)
    graded = [line for line in p.stdout.splitlines() if line.startswith("[grade]") and " done in " in line]
    return {"notebook": path.stem, "wall_s": round(wall, 1),
            "cells_s": round(sum(t for _, t in data.get("cell_seconds", [])), 2),
            "slowest_cells": sorted(data.get("cell_seconds", []), key=lambda c: -c[1])[:5],
            "exercises": graded, "grader_functions": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="notebooks by number prefix (default: all)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for the profiles and the JSON")
    ap.add_argument("--top", type=int, default=40, help="functions listed per notebook")
    ap.add_argument("--as-installed", action="store_true",
                    help="keep Python's bytecode and matplotlib's font list, as bench.coldstart does")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error(f"--top {args.top}: expected a positive number of functions")
    if not needs_gpu("grading_profile"):
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows, head = [], None
    machine_dir = tempfile.TemporaryDirectory(prefix="grading-profile-machine-") if args.as_installed else None
    machine = installed(Path(machine_dir.name)) if machine_dir else None
    for path in solution_notebooks(args.only):
        row = profile(path, args.out, args.top, machine)
        rows.append(row)
        print(f"{row['notebook']}: {row['wall_s']} s" + (f" (failed: {row['error'][-200:]})" if "error" in row else
                                                         f", cells {row['cells_s']} s"), flush=True)
        for line in row.get("exercises", []):
            print("   ", line, flush=True)
        if head is None:  # the peaks measured after the first cold run, not before it: this process warms the GPU
            head = record(device.profile())
        save({**head, "label": "cold, under cProfile" + (", as installed" if machine else ""), "rows": rows},
             args.out / f"grading-profile-{slug(head['device']['name'])}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
