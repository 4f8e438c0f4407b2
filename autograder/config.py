"""Grading settings: the package's grading.toml, or the file FUSION_COURSE_GRADING names, plus the course's
private secret seed (.grading-secret.toml beside that file, git-ignored) when there is one; `make course`
writes it (python -m autograder.classroom.secret)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import tomllib
from pathlib import Path

DEFAULT_PATH = Path(__file__).with_name("grading.toml")
ENV_VAR = "FUSION_COURSE_GRADING"
PUBLIC_SEED = 918273645  # the package's seed: in the repository and in every student's hand-out
SECRET_NAME = ".grading-secret.toml"  # beside the instructor's grading.toml; never committed, never handed out


@dataclasses.dataclass(frozen=True)
class GradingConfig:
    trials: int = 3
    secret_seed: int = PUBLIC_SEED
    require_performance: bool = False
    performance: dict = dataclasses.field(default_factory=dict)  # exercise id -> {setting: value}
    criterion_timeout_s: float = 0.0  # the time limit per criterion; 0: 300 s on a GPU, 600 s in the interpreter
    source: str = ""
    seed_source: str = ""  # the file the secret seed came from

    @property
    def public_seed(self) -> bool:
        """True when the secret cases are the ones anybody can reproduce from the repository."""
        return self.secret_seed == PUBLIC_SEED

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


def secret_file(grading_file: str | os.PathLike) -> Path:
    return Path(grading_file).with_name(SECRET_NAME)


def _read(path: Path) -> dict:
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"grading configuration {path}: {e}") from None


def load(path: str | os.PathLike | None = None) -> GradingConfig:
    path = Path(path or os.environ.get(ENV_VAR) or DEFAULT_PATH)
    if not path.is_file():
        raise FileNotFoundError(f"grading configuration {str(path)!r} (from ${ENV_VAR}) does not exist")
    raw = _read(path)
    known = {f.name for f in dataclasses.fields(GradingConfig)} - {"source", "seed_source"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"grading configuration {path}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
    seed_source = str(path) if "secret_seed" in raw else ""
    secret = secret_file(path)
    if path.resolve() != DEFAULT_PATH.resolve() and secret.is_file():
        private = _read(secret)
        if set(private) != {"secret_seed"} or not isinstance(private["secret_seed"], int):
            raise ValueError(f"{secret} holds one setting, secret_seed = <an integer>; got {sorted(private)}")
        raw["secret_seed"], seed_source = private["secret_seed"], str(secret)
    cfg = GradingConfig(**raw, source=str(path), seed_source=seed_source)
    if cfg.trials < 1:
        raise ValueError(f"grading configuration {path}: trials must be at least 1, got {cfg.trials}")
    return cfg


def ensure_secret(grading_file: str | os.PathLike) -> tuple[Path, bool]:
    """The course's secret seed file beside grading_file, written with a fresh random seed when missing (readable
    by its owner only). Returns (its path, whether it was written now). The package's own defaults get none."""
    grading_file = Path(grading_file)
    if not grading_file.is_file():
        raise FileNotFoundError(f"no grading settings at {grading_file}: the secret seed goes beside the course's "
                                "grading.toml")
    if grading_file.resolve() == DEFAULT_PATH.resolve():
        raise ValueError(f"{grading_file} is the package's public default; point ${ENV_VAR} at the course's "
                         "grading.toml to give the course a secret seed of its own")
    secret = secret_file(grading_file)
    if secret.exists():
        return secret, False
    seed = secrets.randbelow(2**31 - 2) + 1
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# This course's secret seed (the cases students never see). Written once by `make course` or the\n"
                "# first grade-class; keep it out of version control and out of the hand-out. Delete it to draw a\n"
                "# new one before the next term.\n"
                f"secret_seed = {seed}\n")
    return secret, True


def dumps(cfg: GradingConfig) -> str:
    """cfg as a grading.toml (what one student's private grading process reads)."""
    lines = [f"trials = {int(cfg.trials)}", f"secret_seed = {int(cfg.secret_seed)}",
             f"require_performance = {'true' if cfg.require_performance else 'false'}"]
    for ex_id, table in cfg.performance.items():
        lines.append(f'[performance."{ex_id}"]')
        lines += [f"{k} = {float(v)!r}" for k, v in table.items() if not isinstance(v, dict)]
        for part, sub in table.items():
            if isinstance(sub, dict):
                lines.append(f'[performance."{ex_id}".{part}]')
                lines += [f"{k} = {float(v)!r}" for k, v in sub.items()]
    return "\n".join(lines) + "\n"
