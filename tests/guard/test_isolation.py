"""The pieces grade-class isolates students with: the static scan, the file fingerprint, the subreaper."""

import json
import os
import subprocess
import sys
import time

import pytest

from autograder.guard import procs
from autograder.guard.footprint import Footprint
from autograder.guard.scan import scan_notebook, scan_source


@pytest.mark.parametrize("name", ["01_hbm_cost_model", "02_vertical_fusion"])
def test_the_course_notebooks_raise_no_flag(root, name):
    """The release raises none; the solutions only the names of the reference kernels they hold."""
    release = json.loads((root / "course" / name / f"{name}.ipynb").read_text())
    assert scan_notebook(release) == []
    solution = json.loads((root / "solutions" / name / f"{name}.ipynb").read_text())
    flags = scan_notebook(solution)
    assert flags and all("this is the course's reference kernel for" in f or "teaching kernel" in f for f in flags), flags


@pytest.mark.parametrize("code, flag", [
    ("import torch\ntorch.allclose = lambda *a, **k: True", "assigns torch.allclose"),
    ("from x import y as check", "imports something as `check`"),
    ("def check(*a): pass", "defines `check`"),
    ("import sys\nsys.modules['autograder'] = None", "assigns an item of sys.modules"),
    ("f.__code__ = g.__code__", "replaces a function's code"),
    ("setattr(torch, 'equal', f)", "setattr()"),
    ("get_ipython().input_transformers_post.append(f)", "rewrites cells before Jupyter runs them"),
    ("get_ipython().events.callbacks['pre_run_cell'].clear()", "changes Jupyter's hooks around cells"),
    ("from subprocess import Popen\nPopen(['sh'])", "starts processes"),
    ("s = torch.cuda.Stream()", "side CUDA stream"),
    ("frame = sys._getframe(1)", "inspects the call stack"),
    ("open('../../gradebook.db', 'w')", "the course's files"),
    ("os.environ['FUSION_COURSE_GRADING'] = 'x.toml'", "assigns an item of os.environ"),
    ("pid = open(f'/proc/{p}/stat').read()", "reads /proc"),
])
def test_the_scan_names_suspect_code(code, flag):
    found = " | ".join(what for _, what in scan_source(code))
    assert flag in found, found


def test_the_scan_reports_cells_above_the_setup_cell_and_unparsable_ones():
    cell = lambda src, **meta: {"cell_type": "code", "source": src, "metadata": {"nbgrader": meta}}  # noqa: E731
    nb = {"cells": [cell("import torch"), cell("import autograder", grade_id="setup", locked=True),
                    cell("%time x = 1\ny = torch.zeros(3)\ndef f(:", grade_id="answer", solution=True)]}
    flags = scan_notebook(nb)
    assert flags[0] == "cell #1: code above the set-up cell (runs before the grader is imported)"
    assert flags[1].startswith("cell answer line 3: does not parse as Python")


def test_the_footprint_names_every_change_even_with_the_time_set_back(tmp_path):
    (tmp_path / "sub").mkdir()
    kept, other = tmp_path / "sub" / "kept.txt", tmp_path / "other.txt"
    kept.write_text("grades")
    other.write_text("x")
    fp = Footprint([tmp_path])
    assert fp.changes() == []
    stat = kept.stat()
    kept.write_text("GRADES")  # same size, and the times put back: the ctime still moves
    os.utime(kept, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (tmp_path / "sub" / "new.txt").write_text("y")
    other.unlink()
    assert fp.changes() == sorted(str(p) for p in (kept, tmp_path / "sub" / "new.txt", other))
    fp.refresh([tmp_path / "sub", other])
    assert fp.changes() == []


@pytest.mark.skipif(not procs.LINUX, reason="subreapers are a Linux feature")
def test_a_subreaper_ends_a_daemon_that_left_its_session(tmp_path):
    pidfile = tmp_path / "daemon.pid"
    daemon = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
              "        time.sleep(120)\n"
              "    os._exit(0)\n")
    assert procs.become_subreaper()
    try:
        before = procs.children()
        subprocess.run([sys.executable, "-c", daemon, str(pidfile)], check=True)
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        deadline = time.monotonic() + 30
        while pid not in procs.children():  # its parent exits; it climbs up to this process
            assert time.monotonic() < deadline, "the daemon did not come up to the subreaper"
            time.sleep(0.05)
        assert procs.end_children(keep=before) >= 1
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        procs.become_subreaper(False)


def _jupyter_folders(tmp_path, monkeypatch) -> tuple:
    """Jupyter's configuration, data and runtime folders for this test alone (as the instructor's ~/.jupyter and
    ~/.local/share/jupyter would be)."""
    config, data = tmp_path / "jupyter-config", tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(data / "runtime"))
    return config, data


# What a running JupyterLab writes while an instructor works beside the grading: its server's runtime files, the
# saved layout of its workspace, a changed setting, the notebook-trust and file-id databases. Then it says how many
# rounds it wrote in a file of its own, and goes on until ended.
JUPYTERLAB_LIKE = r"""
import json, os, sqlite3, sys, time
from pathlib import Path

config, data, count = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
files = [data / "runtime" / f"jpserver-{os.getpid()}.json", data / "runtime" / f"kernel-{os.getpid()}.json",
         config / "lab" / "workspaces" / "default-37a8.jupyterlab-workspace",
         config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings"]
for f in files:
    f.parent.mkdir(parents=True, exist_ok=True)
rounds = 0
while True:
    rounds += 1
    for f in files:
        f.write_text(json.dumps({"round": rounds, "time": time.time()}))
    for name in ("nbsignatures.db", "file_id_manager.db"):
        with sqlite3.connect(data / name) as db:
            db.execute("create table if not exists seen (round integer)")
            db.execute("insert into seen values (?)", (rounds,))
    partial = count.with_name(count.name + ".partial")  # replaced whole: a reader never sees it half written
    partial.write_text(str(rounds))
    os.replace(partial, count)
    time.sleep(0.2)
"""


def _rounds(count):
    """How many rounds the stand-in has written so far (0 before its first)."""
    return int(count.read_text()) if count.exists() else 0


def test_the_footprint_leaves_out_what_a_running_jupyterlab_writes(tmp_path, monkeypatch):
    from autograder.guard.footprint import watched_roots

    config, data = _jupyter_folders(tmp_path, monkeypatch)
    roots = watched_roots(tmp_path / "course", sandboxed=False)
    assert config in roots and data in roots  # watched even before they exist: a kernel planted there would count
    fp = Footprint(roots)
    lab = subprocess.Popen([sys.executable, "-c", JUPYTERLAB_LIKE, str(config), str(data), str(tmp_path / "rounds")])
    try:
        deadline = time.monotonic() + 60
        while _rounds(tmp_path / "rounds") < 3:
            assert time.monotonic() < deadline and lab.poll() is None, "the JupyterLab stand-in did not run"
            time.sleep(0.1)
        assert fp.changes() == []
        planted = data / "kernels" / "python3" / "kernel.json"  # what a notebook could plant: still seen
        planted.parent.mkdir(parents=True)
        planted.write_text("{}")
        assert fp.changes() == [str(planted)]
    finally:
        lab.kill()
        lab.wait()
    assert watched_roots(tmp_path / "course", sandboxed=True) == [(tmp_path / "course").resolve()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["off", "sandbox"])
def test_a_class_graded_beside_a_running_jupyterlab_has_no_tampered_student(tmp_path, monkeypatch, mode):
    """An instructor's JupyterLab writing its state while the class is graded makes nobody "tampered", without the
    sandbox (the footprint leaves its state out) and with it; in the sandbox, a notebook that tries to write into
    the course folder and Jupyter's configuration is refused, and graded like anyone else."""
    import classroom

    from autograder.classroom.grade_class import grade_class
    from autograder.guard import sandbox

    if mode == "sandbox":
        decision = sandbox.decide("auto")
        if not decision.use:
            pytest.skip(f"no sandbox on this machine: {decision.why_not}")
    monkeypatch.setenv(sandbox.SETTING_ENV, "auto" if mode == "sandbox" else "off")
    config, data = _jupyter_folders(tmp_path, monkeypatch)
    course = tmp_path / "course"
    course.mkdir()
    db = classroom.make_course(course)
    classroom.submit(course, "alice")
    planted = [course / "planted.txt", config / "jupyter_server_config.py"]
    if mode == "sandbox":
        attempt = ("\nfor target in %r:\n    try:\n        open(target, 'w').write('c.x = 1')\n"
                   "    except OSError as exc:\n        print('refused', exc)\n" % [str(p) for p in planted])
        classroom.submit(course, "mallory", {"fused_chain": classroom.solutions()["fused_chain"] + attempt})
    else:
        classroom.submit(course, "bob")
    rounds = tmp_path / "rounds"
    lab = subprocess.Popen([sys.executable, "-c", JUPYTERLAB_LIKE, str(config), str(data), str(rounds)])
    try:
        deadline = time.monotonic() + 60
        while _rounds(rounds) < 1:
            assert time.monotonic() < deadline and lab.poll() is None, "the JupyterLab stand-in did not start"
            time.sleep(0.1)
        before = _rounds(rounds)
        log = []
        rows = grade_class(course, classroom.ASSIGNMENT, timeout=300, db_url=db, echo=log.append, progress=False)
        assert lab.poll() is None and _rounds(rounds) > before + 5, "JupyterLab's stand-in stopped writing"
    finally:
        lab.kill()
        lab.wait()
    full = sum(classroom.POINTS.values())
    assert {r["student_id"]: (r["status"], r["score"]) for r in rows} == {
        s: ("graded", full) for s in ("alice", "mallory" if mode == "sandbox" else "bob")}, (rows, log)
    assert not any(p.exists() for p in planted)
    if mode == "sandbox":  # the attempts ran, and failed (the sandbox's /tmp is its own: there, not even found)
        assert classroom.outputs(course, "mallory").count("refused [Errno") == 2
