"""The four criteria for Triton kernel exercises: correctness, precision, performance, fusion."""

from __future__ import annotations

import math
import os
import re
import threading
import traceback
import warnings

import numpy as np
import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.progress import steps
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.guard.watch import Guarded, TritonLaunches, Watch, poison_value, storage_of
from autograder.guard.secret import EXTRA_SHAPES
from autograder.specs.exercise import KernelExercise, Shape
from autograder.measure.timing import extra_bytes

MAX_LISTED = 5


def _sync():
    if runtime.has_gpu():
        torch.cuda.synchronize()


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def graded_dtypes() -> list[torch.dtype]:
    # bf16 arithmetic is wrong in Triton's interpreter, and not native below compute capability 8.0.
    from autograder.measure import capability

    return capability.graded_dtypes(capability.current())


def _seed(base: int, *parts) -> int:
    h = base
    for p in parts:
        for ch in str(p):
            h = (h * 1000003 + ord(ch)) % (2**62)
    return h


def _inputs(ex: KernelExercise, shape: Shape, dtype, seed: int, device=None) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return ex.make_inputs(shape, dtype, device or runtime.device(), gen)


def _gpu_inputs(ex: KernelExercise, shape: Shape, dtype, seed: int) -> dict:
    """Benchmark-size inputs drawn on the GPU by a CUDA generator: data of the same kind (another draw of it) in
    milliseconds, where the CPU takes seconds for hundreds of MiB; made on the CPU where an input maker cannot
    run on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    try:
        with torch.device("cuda"):
            return ex.make_inputs(shape, dtype, "cuda", gen)
    except (RuntimeError, TypeError):
        return _inputs(ex, shape, dtype, seed, device="cuda")


_LIBRARY_PATHS = ("site-packages", "dist-packages", os.sep + "autograder" + os.sep, os.sep + "triton" + os.sep)


def _student_error(exc: BaseException, function: str) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    library = _LIBRARY_PATHS
    raised_by_student = bool(frames) and not any(part in frames[-1].filename for part in library)
    if isinstance(exc, NotImplementedError) and raised_by_student and not str(exc).strip():
        # The release's placeholder (`raise NotImplementedError()`); one raised inside a library keeps its words.
        return f"{function} raised NotImplementedError: the exercise is not done yet"
    where = ""
    for fr in reversed(frames):  # the innermost frame in the student's own code
        if not any(part in fr.filename for part in library):
            where = f" (at {os.path.basename(fr.filename)}:{fr.lineno}: {fr.line})"
            break
    text = _first_line(exc)
    # Triton's CompilationError opens with a position ("at 9:20:") and carries the reason in its chain of
    # causes (triton 3.6, nested once per jit function) or in its last line (later versions).
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    reason = _reason_line(root)
    if reason and reason != text:
        text += f" ... {reason}"
    return f"{function} raised {type(exc).__name__}: {text}{where}{_hint(exc)}"


def _hint(exc: BaseException) -> str:
    """What a common, cryptic failure usually means."""
    text = str(exc).lower()
    if "out of memory" in text or "can't allocate memory" in text:
        return "\nMemory ran out: the function allocates far more than its output (or the notebook holds large tensors)."
    if isinstance(exc, TypeError) and "object is not subscriptable" in text and "function" in text:
        return "\nkernel[grid](...) needs a Triton kernel: is @triton.jit missing above the kernel's def?"
    return ""


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _reason_line(exc: BaseException) -> str:
    """The line of an exception that says what went wrong (not where)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if any(ch.isalnum() for ch in ln)]
    if not lines:
        return type(exc).__name__
    if re.fullmatch(r"at \d+:\d+:", lines[0]):  # a position; the message is at the end
        return lines[-1] if len(lines) > 1 else lines[0]
    return f"{type(exc).__name__}: {lines[0]}"


def _compare(out: torch.Tensor, ref: torch.Tensor, dtype, atol: float, rtol: float) -> str | None:
    """Elementwise comparison against the float64 reference rounded to the output dtype."""
    expected = ref.to(dtype).double()
    got = out.double()
    both_nan = torch.isnan(got) & torch.isnan(expected)
    close = (got == expected) | ((got - expected).abs() <= atol + rtol * expected.abs()) | both_nan
    bad = ~close
    n_bad = int(bad.sum())
    if not n_bad:
        return None
    idx = tuple(int(i) for i in torch.nonzero(bad)[0])
    extra = ""
    nan_where_finite = int((torch.isnan(got) & ~torch.isnan(expected)).sum())
    if nan_where_finite:
        extra = f"; {nan_where_finite} NaN where the reference is a number"
    missing_nan = int((~torch.isnan(got) & torch.isnan(expected)).sum())
    if missing_nan:
        extra += f"; {missing_nan} number(s) where the reference is NaN"
    return (
        f"{n_bad} of {bad.numel()} elements differ from the reference (atol={atol:g}, rtol={rtol:g}); "
        f"first at index {list(idx)}: got {got[idx].item():.6g}, expected {expected[idx].item():.6g}{extra}"
    )


def guarded_call(ex: KernelExercise, fn, inputs: dict, guarded: dict | None = None):
    """Call fn on guard-padded copies of the inputs, its new tensors poisoned and guard-padded too.

    ``guarded`` passes guard-padded inputs to reuse (the same tensors on several calls). Returns
    (output, watch, problems); output is None when the call raised.
    """
    guarded = guarded or {k: Guarded.copy_of(v, f"input {k}") for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    call = {k: guarded[k].tensor if k in guarded else v for k, v in inputs.items()}
    snapshots = {k: g.buffer.clone() for k, g in guarded.items()}
    launches = TritonLaunches()
    watch = Watch(launches, poison=True)
    threads = set(threading.enumerate())
    try:
        # NaN and Inf inputs make the interpreter's numpy warn about arithmetic that is meant to happen.
        with launches, watch, np.errstate(all="ignore"):
            out = fn(*call.values())
        _sync()
    except Exception as exc:  # the student's code failed: report it, keep grading
        return None, watch, [_student_error(exc, ex.function)]
    left = _left_running(ex, threads)
    problems = [left] if left else []
    aliased = _aliases_an_input(ex, out, {k: g.tensor for k, g in guarded.items()})
    if aliased:
        problems.append(aliased)
    for k, g in guarded.items():
        if not torch.equal(g.buffer.view(torch.uint8), snapshots[k].view(torch.uint8)):
            damage = g.guard_damage()
            problems.append(f"out-of-bounds write next to input {k}: {damage}" if damage else f"input {k} was modified")
    for g in watch.allocations:
        damage = g.guard_damage()
        if damage:
            problems.append(f"out-of-bounds write: {damage} (a store without a correct mask?)")
    return out, watch, problems


# Threads that libraries start for themselves (kernel I/O, progress bars, compile workers).
_LIBRARY_THREADS = ("torch", "triton", "ipykernel", "IPython", "zmq", "tqdm", "jupyter_client", "matplotlib")


def _left_running(ex: KernelExercise, before: set) -> str | None:
    """A thread the call started and left running: the result may be written after it was checked or timed."""
    for t in threading.enumerate():
        target = getattr(t, "_target", None)
        module = getattr(target, "__module__", "") or ""
        # A Thread subclass has no target: its class says whose it is (ipykernel 7 starts a SubshellThread when a
        # notebook's widget, such as the grader's own progress bar, first talks to the kernel).
        library = module.startswith(_LIBRARY_THREADS) or (target is None and type(t).__module__.startswith(_LIBRARY_THREADS))
        if t not in before and t.is_alive() and not library:
            what = getattr(target, "__qualname__", t.name)
            return (f"{ex.function} left a thread running when it returned ({what}): its work may finish after "
                    "the result is read or the timer stops; finish (or enqueue) all work before returning")
    return None


def _aliases_an_input(ex: KernelExercise, value, inputs: dict) -> str | None:
    """The message when an output shares memory with one of the tensors fn was called with, else None."""
    for i, o in enumerate(value if isinstance(value, (tuple, list)) else (value,)):
        for k, v in inputs.items():
            if isinstance(o, torch.Tensor) and isinstance(v, torch.Tensor) and o.numel() and v.numel() \
                    and storage_of(o) == storage_of(v):
                label = f"{ex.output_names[i]}: " if len(ex.output_names) > 1 and i < len(ex.output_names) else ""
                return f"{label}output shares memory with input {k}: write the result to a new tensor"
    return None


def output_problem(ex: KernelExercise, value, refs: tuple, inputs: dict, input_dtype) -> str | None:
    """What is wrong with the form of what fn returned (kind, count, device, dtype, shape, autograd, aliasing), in
    words, or None when every output has the form of the reference; the values are judged elsewhere."""
    if value is None:
        return f"{ex.function} returned None, expected {_expected_kind(ex)} (a missing `return`?)"
    outs = _as_outputs(value, len(refs))
    if outs is None:
        got = type(value).__name__
        if isinstance(value, (tuple, list)):
            got = f"a {got} of {len(value)}: {', '.join(type(v).__name__ for v in value)}"
        return f"{ex.function} returned {got}, expected {_expected_kind(ex)}"
    device = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), None)
    for i, (o, r) in enumerate(zip(outs, refs)):
        label = f"{ex.output_names[i]}: " if len(refs) > 1 else ""
        if device is not None and o.device.type != device.type:
            return f"{label}output is on {o.device}, the inputs on {device}: return it on the inputs' device"
        if tuple(o.shape) != tuple(r.shape):
            return f"{label}output has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        dtype = ex.out_dtype(input_dtype, i)
        if o.dtype != dtype:
            return f"{label}output dtype is {_dtype_name(o.dtype)}, expected {_dtype_name(dtype)}"
        if o.requires_grad:
            return (f"{label}output requires grad: the grader takes a plain tensor (compute it under "
                    "torch.no_grad(), or wrap the kernel in a torch.autograd.Function)")
    return _aliases_an_input(ex, outs, inputs)


def _as_outputs(value, n: int):
    """The outputs as a tuple, or None when fn returned the wrong kind or number of things."""
    if n == 1:
        return (value,) if isinstance(value, torch.Tensor) else None
    if isinstance(value, (tuple, list)) and len(value) == n and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    return None


def _expected_kind(ex: KernelExercise) -> str:
    n = len(ex.output_names)
    return "a torch.Tensor" if n == 1 else f"a tuple of {n} tensors ({', '.join(ex.output_names)})"


def tolerance(ex: KernelExercise, inputs: dict, dtype) -> tuple[float, float]:
    """(atol, rtol) of the elementwise comparison for these inputs."""
    atol, rtol = ex.tolerance[dtype]
    if ex.atol_from_inputs is not None:
        atol = max(atol, ex.atol_from_inputs(inputs, dtype))
    return atol, rtol


def _check_output(ex, index, out, ref, input_dtype, watch, tol) -> str | None:
    name = ex.output_names[index]
    label = f"{name}: " if len(ex.output_names) > 1 else ""
    dtype = ex.out_dtype(input_dtype, index)
    if tuple(out.shape) != tuple(ref.shape):
        return f"{label}output has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != dtype:
        return f"{label}output dtype is {_dtype_name(out.dtype)}, expected {_dtype_name(dtype)}"
    if out.device.type != torch.device(runtime.device()).type:
        return f"{label}output is on {out.device}, expected {runtime.device()}"
    if watch.owner(out) is not None:
        pv = poison_value(dtype)
        unwritten = (out == pv) & (ref.to(dtype) != pv)
        n = int(unwritten.sum())
        if n:
            first = [int(i) for i in torch.nonzero(unwritten)[0]]
            return f"{label}{n} of {out.numel()} output elements were never written (first at index {first})"
    mismatch = _compare(out, ref, dtype, *tol)
    return label + mismatch if mismatch else None


def _diagnose(ex: KernelExercise, outs, inputs: dict) -> str | None:
    """Name the bug when the output matches a known wrong formula better than the right one (the closest of
    them: on a tiny row two wrong formulas can both come closer than the right one)."""
    refs = _as_tuple(ex.reference(**inputs))
    best = None
    for bug, wrong_reference in ex.diagnoses:
        wrong = wrong_reference(**inputs)
        wrong = wrong if isinstance(wrong, tuple) else (wrong,)
        # Both distances on the right result's scale: against its own norm, a wrong formula of large values
        # (log-probabilities) looks close to any output, and one of values near 0 far from every output. A NaN
        # where the result is finite is infinitely far from it.
        pairs = [(_far(_rel_err(o, w, scale=r)), _far(_rel_err(o, r))) for o, w, r in zip(outs, wrong, refs)]
        # Every output at least as close to the wrong formula, and one of them far closer.
        if all(ew <= er * 1.01 + 1e-12 for ew, er in pairs) and any(ew < 0.1 * er for ew, er in pairs):
            closeness = sum(ew / er if 0 < er < math.inf else float(ew >= er) for ew, er in pairs)
            if best is None or closeness < best[0]:
                best = (closeness, bug)
    return f"likely cause: {best[1]}" if best else None


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def run_case(ex: KernelExercise, fn, inputs: dict, dtype) -> list[str]:
    """Run fn once on guard-padded inputs and list every problem found."""
    return _run(ex, fn, inputs, dtype)[1]


def _run(ex: KernelExercise, fn, inputs: dict, dtype, guarded: dict | None = None):
    """(outputs or None, problems) of one guarded call, checked against the reference."""
    refs = _as_tuple(ex.reference(**inputs))
    out, watch, problems = guarded_call(ex, fn, inputs, guarded)
    if out is None and problems:  # it raised
        return None, problems
    outs = _as_outputs(out, len(refs))
    if outs is None:
        return None, problems + [output_problem(ex, out, refs, inputs, dtype)]
    form = output_problem(ex, out, refs, inputs, dtype)
    if form and "requires grad" in form:  # shape, dtype and device are checked per output below
        problems.append(form)
    mismatched = False
    for i, (o, r) in enumerate(zip(outs, refs)):
        msg = _check_output(ex, i, o, r, dtype, watch, tolerance(ex, inputs, dtype))
        if msg:
            problems.append(msg)
            mismatched = mismatched or "differ from the reference" in msg
    if mismatched and ex.diagnoses:
        hint = _diagnose(ex, outs, inputs)
        if hint:
            problems.append(hint)
    not_computed = _not_by_a_kernel(ex, watch, outs)
    return outs, problems + ([not_computed] if not_computed else [])


def _not_by_a_kernel(ex: KernelExercise, watch: Watch, outs) -> str | None:
    """Why the outputs were not computed by a Triton kernel during the call, or None when they were."""
    by_torch = sorted({op for op in (watch.computed_by_torch(o) for o in outs) if op})
    if by_torch:
        return (f"the result was computed by torch ({', '.join(by_torch)}), not by a Triton kernel: the output must "
                "be written by your kernel")
    if watch.launches.count == 0:
        return (f"no Triton kernel ran during the call, yet {ex.function} returned a result: a result kept from an "
                "earlier call (a cache?) or made without a kernel; compute it in a Triton kernel")
    return None


def _shares_storage(a, b) -> bool:
    return any(storage_of(x) == storage_of(y) for x in a for y in b)


def _cache_probe(ex: KernelExercise, fn, seed: int) -> str | None:
    """Call fn again on the same tensors holding new data, after a few elements change, and on equal data in
    new tensors. An honest kernel follows every change and returns a new tensor each time; a function that
    caches its results, keyed on the tensors' identity or address or on (part of) their data, does not."""
    shape = next((s for s in ex.shapes if s.layout == "contiguous" and math.prod(s.dims) >= 64), ex.shapes[-1])
    dtype = torch.float32
    first = _inputs(ex, shape, dtype, _seed(seed, "cache", 1))
    second = {k: v if isinstance(v, torch.Tensor) else first[k] for k, v in
              _inputs(ex, shape, dtype, _seed(seed, "cache", 2)).items()}
    held = {k: Guarded.copy_of(v, f"input {k}") for k, v in first.items() if isinstance(v, torch.Tensor)}
    out_a, problems = _run(ex, fn, first, dtype, held)
    if problems:
        return None  # not a caching problem: the trials below find and report it
    kept = [o.clone() for o in out_a]
    for k, g in held.items():
        g.tensor.copy_(second[k])
    out_b, problems = _run(ex, fn, second, dtype, held)
    where = f"shape {shape}, float32"
    if problems:
        refs_a = _as_tuple(ex.reference(**first))
        stale = out_b is not None and all(_compare(o, r, ex.out_dtype(dtype, i), *ex.tolerance[dtype]) is None
                                          for i, (o, r) in enumerate(zip(out_b, refs_a)))
        if stale:
            return (f"{where}: called again on the same tensors holding new data, {ex.function} returned the "
                    "previous result: results are cached (keyed on the tensors' identity or address), not computed")
        return (f"{where}, the same tensors called again with new data: " + "; ".join(problems))
    if _shares_storage(out_a, out_b):
        return (f"{where}: two calls returned the same output tensor: results are cached or one buffer is reused; "
                "allocate the output on every call")
    if not all(torch.equal(o, k) for o, k in zip(out_a, kept)):
        return (f"{where}: the first call's output changed when {ex.function} was called again: it writes into a "
                "buffer it returned before; allocate the output on every call")
    name = ex.free_input or next(iter(held))
    third = dict(second, **{name: second[name].clone()})
    flat = third[name].view(-1)
    gen = torch.Generator().manual_seed(_seed(seed, "cache", 3))
    pos = torch.randperm(flat.numel(), generator=gen)[:8].to(flat.device)
    flat[pos] = torch.randn(8, generator=gen).to(device=flat.device, dtype=dtype)
    held[name].tensor.copy_(third[name])
    out_c, problems = _run(ex, fn, third, dtype, held)
    if problems:
        return (f"{where}: after 8 elements of {name} changed in place, the output did not follow: results are "
                "cached (keyed on part of the data?), not computed. " + "; ".join(problems))
    out_d, problems = _run(ex, fn, third, dtype)  # equal data in new tensors
    if problems:
        return (f"{where}, equal inputs in new tensors: " + "; ".join(problems))
    if _shares_storage(out_c, out_d):
        return (f"{where}: for equal inputs in new tensors {ex.function} returned the tensor of an earlier call: "
                "results are cached (keyed on the data), not computed")
    return None


def _with_specials(inputs: dict, seed: int) -> dict:
    """Put NaN, +Inf and -Inf into the first tensor input."""
    name = next(k for k, v in inputs.items() if isinstance(v, torch.Tensor))
    x = inputs[name].clone()
    flat = x.view(-1) if x.is_contiguous() else None
    if flat is None or flat.numel() < 3:
        return inputs
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randperm(flat.numel(), generator=gen)[:3].to(flat.device)
    flat[pos] = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=x.dtype, device=x.device)
    return {**inputs, name: x}


def correctness(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    # First, whether fn computes at all: a cached result would make every case below misleading.
    cached = _cache_probe(ex, fn, cfg.secret_seed)
    if cached:
        return CriterionResult("correctness", FAILED, cached, {"cases": 1, "failed": 1})
    trials = [(f"trial {i + 1}", int.from_bytes(os.urandom(6), "little")) for i in range(cfg.trials)]
    trials.append(("secret case", cfg.secret_seed))
    failures, n_cases = [], 1  # the probe for cached results, above, is the first case
    cases = []
    for label, seed in trials:
        shapes = ex.shapes + (EXTRA_SHAPES.get(ex.id, ()) if label == "secret case" else ())
        cases += [(label, seed, shape, dtype) for shape in shapes for dtype in graded_dtypes()]
    for label, seed, shape, dtype in steps(cases, f"{ex.id} correctness"):
        if len(failures) >= 3 * MAX_LISTED:
            break  # enough evidence; the message says how many cases ran
        n_cases += 1
        problems = run_case(ex, fn, _inputs(ex, shape, dtype, _seed(seed, shape, dtype)), dtype)
        if problems:
            where = f"shape {shape}, {_dtype_name(dtype)}, {label}" + (f" (seed {seed})" if label != "secret case" else "")
            failures.append(f"{where}: " + "; ".join(problems))
    if ex.special_values and not failures:
        for dtype in (torch.float32, torch.float16):
            n_cases += 1
            shape = ex.shapes[min(2, len(ex.shapes) - 1)]
            inputs = _with_specials(_inputs(ex, shape, dtype, _seed(cfg.secret_seed, "specials", dtype)), 7)
            problems = run_case(ex, fn, inputs, dtype)
            if problems:
                failures.append(f"shape {shape}, {_dtype_name(dtype)}, inputs holding NaN/+Inf/-Inf: " + "; ".join(problems))
    figures = {"cases": n_cases, "failed": len(failures), "dtypes": ", ".join(map(_dtype_name, graded_dtypes()))}
    if failures:
        listed = "\n".join(failures[:MAX_LISTED])
        more = f"\n... and {len(failures) - MAX_LISTED} more failing case(s)" if len(failures) > MAX_LISTED else ""
        total = len(cases) + 1
        ran = f"{n_cases} cases" if n_cases >= total else f"the first {n_cases} of {total} cases (stopped early)"
        return CriterionResult("correctness", FAILED, f"{len(failures)} of {ran} failed:\n{listed}{more}", figures)
    note = "" if runtime.has_gpu() else " (bf16 is graded on a GPU only)"
    return CriterionResult("correctness", PASSED, f"all {n_cases} cases match the reference{note}", figures)


def _rel_err(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||out - ref|| / ||ref|| over ref's finite elements (divided by ||scale|| instead, when given)."""
    ref = ref.double()  # integer results (indices) too
    finite = torch.isfinite(ref)
    got = out.double()
    if not bool(((got == ref) | (torch.isnan(got) & torch.isnan(ref)))[~finite].all()):
        return math.inf  # a NaN or infinity of the reference not reproduced
    diff = (out.double() - ref)[finite]
    norm = ref[finite].norm() if scale is None else scale.double()[torch.isfinite(scale)].norm()
    return float(diff.norm() / norm.clamp_min(1e-300))


def _far(err: float) -> float:
    return math.inf if math.isnan(err) else err


def _slope(lengths, errs) -> float:
    """Least-squares exponent p of err ~ length**p (log-log fit over every point)."""
    pts = [(math.log(n), math.log(e)) for n, e in zip(lengths, errs) if e > 0]
    if len(pts) < 2:
        return 0.0
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def precision_bound(ex: KernelExercise, inputs: dict, refs: tuple, dtype) -> tuple[float, float, str, str]:
    """(bound on ||out - ref|| / ||ref||, what rounding the exact result to the output dtype costs, that dtype's
    name, a note when the bound comes from the arithmetic the inputs force)."""
    # Rounding the exact result to the output dtype (float32 outputs of float16 inputs too).
    ideal, rounded_to = max((_rel_err(r.to(ex.out_dtype(dtype, i)), r), _dtype_name(ex.out_dtype(dtype, i)))
                            for i, r in enumerate(refs))
    bound = max(ex.precision_factor * ideal, ex.precision_floor.get(dtype, 0.0))
    floor_note = ""
    if ex.precision_floor_from_inputs is not None:
        floor, why = ex.precision_floor_from_inputs(inputs, dtype)
        if floor > bound:
            bound, floor_note = floor, f"; the bound is what {why} may cost"
    return bound, ideal, rounded_to, floor_note


def precision(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    figures, failures, hint = {}, [], None
    shapes = ex.precision_shapes or (ex.precision_shape,)
    for dtype in graded_dtypes():
        name = _dtype_name(dtype)
        errs, excess, ratios = [], [], []
        for shape in shapes:
            inputs = _inputs(ex, shape, dtype, _seed(cfg.secret_seed, "precision", shape, dtype))
            refs = _as_tuple(ex.reference(**inputs))
            out, watch, problems = guarded_call(ex, fn, inputs)
            if problems:
                return CriterionResult("precision", FAILED, "; ".join(problems), figures)
            form = output_problem(ex, out, refs, inputs, dtype)
            if form:
                return CriterionResult("precision", FAILED, form, figures)
            outs = _as_outputs(out, len(refs))
            not_computed = _not_by_a_kernel(ex, watch, outs)
            if not_computed:
                return CriterionResult("precision", FAILED, not_computed, figures)
            err = max(_rel_err(o, r) for o, r in zip(outs, refs))
            bound, ideal, rounded_to, floor_note = precision_bound(ex, inputs, refs, dtype)
            errs.append(err)
            excess.append(max(err - ideal, 0.0))  # what the kernel adds to the output's own rounding
            ratios.append(err / bound if bound > 0 else math.inf)
            key = name if len(shapes) == 1 else f"{name}@{shape.dims[ex.reduced_axis]}"
            figures[f"rel_err_{key}"] = err
            figures[f"bound_{key}"] = bound
            if not math.isfinite(err):
                failures.append(
                    f"{name}, shape {shape}: the output holds inf or NaN where the exact result is finite: an "
                    f"intermediate left {name}'s range ({torch.finfo(dtype).max:.6g} at most); keep sums and products "
                    "in float32"
                )
            elif not err <= bound:  # NaN fails too
                hint = hint or (_diagnose(ex, outs, inputs) if ex.diagnoses else None)
                failures.append(
                    f"{name}, shape {shape}: ||out - ref|| / ||ref|| = {err:.3g}, above the bound {bound:.3g} "
                    f"(rounding the exact result to {rounded_to} alone costs {ideal:.3g}{floor_note})"
                )
        if len(shapes) > 1:
            lengths = [s.dims[ex.reduced_axis] for s in shapes]
            p = _slope(lengths, excess)
            figures[f"growth_exponent_{name}"] = p
            if any(r > 1 for r in ratios) and p > 0.25:
                failures.append(
                    f"{name}: the error grows like {ex.reduced_dim}^{p:.2f} with the reduced length (from "
                    f"{errs[0]:.2g} at {ex.reduced_dim}={lengths[0]} to {errs[-1]:.2g} at {ex.reduced_dim}={lengths[-1]}): "
                    "the signature of accumulating in low precision. Keep the running sums in float32."
                )
    if failures:
        # A recognised wrong formula explains the error better than the generic advice on accumulators.
        note = f"\n{hint}" if hint else (f"\n{ex.precision_note}" if ex.precision_note else "")
        return CriterionResult("precision", FAILED, "\n".join(failures) + note, figures)
    worst = max(v / figures["bound_" + k[len("rel_err_"):]] for k, v in figures.items() if k.startswith("rel_err_"))
    return CriterionResult(
        "precision", PASSED, f"relative error within bounds for every dtype and size (worst at {worst:.2f} of its bound)",
        figures,
    )


def _count_gpu_kernels(run) -> tuple[int, list[str]]:
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():  # the profiler's own notices are not the student's business
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    names = [
        e.name
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.lower().startswith("memset")
    ]
    return len(names), names


def fusion(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    shape = max(ex.shapes, key=lambda s: math.prod(s.dims))
    inputs = _inputs(ex, shape, torch.float32, _seed(cfg.secret_seed, "fusion"))
    args = tuple(inputs.values())
    try:
        out = fn(*args)  # warm-up: compilation and autotuning stay out of the count
        _sync()
        launches = TritonLaunches()
        watch = Watch(launches, poison=False)
        if runtime.has_gpu():
            def run():
                with launches, watch:
                    fn(*args)
            n_kernels, names = _count_gpu_kernels(run)
        else:
            with launches, watch:
                fn(*args)
            n_kernels, names = launches.count, launches.names
    except Exception as exc:
        return CriterionResult("fusion", FAILED, _student_error(exc, ex.function))
    ops = sorted(set(watch.torch_ops))
    figures = {"kernel_launches": n_kernels, "triton_launches": launches.count, "allowed": ex.max_launches}
    how = "counted with torch.profiler" if runtime.has_gpu() else "counted at Triton's launch entry (interpreter)"
    problems = []
    if launches.count == 0:
        problems.append(f"no Triton kernel ran: {ex.function} must compute its result in a Triton kernel")
    if ops:
        problems.append(
            f"computes with torch operations outside the Triton kernel ({', '.join(ops)}); "
            "only allocation and views are allowed there"
        )
    if n_kernels > ex.max_launches:
        problems.append(f"launched {n_kernels} kernels ({', '.join(names[:8])}); at most {ex.max_launches} allowed")
    if ex.outputs_share_storage:
        outs = _as_outputs(out, len(ex.output_names))
        if outs is None or len({o.untyped_storage().data_ptr() for o in outs}) > 1:
            problems.append(
                f"{', '.join(ex.output_names)} should be views (slices) of the one buffer the kernel wrote, "
                "not separate tensors: a copy per output is extra traffic"
            )
    if problems:
        return CriterionResult("fusion", FAILED, "\n".join(problems) + f" [{how}]", figures)
    return CriterionResult(
        "fusion", PASSED, f"{n_kernels} kernel launch(es), at most {ex.max_launches} allowed, no torch compute [{how}]",
        figures,
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**28 else f"{n / 2**20:.3g} MiB"


def memory(ex: KernelExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """Peak memory a call allocates beyond its inputs, at the exercise's memory shape, against its bound.

    On a GPU the caching allocator's peak (exact); in the interpreter the sum of every storage torch creates
    during the call, an upper bound of the peak. Either way a version that materialises the intermediate
    (whose size the message gives) cannot stay under the bound.
    """
    from autograder.measure import capability

    dtype = capability.timing_dtype(ex.perf_dtype, capability.current()) if runtime.has_gpu() else torch.float32
    shape = ex.memory_shape if runtime.has_gpu() else ex.memory_shape_cpu or ex.memory_shape
    seed = _seed(cfg.secret_seed, "memory")
    inputs = _gpu_inputs(ex, shape, dtype, seed) if runtime.has_gpu() else _inputs(ex, shape, dtype, seed)
    args = tuple(inputs.values())
    bound, materialised = ex.memory_bound(inputs), ex.materialised_bytes(inputs)
    launches = TritonLaunches()
    try:
        fn(*args)  # warm-up: compilation and autotuning stay out of the measurement
        _sync()
        out, extra = extra_bytes(lambda: fn(*args), launches)
        how = ("the CUDA allocator's peak" if runtime.has_gpu() else
               "every allocation added up (the interpreter: an upper bound of the peak)")
    except Exception as exc:
        return CriterionResult("memory", FAILED, _student_error(exc, ex.function))
    expected = _as_tuple(ex.reference(**inputs))
    figures = {"extra_bytes": extra, "bound_bytes": bound, "materialised_bytes": materialised}
    where = f"shape {shape}, {_dtype_name(dtype)}"
    form = output_problem(ex, out, expected, inputs, dtype)
    if form:
        return CriterionResult("memory", FAILED, f"{form} ({where}): memory not judged", figures)
    outs = _as_outputs(out, len(expected))
    if not all(_rel_err(o, e) < 5e-2 for o, e in zip(outs, expected)):
        return CriterionResult("memory", FAILED, f"wrong result at {where}: memory not judged (see correctness)",
                               figures)
    if launches.count == 0:
        return CriterionResult("memory", FAILED, f"no Triton kernel ran: {ex.function} must compute its result in "
                               "a Triton kernel", figures)
    msg = (f"{_gib(extra)} allocated beyond the inputs (outputs included; {how}); allowed {_gib(bound)}. "
           f"{ex.memory_what} alone would take {_gib(materialised)}. {where}.")
    if extra <= bound:
        return CriterionResult("memory", PASSED, msg, figures)
    hint = (f"\nThat is {extra / materialised:.2g} times {ex.memory_what}: it is being materialised. Reduce it "
            "tile by tile inside the kernel and keep only per-row statistics." if extra >= 0.5 * materialised
            else "")
    return CriterionResult("memory", FAILED, msg + hint, figures)


from autograder.criteria.performance import performance  # noqa: E402  (grade_perf uses this module's helpers)

GRADERS = {"correctness": correctness, "precision": precision, "performance": performance, "fusion": fusion,
           "memory": memory}
