"""A one-node Slurm cluster for the tests, on this machine: Debian's slurm-wlm (slurmctld and slurmd) and munge,
started as root from a slurm.conf written into a folder of the test's own (state, spool, logs, munge's key and
socket), with no accounting and no cgroups. `make slurm` installs the packages when missing (root on Debian).

The daemons run under a small supervisor (this file run as a program): a subreaper, so that every process the
cluster starts (slurmstepd and the jobs' tasks, which leave slurmd's tree) stays below it, and ending it ends them
all. It also ends the cluster by itself when the process that started it dies (a test run killed mid-way).

    with Cluster(folder) as cluster:   # SLURM_CONF is set while it runs, for sbatch, squeue, scancel and submitit
        cluster.run("squeue")
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NODE, PARTITION = "localhost", "debug"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "srun")


def missing() -> str | None:
    """Why a Slurm cluster cannot be started here, in one line, or None."""
    if not sys.platform.startswith("linux"):
        return "the test cluster runs on Linux only"
    absent = [c for c in DAEMONS + CLIENTS if not shutil.which(c, path=_path())]
    if absent:
        return (f"no {', '.join(absent)} on this machine (Debian: apt-get install slurm-wlm munge; `make slurm` does "
                "it as root)")
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root (slurmd starts the jobs as their user): run the tests as root"
    return None


def _path() -> str:
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"  # the daemons are in sbin, off a user's PATH


def _which(name: str) -> str:
    found = shutil.which(name, path=_path())
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (apt-get install slurm-wlm munge)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_hardware() -> str:
    """This machine as slurm.conf describes a node (CPUs, sockets, cores, threads, memory in MB): what slurmd
    itself reports (`slurmd -C`), so that the node is not drained for claiming more than it has."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=60)
    first = out.stdout.splitlines()[0] if out.stdout.strip() else ""
    if out.returncode != 0 or "CPUs=" not in first:
        raise RuntimeError(f"slurmd -C did not describe this machine: {(out.stdout + out.stderr).strip()[:500]}")
    return re.sub(r"^NodeName=\S+\s*", "", first)


def write_config(folder: Path) -> Path:
    """slurm.conf for a one-node cluster whose files all live in `folder`, and munge's key; returns slurm.conf."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(exist_ok=True)
    os.chmod(folder / "munge", 0o755)  # the socket is for every user; the key alone is private
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))  # a key of this cluster's own (munged wants 0600 or less, owned by its user)
    os.chmod(key, 0o400)
    socket_path = folder / "munge" / "socket"
    if len(str(socket_path)) > 100:
        raise ValueError(f"{folder} is too long a path for munge's socket (a Unix socket's name is at most 107 bytes)")
    conf = folder / "slurm.conf"
    conf.write_text(f"""\
# A one-node cluster for the tests (tests/slurm_cluster.py): everything under {folder}.
ClusterName=fusiontest
SlurmctldHost={NODE}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "slurmctld.log"}
SlurmdLogFile={folder / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups (a container rarely delegates them), no accounting database.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Finished jobs stay known to slurmctld (scontrol, squeue) long enough for the class run to see how they ended.
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
NodeName={NODE} {node_hardware()} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


class Cluster:
    """The cluster of `folder`: started on entry (SLURM_CONF set for this process and its children), every process
    it started ended on exit. The logs are in the folder; `log()` gathers their ends for a failing test."""

    def __init__(self, folder: Path, timeout: float = 90):
        self.folder, self.timeout = Path(folder), timeout
        self.conf = self.folder / "slurm.conf"
        self.proc: subprocess.Popen | None = None
        self._saved_conf: str | None = None
        self._conf_set = False

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": _path()}

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        """A Slurm command against this cluster; returns its output."""
        out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({out.returncode}): {(out.stdout + out.stderr).strip()}\n"
                               f"{self.log()}")
        return out.stdout

    def start(self) -> None:
        reason = missing()
        if reason:
            raise RuntimeError(reason)
        write_config(self.folder)
        with open(self.folder / "supervisor.log", "w") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, str(self.folder), str(os.getpid())],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env(), start_new_session=True)
        self._saved_conf, self._conf_set = os.environ.get("SLURM_CONF"), True
        os.environ["SLURM_CONF"] = str(self.conf)
        deadline = time.monotonic() + self.timeout
        state = ""
        while time.monotonic() < deadline:  # up when the node takes jobs
            if self.proc.poll() is not None:
                raise RuntimeError(f"the test cluster stopped while starting ({self.proc.returncode})\n{self.log()}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30,
                                 env=self.env())
            state = out.stdout.strip()
            if out.returncode == 0 and state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test cluster's node is not idle after {self.timeout:.0f} s (it is {state!r})\n"
                           f"{self.log()}")

    def stop(self) -> None:
        """End the supervisor, which ends the daemons and every job's process; whatever is left is killed."""
        if self._conf_set:
            if self._saved_conf is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = self._saved_conf
            self._conf_set = False
        if self.proc is None:
            return
        tree = _descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for pid in [self.proc.pid] + tree:  # a supervisor that did not finish in time
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.proc = None

    def alive(self) -> list[int]:
        """The processes of this cluster still running (none once stopped)."""
        return [] if self.proc is None else [self.proc.pid] + _descendants(self.proc.pid)

    def log(self, lines: int = 30) -> str:
        parts = []
        for name in ("supervisor.log", "munge/munged.log", "slurmctld.log", "slurmd.log"):
            path = self.folder / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts)


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    return parents


def _descendants(pid: int) -> list[int]:
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


# -- the supervisor: python tests/slurm_cluster.py FOLDER PARENT_PID ---------------------------------------------


def supervise(folder: Path, parent: int) -> int:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the jobs' processes stay here
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    conf = folder / "slurm.conf"
    munge = folder / "munge"
    daemons = []

    def launch(*cmd):
        daemons.append(subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, cwd=folder))
        print("started", daemons[-1].pid, " ".join(cmd), flush=True)

    try:
        launch(_which("munged"), "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
               f"--socket={munge / 'socket'}", f"--pid-file={munge / 'munged.pid'}",
               f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}")
        deadline = time.monotonic() + 30
        while not (munge / "socket").exists():
            if time.monotonic() > deadline or daemons[0].poll() is not None:
                print("munged did not open its socket", flush=True)
                return 1
            time.sleep(0.1)
        launch(_which("slurmctld"), "-D", "-i", "-f", str(conf))  # -i: no state from a previous run
        launch(_which("slurmd"), "-D", "-N", NODE, "-f", str(conf))
        while not stopping:
            if os.getppid() != parent:  # whoever started the cluster is gone: end it
                print("the process that started the cluster is gone", flush=True)
                break
            for d in daemons:
                if d.poll() is not None:
                    print(f"{d.args[0]} ended ({d.returncode})", flush=True)
                    stopping.append(1)
            # Reap the orphans that climb up here as their parents end (slurmstepd's, jobs' leftovers).
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            time.sleep(0.5)
    finally:
        for d in reversed(daemons):  # slurmd, slurmctld, then munged: each says goodbye to the next
            with contextlib.suppress(ProcessLookupError):
                d.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.wait(timeout=10)
        # Then everything else below: slurmstepd, the jobs' tasks, what they left behind.
        for _ in range(50):
            left = _descendants(os.getpid())
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            time.sleep(0.1)
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1]), int(sys.argv[2])))
