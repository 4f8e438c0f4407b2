"""The criteria of a function graded inside torch.compile (CompiledExercise): correctness, graph, kernels and
performance.

The grader compiles the exercise's harness around the student's function: Inductor on a
GPU; on the CPU Dynamo alone (backend "eager"), because an interpreted Triton kernel cannot run inside the C++
code Inductor writes for the CPU. So correctness and the graph are graded everywhere, the GPU kernels only
where there are some. Dynamo's own warnings (a graph break, a recompilation) go to logging, which a notebook
shows as stderr; they are kept off it here and the criterion says what they said.
"""

from __future__ import annotations

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.cases import case_seed, count_gpu_kernels, dtype_name, student_error
from autograder.criteria.outputs import compare
from autograder.criteria.performance import performance as kernel_performance
from autograder.guard.watch import to_device_keeping_layout
from autograder.measure.inductor import (
    quiet as compiler_quiet,  # Dynamo's and Inductor's logs and warnings kept off stderr
)
from autograder.measure.meters import TritonLaunches
from autograder.report import FAILED, PASSED, SKIPPED, CriterionResult
from autograder.specs.exercise import CompiledExercise


def backend() -> str:
    return "inductor" if runtime.has_gpu() else "eager"


def compiled(ex: CompiledExercise, fn):
    """A fresh torch.compile of the harness around fn (Dynamo's caches emptied: each case compiles alone, and
    no earlier compilation of the student's, or its recompilation limit, decides this one). Graph breaks are
    allowed here: the graph criterion judges them, the others what the compiled code computes and launches."""
    torch._dynamo.reset()
    return torch.compile(ex.harness(fn), backend=backend(), dynamic=False)


def _inputs(ex: CompiledExercise, shape, dtype, seed: int, device=None) -> dict:
    gen = torch.Generator().manual_seed(seed)
    cpu = ex.make_inputs(shape, dtype, "cpu", gen)
    device = device or runtime.device()
    return {k: (to_device_keeping_layout(v, device) if isinstance(v, torch.Tensor) else v) for k, v in cpu.items()}


def _leaves(ex: CompiledExercise, inputs: dict, double: bool = False) -> dict:
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().double() if double else v.detach().clone()
            v.requires_grad_(k in ex.grads)
        out[k] = v
    return out


def _close(got, want: torch.Tensor, atol: float, rtol: float, what: str) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"{what}: got {type(got).__name__}, expected a tensor"
    if got.shape != want.shape:
        return f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    # float64 as the "output dtype": the reference is compared as it is, not rounded first.
    problem = compare(got.detach().cpu(), want.detach().cpu(), torch.float64, atol, rtol)
    return f"{what}: {problem}" if problem else None


def _case(ex: CompiledExercise, fn, shape, dtype, seed: int) -> list[str]:
    inputs = _inputs(ex, shape, dtype, seed)
    args = _leaves(ex, inputs)
    out = compiled(ex, fn)(*args.values())
    where = f"shape {shape}, {dtype_name(dtype)}"
    ref_args = _leaves(ex, inputs, double=True)
    ref = ex.reference(*ref_args.values())
    if isinstance(out, torch.Tensor) and out.dtype != dtype:
        return [f"{where}: the result is {dtype_name(out.dtype)}, expected {dtype_name(dtype)} (the input's dtype)"]
    if isinstance(out, torch.Tensor) and out.device.type != torch.device(runtime.device()).type:
        return [f"{where}: the result is on {out.device}, expected on {runtime.device()} with the inputs"]
    atol, rtol = ex.tolerance[dtype]
    problem = (ex.compare(out, ref, inputs) if ex.compare and isinstance(out, torch.Tensor)
               else _close(out, ref, atol, rtol, "output"))
    if problem:
        return [f"{where}: {problem}"]
    if not ex.grads:
        return []
    gen = torch.Generator().manual_seed(seed + 1)
    dy = torch.randn(ref.shape, generator=gen, dtype=torch.float64).to(ref.device)
    if out.grad_fn is None:
        return [f"{where}: the result does not require grad, so no gradient flows back to "
                f"{', '.join(ex.grads)} (is a backward registered with register_autograd?)"]
    out.backward(dy.to(out.dtype).to(out.device))
    ref.backward(dy)
    problems = []
    for name in ex.grads:
        got, want = args[name].grad, ref_args[name].grad
        if got is None:
            problems.append(f"{where}: no gradient reached {name}")
            continue
        # A gradient sums over rows: its tolerance grows with how many (the weight's, over every row).
        problem = _close(got, want, atol * max(1.0, want.abs().max().item()), rtol, f"gradient of {name}")
        if problem:
            problems.append(f"{where}: {problem}")
    return problems


def compiled_correctness(ex: CompiledExercise, fn, cfg: GradingConfig) -> CriterionResult:
    dtypes = [d for d in ex.dtypes if runtime.has_gpu() or d != torch.bfloat16]
    cases = [(s, d) for d in dtypes for s in (ex.shapes if d == torch.float32 else ex.shapes[-1:])]
    failures = []
    with compiler_quiet():
        for shape, dtype in cases:
            try:
                failures += _case(ex, fn, shape, dtype, case_seed(cfg.secret_seed, "compiled", str(shape), str(dtype)))
            except Exception as exc:  # noqa: BLE001  the student's function, or its compilation, raised
                failures.append(f"shape {shape}, {dtype_name(dtype)}: {_compile_error(exc, ex.function)}")
    how = ("compiled by Inductor" if runtime.has_gpu() else
           "captured by Dynamo with backend 'eager' (no GPU: Inductor's kernels are not built here)")
    figures = {"cases": len(cases), "failed": len(failures)}
    if failures:
        return CriterionResult("correctness", FAILED, "\n".join(failures[:5]) + f"\n[torch.compile, {how}]",
                               figures)
    grads = f" and the gradients of {', '.join(ex.grads)}" if ex.grads else ""
    return CriterionResult("correctness", PASSED, f"all {len(cases)} cases match the float64 reference, output{grads} "
                           f"[torch.compile, {how}]", figures)


def _compile_error(exc: BaseException, function: str) -> str:
    text = str(exc)
    if "Loop-carried variable" in text and "fp64" in text:
        return ("Inductor launches your kernel with its Python float arguments (eps) as float64, where Triton's own "
                "launcher passes float32: an fp32 value mixed with one turns it fp64, and a loop's accumulator "
                "changes type. Cast the argument in the kernel: tl.cast(eps, tl.float32)")
    if any(k in text for k in ("Cannot access data pointer", "data pointer on an invalid python storage",
                               "custom_ops_landing_page", "making fake tensor call")):
        return (f"torch.compile ran {function}'s kernel launch on fake tensors (tensors with shapes and no data): "
                "launch it through torch.library.wrap_triton inside a torch.library.triton_op, so that tracing "
                "records the launch instead of running it")
    if "graph break" in text.lower() or type(exc).__name__ in ("Unsupported", "UserError"):
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return f"torch.compile could not trace it: {first[:300]}"
    return student_error(exc, function)


def graph(ex: CompiledExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """Dynamo captures the harness around fn in one graph, with no break."""
    inputs = _inputs(ex, ex.shapes[0], torch.float32, case_seed(cfg.secret_seed, "graph"))
    try:
        with compiler_quiet():
            torch._dynamo.reset()
            explained = torch._dynamo.explain(ex.harness(fn))(*_leaves(ex, inputs).values())
    except Exception as exc:  # noqa: BLE001
        return CriterionResult("graph", FAILED, _compile_error(exc, ex.function))
    reasons = [_reason(b) for b in explained.break_reasons]
    figures = {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count}
    if explained.graph_break_count == 0 and explained.graph_count == 1:
        return CriterionResult("graph", PASSED, "Dynamo captured it in one graph, with no break", figures)
    listed = "\n".join(f"  - {r}" for r in dict.fromkeys(reasons)) or "  (no reason given)"
    return CriterionResult("graph", FAILED, f"{explained.graph_count} graphs, {explained.graph_break_count} graph "
                           f"break(s); Dynamo says:\n{listed}\nEach break leaves the code after it to a graph of its "
                           "own: no fusion across it, and a return to Python in between.", figures)


def _reason(b) -> str:
    text = str(getattr(b, "reason", b)).strip().splitlines()
    where = ""
    stack = getattr(b, "user_stack", None) or []
    if stack:
        frame = stack[-1]
        where = f" (at line {frame.lineno}: {(frame.line or '').strip()[:80]})"
    return (text[0][:200] if text else "graph break") + where


def kernels(ex: CompiledExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """The GPU kernels one call of the compiled harness (with its backward, where gradients are graded) launches:
    the student's own Triton kernels among them where required, and at most max_kernels others."""
    if not runtime.has_gpu():
        why = "not counted (no GPU): the kernels Inductor launches exist only on a GPU"
        if cfg.require_performance:  # as performance: a class graded without a GPU earns none of these points
            return CriterionResult("kernels", FAILED, why + ", and this course's grading configuration requires "
                                   "the GPU criteria: grade on a machine with a CUDA GPU")
        return CriterionResult("kernels", SKIPPED, why)
    dtype = torch.bfloat16
    inputs = _inputs(ex, ex.kernels_shape, dtype, case_seed(cfg.secret_seed, "kernels"))
    own = set()
    try:
        with compiler_quiet():
            if ex.own_kernels:  # the student's kernels, by name, from an uncompiled call
                launches = TritonLaunches()
                with launches:
                    _step(ex, ex.harness(fn), _leaves(ex, inputs))
                own = set(launches.names)
            step_fn = compiled(ex, fn)
            for _ in range(2):  # compilation and autotuning stay out of the count
                _step(ex, step_fn, _leaves(ex, inputs))
            torch.cuda.synchronize()
            args = _leaves(ex, inputs)
            seed = torch.ones_like(step_fn(*args.values())) if ex.grads else None  # made before the count
            n, names = count_gpu_kernels(lambda: _step(ex, step_fn, args, seed))
    except Exception as exc:  # noqa: BLE001
        return CriterionResult("kernels", FAILED, _compile_error(exc, ex.function))
    theirs = [k for k in names if k in own]
    others = [k for k in names if k not in own]
    figures = {"kernels": n, "own_kernels": len(theirs), "other_kernels": len(others), "allowed": ex.max_kernels}
    what = "forward and backward" if ex.grads else "one call"
    problems = []
    if ex.own_kernels and not own:
        problems.append(f"{ex.function} launched no Triton kernel of its own (called outside torch.compile)")
    elif ex.own_kernels and not theirs:
        problems.append(f"none of your Triton kernels ({', '.join(sorted(own))}) ran inside the compiled code: "
                        "torch.compile replaced them")
    if len(others) > ex.max_kernels:
        problems.append(f"{len(others)} kernels besides yours ({', '.join(_short(k) for k in others[:8])}); at most "
                        f"{ex.max_kernels} ({ex.kernels_what})")
    listed = ", ".join(_short(k) for k in names[:12])
    where = f"shape {ex.kernels_shape}, bf16, {what}, counted with torch.profiler"
    if problems:
        return CriterionResult("kernels", FAILED, "\n".join(problems) + f"\nLaunched: {listed}. [{where}]", figures)
    return CriterionResult("kernels", PASSED, f"{n} kernels: {listed}; at most {ex.max_kernels} besides yours "
                           f"[{where}]", figures)


def _step(ex: CompiledExercise, f, args: dict, seed=None):
    """One call, and its backward where gradients are graded: torch.autograd.grad, not .backward(), so that no
    gradient is accumulated (copied) into the leaves, which the compiled code would be blamed for."""
    out = f(*args.values())
    if ex.grads:
        torch.autograd.grad(out, [args[n] for n in ex.grads], torch.ones_like(out) if seed is None else seed)
    return out


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."


COMPILE_ATTEMPTS = 3


def compiled_performance(ex: CompiledExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """The compiled function timed as a kernel exercise would be (ex.timed: its shape, bytes and thresholds).

    Inductor benchmarks several configurations of each reduction kernel at its first call and keeps the fastest;
    a disturbed benchmark can keep a slow one (once in five gradings of the reference solution on an H100: 0.43 ms
    instead of 0.15). That choice is the compiler's, not the student's: a failing measurement is taken again
    from a fresh compilation, up to COMPILE_ATTEMPTS times, and the best one graded."""

    if not runtime.has_gpu():
        return kernel_performance(ex.timed, fn, cfg)  # not measured, in the kernel exercises' words
    best = None
    with compiler_quiet():
        try:
            for attempt in range(1, COMPILE_ATTEMPTS + 1):
                torch._dynamo.reset()
                # Inductor launches its kernels itself, not through the entry points the no-op check turns off.
                result = kernel_performance(ex.timed, torch.compile(fn, dynamic=False), cfg, own_kernels=False)
                frac = result.figures.get("fraction_of_peak")
                if best is None or (frac is not None and frac > best.figures.get("fraction_of_peak", -1.0)):
                    best = result
                if result.status != FAILED or frac is None:  # passed, not measured, or failed before timing
                    break
        finally:
            torch._dynamo.reset()
    if attempt > 1:
        best.message += (f"\n(Compiled and timed {attempt} times, the best graded: Inductor picks its kernels' "
                         "configurations by timing them at their first call.)")
        best.figures["compilations"] = attempt
    return best


GRADERS = {"correctness": compiled_correctness, "graph": graph, "kernels": kernels,
           "performance": compiled_performance}
