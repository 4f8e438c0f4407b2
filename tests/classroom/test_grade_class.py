"""grade-class: every student ends up in the CSV and the gradebook, with a feedback page, crashed, hung, tampered
and refused notebooks included; the results go to grading/; re-runs resume."""

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import classroom
from autograder.publish import build
from autograder.classroom.grade_class import grade_class

pytestmark = pytest.mark.slow  # one class, graded once: conftest keeps these tests on one worker
NAME = classroom.ASSIGNMENT
FULL = sum(classroom.POINTS.values())


def _with_solution(extra: str) -> dict:
    return {"fused_chain": classroom.solutions()["fused_chain"] + extra}


class _Stub:
    """The real runner, except for two students graded for free: "refused" is refused when started (not run),
    and "tamperer"'s grading writes into the course's gradebook (tampered); and "hanger" gets a short time limit
    (one student at a time: the limit is read when their grading starts)."""

    def __init__(self, runner, db_file: Path):
        self.runner, self.db_file, self.fake = runner, db_file, []
        self.capacity, self.limit = runner.capacity, runner.timeout

    def has_room(self):
        return self.runner.has_room()

    def start(self, student, work, assignment):
        if student == "refused":
            raise RuntimeError("the queue refused the job")
        if student == "tamperer":
            with open(self.db_file, "ab") as f:
                f.write(b"tampered")
            self.fake.append((student, "graded", ""))
            return "nowhere"
        self.runner.timeout = HANG_LIMIT if student == "hanger" else self.limit
        return self.runner.start(student, work, assignment)

    def wait(self):
        return self.fake.pop(0) if self.fake else self.runner.wait()

    def stop(self):
        self.runner.stop()


HANG_LIMIT = 20  # seconds for the hanger; the others get 300 (a loaded machine grades alice in over a minute)


def _grade(work, db, log, **kw):
    return grade_class(work, NAME, timeout=300, db_url=db, echo=log.append, anonymous=True,
                       runner_hook=lambda runner: _Stub(runner, work / "gradebook.db"), **kw)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    work = tmp_path_factory.mktemp("class")
    db = classroom.make_course(work)
    classroom.submit(work, "alice")
    classroom.submit(work, "crasher", _with_solution("\nimport os\nos._exit(1)  # kills the kernel\n"))
    classroom.submit(work, "hanger", _with_solution("\nimport time\ntime.sleep(100000)\n"))
    classroom.submit(work, "tamperer")
    classroom.submit(work, "refused")
    log = []
    rows = _grade(work, db, log)
    return work, db, rows, log


def test_every_student_is_in_the_csv_with_a_status_and_reason(course):
    work, _, rows, log = course
    by = {r["student_id"]: r for r in rows}
    assert set(by) == {"alice", "crasher", "hanger", "tamperer", "refused"}
    assert by["alice"]["status"] == "graded" and by["alice"]["score"] == FULL and by["alice"]["max_score"] == FULL
    assert by["crasher"]["status"] == "crashed" and by["crasher"]["score"] == 0 and by["crasher"]["reason"]
    assert by["hanger"]["status"] == "timed out" and f"{HANG_LIMIT} s" in by["hanger"]["reason"]
    assert by["tamperer"]["status"] == "tampered" and "gradebook.db" in by["tamperer"]["reason"]
    assert by["refused"]["status"] == "not run" and "refused the job" in by["refused"]["reason"]
    with open(work / "grading" / f"grades-{NAME}.csv") as f:
        assert {r["student_id"]: r["status"] for r in csv.DictReader(f)} == {
            "alice": "graded", "crasher": "crashed", "hanger": "timed out", "tamperer": "tampered", "refused": "not run"}
    assert ("5 students: 1 graded, 1 crashed, 1 timed out, 1 tampered, 0 lost; 1 not run (refused or cancelled): run "
            "again; every one recorded in the gradebook") in log[-1]
    assert "exited with code 1" in by["crasher"]["reason"] and "cell fused_chain" in by["crasher"]["reason"]
    assert "calls os._exit" in by["crasher"]["flags"]
    # alice submitted the reference solution: named by its kernel's fingerprint and by similarity, score kept.
    alice = by["alice"]["flags"].split("; ")
    assert any("this is the course's reference kernel for 01.fused_chain (kernels/fused_chain.py: _fused_chain_kernel)" in f for f in alice)
    assert any(f.endswith("like the reference solution") for f in alice)
    assert any("like crasher's" in f for f in alice)  # the crasher pasted the same answer
    assert all("reference" in f or " like " in f for f in alice), alice
    assert (work / "grading" / f"similarity-{NAME}.html").is_file()
    assert not list(work.glob("*.csv")) and not list(work.glob("*.html"))  # nothing at the course root


def test_the_course_gets_a_private_seed_and_its_results_stay_out_of_git(course):
    from autograder import config

    work, _, _, log = course
    secret = work / config.SECRET_NAME
    assert secret.stat().st_mode & 0o077 == 0 and any(str(secret) in line for line in log)
    seed = config.load(work / "grading.toml")
    assert not seed.public_seed and seed.seed_source == str(secret)
    assert "--- grade-class" in (work / "grading" / f"grade-class-{NAME}.log").read_text()
    ignored = (build.ROOT / ".gitignore").read_text().split()
    assert config.SECRET_NAME in ignored and "/grading/" in ignored


def test_every_student_is_exported_and_gets_a_feedback_page_saying_what_happened(course):
    work, _, _, _ = course
    env = build.tool_env()
    for args in (["export", "--to=export.csv"], ["generate_feedback", NAME, "--force"]):
        done = subprocess.run(build.nbgrader_command(*args, "--log-level=ERROR"), cwd=work, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    with open(work / "export.csv") as f:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert exported == {"alice": FULL, "crasher": 0, "hanger": 0, "tamperer": 0, "refused": 0}
    pages = {s: (work / "feedback" / s / NAME / f"{NAME}.html").read_text() for s in exported}
    assert "Not graded" not in pages["alice"]
    for student, words in (("crasher", "crashed while it was being graded"), ("hanger", "did not finish within"),
                           ("tamperer", "changed files outside its own folder"), ("refused", "could not be graded")):
        assert "Not graded" in pages[student] and words in pages[student], student
    assert "exited with code 1" in pages["crasher"]


def test_the_leaderboard_lists_every_student_and_hides_names_on_request(course):
    work, _, rows, _ = course
    out = work / "grading"
    assert {r["fraction_of_peak"] for r in rows} == {"01.fused_chain not measured"}  # no GPU here
    named = (out / f"leaderboard-{NAME}.html").read_text()
    assert all(s in named for s in ("alice", "crasher", "refused")) and "not measured" in named
    anonymous = (out / f"leaderboard-{NAME}-anonymous.csv").read_text()
    assert "alice" not in anonymous and anonymous.count("student-") == 5
    with open(out / f"leaderboard-{NAME}-anonymous.csv") as f:
        assert [r["01.fused_chain"] for r in csv.DictReader(f)] == ["not measured"] * 5


def test_grades_reach_the_course_gradebook_and_autograded_folder(course):
    work, db, _, _ = course
    assert classroom.scores(db, "alice") == {cell: (p, p) for cell, p in classroom.POINTS.items()}
    assert (work / "autograded" / "alice" / NAME / f"{NAME}.ipynb").exists()
    assert "PASS" in classroom.outputs(work, "alice")


def test_rerun_skips_unchanged_submissions_and_regrades_changed_ones(course):
    work, db, first, _ = course
    log = []
    again = _grade(work, db, log)
    assert again == first
    assert sum("skipped" in line for line in log) == 4  # "not run" is tried again
    classroom.submit(work, "crasher")  # the student fixes the notebook and hands it in again
    log = []
    rows = _grade(work, db, log)
    assert {r["student_id"]: r["status"] for r in rows}["crasher"] == "graded", log
    assert sum("skipped" in line for line in log) == 3


def test_a_student_during_whom_the_run_died_twice_is_recorded_as_crashed(course):
    import json

    work, db, _, _ = course
    state_file = work / "autograded" / f".grade-class-{NAME}.json"
    state = json.loads(state_file.read_text())
    state["alice"].update(status="in progress", attempts=2)  # as a run killed twice while grading alice leaves it
    state_file.write_text(json.dumps(state))
    log = []
    rows = _grade(work, db, log)
    alice = {r["student_id"]: r for r in rows}["alice"]
    assert alice["status"] == "crashed" and "died twice" in alice["reason"]


def test_bad_usage_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nbgrader_config.py"):
        grade_class(tmp_path, NAME)
    shutil.copy(build.ROOT / "nbgrader_config.py", tmp_path)
    with pytest.raises(FileNotFoundError, match="grading settings .*grading.toml"):
        grade_class(tmp_path, NAME)
    shutil.copy(build.ROOT / "grading.toml", tmp_path)
    with pytest.raises(FileNotFoundError, match="no submissions"):
        grade_class(tmp_path, NAME)
    (tmp_path / "submitted" / "bob" / NAME).mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no gradebook"):
        grade_class(tmp_path, NAME)
    with pytest.raises(ValueError, match="sqlite"):
        grade_class(tmp_path, NAME, db_url="postgresql://somewhere/grades")
    (tmp_path / "gradebook.db").touch()
    with pytest.raises(ValueError, match="between 0 and 1"):
        grade_class(tmp_path, NAME, similarity_threshold=80)


def test_grading_for_credit_with_the_public_seed_is_refused(tmp_path, monkeypatch):
    from autograder import config

    shutil.copy(build.ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "submitted" / "bob" / NAME).mkdir(parents=True)
    (tmp_path / "gradebook.db").touch()
    monkeypatch.setenv(config.ENV_VAR, str(config.DEFAULT_PATH))  # the package's defaults: the public seed
    with pytest.raises(ValueError, match="public one.*--allow-public-seed"):
        grade_class(tmp_path, NAME)
    assert not (tmp_path / "grading").exists()  # refused before anything was written
    assert config.load().public_seed  # a self-learner's check keeps the public seed


def test_each_student_gets_a_private_copy_of_the_font_list(tmp_path):
    """A private, empty matplotlib folder made every student's first plot scan the machine's fonts again."""
    import matplotlib

    from autograder.classroom import process as gc

    env = gc.child_env(tmp_path)
    private = env["MPLCONFIGDIR"]
    assert private.startswith(str(tmp_path))
    ours = sorted(p.name for p in Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    theirs = sorted(p.name for p in Path(private).glob("fontlist-*.json"))
    assert ours and theirs == ours


def test_the_grading_process_result_is_read_whatever_is_written_after_it():
    """Its JSON line is read though a warning at interpreter exit, or a leftover process, writes after it; a
    line that only looks like it is not taken for it; no line at all is no result."""
    from autograder.classroom.process import student_result

    line = '{"success": true, "reason": "", "log": "", "error": ""}'
    assert student_result(f"[NbGraderAPI] autograding\n{line}\n") == {"success": True, "reason": "", "log": "",
                                                                     "error": ""}
    noisy = f"{line}\nException ignored in: <function _after_at_fork>\nTraceback (most recent call last):\n  ...\n"
    assert student_result(noisy)["success"] is True
    assert student_result('{"success": true, "reason": "\n') == {}  # cut off: no result
    assert student_result('{"success" is in this text but it is no JSON}\n[1, 2]\n') == {}
    assert student_result("") == {}
    earlier = '{"success": false, "reason": "the kernel died"}'
    assert student_result(f"{earlier}\n{line}\nwarning\n")["success"] is True  # the last one counts


def test_the_grading_process_starts_without_the_iri_grammars_and_still_validates_notebooks():
    """A student's grading process leaves out rfc3987-syntax (jsonschema builds its grammars at import, about 2 s
    of every such process's start); nbformat still reads and validates a course notebook there."""
    probe = ("import sys\n"
             "import autograder.classroom.student\n"
             "import nbformat\n"
             "nb = nbformat.read(sys.argv[1], as_version=4)\n"
             "nbformat.validate(nb)\n"
             "del nb.cells[0]['metadata']\n"
             "try:\n    nbformat.validate(nb)\nexcept nbformat.ValidationError:\n    print('invalid refused')\n"
             "print(sys.modules.get('rfc3987_syntax'), len(nb.cells) > 10)\n")
    p = subprocess.run([sys.executable, "-c", probe, str(build.ROOT / "course" / classroom.SOURCE /
                                                         f"{classroom.SOURCE}.ipynb")],
                       capture_output=True, text=True, timeout=120, env=build.tool_env())
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().split("\n")[-2:] == ["invalid refused", "None True"], p.stdout


def test_a_course_kernel_that_is_not_installed_is_refused_before_anyone_is_graded(tmp_path, monkeypatch):
    """On a machine where nbgrader_config.py's kernel was never registered, every student "crashed" with
    nbgrader's "see the above traceback" (16 of 16 on a GPU machine): grade-class says why before it starts."""
    from autograder import config

    config_text = (build.ROOT / "nbgrader_config.py").read_text()
    (tmp_path / "nbgrader_config.py").write_text(
        config_text.replace('kernel_name = "fusion-course"', 'kernel_name = "no-such-kernel-here"'))
    (tmp_path / "submitted" / "bob" / NAME).mkdir(parents=True)
    (tmp_path / "gradebook.db").touch()
    monkeypatch.setenv(config.ENV_VAR, str(config.DEFAULT_PATH))
    with pytest.raises(FileNotFoundError, match="'no-such-kernel-here', which is not installed.*ipykernel install "
                                                "--sys-prefix --name no-such-kernel-here.*No student was graded"):
        grade_class(tmp_path, NAME, allow_public_seed=True)
    assert not (tmp_path / "grading").exists()


def test_a_failed_grading_names_the_error_behind_nbgraders_last_line():
    from autograder.classroom.process import why_it_failed

    log = ("[AutogradeApp | ERROR] There was an error processing assignment: /w/submitted/bob/mini_01\n"
           "Traceback (most recent call last):\n  File \".../kernelspec.py\", line 290, in get_kernel_spec\n"
           "    raise NoSuchKernel(kernel_name)\n"
           "jupyter_client.kernelspec.NoSuchKernel: No such kernel named fusion-course\n")
    error = ("Traceback (most recent call last):\n  File \".../base.py\", line 428, in convert_notebooks\n"
             "nbgrader.converters.base.NbGraderException: Please see the the above traceback for details\n")
    why = why_it_failed(log + error)
    assert why.startswith("nbgrader could not start the notebook's Jupyter kernel: No such kernel named "
                          "fusion-course"), why
    other = "Traceback...\nsqlalchemy.exc.OperationalError: database is locked\n" + error
    assert why_it_failed(other) == "nbgrader did not grade it: OperationalError: database is locked"
    assert why_it_failed("nbclient.exceptions.CellExecutionError: boom\n" + error) == (
        "nbgrader could not execute the notebook")
    assert why_it_failed("") == "nbgrader did not grade it: no output"
