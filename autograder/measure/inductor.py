"""Looking inside torch.compile, for notebook 06: the code Inductor generates, the kernels its `call()` launches,
the graph breaks Dynamo meets, and the kernels a GPU ran.

Everything here reads what PyTorch produces; nothing changes how a function is compiled. The helpers keep
stderr quiet (Dynamo reports graph breaks as logged warnings), because nbgrader fails a graded cell that writes
to stderr.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from dataclasses import dataclass, field

# Loggers whose warnings a demonstration provokes on purpose (a graph break is the point of the example).
_NOISY_LOGGERS = ("torch._dynamo", "torch._inductor", "torch.fx", "torch._functorch", "torch._subclasses")


@contextlib.contextmanager
def quiet():
    """Silence Dynamo's and Inductor's warnings, Python warnings and stray stderr for the duration; restore after.

    Levels, not handlers: torch attaches its handler to the "torch" logger, and a child logger left at NOTSET
    takes its effective level from its parent, so raising the parents' levels covers every module below them.
    """
    saved = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    try:
        for name in _NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)  # an autotuning candidate that fails logs an ERROR
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def run_code(compiled_fn, *args):
    """(result, code): compiled_fn (a torch.compile'd callable) run on args, with the Python source of every
    module Inductor generated during the call (forward, and backward if it ran one) joined into one string.
    A call that finds everything compiled already generates nothing: code is then ''."""
    from torch._inductor.utils import run_and_get_code

    with quiet():
        result, codes = run_and_get_code(compiled_fn, *args)
    return result, "\n\n".join(codes)


def generated_code(fn, *args, **kwargs):
    """(result, code) of torch.compile(fn, **kwargs) run on args: see run_code."""
    import torch

    return run_code(torch.compile(fn, **kwargs), *args)


# A launch inside call(): Triton kernels (Inductor's and user kernels) as NAME.run(, cuBLAS and other library
# calls as extern_kernels.NAME(, the CPU's C++ kernels as cpp_fused_NAME(, and ATen ops Inductor falls back to
# (SDPA's flash kernel, nonzero, ...) as torch.ops.aten.NAME.default(.
_LAUNCH = re.compile(
    r"\b(?:(extern_kernels\.\w+)\(|(\w+)\.run\(|(cpp_fused_\w+)\(|(?:torch\.ops\.)?(aten\.\w+)(?:\.\w+)?\()")


def _call_bodies(code: str) -> list[str]:
    """The text of every `def call(...)` in code (one per generated module): only there are kernels launched;
    the rest of a module defines them."""
    bodies = []
    for match in re.finditer(r"^(\s*)def call\(.*?\):\n", code, re.M):
        indent = len(match.group(1))
        lines = []
        for line in code[match.end():].splitlines():
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break  # the first line back at def's indentation ends the body
            lines.append(line)
        bodies.append("\n".join(lines))
    return bodies


def launches_in_code(code: str) -> list[str]:
    """The kernels the generated call() launches, in order, one entry per launch (a kernel launched twice is
    named twice). Falls back to the whole text when it has no call() (a fragment, or another layout)."""
    names = []
    for body in _call_bodies(code) or [code]:
        for m in _LAUNCH.finditer(body):
            names.append(next(g for g in m.groups() if g))
    return names


def kernel_source(code: str, name: str) -> str:
    """The source of one generated kernel: the text Inductor hands to async_compile for NAME (a Triton kernel's
    Python, a C++ kernel's C++), or a plain `def NAME(` up to the next blank lines; '' when not found."""
    m = re.search(rf"^{re.escape(name)} = async_compile\.\w+\(", code, re.M)
    if m:
        opening = code.find("'''", m.end())  # the generated source sits in a triple-quoted string
        closing = code.find("'''", opening + 3) if opening != -1 else -1
        if closing != -1:
            return code[opening + 3:closing].strip("\n")
    m = re.search(rf"^\s*def {re.escape(name)}\(", code, re.M)
    if not m:
        return ""
    end = code.find("\n\n\n", m.start())
    return code[m.start():end if end != -1 else len(code)].strip("\n")


@dataclass
class GraphReport:
    """What torch._dynamo.explain found: graphs, graph breaks, and a one-line reason for each break."""

    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.graphs} graph(s), {self.breaks} graph break(s)"]
        lines += [f"  break {i + 1}: {r}" for i, r in enumerate(self.reasons)]
        return "\n".join(lines)


def _short(reason: str, user_stack=None) -> str:
    """The first line of a Dynamo reason, and where in the user's code it happened."""
    first = reason.strip().splitlines()[0] if reason.strip() else "(no reason given)"
    if user_stack:
        frame = user_stack[-1]
        first += f" (at {frame.name}, line {frame.lineno})"
    return first[:200]


def graph_report(fn, *args, **kwargs) -> GraphReport:
    """Trace fn(*args) with Dynamo only (no code is generated) and report its graphs and breaks, quietly.
    fn runs once (a print inside it prints)."""
    import torch

    torch._dynamo.reset()  # an earlier trace of the same function would be reused from the cache
    with quiet():
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = [_short(str(b.reason), getattr(b, "user_stack", None)) for b in out.break_reasons]
    return GraphReport(out.graph_count, out.graph_break_count, reasons)


@dataclass
class KernelRow:
    name: str
    count: int
    total_us: float

    @property
    def each_us(self) -> float:
        return self.total_us / max(self.count, 1)


def _gpu_events(fn, args, warmup: int, iters: int, trace: str | None = None) -> list:
    """torch.profiler's GPU events (kernels and memory copies) during `iters` calls of fn(*args), after `warmup`
    calls left out (compilation, autotuning); trace: also write a Chrome trace there (chrome://tracing, Perfetto)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise RuntimeError("profiling the GPU's kernels needs a CUDA GPU")
    with quiet():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn(*args)
            torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _device_us(e) -> float:
    us = getattr(e, "device_time", None)
    return e.cuda_time if us is None else us  # older PyTorch


def gpu_kernel_table(fn, *args, warmup: int = 2, iters: int = 1) -> list[KernelRow]:
    """The GPU's events during `iters` calls of fn(*args) (see _gpu_events), grouped by name, in order of first
    appearance; counts are per call."""
    rows: dict[str, list[float]] = {}
    for e in _gpu_events(fn, args, warmup, iters):
        rows.setdefault(e.name, []).append(_device_us(e))
    return [KernelRow(n, len(t) // iters, sum(t) / iters) for n, t in rows.items()]


@dataclass
class Span:
    name: str
    start_us: float  # from the start of the first GPU event of the call
    duration_us: float


def gpu_timeline(fn, *args, warmup: int = 2, trace: str | None = None) -> list[Span]:
    """When each GPU event of one call of fn(*args) ran, in order: the gaps between spans are time the GPU sat
    idle, waiting for the host to launch the next kernel. trace: also write the Chrome trace to that path."""
    events = sorted(_gpu_events(fn, args, warmup, 1, trace), key=lambda e: e.time_range.start)
    if not events:
        return []
    t0 = events[0].time_range.start
    return [Span(e.name, e.time_range.start - t0, e.time_range.end - e.time_range.start) for e in events]


def print_kernel_table(rows: list[KernelRow], title: str = "", width: int = 70) -> None:
    """One line per kernel: count, time each, total; then the sum."""
    if title:
        print(title)
    for r in rows:
        name = r.name if len(r.name) <= width else r.name[: width - 1] + "…"
        print(f"  {name:<{width}} x{r.count:<3} {r.each_us:8.1f} us each {r.total_us:9.1f} us")
    total = sum(r.total_us for r in rows)
    print(f"  {sum(r.count for r in rows)} GPU events, {total:.1f} us in all")
