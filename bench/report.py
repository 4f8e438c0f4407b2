"""docs/benchmarks.md, written from the committed runs in bench/results/ alone (no GPU needed).

    python -m bench.report            # write docs/benchmarks.md
    python -m bench.report --check    # exit 1 if docs/benchmarks.md is not what the runs give

The page shows the newest run of each benchmark on each device, one short table a benchmark with a column a
device, so that it reads in a few minutes: what grading a class costs, how far the reference solutions clear their
grading bars (warm and cold), the reference kernels against eager PyTorch, torch.compile and their peers, the
training kernels and the capstone, grade-class on several GPUs, Triton on Hopper. Every figure of a run is in its
JSON file; older runs are in git's history (`git log -- bench/results/`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench import budget, coldstart, coldstart_summary, grading, headroom
from bench.common import RESULTS, load, slug, versions

ROOT = RESULTS.parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
PINNED = "torch 2.13 and triton 3.7.1"

# The benchmarks shown, in the page's order: kind -> (what it measures, the command that runs it).
KINDS = {
    "headroom": ("Grading headroom, warm", "python -m bench.headroom"),
    "coldstart": ("Grading headroom, cold", "python -m bench.coldstart"),
    "suite": ("Reference kernels", "python -m bench"),
    "peers": ("The course against its peers", "python -m bench.peers"),
    "compiler": ("Compiler-driven fusion", "python -m bench.compiler"),
    "training": ("Training kernels", "python -m bench.training"),
    "capstone": ("The capstone's training step", "python -m bench.capstone"),
    "scale": ("grade-class on several GPUs", "python -m bench.scale"),
    "hopper": ("Triton on Hopper", "python -m bench.hopper"),
    "yardstick": ("07.decoder's yardstick, compiled whole or a layer at a time", "python -m bench.yardstick"),
}


def kind(path: Path) -> str | None:
    """What a committed run is, from where it lies; None for runs the page leaves to their files: the parts a
    merged table stands for, exploratory runs, partial cold-start runs, the grading runs (the class's cost reads
    those, notebook by notebook)."""
    parts = path.relative_to(RESULTS).parts
    if len(parts) == 1 or parts[0] == "runs":
        return "suite"
    if parts[0] == "training":
        return "capstone" if path.stem.startswith("capstone") else "training"
    if parts[0] in ("headroom", "coldstart"):
        return parts[0] if len(parts) == 2 and not path.stem.endswith("-partial") else None
    if parts[0] == "hopper" and path.stem.startswith(("gluon-", "ws-repro-")):
        return None  # bench.gluon_attention's and bench.ws_repro's runs: their own layouts, read from their files
    return parts[0] if parts[0] in KINDS else None


def runs() -> dict[str, list[tuple[str, str, dict]]]:
    """device name -> [(kind, file relative to the results, run)] of every committed run, in file order (kind
    "grading" for the checker's timings)."""
    out: dict = {}
    for path in sorted(RESULTS.rglob("*.json")):
        k = "grading" if path.relative_to(RESULTS).parts[0] == "grading" else kind(path)
        if k is None:
            continue
        result = load(path)
        out.setdefault(result["device"]["name"], []).append((k, path.relative_to(RESULTS).as_posix(), result))
    return out


def newest(every: dict) -> dict[str, dict[str, tuple[str, dict]]]:
    """kind -> device -> (file, run): the newest run; of one day's, the one under the part's own name (a tagged
    file, or one in runs/, is an extra run of that day)."""
    out: dict = {}
    for device, device_runs in every.items():
        for k, name, result in device_runs:
            if k not in KINDS:
                continue
            key = (result["date"], Path(name).stem.endswith(slug(device)) and not name.startswith("runs/"), name)
            held = out.setdefault(k, {}).get(device)
            if held is None or key > held[0]:
                out[k][device] = (key, name, result)
    return {k: {d: (name, r) for d, (_, name, r) in sorted(by.items())} for k, by in out.items()}


def cross_table(first: list[str], by_device: dict[str, list[tuple[tuple, dict]]], cell) -> list[str]:
    """One row a key (in the order the devices' runs list them), one column a device (in the order given):
    cell(item), or "-" where that device's run has no such row."""
    devices = list(by_device)
    keys = list(dict.fromkeys(key for d in devices for key, _ in by_device[d]))
    found = {d: dict(by_device[d]) for d in devices}
    lines = ["| " + " | ".join(first + devices) + " |", "|" + "---|" * (len(first) + len(devices))]
    for key in keys:
        cells = [cell(found[d][key]) if key in found[d] else "-" for d in devices]
        lines.append("| " + " | ".join(list(key) + cells) + " |")
    return lines


def _runs_shown(shown: dict) -> list[str]:
    devices = sorted({d for by in shown.values() for d in by})
    lines = ["", "## The runs shown", "", "| benchmark | command | " + " | ".join(devices) + " |",
             "|" + "---|" * (2 + len(devices))]
    for k, (title, command) in KINDS.items():
        by = shown.get(k, {})
        if not by:
            continue

        def cell(d):
            if d not in by:
                return "-"
            name, r = by[d]
            return f"`{name}` ({r['date']}; torch {versions(r)[0]}, triton {versions(r)[1]})"

        lines.append(f"| {title} | `{command}` | " + " | ".join(cell(d) for d in devices) + " |")
    return lines


def _figure(device: str, name: str) -> list[str]:
    """The figure python -m bench.plots drew from a run, shown from where it is committed (docs/hooks.py serves it)."""
    png = Path(name).with_suffix(".png").as_posix()
    return ["", f"![{device}: {png}](../bench/results/{png})"] if (RESULTS / png).is_file() else []


def _solution_rows(result: dict) -> list[tuple[tuple, dict]]:
    return [((r["exercise"],), r) for r in result["rows"] if r.get("role", "solution") == "solution"]


def _warm(row: dict) -> str:
    s = row["summary"]
    margin = f", {s['margin']:.2f}x" if s.get("margin") is not None else ""
    return f"{s['passed']}/{s['rounds']}{margin}" + ("" if s.get("ok", True) else " NOT OK")


def _cold(row: dict) -> str:
    """Runs passed at today's bars, of all; the worst run's margin over its bar now; the widest spread."""
    try:
        s = coldstart_summary.rescored(row, coldstart.bar_now)
    except KeyError:  # an exercise no longer in the course
        return "-"
    if s["failed"] or not s["bars"]:
        return f"{s['passed']}/{s['runs']} NOT OK"
    margin = min(b["margin"] for b in s["bars"].values())
    spread = max(b["spread"] for b in s["bars"].values())
    wide = [name for name, b in s["bars"].items() if b["spread"] > coldstart.MAX_SPREAD]
    flag = ("" if s["ok"] else " NOT OK") + (f" (spread of {', '.join(wide)})" if wide else "")
    return f"{s['passed']}/{s['runs']}, {margin:.2f}x, spread {spread:.2f}" + flag


def headroom_section(shown: dict) -> list[str]:
    warm, cold = shown.get("headroom", {}), shown.get("coldstart", {})
    if not warm and not cold:
        return []
    columns = {}
    for d in sorted({*warm, *cold}):
        for how, by in (("warm", warm), ("cold", cold)):
            if d in by:
                columns[f"{d} {how}"] = [(key, (how, r)) for key, r in _solution_rows(by[d][1])
                                         if how == "warm" or r["summary"]["runs"] or r["summary"]["failed"]]
    lines = ["", "## How far the reference solutions clear their grading bars", "",
             "Each reference solution graded on speed by the grader's own performance criterion: several times in a "
             "row on a warm machine, and cold, each grading a fresh process with empty caches as a student's first "
             "check. A cell: the runs that passed, of all, and the worst run's margin over the nearer of its two bars "
             f"(1.00x: on the bar); cold, scored against today's bars, with the largest spread (max / min over the "
             f"runs) of its figures. A solution should clear its bars by {headroom.HEADROOM:.2f}x warm and "
             f"{coldstart.MARGIN:.2f}x cold, with a spread under {coldstart.MAX_SPREAD:.2f} (a wider one names its "
             "figure).", ""]
    lines += cross_table(["exercise"], columns, lambda item: _warm(item[1]) if item[0] == "warm" else _cold(item[1]))
    passing = [f"{r['exercise']} ({r['what']}) on {d}" for d, (_, run) in warm.items() for r in run["rows"]
               if r.get("role") == "naive" and r["summary"]["passed"]]
    lines += ["", "The naive version of each exercise (unfused, or eager PyTorch), graded the same way: "
              + (f"passed at least once: {'; '.join(passing)}." if passing else "failed every round on every device.")]
    return lines


CHECK_TARGET_S = 60  # a notebook graded through the checker, cold, within a minute


def cold_seconds_section(shown: dict) -> list[str]:
    """Each notebook's cold check, in seconds, from the cold-start tables (the machine as installed where measured
    so: coldstart.installed)."""
    cold = shown.get("coldstart", {})
    columns = {}
    for d, (_, run) in sorted(cold.items()):
        seconds = coldstart_summary.notebook_seconds(run["rows"])
        columns[d] = [((nb,), v) for nb, v in sorted(seconds.items())]
    if not any(columns.values()):
        return []

    def cell(v):
        worst = max(v)
        checks = f"{len(v)} check{'s' if len(v) > 1 else ''}"
        over = f" (over {CHECK_TARGET_S} s)" if worst > CHECK_TARGET_S else ""
        return f"{checks}, {min(v):.0f} / {statistics.median(v):.0f} / {worst:.0f} s{over}"
    lines = ["", "## A notebook's cold check", "",
             "Each solution notebook through `python -m autograder check` in a fresh process with empty Triton, "
             "Inductor, CUDA and course caches (bench.coldstart), on a machine as set up for the course: Python's "
             "bytecode and matplotlib's font list there. Seconds min / median / max; the goal is at most "
             f"{CHECK_TARGET_S} s.", ""]
    return lines + cross_table(["notebook"], columns, cell)


def suite_section(shown: dict) -> list[str]:
    by = shown.get("suite", {})
    if not by:
        return []
    columns = {d: [((r["kernel"], r["shape"]), r) for r in run["rows"]] for d, (_, run) in by.items()}
    lines = ["", "## The memory-bound reference kernels", "",
             "The course's Triton kernel against the copy bandwidth it could reach (fraction of the measured copy "
             "peak) and its speed-up over eager PyTorch and over torch.compile.", ""]
    lines += cross_table(["kernel", "shape"], columns, lambda r: (
        f"{r['fraction_of_copy']:.2f} of copy, {r['speedup_vs_eager']:.2f}x eager, "
        f"{r['speedup_vs_compile']:.2f}x torch.compile"))
    for d, (name, run) in by.items():
        goals = run.get("goals", {})
        missed = [g for g, v in goals.items() if not v["met"]]
        lines += ["", f"{d}: {len(goals) - len(missed)} of the suite's {len(goals)} goals met"
                  + (f"; not met: {', '.join(missed)}" if missed else "")
                  + f". Its GEMM, attention and compiler rows are in `{name}`."]
        lines += _figure(d, name)
    return lines


def peers_section(shown: dict) -> list[str]:
    by = shown.get("peers", {})
    if not by:
        return []
    columns = {d: [((r["op"], r["shape"]), r) for r in run["rows"]] for d, (_, run) in by.items()}

    def cell(r):
        if not r.get("vs_best_peer"):
            return "no peer ran"
        return f"{r['vs_best_peer']:.2f}x {r['best_peer']}"

    return ["", "## The course against its peers", "",
            "The course's kernel against its fastest peer (torch.compile, PyTorch's own op or SDPA backend, "
            "Liger-Kernel where installed): the peer's time over the course's (above 1: the course is faster), and "
            "which peer.", "",
            *cross_table(["op", "shape"], columns, cell)]


def compiler_section(shown: dict) -> list[str]:
    by = shown.get("compiler", {})
    if not by:
        return []
    columns = {d: [((r["kernel"], r["shape"]), r) for r in run["rows"]] for d, (_, run) in by.items()}
    def cell(r):
        if "fraction_of_copy" in r:
            return "; ".join(f"{v} {f:.2f}" for v, f in sorted(r["fraction_of_copy"].items(), key=lambda kv: kv[1]))
        return "; ".join(f"{v} {ms:.2f} ms" for v, ms in sorted(r["ms"].items(), key=lambda kv: -kv[1]))

    return ["", "## Compiler-driven fusion", "",
            "Each version's fraction of the copy bandwidth (or its time where the op has no byte count), slowest "
            "first.", "", *cross_table(["kernel", "shape"], columns, cell)]


def _training_cell(rows: list[dict]) -> str:
    if all("fraction_of_sdpa" in r for r in rows):
        f = [r["fraction_of_sdpa"] for r in rows]
        return f"{min(f):.2f} to {max(f):.2f} of SDPA's speed over {len(f)} shapes (median {statistics.median(f):.2f})"
    r = rows[0]
    text = f"{r['time_over_compile']:.2f}x torch.compile's time in {r['memory_over_compile']:.2f} of its memory"
    if r.get("cublas_time_over_compile") is not None:
        text += (f"; with cuBLAS's products {r['cublas_time_over_compile']:.2f}x in "
                 f"{r['cublas_memory_over_compile']:.2f}")
    return text


def training_section(shown: dict) -> list[str]:
    by, capstone = shown.get("training", {}), shown.get("capstone", {})
    lines = []
    if by:
        columns = {}
        for d, (_, run) in by.items():
            kernels: dict = {}
            for r in run["rows"]:
                if not r["kernel"].startswith("decoder"):  # the capstone's rows, shown from its own runs
                    kernels.setdefault(r["kernel"], []).append(r)
            columns[d] = [((k,), rows) for k, rows in kernels.items()]
        lines += ["", "## Training kernels", "", *cross_table(["kernel"], columns, _training_cell)]
    if capstone:
        columns = {d: [((r["shape"],), r) for r in run["rows"] if r["kernel"] == "decoder_step"]
                   for d, (_, run) in capstone.items()}
        lines += ["", "## The capstone's training step", "",
                  "A decoder's forward and backward built from the course's kernels: its tokens/s over torch.compile's "
                  "(and as one CUDA graph), its peak memory beyond the parameters over eager's.", ""]
        lines += cross_table(["model"], columns, lambda r: (
            f"{r['tokens_over_compile']:.2f} of torch.compile ({r['graphed_tokens_over_compile']:.2f} graphed), "
            f"{r['extra_GiB']['course'] / r['extra_GiB']['eager']:.2f} of eager's memory"))
        for d, (name, run) in capstone.items():
            gap = next((r["gap"] for r in run["rows"] if r["kernel"] == "decoder_loss_curve"), None)
            if gap is not None:
                lines += ["", f"{d}: the course's loss curve ends {gap:+.4f} from eager's (mean of the last 20 steps)."]
            lines += _figure(d, name)
    return lines


def scale_section(shown: dict) -> list[str]:
    by = shown.get("scale", {})
    lines = []
    for d, (name, r) in by.items():
        if r.get("ratio") is None:
            continue
        one, every = r["rows"][0], r["rows"][-1]
        lines.append(f"- {d}: {r['students']} students of {r['assignment']} in {one['wall_s']:.0f} s on one GPU, "
                     f"{every['wall_s']:.0f} s on {every['workers']} (parallel efficiency {r['efficiency']:.2f}); "
                     f"every student the same grade in both runs: {'yes' if r['grades_identical'] else 'NO'}.")
    return ["", "## grade-class on several GPUs", "", *lines] if lines else []


def hopper_section(shown: dict) -> list[str]:
    by = shown.get("hopper", {})
    if not by:
        return []

    def cell(g):
        if "worst" in g:
            return (f"worst {g['worst']:.2f} of the best SDPA (course {g['course_worst']:.2f}), goal "
                    f"{g['min_fraction_of_best_sdpa']:.2f}: {'met' if g['met'] else 'not met'}")
        return (f"fastest Triton {g['its_time_over_compile']:.2f}x torch.compile's time in "
                f"{g['its_memory_over_compile']:.2f} of its memory, goal {g['max_time_over_compile']:.2f}x in "
                f"{g['max_memory_over_compile']:.2f}: {'met' if g['met'] else 'not met'}")

    columns = {d: [((part,), g) for part, g in run["goals"].items()] for d, (_, run) in by.items()}
    return ["", "## How far Triton gets on Hopper", "",
            "The course's attention and cross-entropy and every setting of a wider search (TMA, warp "
            "specialization), the best of each against the best of PyTorch.", "",
            *cross_table(["part"], columns, cell)]


def yardstick_section(shown: dict) -> list[str]:
    by = shown.get("yardstick", {})
    if not by:
        return []
    columns = {d: [(tuple(name.split(", ")), row) for name, row in run["summary"].items()]
               for d, (_, run) in by.items()}
    lines = ["", "## 07.decoder's yardstick", "",
             "torch.compile of the eager decoder, compiled whole (what 07.decoder's performance criterion times a "
             "student's step against) or one layer at a time, in a fresh process with empty caches and again with "
             "the caches the first left: seconds to the first step's gradients, compilation included / median "
             "step in ms / speed-up over eager measured in the same process (medians over the runs).", ""]

    def cell(r):
        runs = f"{r['runs']} run" + ("s" if r["runs"] != 1 else "")
        return f"{r['first_step_s']:.1f} s / {r['step_ms']:.1f} ms / {r['speedup_over_eager']:.2f}x ({runs})"
    return lines + cross_table(["variant", "caches"], columns, cell)


def render() -> str:
    every = runs()
    shown = newest(every)
    notebooks = [p.stem for p in grading.notebooks(None)]
    lines = ["# Benchmarks", "",
             "The newest run of each benchmark on each device, from the JSON files committed in `bench/results/` "
             "(one a run, with its device, versions and date; every figure a run measured is in its file, older "
             "runs in git's history). Generated by `python -m bench.report`; do not edit by hand. The figures are "
             "drawn from the same files by `python -m bench.plots`.", "",
             f"The repository pins {PINNED} for CPU machines (constraints.txt); the runs used the versions shown "
             "at the end, which may be older."]
    lines += budget.render({device: ([(n, r) for k, n, r in device_runs if k == "grading"],
                                     [(n, r) for k, n, r in device_runs if k == "scale"])
                            for device, device_runs in every.items()}, notebooks)
    for section in (headroom_section, cold_seconds_section, suite_section, peers_section, compiler_section,
                    training_section, scale_section, hopper_section, yardstick_section):
        lines += section(shown)
    lines += _runs_shown(shown)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only say whether docs/benchmarks.md is up to date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if DOC.is_file() and DOC.read_text() == text:
            return 0
        print(f"{DOC.relative_to(ROOT)} is stale: run python -m bench.report", file=sys.stderr)
        return 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
