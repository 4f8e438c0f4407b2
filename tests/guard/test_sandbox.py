"""The sandbox a student's notebook runs in during grade-class (autograder.guard.sandbox): nothing outside its
workspace writable, no network, no other process visible, every capability dropped; and the plain fallback,
said once, where bwrap cannot make it."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder import config
from autograder.guard import sandbox


@pytest.fixture(scope="module")
def bwrap() -> str:
    """The bwrap that sandboxes here; the tests that need it are skipped with bwrap's reason otherwise."""
    try:
        decision = sandbox.decide("auto")
    except ValueError as exc:
        pytest.skip(str(exc))
    if not decision.use:
        pytest.skip(f"no sandbox on this machine: {decision.why_not}")
    return decision.bwrap


def inside(bwrap: str, work: Path, code: str, env: dict | None = None, timeout: float = 120) -> dict:
    """Run Python code in the sandbox around `work` (from a file there: Triton's jit reads its source); it prints
    one JSON object, returned here."""
    script = work / "probe_sandbox.py"
    script.write_text(code)
    cmd = sandbox.command([sys.executable, str(script)], work, bwrap)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          check=False, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


WRITES = """
import json
out = {}
for name, path in [("workspace", "inside.txt"), ("outside", OUTSIDE),
                   ("tmp", "/tmp/scratch.txt"), ("shm", "/dev/shm/scratch")]:
    try:
        with open(path, "w") as f:
            f.write("written")
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__ + ": " + exc.strerror
out["caps"] = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")][0]
try:
    open(BESIDE).read()
    out["beside"] = "read"
except OSError as exc:
    out["beside"] = type(exc).__name__
print(json.dumps(out))
"""


def test_only_the_workspace_is_writable(bwrap, tmp_path):
    work, beside = tmp_path / "work", tmp_path / "other-student.txt"
    work.mkdir()
    beside.write_text("their answer")
    outside = Path(sys.prefix) / f"planted-{os.getpid()}.txt"  # the installed packages, say
    try:
        out = inside(bwrap, work, f"OUTSIDE, BESIDE = {str(outside)!r}, {str(beside)!r}\n" + WRITES)
    finally:
        planted = outside.exists()
        outside.unlink(missing_ok=True)
    assert out["workspace"] == "ok" and (work / "inside.txt").read_text() == "written"
    assert out["outside"].startswith("OSError: Read-only") and not planted, out
    # /tmp and /dev/shm are the sandbox's own: writable there, and nothing reaches this machine's (not even the
    # folder beside the workspace, another student's in a class run).
    assert out["tmp"] == "ok" and out["shm"] == "ok"
    assert not Path("/tmp/scratch.txt").exists() and not Path("/dev/shm/scratch").exists()
    assert out["beside"] == "FileNotFoundError" and beside.read_text() == "their answer"
    assert int(out["caps"], 16) == 0, "a capability left in the sandbox (as root, CAP_SYS_ADMIN remounts / writable)"


def test_what_the_grading_reads_under_tmp_stays_readable_not_writable(bwrap, tmp_path, monkeypatch):
    """A checkout or virtual environment under /tmp is bound back into the sandbox's empty /tmp, read-only."""
    tool = tmp_path / "venv" / "tool.py"
    tool.parent.mkdir()
    tool.write_text("GRADER = 1\n")
    needed = sandbox._needed()  # the interpreter too: this checkout's virtual environment may be under /tmp
    monkeypatch.setattr(sandbox, "_needed", lambda: needed + [tool.parent])
    work = tmp_path / "work"
    work.mkdir()
    code = f"""
import json
out = {{"read": open({str(tool)!r}).read()}}
try:
    open({str(tool)!r}, "a").write("GRADER = 0")
    out["write"] = "ok"
except OSError as exc:
    out["write"] = exc.strerror
print(json.dumps(out))
"""
    out = inside(bwrap, work, code)
    assert out == {"read": "GRADER = 1\n", "write": "Read-only file system"}
    assert tool.read_text() == "GRADER = 1\n"



def test_a_kernel_specification_registered_under_tmp_is_found_in_the_sandbox(bwrap, tmp_path, monkeypatch):
    """nbgrader starts the notebook's kernel by name: a specification registered under /tmp (JUPYTER_PATH, as on
    a machine whose course packages were unpacked there) must not vanish behind the sandbox's empty /tmp."""
    jupyter = tmp_path / "jupyter"
    spec = jupyter / "kernels" / "course-under-tmp"
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                                 "{connection_file}"],
                                                        "display_name": "course", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    work = tmp_path / "work"
    work.mkdir()
    code = """
import json
from jupyter_client.kernelspec import KernelSpecManager
print(json.dumps(sorted(KernelSpecManager().find_kernel_specs())))
"""
    assert "course-under-tmp" in inside(bwrap, work, code)

def test_the_network_is_unreachable(bwrap, tmp_path):
    """Only a loopback of its own: even a server on this machine's 127.0.0.1 cannot be reached."""
    server = socket.create_server(("127.0.0.1", 0))  # listening: the kernel would complete a connection
    port = server.getsockname()[1]
    code = f"""
import json, socket
out = {{"interfaces": sorted(name for _, name in socket.if_nameindex())}}
for name, where in [("host_loopback", ("127.0.0.1", {port})), ("internet", ("1.1.1.1", 53))]:
    try:
        socket.create_connection(where, timeout=5).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""
    try:
        out = inside(bwrap, tmp_path, code)
    finally:
        server.close()
    assert out["interfaces"] == ["lo"], out
    assert out["host_loopback"] != "connected" and out["internet"] != "connected", out


def test_the_process_namespace_hides_the_machines_processes(bwrap, tmp_path):
    code = """
import json, os
print(json.dumps({"me": os.getpid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
"""
    out = inside(bwrap, tmp_path, code)
    assert os.getpid() not in out["pids"] and os.getppid() not in out["pids"]
    assert len(out["pids"]) <= 3 and out["me"] <= 3, out  # bwrap's init, this Python (and a shell, on some bwraps)


def test_the_judge_is_reached_and_the_course_settings_are_not(bwrap, tmp_path):
    """A student's process reaches the judge through the socket in its workspace, while the course's grading file
    and secret seed, readable elsewhere on the machine, cannot be read inside (bwrap's /dev/null over them is
    refused, or reads empty)."""
    from autograder.judge.launch import JudgeProcess

    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("needs a writable folder outside /tmp (the sandbox's own /tmp hides everything under it)")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as course:
        grading = Path(course) / "grading.toml"
        grading.write_text("trials = 2\n")
        secret = config.secret_file(grading)
        secret.write_text("secret_seed = 97531\n")
        code = f"""
import json
from autograder.link import session


def read(path):
    try:
        return open(path).read()
    except OSError as exc:
        return type(exc).__name__


out = {{"trials": session.settings()["trials"], "grading": read({str(grading)!r}), "secret": read({str(secret)!r})}}
print(json.dumps(out))
"""
        with JudgeProcess(tmp_path / ".judge.sock", grading) as judge:
            cmd = sandbox.command([sys.executable, "-c", code], tmp_path, bwrap, conceal=[grading, secret])
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                                  check=False, env=judge.student_env(dict(os.environ)))
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["trials"] == 2, out  # from the judge, which read the file
        assert out["grading"] in ("", "PermissionError") and out["secret"] in ("", "PermissionError"), out


def test_torch_imports_and_runs_without_a_gpu(bwrap, tmp_path):
    code = """
import json, torch
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
print(json.dumps({"sum": (x @ x.T).sum().item(), "cuda": torch.cuda.is_available()}))
"""
    out = inside(bwrap, tmp_path, code, env={"CUDA_VISIBLE_DEVICES": ""})
    assert out == {"sum": 83.0, "cuda": False}


@pytest.mark.gpu
def test_cuda_and_triton_run_in_the_sandbox(bwrap, tmp_path):
    code = """
import json, torch, triton, triton.language as tl

@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

x = torch.ones(1000, device="cuda")
_double[(4,)](x, 1000, BLOCK=256)
print(json.dumps({"sum": x.sum().item(), "name": torch.cuda.get_device_name()}))
"""
    out = inside(bwrap, tmp_path, code, env={"TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton")})
    assert out["sum"] == 2000.0, out


def test_whatever_the_notebook_leaves_running_ends_with_the_sandbox(bwrap, tmp_path):
    """A daemon that left its session still dies when the sandbox's first process ends (its pid namespace goes)."""
    code = """
import json, os, subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3171)"], start_new_session=True)
print(json.dumps({"daemon": p.pid}))
"""
    cmd = sandbox.command([sys.executable, "-c", code], tmp_path, bwrap)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    # Nothing of it is left among this machine's processes (the kernel ends a pid namespace's processes with it).
    deadline = time.monotonic() + 10
    pgrep = ["pgrep", "-f", "time.sleep\\(3171\\)"]
    while left := subprocess.run(pgrep, capture_output=True, text=True, check=False).stdout.split():
        assert time.monotonic() < deadline, f"still running after the sandbox ended: {left}"
        time.sleep(0.1)


def _fake_bwrap(tmp_path: Path, message: str) -> Path:
    """A bwrap that refuses, as one does in a container that forbids the namespaces it needs."""
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake


def test_refused_namespaces_fall_back_once_with_bwraps_reason(tmp_path, monkeypatch):
    refusal = "bwrap: No permissions to create a new namespace, likely because the kernel does not allow it"
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(_fake_bwrap(tmp_path, refusal)))
    said = []
    decision = sandbox.choose("auto", echo=said.append)
    assert not decision.use and refusal in decision.why_not
    sandbox.choose("auto", echo=said.append)
    assert len(said) == 1 and refusal in said[0] and "without a sandbox" in said[0] and "=required" in said[0]
    with pytest.raises(sandbox.SandboxUnavailable, match="required.*No permissions to create a new namespace"):
        sandbox.decide("required")
    assert sandbox.decide("off").use is False


def test_a_required_sandbox_that_cannot_be_made_grades_nobody(tmp_path, monkeypatch):
    from autograder.classroom.course import NOT_RUN
    from autograder.classroom.process import grade_one

    monkeypatch.setenv(sandbox.BWRAP_ENV, str(_fake_bwrap(tmp_path, "bwrap: Creating new namespace failed")))
    monkeypatch.setenv(sandbox.SETTING_ENV, "required")
    grading = tmp_path / "grading.toml"
    grading.write_text("")
    status, reason = grade_one(tmp_path, "mini", "alice", 60, grading)
    assert status == NOT_RUN and "Creating new namespace failed" in reason and "next run" in reason
    assert not (tmp_path / ".grading.toml").exists()  # nothing was prepared, nothing run


def test_bad_settings_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="one of auto, required, off"):
        sandbox.setting("sometimes")
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(tmp_path / "nowhere" / "bwrap"))
    with pytest.raises(ValueError, match="not an executable file"):
        sandbox.decide("auto")


def test_exit_codes_of_a_signal_read_back():
    assert sandbox.exit_signal(128 + 11) == 11 and sandbox.exit_signal(1) is None and sandbox.exit_signal(0) is None
