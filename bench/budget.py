"""What grading a class costs in GPU time, from the committed runs alone: a section of docs/benchmarks.md.

For each device, each notebook's seconds through the checker (bench.grading, grading mode: the newest
measurement, see newest_checker_rows) and, where bench.scale has run on that device, its seconds per
student through grade-class and the parallel efficiency of one worker per GPU. From them: GPU-hours per notebook
and in total for a class of CLASS_SIZE students doing every notebook, and the wall-clock time on 1, 2 and 8 GPUs.

grade-class costs more than the checker (nbgrader, a Jupyter kernel, every cache cold in a private workspace): where
the scale run measured one notebook, the other notebooks are given the same extra seconds a student; where nothing
was measured through grade-class, the checker's seconds stand, a lower bound, and the page says so.
"""

from __future__ import annotations

CLASS_SIZE = 200
GPU_COUNTS = (1, 2, 8)


def newest_checker_rows(runs: list[tuple[str, dict]]) -> dict[str, dict]:
    """notebook -> {seconds, date, file, passed}: among the grading-mode rows of runs [(file, run)], those of the
    newest date; of these, one whose notebook passed if any did; of these, the slowest (a class run's caches are
    cold, so a warm rerun of the same day would understate it)."""
    best: dict[str, tuple] = {}
    for name, run in runs:
        for row in run.get("rows", []):
            if row.get("mode") != "grading":
                continue
            key = (run["date"], bool(row["passed"]), row["wall_s"])
            if row["notebook"] not in best or key > best[row["notebook"]][0]:
                best[row["notebook"]] = (key, {"seconds": row["wall_s"], "date": run["date"], "file": name,
                                               "passed": bool(row["passed"])})
    return {nb: entry for nb, (_, entry) in best.items()}


def newest_scale(runs: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    """The newest scale run that timed grade-class (file, run), preferring one with both runs (a ratio)."""
    timed = [(name, run) for name, run in runs if run.get("rows")]
    if not timed:
        return None
    return max(timed, key=lambda item: (item[1]["date"], item[1].get("ratio") is not None, item[0]))


def efficiency(scale_run: dict | None) -> float:
    """The parallel efficiency a scale run measured (1 / (workers x ratio)), at most 1; 1 where none was measured."""
    if scale_run is None or scale_run.get("efficiency") is None:
        return 1.0
    return min(1.0, float(scale_run["efficiency"]))


def per_student(checker: dict[str, dict], scale: tuple[str, dict] | None) -> dict[str, tuple[float, str]]:
    """notebook -> (seconds a student through grade-class, how they were found), for every notebook measured."""
    out = {nb: (entry["seconds"], "checker only") for nb, entry in checker.items()}
    one = scale[1]["rows"][0] if scale is not None else {}
    if one.get("per_student_s") is None:
        return out
    notebook, seconds = scale[1]["assignment"], float(one["per_student_s"])
    if notebook in checker:
        extra = max(0.0, seconds - checker[notebook]["seconds"])
        out = {nb: (s + extra, f"checker + {extra:.0f}") for nb, (s, _) in out.items()}
    out[notebook] = (seconds, "measured")
    return out


def hours(seconds: float) -> float:
    return CLASS_SIZE * seconds / 3600


def _clock(h: float) -> str:
    return f"{h:.1f} h" if h >= 1 else f"{h * 60:.0f} min"


def device_lines(device: str, grading_runs: list[tuple[str, dict]], scale_runs: list[tuple[str, dict]],
                 notebooks: list[str]) -> list[str]:
    """One device's tables: GPU-hours per notebook and in total, then the wall-clock on 1, 2 and 8 GPUs."""
    checker = newest_checker_rows(grading_runs)
    scale = newest_scale(scale_runs)
    students = per_student(checker, scale)
    if not students:
        return []
    lines = ["", f"### {device}", "",
             "| notebook | checker s | grade-class s a student | GPU-hours | measured |", "|---|---|---|---|---|"]
    for notebook in notebooks:
        if notebook not in students:
            lines.append(f"| {notebook} | not measured | | | |")
            continue
        seconds, how = students[notebook]
        entry = checker.get(notebook)
        where = [f"`{entry['file']}` ({entry['date']}{'' if entry['passed'] else ', a cell failed'})"] if entry else []
        if how == "measured":
            where.append(f"`{scale[0]}` ({scale[1]['date']})")
        checker_s = f"{entry['seconds']:.0f}" if entry else "not measured"
        lines.append(f"| {notebook} | {checker_s} | {seconds:.0f} ({how}) | {hours(seconds):.1f} | "
                     f"{'; '.join(where)} |")
    present = [nb for nb in notebooks if nb in students]
    total = sum(hours(students[nb][0]) for nb in present)
    label = "all" if len(present) == len(notebooks) else f"the {len(present)} measured"
    lines.append(f"| {label} | {sum(checker[nb]['seconds'] for nb in present if nb in checker):.0f} "
                 f"| {sum(students[nb][0] for nb in present):.0f} | {total:.1f} | |")
    e = efficiency(scale[1] if scale else None)
    lines += ["", "| GPUs | " + " | ".join(str(n) for n in GPU_COUNTS) + " |", "|---|" + "---|" * len(GPU_COUNTS),
              "| wall-clock | " + " | ".join(_clock(total / (n * (e if n > 1 else 1.0))) for n in GPU_COUNTS) + " |",
              ""]
    if scale is not None and scale[1].get("efficiency") is not None:
        lines.append(f"1 GPU: the total GPU-hours; n GPUs: the total / n / {e:.2f}, the parallel efficiency of "
                     f"grade-class with {scale[1]['rows'][-1]['workers']} workers (`{scale[0]}`), assumed to hold up "
                     "to 8 GPUs.")
    else:
        lines.append("1 GPU: the total GPU-hours; n GPUs: the total / n, assuming perfect scaling (grade-class has not "
                     "been timed on several GPUs of this device: `python -m bench.scale`).")
    missing = [nb for nb in notebooks if nb not in students]
    if missing or scale is None:
        lines.append("")
    if missing:
        lines.append(f"Not measured on this device, and left out of the totals: {', '.join(missing)}.")
    if scale is None:
        lines.append("grade-class itself has not been timed on this device: the checker's seconds stand, a lower "
                     "bound of what it costs.")
    return lines


def render(by_device: dict[str, tuple[list, list]], notebooks: list[str]) -> list[str]:
    """The section, one column pair a device: device -> (grading runs, scale runs), each a list of (file, run)."""
    found = {}
    for device, (grading_runs, scale_runs) in sorted(by_device.items()):
        checker, scale = newest_checker_rows(grading_runs), newest_scale(scale_runs)
        students = per_student(checker, scale)
        if students:
            found[device] = (checker, scale, students)
    if not found:
        return []
    lines = ["| notebook | " + " | ".join(f"{d}: s a student | GPU-hours" for d in found) + " |",
             "|---|" + "---|---|" * len(found)]
    for notebook in notebooks:
        cells = [f"{students[notebook][0]:.0f} | {hours(students[notebook][0]):.1f}" if notebook in students
                 else "not measured | " for _, _, students in found.values()]
        lines.append(f"| {notebook} | " + " | ".join(cells) + " |")
    totals, clocks, notes = [], [], []
    for device, (checker, scale, students) in found.items():
        present = [nb for nb in notebooks if nb in students]
        total = sum(hours(students[nb][0]) for nb in present)
        e = efficiency(scale[1] if scale else None)
        totals.append(f"{sum(students[nb][0] for nb in present):.0f} | {total:.1f}")
        clocks.append(" | " + " / ".join(_clock(total / (n * (e if n > 1 else 1.0))) for n in GPU_COUNTS))
        files = sorted({(entry["file"], entry["date"]) for entry in checker.values()})
        how = (f"grade-class's own seconds from `{scale[0]}` ({scale[1]['date']}), its parallel efficiency "
               f"{e:.2f} assumed up to {GPU_COUNTS[-1]} GPUs" if scale is not None and scale[1].get("efficiency")
               is not None else "the checker's seconds alone (grade-class not timed here: a lower bound), perfect "
               "scaling assumed")
        missing = [nb for nb in notebooks if nb not in students]
        notes.append(f"- {device}: " + ", ".join(f"`{f}` ({d})" for f, d in files) + f"; {how}."
                     + (f" Not measured, left out of the totals: {', '.join(missing)}." if missing else ""))
    lines.append("| every notebook measured | " + " | ".join(totals) + " |")
    lines.append(f"| wall-clock on {' / '.join(map(str, GPU_COUNTS))} GPUs | " + " | ".join(clocks) + " |")
    intro = (f"A class of {CLASS_SIZE} students handing in all {len(notebooks)} notebooks, graded one student per GPU "
             "at a time: a student's seconds a notebook (the newest grading-mode run of the checker on the device, "
             "`python -m bench.grading`, plus grade-class's own extra seconds where `python -m bench.scale` measured "
             "them) and the class's GPU-hours (students x seconds / 3600).")
    return ["", "## What grading a class costs", "", intro, "", *lines, "", *notes]
