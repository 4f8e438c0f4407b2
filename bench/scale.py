"""How grade-class scales over the GPUs of one machine: a class graded one student at a time on GPU 0, then one
student per GPU.

    python -m bench.scale [--students 8] [--assignment 01_hbm_cost_model] [--gpus all] [--runs both]
                                  [--allow-one-gpu] [--timeout 1800] [--tag TEXT] [--out bench/results/scale]
    python -m bench.scale --merge ONE.json ALL.json [--tag TEXT] [--out ...]

A course is built in a temporary folder (bench.submissions): the assignment's solution notebook as
nbgrader's source, its release made by `nbgrader generate_assignment`, and 2N students who hand the release in, N
with every answer of the reference solution and N with the same answers but one kernel broken (a wrong formula, so
that its graded cells fail while the notebook runs to the end). The class is then graded twice by `python -m
autograder grade-class`, as an instructor runs it: with `--gpus 0` (one worker, on the first GPU --gpus names),
then with `--gpus all` (one worker per GPU; --gpus 0,1 names them), each with --force and every student's caches
cold (grade-class gives each student private Triton, Inductor and Jupyter folders). What an instructor's machine
has ready before a class is made ready once before either run, each in a process of its own: the device profile
(`python -m autograder device`) and the grader's own compiled yardsticks (notebook 07's; grade-class compiles them
once per machine).

Recorded: each run's wall seconds; each student's status, seconds and GPU from grade-class's own lines
("s01-solution: graded in 48 s on GPU 1"); the ratio of the wall times (all GPUs / one GPU; the goal is at most
GOAL_RATIO on two GPUs); and whether both runs gave every student the same status and score (the grades CSV
grade-class writes to the course's grading/ folder). Saves scale-<gpu>[-<tag>][-one-gpu].json (device, versions,
date); `python -m bench.report` turns it into a table of docs/benchmarks.md and into the GPU-hours a class
costs.

Needs nbgrader and CUDA GPUs: fewer than two are refused unless --allow-one-gpu (then only the one-worker run). The
Jupyter kernel the notebooks run in is `fusion-course` (`make lab` registers it); where Jupyter knows none, one is
registered for this Python inside the temporary folder. Nothing is downloaded.

Where one command may not run as long as both runs take (a batch system's time limit), `--runs one` and `--runs
all` make them apart, on the same machine, each on a class built afresh (the same students: the class is built from
the assignment alone); `--merge` then joins the two results into the one the report reads, after checking that
they come from the same machine, versions, assignment and class size.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm.auto import tqdm

from autograder.guard import sandbox
from autograder.measure import device
from autograder.publish.build import tool_env
from bench.common import RESULTS, record, save, slug
from bench.submissions import BUGGY, BUGS, SOLUTION, build_course, kind_of

RESULTS = RESULTS / "scale"
GOAL_RATIO = 0.55  # wall seconds with one worker per GPU over those with one worker, on two GPUs
KERNEL = "fusion-course"  # the Jupyter kernel nbgrader_config.py runs the notebooks with
GRADE_CLASS = (sys.executable, "-m", "autograder", "grade-class")


# A student's line in grade-class's output (classroom.loop: "<student>: <status> in <s> s[ on <slot>][ (why)][ [n
# flag(s)]]").
_STUDENT_LINE = re.compile(r"^(?P<student>[^\s:\[]+): (?P<status>[a-z ]+?) in (?P<seconds>\d+) s"
                           r"(?: on (?P<where>[^(\[]+?))?(?: [(\[].*)?$")


# -- the runs -----------------------------------------------------------------------------------------------------

def parse_lines(lines) -> dict[str, dict]:
    """student -> {status, seconds, where} from grade-class's output; a student graded again keeps the last."""
    out = {}
    for line in lines:
        if m := _STUDENT_LINE.match(line.rstrip("\n")):
            out[m["student"]] = {"status": m["status"], "seconds": float(m["seconds"]),
                                 "where": (m["where"] or "").strip()}
    return out


def read_grades(path: Path) -> dict[str, dict]:
    """student -> {status, score, max_score, reason} from grade-class's CSV."""
    with open(path, newline="") as f:
        return {r["student_id"]: {"status": r["status"], "score": float(r["score"] or 0),
                                  "max_score": float(r["max_score"] or 0), "reason": r["reason"]}
                for r in csv.DictReader(f)}


def differences(one: dict[str, dict], other: dict[str, dict], names=("one GPU", "all GPUs")) -> list[str]:
    """Every student whose status or score differs between two runs' grades, in words."""
    out = []
    for student in sorted(set(one) | set(other)):
        a, b = one.get(student), other.get(student)
        said = [f"{g['status']} {g['score']:g}/{g['max_score']:g}" if g else "absent" for g in (a, b)]
        if a is None or b is None or a["status"] != b["status"] or abs(a["score"] - b["score"]) > 1e-6:
            out.append(f"{student}: {said[0]} with {names[0]}, {said[1]} with {names[1]}")
    return out


def run_class(course: Path, assignment: str, gpus: str, workers: int, timeout: float, env: dict, label: str,
              command=GRADE_CLASS) -> dict:
    """One grade-class run of the whole class, timed; its students and grades. Raises RuntimeError if it failed."""
    students = len(list((course / "submitted").glob(f"*/{assignment}")))
    csv_path = course / "grading" / f"grades-{slug(label)}.csv"
    log = course.parent / f"grade-class-{slug(label)}.err"  # beside the course: grade-class watches what is in it
    cmd = [*command, assignment, "--gpus", gpus, "--force", "--timeout", f"{timeout:g}", "--csv", str(csv_path)]
    lines = []
    with open(log, "w") as err, tqdm(total=students, desc=f"grade-class --gpus {gpus}", unit="student") as bar:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                stdin=subprocess.DEVNULL)
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if _STUDENT_LINE.match(lines[-1]):
                bar.update()
            else:  # what grade-class says about the run itself: its sandbox, its slots, its summary
                bar.write(f"  | {lines[-1]}")
        proc.wait()
        wall = time.perf_counter() - started
    if proc.returncode != 0 or not csv_path.is_file():
        said = "\n".join(lines[-20:]) + "\n" + log.read_text()[-2000:]
        raise RuntimeError(f"grade-class --gpus {gpus} exited with code {proc.returncode}:\n{said.strip()}")
    seen, grades = parse_lines(lines), read_grades(csv_path)
    return {"run": label, "gpus": gpus, "workers": workers, "wall_s": round(wall, 2),
            "students": {s: {**grades[s], **seen.get(s, {})} for s in grades},
            "summary": lines[-1] if lines else ""}


def summarize(run: dict) -> dict:
    """A run's seconds per student (mean, and by kind) and its count of statuses, from its students."""
    timed = {s: p["seconds"] for s, p in run["students"].items() if "seconds" in p}
    by_kind = {k: [sec for s, sec in timed.items() if kind_of(s) == k] for k in (SOLUTION, BUGGY)}
    statuses: dict[str, int] = {}
    for p in run["students"].values():
        statuses[p["status"]] = statuses.get(p["status"], 0) + 1
    return {"per_student_s": round(statistics.fmean(timed.values()), 1) if timed else None,
            "by_kind_s": {k: round(statistics.fmean(v), 1) for k, v in by_kind.items() if v},
            "statuses": statuses}


def problems_of(run: dict) -> list[str]:
    """What makes a run unfit to compare: a student not graded, or the mistake not costing points."""
    found = [f"{s} {p['status']}" + (f" ({p['reason']})" if p.get("reason") else "")
             for s, p in run["students"].items() if p["status"] != "graded"]
    right = [p["score"] for s, p in run["students"].items() if kind_of(s) == SOLUTION]
    wrong = [p["score"] for s, p in run["students"].items() if kind_of(s) == BUGGY]
    if right and wrong and max(wrong) >= min(right):
        found.append(f"the planted mistake did not cost points (scores {sorted(set(wrong))} against {sorted(set(right))})")
    return found


def verdict(rows: list[dict]) -> dict:
    """The ratio of the runs' wall times, the parallel efficiency it means, and whether the grades agree."""
    if len(rows) < 2:
        return {"ratio": None, "efficiency": None, "goal_met": None, "grades_identical": None, "differences": []}
    one, many = rows[0], rows[1]
    ratio = many["wall_s"] / one["wall_s"]
    diff = differences(one["students"], many["students"], (one["run"], many["run"]))
    return {"ratio": round(ratio, 3), "efficiency": round(1 / (many["workers"] * ratio), 3),
            "goal_met": ratio <= GOAL_RATIO if many["workers"] == 2 else None,
            "grades_identical": not diff, "differences": diff}


def markdown(result: dict) -> str:
    d = result["device"]
    title = (f"### grade-class on {result['gpu_count']} GPU(s): {d['name']} ({result['date']}, torch "
             f"{result['torch']}, triton {result['triton']})")
    caches = "sandboxed" if result.get("sandboxed") else "without the sandbox"
    about = (f"{result['assignment']}, {result['students']} students: half hand in the reference solution, half the "
             f"same with one mistake ({result['bug']}). Each run grades the whole class, every student's caches cold, "
             f"{caches}.")
    lines = [title, "", about, "",
             "| run | workers | wall s | s per student | solution s | with the mistake s | statuses |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        k = row["by_kind_s"]
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(row["statuses"].items()))
        lines.append(f"| `--gpus {row['gpus']}` | {row['workers']} | {row['wall_s']:.0f} | {row['per_student_s']} | "
                     f"{k.get(SOLUTION, '')} | {k.get(BUGGY, '')} | {statuses} |")
    if result["ratio"] is not None:
        goal = "" if result["goal_met"] is None else (
            f" (goal at most {GOAL_RATIO} on two GPUs: {'met' if result['goal_met'] else 'NOT met'})")
        same = "yes" if result["grades_identical"] else "NO: " + "; ".join(result["differences"][:5])
        lines += ["", (f"Wall time with every GPU over one GPU: {result['ratio']:.2f}{goal}; parallel efficiency "
                       f"{result['efficiency']:.2f}. The same status and score for every student in both runs: "
                       f"{same}.")]
    return "\n".join(lines) + "\n"


# -- the machine --------------------------------------------------------------------------------------------------

def probe() -> dict:
    """How many GPUs this process sees, their names, and the first one's profile (measured once, then cached). Warms
    what an instructor's machine has warm before either run: that profile, and matplotlib's list of fonts (which
    grade-class copies to every student, and builds first where it is missing)."""
    import torch

    try:
        from matplotlib import font_manager  # noqa: F401  builds the font list once, if missing
    except ImportError:
        pass

    count = torch.cuda.device_count()
    if count == 0:
        return {"gpus": 0, "names": [], "profile": None}
    return {"gpus": count, "names": [torch.cuda.get_device_name(i) for i in range(count)],
            "profile": dataclasses.asdict(device.profile(progress=False))}


def probe_in_child(env: dict) -> dict:
    """probe() in a process of its own, so that this one never holds a GPU while the class is graded."""
    done = subprocess.run([sys.executable, "-m", "bench.scale", "--probe"], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the device probe failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prime_yardsticks(assignment: str, env: dict) -> str:
    """What grade-class compiles once per machine before its first student (the grader's own yardsticks, notebook
    07's), compiled before either run so that the first run alone does not pay for it. Returns what it said."""
    done = subprocess.run([sys.executable, "-m", "autograder.classroom.compile_cache", assignment], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    said = (done.stdout + done.stderr).strip().splitlines()
    return said[-1] if said else f"autograder.classroom.compile_cache exited with code {done.returncode}"


def chosen_gpus(chosen: str, visible: int) -> list[int]:
    """The GPU indices --gpus names ("all" or "0,1"), checked against the visible ones."""
    if chosen.strip() == "all":
        return list(range(visible))
    try:
        picked = [int(g) for g in chosen.split(",") if g.strip()]
    except ValueError:
        raise ValueError(f"--gpus takes 'all' or GPU indices such as 0,1; got {chosen!r}") from None
    missing = [g for g in picked if not 0 <= g < visible]
    if missing or len(set(picked)) != len(picked) or not picked:
        raise ValueError(f"--gpus {chosen}: this machine shows {visible} GPU(s), indices 0 to {visible - 1}, each "
                         "named once")
    return picked


def refusal(has_nbgrader: bool, visible: int, allow_one_gpu: bool, chosen: str) -> str | None:
    """Why this machine cannot run the benchmark as asked, or None."""
    if not has_nbgrader:
        return ("nbgrader is not installed for this Python: run it in the course's virtual environment (make lab), "
                "or put a folder holding nbgrader on PYTHONPATH")
    if visible == 0:
        return "no CUDA GPU is visible: grading speed means nothing in Triton's interpreter"
    try:
        picked = chosen_gpus(chosen, visible)
    except ValueError as exc:
        return str(exc)
    if len(picked) < 2 and not allow_one_gpu:
        where = f"this machine shows {visible} GPU" if visible < 2 else f"--gpus {chosen} names one GPU"
        return f"one worker per GPU needs at least 2 GPUs and {where}; pass --allow-one-gpu to time one worker alone"
    return None


def kernel_env(env: dict, folder: Path) -> tuple[dict, str]:
    """env, with a `fusion-course` Jupyter kernel for this Python registered in folder where Jupyter knows none."""
    from jupyter_client.kernelspec import KernelSpecManager

    found = KernelSpecManager().find_kernel_specs()
    if KERNEL in found:
        return env, f"Jupyter kernel {KERNEL}: {found[KERNEL]}"
    done = subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(folder), "--name", KERNEL,
                           "--display-name", "Python 3 (fusion course)"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"no Jupyter kernel {KERNEL}, and registering one failed:\n{done.stderr[-2000:]}")
    paths = [str(folder / "share" / "jupyter")] + [p for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    return {**env, "JUPYTER_PATH": os.pathsep.join(paths)}, f"Jupyter kernel {KERNEL}: registered in {folder}"


def measure(args, found: dict, env: dict) -> dict:
    """The class built and graded by each run; the result to save (its head, its runs, their verdict)."""
    picked = chosen_gpus(args.gpus, found["gpus"])
    runs = [("one GPU", str(picked[0]), 1)] + ([("all GPUs", args.gpus, len(picked))] if len(picked) >= 2 else [])
    runs = {"both": runs, "one": runs[:1], "all": runs[1:]}[args.runs]
    sandboxed = sandbox.choose(echo=lambda m: print(m, flush=True)).use
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        course = Path(tmp) / "course"
        env, said = kernel_env(env, Path(tmp) / "jupyter")
        print(said, flush=True)
        print(prime_yardsticks(args.assignment, env), flush=True)
        started = time.perf_counter()
        students = build_course(course, args.assignment, args.students, env)
        set_up = time.perf_counter() - started
        print(f"a class of {len(students)} built in {set_up:.0f} s; the mistake: {BUGS[args.assignment].what}",
              flush=True)
        rows = [run_class(course, args.assignment, gpus, workers, args.timeout, env, label)
                for label, gpus, workers in runs]
    for row in rows:
        row.update(summarize(row))
    return {**record(device.DeviceProfile(**found["profile"])), "part": "scale", "assignment": args.assignment,
            "students": len(students), "bug": BUGS[args.assignment].what, "gpu_count": found["gpus"],
            "gpu_names": found["names"], "sandboxed": sandboxed, "set_up_s": round(set_up, 1), **verdict(rows),
            "rows": rows}


MERGED_SAME = ("assignment", "students", "bug", "gpu_count", "gpu_names", "sandboxed", "torch", "triton")


def merge(one: dict, every: dict) -> dict:
    """The result of `--runs one` and that of `--runs all` as one result of both runs. Raises ValueError when they
    are not two halves of one measurement: other settings, or not one run each of the right kind."""
    kinds = [[row["workers"] for row in r["rows"]] for r in (one, every)]
    if kinds[0] != [1] or len(kinds[1]) != 1 or kinds[1][0] < 2:
        raise ValueError(f"--merge takes a one-worker result and then a one-per-GPU result; their runs have "
                         f"{kinds[0]} and {kinds[1]} workers")
    differ = [k for k in MERGED_SAME if one.get(k) != every.get(k)]
    if differ or one["device"]["name"] != every["device"]["name"]:
        raise ValueError(f"the two results differ in {', '.join(differ) or 'device'}: not one measurement")
    rows = [one["rows"][0], every["rows"][0]]
    return {**one, "set_up_s": max(one["set_up_s"], every["set_up_s"]), **verdict(rows), "rows": rows,
            "merged": True}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=8, metavar="N",
                        help="N students hand in the solution and N the solution with a mistake (default 8)")
    parser.add_argument("--assignment", default="01_hbm_cost_model", choices=list(BUGS),
                        help="the notebook graded (default 01_hbm_cost_model)")
    parser.add_argument("--gpus", default="all",
                        help="the GPUs of the second run, as grade-class takes them: all (default) or 0,1,...")
    parser.add_argument("--allow-one-gpu", action="store_true", help="on one GPU, time the one-worker run alone")
    parser.add_argument("--timeout", type=float, default=1800, help="grade-class's seconds per student (default 1800)")
    parser.add_argument("--tag", default="", help="appended to the file name (scale-<gpu>-<tag>.json)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the result")
    parser.add_argument("--runs", choices=("both", "one", "all"), default="both",
                        help="both runs (default), only the one-worker run, or only the one-per-GPU run")
    parser.add_argument("--merge", nargs=2, type=Path, metavar=("ONE", "ALL"),
                        help="join a --runs one result and a --runs all result into one, and save it")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the child of probe_in_child
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    if args.merge:
        try:
            result = merge(*(json.loads(Path(p).read_text()) for p in args.merge))
        except (OSError, ValueError, KeyError) as exc:
            print(f"python -m bench.scale --merge: {exc}", file=sys.stderr)
            return 2
        return finish(result, args)
    if args.students < 1:
        parser.error(f"--students must be at least 1, got {args.students}")
    env = {k: v for k, v in tool_env().items() if k != "FUSION_COURSE_GRADING"}  # the course's own grading.toml
    has_nbgrader = importlib.util.find_spec("nbgrader") is not None
    try:
        found = probe_in_child(env) if has_nbgrader else {"gpus": 0}
        if why := refusal(has_nbgrader, found["gpus"], args.allow_one_gpu, args.gpus):
            print(f"python -m bench.scale: {why}", file=sys.stderr)
            return 2
        result = measure(args, found, env)
    except RuntimeError as exc:
        print(f"python -m bench.scale: {exc}", file=sys.stderr)
        return 1
    return finish(result, args)


def finish(result: dict, args) -> int:
    """Save the result, print its table and say what makes it unfit (exit 1), if anything."""
    alone = [] if len(result["rows"]) > 1 else ["one-gpu" if result["rows"][0]["workers"] == 1 else "all-gpus"]
    name = "-".join(["scale", slug(result["device"]["name"]), *([slug(args.tag)] if args.tag else []), *alone])
    path = save(result, args.out / f"{name}.json")
    print(markdown(result))
    print(f"saved {path}")
    problems = [f"{row['run']}: {p}" for row in result["rows"] for p in problems_of(row)] + result["differences"]
    for problem in problems:
        print(f"python -m bench.scale: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
