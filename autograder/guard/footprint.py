"""What grading one student may not change: everything outside that student's own workspace.

A graded notebook runs with the grader's rights, so it could edit another student's submission, the
gradebook, the grading settings, the installed grader or torch, Jupyter's configuration (and so every later
student's grading). grade_class records the state of all of that before each student (size, times and inode of
every file, by lstat; a file's ctime cannot be set back by its owner) and compares it afterwards.
"""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

SKIP_DIRS = {".git"}


def watched_roots(course_root: Path) -> list[Path]:
    """The course folder, the Python packages, Jupyter's configuration and data folders, the device cache."""
    from jupyter_core import paths

    from autograder.measure.device import cache_dir

    candidates = [Path(course_root), Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"]),
                  Path(site.getusersitepackages()), cache_dir()]
    candidates += [Path(p) for p in paths.jupyter_config_path() + paths.jupyter_path()]
    existing = sorted({p.resolve() for p in candidates if p.exists()}, key=lambda p: len(p.parts))
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
            try:
                into[path] = _stat(path)
            except OSError:
                pass  # it vanished meanwhile


def _stat(path) -> tuple:
    st = os.lstat(path)
    return st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class Footprint:
    def __init__(self, roots: list[Path], ignore=()):
        """ignore: folders inside the roots left out (the students' workspaces, when they sit in the course)."""
        self.roots = roots
        self.ignore = frozenset(str(Path(p).resolve()) for p in ignore)
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
