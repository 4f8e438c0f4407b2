"""The registry: every exercise of every notebook, by id."""

from __future__ import annotations

import importlib

from autograder.specs.exercise import Exercise

# autograder/specs/<name>.py, each with EXERCISES, in the course's order (one line each)
_MODULES = (
    "hbm_cost_model",
    "vertical_fusion",
    "fused_dropout",
    "horizontal_fusion",
    "gemm_epilogue_fusion",
    "lora",
    "streaming_reduction_fusion",
    "streaming_softmax",
    "tiled_attention",
    "sparse_head",
    "compiler_fusion",
    "training_predictions",
    "fusion_for_training",
    "decoder",
    "hopper_attention",
)
_registry: dict[str, Exercise] | None = None


def _load() -> dict[str, Exercise]:
    global _registry
    if _registry is None:
        reg: dict[str, Exercise] = {}
        for name in _MODULES:
            for ex in importlib.import_module(f"{__name__}.{name}").EXERCISES:
                if ex.id in reg:
                    raise RuntimeError(f"exercise id {ex.id} is defined twice")
                reg[ex.id] = ex
        _registry = reg
    return _registry


def all_exercises() -> list[Exercise]:
    return list(_load().values())


def get(exercise_id: str) -> Exercise:
    reg = _load()
    if exercise_id not in reg:
        raise KeyError(f"no exercise {exercise_id!r}; the exercises are: {', '.join(reg)}")
    return reg[exercise_id]


def for_notebook(stem: str) -> list[Exercise]:
    return [ex for ex in _load().values() if ex.notebook == stem]
