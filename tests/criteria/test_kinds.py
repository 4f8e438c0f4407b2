"""Each kind of exercise carries its graders (autograder/criteria/kinds.py): every exercise finds a table holding
each criterion it is graded on, check() asks no isinstance of an exercise kind, and no two criterion functions
share a name."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from autograder import specs as registry
from autograder.criteria import kernel, kinds
from autograder.specs import exercise

ROOT = Path(__file__).resolve().parents[2]


def test_every_exercise_finds_a_grader_for_each_of_its_criteria():
    for ex in registry.all_exercises():
        kind = kinds.kind_of(ex)
        assert isinstance(ex, kind.spec)
        missing = [c for c in ex.criteria if c not in kind.graders]
        assert not missing, f"{ex.id} ({type(ex).__name__}) has no grader for {missing}"


def test_every_spec_class_is_a_kind_of_its_own():
    spec_classes = {cls for cls in vars(exercise).values()
                    if isinstance(cls, type) and issubclass(cls, exercise.Exercise) and cls is not exercise.Exercise}
    assert spec_classes == {kind.spec for kind in kinds.KINDS}
    assert len(kinds.KINDS) == len(spec_classes)  # one table per kind


def test_a_kind_holds_its_modules_own_table():
    # A change to a criteria module's GRADERS (which the integrity record watches) is what check() then runs.
    assert kinds.kind_of(registry.get("01.fused_chain")).graders is kernel.GRADERS
    assert kinds.kind_of(registry.get("01.fused_chain")).judged == ("performance",)
    assert all(kinds.kind_of(ex).judged == () for ex in registry.all_exercises()
               if not isinstance(ex, exercise.KernelExercise))


def test_a_subclass_of_a_spec_class_is_graded_as_that_kind():
    @dataclasses.dataclass(frozen=True)
    class Tiled(exercise.KernelExercise):
        tile: int = 64

    ex = Tiled(**{f.name: getattr(registry.get("01.fused_chain"), f.name)
                  for f in dataclasses.fields(exercise.KernelExercise)})
    assert kinds.kind_of(ex).spec is exercise.KernelExercise


def test_an_exercise_of_no_kind_is_told_where_kinds_are_declared():
    ex = exercise.Exercise(id="99.nothing", notebook="99_x", function="f", signature="f(x) -> float",
                           summary="", criteria=("correctness",))
    with pytest.raises(TypeError, match=r"99\.nothing.*autograder/criteria/kinds\.py"):
        kinds.kind_of(ex)


def test_one_name_per_criterion_function():
    graders = [fn for kind in kinds.KINDS for fn in kind.graders.values()]
    names = [f"{fn.__module__}.{fn.__name__}" for fn in graders]
    short = [fn.__name__ for fn in graders]
    assert len(set(short)) == len(short), sorted(n for n in names if short.count(n.rsplit(".", 1)[1]) > 1)


def test_check_picks_graders_without_an_isinstance_on_exercise_kinds():
    tree = ast.parse((ROOT / "autograder" / "check.py").read_text())
    kind_names = {kind.spec.__name__ for kind in kinds.KINDS}
    asked = [ast.unparse(node) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"
             and kind_names & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}]
    assert not asked, asked


def test_every_kinds_performance_waits_for_the_gpus_timing_lock(monkeypatch):
    """Two course gradings on one GPU never time at once, whatever the kind (on two H200s graded two at a time,
    the optimizer step and the decoder, timed outside the lock, failed their bars): with the lock kept by another
    grading, every kind's performance says the GPU is shared, not measured, and times nothing."""
    import contextlib

    from autograder import config, runtime
    from autograder.measure import gpu_share

    asked = []

    @contextlib.contextmanager
    def kept_by_another(*args, **kwargs):
        asked.append(1)
        yield False

    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(gpu_share, "timing_lock", kept_by_another)
    timed = {}  # one exercise of each kind that is timed
    for ex in registry.all_exercises():
        if "performance" in ex.criteria:
            timed.setdefault(kinds.kind_of(ex).spec, ex)
    assert {exercise.KernelExercise, exercise.StepExercise, exercise.TrainingExercise,
            exercise.CompiledExercise} <= set(timed)
    for spec, ex in timed.items():

        def untouchable(*args, **kwargs):
            raise AssertionError(f"{ex.id}: the student's function was called without the timing lock")

        before = len(asked)
        result = kinds.kind_of(ex).graders["performance"](ex, untouchable, config.load())
        assert len(asked) > before, f"{ex.id} ({spec.__name__}): performance never asked for the timing lock"
        assert result.status == "skipped" and result.figures.get("gpu_shared"), (ex.id, result.message)
        assert "the GPU is shared" in result.message
