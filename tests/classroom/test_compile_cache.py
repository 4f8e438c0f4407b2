"""This machine's cache of the grader's own compilations (autograder.classroom.compile_cache): made by a process
that runs the grader's code only, copied into each student's private caches, never shared as a folder."""

import json
import os
import subprocess
import sys
import time

import pytest

from autograder import runtime
from autograder.classroom import compile_cache


@pytest.fixture(autouse=True)
def _own_machine_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COURSE_CACHE", str(tmp_path / "machine-cache"))


def test_only_the_capstone_compiles_a_yardstick_of_the_graders():
    from autograder import specs as registry

    notebooks = sorted({ex.notebook for ex in registry.all_exercises()})
    found = {nb: [ex.id for ex in compile_cache.yardsticks(nb)] for nb in notebooks}
    assert found.pop("07_fusion_for_training") == ["07.decoder"]
    assert not any(found.values()), found


def test_the_machine_folder_is_per_versions_under_the_device_cache():
    import torch
    import triton

    folder = compile_cache.layer()
    assert folder.parent == compile_cache.cache_dir() / "compiled"
    assert torch.__version__.split("+")[0] in folder.name and triton.__version__ in folder.name


def test_a_student_gets_a_copy_of_what_was_compiled_here(tmp_path):
    folder = compile_cache.layer()
    (folder / "inductor" / "fxgraph").mkdir(parents=True)
    (folder / "inductor" / "fxgraph" / "entry").write_text("compiled")
    (folder / "triton" / "abc").mkdir(parents=True)
    (folder / "triton" / "abc" / "kernel.cubin").write_bytes(b"\x7fELF")
    private = tmp_path / "student" / ".private"
    assert not compile_cache.seed(private), "a folder no priming finished is not copied"
    assert not private.exists()
    (folder / "done-07_fusion_for_training-some-gpu.json").write_text("{}")
    assert compile_cache.seed(private)
    assert (private / "inductor" / "fxgraph" / "entry").read_text() == "compiled"
    assert (private / "triton" / "abc" / "kernel.cubin").read_bytes() == b"\x7fELF"
    (private / "inductor" / "fxgraph" / "entry").write_text("what a student wrote")
    assert (folder / "inductor" / "fxgraph" / "entry").read_text() == "compiled", "the copy is the student's own"


def test_a_students_caches_are_its_own_folders(tmp_path, root):
    pytest.importorskip("nbgrader")  # grade-class's side: a GPU machine that only checks notebooks has none
    from autograder.classroom.process import child_env

    work = tmp_path / "work"
    work.mkdir()
    env = child_env(work)
    for var, name in compile_cache.COMPILE_CACHES.items():
        assert env[var] == str(work / ".private" / name)
        assert not env[var].startswith(str(compile_cache.cache_dir()))


def test_nothing_is_compiled_where_there_is_nothing_to_compile(tmp_path):
    assert compile_cache.prime("02_vertical_fusion") == ""
    assert compile_cache.prime("07_fusion_for_training", dict(os.environ, CUDA_VISIBLE_DEVICES="")) == ""
    if not runtime.has_gpu():
        assert compile_cache.prime("07_fusion_for_training") == ""
        out = subprocess.run([sys.executable, "-m", "autograder.classroom.compile_cache", "07_fusion_for_training"],
                             check=False, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "nothing of the grader's to compile here" in out.stdout
    assert not compile_cache.layer().exists()


def test_the_priming_command_says_how_to_call_it():
    out = subprocess.run([sys.executable, "-m", "autograder.classroom.compile_cache"], check=False,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "usage" in out.stdout


_COMPILE = """
import json, sys, time
import autograder
import torch
from autograder import specs
from autograder.criteria import training
start = time.perf_counter()
training.compile_yardstick(specs.get("07.decoder"))
counters = torch._dynamo.utils.counters
print(json.dumps({"seconds": time.perf_counter() - start, "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
                  "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
                  "aot_hit": counters["aot_autograd"]["autograd_cache_hit"]}))
"""


def _compile_in_a_student_process(private) -> dict:
    env = dict(os.environ, **{var: str(private / name) for var, name in compile_cache.COMPILE_CACHES.items()})
    out = subprocess.run([sys.executable, "-c", _COMPILE], env=env, check=False, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
@pytest.mark.slow
def test_a_seeded_student_finds_the_yardstick_compiled(tmp_path):
    """On a GPU: the copy of what the priming process compiled is found by a student's process (Inductor's FX
    graph cache hits, nothing is compiled again). Prints the seconds, cold and seeded."""
    cold = _compile_in_a_student_process(tmp_path / "cold")
    started = time.perf_counter()
    said = compile_cache.prime("07_fusion_for_training")
    primed_s = time.perf_counter() - started
    assert "07.decoder" in said, said
    assert "are cached" in compile_cache.prime("07_fusion_for_training")  # once per machine
    assert compile_cache.seed(tmp_path / "seeded")
    seeded = _compile_in_a_student_process(tmp_path / "seeded")
    print(f"yardstick of 07.decoder: cold {cold['seconds']:.1f} s, priming {primed_s:.1f} s, "
          f"seeded {seeded['seconds']:.1f} s ({seeded})")
    assert cold["fx_miss"] >= 1
    assert seeded["fx_hit"] + seeded["aot_hit"] >= 1 and seeded["fx_miss"] == 0, seeded
