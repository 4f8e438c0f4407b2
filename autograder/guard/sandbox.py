"""Where a student's notebook runs during grade-class: a bubblewrap (bwrap) sandbox that it cannot write out of.

Inside it the whole filesystem is mounted read-only but the student's workspace; /tmp and /dev/shm are private
and empty; there is no network but a loopback of its own (the kernel and nbgrader talk over it); the process
namespace is its own (no other process of the machine can be seen, signalled or traced, and whatever the
notebook leaves running ends with it); every capability is dropped (bwrap run by root would otherwise leave
them, and root with CAP_SYS_ADMIN can remount / read-write). The GPUs stay usable: /dev is bound as it is.
So tampering with the gradebook, another student's workspace, the installed packages or Jupyter's
configuration is prevented, not merely detected afterwards (guard.footprint remains as a second line).

    FUSION_COURSE_SANDBOX=auto       (the default) sandbox where bwrap works, else say why once and grade with
                                     process isolation and the footprint check alone
    FUSION_COURSE_SANDBOX=required   refuse to grade where the sandbox cannot be made
    FUSION_COURSE_SANDBOX=off        no sandbox
    FUSION_COURSE_BWRAP=/path/bwrap  the bwrap to use (default: `bwrap` on PATH; Debian: apt-get install bubblewrap)

Some containers refuse the namespaces bwrap needs (no user namespaces for an unprivileged user, a seccomp
filter on clone): a probe runs bwrap once per process and keeps the reason it gave.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.measure import gpu_share
from autograder.measure.device import cache_dir

SETTING_ENV = "FUSION_COURSE_SANDBOX"
BWRAP_ENV = "FUSION_COURSE_BWRAP"
SETTINGS = ("auto", "required", "off")
PROBE_TIMEOUT_S = 60
# The course's source tree (this file is autograder/guard/sandbox.py in it): the grader and the kernels.
COURSE_ROOT = Path(__file__).parents[2]


class SandboxUnavailable(ValueError):
    """FUSION_COURSE_SANDBOX=required, and bwrap cannot sandbox the students here (a ValueError: the command
    line reports it as a usage error, before any student is graded)."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether the students' processes run in the sandbox, the bwrap that makes it, and otherwise why not."""

    use: bool
    setting: str
    bwrap: str = ""
    why_not: str = ""


def setting(value: str | None = None) -> str:
    """auto, required or off: the given value, else FUSION_COURSE_SANDBOX, else auto."""
    raw = value if value is not None else os.environ.get(SETTING_ENV, "")
    chosen = raw.strip().lower() or "auto"
    if chosen not in SETTINGS:
        raise ValueError(f"{SETTING_ENV}={raw!r}: the sandbox setting is one of {', '.join(SETTINGS)}")
    return chosen


def find_bwrap() -> str | None:
    """FUSION_COURSE_BWRAP when set (it must exist), else bwrap on PATH, else None."""
    given = os.environ.get(BWRAP_ENV, "").strip()
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise ValueError(f"{BWRAP_ENV}={given!r} is not an executable file")
        return given
    return shutil.which("bwrap")


def _timing_locks() -> list[str]:
    """The GPU timing locks of this machine (measure.gpu_share), made here for every GPU NVML lists where none
    was yet, so that a sandboxed student's private /tmp still shares them with every other grading."""
    gpu_share.make_lock_files()
    return sorted(glob.glob(os.path.join(tempfile.gettempdir(), "fusion-course-timing-*.lock")))


def _needed() -> list[Path]:
    """What the grading process reads outside its workspace: the interpreter's prefixes, its import path, the
    course's source tree (the grader and the kernels, installed editable), the device profiles, and Jupyter's
    folders (the course's kernel specification may be registered under /tmp, through JUPYTER_PATH)."""
    found = [Path(sys.prefix), Path(sys.base_prefix), COURSE_ROOT, cache_dir()]
    found += [Path(p) for p in sys.path if p and os.path.isdir(p)]
    try:
        from jupyter_core import paths

        found += [Path(p) for p in paths.jupyter_path() + paths.jupyter_config_path() if os.path.isdir(p)]
    except ImportError:  # no Jupyter here: nothing of it to read
        pass
    return sorted({p.resolve() for p in found}, key=lambda p: len(p.parts))


def command(cmd: list[str], workspace: Path, bwrap: str = "bwrap", hide=(), conceal=()) -> list[str]:
    """The bwrap command line that runs cmd in the sandbox, writable only in workspace (also its working folder).

    hide: folders to cover with an empty one (the class run's folder of workspaces: another student's, graded at
    the same time, is no business of this one); a folder holding the home folder or the interpreter is never
    hidden. What the grading reads (_needed) and an empty /tmp or a hidden folder would cover is bound back,
    read-only (a checkout or a virtual environment under /tmp, say). conceal: files covered with /dev/null inside, which
    opening is refused (bwrap mounts it without devices) or reads as empty: the course's grading settings and
    secret seed, which only the judge reads."""
    work = Path(workspace).resolve()
    args = [bwrap, "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc",
            "--tmpfs", "/tmp"]
    covered = [Path("/tmp")]
    keep = [Path.home().resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    for folder in (Path(p).resolve() for p in hide):
        if folder != Path("/") and work.is_relative_to(folder) and not any(k.is_relative_to(folder) for k in keep):
            args += ["--tmpfs", str(folder)]
            covered.append(folder)
    for path in _needed():
        if any(path.is_relative_to(c) for c in covered) and not path.is_relative_to(work):
            args += ["--ro-bind-try", str(path), str(path)]
    for lock in _timing_locks():
        if Path(lock).parent == Path("/tmp"):
            args += ["--ro-bind-try", lock, lock]  # flock works on a read-only file
    for secret in (Path(p).resolve() for p in conceal):
        if secret.is_file() and not any(secret.is_relative_to(c) for c in covered):
            args += ["--ro-bind", "/dev/null", str(secret)]
    args += ["--bind", str(work), str(work), "--chdir", str(work), "--setenv", "TMPDIR", "/tmp", "--"]
    return args + [str(c) for c in cmd]


def exit_signal(returncode: int) -> int | None:
    """The signal that ended the sandboxed command: bwrap exits with 128 + its number."""
    return returncode - 128 if 128 < returncode < 128 + 65 else None


@functools.cache
def probe(bwrap: str) -> str:
    """'' where bwrap can make the sandbox here (this Python runs in it), else the reason it gave."""
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        cmd = command([sys.executable, "-c", "import os; os.write(1, b'inside')"], Path(tmp), bwrap)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{bwrap} could not be run ({type(exc).__name__}: {exc})"
    if done.returncode == 0 and done.stdout == "inside":
        return ""
    said = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
    return said[-1][:300] if said else f"{bwrap} exited with code {done.returncode} and said nothing"


def decide(value: str | None = None) -> Decision:
    """Whether to sandbox the students here (raises SandboxUnavailable when it is required and cannot be)."""
    chosen = setting(value)
    if chosen == "off":
        return Decision(False, chosen, why_not=f"turned off ({SETTING_ENV}=off)")
    if not sys.platform.startswith("linux"):
        why = "bubblewrap sandboxes on Linux only"
    elif (bwrap := find_bwrap()) is None:
        why = (f"bwrap is not installed (Debian and Ubuntu: apt-get install bubblewrap, which `make sandbox` does "
               f"as root; or point {BWRAP_ENV} at one)")
    elif said := probe(bwrap):
        why = f"bwrap cannot make its namespaces here: {said}"
    else:
        return Decision(True, chosen, bwrap)
    if chosen == "required":
        raise SandboxUnavailable(f"{SETTING_ENV}=required, but the students' notebooks cannot be sandboxed: {why}")
    return Decision(False, chosen, why_not=why)


_announced: set[Decision] = set()


def choose(value: str | None = None, echo=None) -> Decision:
    """decide(), and where it falls back (auto), say so once per process: through echo, else on stderr."""
    decision = decide(value)
    if not decision.use and decision.setting == "auto" and decision not in _announced:
        _announced.add(decision)
        message = (f"students are graded without a sandbox: {decision.why_not}. Their notebooks run with your "
                   "rights, in processes of their own, and a change outside their workspace is found afterwards "
                   f"(set {SETTING_ENV}=required to refuse to grade without the sandbox, =off to silence this)")
        (echo or (lambda m: print(m, file=sys.stderr, flush=True)))(message)
    return decision
