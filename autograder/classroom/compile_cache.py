"""This machine's cache of what the grader compiles of its own, copied into each student's private caches.

    python -m autograder.classroom.compile_cache NOTEBOOK     (grade-class runs it before the first student)

What the grader compiles while grading, besides the student's code: torch.compile of the capstone's eager model,
the yardstick of 07.decoder's performance (criteria.training.compiled_eager). Every other yardstick is a
library's kernels, compiled already: eager PyTorch, cuBLAS, SDPA, torch.argmax; the device's measured peaks are
cached per machine beside this folder (measure.device.cache_dir). Whatever torch.compile the grader runs around
a student's function (criteria.compiled) compiles that student's code, and stays the student's.

grade-class gives every student empty caches of its own (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR,
CUDA_CACHE_PATH: COMPILE_CACHES, under the student's workspace), so that nothing one student's code compiled
reaches another; each student's grading then compiled the yardstick again. So:

- prime(notebook), before the first student: a process of its own, which runs the grader's code and nothing
  else, compiles the notebook's yardsticks with these caches pointed at this machine's folder,
  cache_dir()/compiled/torch-<version>-triton-<version>/, once per GPU model (a file marks it done, a lock keeps
  two class runs from doing it at once);
- seed(private), for each student, before its process starts: a copy of that folder becomes the student's
  private caches. A cache that does not match (other settings, another GPU) is a miss, and compiles as before.

Copies, not a shared read-only layer under each student's own: Triton's cache manager can be replaced
(TRITON_CACHE_MANAGER="module:Class", triton.knobs.cache.manager_class, triton 3.4 to 3.9), and a FileCacheManager
that reads a shared folder and writes a private one would serve Triton's binaries; but Inductor's own caches
(FX graphs, AOTAutograd), where a compilation is looked up first and which carry their Triton kernels inside,
have one folder, read and written. A copy of a few megabytes per student keeps every cache private by
construction: a student's process writes in its workspace only, and this machine's folder is written by the
priming process alone (read-only in the sandbox; watched by grade-class's footprint check without it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from autograder import runtime
from autograder import specs as registry
from autograder.criteria import training
from autograder.measure.device import cache_dir
from autograder.specs.exercise import TrainingExercise

# The compilers' caches: environment variable -> folder name, under a student's private folder or this machine's.
COMPILE_CACHES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "CUDA_CACHE_PATH": "nv"}
PRIME_TIMEOUT_S = 900


def layer() -> Path:
    """This machine's folder of the grader's compilations, for the torch and Triton in use."""
    import torch
    import triton

    versions = re.sub(r"[^\w.+-]+", "_", f"torch-{torch.__version__}-triton-{triton.__version__}")
    return cache_dir() / "compiled" / versions


def yardsticks(notebook: str) -> list[TrainingExercise]:
    """The exercises of a notebook whose grading compiles a yardstick of the grader's own."""
    return [ex for ex in registry.for_notebook(notebook) if isinstance(ex, TrainingExercise)]


def _marks(folder: Path) -> list[Path]:
    return sorted(folder.glob("done-*.json"))


def seed(private: Path) -> bool:
    """Copy this machine's compilations into a student's private caches (private/triton, private/inductor,
    private/nv); False when none were made here."""
    source = layer()
    if not _marks(source):
        return False
    for name in COMPILE_CACHES.values():
        if (source / name).is_dir():
            shutil.copytree(source / name, Path(private) / name, dirs_exist_ok=True, symlinks=True)
    return True


def prime(notebook: str, env: dict | None = None, timeout: float = PRIME_TIMEOUT_S) -> str:
    """Compile the notebook's yardsticks into this machine's folder, in a process of its own that runs the
    grader's code only (env: its environment, the GPU it may see). Returns a line saying what was done, or ''
    when there is nothing to compile here. Never raises: a class is graded without the cache rather than not."""
    env = dict(os.environ if env is None else env)
    if not yardsticks(notebook) or not runtime.has_gpu() or env.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return ""
    for var, name in COMPILE_CACHES.items():
        env[var] = str(layer() / name)
    cmd = [sys.executable, "-m", "autograder.classroom.compile_cache", notebook]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the grader's compilations were not cached ({type(exc).__name__}: {exc}); each student compiles them"
    said = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    if done.returncode != 0:
        return (f"the grader's compilations were not cached (exit {done.returncode}: "
                f"{said[-1][-300:] if said else 'no output'}); each student compiles them")
    return said[-1] if said else ""


@contextlib.contextmanager
def _locked(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m autograder.classroom.compile_cache NOTEBOOK (e.g. 07_fusion_for_training)")
        return 2
    notebook = argv[0]
    found = yardsticks(notebook)
    if not found or not runtime.has_gpu():
        print(f"{notebook}: nothing of the grader's to compile here")
        return 0
    import torch

    gpu = torch.cuda.get_device_name()
    folder = layer()
    mark = folder / f"done-{notebook}-{re.sub(r'[^a-z0-9]+', '-', gpu.lower()).strip('-')}.json"
    with _locked(folder):
        if not mark.exists():
            for ex in found:
                training.compile_yardstick(ex)
            mark.write_text(json.dumps({"notebook": notebook, "gpu": gpu, "exercises": [ex.id for ex in found]}))
            print(f"compiled the grader's yardsticks of {notebook} ({', '.join(ex.id for ex in found)}) into {folder}")
            return 0
    print(f"the grader's yardsticks of {notebook} are cached in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
