"""Seconds a new student's first session with notebook 01 costs the machine, in a real browser.

    python -m bench.onramp [--note TEXT] [--out bench/results/onramp]

The journey of tests/notebooks/test_browser.py (tests/browser.py: onramp), timed step by step: JupyterLab started
on a fresh copy of course/ (`make lab`), notebook 01 opened in headless Chromium with the course's kernel, the
set-up cell and the worked example run, the warm-ups 01.warmup_copy and 01.warmup_broadcast typed and graded,
01.fused_chain typed with its store's mask forgotten (the bounds check names it) and then fixed and graded. The
clock starts when the browser asks for the notebook; each step's seconds include the typing, the cells and the
grading. Two totals: from opening the notebook to the first passing kernel (01.warmup_copy) and to 01.fused_chain
passing.

A benchmark figure, not a goal: on the CPU Triton's interpreter runs every kernel, so the grading dominates. The
device profile cache is a fresh folder, as on a student's first day (on a GPU the set-up cell then measures the
GPU's peaks). The load average before and after is recorded: on a shared machine other work slows every step.
Saves onramp-<machine>[-<tag>].json: machine, versions, date and the seconds. Needs Debian's chromium and
chromium-driver (`make browser`) and selenium; exits 2 where they are missing, 1 where the journey went wrong
(the step and what its cells showed are printed, nothing is saved).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from bench.common import RESULTS, save, slug

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS / "onramp"


def machine() -> dict:
    """What ran the journey: the GPU the notebook's kernel uses, or the CPU and its cores."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        return {"name": gpu, "gpu": gpu, "cpu": cpu, "cpu_cores": cores}
    return {"name": f"CPU {cpu}, {cores} cores (Triton interpreter)", "gpu": None, "cpu": cpu, "cpu_cores": cores,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for package in ("torch", "triton", "jupyterlab", "selenium"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "?"
    browser_bin = shutil.which("chromium") or shutil.which("chromium-browser")
    run = subprocess.run([browser_bin, "--version"], capture_output=True, text=True, timeout=60, check=False)
    out["chromium"] = run.stdout.strip() or "?"
    return out


def _browser():
    """tests/browser.py, the test's helpers and the journey itself."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import browser

    return browser


def went_wrong(step: str, shown: dict[str, str]) -> str | None:
    """Why a step of the journey did not show what it should, or None."""
    browser = _browser()
    text = "\n".join(shown.values())
    if step in browser.STEPS[3:5] and f"{step} correctness: PASS" not in text:
        return f"{step} did not pass"
    if step == browser.STEPS[5] and not ("out-of-bounds" in text and "mask" in text):
        return "the forgotten mask was not diagnosed"
    if step == browser.STEPS[6]:
        failed = [g for g in browser.FUSED_GRADED if ": PASS" not in shown[g] and ": skip" not in shown[g]]
        if failed:
            return f"01.fused_chain did not pass: {', '.join(failed)}"
    return None


def journey(progress=print) -> dict:
    """Runs the journey once; returns {"lab_start_s", "rows": [{step, seconds, cumulative_s}]}."""
    browser = _browser()
    cache = os.environ.get("FUSION_COURSE_CACHE")
    with tempfile.TemporaryDirectory(prefix="onramp-") as tmp:
        os.environ["FUSION_COURSE_CACHE"] = str(Path(tmp) / "cache")  # a first day: no device profile yet
        try:
            return _timed(browser, Path(tmp), progress)
        finally:
            if cache is None:
                os.environ.pop("FUSION_COURSE_CACHE", None)
            else:
                os.environ["FUSION_COURSE_CACHE"] = cache


def _timed(browser, tmp: Path, progress) -> dict:
    started = time.perf_counter()
    with browser.student_in_lab(tmp) as student:
        lab_start = time.perf_counter() - started
        progress(f"JupyterLab and the browser started in {lab_start:.1f} s")
        rows, opened = [], time.perf_counter()
        mark = opened
        for step, shown in browser.onramp(student):
            now = time.perf_counter()
            if why := went_wrong(step, shown):
                for grade_id, text in shown.items():
                    print(f"--- {grade_id}:\n{text[-3000:]}", file=sys.stderr)
                raise RuntimeError(f"step {step!r}: {why}")
            rows.append({"step": step, "seconds": round(now - mark, 2), "cumulative_s": round(now - opened, 2)})
            progress(f"{step:<40} {now - mark:6.1f} s   ({now - opened:6.1f} s since opening the notebook)")
            mark = time.perf_counter()
    return {"lab_start_s": round(lab_start, 2), "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--note", default="", help="what else about the machine a reader should know")
    parser.add_argument("--tag", default="", help="appended to the file name (onramp-<machine>-<tag>.json)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the result")
    args = parser.parse_args(argv)
    browser = _browser()
    if why := browser.missing():
        print(f"python -m bench.onramp needs a browser: {why}", file=sys.stderr)
        return 2
    dev = machine()
    load_before = os.getloadavg()
    try:
        run = journey()
    except (RuntimeError, TimeoutError) as exc:
        print(f"the journey went wrong: {exc}", file=sys.stderr)
        return 1
    load_after = os.getloadavg()
    rows = run["rows"]
    by_step = {r["step"]: r["cumulative_s"] for r in rows}
    result = {"date": dt.date.today().isoformat(), **versions(), "part": "onramp",
              "device": {**dev, "load_average_before": [round(x, 2) for x in load_before],
                         "load_average_after": [round(x, 2) for x in load_after]},
              "note": args.note, "lab_start_s": run["lab_start_s"], "rows": rows,
              "seconds": {"open_to_first_passing_kernel": by_step[browser.STEPS[3]],
                          "open_to_fused_chain_passing": by_step[browser.STEPS[-1]]}}
    name = f"onramp-{slug(dev['gpu'] or 'cpu-' + dev['cpu'] + '-' + str(dev['cpu_cores']) + 'core')}"
    path = save(result, args.out / f"{name}{'-' + slug(args.tag) if args.tag else ''}.json")
    s = result["seconds"]
    print(f"from opening the notebook: first passing kernel after {s['open_to_first_passing_kernel']:.1f} s, "
          f"01.fused_chain passing after {s['open_to_fused_chain_passing']:.1f} s")
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
