"""The environment the grader gives its child processes (publish.build.tool_env, which classroom.process.child_env
and bench.scale build on): a child started in another folder imports this checkout's autograder even where the
package is not pip-installed and was found through the current folder only."""

import os
import subprocess
import sys
from pathlib import Path

import autograder
from autograder.publish import build

HERE = Path(autograder.__file__).resolve()
ROOT = HERE.parent.parent

FIND = "import importlib.util as u; print(u.find_spec('autograder').origin)"


def _child(args, env, cwd):
    done = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_child_elsewhere_without_site_packages_finds_this_checkout(tmp_path):
    # -S leaves out site-packages and with them any install (editable or not) of the package: only PYTHONPATH
    # can lead the child to it, as on a machine that runs the course from its checkout.
    env = build.tool_env()
    minimal = {"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"]}
    assert Path(_child(["-S", "-c", FIND], minimal, tmp_path)).resolve() == HERE
    bare = {"PATH": env["PATH"]}
    done = subprocess.run([sys.executable, "-S", "-c", FIND], env=bare, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode != 0 or Path(done.stdout.strip()).resolve() != HERE  # what the fix is for


def test_a_child_elsewhere_imports_this_autograder(tmp_path):
    env = {k: v for k, v in build.tool_env().items() if not k.startswith("FUSION_COURSE")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    said = _child(["-c", "import autograder; print(autograder.__file__)"], env, tmp_path)
    assert Path(said).resolve() == HERE


def test_the_package_root_goes_first_once_and_others_stay(tmp_path):
    other = str(tmp_path / "elsewhere")
    env = build.package_path({"PYTHONPATH": os.pathsep.join([other, str(ROOT), ""])})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), other]


def test_an_ordinary_install_leaves_pythonpath_alone(monkeypatch):
    monkeypatch.setattr(build.site, "getsitepackages", lambda: [str(ROOT)])
    assert build.package_path({"PYTHONPATH": "/x"}) == {"PYTHONPATH": "/x"}
    assert "PYTHONPATH" not in build.package_path({})
