"""The self-learner's checker: run a notebook in a fresh process, with a timeout, and grade it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import runtime
from autograder.guard import procs
from autograder.report import FAILED, CriterionResult, Report, format_table

DEFAULT_TIMEOUT = 1800  # seconds: the GPU benchmarks of a notebook included


def _stem_exercises(path: Path):
    from autograder import specs as registry

    return registry.for_notebook(path.stem)


def _all_failed(path: Path, reason: str, criteria=None) -> list[Report]:
    reports = []
    for ex in _stem_exercises(path):
        chosen = [c for c in (criteria or ex.criteria) if c in ex.criteria]
        reports.append(Report(ex.id, [CriterionResult(c, FAILED, reason) for c in chosen]))
    return reports


def validate_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such notebook: {path}")
    if p.suffix != ".ipynb":
        raise ValueError(f"{path} is not a notebook (.ipynb)")
    if not _stem_exercises(p):
        from autograder import specs as registry

        known = sorted({ex.notebook for ex in registry.all_exercises()})
        raise ValueError(f"{p.name} holds no graded exercises; graded notebooks: {', '.join(known)}")
    return p


def run(path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT, criteria=None, echo=None) -> dict:
    """Run and grade one notebook in a child process. Never raises for what the notebook does."""
    path = validate_path(path)
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
        env.setdefault(runtime.SMALL_DEMOS_ENV, "1")  # the demonstrations' plots are not read here
        cmd = [sys.executable, "-m", "autograder.checker.execute", str(path.resolve()), str(result_file),
               ",".join(criteria or [])]
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
            return _result(path, _all_failed(path, f"timed out after {timeout:.0f} s: the notebook did not finish", criteria),
                           [], log)
        if proc.returncode != 0 or not result_file.exists():
            rc = proc.returncode
            how = f"was killed by {procs.signal_meaning(-rc)}" if rc < 0 else f"exited with code {rc}"
            tail = "".join(log[-15:]).strip()
            reason = f"the notebook's process {how} before grading finished (a crash in the code?)\n{tail}"
            return _result(path, _all_failed(path, reason, criteria), [], log)
        data = json.loads(result_file.read_text())
    reports = [Report(r["exercise"], [CriterionResult(**c) for c in r["results"]], notes=r.get("notes", []))
               for r in data["reports"]]
    return _result(path, reports, data["cell_errors"], log)


def _result(path, reports, cell_errors, log) -> dict:
    return {"notebook": str(path), "reports": reports, "cell_errors": cell_errors, "log": "".join(log)}


def passed(result: dict) -> bool:
    return all(r.passed for r in result["reports"]) and not result["cell_errors"]


def render(result: dict) -> str:
    lines = [f"== {result['notebook']}"]
    for e in result["cell_errors"]:
        lines.append(f"cell {e['cell']} raised {e['error']}")
    lines.append(format_table(result["reports"]))
    lines.append("PASSED" if passed(result) else "FAILED")
    return "\n".join(lines)


def to_json(result: dict) -> dict:
    return {
        "notebook": result["notebook"],
        "passed": passed(result),
        "cell_errors": result["cell_errors"],
        "reports": [r.to_dict() for r in result["reports"]],
    }
