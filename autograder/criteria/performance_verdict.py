"""The performance criterion's verdict: what a finished measurement earns.

performance.py times the kernel in turns with eager PyTorch and this GPU's peak, and checks that every
timed call computed the right answer; from those times this module makes the figures (the rate, its fraction
of the peak, the speed-up over eager), the message the student reads, and the verdict: passed when both bars
are met, failed with the likeliest reason when not (registers spilled, a loop not warp-specialized, the bytes
of a second pass), and failed outright for a rate beyond what the GPU can reach.
"""

from __future__ import annotations

import math

from autograder.config import GradingConfig
from autograder.criteria.audit import MAX_SPREAD, RATE_NOISE, impossible_rate
from autograder.criteria.cases import dtype_name
from autograder.criteria.codegen import compiled_kernels, not_warp_specialized, spills
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import KernelExercise, Shape


def verdict(ex: KernelExercise, fn, args: tuple, cfg: GradingConfig, *, shape: Shape, part: str | None,
            dtype, dt: str, prof, peak, t, ms: float, side_note: str, rounds: int) -> CriterionResult:
    """The result of one benchmark shape (part: its name where the exercise has several), timed at ms a call.

    peak is the performance.Peak timed alongside (its kind, rate and profile figure), t the
    performance.Timings of the turns, prof the device profile, dt the dtype's short name ("bf16", "fp16");
    side_note is added to the message as it is."""
    speedup = t.eager_ms / ms if t.eager_ms is not None else None
    min_frac = cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction, part)
    min_speedup = cfg.bar(ex, "min_speedup_over_eager", 1.0, part)
    compiled = compiled_kernels(fn, args) if ex.no_spills or ex.warp_specialized else []
    spilled = spills(compiled) if ex.no_spills else []
    unspecialized = not_warp_specialized(compiled) if ex.warp_specialized else None
    figures = {"time_ms": ms, "eager_ms": t.eager_ms, "speedup_over_eager": speedup, "peak_ms": t.peak_ms,
               "spread": t.spread, "rounds": rounds}
    if peak.kind == "baseline":
        frac = t.peak_ms / ms
        rate = ex.flops(*args) / (ms * 1e-3) / 1e12 if ex.flops is not None else None
        figures.update({"baseline_ms": t.peak_ms, "fraction_of_peak": frac, **({"TFLOPs": rate} if rate else {})})
        what = (f"{f'{rate:.0f} TFLOP/s, ' if rate else ''}{frac:.2f} of {ex.perf_baseline_name}'s speed on this "
                f"GPU ({ms:.3f} ms against {t.peak_ms:.3f} ms, timed in turns)")
    else:
        now = peak.rate(t.peak_ms)
        if peak.kind == "matmul":
            rate = ex.flops(*args) / (ms * 1e-3) / 1e12
            figures.update({"TFLOPs": rate, "peak_TFLOPs": now, "profile_TFLOPs": peak.profile})
            what = f"{rate:.0f} TFLOP/s = {rate / now:.2f} of this GPU's {dt} matmul rate"
        else:
            n_bytes = ex.bytes(*args)
            rate = n_bytes / (ms * 1e-3) / 1e9
            figures.update({"GBps": rate, "copy_GBps": now, "profile_copy_GBps": peak.profile})
            what = (f"{rate:.0f} GB/s effective (counting the {n_bytes / 2**20:.0f} MiB the op must move) = "
                    f"{rate / now:.2f} of this GPU's copy bandwidth")
        frac = rate / now
        figures["fraction_of_peak"] = frac
        what += (f" ({now:.0f} {peak.unit}, measured in turns with your kernel"
                 f"{f'; {peak.profile:.0f} when the profile was taken' if peak.profile else ''})")
    figures["threshold"] = min_frac
    figures["peak_kind"] = peak.kind
    noise = RATE_NOISE + min(t.spread, MAX_SPREAD)
    beyond = impossible_rate(ex, args, ms, prof, dt, peak, t.peak_ms, noise)
    if beyond:
        return CriterionResult("performance", FAILED, beyond, figures)
    if peak.kind != "baseline" and frac > 1.0:  # within the noise of the ceiling: shown as at it, never above
        figures["fraction_of_peak"] = 1.0
        figures["measured_fraction"] = frac
        what += f" (measured {frac:.2f}: at the ceiling, within the measurement's noise)"
    if speedup is None:
        against = f"{ms:.3f} ms; {ex.eager_name} not timed (it does not fit in memory here)"
    else:
        against = (f"{ms:.3f} ms against {t.eager_ms:.3f} ms for {ex.eager_name} ({speedup:.2f}x)"
                   f"{'' if speedup > min_speedup else f', needs more than {min_speedup:.2f}x'}")
    msg = (
        f"{what}; needs {min_frac:.2f}. {'' if ex.perf_baseline is ex.eager else against + '. '}"
        f"Shape {shape}, {dtype_name(dtype)}, {prof.name}, medians of {rounds} rounds"
        f"{', in CUDA graphs' if ex.time_in_cuda_graph and not t.note else ''}.{side_note}"
    )
    if spilled:
        figures["spilled_kernels"] = len(spilled)
        return CriterionResult("performance", FAILED, msg + "\nRegisters spilled to memory: " + "; ".join(spilled)
                               + ". A spill is a load and a store per value in the loop; give the configuration "
                               "more warps or a smaller block.", figures)
    if unspecialized:
        figures["warp_specialized"] = False
        return CriterionResult("performance", FAILED, msg + "\n" + unspecialized, figures)
    if frac >= min_frac and (speedup is None or speedup > min_speedup):
        return CriterionResult("performance", PASSED, msg, figures)
    if ex.flops is None and ex.perf_baseline is None and frac < min_frac:
        passes = 1 / frac if frac > 0 else math.inf
        msg += (
            f"\nAt this speed the kernel behaves as if it moved {passes:.1f}x the minimal bytes: look for a "
            "second read of an input, an intermediate written to memory, or blocks too small to keep "
            "enough loads in flight."
        )
    return CriterionResult("performance", FAILED, msg, figures)
