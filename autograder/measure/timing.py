"""Timing as the course does it everywhere: triton.testing.do_bench medians, warm-up, L2 flushed between
runs (do_bench does that), on random data the caller provides."""

from __future__ import annotations

import contextlib
import time

from autograder import runtime
from autograder.measure.meters import AllocationMeter, TritonLaunches


def bench_ms(fn, warmup: int = 25, rep: int = 100) -> float:
    """Median GPU time of fn() in milliseconds, as the notebooks' demonstrations time. warmup and rep are in
    milliseconds, as do_bench takes them; a quarter of each in a notebook the grader runs (runtime.small_demos)."""
    if runtime.small_demos():
        warmup, rep = max(1, warmup // 4), max(5, rep // 4)
    return grader_ms(fn, warmup, rep)


def grader_ms(fn, warmup: int = 25, rep: int = 100) -> float:
    """do_bench's median, whatever the demonstrations' switch says: the grader's own timing comes through here."""
    if not runtime.has_gpu():
        raise RuntimeError("timing needs a CUDA GPU; in Triton's interpreter speed means nothing")
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def interleaved_times(fns: dict, rounds: int = 5, rep: int = 50, lead: str | None = None, bench=None) -> dict:
    """{name: [ms per round]} for several versions timed in turns.

    A GPU that runs long matrix products heats up and lowers its clocks, and a neighbour on a shared GPU comes
    and goes: versions timed one after another would each meet a different state. Taking turns gives every
    version the same mix of states, so their ratios hold even when the absolute times do not. The order turns
    round by round (A B C, B C A, C A B, ...) so that no version always follows the same one; `lead` names a
    version timed first in every round instead (a peak probe, after which the others take turns).
    Only the first round warms up at length: later ones find everything compiled and cached. bench: the timer
    (the grader's, unaffected by the demonstrations' switch, unless a demonstration passes bench_ms).
    """
    bench = bench or grader_ms
    names = list(fns)
    rest = [n for n in names if n != lead]
    times = {name: [] for name in names}
    for i in range(rounds):
        turn = rest[i % len(rest):] + rest[:i % len(rest)] if rest else []
        for name in ([lead] if lead in fns else []) + turn:
            times[name].append(bench(fns[name], warmup=25 if i == 0 else 5, rep=rep))
    return times


def bench_interleaved(fns: dict, rounds: int = 5, rep: int = 50) -> dict:
    """{name: median ms} over rounds of interleaved_times."""
    import statistics

    return {name: statistics.median(t) for name, t in interleaved_times(fns, rounds, rep, bench=bench_ms).items()}


def not_written(exc: BaseException) -> bool:
    """True for the error a notebook raises for an exercise the reader has not written yet: the release's
    stub (NotImplementedError) or a name its exercise cell has not defined (NameError), also as the cause of the
    error Triton raises for it (the interpreter's InterpreterError; the compiler's error on a stub kernel)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (NotImplementedError, NameError)):
            return True
        if type(exc).__module__.startswith("triton") and "NotImplementedError" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def written_versions(versions: dict, desc: str = "trying") -> dict:
    """The versions (name -> function of no arguments) that run: each is called once (a warm-up), and one whose
    exercise is not written yet is left out with a line that says so, so that a demonstration cell runs before
    the reader has done every exercise. Any other error is raised."""
    from tqdm.auto import tqdm

    runnable = {}
    for name, fn in tqdm(versions.items(), desc=desc):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped; anything else is raised
            if not not_written(exc):
                raise
            if isinstance(exc, runtime.NotTimedHere):
                print(f"{name}: not timed ({exc})")
            else:
                print(f"{name}: not timed, its exercise is not written yet ({type(exc).__name__}: {exc})")
            continue
        runnable[name] = fn
    return runnable


def bench_versions(versions: dict, desc: str = "timing", bench=None) -> dict:
    """{name: median ms} of each version that runs (written_versions), one after another; bench is the timer
    (bench_ms by default)."""
    bench = bench or bench_ms
    return {name: bench(fn) for name, fn in written_versions(versions, desc).items()}


@contextlib.contextmanager
def recording(graph):
    """torch.cuda.graph(graph), with cuBLAS's workspaces dropped before and after the recording.

    cuBLAS keeps one workspace per stream, allocated at first use, and graphs are recorded on one shared stream:
    a recording that finds a workspace left by an earlier graph, or allocated outside any graph, replays into
    memory it does not own. torch.compile's CUDA graphs drop every workspace when they record, the memory is
    freed, and the next replay fails with "unspecified launch failure" (seen in the capstone's benchmark after
    the GEMM benchmark's graphs). Dropped first, the workspace a recording needs is allocated in its own pool."""
    import torch

    drop = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # private; Inductor calls it for this reason
    if drop is not None:
        drop()
    with torch.cuda.graph(graph):
        yield graph
    if drop is not None:
        drop()


def cuda_graph(fn):
    """fn() recorded once in a CUDA graph (after a warm-up call on a side stream); returns the replay.

    bench_ms(cuda_graph(fn)) times the GPU's work without the host's launch cost, which for a Triton kernel
    launched from Python is tens of microseconds: more than a small kernel itself takes.
    """
    return recorded_call(fn)[0]


def graph_or_plain(fn):
    """(what to time, None) with fn recorded in a CUDA graph, or (fn, why not) where it cannot be recorded
    (it synchronises, reads a result on the host, or copies from host memory): the caller says so. A fn with a
    graphed() method (SampledCalls) records itself, one graph per input set."""
    import torch

    try:
        return (fn.graphed() if hasattr(fn, "graphed") else cuda_graph(fn)), None
    except Exception as exc:  # noqa: BLE001  any capture failure falls back to timing the plain calls
        torch.cuda.synchronize()
        return fn, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def synced_ms(fn, budget_s: float = 0.2) -> float:
    """Wall-clock time of fn() per call, the whole device synchronized before and after a batch of calls.

    Unlike CUDA events on the current stream, this counts work on every stream, whenever it finishes.
    """
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - start
    reps = max(3, min(100, int(budget_s / max(one, 1e-6))))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / reps


def peak_extra_bytes(fn):
    """(fn(), the bytes the CUDA allocator held at the peak of that call above what it held before)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


def extra_bytes(fn, launches=None):
    """(fn(), the bytes that call allocates beyond what was allocated before it, its outputs included).

    On a GPU the caching allocator's peak (exact). In Triton's interpreter every storage torch creates during
    the call, added up: an upper bound of the peak, since a tensor freed early still counts; storages created
    inside a kernel launch (the interpreter's copies of the arguments) do not, which is what `launches` (a
    meters.TritonLaunches, made here when not given) tells apart."""
    import numpy as np

    launches = launches if launches is not None else TritonLaunches()
    if runtime.has_gpu():
        def call():
            with launches:
                return fn()

        return peak_extra_bytes(call)
    with launches, AllocationMeter(launches) as meter, np.errstate(all="ignore"):
        result = fn()
    return result, meter.bytes


def gbps(n_bytes: float, ms: float) -> float:
    return n_bytes / (ms * 1e-3) / 1e9


def tflops(n_flops: float, ms: float) -> float:
    return n_flops / (ms * 1e-3) / 1e12


# ---------------------------------------------------------------------------------------------------------------
# Timing a submission that may try to escape the timer. The calls timed are audited three ways: the profiler's
# view of every stream bounds the time from below (device_work_ms), the outputs of calls picked at random while
# timing are kept and compared afterwards (SampledCalls), and the inputs rotate between sets of different values.


def busy_ms(intervals) -> float:
    """Milliseconds in which at least one of the (start_us, end_us) intervals was running: their union's length.
    Work on two streams at once counts once; the gaps between kernels count not at all."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e3


def device_intervals(events) -> list[tuple[float, float]]:
    """(start_us, end_us) of every kernel, copy and memset a profiler saw on the GPU, whatever its stream or name."""
    import torch

    cuda = torch.autograd.DeviceType.CUDA
    return [(e.time_range.start, e.time_range.end) for e in events if e.device_type == cuda]


def device_work_ms(fn, calls: int = 3) -> float:
    """GPU time per call of fn as torch.profiler sees it on every stream: the union of the intervals in which any
    of this process's kernels ran, over `calls` calls each followed by a synchronize of the whole device, divided
    by `calls`. A lower bound of what a call costs the GPU: a side stream, a thread of the submission launching
    between calls, or work finishing after fn returned are all in it."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with warnings.catch_warnings():  # the profiler's notices are not the student's business
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
                torch.cuda.synchronize()
    return busy_ms(device_intervals(prof.events())) / calls


def escaped_work(timed_ms: float, work_ms: float, noise: float = 0.15, floor_ms: float = 0.005) -> str | None:
    """Why the timer cannot be right, or None: the GPU ran more kernels per call than the time measured for it
    (beyond `noise`, a fraction, and `floor_ms` of clock skew). Timed with the L2 flushed between calls and
    profiled without, an honest call is profiled at or below its timed figure."""
    if work_ms > timed_ms * (1 + noise) + floor_ms:
        return (f"impossible measurement: work escaped the timer. The profiler saw {work_ms:.4f} ms of GPU work a "
                f"call (kernels on every stream, one call at a time with the whole device synchronized), but the "
                f"timed calls took {timed_ms:.4f} ms each: part of the work runs on a side stream, in a thread, "
                "after the function returns, or only when it is not timed")
    return None


class SampledCalls:
    """fn called on a rotation of input sets (values that differ from set to set), keeping the outputs of `keep`
    calls picked at random among all calls made (reservoir sampling, seeded from os.urandom) and of the latest
    call on each set: what was timed is checked afterwards with verify(), so a call that did less because it was
    timed is found whichever it was.
    Keeping a reference costs the GPU nothing; the comparison happens after timing.

    graphed(): the same over one CUDA graph per input set, replayed in turn (the time_in_cuda_graph exercises);
    each graph's output, as its last replay left it, is then what verify() checks."""

    def __init__(self, fn, arg_sets: list[tuple], keep: int = 3, seed: int | None = None):
        import os
        import random

        if not arg_sets:
            raise ValueError("SampledCalls needs at least one set of arguments")
        self.fn, self.arg_sets, self.keep = fn, [tuple(a) for a in arg_sets], keep
        self.calls = 0
        self.kept: list[tuple[int, int, object]] = []  # (input set, call number, output)
        self.last: dict[int, tuple[int, object]] = {}  # input set -> (call number, output) of its latest call
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little") if seed is None else seed)
        self.graph_outputs: list[tuple[int, object]] | None = None

    def __call__(self):
        i = self.calls % len(self.arg_sets)
        self.calls += 1
        out = self.fn(*self.arg_sets[i])
        self.last[i] = (self.calls, out)
        if len(self.kept) < self.keep:
            self.kept.append((i, self.calls, out))
        else:
            j = self._rng.randrange(self.calls)
            if j < self.keep:
                self.kept[j] = (i, self.calls, out)
        return out

    def graphed(self):
        """A function of no arguments replaying one CUDA graph per input set in turn (recorded here)."""
        replays, outputs = [], []
        for i, args in enumerate(self.arg_sets):
            replay, out = recorded_call(lambda a=args: self.fn(*a))
            replays.append(replay)
            outputs.append((i, out))
        self.graph_outputs = outputs
        turn = [0]

        def replay_next():
            k = turn[0] % len(replays)
            turn[0] += 1
            replays[k]()
        return replay_next

    def samples(self) -> list[tuple[int, object]]:
        """(input set, output) of the calls to verify: the kept plain calls, or each graph's output; in the order
        of their input sets, so that a verifier needs one set's reference at a time (at a benchmark size, a float32
        reference of add_rmsnorm's two outputs takes 1 GiB)."""
        if self.graph_outputs is not None:
            return list(self.graph_outputs)
        found = [(i, out) for i, _, out in self.kept] + [(i, out) for i, (_, out) in sorted(self.last.items())]
        return sorted(found, key=lambda s: s[0])

    def verify(self, problem) -> str | None:
        """The first problem(set, output) -> str | None found among the samples, with which call it was; also
        two kept calls returning one storage (only a cache can: both outputs are alive)."""
        import torch

        if self.graph_outputs is None:
            seen = {}
            for i, n, out in self.kept + [(i, n, out) for i, (n, out) in self.last.items()]:
                for t in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(t, torch.Tensor) and t.numel():
                        ptr = t.untyped_storage().data_ptr()
                        if ptr in seen and seen[ptr] != n:
                            return (f"timed calls {seen[ptr]} and {n} returned the same output storage: the timed "
                                    "calls return a stored result (a cache), not one computed for their inputs")
                        seen[ptr] = n
        for i, out in self.samples():
            why = problem(i, out)
            if why:
                return why
        return None


def recorded_call(fn):
    """(replay, output): fn() recorded once in a CUDA graph (after a warm-up call on a side stream), and the
    tensor(s) the recorded call returned, which every replay writes again."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compilation, autotuning and lazy set-up stay out of the recording
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with recording(graph):
        out = fn()
    return graph.replay, out
