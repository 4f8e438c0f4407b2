"""Grading settings: the package's grading.toml, or the file FUSION_COURSE_GRADING names."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

DEFAULT_PATH = Path(__file__).with_name("grading.toml")
ENV_VAR = "FUSION_COURSE_GRADING"


@dataclasses.dataclass(frozen=True)
class GradingConfig:
    trials: int = 3
    secret_seed: int = 0
    require_performance: bool = False
    performance: dict = dataclasses.field(default_factory=dict)  # exercise id -> {setting: value}
    criterion_timeout_s: float = 0.0  # the time limit per criterion; 0: 300 s on a GPU, 600 s in the interpreter
    source: str = ""

    def perf_setting(self, exercise_id: str, key: str, default: float, part: str | None = None) -> float:
        """A threshold of [performance."<exercise>"], or of its sub-table [performance."<exercise>".<part>] for
        one of several benchmark shapes (that sub-table's value first)."""
        table = self.performance.get(exercise_id, {})
        if part is not None and key in table.get(part, {}):
            return float(table[part][key])
        return float(table.get(key, default))

    def bar(self, ex, key: str, fallback: float, part: str | None = None) -> float:
        """A pass bar of ex: grading.toml's override where it sets one, else the exercise's own (ex.bars, the
        part's sub-dict first), else fallback."""
        own = ex.bars.get(part, {}).get(key) if part is not None else None
        if own is None:
            own = ex.bars.get(key, fallback)
        return self.perf_setting(ex.id, key, own, part)


def load(path: str | os.PathLike | None = None) -> GradingConfig:
    path = Path(path or os.environ.get(ENV_VAR) or DEFAULT_PATH)
    if not path.is_file():
        raise FileNotFoundError(f"grading configuration {str(path)!r} (from ${ENV_VAR}) does not exist")
    with open(path, "rb") as f:
        try:
            raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"grading configuration {path}: {e}") from None
    known = {f.name for f in dataclasses.fields(GradingConfig)} - {"source"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"grading configuration {path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    cfg = GradingConfig(**raw, source=str(path))
    if cfg.trials < 1:
        raise ValueError(f"grading configuration {path}: trials must be at least 1, got {cfg.trials}")
    return cfg
