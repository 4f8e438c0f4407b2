"""Cold-start headroom: every reference solution graded N times, each time in a fresh process with empty Triton,
Inductor, CUDA and course caches (the device's peaks measured again too), as a student's first check on a freshly
started machine sees it.

    python -m bench.coldstart [--runs 10] [--only 02 06] [--gpus all | 0,2] [--out DIR]
    python -m bench.coldstart --exercises [--only 06.fake_quant] [--shape EXERCISE=D1,D2,...] [--label L]
    python -m bench.coldstart --table FILE.json      (no GPU: the table of a saved run)

By default a run is one solution notebook through the checker (`python -m autograder check`: every cell, then
every exercise graded on every criterion), so each run also gives the notebook's grading seconds, cold. With
--exercises a run is one exercise's performance criterion alone, on its reference kernel (faster; --shape times
it at another benchmark shape, to explore). The runs are spread over the GPUs named (one grading per GPU at a
time: two on one GPU halve each other's bandwidth), longest first, and interleaved: run 1 of everything, then
run 2, ... so that one exercise's runs meet the machine at different moments. For every exercise and bar (each fraction of a peak, each speed-up over eager, per benchmark
shape where there are several): min, median, max and the spread max/min over the runs. A bar is safe when it
sits at most at the worst cold run divided by MARGIN; a figure whose spread is over MAX_SPREAD is a measurement to
fix before its bar moves. Saves coldstart-<gpu>[-partial].json (device, versions, date, every run's figures and
clocks); docs/benchmarks.md and tests/bench/test_coldstart.py read it.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm.auto import tqdm

from autograder import config
from autograder import specs as registry
from autograder.checker import notebook as checker
from autograder.classroom.fonts import seed_font_cache
from autograder.measure import device
from bench import headroom
from bench.coldstart_summary import INSTALLED, MARGIN, MAX_SPREAD, merge, rows_of, table
from bench.common import RESULTS, load, needs_gpu, record, save, slug
from bench.grading import notebooks as solution_notebooks

RESULTS = RESULTS / "coldstart"
TAG = "COLDSTART "  # the child's result line
BAR_SUFFIXES = ("fraction_of_peak", "fraction_of_compiled", "speedup_over_eager")
CHILD_TIMEOUT_S = 900


def solutions() -> list[tuple[str, str, object]]:
    """(exercise, what, fn) of every reference solution graded on performance, in a fixed order."""
    return [(ex_id, what, fn) for ex_id, role, what, fn in headroom.versions() if role == "solution"]


def bars(ex_id: str, figures: dict) -> dict:
    """{bar name: (figure, bar)} of one graded run: every fraction of a peak with its threshold, every speed-up
    over eager with the minimum grading.toml sets."""
    ex = registry.get(ex_id)
    _, min_speedup = headroom.thresholds(ex, config.load())
    out = {}
    for key, value in figures.items():
        if not isinstance(value, (int, float)) or not key.endswith(BAR_SUFFIXES):
            continue
        part = key[: -len(next(s for s in BAR_SUFFIXES if key.endswith(s)))]
        if key.endswith("speedup_over_eager"):
            out[key] = (float(value), float(min_speedup))
        elif isinstance(figures.get(f"{part}threshold"), (int, float)):
            out[key] = (float(value), float(figures[f"{part}threshold"]))
    return out


def bar_now(ex_id: str, name: str, then: float) -> float:
    """The bar that today's code sets for one figure of a cold run (then: the bar when it was measured, kept for
    figures whose bar lives in the criterion, such as a decode shape's)."""
    ex = registry.get(ex_id)
    fraction, min_speedup = headroom.thresholds(ex, config.load())
    if name.endswith("speedup_over_eager"):
        return float(min_speedup)
    return float(fraction) if name in ("fraction_of_peak", "fraction_of_compiled") else float(then)


def clocks() -> dict:
    """The GPU's SM and memory clocks (MHz), temperature (C) and utilisation now, from NVML; {} without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "util": pynvml.nvmlDeviceGetUtilizationRates(h).gpu}
    except Exception as exc:  # noqa: BLE001 - a missing NVML is a missing column, not a failed run
        return {"error": type(exc).__name__}


def child(index: int, shape: tuple | None) -> int:
    """One cold grading, in this fresh process: prints TAG + JSON."""
    ex_id, what, fn = solutions()[index]
    before = clocks()
    started = time.perf_counter()
    r = headroom._grade(ex_id, fn, shape)
    seconds = time.perf_counter() - started
    figures = {k: v for k, v in r.figures.items() if isinstance(v, (int, float, str, bool)) or v is None}
    print(TAG + json.dumps({"exercise": ex_id, "what": what, "status": r.status, "seconds": round(seconds, 2),
                            "message": r.message.splitlines()[0][:300] if r.message else "",
                            "bars": bars(ex_id, r.figures), "figures": figures,
                            "clocks_before": before, "clocks_after": clocks()}), flush=True)
    return 0


def notebooks(only: list[str] | None) -> list[Path]:
    """The solution notebooks, by number prefix."""
    return solution_notebooks(only)


def child_notebook(path: Path) -> int:
    """One cold check of a solution notebook, in this fresh process: prints TAG + JSON per exercise."""
    before = clocks()
    started = time.perf_counter()
    result = checker.run(path)
    seconds = time.perf_counter() - started
    exercises = []
    for report in result["reports"]:
        criteria = {c.name: c.status for c in report.results}
        perf = next((c for c in report.results if c.name == "performance"), None)
        failed = [f"{c.name}: {c.message.splitlines()[0][:200]}" for c in report.results if c.status == "failed"]
        exercises.append({"exercise": report.exercise, "criteria": criteria, "failed": failed,
                          "status": perf.status if perf else "not graded on performance",
                          "bars": bars(report.exercise, perf.figures) if perf else {},
                          "seconds": sum(c.seconds or 0 for c in report.results),
                          "criterion_seconds": {c.name: round(c.seconds, 2) for c in report.results
                                                if c.seconds is not None}})
    slowest = sorted(result.get("cell_seconds", []), key=lambda cell: -cell[1])[:8]
    print(TAG + json.dumps({"notebook": path.stem, "seconds": round(seconds, 2), "passed": checker.passed(result),
                            "cell_errors": [e["error"][:200] for e in result["cell_errors"]],
                            "cells_s": round(sum(t for _, t in result.get("cell_seconds", [])), 2),
                            "slowest_cells": slowest,
                            "exercises": exercises, "clocks_before": before, "clocks_after": clocks()}), flush=True)
    return 0


def installed(folder: Path) -> dict:
    """What a machine set up for the course holds before any grading, as variables for every cold run: Python's
    bytecode (pip writes it at install; a package folder without it, as on some GPU images, makes every process
    compile a thousand of torch's modules again: 7 s of a cold check of 07) and matplotlib's font list (built at
    the first plot; 12 s when every run scans the machine's fonts again, which grade-class never does:
    classroom.process.seed_font_cache). Neither is a grading cache: Triton's, Inductor's, CUDA's and the
    course's stay empty for every run (fresh_env)."""
    env = {"PYTHONPYCACHEPREFIX": str(folder / "bytecode"), "MPLCONFIGDIR": str(folder / "matplotlib")}
    seed_font_cache(folder / "matplotlib")
    warm = ("import torch, triton, matplotlib.pyplot, torch._dynamo, torch._inductor.compile_fx, "
            "torch._higher_order_ops.triton_kernel_wrap, autograder, kernels; "
            "from autograder import specs; specs.all_exercises()")
    # Written here even where PYTHONDONTWRITEBYTECODE is set (an empty value unsets it); the runs only read it.
    subprocess.run([sys.executable, "-c", warm], env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "",
                                                      "PYTHONDONTWRITEBYTECODE": ""},
                   capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    return env


def fresh_env(folder: Path, gpu: str, machine: dict | None = None) -> dict:
    """The environment of one cold run: this GPU only, every cache empty and private to the run (but what the
    machine's set-up holds, `machine`: see installed())."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, PYTHONUNBUFFERED="1", **(machine or {}))
    for var, name in {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "CUDA_CACHE_PATH": "nv",
                      "FUSION_COURSE_CACHE": "course", "XDG_CACHE_HOME": "xdg"}.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        env[var] = str(folder / name)
    return env


def run_one(args: list[str], gpu: str, machine: dict | None = None) -> dict:
    """One cold run in a fresh process on one GPU: its result line, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="coldstart-") as tmp:
        cmd = [sys.executable, "-m", "bench.coldstart", *args]
        started = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=fresh_env(Path(tmp), gpu, machine), capture_output=True, text=True,
                               timeout=CHILD_TIMEOUT_S)
            out, err, code = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as exc:
            out, err, code = exc.stdout or "", f"timed out after {CHILD_TIMEOUT_S} s", -9
            out = out.decode() if isinstance(out, bytes) else out
        wall = time.perf_counter() - started
    lines = [line for line in out.splitlines() if line.startswith(TAG)]
    if not lines:
        tail = (err or out).strip().splitlines()
        return {"status": "crashed", "gpu": gpu, "wall_s": round(wall, 1), "returncode": code,
                "message": tail[-1][:300] if tail else "no output", "bars": {}, "exercises": []}
    return {**json.loads(lines[-1][len(TAG):]), "gpu": gpu, "wall_s": round(wall, 1)}


def jobs_of(runs: int, notebook_mode: bool, only: list[str] | None, shapes: dict) -> tuple[list, dict]:
    """(jobs, rows): jobs (round, key, child arguments) longest first within a round; rows by key."""
    if notebook_mode:
        paths = notebooks(only)
        order = {"07": 0, "06": 1, "05": 2, "02": 3, "03": 4, "04": 5, "08": 6, "01": 7}  # longest first
        paths.sort(key=lambda p: order.get(p.stem[:2], 9))
        units = [(p.stem, ["--child-notebook", str(p)]) for p in paths]
    else:
        units = []
        for i, (ex_id, what, _) in enumerate(solutions()):
            if only and not any(ex_id.startswith(o) for o in only):
                continue
            shape = shapes.get(ex_id)
            units.append((f"{ex_id} ({what})", ["--child", str(i)]
                          + (["--child-shape", ",".join(map(str, shape))] if shape else [])))
    jobs = [(r, key, args) for r in range(runs) for key, args in units]
    return jobs, {key: [] for key, _ in units}


def measure(runs: int, gpus: list[str], notebook_mode: bool, only: list[str] | None, shapes: dict,
            deadline_s: float | None = None, checkpoint=None, machine: dict | None = None,
            per_gpu: int = 1) -> list[dict]:
    """Every job on the first free slot, per_gpu slots a GPU; past deadline_s no new job starts (the runs so far
    are kept). checkpoint(rows), if given, is called after every run, so that a run cut off from outside loses only
    the gradings in flight."""
    job_list, results = jobs_of(runs, notebook_mode, only, shapes)
    stop_at = time.monotonic() + deadline_s if deadline_s else None
    jobs: queue.Queue = queue.Queue()
    for job in job_list:
        jobs.put(job)
    lock = threading.Lock()
    bar = tqdm(total=len(job_list), desc=f"cold gradings on {len(gpus)} GPU(s)"
               + (f", {per_gpu} at once on each" if per_gpu > 1 else ""))

    def worker(gpu: str):
        while stop_at is None or time.monotonic() < stop_at:
            try:
                r, key, args = jobs.get_nowait()
            except queue.Empty:
                return
            result = run_one(args, gpu, machine)
            with lock:
                results[key].append({"round": r, **result, **({"machine": INSTALLED} if machine else {})})
                bar.update()
                tqdm.write(f"[gpu {gpu}] {key} run {r + 1}: {describe(result)}")
                if checkpoint is not None:
                    checkpoint(rows_of({k: list(v) for k, v in results.items()}, notebook_mode))

    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for _ in range(per_gpu) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    return rows_of(results, notebook_mode)


def describe(result: dict) -> str:
    parts = result.get("exercises") or [result]
    figs = "; ".join(f"{p.get('exercise', '?')} {p.get('status', '?')} "
                     + ",".join(f"{v[0]:.2f}" for v in p.get("bars", {}).values()) for p in parts)
    return f"{figs} ({result.get('wall_s', 0):.0f} s)"


def gpu_list(text: str) -> list[str]:
    import torch

    count = torch.cuda.device_count()
    if text == "all":
        return [str(i) for i in range(count)]
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    bad = [g for g in gpus if not g.isdigit() or int(g) >= count]
    if bad or not gpus:
        raise SystemExit(f"--gpus {text!r}: this machine has GPUs 0..{count - 1}")
    return gpus


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="cold gradings per solution (default 10)")
    parser.add_argument("--gpus", default="all", help="GPUs to spread the runs over: all, or indices 0,1,...")
    parser.add_argument("--per-gpu", type=int, default=1, metavar="N",
                        help="gradings at once on each GPU (default 1; 2 is a GPU shared by two students, whose "
                             "performance checks take turns: the shared case, saved apart with the label shared)")
    parser.add_argument("--exercises", action="store_true",
                        help="grade each solution's performance alone instead of whole notebooks")
    parser.add_argument("--only", nargs="*", help="notebooks (02) or, with --exercises, exercises by id prefix")
    parser.add_argument("--shape", action="append", default=[], metavar="EXERCISE=D1,D2,...",
                        help="time an exercise at another benchmark shape (exploring; saved as -partial)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument("--deadline-s", type=float,
                        help="start no new run after this many seconds; the runs so far are saved")
    parser.add_argument("--label", default="", help="a word for the file name of an exploring run")
    parser.add_argument("--table", type=Path, help="print the table of a saved run and stop")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="no GPU needed: one device's result from several saved runs, written to --out")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-shape", help=argparse.SUPPRESS)
    parser.add_argument("--child-notebook", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_notebook is not None:
        return child_notebook(args.child_notebook)
    if args.child is not None:
        shape = tuple(int(d) for d in args.child_shape.split(",")) if args.child_shape else None
        return child(args.child, shape)
    if args.merge:
        missing = [str(p) for p in args.merge if not p.is_file()]
        if missing:
            parser.error(f"--merge: no such file: {', '.join(missing)}")
        merged = merge([load(p) for p in args.merge], bar_now)
        path = save(merged, args.out / f"coldstart-{slug(merged['device']['name'])}.json")
        print(table(merged))
        print(f"saved {path}")
        return 0 if all(row["summary"]["ok"] for row in merged["rows"]) else 1
    if args.table:
        if not args.table.is_file():
            parser.error(f"--table: no such file: {args.table}")
        print(table(load(args.table)))
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not 1 <= args.per_gpu <= 8:
        parser.error(f"--per-gpu {args.per_gpu}: between 1 and 8 gradings at once on a GPU")
    if args.per_gpu > 1 and not args.label:
        args.label = "shared"  # never merged into the cold-start table by mistake: its file is named apart
    shapes = headroom.parse_shapes(parser, args.shape)
    if shapes and not args.exercises:
        parser.error("--shape times one exercise alone: add --exercises")
    if args.label and not args.label.replace("-", "").isalnum():
        parser.error(f"--label {args.label!r}: letters, digits and dashes")
    if not needs_gpu("coldstart"):
        return 2

    gpus = gpu_list(args.gpus)
    started = time.perf_counter()
    head = {**record(device.profile()), "runs": args.runs, "deadline_s": args.deadline_s, "gpus": gpus,
            "per_gpu": args.per_gpu,
            "only": args.only or [], "unit": "exercise" if args.exercises else "notebook",
            "shapes": {k: list(v) for k, v in shapes.items()}, "margin": MARGIN, "max_spread": MAX_SPREAD,
            "machine": f"{INSTALLED}: Python's bytecode and matplotlib's font list kept (installed()); Triton, "
                       "Inductor, CUDA and course caches empty per run"}
    suffix = (f"-{args.label}" if args.label else "") + ("-exercises" if args.exercises else "")
    suffix += "-partial" if args.only or shapes else ""
    name = f"coldstart-{slug(head['device']['name'])}{suffix}"

    def checkpoint(rows_so_far):  # the runs so far, in a file --merge takes, until the whole run is saved
        tmp = save({**head, "wall_s": round(time.perf_counter() - started, 1), "rows": rows_so_far},
                   args.out / f".{name}-inprogress.tmp")
        os.replace(tmp, args.out / f"{name}-inprogress.json")  # whole or not at all, if cut off mid-write

    with tempfile.TemporaryDirectory(prefix="coldstart-machine-") as machine_dir:
        machine = installed(Path(machine_dir))
        rows = measure(args.runs, gpus, not args.exercises, args.only, shapes, args.deadline_s, checkpoint,
                       machine, args.per_gpu)
    result = {**head, "wall_s": round(time.perf_counter() - started, 1), "rows": rows}
    path = save(result, args.out / f"{name}.json")
    (args.out / f"{name}-inprogress.json").unlink(missing_ok=True)
    print(table(result))
    print(f"saved {path}")
    return 0 if all(row["summary"]["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
