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
