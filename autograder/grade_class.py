"""Grade a whole class with nbgrader, one student at a time, each in a fresh process with a time limit.

    python -m autograder grade-class ASSIGNMENT [--timeout SECONDS] [--force] [--csv PATH]

Run it where nbgrader_config.py is (the course root). nbgrader's own `autograde` drops a notebook whose
kernel crashed and reports it like a wrong answer; here every student found in submitted/ ends up in the
CSV, as graded, crashed or timed out, with the reason. Re-running is safe: a student whose submission has
not changed since it was graded is skipped (--force grades everyone again), so an interrupted run resumes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .build import tool_env

GRADED, CRASHED, TIMED_OUT = "graded", "crashed", "timed out"


def _submission_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _why_it_failed(output: str) -> str:
    text = output.lower()
    if "kernel died" in text or "deadkernel" in text or "kernel crashed" in text:
        return "the notebook's kernel died while running (a crash: segfault, abort, os._exit, out of memory?)"
    if "cellexecutionerror" in text or "timeout" in text:
        return "nbgrader could not execute the notebook"
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return "nbgrader did not grade it: " + (lines[-1][-300:] if lines else "no output")


def grade_one(root: Path, assignment: str, student: str, timeout: float, db_url: str) -> tuple[str, str]:
    """(status, reason) for one student, graded by nbgrader in a process of its own."""
    cmd = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", student, "--force",
           f"--db={db_url}"]
    proc = subprocess.Popen(cmd, cwd=root, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its kernel is in the same session: one kill ends both
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return TIMED_OUT, f"grading did not finish within {timeout:.0f} s (a hang or an endless loop?)"
    graded = list((root / "autograded" / student / assignment).glob("*.ipynb"))
    if proc.returncode == 0 and graded:
        return GRADED, ""
    return CRASHED, _why_it_failed(output)


def _scores(root: Path, assignment: str, db_url: str) -> tuple[dict, float]:
    from nbgrader.api import Gradebook, MissingEntry

    scores = {}
    with Gradebook(db_url) as gb:
        try:
            max_score = gb.find_assignment(assignment).max_score
        except MissingEntry:
            max_score = 0.0
        for sub in gb.assignment_submissions(assignment):
            scores[sub.student.id] = sub.score
    return scores, max_score


def grade_class(root: Path, assignment: str, timeout: float = 3600, force: bool = False,
                csv_path: Path | None = None, db_url: str | None = None, echo=print) -> list[dict]:
    root = Path(root).resolve()
    if not (root / "nbgrader_config.py").exists():
        raise FileNotFoundError(f"{root} has no nbgrader_config.py: run grade-class from the course root")
    submitted = root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    if not students:
        raise FileNotFoundError(f"no submissions of {assignment!r} under {submitted}")
    db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    state_file = root / "autograded" / f".grade-class-{assignment}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() and not force else {}
    for i, student in enumerate(students, 1):
        digest = _submission_hash(submitted / student / assignment)
        done = state.get(student)
        if done and done["hash"] == digest:
            echo(f"[{i}/{len(students)}] {student}: {done['status']} earlier, submission unchanged: skipped")
            continue
        started = time.time()
        status, reason = grade_one(root, assignment, student, timeout, db_url)
        state[student] = {"status": status, "reason": reason, "hash": digest}
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=1))  # after every student: an interrupted run resumes
        echo(f"[{i}/{len(students)}] {student}: {status} in {time.time() - started:.0f} s" + (f" ({reason})" if reason else ""))
    scores, max_score = _scores(root, assignment, db_url)
    rows = []
    for student in students:
        entry = state[student]
        score = scores.get(student, 0.0) if entry["status"] == GRADED else 0.0
        rows.append({"student_id": student, "assignment": assignment, "status": entry["status"],
                     "score": score, "max_score": max_score, "reason": entry["reason"]})
    csv_path = Path(csv_path or root / f"grades-{assignment}.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    counts = {s: sum(r["status"] == s for r in rows) for s in (GRADED, CRASHED, TIMED_OUT)}
    echo(f"{len(rows)} students: {counts[GRADED]} graded, {counts[CRASHED]} crashed, {counts[TIMED_OUT]} timed out, "
         f"0 lost; wrote {csv_path}")
    return rows
