"""grade-class with several students at once: the same grades as one at a time, a change outside the workspaces
set aside and attributed by grading those students again alone, and submitit's local executor as the cluster path.
On the CPU the slots are --workers (the interpreter grades correctness and fusion); --gpus is the same loop with
CUDA_VISIBLE_DEVICES per slot, checked here for its choice of GPUs."""

import re
import shutil
from pathlib import Path

import pytest

import classroom
from autograder.classroom import runners as class_runner
from autograder.classroom.runners import Slot, gpu_slots
from autograder.classroom.grade_class import grade_class

NAME = classroom.ASSIGNMENT
CORPUS = Path(__file__).parents[1] / "corpus"


def _cell(case: str) -> str:
    """The fused_chain cell of a corpus case."""
    text = (CORPUS / f"{case}.py").read_text()
    return re.split(r"^# %% cell fused_chain\n", text, flags=re.M)[1]


WRONG = classroom.solutions()["fused_chain"].replace("y = alpha * z * tl.sigmoid(z)", "y = alpha * z")  # no SiLU
assert WRONG != classroom.solutions()["fused_chain"]
CRASH = classroom.solutions()["fused_chain"] + "\nimport os\nos._exit(1)  # kills the kernel\n"
CLASS = {"alice": None, "bob": {"fused_chain": WRONG}, "carol": {"fused_chain": CRASH}, "dave": None}


def _course(root: Path, students: dict) -> str:
    root.mkdir()
    db = classroom.make_course(root)
    for student, cells in students.items():
        classroom.submit(root, student, cells)
    return db


def _grades(rows) -> dict:
    return {r["student_id"]: (r["status"], r["score"]) for r in rows}


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    base = tmp_path_factory.mktemp("parallel")
    graded = {}
    for workers in (1, 2):
        db = _course(base / f"w{workers}", CLASS)
        log = []
        rows = grade_class(base / f"w{workers}", NAME, timeout=120, db_url=db, echo=log.append, workers=workers,
                           progress=False)
        graded[workers] = (rows, log, db)
    return graded


@pytest.mark.slow
def test_two_workers_give_the_grades_of_one(one_and_two):
    (rows1, _, _), (rows2, log2, db2) = one_and_two[1], one_and_two[2]
    assert _grades(rows1) == _grades(rows2)
    by = _grades(rows2)
    assert by["alice"][0] == by["dave"][0] == "graded" and by["bob"][0] == "graded" and by["carol"][0] == "crashed"
    assert by["bob"][1] < by["alice"][1]
    assert any("cpu worker 1, cpu worker 2" in line for line in log2)
    assert {re.search(r"on (cpu worker \d)", line).group(1) for line in log2 if " in " in line and " on cpu" in line} \
        == {"cpu worker 1", "cpu worker 2"}
    assert "4 students: 3 graded, 1 crashed, 0 timed out, 0 tampered, 0 lost" in log2[-1]
    assert classroom.scores(db2, "alice") == {cell: (p, p) for cell, p in classroom.POINTS.items()}


@pytest.mark.slow
def test_a_change_while_several_are_in_flight_is_attributed_by_grading_them_again_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COURSE_SANDBOX", "off")  # the footprint check alone (a sandbox stops the write)
    students = {"alice": None, "mallory": {"fused_chain": _cell("writes_gradebook")}, "zoe": None}
    db = _course(tmp_path / "c", students)
    monkeypatch.chdir(tmp_path / "c")  # as an instructor runs it: the case finds the course by its graders' folders
    log = []
    rows = grade_class(tmp_path / "c", NAME, timeout=120, db_url=db, echo=log.append, workers=3, progress=False)
    by = {r["student_id"]: r for r in rows}
    assert by["mallory"]["status"] == "tampered" and "gradebook.db" in by["mallory"]["reason"], (by, log)
    assert by["alice"]["status"] == by["zoe"]["status"] == "graded"
    assert any("set aside, to be graded again one at a time" in line for line in log)
    assert any(line.startswith("grading ") and "again one at a time" in line and "mallory" in line for line in log)
    assert b"all grades are 100" not in (tmp_path / "c" / "gradebook.db").read_bytes()
    assert classroom.scores(db, "alice") == {cell: (p, p) for cell, p in classroom.POINTS.items()}


@pytest.mark.slow
def test_submitit_local_jobs_grade_like_this_machine(tmp_path):
    pytest.importorskip("submitit")
    students = {"alice": None, "bob": {"fused_chain": WRONG}}
    db = _course(tmp_path / "c", students)
    log = []
    rows = grade_class(tmp_path / "c", NAME, timeout=120, db_url=db, echo=log.append, cluster="local",
                       cluster_options={"time_min": 10}, progress=False)
    by = _grades(rows)
    assert by["alice"] == ("graded", sum(classroom.POINTS.values()))
    assert by["bob"][0] == "graded" and by["bob"][1] < by["alice"][1]
    assert any(" on job " in line for line in log)
    assert not (tmp_path / "c" / ".grade-class-work").exists()  # the shared workspaces are removed


class _Job:
    def __init__(self, error=None, state="FAILED", result=("graded", "")):
        self.job_id, self.state, self.error, self.value = "42_1", state, error, result

    def result(self):
        if self.error:
            raise self.error
        return self.value


def test_a_cluster_task_that_fails_or_is_cancelled_is_recorded_with_why():
    status, reason = class_runner.SubmititRunner._outcome(_Job(RuntimeError("Job 42_1 (task: 0) with path x\nhas not "
                                                                            "produced any output (state: FAILED)")))
    assert status == "crashed" and "the cluster task 42_1 ended without a result (FAILED)" in reason
    status, reason = class_runner.SubmititRunner._outcome(_Job(RuntimeError("cancelled"), state="CANCELLED by 7"))
    assert status == "not run" and "was cancelled" in reason and "the next run tries again" in reason
    assert class_runner.SubmititRunner._outcome(_Job()) == ("graded", "")


def test_gpus_are_chosen_by_index_among_those_visible():
    slots = gpu_slots("all", visible=["0", "1"])
    assert slots == [Slot("GPU 0", (("CUDA_VISIBLE_DEVICES", "0"),)), Slot("GPU 1", (("CUDA_VISIBLE_DEVICES", "1"),))]
    # Indices count the GPUs this process may see: with CUDA_VISIBLE_DEVICES=2,3, index 1 is physical GPU 3.
    assert gpu_slots("1", visible=["2", "3"]) == [Slot("GPU 1", (("CUDA_VISIBLE_DEVICES", "3"),))]
    assert [s.env for s in gpu_slots(None, 2)] == [(("CUDA_VISIBLE_DEVICES", ""),)] * 2
    assert gpu_slots(None, None) == [Slot("this machine")]


@pytest.mark.parametrize("gpus, workers, visible, message", [
    ("0,5", None, ["0", "1"], r"GPU 5 does not exist; this machine shows 2 GPU\(s\), indices 0 to 1"),
    ("all", None, [], "no CUDA GPU is visible on this machine"),
    ("0,0", None, ["0", "1"], "named twice"),
    ("first", None, ["0"], "takes 'all' or GPU indices"),
    ("0", 2, ["0"], "not both"),
    (None, 0, [], "at least 1"),
])
def test_a_bad_choice_of_gpus_is_a_clear_error(gpus, workers, visible, message):
    with pytest.raises(ValueError, match=message):
        gpu_slots(gpus, workers, visible=visible)


def test_a_bad_gpu_is_said_before_any_student_is_touched(tmp_path):
    db = _course(tmp_path / "c", {"alice": None})
    with pytest.raises(ValueError, match="does not exist|no CUDA GPU"):
        grade_class(tmp_path / "c", NAME, db_url=db, gpus="7", progress=False)
    assert not (tmp_path / "c" / "autograded").exists()
    with pytest.raises(ValueError, match="--gpus and --workers do not apply"):
        grade_class(tmp_path / "c", NAME, db_url=db, cluster="local", workers=2, progress=False)
    shutil.rmtree(tmp_path / "c")


@pytest.mark.slow
def test_a_student_whose_grading_cannot_start_is_recorded_and_the_rest_go_on(tmp_path, monkeypatch):
    db = _course(tmp_path / "c", {"alice": None, "bob": None})
    real = class_runner.LocalRunner.start

    def refuse_bob(self, student, work, assignment):
        if student == "bob":
            raise RuntimeError("sbatch: error: Batch job submission failed: Invalid partition name specified")
        return real(self, student, work, assignment)

    monkeypatch.setattr(class_runner.LocalRunner, "start", refuse_bob)
    rows = grade_class(tmp_path / "c", NAME, timeout=120, db_url=db, echo=lambda m: None, workers=2, progress=False)
    by = {r["student_id"]: r for r in rows}
    assert by["alice"]["status"] == "graded"
    assert by["bob"]["status"] == "not run" and "could not be started" in by["bob"]["reason"]
    assert "Invalid partition" in by["bob"]["reason"] and by["bob"]["score"] == 0
    monkeypatch.setattr(class_runner.LocalRunner, "start", real)  # the next run grades bob, and only bob
    log = []
    rows = grade_class(tmp_path / "c", NAME, timeout=120, db_url=db, echo=log.append, workers=2, progress=False)
    assert {r["student_id"]: r["status"] for r in rows} == {"alice": "graded", "bob": "graded"}
    assert sum("skipped" in line for line in log) == 1
