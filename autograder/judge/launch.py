"""Starting a judge for one graded process and reading its record afterwards (grade-class and the checker)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Self

from autograder import specs as registry
from autograder.config import DEFAULT_PATH
from autograder.config import ENV_VAR as GRADING_ENV
from autograder.link.session import ENV_VAR as JUDGE_ENV
from autograder.link.session import JudgeError
from autograder.report import FAILED
from autograder.specs.exercise import KernelExercise

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60  # for the judge to write its record once its stdin closes
JUDGED_CRITERIA = ("correctness", "precision", "performance")  # of a kernel exercise
VERDICTS_NAME = ".judge-verdicts.json"  # grade-class writes the judge's record there once the student is done


def read_verdicts(work: Path) -> list[dict] | None:
    """The judge's record saved in a graded workspace, or None when there is none."""
    try:
        return json.loads((Path(work) / VERDICTS_NAME).read_text())["verdicts"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class JudgeProcess:
    """`python -m autograder.judge.server SOCKET`, holding the grading file's settings: started (and listening)
    when the context opens, its record of verdicts read by close()."""

    def __init__(self, socket_path: str | os.PathLike, grading_file: str | os.PathLike, env: dict | None = None):
        self.socket_path = Path(socket_path)
        self.env = dict(env if env is not None else os.environ, **{GRADING_ENV: str(grading_file)})
        self.env.pop(JUDGE_ENV, None)
        self.proc: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.said: list[str] = []  # what it said besides its record (the last lines)
        self.record: str | None = None

    def start(self) -> int:
        """Start the judge (its pid); ready() waits until it listens."""
        self.socket_path.unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "autograder.judge.server", str(self.socket_path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=self.env, text=True, start_new_session=True)
        return self.proc.pid

    def ready(self) -> None:
        """Wait until the judge listens (raises JudgeError with what it said when it cannot start)."""
        timer = threading.Timer(START_TIMEOUT_S, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                if line.strip() == "listening":
                    # Whatever it says from now on is read as it comes: a full pipe would stop the judge.
                    self.reader = threading.Thread(target=self._listen, daemon=True)
                    self.reader.start()
                    return
                self.said.append(line.rstrip())
        finally:
            timer.cancel()
        self.proc.wait()
        raise JudgeError(f"the judge did not start (exit code {self.proc.returncode}): "
                         + " | ".join(self.said[-5:]))

    def _listen(self) -> None:
        for line in self.proc.stdout:
            if line.startswith('{"verdicts"'):
                self.record = line
            else:
                self.said = [*self.said[-20:], line.rstrip()]

    def __enter__(self) -> Self:
        self.start()
        self.ready()
        return self

    def student_env(self, env: dict) -> dict:
        """env for the graded process: the judge's socket, and the package's public settings in place of the
        grading file (whose settings stay with the judge)."""
        return dict(env, **{JUDGE_ENV: str(self.socket_path), GRADING_ENV: str(DEFAULT_PATH)})

    def close(self) -> list[dict]:
        """Stop the judge; every verdict it made, in order."""
        if self.proc is None or self.reader is None:
            raise JudgeError("the judge was not started")
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.reader.join(STOP_TIMEOUT_S)
        self.stop()
        if self.record is None:
            raise JudgeError("the judge ended without its record: " + " | ".join(self.said[-5:]))
        return json.loads(self.record)["verdicts"]

    def stop(self) -> None:
        """End the judge without its record (when grading went wrong before close())."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            if self.reader is not None:
                self.reader.join(5)  # it reads to the end of what the judge said
            for pipe in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self.proc = None
        self.socket_path.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        self.stop()


def judged_pair(exercise_id: str, criterion: str) -> bool:
    """True when the judge makes the verdict of this criterion of this exercise."""
    try:
        ex = registry.get(exercise_id)
    except KeyError:
        return False
    return isinstance(ex, KernelExercise) and criterion in JUDGED_CRITERIA and criterion in ex.criteria


def judge_said(verdicts: list[dict], exercise_id: str, criterion: str) -> str | None:
    """The judge's status for a criterion: passed (or skipped) when any verdict of it was not a failure, failed
    when every one was, None when it made none."""
    found = [v["status"] for v in verdicts if v.get("exercise") == exercise_id and v.get("criterion") == criterion]
    if not found:
        return None
    return next((s for s in found if s != FAILED), FAILED)


def overrule(reports: list, verdicts: list[dict]) -> None:
    """The judged criteria of reports as the judge decided them: a pass the graded process reported stands only
    where the judge passed (or skipped) that criterion too."""
    for report in reports:
        for result in report.results:
            if result.status == FAILED or not judged_pair(report.exercise, result.name):
                continue
            said = judge_said(verdicts, report.exercise, result.name)
            if said in (None, FAILED):
                result.status = FAILED
                result.message = (f"the judge {'failed' if said else 'made no verdict on'} this criterion; the "
                                  f"notebook's process reported: {result.message}")
