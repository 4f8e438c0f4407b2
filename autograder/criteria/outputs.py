"""Calling a student's function on one case and judging what it returned: shape, dtype, aliasing, closeness to
the float64 reference, and the named diagnoses of typical bugs."""

from __future__ import annotations

import math
import threading

import numpy as np
import torch

from autograder import runtime
from autograder.criteria.cases import dtype_name, left_running, student_error, sync
from autograder import memcheck
from autograder.guard.watch import Guarded, Watch, poison_value
from autograder.link.session import Answer
from autograder.measure.meters import TritonLaunches, storage_of
from autograder.specs.exercise import KernelExercise


def nan_as_inf(err: float) -> float:
    """An error that is NaN (a NaN output where the result is finite) counts as infinitely far."""
    return math.inf if math.isnan(err) else err


def compare(out: torch.Tensor, ref: torch.Tensor, dtype, atol: float, rtol: float) -> str | None:
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
        if runtime.interpreted():
            extra += (" (here the masked-off lanes of a load without other= hold NaN, as they hold garbage on a GPU: "
                      "a reduction over them needs other=0.0, or the reduction's neutral value)")
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
        sync()
    except Exception as exc:  # the student's code failed: report it, keep grading
        return None, watch, [student_error(exc, ex.function)]
    left = left_running(ex, threads)
    problems = [left] if left else []
    aliased = aliases_an_input(ex, out, {k: g.tensor for k, g in guarded.items()})
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


def out_of_bounds_first(ex: KernelExercise, fn, inputs: dict) -> str | None:
    """Where the interpreter's loads and stores are not bounds-checked (memcheck could not install), a call
    on plain tensors that writes out of bounds corrupts this process: before such calls, one call on guard-padded
    copies, whose out-of-bounds writes are returned (None when there are none, or when the check is in place)."""
    if not runtime.interpreted() or memcheck.installed():
        return None
    _, _, problems = guarded_call(ex, fn, inputs)
    return "; ".join(p for p in problems if "out-of-bounds" in p) or None


def aliases_an_input(ex: KernelExercise, value, inputs: dict) -> str | None:
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
        return f"{ex.function} returned None, expected {expected_kind(ex)} (a missing `return`?)"
    outs = as_outputs(value, len(refs))
    if outs is None:
        got = type(value).__name__
        if isinstance(value, (tuple, list)):
            got = f"a {got} of {len(value)}: {', '.join(type(v).__name__ for v in value)}"
        return f"{ex.function} returned {got}, expected {expected_kind(ex)}"
    device = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), None)
    for i, (o, r) in enumerate(zip(outs, refs)):
        label = f"{ex.output_names[i]}: " if len(refs) > 1 else ""
        if device is not None and o.device.type != device.type:
            return f"{label}output is on {o.device}, the inputs on {device}: return it on the inputs' device"
        if tuple(o.shape) != tuple(r.shape):
            return f"{label}output has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        dtype = ex.out_dtype(input_dtype, i)
        if o.dtype != dtype:
            return f"{label}output dtype is {dtype_name(o.dtype)}, expected {dtype_name(dtype)}"
        if o.requires_grad:
            return (f"{label}output requires grad: the grader takes a plain tensor (compute it under "
                    "torch.no_grad(), or wrap the kernel in a torch.autograd.Function)")
    return aliases_an_input(ex, outs, inputs)


def as_outputs(value, n: int):
    """The outputs as a tuple, or None when fn returned the wrong kind or number of things."""
    if n == 1:
        return (value,) if isinstance(value, torch.Tensor) else None
    if isinstance(value, (tuple, list)) and len(value) == n and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    return None


def expected_kind(ex: KernelExercise) -> str:
    n = len(ex.output_names)
    return "a torch.Tensor" if n == 1 else f"a tuple of {n} tensors ({', '.join(ex.output_names)})"


def tolerance(ex: KernelExercise, inputs: dict, dtype) -> tuple[float, float]:
    """(atol, rtol) of the elementwise comparison for these inputs."""
    atol, rtol = ex.tolerance[dtype]
    if ex.atol_from_inputs is not None:
        atol = max(atol, ex.atol_from_inputs(inputs, dtype))
    return atol, rtol


def form_problem(ex: KernelExercise, index: int, out: torch.Tensor, ref: torch.Tensor, input_dtype) -> str | None:
    """A wrong shape or dtype of output number index, in words, or None."""
    label = f"{ex.output_names[index]}: " if len(ex.output_names) > 1 else ""
    dtype = ex.out_dtype(input_dtype, index)
    if tuple(out.shape) != tuple(ref.shape):
        return f"{label}output has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != dtype:
        return f"{label}output dtype is {dtype_name(out.dtype)}, expected {dtype_name(dtype)}"
    return None


def check_output(ex, index, out, ref, input_dtype, fresh: bool, tol) -> str | None:
    """What is wrong with one output (its shape, dtype, unwritten elements, values), or None. fresh: the output was
    allocated during the call, so the grader filled it with poison first (an element still holding it was never
    written)."""
    form = form_problem(ex, index, out, ref, input_dtype)
    if form:
        return form
    label = f"{ex.output_names[index]}: " if len(ex.output_names) > 1 else ""
    dtype = ex.out_dtype(input_dtype, index)
    if fresh:
        pv = poison_value(dtype)
        unwritten = (out == pv) & (ref.to(dtype) != pv)
        n = int(unwritten.sum())
        if n:
            first = [int(i) for i in torch.nonzero(unwritten)[0]]
            return f"{label}{n} of {out.numel()} output elements were never written (first at index {first})"
    mismatch = compare(out, ref, dtype, *tol)
    return label + mismatch if mismatch else None


def diagnose_outputs(ex: KernelExercise, outs, inputs: dict) -> str | None:
    """Name the bug when the output matches a known wrong formula better than the right one (the closest of
    them: on a tiny row two wrong formulas can both come closer than the right one)."""
    refs = as_tuple(ex.reference(**inputs))
    best = None
    for bug, wrong_reference in ex.diagnoses:
        wrong = wrong_reference(**inputs)
        wrong = wrong if isinstance(wrong, tuple) else (wrong,)
        # Both distances on the right result's scale: against its own norm, a wrong formula of large values
        # (log-probabilities) looks close to any output, and one of values near 0 far from every output. A NaN
        # where the result is finite is infinitely far from it.
        pairs = [(nan_as_inf(relative_error(o, w, scale=r)), nan_as_inf(relative_error(o, r))) for o, w, r in zip(outs, wrong, refs)]
        # Every output at least as close to the wrong formula, and one of them far closer.
        if all(ew <= er * 1.01 + 1e-12 for ew, er in pairs) and any(ew < 0.1 * er for ew, er in pairs):
            closeness = sum(ew / er if 0 < er < math.inf else float(ew >= er) for ew, er in pairs)
            if best is None or closeness < best[0]:
                best = (closeness, bug)
    return f"likely cause: {best[1]}" if best else None


def as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def call_case(ex: KernelExercise, fn, inputs: dict, guarded: dict | None = None) -> Answer:
    """The student's side of a case: one guarded call, and what can be told without the reference (the call's
    errors, out-of-bounds writes, modified inputs, the kind, count, device and autograd state of the outputs,
    and whether a Triton kernel computed them)."""
    out, watch, problems = guarded_call(ex, fn, inputs, guarded)
    if out is None and problems:  # it raised
        return Answer(None, [], problems)
    n = len(ex.output_names)
    outs = as_outputs(out, n)
    if outs is None:
        return Answer(None, [], problems + [output_problem(ex, out, (None,) * n, inputs, None)])
    device = torch.device(runtime.device()).type
    for i, o in enumerate(outs):
        label = f"{ex.output_names[i]}: " if n > 1 else ""
        if o.device.type != device:
            return Answer(None, [], problems + [f"{label}output is on {o.device}, expected {runtime.device()}"])
        if o.requires_grad:
            problems.append(f"{label}output requires grad: the grader takes a plain tensor (compute it under "
                            "torch.no_grad(), or wrap the kernel in a torch.autograd.Function)")
    return Answer(outs, [watch.owner(o) is not None for o in outs], problems, not_by_a_kernel(ex, watch, outs))


def judge_answer(ex: KernelExercise, inputs: dict, dtype, answer: Answer) -> list[str]:
    """Every problem of one case: those found where the call ran, and the outputs against the float64 reference
    within the exercise's tolerance (with the named diagnosis of a known wrong formula)."""
    problems = list(answer.problems)
    if answer.outs is not None:
        refs = as_tuple(ex.reference(**inputs))
        mismatched = False
        for i, (o, r) in enumerate(zip(answer.outs, refs)):
            msg = check_output(ex, i, o, r, dtype, answer.fresh[i], tolerance(ex, inputs, dtype))
            if msg:
                problems.append(msg)
                mismatched = mismatched or "differ from the reference" in msg
        if mismatched and ex.diagnoses:
            hint = diagnose_outputs(ex, answer.outs, inputs)
            if hint:
                problems.append(hint)
    return problems + ([answer.late] if answer.late else [])


def run_watched(ex: KernelExercise, fn, inputs: dict, dtype, guarded: dict | None = None):
    """(outputs or None, problems) of one guarded call, checked against the reference."""
    answer = call_case(ex, fn, inputs, guarded)
    return answer.outs, judge_answer(ex, inputs, dtype, answer)


def not_by_a_kernel(ex: KernelExercise, watch: Watch, outs) -> str | None:
    """Why the outputs were not computed by a Triton kernel during the call, or None when they were."""
    if ex.plain_torch:  # a plain-torch exercise: torch is meant to compute them
        return None
    by_torch = sorted({op for op in (watch.computed_by_torch(o) for o in outs) if op})
    if by_torch:
        return (f"the result was computed by torch ({', '.join(by_torch)}), not by a Triton kernel: the output must "
                "be written by your kernel")
    if watch.launches.count == 0:
        return (f"no Triton kernel ran during the call, yet {ex.function} returned a result: a result kept from an "
                "earlier call (a cache?) or made without a kernel; compute it in a Triton kernel")
    return None


def shares_storage(a, b) -> bool:
    return any(storage_of(x) == storage_of(y) for x in a for y in b)


def relative_error(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||out - ref|| / ||ref|| over ref's finite elements (divided by ||scale|| instead, when given)."""
    ref = ref.double()  # integer results (indices) too
    finite = torch.isfinite(ref)
    got = out.double()
    if not bool(((got == ref) | (torch.isnan(got) & torch.isnan(ref)))[~finite].all()):
        return math.inf  # a NaN or infinity of the reference not reproduced
    diff = (out.double() - ref)[finite]
    norm = ref[finite].norm() if scale is None else scale.double()[torch.isfinite(scale)].norm()
    return float(diff.norm() / norm.clamp_min(1e-300))
