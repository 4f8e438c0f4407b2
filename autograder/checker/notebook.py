"""The self-learner's checker: run a notebook in a fresh process, with a timeout, and grade it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import config, runtime
from autograder import specs as registry
from autograder.guard import procs
from autograder.judge.launch import JudgeProcess, overrule
from autograder.report import FAILED, CriterionResult, Report, format_table

DEFAULT_TIMEOUT = 1800  # seconds: the GPU benchmarks of a notebook included


_CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([\w.\-]+)["']""")


def notebook_exercises(path: Path) -> list:
    """The exercises a notebook holds, whatever its file is called: those its nbgrader graded cells check
    (check("02.rmsnorm", ...)), else those any of its cells checks, else those of the course notebook of its
    name. In the course's order."""

    try:
        cells = json.loads(path.read_text()).get("cells", [])
    except (OSError, ValueError, AttributeError):
        cells = []
    code = [c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]

    def called(chosen) -> set:
        found = set()
        for c in chosen:
            source = c.get("source", "")
            found.update(_CHECK_CALL.findall(source if isinstance(source, str) else "".join(source)))
        return found

    graded = [c for c in code if (c.get("metadata", {}).get("nbgrader") or {}).get("grade")]
    ids = called(graded) or called(code)
    known = [ex for ex in registry.all_exercises() if ex.id in ids]
    return known or registry.for_notebook(path.stem)


def _all_failed(path: Path, reason: str, criteria=None, only=None) -> list[Report]:
    reports = []
    for ex in notebook_exercises(path):
        if only and ex.id not in only:
            continue
        chosen = [c for c in (criteria or ex.criteria) if c in ex.criteria]
        reports.append(Report(ex.id, [CriterionResult(c, FAILED, reason) for c in chosen]))
    return reports


def validate_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such notebook: {path}")
    if p.suffix != ".ipynb":
        raise ValueError(f"{path} is not a notebook (.ipynb)")
    if not notebook_exercises(p):

        known = sorted({ex.notebook for ex in registry.all_exercises()})
        raise ValueError(f"{p.name} holds no graded exercises (no cell calls check(\"ID\", ...)); graded notebooks: "
                         f"{', '.join(known)}")
    return p


def run(path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT, criteria=None, echo=None, only=None) -> dict:
    """Run and grade one notebook in a child process (only the exercises named in `only`, when given). Never
    raises for what the notebook does."""
    path = validate_path(path)
    ids = [ex.id for ex in notebook_exercises(path) if not only or ex.id in only]
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
        env.setdefault(runtime.SMALL_DEMOS_ENV, "1")  # the demonstrations' plots are not read here
        with _judge_for(env, Path(tmp)) as judge:
            if judge is not None:
                env = judge.student_env(env)
            result = _run_child(path, result_file, env, timeout, criteria, echo, ids)
            if judge is not None:
                overrule(result["reports"], judge.close())
        return result


@contextlib.contextmanager
def _judge_for(env: dict, folder: Path):
    """A judge holding the grading file's settings when FUSION_COURSE_GRADING names a course's own (its secret
    seed must stay out of the notebook's process); None for the package's public defaults."""
    grading = env.get(config.ENV_VAR)
    if not grading or Path(grading).resolve() == config.DEFAULT_PATH.resolve():
        yield None
        return
    with JudgeProcess(folder / "judge.sock", grading, env) as judge:
        yield judge


def _run_child(path: Path, result_file: Path, env: dict, timeout: float, criteria, echo, ids) -> dict:
    """Run the notebook's process and read back what it reported (every exercise failed when it did not finish)."""
    cmd = [sys.executable, "-m", "autograder.checker.execute", str(path.resolve()), str(result_file),
           ",".join(criteria or []), ",".join(ids)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            start_new_session=True)
    log: list[str] = []
    try:
        import threading

        def pump():
            for line in proc.stdout:
                log.append(line)
                if echo:
                    echo(line.rstrip("\n"))

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        proc.wait(timeout=timeout)
        t.join(5)
    except subprocess.TimeoutExpired:
        procs.kill_tree(proc.pid)  # processes in sessions of their own too (Linux)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return _result(path, _all_failed(path, f"timed out after {timeout:.0f} s: the notebook did not finish", criteria, ids),
                       [], log)
    if proc.returncode != 0 or not result_file.exists():
        rc = proc.returncode
        how = f"was killed by {procs.signal_meaning(-rc)}" if rc < 0 else f"exited with code {rc}"
        tail = "".join(log[-15:]).strip()
        reason = f"the notebook's process {how} before grading finished (a crash in the code?)\n{tail}"
        return _result(path, _all_failed(path, reason, criteria, ids), [], log)
    data = json.loads(result_file.read_text())
    reports = [Report(r["exercise"], [CriterionResult(**c) for c in r["results"]], notes=r.get("notes", []))
           for r in data["reports"] if not r.get("not_started")]
    not_started = [r["exercise"] for r in data["reports"] if r.get("not_started")]
    return _result(path, reports, data["cell_errors"], log, not_started, data.get("cell_seconds", []))


def _result(path, reports, cell_errors, log, not_started=(), cell_seconds=()) -> dict:
    return {"notebook": str(path), "reports": reports, "cell_errors": cell_errors, "log": "".join(log),
            "not_started": list(not_started), "cell_seconds": [tuple(c) for c in cell_seconds]}


def _stub_stopped(error: dict) -> bool:
    """A cell that stopped at a stub not written yet (the release's `raise NotImplementedError()`)."""
    return error["error"].startswith("NotImplementedError")


def passed(result: dict) -> bool:
    """Every graded exercise passed, and no cell raised (but at a stub: its exercise, if graded, is not started)."""
    errors = [e for e in result["cell_errors"] if not _stub_stopped(e)]
    return all(r.passed for r in result["reports"]) and not errors and not result.get("not_started")


def render(result: dict) -> str:
    lines = [f"== {result['notebook']}"]
    for e in result["cell_errors"]:
        if _stub_stopped(e):
            lines.append(f"cell {e['cell']} stopped at an exercise not started yet (NotImplementedError)")
        else:
            lines.append(f"cell {e['cell']} raised {e['error']}")
    lines += [f"{ex}: not started" for ex in result.get("not_started", [])]
    if result["reports"]:
        lines.append(format_table(result["reports"]))
    lines.append("PASSED" if passed(result) else "FAILED")
    return "\n".join(lines)


def to_json(result: dict) -> dict:
    return {
        "notebook": result["notebook"],
        "passed": passed(result),
        "cell_errors": result["cell_errors"],
        "not_started": result.get("not_started", []),
        "reports": [r.to_dict() for r in result["reports"]],
    }
