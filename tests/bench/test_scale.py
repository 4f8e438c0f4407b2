"""The scale benchmark (bench/scale.py) and the GPU-hours it feeds (bench/budget.py), without a
GPU: the class it builds (bench/submissions.py: every notebook's planted mistake, the submissions), grade-class's lines and CSV read
back, a run timed through a stand-in for grade-class, the record and its table, and the machines it refuses.

A real run grades the class twice through nbgrader on the GPUs, minutes a student: it is the GPU test at the end,
with one student of each kind; without a GPU only the pieces around it can run, which they do here in seconds."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import classroom
import nbformat
import pytest
import torch

from autograder.classroom import loop as class_loop
from autograder.classroom.course import FIELDS
from autograder.classroom.loop import ClassRun
from bench import budget, scale, submissions

ROOT = submissions.ROOT


def _notebooks(assignment):
    source = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    release = nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4)
    return source, release


@pytest.mark.parametrize("assignment", list(submissions.BUGS))
def test_each_notebooks_mistake_changes_one_answer_and_the_rest_is_handed_in_whole(assignment):
    source, release = _notebooks(assignment)
    good = submissions.answers(source)
    bad = submissions.broken(good, assignment)
    bug = submissions.BUGS[assignment]
    assert [cell for cell in good if good[cell] != bad[cell]] == [bug.cell]
    compile(bad[bug.cell], f"{assignment}:{bug.cell}", "exec")  # still Python: the notebook runs to the end
    handed_in = submissions.submission(release, bad)
    assert len(handed_in.cells) == len(release.cells)
    for mine, theirs in zip(handed_in.cells, release.cells):
        grade_id = theirs.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in bad:  # an answer: the reference's (or the mistake), without nbgrader's markers
            assert mine.source == bad[grade_id] and "### BEGIN SOLUTION" not in mine.source
            assert not any(line.strip().startswith("raise NotImplementedError") for line in mine.source.splitlines())
        else:  # everything else exactly as released (nbgrader's checksums of locked cells hold)
            assert mine == theirs


def test_notebook_01s_mistake_is_the_one_the_class_tests_plant():
    good = classroom.solutions()  # tests/classroom.py's small course, with nbgrader's markers still in
    bad = submissions.broken(good, "01_hbm_cost_model")
    assert bad["fused_chain"] == good["fused_chain"].replace("y = alpha * z * tl.sigmoid(z)", "y = alpha * z")


def test_a_missing_or_stale_mistake_is_a_clear_error():
    with pytest.raises(ValueError, match="no planted mistake for '08_x'; the assignments are 01_hbm_cost_model"):
        submissions.broken({}, "08_x")
    with pytest.raises(ValueError, match="needs updating"):
        submissions.broken({"fused_chain": "y = alpha * z"}, "01_hbm_cost_model")
    with pytest.raises(ValueError, match="the release has no cells \\['nowhere'\\]"):
        submissions.submission(_notebooks("01_hbm_cost_model")[1], {"nowhere": "x = 1"})


def _load_cell(source: str, path):
    """A cell's code as a module (Triton's jit reads a kernel's source from its file)."""
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebook_01s_planted_kernel_runs_and_computes_the_wrong_thing(tmp_path):
    good = submissions.answers(_notebooks("01_hbm_cost_model")[0])
    bad = submissions.broken(good, "01_hbm_cost_model")
    x, bias = torch.randn(37, 50), torch.randn(50)
    want = 1.5 * torch.nn.functional.silu(x + bias)
    right = _load_cell(good["fused_chain"], tmp_path / "right.py").fused_chain(x, bias, 1.5)
    wrong = _load_cell(bad["fused_chain"], tmp_path / "wrong.py").fused_chain(x, bias, 1.5)
    torch.testing.assert_close(right, want)
    assert torch.isfinite(wrong).all() and not torch.allclose(wrong, want, atol=1e-2)
    torch.testing.assert_close(wrong, 1.5 * (x + bias))


def test_the_students_alternate_kinds_in_grade_class_order():
    names = submissions.student_names(3)
    assert names == sorted(names) and len(names) == 6
    assert [submissions.kind_of(s) for s in names] == [submissions.SOLUTION, submissions.BUGGY] * 3


def test_grade_class_lines_are_read_back_as_it_writes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(class_loop, "time", SimpleNamespace(time=lambda: 1000.0))  # each student's seconds exact
    said = []
    run = SimpleNamespace(state={}, save_state=lambda: None, echo=said.append, bar=None)
    for student, status, reason, flags, where, seconds in [
        ("s01-solution", "graded", "", [], "GPU 1", 48),
        ("s02-buggy", "graded", "", ["edited locked cell x", "scan"], "GPU 0", 51),
        ("s03-solution", "performance not measured",
         "performance not measured in 01.fused_chain: the GPU was busy (those cells score 0 until then)", [], "GPU 1", 40),
        ("s04-buggy", "crashed", "the notebook's kernel was ended by SIGSEGV (a segmentation fault)", [], "", 7),
    ]:
        prep = {"digest": "d", "attempts": 1, "work": tmp_path / "gone", "started": 1000.0 - seconds,
                "where": where}
        ClassRun._record(run, student, prep, status, reason, flags)
    said += ["[1/5] s05-solution: graded earlier, submission unchanged: skipped",
             "grading mini on GPU 0, GPU 1: one student on each at a time",
             "s01-solution: no feedback page written (OSError: disk full)",
             "5 students: 3 graded, 1 crashed, 0 timed out, 0 tampered, 0 lost; wrote grading/grades-mini.csv"]
    seen = scale.parse_lines(said)
    assert seen == {"s01-solution": {"status": "graded", "seconds": 48.0, "where": "GPU 1"},
                    "s02-buggy": {"status": "graded", "seconds": 51.0, "where": "GPU 0"},
                    "s03-solution": {"status": "performance not measured", "seconds": 40.0, "where": "GPU 1"},
                    "s04-buggy": {"status": "crashed", "seconds": 7.0, "where": ""}}


def _write_grades(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for student, status, score in rows:
            writer.writerow({"student_id": student, "assignment": "a", "status": status, "score": score,
                             "max_score": 12.0, "reason": "", "flags": "", "fraction_of_peak": ""})


def test_grades_are_compared_student_by_student(tmp_path):
    _write_grades(tmp_path / "one.csv", [("s01-solution", "graded", 12.0), ("s02-buggy", "graded", 9.0)])
    _write_grades(tmp_path / "all.csv", [("s01-solution", "graded", 12.0), ("s02-buggy", "graded", 9.0)])
    one, every = scale.read_grades(tmp_path / "one.csv"), scale.read_grades(tmp_path / "all.csv")
    assert one["s02-buggy"] == {"status": "graded", "score": 9.0, "max_score": 12.0, "reason": ""}
    assert scale.differences(one, every) == []
    _write_grades(tmp_path / "all.csv", [("s01-solution", "crashed", 0.0), ("s02-buggy", "graded", 10.0),
                                         ("s03-solution", "graded", 12.0)])
    assert scale.differences(one, scale.read_grades(tmp_path / "all.csv")) == [
        "s01-solution: graded 12/12 with one GPU, crashed 0/12 with all GPUs",
        "s02-buggy: graded 9/12 with one GPU, graded 10/12 with all GPUs",
        "s03-solution: absent with one GPU, graded 12/12 with all GPUs"]


# A stand-in for `python -m autograder grade-class`: a line a student as grade-class prints them, then the CSV.
FAKE_GRADE_CLASS = """
import csv, sys, pathlib
args = sys.argv[1:]
if "--fail" in pathlib.Path("mode").read_text():
    print("error: no gradebook"); sys.exit(2)
students = sorted(p.parent.name for p in pathlib.Path("submitted").glob(f"*/{args[0]}"))
gpus = args[args.index("--gpus") + 1]
print("grading on " + gpus)
rows = []
for i, s in enumerate(students):
    print(f"{s}: graded in {10 + i} s on GPU {i % 2 if gpus == 'all' else 0}", flush=True)
    rows.append({"student_id": s, "status": "graded", "score": 3 if s.endswith("buggy") else 7, "max_score": 7})
path = pathlib.Path(args[args.index("--csv") + 1])
path.parent.mkdir(exist_ok=True)
with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["student_id", "status", "score", "max_score", "reason"])
    w.writeheader(); w.writerows(rows)
print(f"{len(students)} students: {len(students)} graded")
"""


def test_a_run_is_timed_and_read_back_through_grade_class_s_output(tmp_path):
    course = tmp_path / "course"
    for student in submissions.student_names(1):
        (course / "submitted" / student / "a1").mkdir(parents=True)
    (course / "mode").write_text("")
    fake = tmp_path / "grade_class.py"
    fake.write_text(textwrap.dedent(FAKE_GRADE_CLASS))
    run = scale.run_class(course, "a1", "all", 2, 60, dict(os.environ), "all GPUs", command=(sys.executable, str(fake)))
    assert run["run"] == "all GPUs" and run["gpus"] == "all" and run["workers"] == 2 and run["wall_s"] > 0
    assert run["students"] == {
        "s01-solution": {"status": "graded", "score": 7.0, "max_score": 7.0, "reason": "", "seconds": 10.0,
                         "where": "GPU 0"},
        "s02-buggy": {"status": "graded", "score": 3.0, "max_score": 7.0, "reason": "", "seconds": 11.0,
                      "where": "GPU 1"}}
    assert run["summary"] == "2 students: 2 graded"
    assert (course / "grading" / "grades-all-gpus.csv").is_file()
    (course / "mode").write_text("--fail")
    with pytest.raises(RuntimeError, match="grade-class --gpus 0 exited with code 2:\nerror: no gradebook"):
        scale.run_class(course, "a1", "0", 1, 60, dict(os.environ), "one GPU", command=(sys.executable, str(fake)))


def _row(gpus, workers, wall, seconds, scores=(7, 3)):
    students = {s: {"status": "graded", "score": float(scores[submissions.kind_of(s) == submissions.BUGGY]), "max_score": 7.0,
                    "reason": "", "seconds": float(sec), "where": "GPU 0"}
                for s, sec in zip(submissions.student_names(2), seconds)}
    row = {"run": "one GPU" if workers == 1 else "all GPUs", "gpus": gpus, "workers": workers, "wall_s": wall,
           "students": students, "summary": ""}
    return {**row, **scale.summarize(row)}


def _result(rows):
    return {"date": "2026-12-01", "python": "3.12", "torch": "2.11", "triton": "3.6", "part": "scale",
            "device": {"name": "NVIDIA H100 80GB HBM3"}, "assignment": "01_hbm_cost_model", "students": 4,
            "bug": submissions.BUGS["01_hbm_cost_model"].what, "gpu_count": 2, "gpu_names": [], "sandboxed": False,
            "set_up_s": 9.0, **scale.verdict(rows), "rows": rows}


def test_the_record_says_the_ratio_the_efficiency_and_whether_the_grades_agree():
    one, every = _row("0", 1, 200.0, [52, 48, 54, 46]), _row("all", 2, 104.0, [53, 47, 55, 45])
    assert one["per_student_s"] == 50.0 and one["by_kind_s"] == {"solution": 53.0, "buggy": 47.0}
    result = _result([one, every])
    assert result["ratio"] == 0.52 and result["efficiency"] == pytest.approx(0.962, abs=1e-3)
    assert result["goal_met"] is True and result["grades_identical"] is True and result["differences"] == []
    assert json.loads(json.dumps(result)) == result
    text = scale.markdown(result)
    assert "| `--gpus 0` | 1 | 200 | 50.0 | 53.0 | 47.0 | 4 graded |" in text
    assert "| `--gpus all` | 2 | 104 | 50.0 | 54.0 | 46.0 | 4 graded |" in text
    assert "0.52 (goal at most 0.55 on two GPUs: met); parallel efficiency 0.96" in text
    assert scale.problems_of(one) == []
    slow = _result([one, _row("all", 2, 130.0, [53, 47, 55, 45], scores=(7, 7))])
    assert slow["goal_met"] is False and not slow["grades_identical"] and "NOT met" in scale.markdown(slow)
    assert scale.problems_of(slow["rows"][1]) == ["the planted mistake did not cost points (scores [7.0] against [7.0])"]
    alone = _result([one])
    assert alone["ratio"] is None and "Wall time" not in scale.markdown(alone)


def test_two_halves_measured_apart_merge_into_one_result(tmp_path):
    """`--runs one` and `--runs all` (each under a command's time limit) joined by --merge: the same verdict as
    one command's two runs; halves of two different measurements are refused by name."""
    one, every = _row("0", 1, 200.0, [52, 48, 54, 46]), _row("all", 2, 104.0, [53, 47, 55, 45])
    merged = scale.merge(_result([one]), _result([every]))
    assert {k: merged[k] for k in ("ratio", "goal_met", "grades_identical")} == {
        "ratio": 0.52, "goal_met": True, "grades_identical": True}
    assert merged["rows"] == [one, every] and merged["merged"] is True
    with pytest.raises(ValueError, match="a one-worker result and then a one-per-GPU result"):
        scale.merge(_result([every]), _result([one]))
    other = {**_result([every]), "students": 16}
    with pytest.raises(ValueError, match="differ in students"):
        scale.merge(_result([one]), other)
    paths = []
    for name, result in (("one", _result([one])), ("all", _result([every]))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(result))
    assert scale.main(["--merge", *map(str, paths), "--out", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "scale-nvidia-h100-80gb-hbm3.json").read_text())
    assert saved["ratio"] == 0.52 and len(saved["rows"]) == 2
    (tmp_path / "bad.json").write_text(json.dumps(other))
    assert scale.main(["--merge", str(paths[0]), str(tmp_path / "bad.json")]) == 2


def _grading_run(date, rows):
    return {"date": date, "rows": [{"notebook": nb, "mode": mode, "wall_s": s, "passed": ok} for nb, mode, s, ok in rows]}


def test_the_newest_checker_measurement_stands_for_each_notebook():
    runs = [("old.json", _grading_run("2026-11-24", [("01_a", "grading", 26.0, True), ("02_b", "grading", 40.0, True)])),
            ("new.json", _grading_run("2026-11-25", [("01_a", "grading", 19.0, True), ("01_a", "full", 90.0, True),
                                                     ("02_b", "grading", 21.0, False)])),
            ("same-day.json", _grading_run("2026-11-25", [("01_a", "grading", 18.0, True),
                                                          ("02_b", "grading", 30.0, True)]))]
    newest = budget.newest_checker_rows(runs)
    assert newest["01_a"] == {"seconds": 19.0, "date": "2026-11-25", "file": "new.json", "passed": True}  # slowest
    assert newest["02_b"]["file"] == "same-day.json"  # of one day, a run whose notebook passed


def test_a_class_costs_its_gpu_hours_and_its_wall_clock():
    grading_runs = [("g.json", _grading_run("2026-11-25", [("01_hbm_cost_model", "grading", 19.0, True),
                                                           ("02_vertical_fusion", "grading", 30.0, True)]))]
    scale_run = ("scale/s.json", _result([_row("0", 1, 200.0, [52, 48, 54, 46]),
                                          _row("all", 2, 104.0, [53, 47, 55, 45])]))
    notebooks = ["01_hbm_cost_model", "02_vertical_fusion", "03_horizontal_fusion"]
    text = "\n".join(budget.device_lines("H100", grading_runs, [scale_run], notebooks))
    # 01 through grade-class: 50 s a student, 31 more than the checker, which 02 gets too: (50 + 61) s x 200.
    assert "| 01_hbm_cost_model | 19 | 50 (measured) | 2.8 |" in text
    assert "| 02_vertical_fusion | 30 | 61 (checker + 31) | 3.4 |" in text
    assert "| 03_horizontal_fusion | not measured | | | |" in text
    assert "| the 2 measured | 49 | 111 | 6.2 | |" in text
    assert "| wall-clock | 6.2 h | 3.2 h | 48 min |" in text  # 6.17 h / (n x 0.96)
    assert "the total / n / 0.96, the parallel efficiency of grade-class with 2 workers (`scale/s.json`)" in text
    assert "left out of the totals: 03_horizontal_fusion" in text
    alone = "\n".join(budget.device_lines("H100", grading_runs, [], notebooks[:2]))
    assert "| all | 49 | 49 | 2.7 | |" in alone and "| wall-clock | 2.7 h | 1.4 h | 20 min |" in alone
    assert "assuming perfect scaling" in alone and "a lower bound" in alone


def test_machines_that_cannot_run_it_are_refused_with_why(monkeypatch, capsys):
    assert "nbgrader is not installed" in scale.refusal(False, 2, False, "all")
    assert "no CUDA GPU is visible" in scale.refusal(True, 0, True, "all")
    one = scale.refusal(True, 1, False, "all")
    assert "needs at least 2 GPUs and this machine shows 1 GPU" in one and "--allow-one-gpu" in one
    assert scale.refusal(True, 1, True, "all") is None
    assert "--gpus 0 names one GPU" in scale.refusal(True, 2, False, "0")
    assert "this machine shows 2 GPU(s)" in scale.refusal(True, 2, False, "0,5")
    assert "takes 'all' or GPU indices" in scale.refusal(True, 2, False, "first")
    assert scale.refusal(True, 4, False, "1,3") is None and scale.chosen_gpus("1,3", 4) == [1, 3]
    monkeypatch.setattr(scale, "probe_in_child", lambda env: {"gpus": 0, "names": [], "profile": None})
    assert scale.main(["--students", "1"]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbgrader" else real(name, *a))
    assert scale.main([]) == 2
    assert "nbgrader is not installed for this Python" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scale.main(["--students", "0"])
    assert "--students must be at least 1" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.slow
def test_a_class_of_two_is_graded_on_the_gpus(tmp_path):
    """The benchmark itself, one student of each kind: nbgrader and grade-class for real, a few minutes."""
    if importlib.util.find_spec("nbgrader") is None:
        pytest.skip("needs nbgrader (the course's virtual environment, or a folder holding it on PYTHONPATH)")
    done = subprocess.run([sys.executable, "-m", "bench.scale", "--students", "1", "--allow-one-gpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(next(tmp_path.glob("scale-*.json")).read_text())
    for row in result["rows"]:
        scores = {submissions.kind_of(s): p["score"] for s, p in row["students"].items()}
        assert row["statuses"] == {"graded": 2} and scores["buggy"] < scores["solution"]
        assert all(p["seconds"] > 0 and p["where"].startswith("GPU") for p in row["students"].values())
    assert result["grades_identical"] in (True, None)
