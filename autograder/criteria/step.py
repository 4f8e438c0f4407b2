"""The four criteria for in-place multi-tensor exercises (StepExercise), such as an optimizer step.

The student's function gets lists of tensors, updates some in place and returns nothing. Each step is
checked against the float64 reference computed from the state the student's previous step left, so an
error is caught at the step that made it, with the list, the tensor and the element named.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.audit import Ceiling, audit_timing
from autograder.criteria.cases import MAX_LISTED, case_seed, count_gpu_kernels, dtype_name, student_error, sync
from autograder.criteria.fusion import INTERPRETED, ON_GPU
from autograder.criteria.performance import SubmissionWork, copy_peak, measure, one_at_a_time, shared_gpu
from autograder.criteria.performance import submission_failure
from autograder.guard.watch import Guarded, Watch
from autograder.measure import device as device_mod
from autograder.measure.meters import TritonLaunches
from autograder.measure.timing import grader_ms as bench_ms  # the grader's timer, not the demonstrations'
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import StepExercise


def _case(ex: StepExercise, sizes, dtype, seed: int, device=None):
    """(lists, hyper, generator) for one case; the generator goes on to make each step's fresh inputs."""
    gen = torch.Generator().manual_seed(seed)
    hyper = ex.make_hyper(gen)
    lists = ex.make_lists(sizes, dtype, device or runtime.device(), gen)
    return lists, hyper, gen


def _fresh_inputs(ex: StepExercise, lists: dict, dtype, gen, device=None) -> dict:
    """New values for the read-only lists (a new gradient each step), state lists kept."""
    sizes = tuple(t.numel() for t in lists[ex.arg_names[0]])
    new = ex.make_lists(sizes, dtype, device or runtime.device(), gen)
    return {n: (lists[n] if n in ex.state else new[n]) for n in ex.arg_names}


def _call(ex: StepExercise, fn, lists: dict, step: int, hyper: dict, watch=None, launches=None):
    args = [lists[n] for n in ex.arg_names] + [step] + list(hyper.values())
    launches = launches or TritonLaunches()
    watch = watch or Watch(launches, poison=True)
    with launches, watch, np.errstate(all="ignore"):
        ret = fn(*args)
    sync()
    return ret, watch


def _close(got: torch.Tensor, expected: torch.Tensor, atol_frac: float, rtol: float,
           prior: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise closeness; atol scales with the tensor's largest value (moments span many decades), before or
    after the step: an update whose terms nearly cancel (0.9 m + 0.1 g) keeps the rounding of those terms, which
    can be far larger than the small result (a float32 kernel once missed 1e-5 relative at a single element)."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    if prior is not None and prior.numel():
        scale = max(scale, float(prior.abs().max()))
    both_nan = torch.isnan(got) & torch.isnan(expected)
    return (got == expected) | ((got - expected).abs() <= atol_frac * scale + rtol * expected.abs()) | both_nan


def _mismatch(name: str, i: int, got: torch.Tensor, ref: torch.Tensor, ex: StepExercise,
              prior: torch.Tensor | None = None) -> str | None:
    expected = ref.to(got.dtype).double()
    bad = ~_close(got.double(), expected, *ex.tolerance, prior=prior)
    n = int(bad.sum())
    if not n:
        return None
    j = int(torch.nonzero(bad)[0][0])
    return (f"{name}[{i}] (size {got.numel()}): {n} element(s) differ from the reference; first at {j}: "
            f"got {got.flatten()[j].item():.6g}, expected {expected.flatten()[j].item():.6g}")


def _rel_err_lists(got: list, ref: list) -> float:
    num = sum(float((g.double() - r).square().sum()) for g, r in zip(got, ref) if g.numel())
    den = sum(float(r.square().sum()) for r in ref if r.numel())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def _diagnose(ex: StepExercise, after: dict, before: dict, step: int, hyper: dict) -> str | None:
    right = ex.reference(**before, step=step, **hyper)
    for bug, wrong_reference in ex.diagnoses:
        wrong = wrong_reference(**before, step=step, **hyper)
        pairs = [(_rel_err_lists(after[n], w), _rel_err_lists(after[n], r)) for n, w, r in zip(ex.state, wrong, right)]
        if all(ew <= er * 1.01 + 1e-15 for ew, er in pairs) and any(ew < 0.1 * er for ew, er in pairs):
            return f"likely cause: {bug}"
    return None


def run_step(ex: StepExercise, fn, guarded: dict, step: int, hyper: dict) -> list[str]:
    """One call on guard-padded lists; every problem found, compared with the reference from the state before."""
    lists = {n: [g.tensor for g in gs] for n, gs in guarded.items()}
    before = {n: [t.double().clone() for t in ts] for n, ts in lists.items()}
    raw = {n: [g.buffer.clone() for g in gs] for n, gs in guarded.items()}
    try:
        ret, watch = _call(ex, fn, lists, step, hyper)
    except Exception as exc:
        return [student_error(exc, ex.function)]
    problems = []
    for n, gs in guarded.items():
        for i, (g, old) in enumerate(zip(gs, raw[n])):
            damage = g.guard_damage()
            if damage:
                problems.append(f"out-of-bounds write next to {n}[{i}]: {damage}")
            elif n not in ex.state and not torch.equal(g.buffer.view(torch.uint8), old.view(torch.uint8)):
                problems.append(f"{n}[{i}] was modified: {ex.function} may only read {n}")
    for g in watch.allocations:
        damage = g.guard_damage()
        if damage:
            problems.append(f"out-of-bounds write: {damage} (a store without a correct mask?)")
    refs = ex.reference(**before, step=step, **hyper)
    unchanged = all(torch.equal(t.double(), b) for n in ex.state for t, b in zip(lists[n], before[n]))
    if unchanged and any(t.numel() for t in lists[ex.state[0]]):
        returned = "" if ret is None else f" (it returned {type(ret).__name__})"
        return problems + [f"{', '.join(ex.state)} were not updated in place{returned}: {ex.function} must write "
                           "its results into the tensors it is given"]
    if watch.launches.count == 0 and not unchanged:
        problems.append(f"no Triton kernel ran during the call, yet the state changed: {ex.function} updated it "
                        f"with torch ({', '.join(sorted(set(watch.torch_ops))) or 'outside a kernel'}); the update "
                        "must be done by your kernel")
    mismatches = [m for n, ref in zip(ex.state, refs) for i, (t, r) in enumerate(zip(lists[n], ref))
                  if (m := _mismatch(n, i, t, r, ex, before[n][i]))]
    if mismatches:
        problems += mismatches[:3] + ([f"... {len(mismatches) - 3} more tensor(s) differ"] if len(mismatches) > 3 else [])
        hint = _diagnose(ex, {n: lists[n] for n in ex.state}, before, step, hyper)
        if hint:
            problems.append(hint)
    return problems


def _guard(lists: dict) -> dict:
    return {n: [Guarded.copy_of(t, f"{n}[{i}]") for i, t in enumerate(ts)] for n, ts in lists.items()}


def step_correctness(ex: StepExercise, fn, cfg: GradingConfig) -> CriterionResult:
    trials = [(f"trial {i + 1}", int.from_bytes(os.urandom(6), "little")) for i in range(cfg.trials)]
    trials.append(("secret case", cfg.secret_seed))
    failures, n_cases = [], 0
    for label, seed in trials:
        cases = _secret_sizes(ex) if label == "secret case" else ex.size_cases
        for sizes in cases:
            for dtype in ex.dtypes:
                if len(failures) >= 3 * MAX_LISTED:
                    break
                n_cases += 1
                lists, hyper, gen = _case(ex, sizes, dtype, case_seed(seed, sizes, dtype))
                guarded = _guard(lists)
                for k, step in enumerate(_steps(ex, sizes, label)):
                    if k:  # a new gradient for every step, the state carried over
                        fresh = _fresh_inputs(ex, lists, dtype, gen)
                        guarded.update(_guard({n: fresh[n] for n in ex.arg_names if n not in ex.state}))
                    problems = run_step(ex, fn, guarded, step, hyper)
                    if problems:
                        where = (f"{len(sizes)} tensor(s) of sizes {_sizes(sizes)}, {dtype_name(dtype)}, step {step}, "
                                 f"{label}" + (f" (seed {seed})" if label != "secret case" else ""))
                        failures.append(f"{where}: " + "; ".join(problems))
                        break  # later steps would start from a wrong state
    figures = {"cases": n_cases, "failed": len(failures), "steps_per_case": len(ex.steps)}
    if failures:
        listed = "\n".join(failures[:MAX_LISTED])
        more = f"\n... and {len(failures) - MAX_LISTED} more failing case(s)" if len(failures) > MAX_LISTED else ""
        return CriterionResult("correctness", FAILED, f"{len(failures)} of {n_cases} cases failed:\n{listed}{more}",
                               figures)
    steps = ", ".join(map(str, ex.steps))
    if ex.precision_sizes:
        steps += f" (1 to {ex.precision_steps} in a row in one secret case)"
    return CriterionResult("correctness", PASSED,
                           f"all {n_cases} cases match the reference at steps {steps}, guards intact", figures)


def _secret_sizes(ex: StepExercise) -> tuple:
    """The secret case's lists of sizes: the exercise's, the extra ones no notebook shows, and precision's, whose
    first step precision replays on the same draw (so no list of sizes tells the criteria apart)."""
    own = (tuple(ex.precision_sizes),) if ex.precision_sizes else ()
    return tuple(dict.fromkeys((*ex.size_cases, *ex.extra_sizes, *own)))


def _steps(ex: StepExercise, sizes, label: str) -> tuple[int, ...]:
    """The steps a case runs: precision's whole trajectory (1, 2, ... precision_steps) at precision's sizes in the
    secret case, which precision then replays call for call; the exercise's steps elsewhere."""
    if label == "secret case" and ex.precision_sizes and tuple(sizes) == tuple(ex.precision_sizes):
        return tuple(range(1, ex.precision_steps + 1))
    return ex.steps


def _sizes(sizes) -> str:
    s = ", ".join(map(str, sizes[:6]))
    return f"[{s}{', ...' if len(sizes) > 6 else ''}]"


def _trajectory(ex: StepExercise, fn, lists: dict, hyper: dict, grads_for, n_steps: int, dtype=None) -> dict:
    """Run n_steps from lists: the student's fn in place, or (fn None) the reference, rounded to dtype after
    every step when dtype is given (what an exact kernel storing that dtype would hold), else in float64."""
    state = {n: [t.clone() if fn else t.double() for t in lists[n]] for n in ex.state}
    for step in range(1, n_steps + 1):
        current = {**grads_for(step, fn is not None), **state}
        if fn is not None:
            _call(ex, fn, current, step, hyper)
        else:
            new = ex.reference(**current, step=step, **hyper)
            state = {n: [t.to(dtype).double() if dtype else t for t in ts] for n, ts in zip(ex.state, new)}
    return state


def step_precision(ex: StepExercise, fn, cfg: GradingConfig) -> CriterionResult:
    figures, failures = {}, []
    for dtype in ex.dtypes:
        name = dtype_name(dtype)
        # The secret case's draw at these sizes (correctness grades it too), continued for more steps.
        lists, hyper, gen = _case(ex, ex.precision_sizes, dtype, case_seed(cfg.secret_seed, tuple(ex.precision_sizes),
                                                                           dtype))
        inputs = [n for n in ex.arg_names if n not in ex.state]
        # As correctness's secret case draws them: the case's own gradients first, then a fresh one every step.
        grads = [{n: lists[n] for n in inputs}] + [_fresh_inputs(ex, lists, dtype, gen)
                                                    for _ in range(ex.precision_steps - 1)]

        def grads_for(step, native):
            return {n: [t if native else t.double() for t in grads[step - 1][n]] for n in inputs}

        try:
            got = _trajectory(ex, fn, lists, hyper, grads_for, ex.precision_steps)
        except Exception as exc:
            return CriterionResult("precision", FAILED, student_error(exc, ex.function), figures)
        exact = _trajectory(ex, None, lists, hyper, grads_for, ex.precision_steps)
        ideal = _trajectory(ex, None, lists, hyper, grads_for, ex.precision_steps, dtype=dtype)
        start = {n: [t.double() for t in lists[n]] for n in ex.state}
        for n in ex.state:
            # The first state list (the parameters) is judged by how far it moved: its own rounding would
            # hide everything else.
            base = start[n] if n == ex.state[0] else [torch.zeros_like(t) for t in start[n]]
            moved = lambda ts: [t.double() - b for t, b in zip(ts, base)]  # noqa: E731
            err = _rel_err_lists(moved(got[n]), moved(exact[n]))
            floor = _rel_err_lists(moved(ideal[n]), moved(exact[n]))
            bound = max(ex.precision_factor * floor, 1e-7)
            figures[f"rel_err_{n}_{name}"] = err
            figures[f"bound_{n}_{name}"] = bound
            if not err <= bound:
                what = "the update of " if n == ex.state[0] else ""
                failures.append(f"{name}, {what}{n} after {ex.precision_steps} steps: relative error {err:.3g}, above "
                                f"the bound {bound:.3g} (an exact step that rounds the stored state costs {floor:.3g})")
    if failures:
        return CriterionResult("precision", FAILED, "\n".join(failures) + "\nDo the arithmetic in float32 after "
                               "loading, and round only what you store.", figures)
    worst = max(v / figures["bound_" + k[len("rel_err_"):]] for k, v in figures.items() if k.startswith("rel_err_"))
    return CriterionResult("precision", PASSED, f"{ex.precision_steps} steps against float64: within bounds (worst at "
                           f"{worst:.2f} of its bound)", figures)


@one_at_a_time  # the GPU's timing lock held, as by every timed criterion
def step_performance(ex: StepExercise, fn, cfg: GradingConfig) -> CriterionResult:
    prof = device_mod.profile()
    dtype = ex.dtypes[0]
    gen = torch.Generator().manual_seed(case_seed(cfg.secret_seed, "performance"))
    sizes = ex.perf_sizes(gen)
    lists, hyper, _ = _case(ex, sizes, dtype, case_seed(cfg.secret_seed, "performance", "lists"), device="cuda")
    step = 5
    before = {n: [t.clone() for t in lists[n]] for n in ex.state}
    try:
        _call(ex, fn, lists, step, hyper, watch=Watch(TritonLaunches(), poison=False))
    except Exception as exc:
        return CriterionResult("performance", FAILED, student_error(exc, ex.function))
    # A fast wrong answer earns nothing: check the timed step first (one tensor at a time, in float64).
    for i in range(len(sizes)):
        one = {n: [before[n][i] if n in ex.state else lists[n][i]] for n in ex.arg_names}
        refs = ex.reference(**one, step=step, **hyper)
        for n, ref in zip(ex.state, refs):
            if _rel_err_lists([lists[n][i]], ref) > 1e-3:
                return CriterionResult("performance", FAILED, f"wrong result at the benchmark size ({len(sizes)} "
                                       f"tensors, {sum(sizes):,} elements): {n}[{i}] differs; not timed")
    del before
    args = [lists[n] for n in ex.arg_names] + [step] + list(hyper.values())
    peak = copy_peak(prof)
    try:
        t, why = measure(lambda: fn(*args), lambda: ex.eager(*args), peak, in_graph=False)
    except SubmissionWork as exc:
        return submission_failure(exc)
    peak.call = None
    if t is None:
        return shared_gpu(cfg, why)
    copy_now, n_bytes = peak.rate(t.peak_ms), ex.bytes(*args)
    # The timing audit of every timed criterion (criteria.audit): every stream's work, the synchronized time, and
    # the copy bandwidth measured in turns with the step as a ceiling.
    audit = audit_timing(lambda: fn(*args), t.yours_ms, t.spread,
                         [Ceiling(n_bytes, copy_now, "GB/s", "bytes a step must move", "copy bandwidth")])
    if audit.failure:
        return CriterionResult("performance", FAILED, audit.failure, {"time_ms": audit.ms, "eager_ms": t.eager_ms})
    ms, eager_ms = audit.ms, t.eager_ms
    others = {label: bench_ms(run) for label, run in (ex.baselines(lists, step, hyper) if ex.baselines else {}).items()}
    gbps = n_bytes / (ms * 1e-3) / 1e9
    frac = gbps / copy_now
    speedup = eager_ms / ms
    min_frac = cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction)
    min_speedup = cfg.bar(ex, "min_speedup_over_eager", 1.0)
    figures = {"time_ms": ms, "eager_ms": eager_ms, "speedup_over_eager": speedup, "GBps": gbps,
               "copy_GBps": copy_now, "profile_copy_GBps": prof.copy_gbps, "fraction_of_peak": frac,
               "threshold": min_frac, "spread": t.spread}
    figures.update({f"{label}_ms": t for label, t in others.items()})
    compared = "".join(f"; {label} {t:.3f} ms ({t / ms:.2f}x yours)" for label, t in others.items())
    msg = (f"{gbps:.0f} GB/s effective (counting the {n_bytes / 2**20:.0f} MiB a step must move) = {frac:.2f} of this "
           f"GPU's copy bandwidth ({copy_now:.0f} GB/s, measured in turns with your step; {prof.copy_gbps:.0f} when "
           f"the profile was taken); needs {min_frac:.2f}. {ms:.3f} ms against "
           f"{eager_ms:.3f} ms for the per-tensor PyTorch loop ({speedup:.2f}x)"
           f"{'' if speedup > min_speedup else f', needs more than {min_speedup:.2f}x'}{compared}. "
           f"{len(sizes)} tensors, {sum(sizes):,} elements, {dtype_name(dtype)}, {prof.name}.{audit.note}")
    ok = frac >= min_frac and speedup > min_speedup
    return CriterionResult("performance", PASSED if ok else FAILED, msg, figures)


def _count(ex: StepExercise, fn, lists: dict, hyper: dict) -> tuple[int, int, list[str], list[str]]:
    """(GPU kernels, Triton launches, their names, torch compute ops) of one warm call on these lists."""
    _call(ex, fn, lists, 1, hyper, watch=Watch(TritonLaunches(), poison=False))  # warm-up: compile, build tables
    launches = TritonLaunches()
    watch = Watch(launches, poison=False)
    if runtime.has_gpu():
        n_kernels, names = count_gpu_kernels(lambda: _call(ex, fn, lists, 2, hyper, watch, launches))
    else:
        _call(ex, fn, lists, 2, hyper, watch, launches)
        n_kernels, names = launches.count, launches.names
    return n_kernels, launches.count, names, sorted(set(watch.torch_ops))


def _fusion_lists(ex: StepExercise, cfg: GradingConfig) -> list[tuple]:
    """(what the message calls them, their figure's name, sizes, dtype, seed, device) of every list fusion counts a
    call on: a short and a long list in every graded dtype and, on a GPU, the lists the performance criterion
    times, drawn as it draws them (the interpreter would take minutes over them)."""
    short, long = ex.fusion_sizes
    several = len(ex.dtypes) > 1
    out = [(f"{len(s)} tensors", f"{len(s)}_tensors" + (f"_{dtype_name(dt)}" if several else ""), s, dt,
            case_seed(cfg.secret_seed, "fusion", len(s), dt), None) for dt in ex.dtypes for s in (short, long)]
    if runtime.has_gpu():
        sizes = ex.perf_sizes(torch.Generator().manual_seed(case_seed(cfg.secret_seed, "performance")))
        out.append((f"the benchmark's {len(sizes)} tensors ({sum(sizes):,} elements)", "benchmark", sizes,
                    ex.dtypes[0], case_seed(cfg.secret_seed, "performance", "lists"), "cuda"))
    return out


def _on(found: list, counts: dict) -> str:
    """The lists a problem was found on, when it was not found on all of them."""
    if len(found) == len(counts):
        return ""
    return " (on " + "; ".join(f"{label}, {dtype_name(dtype)}" for label, dtype in found) + ")"


def step_fusion(ex: StepExercise, fn, cfg: GradingConfig) -> CriterionResult:
    counts, figures = {}, {}
    for label, key, sizes, dtype, seed, device in _fusion_lists(ex, cfg):
        try:
            lists, hyper, _ = _case(ex, sizes, dtype, seed, device)
            counts[label, dtype] = _count(ex, fn, lists, hyper)
        except Exception as exc:  # noqa: BLE001  whatever the student's code raises is reported
            return CriterionResult("fusion", FAILED, f"{label}, {dtype_name(dtype)}: {student_error(exc, ex.function)}")
        del lists  # the benchmark's lists go before anything else is made
        figures[f"launches_{key}"] = counts[label, dtype][0]
    figures["allowed"] = ex.max_launches
    how = ON_GPU if runtime.has_gpu() else INTERPRETED
    problems = []
    idle = [place for place, (_, t, _, _) in counts.items() if t == 0]
    if idle:
        problems.append(f"no Triton kernel ran{_on(idle, counts)}: {ex.function} must do the update in a Triton "
                        "kernel")
    computed = [place for place, c in counts.items() if c[3]]
    if computed:
        ops = sorted({op for *_, c_ops in counts.values() for op in c_ops})
        problems.append(f"computes with torch operations outside the Triton kernel ({', '.join(ops)})"
                        f"{_on(computed, counts)}; only allocation, views and uploading integer tables are allowed "
                        "there")
    short = len(ex.fusion_sizes[0])
    for dtype in ex.dtypes:
        mine = {label: c for (label, dt), c in counts.items() if dt == dtype}
        k_short = mine[f"{short} tensors"][0]
        grows = [(label, c[0]) for label, c in mine.items() if c[0] > k_short]
        for label, k in grows:
            what = "size of the lists" if label.startswith("the benchmark") else "number of tensors"
            problems.append(f"the launch count grows with the {what}: {short} tensors took {k_short} launch(es), "
                            f"{label.removesuffix(' tensors')} took {k} ({dtype_name(dtype)}). One launch can serve "
                            "every tensor: give the kernel a table of their addresses and let each program find its "
                            "tensor and block")
        label, (k, _, names, _) = max(mine.items(), key=lambda item: item[1][0])
        if not grows and k > ex.max_launches:
            problems.append(f"launched {k} kernels ({', '.join(names[:8])}) on {label}, {dtype_name(dtype)}; at most "
                            f"{ex.max_launches} allowed")
    if problems:
        return CriterionResult("fusion", FAILED, "\n".join(dict.fromkeys(problems)) + f" [{how}]", figures)
    done = ", ".join(f"{c[0]} for {label}" for (label, dtype), c in counts.items() if dtype == ex.dtypes[0])
    return CriterionResult("fusion", PASSED, f"launches a call: {done} (in {', '.join(map(dtype_name, ex.dtypes))}), "
                           f"at most {ex.max_launches} allowed, no torch compute [{how}]", figures)


GRADERS = {"correctness": step_correctness, "precision": step_precision, "performance": step_performance,
           "fusion": step_fusion}
