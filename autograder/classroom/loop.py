"""The class loop of grade-class: students handed to a runner (class_runner) as slots free up, each result taken
back by this one process, which alone writes the gradebook, the state file and the CSV.

What grading one student may not change (autograder.guard.footprint) is checked after every student. With one student
at a time a change is that student's; with several in flight it could be any of them, so none of their results
is kept: the gradebook is put back, and those students are graded again at the end, one at a time, where a
change is attributed exactly (and recorded as "tampered", as a one-at-a-time run does).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from autograder.classroom import leaderboard
from autograder.classroom.course import (
    CRASHED,
    GRADED,
    IN_PROGRESS,
    NOT_MEASURED,
    NOT_RUN,
    RETRIED,
    TAMPERED,
    GradingStopped,
    private_gradebook,
    sqlite_file,
    submission_hash,
    workspace,
)
from autograder.classroom.gradebook import save_grades, save_not_graded, submission_flags
from autograder.guard.footprint import Footprint, watched_roots


def _relative(paths, root: Path) -> list[str]:
    import os

    return [os.path.relpath(p, root) if Path(p).is_relative_to(root) else p for p in paths]


class ClassRun:
    def __init__(self, course, assignment: str, db_url: str, state: dict, state_file: Path, tmp: Path,
                 echo=print, progress: bool = True, sandboxed: bool | None = None):

        self.course, self.assignment, self.db_url, self.state = course, assignment, db_url, state
        self.state_file, self.tmp, self.echo, self.progress = state_file, tmp, echo, progress
        self.db_file = sqlite_file(db_url).resolve()
        self.journal = self.db_file.with_name(self.db_file.name + "-journal")
        # grading/ holds this run's log as it is written (and, after the run, its CSV and reports)
        # sandboxed: whether the students' processes run in bubblewrap (None: as this machine would decide); a
        # cluster's nodes decide for themselves, so a class graded there watches what an unsandboxed run would.
        self.footprint = Footprint(watched_roots(course.root, sandboxed=sandboxed), ignore=[tmp, course.results])
        self.template = private_gradebook(self.db_file, tmp)
        self.good = tmp / "gradebook-good.db"  # the gradebook as this process last left it
        shutil.copy(self.db_file, self.good)
        self.bar = None
        self.unmeasured: list[str] = []  # students to grade again once the GPU is free

    # -- state ------------------------------------------------------------------------------------------------

    def save_state(self) -> None:
        import json

        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(self.state, indent=1))
        self.footprint.refresh([self.state_file])

    def todo(self, students: list[str]) -> list[str]:
        """The students to grade: a submission graded before and unchanged is skipped (an interrupted run resumes),
        one during which the class run died twice is recorded as crashed."""

        out = []
        for i, student in enumerate(students, 1):
            counter = f"[{i}/{len(students)}]"
            digest = submission_hash(self.course.root / self.course.submitted / student / self.assignment)
            done = self.state.get(student)
            same = bool(done) and done["hash"] == digest
            if same and done["status"] not in RETRIED:
                self.echo(f"{counter} {student}: {done['status']} earlier, submission unchanged: skipped")
            elif same and done.get("attempts", 0) >= 2:
                self.state[student] = dict(done, status=CRASHED, reason="the class run itself died twice while "
                                           "grading this submission (does it kill the grader's processes?)")
                self.save_state()
                self.echo(f"{counter} {student}: {CRASHED} ({self.state[student]['reason']})")
            else:
                out.append(student)
        return out

    # -- one student ------------------------------------------------------------------------------------------

    def _prepare(self, student: str) -> dict:

        root = self.course.root
        digest = submission_hash(root / self.course.submitted / student / self.assignment)
        done = self.state.get(student)
        same = bool(done) and done["hash"] == digest
        attempts = done.get("attempts", 0) + 1 if same else 1
        self.state[student] = {"status": IN_PROGRESS, "hash": digest, "attempts": attempts, "reason": "", "flags": []}
        self.save_state()
        flags = submission_flags(self.course, self.assignment, student, self.db_url)
        work = workspace(self.course, self.assignment, student, self.template, self.tmp)
        return {"previous": done, "digest": digest, "attempts": attempts, "flags": flags, "work": work,
                "started": time.time()}

    def _forget(self, student: str, prep: dict) -> None:
        """Back to the state before this student was started (an interrupted run, or a result not kept)."""
        if prep["previous"] is None:
            self.state.pop(student, None)
        else:
            self.state[student] = prep["previous"]
        shutil.rmtree(prep["work"], ignore_errors=True)

    def _record(self, student: str, prep: dict, status: str, reason: str, flags: list[str],
                figures: dict | None = None) -> None:
        self.state[student] = {"status": status, "hash": prep["digest"], "attempts": prep["attempts"],
                               "reason": reason, "flags": flags, "performance": figures or {}}
        self.save_state()
        shutil.rmtree(prep["work"], ignore_errors=True)
        where = f" on {prep['where']}" if prep.get("where") else ""
        self.echo(f"{student}: {status} in {time.time() - prep['started']:.0f} s{where}"
                  + (f" ({reason})" if reason else "") + (f" [{len(flags)} flag(s)]" if flags else ""))
        if self.bar is not None:
            self.bar.update()
            self.counts[GRADED if status in (GRADED, NOT_MEASURED) else "failed"] += 1  # not run counts as failed
            self.bar.set_postfix(graded=self.counts[GRADED], failed=self.counts["failed"], refresh=False)

    def _not_graded(self, student: str, status: str, reason: str) -> None:
        """A student whose notebook was not graded: 0 for every graded cell in the gradebook, and a feedback
        notebook in autograded/ saying why (a failure here is said; the CSV still has the student)."""
        try:
            save_not_graded(self.course, self.assignment, student, self.db_url, status, reason)
        except Exception as exc:  # noqa: BLE001  the row in the CSV stands without it
            self.echo(f"{student}: no feedback page written ({type(exc).__name__}: {exc})")
        self.footprint.refresh([self.course.root / self.course.autograded / student / self.assignment,
                                self.db_file, self.journal])
        shutil.copy(self.db_file, self.good)

    def _restore_gradebook(self) -> list[str]:
        """Put the gradebook back as this process left it; returns what else changed and cannot be put back."""
        shutil.copy(self.good, self.db_file)
        self.journal.unlink(missing_ok=True)
        self.save_state()
        self.footprint.refresh([self.db_file, self.journal])
        return self.footprint.changes()

    def _finish(self, student: str, prep: dict, status: str, reason: str, changed: list[str]) -> None:
        """Keep one student's result: a change outside their workspace (theirs alone: nobody else was in flight)
        makes them "tampered"; otherwise their grades go into the gradebook."""
        flags = list(prep["flags"])
        unrestorable, figures = [], {}
        if changed:
            unrestorable = self._restore_gradebook()
            listed = ", ".join(_relative(changed[:6], self.course.root)) + (
                f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            status, reason = TAMPERED, f"changed files outside its own workspace: {listed}"
        elif status == GRADED:
            more, unmeasured = save_grades(self.course, prep["work"], self.assignment, student, self.db_url)
            flags += more
            figures = leaderboard.read(prep["work"])
            self.footprint.refresh([self.course.root / self.course.autograded / student / self.assignment,
                                    self.db_file, self.journal])
            shutil.copy(self.db_file, self.good)
            if unmeasured:
                status = NOT_MEASURED
                reason = (f"performance not measured in {', '.join(unmeasured)}: the GPU was busy with other work "
                          "(those cells score 0 until then); run grade-class again when it is free")
                self.unmeasured.append(student)
        if status not in (GRADED, NOT_MEASURED):
            self._not_graded(student, status, reason)
        self._record(student, prep, status, reason, flags, figures)
        if unrestorable:
            raise GradingStopped(
                f"grading stopped: {student}'s notebook changed files that the grading of other students depends "
                f"on: {', '.join(_relative(unrestorable[:10], self.course.root))}. Restore them (from version control "
                "or a backup) and run again: the run resumes after the students already graded.")

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self, students: list[str], runner, one_at_a_time: bool = False) -> list[str]:
        """Grade these students through the runner; returns those whose results were not kept because a change
        outside the workspaces appeared while several were in flight (to be graded again one at a time)."""
        from tqdm.auto import tqdm

        limit = 1 if one_at_a_time else runner.capacity
        pending, in_flight, suspects, tainted = list(students), {}, [], []
        self.counts = {GRADED: 0, "failed": 0}
        self.bar = tqdm(total=len(students), desc=f"grading {self.assignment}", unit="student",
                        disable=not self.progress or not students)
        try:
            while pending or in_flight:
                while pending and not tainted and len(in_flight) < limit and runner.has_room():
                    student = pending.pop(0)
                    prep = self._prepare(student)
                    try:
                        prep["where"] = runner.start(student, prep["work"], self.assignment)
                    except Exception as exc:  # noqa: BLE001  a refused submission is recorded, not lost
                        reason = (f"grading could not be started ({type(exc).__name__}: {str(exc).strip()[:300]}); "
                                  "the next run tries again")
                        self._not_graded(student, NOT_RUN, reason)
                        self._record(student, prep, NOT_RUN, reason, prep["flags"])
                        continue
                    in_flight[student] = prep
                if not in_flight:
                    continue
                student, status, reason = runner.wait()
                prep = in_flight.pop(student)
                changed = self.footprint.changes()
                if tainted or (changed and in_flight):
                    # Several were in flight when something outside the workspaces changed: whose was it? None of
                    # these results is kept; each student is graded again alone at the end.
                    if not tainted:
                        self.echo(f"a file outside the students' workspaces changed while {len(in_flight) + 1} were "
                                  f"graded at once ({', '.join(_relative(changed[:3], self.course.root))}): their "
                                  "results are set aside, to be graded again one at a time")
                    tainted.append(student)
                    self._forget(student, prep)
                    unrestorable = self._restore_gradebook()
                    if not in_flight:
                        suspects += tainted
                        tainted = []
                        self.save_state()
                        if unrestorable:
                            raise GradingStopped(
                                "grading stopped: while " + ", ".join(suspects) + " were graded at once, files that "
                                "the grading of other students depends on changed: "
                                f"{', '.join(_relative(unrestorable[:10], self.course.root))}. Restore them and run "
                                "again with one student at a time: the run resumes after the students already "
                                "graded, and names whose notebook it was.")
                    continue
                self._finish(student, prep, status, reason, changed)
        except BaseException:
            runner.stop()
            for student, prep in in_flight.items():
                self._forget(student, prep)
            self.save_state()
            raise
        finally:
            self.bar.close()
            self.bar = None
        return suspects
