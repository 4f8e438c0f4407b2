"""How far each reference solution clears the grader's performance threshold, and whether a correct but unfused
or naive version of the exercise fails it: the grader's own performance criterion, run ROUNDS times in a row.

    python -m bench.headroom [--rounds 5] [--out bench/results]

A solution should pass every round with at least HEADROOM of margin on both of its bars (its fraction of the
measured peak over the threshold, and its speed-up over eager PyTorch over the minimum); each naive version
should fail every round. Saves bench/results/headroom/headroom-<gpu>.json (device, versions, date;
-partial with --only); `python -m bench.report` puts the merged tables in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from tqdm.auto import tqdm

from autograder import check, config
from autograder import specs as registry
from autograder.criteria import compiled
from autograder.criteria import performance
from autograder.measure import device
from autograder.specs.exercise import Shape, TrainingExercise
from kernels import multi_tensor_adamw, rmsnorm_variants
from bench.common import RESULTS, needs_gpu, record, save, slug
from kernels.row_argmax_tuned import row_argmax_at

RESULTS = RESULTS / "headroom"
HEADROOM = 1.25


def versions() -> list[tuple[str, str, str, object]]:
    """(exercise, "solution" | "naive", what it is, fn) for every exercise graded on performance."""

    rows = []
    for ex in registry.all_exercises():
        if "performance" not in getattr(ex, "criteria", ()):
            continue
        # The module of kernels/ that holds its reference solution: the spec's kernel=, else the function's name.
        op = ex.kernel or ex.function
        if importlib.util.find_spec(f"kernels.{op}") is None:
            raise SystemExit(f"{ex.id} is graded on performance but no kernels/{op}.py holds its solution")
        if ex.id == "02.rmsnorm_repair":  # the repaired kernel is the two-pass one with float32 sums
            solution = rmsnorm_variants.rmsnorm_two_pass
        else:
            module = {"06.row_argmax": "row_argmax_tuned"}.get(ex.id, op)  # the given kernel's launcher is the answer
            solution = getattr(importlib.import_module(f"kernels.{module}"), ex.function)
        where = solution.__module__.replace(".", "/")
        rows.append((ex.id, "solution", f"{where}.py: {solution.__name__}", solution))
        hopper = getattr(importlib.import_module(f"kernels.{op}"), f"{ex.function}_tma", None)
        if hopper is not None:  # the optional Hopper exercise; it falls back to the pointer kernel elsewhere
            rows.append((ex.id, "solution", f"{where}.py: {hopper.__name__} (TMA, Hopper)", hopper))
        if ex.id == "06.row_argmax":  # torch.argmax is the yardstick itself: the naive answer is one setting
            rows.append((ex.id, "naive", "one launch setting for both shapes (1024 columns, 4 warps)",
                         row_argmax_at))
        elif getattr(ex, "timed", None) is not None:  # graded compiled: the version handed out to repair
            rows.append((ex.id, "naive", "the broken version (graded compiled, as every submission)", ex.timed.eager))
        else:
            rows.append((ex.id, "naive", "unfused eager PyTorch", ex.eager))
        if ex.id == "03.adamw_step":
            rows.append((ex.id, "naive", "one Triton launch per tensor", multi_tensor_adamw.adamw_step_per_tensor))
    return rows


def _figures(f: dict) -> tuple:
    """(fraction of peak, speed-up, threshold) of a result; graded at several shapes, the worst shape's."""
    if "fraction_of_compiled" in f:  # the training step: its peak is torch.compile's step, timed in turns
        return f["fraction_of_compiled"], f.get("speedup_over_eager"), f.get("threshold")
    if "fraction_of_peak" in f or not any(k.endswith("_fraction_of_peak") for k in f):
        return f.get("fraction_of_peak"), f.get("speedup_over_eager"), f.get("threshold")
    parts = [k[: -len("_fraction_of_peak")] for k in f if k.endswith("_fraction_of_peak")]
    worst = min(parts, key=lambda p: f[f"{p}_fraction_of_peak"] / f[f"{p}_threshold"])
    speedups = [f.get(f"{p}_speedup_over_eager") for p in parts]
    return (f[f"{worst}_fraction_of_peak"], min(s for s in speedups if s is not None) if any(speedups) else None,
            f[f"{worst}_threshold"])


def _grade(ex_id: str, fn, shape: tuple | None):
    """The performance result, as check() grades it; at another benchmark shape where one is given."""

    if shape is None:
        return check(ex_id, fn, criteria=["performance"])["performance"]
    ex = registry.get(ex_id)
    if getattr(ex, "timed", None) is not None:  # graded compiled: the shape is its timed kernel exercise's
        ex = dataclasses.replace(ex, timed=dataclasses.replace(ex.timed, perf_shape=Shape(tuple(shape))))
        return compiled.compiled_performance(ex, fn, config.load())
    ex = dataclasses.replace(ex, perf_shape=Shape(tuple(shape)))
    return performance.performance(ex, fn, config.load())


def measure(rounds: int, only: list[str] | None = None, echo=print, naive_rounds: int | None = None,
            shapes: dict | None = None) -> list[dict]:
    rows = []
    todo = [v for v in versions() if not only or any(v[0].startswith(o) for o in only)]
    naive_rounds = rounds if naive_rounds is None else naive_rounds
    total = sum(rounds if role == "solution" else naive_rounds for _, role, _, _ in todo)
    with tqdm(total=total, desc="grading performance") as bar:
        for ex_id, role, what, fn in todo:
            runs = []
            for _ in range(rounds if role == "solution" else naive_rounds):
                r = _grade(ex_id, fn, (shapes or {}).get(ex_id))
                fraction, speedup, threshold = _figures(r.figures)
                runs.append({"status": r.status, "fraction": fraction, "speedup": speedup, "threshold": threshold,
                             "spilled": any(k.endswith("spilled_kernels") for k in r.figures),
                             "message": r.message.splitlines()[0][:200]})
                bar.update()
            rows.append({"exercise": ex_id, "role": role, "what": what, "runs": runs})
            echo(f"{ex_id} {role} ({what}): " + ", ".join(
                f"{r['status']} {r['fraction'] or 0:.2f}/{r['threshold'] or 0:.2f} {r['speedup'] or 0:.2f}x" for r in runs))
    return rows


def summarise(row: dict, min_speedups: dict) -> dict:
    runs = [r for r in row["runs"] if r["fraction"] is not None]
    passed = sum(r["status"] == "passed" for r in row["runs"])
    out = {"passed": passed, "rounds": len(row["runs"])}
    if runs:
        threshold = runs[0]["threshold"]
        fracs, speedups = [r["fraction"] for r in runs], [r["speedup"] for r in runs]
        min_speedup = min_speedups[row["exercise"]]
        margins = [min(fracs) / threshold] + ([min(speedups) / min_speedup] if min_speedup > 0 else [])
        out.update(threshold=threshold, min_speedup=min_speedup, fraction_min=min(fracs),
                   fraction_median=statistics.median(fracs), speedup_min=min(speedups), margin=min(margins))
    if row["role"] == "solution":
        out["ok"] = passed == out["rounds"] and out.get("margin", 0) >= HEADROOM
    else:
        out["ok"] = passed == 0
    return out


def markdown(result: dict) -> str:
    d = result["device"]
    only = f", only {', '.join(result['only'])}" if result.get("only") else ""
    shapes = "".join(f", {k} timed at {tuple(v)}" for k, v in result.get("shapes", {}).items())
    lines = [f"### Grading headroom: {d['name']} ({result['date']}, torch {result['torch']}, triton {result['triton']}"
             f"{only}{shapes})",
             *([f"Merged from {len(result['merged_from'])} runs ({', '.join(sorted({r.get('measured', result['date']) for r in result['rows']}))}; "
                f"{', '.join(sorted({r['exercise'].split('.')[0] for r in result['rows']}))} notebooks); "
                "every run scored against the thresholds of this commit's grading.toml from the figures it measured."]
               if result.get("merged_from") else []),
             "",
             f"The grader's performance criterion, {result['rounds']} runs in a row per solution "
             f"({result.get('naive_rounds', result['rounds'])} per naive version). A solution needs every "
             f"run passed with both bars cleared by {HEADROOM:.2f}x (fraction of the measured peak over the "
             "threshold, speed-up over eager over the minimum); a naive version needs every run failed.", "",
             "| exercise | version | passed | fraction of peak (min / median) | threshold | speed-up (min) | needs | "
             "margin | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        s = row["summary"]
        if "threshold" not in s:
            lines.append(f"| {row['exercise']} | {row['role']}: {row['what']} | {s['passed']}/{s['rounds']} | "
                         f"not timed: {row['runs'][0]['message']} | | | | | {'ok' if s['ok'] else 'NOT OK'} |")
            continue
        lines.append(
            f"| {row['exercise']} | {row['role']}: {row['what']} | {s['passed']}/{s['rounds']} | "
            f"{s['fraction_min']:.2f} / {s['fraction_median']:.2f} | {s['threshold']:.2f} | {s['speedup_min']:.2f}x | "
            f"> {s['min_speedup']:.2f}x | {s['margin']:.2f} | {'ok' if s['ok'] else 'NOT OK'} |")
    return "\n".join(lines) + "\n"


def rescore(run: dict, threshold: float, min_speedup: float) -> dict:
    """A run's verdict against the thresholds of this commit's grading.toml, from the figures it measured (the
    criterion's own rule: fraction >= threshold and speed-up > minimum). A run that was not timed stays failed."""
    if run["fraction"] is None or run["speedup"] is None or run.get("spilled"):
        return run  # not timed, or failed for its spills whatever the thresholds
    ok = run["fraction"] >= threshold and run["speedup"] > min_speedup
    return {**run, "status": "passed" if ok else "failed", "threshold": threshold}


def thresholds(ex, cfg) -> tuple[float, float]:
    """(the bar on the fraction of the peak, the minimum speed-up over eager) that grading.toml sets for ex."""

    timed = getattr(ex, "timed", None) or ex  # an exercise graded compiled is timed as its kernel exercise
    key = "min_fraction_of_compiled" if isinstance(ex, TrainingExercise) else "min_fraction_of_peak"
    return (cfg.bar(ex, key, timed.default_min_fraction),
            cfg.bar(ex, "min_speedup_over_eager", 1.0))


def merge(paths: list[Path], out: Path) -> dict:
    """One device's table from several runs (--only parts): later files replace earlier rows of the same
    version; every run scored against the current thresholds."""

    cfg = config.load()
    parts = [json.loads(p.read_text()) for p in paths]
    names = {part["device"]["name"] for part in parts}
    if len(names) != 1:
        raise SystemExit(f"--merge takes the runs of one device; these come from {sorted(names)}")
    rows: dict = {}
    for part in parts:
        for row in part["rows"]:
            ex = registry.get(row["exercise"])
            threshold, min_speedup = thresholds(ex, cfg)
            row = {**row, "runs": [rescore(r, threshold, min_speedup) for r in row["runs"]],
                   "measured": row.get("measured", part["date"])}
            row["summary"] = summarise(row, {ex.id: min_speedup})
            rows[(row["exercise"], row["role"], row["what"])] = row
    order = {ex.id: i for i, ex in enumerate(registry.all_exercises())}
    # A merged table given as a part stands for the runs it was merged from.
    sources = [name for p, part in zip(paths, parts) for name in part.get("merged_from", [p.name])]
    merged = {**parts[-1], "only": [], "shapes": {}, "merged_from": sources,
              "rounds": max(part["rounds"] for part in parts),
              "naive_rounds": min(part.get("naive_rounds", part["rounds"]) for part in parts),
              "rows": sorted(rows.values(), key=lambda r: (order[r["exercise"]], r["role"] != "solution"))}
    stem = out / f"headroom-{slug(merged['device']['name'])}"
    save(merged, stem.with_suffix(".json"))
    print(markdown(merged))
    print(f"saved {stem}.json")
    return merged


def parse_shapes(parser: argparse.ArgumentParser, items: list[str]) -> dict:
    """{exercise: dims} from --shape EXERCISE=D1,D2,... arguments, or the parser's error naming the bad one."""
    shapes = {}
    for item in items:
        ex_id, _, dims = item.partition("=")
        try:
            shapes[ex_id] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            parser.error(f"--shape {item!r}: expected EXERCISE=D1,D2,... with whole numbers")
    unknown = sorted(set(shapes) - {ex.id for ex in registry.all_exercises()})
    if unknown:
        parser.error(f"--shape names no exercise: {', '.join(unknown)}")
    return shapes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="runs per version (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="folder for the results (default bench/results/headroom)")
    parser.add_argument("--naive-rounds", type=int, default=2,
                        help="runs per naive version (default 2: it must fail every one)")
    parser.add_argument("--only", nargs="*", help="exercises to run, by id prefix (02., 04.swiglu); default all")
    parser.add_argument("--shape", action="append", default=[], metavar="EXERCISE=D1,D2,...",
                        help="time an exercise at another benchmark shape (exploring; saved as -partial)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="no GPU needed: one device's table from the JSON of several runs, scored against "
                             "this commit's thresholds")
    args = parser.parse_args(argv)
    if args.merge:
        missing = [str(p) for p in args.merge if not p.is_file()]
        if missing:
            parser.error(f"--merge: no such file: {', '.join(missing)}")
        merged = merge(args.merge, args.out)
        return 0 if all(row["summary"]["ok"] for row in merged["rows"]) else 1
    if args.rounds < 1 or args.naive_rounds < 1:
        parser.error("--rounds and --naive-rounds must be at least 1")
    shapes = parse_shapes(parser, args.shape)
    if not needs_gpu("headroom"):
        return 2

    prof = device.profile()
    cfg = config.load()
    rows = measure(args.rounds, args.only, echo=lambda line: print(line, flush=True), naive_rounds=args.naive_rounds,
                   shapes=shapes)
    min_speedups = {ex.id: cfg.bar(ex, "min_speedup_over_eager", 1.0) for ex in registry.all_exercises()}
    for row in rows:
        row["summary"] = summarise(row, min_speedups)
    result = {**record(prof), "rounds": args.rounds, "naive_rounds": args.naive_rounds, "only": args.only or [],
              "shapes": shapes, "rows": rows}
    stem = args.out / f"headroom-{slug(prof.name)}{'-partial' if args.only or shapes else ''}"
    save(result, stem.with_suffix(".json"))
    print(markdown(result))
    print(f"saved {stem}.json")
    return 0 if all(row["summary"]["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
