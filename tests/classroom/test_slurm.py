"""grade-class on a real Slurm: a one-node cluster started for these tests (tests/slurm_cluster.py; Debian's
slurm-wlm and munge, which `make slurm` installs as root), graded through submitit as `--cluster slurm` grades.

The class is tests/classroom.py's small course: alice answers everything, bob's fused kernel leaves out the SiLU,
carol's job is refused by Slurm (a feature no node has) and dave's is held, then cancelled. The cluster has no
accounting, as small clusters often do: submitit cannot learn a job's state from sacct there, and the class run
must still see a cancelled job end."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import classroom
import slurm_cluster
from autograder.classroom import runners
from autograder.classroom.grade_class import grade_class

NAME = classroom.ASSIGNMENT
WRONG = classroom.solutions()["fused_chain"].replace("y = alpha * z * tl.sigmoid(z)", "y = alpha * z")  # no SiLU
assert WRONG != classroom.solutions()["fused_chain"]
CLASS = {"alice": None, "bob": {"fused_chain": WRONG}, "carol": None, "dave": None}
REFUSED, CANCELLED = "carol", "dave"
# The node is this machine: one CPU and a little memory a student, and no GPU.
OPTIONS = {"time_min": 10, "gpus_per_task": 0, "cpus_per_task": 1, "mem_gb": 1}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    request.addfinalizer(cluster.stop)  # registered first: a cluster that fails half-way through starting ends too
    cluster.start()
    return cluster


def _course(root: Path, students: dict) -> str:
    root.mkdir()
    db = classroom.make_course(root)
    for student, cells in students.items():
        classroom.submit(root, student, cells)
    return db


def _refuse_and_cancel(cluster, folder: Path):
    """runner_hook: carol's job asks for a feature no node has (sbatch refuses it); dave's is submitted held and
    cancelled at once, so it never runs. The others go through grade-class's own executor."""

    def hook(runner):
        special = {}
        for student, extra in ((REFUSED, {"slurm_constraint": "no_such_feature"}),
                               (CANCELLED, {"slurm_additional_parameters": {"hold": True}})):
            special[student] = runners.submitit_executor(folder / student, "slurm", **OPTIONS)
            special[student].update_parameters(**extra)
        own = runner.executor

        def start(student, work, assignment):
            runner.executor = special.get(student, own)
            try:
                where = runners.SubmititRunner.start(runner, student, work, assignment)
            finally:
                runner.executor = own
            if student == CANCELLED:
                cluster.run("scancel", runner.jobs[student].job_id)
            return where

        runner.start = start
        return runner

    return hook


@pytest.mark.slow
def test_a_class_graded_on_slurm_gets_the_grades_of_this_machine(cluster, tmp_path):
    pytest.importorskip("submitit")
    db = _course(tmp_path / "slurm", CLASS)
    # The same class graded here, without the two students Slurm does not run.
    shutil.copytree(tmp_path / "slurm", tmp_path / "local")
    for student in (REFUSED, CANCELLED):
        shutil.rmtree(tmp_path / "local" / "submitted" / student)
    local_db = f"sqlite:///{tmp_path / 'local' / 'gradebook.db'}"

    log = []
    rows = grade_class(tmp_path / "slurm", NAME, timeout=300, db_url=db, echo=log.append, cluster="slurm",
                       cluster_options=OPTIONS, runner_hook=_refuse_and_cancel(cluster, tmp_path / "special"),
                       progress=False)
    local = grade_class(tmp_path / "local", NAME, timeout=300, db_url=local_db, echo=lambda m: None, workers=2,
                        progress=False)

    by = {r["student_id"]: r for r in rows}
    for row in local:
        student = row["student_id"]
        assert (by[student]["status"], by[student]["score"]) == (row["status"], row["score"]), (student, log)
        assert classroom.scores(db, student) == classroom.scores(local_db, student)
    assert by["alice"]["score"] == sum(classroom.POINTS.values()) and 0 < by["bob"]["score"] < by["alice"]["score"]

    refused, cancelled = by[REFUSED], by[CANCELLED]
    assert refused["status"] == "not run" and refused["score"] == 0
    assert "could not be started" in refused["reason"] and "Invalid feature specification" in refused["reason"]
    assert cancelled["status"] == "not run" and cancelled["score"] == 0
    assert "was cancelled (CANCELLED)" in cancelled["reason"] and "the next run tries again" in cancelled["reason"]
    assert "4 students: 2 graded, 0 crashed" in log[-1] and "2 not run (refused or cancelled)" in log[-1]

    # Slurm ran alice's and bob's jobs to the end, and knows dave's as cancelled before it ran.
    jobs = dict(line.split() for line in cluster.run("squeue", "-h", "-t", "all", "-o", "%i %T").splitlines())
    started = dict(m.groups() for m in map(re.compile(r"(\w+): .* on job (\d+)\b").search, log) if m)
    assert {jobs[started[s]] for s in ("alice", "bob")} == {"COMPLETED"}, (jobs, log)
    assert jobs[started[CANCELLED]] == "CANCELLED"
    assert REFUSED not in started


def test_stopping_the_cluster_ends_its_daemons_and_its_jobs(tmp_path):
    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    marker = f"sleep 86{tmp_path.stat().st_ino % 1000}"  # a command line of this test's own
    with slurm_cluster.Cluster(tmp_path / "slurm") as cluster:
        job = cluster.run("sbatch", "--parsable", "--mem=100M", f"--output={tmp_path}/job-%j.out",
                          f"--wrap={marker}").strip()
        for _ in range(100):
            if cluster.run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
                break
            subprocess.run(["sleep", "0.2"])
        assert cluster.run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING", cluster.log()
        assert len(cluster.alive()) >= 4  # the supervisor, munged, slurmctld, slurmd, the job's slurmstepd
        pids = cluster.alive()
    assert cluster.alive() == []
    left = [p for p in pids if Path(f"/proc/{p}").exists()
            and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1][:3]]
    assert not left, left
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert marker not in procs


class SlurmJob:
    """A stand-in for submitit's Slurm job (the runner knows them by this name) on a cluster without accounting:
    submitit's state stays UNKNOWN, and done() never turns true without a result."""

    def __init__(self, job_id: str, folder: Path, stderr: str = ""):
        self.job_id, self.state, self._stderr = job_id, "UNKNOWN", stderr
        self.paths = type("Paths", (), {"result_pickle": folder / f"{job_id}_result.pkl"})()

    def done(self) -> bool:
        return False

    def stderr(self) -> str:
        return self._stderr


def test_a_slurm_job_that_ends_without_a_result_is_seen_through_squeue(tmp_path, monkeypatch):
    states = {"1": "RUNNING", "2": "CANCELLED", "3": "FAILED", "5": "COMPLETED"}
    monkeypatch.setattr(runners, "slurm_job_states", lambda: states)
    runner = runners.SubmititRunner(None, 60, tmp_path / "grading.toml", poll_s=0.01)
    runner.jobs = {"ann": SlurmJob("1", tmp_path), "ben": SlurmJob("2", tmp_path),
                   "cid": SlurmJob("3", tmp_path, "Traceback ...\nRuntimeError: out of disk"),
                   "dee": SlurmJob("4", tmp_path), "eve": SlurmJob("5", tmp_path)}
    (tmp_path / "5_result.pkl").write_bytes(b"")  # eve's result is there: submitit's done() reads it

    student, status, reason = runner.wait()  # a cancelled job has no result to wait for
    assert (student, status) == ("ben", "not run") and "task 2 was cancelled (CANCELLED)" in reason
    assert runner._ended_unseen() == {}  # cid and dee: given time for their results to reach shared storage
    runner.result_grace_s = 0
    assert runner._ended_unseen() == {"cid": "FAILED", "dee": "no longer known to Slurm"}
    assert runner.wait()[1:] == ("crashed", "the cluster task 3 ended without a result (FAILED): RuntimeError: out "
                                 "of disk")
    student, status, reason = runner.wait()
    assert (student, status) == ("dee", "not run") and "no longer known to Slurm" in reason
    assert set(runner.jobs) == {"ann", "eve"}  # still running; done() reads eve's result
    monkeypatch.setattr(runners, "slurm_job_states", lambda: None)  # squeue did not answer: nothing is decided
    states["1"] = "CANCELLED"
    assert runner._ended_unseen() == {}
