"""What grading one student may not change: everything outside that student's own workspace.

A graded notebook runs with the grader's rights. In the sandbox (guard.sandbox) it cannot write outside its
workspace; without it, it could edit another student's submission, the gradebook, the grading settings, the
installed grader or torch, Jupyter's configuration (and so every later student's grading). grade_class records
the state of what is watched before each student (size, times and inode of every file, by lstat; a file's ctime
cannot be set back by its owner) and compares it afterwards.

What is watched is what the sandbox cannot protect: with it, the course folder alone, where the class process
itself writes what it takes from a student's workspace (the graded notebook, the grades); without it, also the
Python packages, Jupyter's configuration and data folders and the device cache. Never watched: the state an
instructor's own JupyterLab keeps while it runs beside the grading (its runtime files, saved workspaces, user
settings, notebook-trust and file-id databases), which no grading reads: a private runtime folder is given to
every student's process (classroom.process.child_env).
"""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

from autograder.guard import sandbox
from autograder.measure.device import cache_dir

SKIP_DIRS = {".git"}


# Written by a running JupyterLab or Jupyter server, read by no grading: relative to a Jupyter configuration folder,
# and to a Jupyter data folder (SQLite databases with their journals).
JUPYTER_CONFIG_STATE = ("lab/workspaces", "lab/user-settings", "migrated")
JUPYTER_DATA_STATE = ("runtime", "lab/workspaces", "nbsignatures.db", "file_id_manager.db")
_SQLITE_SIDE_FILES = ("", "-journal", "-wal", "-shm")


def jupyter_state() -> list[Path]:
    """The files and folders where Jupyter's servers keep their state while they run (never watched)."""
    from jupyter_core import paths

    found = [Path(paths.jupyter_runtime_dir())]
    for folder in paths.jupyter_config_path():
        found += [Path(folder) / rel for rel in JUPYTER_CONFIG_STATE]
    for folder in paths.jupyter_path():
        for rel in JUPYTER_DATA_STATE:
            tails = _SQLITE_SIDE_FILES if rel.endswith(".db") else ("",)
            found += [Path(folder) / (rel + tail) for tail in tails]
    return found


def watched_roots(course_root: Path, sandboxed: bool | None = None) -> list[Path]:
    """What the sandbox cannot protect: the course folder; and, where the students run without it, the Python
    packages, Jupyter's configuration and data folders, the device cache. sandboxed: whether they run in it
    (default: guard.sandbox's choice for this machine, which says once why where it falls back)."""
    if sandboxed is None:

        sandboxed = sandbox.choose().use
    if sandboxed:
        return [Path(course_root).resolve()]
    from jupyter_core import paths


    candidates = [Path(course_root), Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"]),
                  Path(site.getusersitepackages()), cache_dir()]
    # Jupyter's folders even where absent: one created during grading (a kernel specification in the user's data
    # folder comes before the course's own) is a change.
    jupyter = [Path(p) for p in paths.jupyter_config_path() + paths.jupyter_path()]
    existing = sorted({p.resolve() for p in candidates if p.exists()} | {p.resolve() for p in jupyter},
                      key=lambda p: len(p.parts))
    roots: list[Path] = []
    for p in existing:  # drop folders inside another watched one
        if not any(p == r or r in p.parents for r in roots):
            roots.append(p)
    return roots


def _walk(top: Path, into: dict, ignore: frozenset = frozenset()) -> None:
    if not top.exists() and not top.is_symlink():
        return
    if top.is_file() or top.is_symlink():
        into[str(top)] = _stat(top)
        return
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and os.path.join(dirpath, d) not in ignore]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path in ignore:
                continue
            try:
                into[path] = _stat(path)
            except OSError:
                pass  # it vanished meanwhile


def _stat(path) -> tuple:
    st = os.lstat(path)
    return st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class Footprint:
    def __init__(self, roots: list[Path], ignore=()):
        """ignore: folders or files inside the roots left out (the students' workspaces, when they sit in the
        course); Jupyter's running state (jupyter_state) always is."""
        self.roots = roots
        self.ignore = frozenset(str(Path(p).resolve()) for p in [*ignore, *jupyter_state()])
        self.files: dict[str, tuple] = {}
        for r in roots:
            _walk(r, self.files, self.ignore)

    def changes(self) -> list[str]:
        """Paths added, removed or changed since the record (or the last refresh), sorted."""
        now: dict[str, tuple] = {}
        for r in self.roots:
            _walk(r, now, self.ignore)
        return sorted(p for p in self.files.keys() | now.keys() if self.files.get(p) != now.get(p))

    def refresh(self, paths) -> None:
        """Record the current state of these files or folders (the grader itself just wrote them)."""
        for p in map(Path, paths):
            prefix = str(p) + os.sep
            for key in [k for k in self.files if k == str(p) or k.startswith(prefix)]:
                del self.files[key]
            _walk(p, self.files, self.ignore)
