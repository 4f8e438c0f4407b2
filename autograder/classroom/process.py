"""One student's grading process, seen from the class run: its private environment, its sandbox (guard.sandbox:
nothing outside its workspace writable, no network, no other process visible), its start and time limit, the
clean-up of what it leaves behind, and its result read back as a status and a reason."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from autograder import config, runtime
from autograder.classroom import compile_cache, leaderboard
from autograder.classroom.fonts import seed_font_cache
from autograder.classroom.course import CRASHED, GRADED, NOT_RUN, TIMED_OUT
from autograder.config import ENV_VAR
from autograder.guard import procs, sandbox
from autograder.judge.launch import VERDICTS_NAME, JudgeProcess
from autograder.link.session import JudgeError
from autograder.publish.build import tool_env

JUDGE_SOCKET = ".judge.sock"  # in the workspace: the one folder the sandbox shares with the class run


# An exception's last line in a traceback or a log ("jupyter_client.kernelspec.NoSuchKernel: No such kernel ...").
_RAISED = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Kernel|Exit|Interrupt)): (.+)$")


def why_it_failed(output: str) -> str:
    text = output.lower()
    if "kernel died" in text or "deadkernel" in text or "kernel crashed" in text:
        return "the notebook's kernel died while running (a crash: segfault, abort, os._exit, out of memory?)"
    # nbgrader ends with "NbGraderException: Please see the above traceback": the cause is the error before it
    raised = [m for m in map(_RAISED.match, output.splitlines()) if m and "NbGraderException" not in m.group(1)]
    name, message = (raised[-1].group(1).rsplit(".", 1)[-1], raised[-1].group(2).strip()) if raised else ("", "")
    if name == "NoSuchKernel":
        return f"nbgrader could not start the notebook's Jupyter kernel: {message[:200]} (is it installed here?)"
    if "cellexecutionerror" in text or "timeout" in text:
        return "nbgrader could not execute the notebook"
    if name:
        return f"nbgrader did not grade it: {name}: {message[:300]}"
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return "nbgrader did not grade it: " + (lines[-1][-300:] if lines else "no output")


def child_env(work: Path) -> dict:
    """nbgrader's environment, with every cache and runtime folder the notebook could use kept private. No grading
    settings: the judge holds them (its socket is added by grade_one)."""
    env = tool_env()
    env.pop(ENV_VAR, None)
    env.pop(leaderboard.RECORD_ENV, None)  # the judge keeps the performance figures (save_judged writes them)
    env[runtime.SMALL_DEMOS_ENV] = "1"  # nobody reads the demonstrations' plots in a class run
    private = {**compile_cache.COMPILE_CACHES, "IPYTHONDIR": "ipython", "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
               "MPLCONFIGDIR": "matplotlib"}
    for var, name in private.items():
        env[var] = str(work / ".private" / name)
    seed_font_cache(work / ".private" / "matplotlib")
    env.update(PYTHONDONTWRITEBYTECODE="1", PWD=str(work))
    env.pop("OLDPWD", None)
    return env


class Running:
    """The grading processes in flight (their pids), shared by the threads that start them: a leftover is any other
    child of this process. One lock orders starting a process and ending leftovers, so a process just started by
    one thread is never taken for another's leftover."""

    def __init__(self):
        self.lock = threading.Lock()
        self._pids: set[int] = set()

    def pids(self) -> set[int]:
        with self.lock:
            return set(self._pids)

    def add(self, pid: int) -> None:
        self._pids.add(pid)  # called with the lock held

    def discard(self, pid: int) -> None:
        with self.lock:
            self._pids.discard(pid)


def grade_one(work: Path, assignment: str, student: str, timeout: float, grading_file: Path,
              extra_env: dict | None = None, running: Running | None = None,
              sandboxing: str | None = None) -> tuple[str, str]:
    """(status, reason): nbgrader's autograde of one student in its workspace, in a process of its own.

    extra_env: what this student's process gets on top (the GPU it may see). running: the processes of the other
    students graded at the same time, which the clean-up after this one must leave alone. sandboxing: auto,
    required or off (default: FUSION_COURSE_SANDBOX, else auto); where the sandbox is required and cannot be
    made, the student is not run."""
    work = Path(work).resolve()
    try:
        plan = sandbox.choose(sandboxing)
    except sandbox.SandboxUnavailable as exc:
        return NOT_RUN, f"{exc}; the next run tries again"
    cmd = [sys.executable, "-m", "autograder.classroom.student", str(work), assignment, student]
    if plan.use:
        cmd = sandbox.command(cmd, work, plan.bwrap, hide=[work.parent],
                              conceal=[grading_file, config.secret_file(grading_file)])
    running = running or Running()
    env = child_env(work)
    env.update(extra_env or {})
    if env.get("CUDA_VISIBLE_DEVICES") not in ("", "-1"):
        compile_cache.seed(work / ".private")  # what the grader compiles of its own, compiled once on this machine
    judge = JudgeProcess(work / JUDGE_SOCKET, grading_file, env)
    with running.lock:  # the judge is no leftover of another student's
        pid = judge.start()
        running.add(pid)
    try:
        judge.ready()
        status, reason = _graded(work, cmd, judge.student_env(env), timeout, running, plan,
                                 work / "autograded" / student / assignment)
        verdicts = judge.close()
    except JudgeError as exc:
        return NOT_RUN, f"{exc}; the next run tries again"
    finally:
        judge.stop()
        running.discard(pid)
    save_judged(work, verdicts)
    return status, reason


def student_result(output: str) -> dict:
    """The grading process's result: the last line of its output that is its JSON object (student.py prints it
    last, but a warning at interpreter exit, or a process the notebook left, may write after it); {} if none."""
    for line in reversed(output.splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and "success" in result:
            return result
    return {}


def save_judged(work: Path, verdicts: list[dict]) -> None:
    """The judge's record, into the workspace once nothing of the student's runs: its verdicts (gradebook.py
    checks the graded cells against them) and its performance figures (the leaderboard's)."""
    (work / VERDICTS_NAME).write_text(json.dumps({"verdicts": verdicts}))
    lines = [{"exercise": v["exercise"], "status": v["status"], "fraction": leaderboard.fraction_of(v["figures"])}
             for v in verdicts if v.get("criterion") == "performance" and "figures" in v]
    (work / leaderboard.FIGURES_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))


def _graded(work: Path, cmd: list[str], env: dict, timeout: float, running: Running, plan,
            produced: Path) -> tuple[str, str]:
    """Run the student's grading process to its end (or its time limit); its status and reason."""
    with running.lock:  # no other thread ends "leftovers" between the start and the record of this process
        before = procs.children()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        running.add(proc.pid)

    def end_leftovers():
        # Orphans climb up to this (subreaper) process: every child that is neither a grading still in flight nor
        # there before this one started is a leftover.
        with running.lock:
            procs.end_children(keep=before | (running._pids - {proc.pid}))

    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.kill_tree(proc.pid)
        end_leftovers()  # what slipped out of the tree while it was being ended
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)  # a survivor still holding the pipe must not hold up the class
        return TIMED_OUT, f"grading did not finish within {timeout:.0f} s (a hang or an endless loop?)"
    finally:
        running.discard(proc.pid)
        end_leftovers()
    result = student_result(output)
    graded = list(produced.glob("*.ipynb"))
    if proc.returncode == 0 and result.get("success") and graded:
        return GRADED, ""
    if result.get("reason"):
        return CRASHED, result["reason"]
    ended_by = -proc.returncode if proc.returncode < 0 else sandbox.exit_signal(proc.returncode) if plan.use else None
    if ended_by:
        return CRASHED, f"the grading process was ended by {procs.signal_meaning(ended_by)}"
    return CRASHED, why_it_failed(result.get("log", "") + result.get("error", "") or output)
