"""Run a notebook's code without Jupyter and grade the exercises it holds (the child side of the checker).

    python -m autograder.checker.execute NOTEBOOK.ipynb RESULT.json [criteria,...] [exercise ids,...]

Code cells run in order in one namespace, as a kernel would run them, except nbgrader's graded test cells
(those call check() themselves). A cell that raises is recorded and the next one runs, the way "Run All"
would have stopped on a student's unfinished cell; the exercises are graded afterwards. Under the grader's
switch a demonstration cell prints one line instead of running (autograder.demonstrations).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path


def _is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def _failed_report(exercise_id: str, criteria: list[str], reason: str) -> dict:
    results = [{"name": c, "status": "failed", "message": reason, "figures": {}} for c in criteria]
    return {"exercise": exercise_id, "passed": False, "results": results}


_NOT_DONE = "raised NotImplementedError: the exercise is not done yet"  # criteria.cases.student_error's words


def _not_started(report) -> bool:
    """True when every criterion that ran stopped at the release's placeholder (raise NotImplementedError())."""
    failed = [r for r in report.results if r.status == "failed"]
    every_case = all(r.figures.get("failed", 0) >= r.figures.get("cases", 0) - 1 for r in failed)  # the cache probe
    return bool(failed) and every_case and not any(r.status == "passed" for r in report.results) \
        and all(_NOT_DONE in r.message for r in failed)


def main(argv: list[str]) -> int:
    nb_path, out_path = Path(argv[0]).resolve(), Path(argv[1])
    criteria = argv[2].split(",") if len(argv) > 2 and argv[2] else None
    ids = argv[3].split(",") if len(argv) > 3 and argv[3] else None
    # Plain JSON, not nbformat: the checker must run where Jupyter is not installed (a bare GPU machine).
    nb = json.loads(nb_path.read_text())
    os.chdir(nb_path.parent)
    import autograder  # picks the device before any cell defines a kernel
    from autograder import demonstrations
    from autograder import specs as registry
    from autograder.guard import integrity

    registry.all_exercises()  # load the specs now, so that they are recorded
    integrity.protect()  # record the grader before any of the notebook's code runs
    real_check = autograder.check  # graded below through this reference, whatever the cells rebind
    from autograder.check import compile_ahead  # the same

    namespace = {"__name__": "__main__", "__file__": str(nb_path)}
    cells_dir = Path(tempfile.mkdtemp(prefix="notebook-cells-"))
    cell_errors = []
    cell_seconds = []  # (cell index, seconds) of every code cell run: where a check's time goes
    code_cells = [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and not _is_test_cell(c)]
    for n, (i, cell) in enumerate(code_cells, 1):
        started = time.time()
        print(f"[cell {n}/{len(code_cells)}] running ...", flush=True)
        source, skipped = "", ""
        try:
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            run = demonstrations.as_run(source)  # a demonstration's one line, under the grader's switch
            skipped = " (a demonstration, skipped while grading)" if run is not source else ""
            # A real file per cell: compiled Triton reads a @jit function's source with inspect.
            cell_file = cells_dir / f"{nb_path.stem}_cell{i}.py"
            cell_file.write_text(run)
            exec(compile(run, str(cell_file), "exec"), namespace)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt in a cell are the cell's failure too
            tb = traceback.format_exception(exc)
            defines = re.findall(r"^def (\w+)\(", source, re.M)
            cell_errors.append({"cell": i, "error": f"{type(exc).__name__}: {exc}", "traceback": "".join(tb[-3:]),
                                "defines": defines})
            print(f"[cell {n}/{len(code_cells)}] raised {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"[cell {n}/{len(code_cells)}] done in {time.time() - started:.1f} s{skipped}", flush=True)
        cell_seconds.append((i, round(time.time() - started, 2)))
        import matplotlib.pyplot as plt

        plt.close("all")

    integrity.restore()  # the grader as recorded, whatever the cells did to it (check() names what they did)
    exercises = [registry.get(i) for i in ids] if ids else registry.for_notebook(nb_path.stem)
    defined = [(ex.id, namespace[ex.function], criteria) for ex in exercises if callable(namespace.get(ex.function))]
    if len(defined) > 1 and autograder.runtime.has_gpu():  # a notebook's kernels compile side by side, not in turns
        started = time.time()
        print(f"[grade] compiling the kernels of {len(defined)} exercises side by side ...", flush=True)
        submitted = compile_ahead(defined)
        print(f"[grade] {submitted} compilations in {time.time() - started:.1f} s", flush=True)
    reports = []
    for ex in exercises:
        chosen = [c for c in (criteria or ex.criteria) if c in ex.criteria]
        if not chosen:
            continue
        fn = namespace.get(ex.function)
        print(f"[grade] {ex.id} ...", flush=True)
        if fn is None:
            raised = [e for e in cell_errors if ex.function in e["defines"]]
            if not raised or raised[0]["error"].startswith("NotImplementedError"):
                print(f"[grade] {ex.id}: not started ({ex.function} is not defined)", flush=True)
                reports.append(dict(_failed_report(ex.id, chosen, f"{ex.function} is not defined"), not_started=True))
                continue
            reason = f"{ex.function} is not defined in the notebook: the cell that defines it raised {raised[0]['error']}"
            reports.append(_failed_report(ex.id, chosen, reason))
            continue
        started = time.time()
        try:
            report = real_check(ex.id, fn, criteria=chosen)
        except integrity.TamperingError as exc:
            reports.append(_failed_report(ex.id, chosen, str(exc)))
            continue
        took = ", ".join(f"{r.name} {r.seconds:.1f}" for r in report.results if r.seconds is not None)
        print(f"[grade] {ex.id} done in {time.time() - started:.1f} s ({took})", flush=True)
        if _not_started(report):
            print(f"[grade] {ex.id}: not started ({ex.function} {_NOT_DONE})", flush=True)
            reports.append(dict(report.to_dict(), not_started=True))
            continue
        print(report.summary(), flush=True)  # in the log too: it survives a crash at exit
        reports.append(report.to_dict())
    shutil.rmtree(cells_dir, ignore_errors=True)
    Path(out_path).write_text(json.dumps({"notebook": str(nb_path), "cell_errors": cell_errors,
                                          "cell_seconds": cell_seconds, "reports": reports}, default=str))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The results are written: leave without the interpreter's shutdown, during which a thread the notebook left
    # running (still launching GPU work) can abort the process and turn a finished grading into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
