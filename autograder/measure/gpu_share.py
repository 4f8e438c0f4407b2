"""Is this GPU shared right now? Read through NVML (nvidia-ml-py): the other processes computing on the GPU this
process uses, and how busy the GPU is while this process waits.

Two gradings at once on one GPU halve each other's measured bandwidth, and a peak measured while a neighbour
runs is low too. The performance criterion times the peak in turns with the kernel, which keeps ratios when the
clocks change; a neighbour whose load comes and goes between turns still skews them. So before timing, the
grader waits for the GPU to be free, and after it, where the GPU was busy with other work (or, where NVML cannot
tell, the peak fell well below what this GPU reached when profiled), it measures again; when it cannot get a clean
measurement it says so instead of grading (criteria/performance.py: measure).

Two course gradings on one machine never time at once, nor does one time while another runs anything on that GPU:
a timing (and the device profile's measurement) holds a lock per GPU alone (timing_lock), compiling and untimed
criteria hold it shared (untimed_work). Anything else computing on the GPU while a kernel is timed is caught from
NVML's per-process samples over the timed window (a device-wide reading after the turns misses a neighbour that
paused when this process did).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from pathlib import Path

BUSY_UTILIZATION = 10  # percent of the last sample period with a kernel running, this process idle
WAIT_S = 20.0  # how long to wait for a shared GPU to come free, per attempt
POLL_S = 0.5
SETTLE_S = 0.5  # idle before reading: NVML's utilization sample (1/6 to 1 s) then mostly covers others' work
LOCK_WAIT_S = 300.0  # how long a performance check waits for another grading's to finish on the same GPU


@dataclasses.dataclass
class Sharing:
    """What NVML shows of the GPU's other users; readable=False where NVML cannot tell (no driver, no library)."""

    readable: bool
    others: list[str] = dataclasses.field(default_factory=list)  # "pid 1234 (2.1 GiB)"
    utilization: int | None = None  # percent, sampled while this process was idle
    active: list[str] = dataclasses.field(default_factory=list)  # others that computed in the window asked about
    # Processes this one started (the submission's: it runs in this process) that computed in that window: not a
    # neighbour, and never a reason to grade again later (the performance criterion fails them by name).
    spawned: list[str] = dataclasses.field(default_factory=list)

    @property
    def shared(self) -> bool:
        # Busy, not merely occupied: an idle Jupyter kernel holding a CUDA context disturbs no timing.
        return bool(self.active) or (self.utilization is not None and self.utilization > BUSY_UTILIZATION)

    def describe(self) -> str:
        if not self.readable:
            return "NVML cannot tell"
        parts = []
        if self.others:
            parts.append(f"{len(self.others)} other process(es) on this GPU: {', '.join(self.others[:4])}")
        if self.active:
            parts.append(f"computing while your kernel was timed: {', '.join(self.active[:4])}")
        if self.utilization is not None and self.utilization > BUSY_UTILIZATION:
            parts.append(f"the GPU {self.utilization}% busy while the grader waited")
        return "; ".join(parts) or "no other process, idle"


def _handle(pynvml):
    """The NVML handle of the GPU torch uses here (by UUID; CUDA's index and NVML's may differ)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return pynvml.nvmlDeviceGetHandleByPciBusId(bus)


def _ours() -> set[int]:
    """This process and its ancestors, as this pid namespace numbers them."""
    pids, pid = set(), os.getpid()
    while pid > 1 and len(pids) < 64:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def now_us() -> int:
    """NVML's clock for its samples: microseconds since the epoch."""
    return int(time.time() * 1e6)


def _active_since(pynvml, handle, since_us: int, ours: set[int]) -> list[str]:
    """Other processes with a kernel or memory traffic in a sample taken since since_us. Empty where NVML keeps no
    per-process samples, or numbers processes as another pid namespace does (none of the samples is ours, although
    this process just computed)."""
    try:
        samples = [s for s in pynvml.nvmlDeviceGetProcessUtilization(handle, since_us) if s.timeStamp >= since_us]
    except Exception:  # noqa: BLE001  NVML_ERROR_NOT_FOUND (no sample yet) or not supported
        return []
    pids = {s.pid for s in samples}
    if not pids & ours:
        return []
    busy = sorted({s.pid for s in samples if s.pid not in ours and (s.smUtil or s.memUtil)})
    return [f"pid {pid}" for pid in busy]


def _split_spawned(active: list[str], children: set[int]) -> tuple[list[str], list[str]]:
    """(neighbours, processes this one started) among the active "pid N" entries."""
    mine = [a for a in active if int(a.split()[1]) in children]
    return [a for a in active if a not in mine], mine


def read(nvml=None, since_us: int | None = None) -> Sharing:
    """The GPU's other users now; with since_us, also the ones that computed since then. nvml: the pynvml module
    (tests pass a stand-in)."""
    try:
        pynvml = nvml
        if pynvml is None:
            import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  no driver or no nvidia-ml-py: nothing can be said
        return Sharing(readable=False)
    try:
        handle = _handle(pynvml)
        listed = list(pynvml.nvmlDeviceGetComputeProcesses(handle))
        ours = _ours()
        others = []
        # This process computes on the GPU, so NVML lists it. Where none of the listed pids is ours, NVML numbers
        # processes as another pid namespace does (a container): the list cannot be told apart from this process,
        # and only the utilization is used.
        if any(p.pid in ours for p in listed):
            for p in listed:
                if p.pid not in ours:
                    used = getattr(p, "usedGpuMemory", None)
                    others.append(f"pid {p.pid}" + (f" ({used / 2**30:.1f} GiB)" if isinstance(used, int) else ""))
        utilization = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        active = _active_since(pynvml, handle, since_us, ours) if since_us is not None else []
        children = set(descendants())
        active, spawned = _split_spawned(active, children)
        others = [o for o in others if int(o.split()[1]) not in children]
        return Sharing(True, others, utilization, active, spawned)
    except Exception:  # noqa: BLE001  a query this driver does not answer
        return Sharing(readable=False)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def wait_until_free(wait_s: float = WAIT_S, reader=None, sleep=time.sleep, since_us: int | None = None) -> Sharing:
    """Sharing once the GPU is free, or as it still is after wait_s. Starts after a pause, so that the utilization
    sampled no longer counts this process's own last kernels. since_us: also ask who computed since then."""
    reader = reader or (lambda: read(since_us=since_us))
    sleep(SETTLE_S)
    deadline = time.monotonic() + wait_s
    state = reader()
    while state.shared and time.monotonic() < deadline:
        sleep(POLL_S)
        state = reader()
    return state


def _lock_file(uuid: str) -> Path:
    """A GPU's lock file, named after its UUID as NVML and torch both give it (torch leaves out "GPU-")."""
    key = (uuid[4:] if uuid.startswith("GPU-") else uuid).replace("/", "-")
    return Path(tempfile.gettempdir()) / f"fusion-course-timing-{key}.lock"


def _lock_path() -> Path:
    """One lock file per GPU of this machine (by UUID: CUDA_VISIBLE_DEVICES renumbers devices per process)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    key = str(getattr(props, "uuid", "") or f"{props.pci_domain_id}-{props.pci_bus_id}-{props.pci_device_id}")
    return _lock_file(key)


def _turn_path(path: Path) -> Path:
    """The turnstile beside a GPU's lock: a timing waiting for the lock holds it, so that no grading starts new
    untimed work on that GPU until the timing has had its turn (readers never starve a writer)."""
    return path.with_name(path.stem + "-turn.lock")


def make_lock_files(nvml=None) -> list[Path]:
    """Create the lock files of every GPU NVML lists (lockable by every user): gradings in a sandbox with a /tmp
    of its own then find them there (guard/sandbox.py binds them in). [] without NVML."""
    try:
        pynvml = nvml
        if pynvml is None:
            import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  no driver or no nvidia-ml-py: no GPU to lock
        return []
    made = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            main = _lock_file(uuid)
            for path in (main, _turn_path(main)):
                fd = _open(path)
                if fd is not None:
                    with contextlib.suppress(OSError):  # another user's file: it is there, which is what counts
                        os.fchmod(fd, 0o666)  # past the umask: another user's grading locks it too
                    os.close(fd)
                    made.append(path)
    except Exception:  # noqa: BLE001  a query this driver does not answer
        pass
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return made


_HELD_HERE: dict[str, int] = {}  # lock file -> holds the grader has on it here; this process's others: the submission's


def _open(path: Path) -> int | None:
    try:  # read-only: another user's lock file still locks
        return os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:  # made unopenable (a folder in its place, no read permission)
        return None


def _take(fcntl, fd: int, path: Path, mode: int, deadline: float, sleep) -> bool:
    """flock(fd, mode), polling until deadline; False at the deadline. Raises LockedBySubmission at once when the
    holder is this process (not through the grader) or a process it started."""
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            mine = lock_holders(path) & ({os.getpid()} | set(descendants()))
            if mine and str(path) not in _HELD_HERE:  # this process holds it, and not through the grader
                raise LockedBySubmission(
                    f"the grader's timing lock ({path}) is held by this process itself (pid "
                    f"{', '.join(map(str, sorted(mine)))}), so by the submission: release it") from None
            if time.monotonic() >= deadline:
                return False
            sleep(POLL_S)


@contextlib.contextmanager
def _gpu_lock(path: Path | None, exclusive: bool, wait_s: float, sleep):
    """The GPU's lock, exclusive (a timing) or shared (untimed work), taken through the turnstile; yields whether
    it is held."""
    try:
        import fcntl
    except ImportError:  # no file locks (Windows)
        yield True
        return
    path = Path(path or _lock_path())
    fd, turn = _open(path), _turn_path(path)
    if fd is None:  # time without it, never skip
        yield True
        return
    turn_fd, held, turned = _open(turn), False, False
    try:
        deadline = time.monotonic() + wait_s
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        # A timing keeps the turnstile until it is done; untimed work only passes through it.
        turned = turn_fd is not None and _take(fcntl, turn_fd, turn, mode, deadline, sleep)
        if turned:
            _hold(turn, 1)
        if turned or turn_fd is None:
            held = _take(fcntl, fd, path, mode, deadline, sleep)
        if held:
            _hold(path, 1)
        if turned and not exclusive:
            fcntl.flock(turn_fd, fcntl.LOCK_UN)
            _hold(turn, -1)
            turned = False
        yield held
    finally:
        if held:
            _hold(path, -1)
        if turned:
            _hold(turn, -1)
        os.close(fd)  # closing releases the locks
        if turn_fd is not None:
            os.close(turn_fd)


def holding() -> bool:
    return bool(_HELD_HERE)  # the grader holds a GPU lock in this process now


def _hold(path: Path, n: int) -> None:
    """Count a hold of the grader's on path (n=1), or its end (n=-1)."""
    _HELD_HERE[str(path)] = _HELD_HERE.get(str(path), 0) + n
    if _HELD_HERE[str(path)] <= 0:
        del _HELD_HERE[str(path)]


@contextlib.contextmanager
def timing_lock(wait_s: float = LOCK_WAIT_S, path: Path | None = None, sleep=time.sleep):
    """Held by one course grading at a time per GPU while it times, and by none while another grading runs
    untimed work there; yields True once held, False when others kept it for wait_s, True without file locks
    (Windows). Raises LockedBySubmission at once when this process (not through this module) or one it started
    holds it: the submission took the lock so that its kernel would never be timed."""
    with _gpu_lock(path, True, wait_s, sleep) as held:
        yield held


@contextlib.contextmanager
def untimed_work(wait_s: float = LOCK_WAIT_S, path: Path | None = None, sleep=time.sleep):
    """Held, shared with other gradings' untimed work, while a grading compiles or runs its untimed criteria on
    this GPU: another grading's timing never meets that work in its turns, and it waits for that timing. Yields
    whether it is held; never raises for the lock: after wait_s, or where the submission holds the lock itself
    (the performance criterion names that), the work runs without it, as only timings need the GPU alone."""
    stack = contextlib.ExitStack()
    try:
        held = stack.enter_context(_gpu_lock(path, False, wait_s, sleep))
    except LockedBySubmission:
        held = False
    with stack:
        yield held


# ---------------------------------------------------------------------------------------------------------------
# What the submission started is the submission's: its processes and its hold on the grader's lock are named and
# failed, never mistaken for a neighbour on a shared GPU.

# Workers that libraries start for themselves (Inductor's compile pool, Triton's), told apart by their command line.
LIBRARY_CHILDREN = ("torch/_inductor", "compile_worker", "triton", "ipykernel", "jupyter")


def descendants(pid: int | None = None) -> dict[int, str]:
    """{pid: command line} of every live process below pid (this one by default), from /proc; {} where there is
    no /proc (then nothing can be said, and nothing is failed)."""
    found, todo = {}, [pid or os.getpid()]
    while todo and len(found) < 4096:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in found:
                    found[kid] = _cmdline(kid)
                    todo.append(kid)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def submission_processes(children: dict[int, str] | None = None) -> list[str]:
    """"pid N (command)" of each live process this one started that is no library's worker: the submission's
    (the grader starts none while it times)."""
    children = descendants() if children is None else children
    shown = {pid: (cmd if len(cmd) <= 100 else "..." + cmd[-97:]) or "exited" for pid, cmd in children.items()}
    return [f"pid {pid} ({shown[pid]})" for pid, cmd in sorted(children.items())
            if not any(lib in cmd for lib in LIBRARY_CHILDREN)]


class LockedBySubmission(RuntimeError):
    """The grader's timing lock is held by this very process (or one it started): the submission took it."""


def lock_holders(path: Path, locks_text: str | None = None) -> set[int]:
    """The pids holding a lock on the file at path, from /proc/locks (empty where it cannot be read)."""
    try:
        st = os.stat(path)
        text = locks_text if locks_text is not None else Path("/proc/locks").read_text()
    except OSError:
        return set()
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in text.splitlines():
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        for i, field in enumerate(fields[:-1]):
            if field.count(":") == 2 and _same_file(field, want) and i > 0 and fields[i - 1].isdigit():
                holders.add(int(fields[i - 1]))
    return holders


def _same_file(a: str, b: str) -> bool:
    """maj:min:inode in /proc/locks (hex device numbers, decimal inode) against ours, however padded."""
    try:
        pa, pb = a.split(":"), b.split(":")
        return (int(pa[0], 16), int(pa[1], 16), int(pa[2])) == (int(pb[0], 16), int(pb[1], 16), int(pb[2]))
    except (ValueError, IndexError):
        return False
