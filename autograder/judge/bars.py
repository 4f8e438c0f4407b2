"""The judge's word on a performance result timed in the student's process: the course's bars applied to the
figures it reports. The timing itself (and its audit) runs where the kernel runs; what it must reach does not."""

from __future__ import annotations

from autograder.config import GradingConfig
from autograder.criteria.performance import not_measured
from autograder.report import FAILED, PASSED, SKIPPED, CriterionResult
from autograder.specs.exercise import KernelExercise


def confirm(ex: KernelExercise, cfg: GradingConfig, result: CriterionResult) -> CriterionResult:
    """result, passed only where every benchmark shape's figures meet cfg's bars; a failure stays one."""
    figures = dict(result.figures)
    if result.status == SKIPPED:
        if figures.get("gpu_shared"):  # graded again when the GPU is free, where the course requires it
            figures["required"] = bool(cfg.require_performance)
            return CriterionResult("performance", SKIPPED, result.message, figures)
        if cfg.require_performance and not figures.get("unreachable_here"):
            return not_measured(cfg)
        return CriterionResult("performance", SKIPPED, result.message, figures)
    if result.status != PASSED:
        return CriterionResult("performance", FAILED, result.message, figures)
    short = []
    for part in ex.perf_shapes or [None]:
        prefix = f"{part}_" if part else ""
        frac, speedup = figures.get(prefix + "fraction_of_peak"), figures.get(prefix + "speedup_over_eager")
        min_frac = cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction, part)
        min_speedup = cfg.bar(ex, "min_speedup_over_eager", 1.0, part)
        figures[prefix + "threshold"] = min_frac
        where = f"{part} shape: " if part else ""
        if not isinstance(frac, (int, float)) or isinstance(frac, bool):
            short.append(f"{where}the measurement reported no fraction of the peak")
        elif not frac >= min_frac:
            short.append(f"{where}{frac:.2f} of the peak, the course's bar is {min_frac:.2f}")
        elif speedup is not None and not (isinstance(speedup, (int, float)) and speedup > min_speedup):
            short.append(f"{where}{speedup}x over eager, the course's bar is more than {min_speedup:.2f}x")
    if short:
        return CriterionResult("performance", FAILED, result.message + "\nBelow the course's bar: " + "; ".join(short),
                               figures)
    return CriterionResult("performance", PASSED, result.message, figures)
