"""Many kernel settings compiled at once, each checked against a reference, and what survives timed: the machinery
of python -m bench.hopper.

A Candidate is one version of an op at one setting: how to compile it without running it (a launcher called with
warmup=True, returning Triton's handle or handles) and how to run it. compile_all compiles a list of them on a
thread pool under triton.AsyncCompileMode (Triton 3.6 and later; most of a compile runs outside Python's lock, so
the threads overlap), stops what has not started when the deadline passes, and records what the compiler made of
each: shared memory, warps, whether the key loop was warp-specialized, and after the first run, registers and
spills. Timing is autograder.measure.timing's: triton.testing.do_bench medians with the L2 cache flushed before
each run and a warm-up before the first.

Nothing here imports torch or triton at module level: the plan of a run (bench.hopper --plan) and the
tests read it on machines without a GPU.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from collections.abc import Callable

from autograder import runtime
from autograder.measure.timing import grader_ms


@dataclasses.dataclass
class Candidate:
    """One version of an op at one setting. status: planned, compiled, not compiled (why), failed to run,
    wrong, checked; error: the largest error against the reference, as the part measures it."""

    family: str
    setting: dict
    compile: Callable[[], object]
    run: Callable[[], object]
    status: str = "planned"
    why: str = ""
    error: float | None = None
    ms: float | None = None
    facts: dict = dataclasses.field(default_factory=dict)
    handles: list = dataclasses.field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "checked"

    def record(self) -> dict:
        """What a run keeps of it (JSON)."""
        out = {"family": self.family, "setting": self.setting, "status": self.status}
        for key, value in (("why", self.why), ("error", self.error), ("ms", self.ms)):
            if value not in ("", None):
                out[key] = value
        return {**out, **self.facts}


class Clock:
    """Seconds since the run began, against its budget; each part's share of it spent in turn."""

    def __init__(self, budget_s: float):
        self.start, self.budget_s = time.perf_counter(), budget_s
        self.spent: dict[str, dict[str, float]] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def deadline(self, share_of_left: float, at_least: float = 5.0) -> float:
        """A perf_counter() time: this share of what is left of the budget, and at least at_least seconds."""
        return time.perf_counter() + max(at_least, share_of_left * self.left())

    def add(self, part: str, what: str, seconds: float) -> None:
        self.spent.setdefault(part, {})
        self.spent[part][what] = round(self.spent[part].get(what, 0.0) + seconds, 2)


def first_line(exc: BaseException) -> str:
    """An error as one line: its type and its last line of text (a compiler's message ends with the reason)."""
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith((" ", "#", "}", "{"))]
    return f"{type(exc).__name__}: {(lines[-1] if lines else text)[:200]}"


def _kernel_of(handle):
    """The compiled kernel behind a handle: a FutureKernel (under AsyncCompileMode) or the kernel itself."""
    return handle.result() if hasattr(handle, "result") else handle


def _futures(handle) -> list:
    future = getattr(handle, "future", None)
    return [future] if future is not None else []


def compile_all(candidates: list[Candidate], deadline: float, threads: int | None = None) -> float:
    """Compile every planned candidate on a thread pool; those not started by the deadline (a perf_counter()
    time) are cancelled and marked so. Returns the wall seconds taken."""
    import triton

    begin = time.perf_counter()
    threads = threads or max(1, min(32, (os.cpu_count() or 2) - 1))
    todo = [c for c in candidates if c.status == "planned"]
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="triton-compile")
    with triton.AsyncCompileMode(pool, ignore_errors=True) as mode:
        for c in todo:
            try:
                got = c.compile()
                c.handles = list(got) if isinstance(got, (list, tuple)) else [got]
            except Exception as exc:  # noqa: BLE001  refused before compiling (bad arguments): named, not fatal
                c.status, c.why = "not compiled", first_line(exc)
        pending = [f for f in mode.raw_futures if not f.done()]
        _, late = concurrent.futures.wait(pending, timeout=max(0.0, deadline - time.perf_counter()))
        for f in late:
            f.cancel()  # a compile already running finishes; the queued ones are dropped
    pool.shutdown(wait=False, cancel_futures=True)
    for c in todo:
        if c.status != "planned":
            continue
        futures = [f for h in c.handles for f in _futures(h)]
        if any(f.cancelled() for f in futures):
            c.status, c.why = "not compiled", "time budget spent before its turn"
        elif any(f.exception() is not None for f in futures):
            exc = next(f.exception() for f in futures if f.exception() is not None)
            c.status, c.why = "not compiled", first_line(exc)
        else:
            c.status = "compiled"
            c.facts = compile_facts(c.handles)
    return time.perf_counter() - begin


def compile_facts(handles: list) -> dict:
    """Shared memory (bytes) and warps, the most any of a candidate's kernels takes (a backward has three), and
    whether any was warp-specialized (its TTGIR holds a ttg.warp_specialize region)."""
    kernels = [_kernel_of(h) for h in handles]
    return {"shared_bytes": max(k.metadata.shared for k in kernels),
            "num_warps": max(k.metadata.num_warps for k in kernels),
            "warp_specialized": any("ttg.warp_specialize" in k.asm.get("ttgir", "") for k in kernels)}


def load_facts(c: Candidate) -> None:
    """Registers a thread and bytes spilled, known once the kernels have been loaded (after a first run)."""
    if c.status not in ("compiled", "checked") or not c.handles:
        return
    kernels = [_kernel_of(h) for h in c.handles]
    regs = [getattr(k, "n_regs", None) for k in kernels]
    spills = [getattr(k, "n_spills", None) for k in kernels]
    if all(r is not None for r in regs):
        c.facts["registers"] = max(regs)
        c.facts["spilled_bytes"] = sum(spills)


def check(c: Candidate, error_of: Callable[[object], float], tolerance: float) -> None:
    """Run a compiled candidate once and compare: checked, wrong (its error above tolerance) or failed to run.
    A GPU left unusable (an illegal memory access) is raised: nothing after it could be trusted."""
    import torch

    if c.status != "compiled":
        return
    try:
        out = c.run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as exc:
        if runtime.cuda_context_broken(exc):
            raise
        c.status, c.why = "failed to run", first_line(exc)
        return
    load_facts(c)
    c.error = float(error_of(out))
    del out
    if not c.error <= tolerance:  # NaN is wrong too
        c.status, c.why = "wrong", f"error {c.error:.3g} above the tolerance {tolerance:g}"
    else:
        c.status = "checked"


def quick_ms(c: Candidate, rep_ms: int = 20) -> None:
    """A first median time of a checked candidate, to rank it within its family."""
    if c.ok:
        c.ms = round(grader_ms(c.run, warmup=5, rep=rep_ms), 4)


def best(candidates: list[Candidate], n: int = 1) -> list[Candidate]:
    """The n fastest checked candidates."""
    return sorted((c for c in candidates if c.ok and c.ms is not None), key=lambda c: c.ms)[:n]


def comparison_row(part: str, shape: str, ms: dict, flops: float, missing: dict, settings: dict,
                   errors: dict) -> dict:
    """One shape's results: ms and TFLOP/s of every version, and each Triton version's fraction of the best
    library version's speed (names starting "SDPA" are the library's: best SDPA time / the version's time)."""
    lib = {n: t for n, t in ms.items() if n.startswith("SDPA")}
    ours = {n: t for n, t in ms.items() if not n.startswith("SDPA")}
    row = {"part": part, "shape": shape, "ms": ms, "missing": missing, "settings": settings, "errors": errors,
           "TFLOPs": {n: round(flops / (t * 1e-3) / 1e12, 1) for n, t in ms.items()}}
    if lib and ours:
        best_lib = min(lib, key=lib.get)
        row["best_sdpa"] = best_lib
        row["fraction_of_best_sdpa"] = {n: round(lib[best_lib] / t, 3) for n, t in ours.items()}
        row["best_triton"] = min(ours, key=ours.get)
        row["best_fraction"] = row["fraction_of_best_sdpa"][row["best_triton"]]
    return row
