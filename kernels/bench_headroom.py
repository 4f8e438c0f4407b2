"""How far each reference solution clears the grader's performance threshold, and whether a correct but unfused
or naive version of the exercise fails it: the grader's own performance criterion, run ROUNDS times in a row.

    python -m kernels.bench_headroom [--rounds 5] [--out kernels/results]

A solution should pass every round with at least HEADROOM of margin on both of its bars (its fraction of the
measured peak over the threshold, and its speed-up over eager PyTorch over the minimum); each naive version
should fail every round. Saves kernels/results/headroom/headroom-<gpu>.{json,md} (device, versions, date; -partial with --only), which
`python -m kernels.bench --readme` quotes in the README.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import platform
import statistics
import sys
from pathlib import Path

from tqdm.auto import tqdm

RESULTS = Path(__file__).resolve().parent / "results" / "headroom"
HEADROOM = 1.25


def versions() -> list[tuple[str, str, str, object]]:
    """(exercise, "solution" | "naive", what it is, fn) for every exercise graded on performance."""
    import kernels  # noqa: F401  (device set-up)
    from autograder import registry
    from kernels import multi_tensor_adamw, rmsnorm_variants

    rows = []
    for ex in registry.all_exercises():
        if "performance" not in getattr(ex, "criteria", ()):
            continue
        op = ex.reference.__module__.rsplit(".", 1)[-1]
        if ex.id == "02.rmsnorm_repair":  # the repaired kernel is the two-pass one with float32 sums
            solution = rmsnorm_variants.rmsnorm_two_pass
        else:
            solution = getattr(importlib.import_module(f"kernels.{op}"), ex.function)
        where = solution.__module__.replace(".", "/")
        rows.append((ex.id, "solution", f"{where}.py: {solution.__name__}", solution))
        hopper = getattr(importlib.import_module(f"kernels.{op}"), f"{ex.function}_tma", None)
        if hopper is not None:  # the optional Hopper exercise; it falls back to the pointer kernel elsewhere
            rows.append((ex.id, "solution", f"{where}.py: {hopper.__name__} (TMA, Hopper)", hopper))
        rows.append((ex.id, "naive", "unfused eager PyTorch", ex.eager))
        if ex.id == "03.adamw_step":
            rows.append((ex.id, "naive", "one Triton launch per tensor", multi_tensor_adamw.adamw_step_per_tensor))
    return rows


def measure(rounds: int, only: list[str] | None = None, echo=print) -> list[dict]:
    from autograder import check

    rows = []
    todo = [v for v in versions() if not only or any(v[0].startswith(o) for o in only)]
    with tqdm(total=rounds * len(todo), desc="grading performance") as bar:
        for ex_id, role, what, fn in todo:
            runs = []
            for _ in range(rounds):
                r = check(ex_id, fn, criteria=["performance"])["performance"]
                f = r.figures
                runs.append({"status": r.status, "fraction": f.get("fraction_of_peak"), "speedup": f.get("speedup_over_eager"),
                             "threshold": f.get("threshold"), "message": r.message.splitlines()[0][:200]})
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
        out.update(threshold=threshold, min_speedup=min_speedup, fraction_min=min(fracs),
                   fraction_median=statistics.median(fracs), speedup_min=min(speedups),
                   margin=min(min(fracs) / threshold, min(speedups) / min_speedup))
    if row["role"] == "solution":
        out["ok"] = passed == out["rounds"] and out.get("margin", 0) >= HEADROOM
    else:
        out["ok"] = passed == 0
    return out


def markdown(result: dict) -> str:
    d = result["device"]
    only = f", only {', '.join(result['only'])}" if result.get("only") else ""
    lines = [f"### Grading headroom: {d['name']} ({result['date']}, torch {result['torch']}, triton {result['triton']}"
             f"{only})",
             "",
             f"The grader's performance criterion, {result['rounds']} runs in a row per version. A solution needs every "
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="runs per version (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="folder for the results (default kernels/results/headroom)")
    parser.add_argument("--only", nargs="*", help="exercises to run, by id prefix (02., 04.swiglu); default all")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    import torch
    import triton

    from autograder import config, device, registry, runtime
    from kernels.bench import slug

    if not runtime.has_gpu():
        print("kernels.bench_headroom needs a CUDA GPU: the performance criterion is not measured without one.",
              file=sys.stderr)
        return 2
    prof = device.profile()
    cfg = config.load()
    rows = measure(args.rounds, args.only, echo=lambda line: print(line, flush=True))
    min_speedups = {ex.id: cfg.perf_setting(ex.id, "min_speedup_over_eager", 1.0) for ex in registry.all_exercises()}
    for row in rows:
        row["summary"] = summarise(row, min_speedups)
    result = {"date": dt.date.today().isoformat(), "python": platform.python_version(), "torch": torch.__version__,
              "triton": triton.__version__, "device": dataclasses.asdict(prof), "rounds": args.rounds,
              "only": args.only or [], "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"headroom-{slug(prof.name)}{'-partial' if args.only else ''}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"saved {stem}.json, .md")
    return 0 if all(row["summary"]["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
