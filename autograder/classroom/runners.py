"""Where grade-class runs each student's grading: processes on this machine, one student per GPU at a time (or
per worker on the CPU), or tasks on a Slurm cluster through submitit. The class loop (grade_class) stays in
one process, which alone writes the gradebook; a runner only runs `grade_one` and says how it ended.

    LocalRunner(slots)     slots from gpu_slots("all" | "0,1" | None, workers): each student's process sees only
                           its slot's GPU (CUDA_VISIBLE_DEVICES), or none with --workers on the CPU
    SubmititRunner(ex)     one submitit job per student (a Slurm task with one GPU, or submitit's local executor);
                           the workspaces must be on storage the cluster's nodes share with this machine
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

from autograder.classroom.course import CRASHED, NOT_RUN
from autograder.classroom.process import Running, grade_one
from autograder.guard import procs


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one student is graded at a time: a name for the messages and the environment its process gets."""

    name: str
    env: tuple = ()  # (variable, value) pairs


def visible_gpus() -> list[str]:
    """The GPUs this machine shows a CUDA program, as CUDA_VISIBLE_DEVICES would name them, without starting
    CUDA here (the grading processes do that): from CUDA_VISIBLE_DEVICES when it is set, else from NVML, else
    from nvidia-smi."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  no NVML (no driver, or the package): try nvidia-smi
        pass
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(ln for ln in out.stdout.splitlines() if ln.startswith("GPU "))]


def gpu_slots(gpus: str | None = None, workers: int | None = None, visible=None) -> list[Slot]:
    """The slots to grade in: --gpus all or a comma-separated list of indices (one student per GPU at a time), or
    --workers N on the CPU (Triton's interpreter; performance is not measured there), or one slot as before."""
    if gpus is not None and workers is not None:
        raise ValueError("give --gpus (one student per GPU) or --workers (CPU processes), not both")
    if workers is not None:
        if workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        return [Slot(f"cpu worker {i + 1}", (("CUDA_VISIBLE_DEVICES", ""),)) for i in range(workers)]
    if gpus is None:
        return [Slot("this machine")]
    have = visible_gpus() if visible is None else list(visible)
    if not have:
        raise ValueError(f"--gpus {gpus}: no CUDA GPU is visible on this machine (neither NVML nor nvidia-smi found "
                         "one); grade on the CPU with --workers N, or on a GPU machine")
    if gpus.strip() == "all":
        chosen = list(range(len(have)))
    else:
        try:
            chosen = [int(g) for g in gpus.split(",") if g.strip()]
        except ValueError:
            raise ValueError(f"--gpus takes 'all' or GPU indices such as 0,1; got {gpus!r}") from None
        if not chosen:
            raise ValueError(f"--gpus takes 'all' or GPU indices such as 0,1; got {gpus!r}")
        bad = [g for g in chosen if not 0 <= g < len(have)]
        if bad:
            raise ValueError(f"--gpus {gpus}: GPU {', '.join(map(str, bad))} does not exist; this machine shows "
                             f"{len(have)} GPU(s), indices 0 to {len(have) - 1}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"--gpus {gpus}: a GPU is named twice (one student per GPU at a time)")
    return [Slot(f"GPU {i}", (("CUDA_VISIBLE_DEVICES", have[i]),)) for i in chosen]


class LocalRunner:
    """Grades up to len(slots) students at once on this machine, each in a process of its own (grade_one)."""

    def __init__(self, slots: list[Slot], timeout: float, grading_file: Path):

        self.slots, self.timeout, self.grading_file = list(slots), timeout, grading_file
        self.free = list(self.slots)
        self.running = Running()  # the grading processes in flight: not leftovers to be ended
        self.done: queue.Queue = queue.Queue()
        self.in_flight: dict[str, Slot] = {}

    @property
    def capacity(self) -> int:
        return len(self.slots)

    def has_room(self) -> bool:
        return bool(self.free)

    def start(self, student: str, work: Path, assignment: str) -> str:

        slot = self.free.pop(0)
        self.in_flight[student] = slot

        def run():
            try:
                result = grade_one(work, assignment, student, self.timeout, self.grading_file, extra_env=dict(slot.env),
                                   running=self.running)
            except Exception as exc:  # noqa: BLE001  the class goes on; this student is recorded
                result = (CRASHED, f"the grader failed to run this student ({type(exc).__name__}: {exc})")
            self.done.put((student, *result))

        threading.Thread(target=run, name=f"grade-{student}", daemon=True).start()
        return slot.name

    def wait(self) -> tuple[str, str, str]:
        """(student, status, reason) of the next student whose grading ended."""
        student, status, reason = self.done.get()
        self.free.append(self.in_flight.pop(student))
        return student, status, reason

    def stop(self) -> None:
        """End every grading in flight (an interrupted run)."""
        for pid in self.running.pids():
            procs.kill_tree(pid)


def remote_grade(work: str, assignment: str, student: str, timeout: float, grading_file: str) -> tuple[str, str]:
    """One student's grading as a submitit job: on a cluster node (or in a local process), in the workspace the
    class run prepared on shared storage. Returns (status, reason); the graded notebooks stay in the workspace."""
    procs.become_subreaper()  # what the notebook leaves behind comes back to this task to be ended
    return grade_one(Path(work), assignment, student, timeout, Path(grading_file))


class SubmititRunner:
    """One submitit job per student; the class process polls them and saves each result as it comes."""

    def __init__(self, executor, timeout: float, grading_file: Path, poll_s: float = 2.0):
        self.executor, self.timeout, self.grading_file, self.poll_s = executor, timeout, grading_file, poll_s
        self.jobs: dict[str, object] = {}
        self.capacity = 1 << 30  # the scheduler queues them
        self.result_grace_s = 15.0  # how long a job that ended may take to show its result (shared storage)
        self._no_result_since: dict[str, float] = {}

    def has_room(self) -> bool:
        return True

    def start(self, student: str, work: Path, assignment: str) -> str:
        job = self.executor.submit(remote_grade, str(work), assignment, student, self.timeout, str(self.grading_file))
        self.jobs[student] = job
        return f"job {job.job_id}"

    def wait(self) -> tuple[str, str, str]:
        while True:
            for student, job in list(self.jobs.items()):
                if job.done():
                    del self.jobs[student]
                    return (student, *self._outcome(job))
            ended = self._ended_unseen()
            if ended:
                student, state = next(iter(ended.items()))
                job = self.jobs.pop(student)
                self._no_result_since.pop(student, None)
                return (student, *self._outcome_without_result(job, state))
            time.sleep(self.poll_s)

    def _ended_unseen(self) -> dict[str, str]:
        """Students whose Slurm job has ended, by its state, where submitit cannot tell: it learns a job's state
        from sacct, which a cluster without accounting (or whose accounting daemon is down) does not answer, so a
        job that ends without writing its result (cancelled, killed) would be waited for forever. slurmctld itself
        still knows the job (squeue, for MinJobAge after its end); a job it no longer lists has ended too."""
        unknown = {s: j for s, j in self.jobs.items()
                   if type(j).__name__ == "SlurmJob" and str(getattr(j, "state", "")).upper() == "UNKNOWN"}
        if not unknown:
            return {}
        states = slurm_job_states()
        if states is None:  # squeue did not answer: ask again at the next poll
            return {}
        ended = {}
        for student, job in unknown.items():
            state = states.get(str(job.job_id), "no longer known to Slurm")
            if (state.split() or ["PENDING"])[0] in SLURM_ACTIVE:
                self._no_result_since.pop(student, None)
                continue
            if job.paths.result_pickle.exists():  # its result is there: done() reads it at the next poll
                continue
            # A result may reach this machine a little after the job ends (shared storage); a cancelled job has none.
            since = self._no_result_since.setdefault(student, time.monotonic())
            if "CANCEL" in state or time.monotonic() - since >= self.result_grace_s:
                ended[student] = state
        return ended

    @staticmethod
    def _outcome_without_result(job, state: str) -> tuple[str, str]:
        if "CANCEL" in state.upper():
            return NOT_RUN, f"the cluster task {job.job_id} was cancelled ({state}); the next run tries again"
        if state == "no longer known to Slurm":
            return NOT_RUN, f"the cluster task {job.job_id} ended unseen ({state}, no result); the next run tries again"
        err = ""
        with contextlib.suppress(Exception):  # the task's own last words, where it left any
            err = ((job.stderr() or "").strip().splitlines() or [""])[-1][:300]
        return CRASHED, f"the cluster task {job.job_id} ended without a result ({state})" + (f": {err}" if err else "")

    @staticmethod
    def _outcome(job) -> tuple[str, str]:
        try:
            status, reason = job.result()
            return status, reason
        except Exception as exc:  # noqa: BLE001  a failed, cancelled or lost task: recorded, never dropped
            state = getattr(job, "state", "unknown")
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            if "CANCEL" in str(state).upper():
                return NOT_RUN, f"the cluster task {job.job_id} was cancelled ({state}); the next run tries again"
            return CRASHED, f"the cluster task {job.job_id} ended without a result ({state}): {first}"

    def stop(self) -> None:
        for job in self.jobs.values():
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001  already gone
                pass


# Slurm's job states in which a job may still run and write its result (squeue's %T).
SLURM_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "PREEMPTED"}


def slurm_job_states() -> dict[str, str] | None:
    """job id -> state of this user's jobs that slurmctld knows (running, queued, or ended in the last
    MinJobAge seconds), from squeue; None when squeue does not answer."""
    try:
        out = subprocess.run(["squeue", "--noheader", "--states=all", f"--user={os.getuid()}", "--format=%i|%T"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return dict(line.strip().split("|", 1) for line in out.stdout.splitlines() if "|" in line)


def submitit_executor(folder: Path, cluster: str, partition: str | None = None, time_min: int = 60,
                      gpus_per_task: int = 1, account: str | None = None, parallel: int | None = None,
                      setup: list[str] | None = None, cpus_per_task: int = 4, mem_gb: float = 32):
    """A submitit executor for grade-class: cluster "slurm" (a Slurm job per student, one GPU each), "local"
    (submitit's processes on this machine) or "debug" (in this process, for tests). cpus_per_task and mem_gb (GB,
    fractions allowed: submitit asks Slurm for megabytes then) size each job."""
    import submitit

    if cluster not in ("slurm", "local", "debug"):
        raise ValueError(f"--cluster takes slurm, local or debug; got {cluster!r}")
    if cluster == "slurm" and not shutil.which("sbatch"):
        raise ValueError("--cluster slurm: no sbatch on this machine; run grade-class on a Slurm login node")
    if time_min < 1:
        raise ValueError(f"--slurm-time must be at least 1 minute, got {time_min}")
    if cpus_per_task < 1:
        raise ValueError(f"--slurm-cpus must be at least 1, got {cpus_per_task}")
    if not mem_gb * 1024 >= 1:  # Slurm reads --mem=0 as all of a node's memory
        raise ValueError(f"--slurm-mem must be at least 1M, got {mem_gb} GB")
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    # One task, one GPU per student; the generic names apply to every executor, slurm_* to Slurm alone.
    params = dict(name="grade-class", timeout_min=time_min, nodes=1, tasks_per_node=1, cpus_per_task=cpus_per_task,
                  mem_gb=mem_gb, gpus_per_node=gpus_per_task)
    if partition:
        params["slurm_partition"] = partition
    if account:
        params["slurm_account"] = account
    if parallel:
        params["slurm_array_parallelism"] = parallel
    if setup:
        params["slurm_setup"] = list(setup)
    executor.update_parameters(**params)
    return executor
