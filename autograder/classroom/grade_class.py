"""Grade a whole class with nbgrader, each student in a workspace and process of its own.

    python -m autograder grade-class ASSIGNMENT [--timeout SECONDS] [--force] [--csv PATH]
                                                [--gpus all|0,1 | --workers N | --cluster slurm ...]
                                                [--similarity-threshold 0.8] [--anonymous] [--allow-public-seed]

Run it where nbgrader_config.py is (the course root). nbgrader's own `autograde` drops a notebook whose
kernel crashed and reports it like a wrong answer, and runs every student's code where it can write into the
gradebook and into other students' folders. Here, for each student found in submitted/:

1. A private workspace (a temporary folder) gets a copy of the course's nbgrader configuration, the source
   assignment, this student's submission and a gradebook holding no other student.
2. ``python -m autograder.classroom.student`` runs nbgrader's autograde there, in a process of its own with a time
   limit; it ends every process the notebook started before nbgrader writes its results. Where it runs is the
   runner's choice (class_runner): one student at a time here, one per GPU, N CPU workers, or a Slurm job each.
3. Everything the grading of later students depends on (the course folder, the installed packages, Jupyter's
   configuration) must be as it was; otherwise the student is recorded as "tampered", the gradebook is put
   back, and if anything else was changed the run stops and names it (class_loop: with several students in
   flight, they are graded again one at a time to find whose it was).
4. The graded notebook is checked (a graded cell that passed must show the grader's verdict: see
   ``class_gradebook.missing_verdicts``) and its grades are saved into the course's gradebook by nbgrader's own
   SaveAutoGrades, by this process alone; the notebook goes to autograded/ for `nbgrader generate_feedback`.

The secret cases are drawn from the course's own seed (.grading-secret.toml beside grading.toml, written by
`make course` or by the first grade-class): grading for credit with the package's public seed is refused unless
allow_public_seed. Every student ends up in the gradebook and in the CSV as graded, crashed, timed out, tampered, performance not measured (a GPU busy with
others' work: graded again) or not run (refused or cancelled by the cluster: graded again), with the reason, and
with the flags of a static scan of their cells (autograder.guard.scan), of any edited locked cell, and of answers that
closely match the reference solution or another student's (autograder.classroom.similarity). A student whose
notebook was not graded scores 0 on every graded cell and gets a feedback page saying why
(class_gradebook.save_not_graded). The results go to grading/ at the course root (git-ignored): the CSV,
similarity-ASSIGNMENT.html, leaderboard-ASSIGNMENT.{html,csv} (autograder.classroom.leaderboard) and the run's
log. Re-running is safe: a student whose submission has not changed since
it was graded is skipped (--force grades everyone again), so an interrupted run resumes; a submission during which
the run died twice is recorded as crashed.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path

from autograder import config as config_mod
from autograder import runtime
from autograder.classroom import compile_cache, leaderboard
from autograder.classroom.course import (  # noqa: F401  (statuses and GradingStopped re-exported)
    CRASHED,
    FIELDS,
    GRADED,
    IN_PROGRESS,
    NOT_MEASURED,
    NOT_RUN,
    TAMPERED,
    TIMED_OUT,
    Course,
    GradingStopped,
    sqlite_file,
)
from autograder.classroom.gradebook import lost_points as gradebook_lost_points
from autograder.classroom.gradebook import scores as gradebook_scores
from autograder.classroom.loop import ClassRun
from autograder.classroom.runners import LocalRunner, SubmititRunner, gpu_slots, submitit_executor
from autograder.classroom.similarity import THRESHOLD, similarity
from autograder.guard import procs, sandbox


def grade_class(root: Path, assignment: str, timeout: float = 3600, force: bool = False,
                csv_path: Path | None = None, db_url: str | None = None, echo=print, gpus: str | None = None,
                workers: int | None = None, cluster: str | None = None, cluster_options: dict | None = None,
                progress: bool = True, similarity_threshold: float = THRESHOLD, anonymous: bool = False,
                allow_public_seed: bool = False, runner_hook=None) -> list[dict]:
    """Grade every student's submission of `assignment`; returns the CSV's rows.

    gpus ("all" or "0,1"): one student per GPU at a time, each process seeing only its GPU; workers: that many
    students at once on the CPU; cluster ("slurm", "local" or "debug"): one submitit job per student, with
    cluster_options for class_runner.submitit_executor (partition, time_min, account, parallel, setup,
    cpus_per_task, mem_gb...).
    similarity_threshold: the share of fingerprints from which a pair of answers is flagged; anonymous: also write
    the leaderboard with pseudonyms instead of names (to show the class); allow_public_seed: grade with the
    package's public seed; runner_hook: runner -> runner, wraps the runner (tests)."""

    root = Path(root).resolve()
    course = Course(root)
    submitted = root / course.submitted
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    if not students:
        raise FileNotFoundError(f"no submissions of {assignment!r} under {submitted}")
    db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    db_file = sqlite_file(db_url).resolve()
    if not db_file.exists():
        raise FileNotFoundError(f"no gradebook at {db_file}: run `nbgrader generate_assignment {assignment}` first")
    kernel_missing = None if cluster else course.missing_kernel()  # a cluster's nodes have their own kernels
    if kernel_missing:
        raise FileNotFoundError(kernel_missing)
    if cluster is not None and (gpus is not None or workers is not None):
        raise ValueError("--cluster grades each student as a job of its own: --gpus and --workers do not apply")
    if not 0 < similarity_threshold < 1:
        raise ValueError(f"--similarity-threshold is a share between 0 and 1, got {similarity_threshold}")
    slots = None if cluster else gpu_slots(gpus, workers)  # a bad --gpus is said before anything is touched
    # Whether each student runs in a bubblewrap sandbox here (FUSION_COURSE_SANDBOX: auto, required, off): a
    # fallback is said once through echo, and `required` refuses before anything is touched.
    sandboxed = False if cluster else sandbox.choose(echo=echo).use
    cfg = _course_settings(course.grading_file, allow_public_seed, echo)
    course.results.mkdir(exist_ok=True)
    echo = _logging(echo, course.results / f"grade-class-{assignment}.log")
    unmeasurable = None if cluster else unmeasurable_here(cfg, runtime.has_gpu())
    if unmeasurable:  # said before anyone is graded: the instructor may stop and move to a GPU machine
        echo(f"warning: {unmeasurable}")
    state_file = root / course.autograded / f".grade-class-{assignment}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() and not force else {}
    # A cluster's nodes must see the workspaces: they go under the course folder (which the nodes share), in a
    # folder the footprint leaves out. On this machine they go to the system's temporary folder.
    shared = root / ".grade-class-work" if cluster else None
    if shared is not None:
        shared.mkdir(exist_ok=True)
    procs.become_subreaper()  # processes a notebook leaves behind come back here to be ended
    try:
        with tempfile.TemporaryDirectory(prefix="grade-class-", dir=shared) as tmp:
            # The settings each student's judge reads (never the student's process): grading.toml with the course's
            # secret seed folded in, in the folder the sandbox hides.
            grading_file = Path(tmp) / "grading.toml"
            grading_file.write_text(config_mod.dumps(cfg))
            if slots is not None:  # before the footprint's record: this machine's cache is written now or never
                said = compile_cache.prime(assignment, dict(os.environ, **dict(slots[0].env)))
                if said:
                    echo(said)
            run = ClassRun(course, assignment, db_url, state, state_file, Path(tmp), echo, progress,
                           sandboxed=sandboxed)
            if cluster:
                executor = submitit_executor(Path(tmp) / "submitit", cluster, **(cluster_options or {}))
                runner = SubmititRunner(executor, timeout, grading_file)
                echo(f"grading {assignment} as {cluster} jobs, one per student")
            else:
                runner = LocalRunner(slots, timeout, grading_file)
                if len(slots) > 1:
                    echo(f"grading {assignment} on {', '.join(s.name for s in slots)}: one student on each at a time")
            if runner_hook is not None:
                runner = runner_hook(runner)
            suspects = run.run(run.todo(students), runner)
            if suspects:
                echo(f"grading {len(suspects)} students again one at a time: {', '.join(suspects)}")
                run.run(suspects, runner, one_at_a_time=True)
            if run.unmeasured:  # alone now: what shared the GPU may have been this run's own other students
                again, run.unmeasured = run.unmeasured, []
                echo(f"grading {len(again)} students again, one at a time, whose performance was not measured "
                     f"(the GPU was shared): {', '.join(again)}")
                run.run(again, runner, one_at_a_time=True)
    finally:
        procs.become_subreaper(False)
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
    csv_path = Path(csv_path or course.results / f"grades-{assignment}.csv")
    out = course.results
    similar = _similarity(course, assignment, students, out / f"similarity-{assignment}.html", echo,
                          similarity_threshold)
    exercise_ids = _leaderboard(course, assignment, students, state, cfg, anonymous, echo)
    return _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar, exercise_ids,
                      unmeasurable)


def _lost_reason(status: str, cells: list[str] | None, unmeasurable: str | None) -> str:
    """A graded student's reason: the graded cells that lost points (each one's why is on the feedback page), and
    what this machine could not measure."""
    if status != GRADED or not cells:
        return ""
    return f"points lost in {', '.join(cells)}" + (f"; {unmeasurable}" if unmeasurable else "")


def unmeasurable_here(cfg: config_mod.GradingConfig, gpu: bool) -> str | None:
    """What the grading settings require that this machine cannot measure (said at the start and given as the
    reason of the points it costs), or None."""
    if cfg.require_performance and not gpu:
        return ("this machine has no CUDA GPU and the grading settings require the GPU criteria "
                "(require_performance = true): every performance cell, and the kernels cell of a compiled exercise, "
                "scores 0 here; grade on a GPU machine, or set require_performance = false")
    return None


def _course_settings(grading_file: Path, allow_public_seed: bool, echo) -> config_mod.GradingConfig:
    """The course's grading settings with its secret seed: written beside grading.toml on the first run when it
    has none; the package's public seed is refused unless allowed."""
    cfg = config_mod.load(grading_file)
    if cfg.public_seed and grading_file.resolve() != config_mod.DEFAULT_PATH.resolve() and not cfg.seed_source:
        secret, _ = config_mod.ensure_secret(grading_file)
        echo(f"wrote a random secret seed for this course to {secret} (git-ignored: keep it, and keep it private)")
        cfg = config_mod.load(grading_file)
    if cfg.public_seed and not allow_public_seed:
        where = cfg.seed_source or f"{grading_file}, the package's defaults"
        raise ValueError(
            f"the secret seed in use ({where}) is the public one, in the repository and every student's hand-out: "
            f"students could reproduce the secret cases. Point ${config_mod.ENV_VAR} at the course's grading.toml "
            f"and run `make course` (or `python -m autograder.classroom.secret grading.toml`) to give the course a "
            "seed of its own, or pass --allow-public-seed to grade with it anyway (practice runs, not for credit)")
    if cfg.public_seed:
        echo("grading with the public secret seed (--allow-public-seed): not for credit")
    return cfg


def _logging(echo, log: Path):
    """echo, and the same line appended to this run's log in grading/."""
    with open(log, "a") as f:
        f.write(f"--- grade-class {datetime.datetime.now().isoformat(timespec='seconds')}\n")

    def both(message: str) -> None:
        echo(message)
        with open(log, "a") as f:
            f.write(f"{message}\n")

    return both


def _leaderboard(course: Course, assignment: str, students: list[str], state: dict, cfg, anonymous: bool,
                 echo) -> list[str]:
    """The leaderboard pages (named; with pseudonyms too when anonymous); returns the exercises it has columns for."""
    out = course.results
    try:
        exercise_ids = leaderboard.exercises(course.root / course.source / assignment)
        figures = {s: state[s].get("performance", {}) for s in students}
        leaderboard.write(assignment, figures, exercise_ids, out / f"leaderboard-{assignment}.html",
                          out / f"leaderboard-{assignment}.csv", key=cfg.secret_seed)
        if anonymous:
            leaderboard.write(assignment, figures, exercise_ids, out / f"leaderboard-{assignment}-anonymous.html",
                              out / f"leaderboard-{assignment}-anonymous.csv", anonymous=True, key=cfg.secret_seed)
    except Exception as exc:  # noqa: BLE001  the grades stand without it
        echo(f"leaderboard not written ({type(exc).__name__}: {exc}); the grades are not affected")
        return []
    measured = sum(any(v is not None for v in figures[s].values()) for s in students)
    echo(f"leaderboard: {measured} of {len(students)} students with a measured kernel; in {out}")
    return exercise_ids


def _similarity(course: Course, assignment: str, students: list[str], report: Path, echo,
                threshold: float = THRESHOLD) -> dict[str, list[str]]:
    """Similarity flags of every student's answers against the reference solution and each other (a flag, never
    a score), and the side-by-side report; a failure of the comparison is said and costs no grade."""

    root = course.root
    try:
        flags = similarity({s: root / course.submitted / s / assignment for s in students},
                           root / course.source / assignment, root / course.release / assignment, report,
                           threshold)
    except Exception as exc:  # noqa: BLE001  the grades stand without it
        echo(f"similarity not compared ({type(exc).__name__}: {exc}); the grades are not affected")
        return {}
    flagged = sum(bool(f) for f in flags.values())
    echo(f"similarity: {flagged} of {len(students)} students flagged; side by side in {report}")
    return flags


def _write_csv(root, assignment, students, state, db_url, csv_path, echo, similar=None,
               exercise_ids=(), unmeasurable=None) -> list[dict]:
    scores, max_score = gradebook_scores(assignment, db_url)
    try:
        lost = gradebook_lost_points(assignment, db_url)
    except Exception as exc:  # noqa: BLE001  the grades stand without it
        echo(f"the cells that lost points not read ({type(exc).__name__}: {exc}); the grades are not affected")
        lost = {}
    rows = []
    for student in students:
        entry = state[student]
        score = scores.get(student, 0.0) if entry["status"] in (GRADED, NOT_MEASURED) else 0.0
        rows.append({"student_id": student, "assignment": assignment, "status": entry["status"],
                     "score": score, "max_score": max_score,
                     "reason": entry["reason"] or _lost_reason(entry["status"], lost.get(student), unmeasurable),
                     "flags": "; ".join(entry.get("flags", []) + (similar or {}).get(student, [])),
                     "fraction_of_peak": leaderboard.column(entry.get("performance", {}), list(exercise_ids))})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    counts = {s: sum(r["status"] == s for r in rows)
              for s in (GRADED, CRASHED, TIMED_OUT, TAMPERED, NOT_MEASURED, NOT_RUN)}
    later = "".join(
        f"; {counts[s]} {what}: run again" for s, what in (
            (NOT_MEASURED, "with performance not measured (GPU shared)"), (NOT_RUN, "not run (refused or cancelled)"))
        if counts[s])
    echo(f"{len(rows)} students: {counts[GRADED]} graded, {counts[CRASHED]} crashed, {counts[TIMED_OUT]} timed out, "
         f"{counts[TAMPERED]} tampered, 0 lost{later}; every one recorded in the gradebook; wrote {csv_path}")
    return rows
