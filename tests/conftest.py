import os
import shutil
import subprocess
import sys
from pathlib import Path

# One thread per test process, and for every process it starts (nbgrader, notebook kernels, the checker): the
# suite runs one worker per core, and torch's or OpenBLAS's thread pools then spin against each other. Measured
# on two cores: grading the fused cross-entropy's correctness took 53 s with two threads, 14 s with one.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

import autograder  # noqa: E402, F401  (picks GPU or interpreter before any test module defines a kernel)
from autograder import runtime
from autograder.publish import build  # noqa: E402

if os.environ["OMP_NUM_THREADS"] == "1":
    import torch  # noqa: E402

    torch.set_num_threads(1)  # in case torch was imported before this file set the variable

# `make test` runs the suite on every core (pytest-xdist). Tests that share an expensive fixture form one group,
# which one worker runs whole, so the fixture is built once; the groups that take longest are handed out first,
# so that no core is left alone with a long one at the end. Minutes measured on two cores without a GPU (the
# other tests take seconds each); update them when a group's time changes much.
LONGEST_FIRST = {  # a group's set-up and tests, from a fresh clone's `make test` (2026-11-29, --durations)
    "corpus-class": 5.0,
    "course-05_streaming_reduction_fusion": 3.8,
    "course-07_fusion_for_training": 3.6,
    "course-02_vertical_fusion": 2.9,
    "browser": 2.5,  # the instructor's feedback pages, the new student's journey, notebook 01 run by a student
    "course-03_horizontal_fusion": 1.9,
    "course-04_gemm_epilogue_fusion": 1.8,
    "grade-class": 1.5,  # one class of five students, one of each status, exported and given feedback
    "slurm": 1.4,  # a one-node Slurm cluster, and a local grading of the same class
    "course-01_hbm_cost_model": 1.3,
    "course-06_compiler_fusion": 1.2,
    "handout": 0.5,
}
SLOW_UNGROUPED = 0.5  # tests marked slow outside a group (the checker runs a whole notebook)
# Tests outside any group that take minutes on their own, by file and name: they need no common worker, and are
# handed out among the groups by their weight, not after them (a two-minute test left for last keeps one core
# busy while the other waits). Minutes from the same run.
LONGEST_TESTS = {
    "test_grade_class_parallel.py": {  # each grades a class of its own with several workers
        "test_two_workers_give_the_grades_of_one": 2.5,  # the class by 1 worker, then by 2
        "test_a_change_while_several_are_in_flight_is_attributed_by_grading_them_again_alone": 1.9,
        "test_submitit_local_jobs_grade_like_this_machine": 0.7,
        "test_a_student_whose_grading_cannot_start_is_recorded_and_the_rest_go_on": 0.9,
    },
    "test_judge.py": {"test_a_hunt_for_the_grading_secrets_finds_nothing_in_a_judged_process": 0.8},
    "test_grade_horizontal.py": {"test_small_tile_kernel_passes": 1.2,
                                 "test_fp16_accumulator_fails_precision_naming_the_growth": 0.7},
    "test_isolation.py": {"test_a_class_graded_beside_a_running_jupyterlab_has_no_tampered_student[sandbox]": 0.7,
                          "test_a_class_graded_beside_a_running_jupyterlab_has_no_tampered_student[off]": 0.9},
    "test_runall.py": {"test_nbgrader_scores_a_failing_tagged_cell_zero": 0.5},
}
MODULE_GROUPS = {"test_corpus_class.py": "corpus-class", "test_grade_class.py": "grade-class",  # one class each
                 "test_handout.py": "handout",  # one hand-out built and installed
                 "test_browser.py": "browser",  # one JupyterLab at a time
                 "test_slurm.py": "slurm"}  # one Slurm cluster at a time


def group_of(nodeid: str) -> str | None:
    """The group of a test, from its id alone (the xdist controller sees ids, not items): one notebook's course
    folder (its release check and its round trip share the `released` fixture), or a module's class."""
    path, _, name = nodeid.partition("::")
    module = path.rsplit("/", 1)[-1]
    if module == "test_nbgrader_roundtrip.py" or name.startswith("test_release_is_in_sync_with_solutions["):
        return "course-" + name[name.index("[") + 1 : name.rindex("]")]
    return MODULE_GROUPS.get(module)


class _GroupScheduler:
    """Plugged in when pytest-xdist runs (its hook is unknown to pytest without it): xdist's scope scheduling with
    our groups as scopes and every other test a scope of its own, handed out in collection order (which
    pytest_collection_modifyitems sorts longest first)."""

    def pytest_xdist_make_scheduler(self, config, log):
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid) or nodeid

        config.option.loadscopereorder = False  # keep our order, not the one by number of tests
        return GroupScheduling(config, log)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_GroupScheduler(), "fusion-course-groups")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if not runtime.has_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)

    def weight(item) -> float:
        group = group_of(item.nodeid)
        if group is not None:
            return LONGEST_FIRST.get(group, SLOW_UNGROUPED)
        path, _, name = item.nodeid.partition("::")
        if name in LONGEST_TESTS.get(path.rsplit("/", 1)[-1], {}):
            return LONGEST_TESTS[path.rsplit("/", 1)[-1]][name]
        return SLOW_UNGROUPED if "slow" in item.keywords else 0.0

    items.sort(key=weight, reverse=True)  # stable: within a weight, the order of the files


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Device profiles measured by tests go to a private cache, not the user's.
    if "FUSION_COURSE_CACHE" not in os.environ:
        monkeypatch.setenv("FUSION_COURSE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


_RELEASED: dict[str, Path] = {}


@pytest.fixture(scope="session")
def released(tmp_path_factory):
    """released(name) -> a scratch course folder holding one notebook's source and the release nbgrader made
    from it (and its gradebook), built once per test process: the release check and the round trip share it."""

    def make(name: str) -> Path:
        if name not in _RELEASED:
            import classroom  # here, not at the top: it needs nbformat, which the GPU tests do without

            work = tmp_path_factory.mktemp(f"course-{name}")
            shutil.copy(ROOT / "nbgrader_config.py", work)
            (work / "grading.toml").write_text(classroom.one_trial_settings())  # as the class tests grade
            shutil.copytree(ROOT / "solutions" / name, work / "solutions" / name)
            r = subprocess.run(
                build.nbgrader_command("generate_assignment", name, "--force",
                                       f"--db=sqlite:///{work}/gradebook.db", "--log-level=ERROR"),
                cwd=work, capture_output=True, text=True, env=build.tool_env(), timeout=600,
            )
            assert r.returncode == 0, r.stdout + r.stderr
            _RELEASED[name] = work
        return _RELEASED[name]

    return make
