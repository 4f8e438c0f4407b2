"""The criteria of a training exercise (TrainingExercise): a model's loss whose backward runs the student's kernels.

correctness  the loss and every parameter's gradient of one step against float64, each within a multiple of
             what eager PyTorch misses by in the same dtype: the failing parameter is named
training     a run of AdamW steps from the same initial model and batches as eager PyTorch's: the final losses
             within a tolerance of eager float32's, set by how far eager itself drifts in the graded dtype
performance  tokens/s of a forward and backward against torch.compile of the eager model, timed in turns
memory       the allocator's peak during a forward and backward against eager PyTorch's, same case
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from autograder import runtime
from autograder.config import GradingConfig
from autograder.criteria.at_size import for_this_card
from autograder.criteria.audit import LOOSE, ROTATION, Ceiling, audit_timing
from autograder.criteria.cases import case_seed, dtype_name, student_error, sync
from autograder.criteria.performance import KEPT, SubmissionWork, copy_peak, measure, one_at_a_time, shared_gpu
from autograder.criteria.performance import submission_failure
from autograder.guard import integrity
from autograder.measure.meters import TritonLaunches
from autograder.measure import device as device_mod
from autograder.measure.timing import SampledCalls, extra_bytes, grader_ms
from autograder.report import FAILED, PASSED, CriterionResult
from autograder.specs.exercise import UNIT_ROUNDOFF, TrainingCase, TrainingExercise
from autograder.specs.text_corpus import batches


def _dtypes() -> list[torch.dtype]:
    """float32 in the interpreter (its bfloat16 arithmetic is wrong); bfloat16, the training dtype, on a GPU."""
    return [torch.float32, torch.bfloat16] if runtime.has_gpu() else [torch.float32]


def _batch(ex: TrainingExercise, case: TrainingCase, seed: int, device, ids: torch.Tensor | None = None):
    """A batch from the text's ids: ex.tokens(vocab), made once a run (46 ms a call on a CPU, 200 steps a run)."""
    tokens, targets = next(batches(ex.tokens(case.config.vocab) if ids is None else ids, case.batch, case.seq_len, 1,
                                   seed))
    return tokens.to(device), targets.to(device)


def incoming_gradient(seed: int) -> float:
    """The loss's gradient correctness hands the backward: as under loss scaling or gradient accumulation, not 1,
    so that a backward which forgets to multiply by it is caught. Drawn from the case's seed, 0.35 to 0.7 or 1.4
    to 2.8."""
    gen = torch.Generator().manual_seed(seed)
    u, below = torch.rand(2, generator=gen).tolist()
    return 2.0 ** ((0.5 + u) * (-1 if below < 0.5 else 1))


def _loss_and_grads(ex: TrainingExercise, fn, params: dict, tokens, targets, config, launches=None,
                    dloss: float = 1.0):
    """(loss, {name: grad}) from fn, the gradients for the loss's gradient dloss, or raises ValueError naming what
    is malformed."""
    launches = launches if launches is not None else TritonLaunches()
    with launches, torch.enable_grad():
        loss = fn(params, tokens, targets, config)
        if not isinstance(loss, torch.Tensor):
            raise ValueError(f"{ex.function} returned {type(loss).__name__}, not a tensor: return the mean loss as a "
                             "0-dimensional tensor")
        if loss.dim() != 0:
            raise ValueError(f"{ex.function} returned a tensor of shape {tuple(loss.shape)}: return the mean loss "
                             "over all tokens, a 0-dimensional tensor")
        if loss.device != tokens.device:
            raise ValueError(f"the loss is on {loss.device}, the model on {tokens.device}")
        if not loss.requires_grad:
            raise ValueError("the loss does not require grad: it is not connected to the parameters (detached, or "
                             "computed under torch.no_grad), so there is no backward to grade")
        grads = torch.autograd.grad(loss, list(params.values()), torch.full_like(loss, dloss), allow_unused=True)
    sync()
    missing = [n for n, g in zip(params, grads) if g is None]
    if missing:
        raise ValueError(f"no gradient reaches {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}: "
                         "each parameter must take part in the loss through a differentiable path")
    return loss.detach(), dict(zip(params, grads))


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    den = float(ref.norm())
    num = float((got.double() - ref).norm())
    return num / den if den > 0 else num


def _grade_case(ex: TrainingExercise, fn, case: TrainingCase, dtype, seed: int) -> tuple[list[str], float]:
    """(problems, the worst ratio of the student's error to the bound) for one case."""
    device = runtime.device()
    params = ex.init(case.config, dtype, device, seed)
    tokens, targets = _batch(ex, case, seed, device)
    launches = TritonLaunches()
    dloss = incoming_gradient(seed)
    try:
        loss, grads = _loss_and_grads(ex, fn, params, tokens, targets, case.config, launches, dloss)
    except ValueError as exc:
        return [str(exc)], math.inf
    except Exception as exc:  # noqa: BLE001  the student's code: its error is the feedback
        return [student_error(exc, ex.function)], math.inf
    where = f"({case}, {dtype_name(dtype)}, the loss's gradient {dloss:.3f})"
    if launches.count == 0:
        return [f"no Triton kernel ran {where}: the model must run on your kernels"], math.inf
    ref_loss, ref_grads = ex.reference(params, tokens, targets, case.config)
    ref_grads = {n: g * dloss for n, g in ref_grads.items()}
    eager_loss, eager_grads = _loss_and_grads(ex, ex.eager, params, tokens, targets, case.config, dloss=dloss)
    floor = ex.precision_floor.get(dtype, 8 * UNIT_ROUNDOFF[dtype])
    problems, worst = [], 0.0
    checks = [("the loss", loss, eager_loss, ref_loss)] + [
        (f"the gradient of {n}", grads[n], eager_grads[n], ref_grads[n]) for n in params]
    for what, got, eager, ref in checks:
        if got.dtype != (torch.float32 if what == "the loss" else params[what.split()[-1]].dtype):
            problems.append(f"{what} has dtype {got.dtype}")
            continue
        if not torch.isfinite(got).all():
            problems.append(f"{what} holds NaN or Inf {where}")
            continue
        err, eager_err = _rel(got, ref), _rel(eager, ref)
        bound = max(ex.precision_factor * eager_err, floor)
        worst = max(worst, err / bound)
        if err > bound:
            problems.append(f"{what}: relative error {err:.2e} against float64, eager PyTorch's {eager_err:.2e}; "
                            f"allowed {bound:.2e} {where}")
    unscaled = [n for n in params if _rel(grads[n], ref_grads[n] / dloss) < 0.1 * _rel(grads[n], ref_grads[n])]
    if unscaled and problems:
        problems.insert(0, f"the gradients of {', '.join(unscaled[:3])}{' ...' if len(unscaled) > 3 else ''} are "
                        f"those of a loss whose gradient is 1, but the backward was handed {dloss:.3f}: a backward "
                        "must multiply what it returns by the gradient it receives (dloss, as under loss scaling)")
    elif len(problems) > 1 and problems[0].startswith("the loss"):
        problems.insert(0, "the loss itself is wrong: look at the forward pass first")
    elif len(problems) > 1:
        problems.insert(0, "the loss is right but gradients are not: a backward is wrong (the first parameter "
                        "named is the deepest one affected)")
    return problems, worst


def training_correctness(ex: TrainingExercise, fn, cfg: GradingConfig) -> CriterionResult:
    cases = ex.cases_gpu if runtime.has_gpu() else ex.cases_cpu
    problems, worst = [], 0.0
    for i, case in enumerate(cases):
        for dtype in _dtypes():
            found, w = _grade_case(ex, fn, case, dtype, case_seed(cfg.secret_seed, "training-grads", i))
            worst = max(worst, w)
            if found:
                problems += found[:6]
                break
        if problems:
            break
    figures = {"worst_error_over_bound": worst}
    if problems:
        return CriterionResult("correctness", FAILED, "\n".join(problems), figures)
    return CriterionResult("correctness", PASSED, (
        f"loss and all gradients within {ex.precision_factor:g}x eager PyTorch's error against float64 in "
        f"{', '.join(dtype_name(d) for d in _dtypes())}, for a loss's gradient other than 1 ({len(cases)} "
        f"model(s); the closest came to "
        f"{worst:.2f} of its bound)"), figures)


def train(ex: TrainingExercise, loss_fn, case: TrainingCase, dtype, seed: int, progress=None) -> list[float]:
    """The losses of `case.steps` AdamW steps of loss_fn from the exercise's initial model (the same for a
    seed), on the same batches whatever loss_fn is."""
    device = runtime.device()
    params = ex.init(case.config, dtype, device, seed)
    opt = torch.optim.AdamW(params.values(), lr=case.lr, weight_decay=0.0)
    losses, ids = [], ex.tokens(case.config.vocab)
    for step in range(case.steps):
        tokens, targets = _batch(ex, case, (seed * 7919 + step) % 2**62, device, ids)
        with torch.enable_grad():
            loss = loss_fn(params, tokens, targets, case.config)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if progress is not None:
            progress(step)
    return [float(v) for v in losses]


# Eager PyTorch's losses for a (exercise, case, dtype, seed, device): the same in every check() of a process,
# and two thirds of the criterion's time, so the try cell's run serves the graded cell. Sealed after each
# entry the grader adds: an entry put there by the notebook is tampering (integrity names and removes it).
_EAGER_RUNS: dict = {}


def _eager_losses(ex: TrainingExercise, case: TrainingCase, dtype, seed: int) -> list[float]:
    key = (ex.id, repr(case), str(dtype), seed, str(runtime.device()))
    if key not in _EAGER_RUNS:
        with _yardstick_matmuls(dtype):
            _EAGER_RUNS[key] = tuple(train(ex, ex.eager, case, dtype, seed))
        integrity.seal(_EAGER_RUNS)
    return list(_EAGER_RUNS[key])


@contextlib.contextmanager
def _yardstick_matmuls(dtype):
    """Eager float32's run on a GPU with TF32 matmuls (float32 sums of 10-bit mantissas' products, 8x finer than
    bfloat16's): its matmuls several times faster, the yardstick still far finer than the run it judges."""
    before = torch.get_float32_matmul_precision()
    if dtype == torch.float32 and runtime.has_gpu():
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def training(ex: TrainingExercise, fn, cfg: GradingConfig) -> CriterionResult:
    case = ex.training_gpu if runtime.has_gpu() else ex.training_cpu
    dtype = _dtypes()[-1]
    seed = case_seed(cfg.secret_seed, "training-run")
    try:
        yours = train(ex, fn, case, dtype, seed)
    except Exception as exc:  # noqa: BLE001
        return CriterionResult("training", FAILED, student_error(exc, ex.function))
    eager32 = _eager_losses(ex, case, torch.float32, seed)
    eager = _eager_losses(ex, case, dtype, seed) if dtype != torch.float32 else eager32
    k = min(ex.loss_window, case.steps)
    last = {name: sum(c[-k:]) / k for name, c in (("yours", yours), ("eager", eager), ("eager32", eager32))}
    drift = abs(last["eager"] - last["eager32"])
    floor = ex.loss_floor_float32 if dtype == torch.float32 and ex.loss_floor_float32 is not None else ex.loss_floor
    allowed = max(floor, ex.loss_factor * drift)
    gap = abs(last["yours"] - last["eager32"])
    figures = {"losses": yours, "eager_losses": eager, "eager_float32_losses": eager32, "gap": gap,
               "allowed": allowed}
    same_dtype = "" if dtype == torch.float32 else f", eager {dtype_name(dtype)} {last['eager']:.4f}"
    msg = (f"after {case.steps} AdamW steps (lr {case.lr:g}, {case}, {dtype_name(dtype)}), the mean of the last {k} "
           f"losses: yours {last['yours']:.4f}, eager PyTorch float32 {last['eager32']:.4f}{same_dtype}; "
           f"apart by {gap:.4f}, allowed {allowed:.4f}; from {yours[0]:.3f} at the first step")
    bad = [i for i, v in enumerate(yours) if not math.isfinite(v)]
    if bad:
        return CriterionResult("training", FAILED, f"the loss became {yours[bad[0]]} at step {bad[0]}: training "
                               "diverged", figures)
    return CriterionResult("training", PASSED if gap <= allowed else FAILED, msg, figures)


def warm_cases(ex: TrainingExercise, criteria) -> list[tuple[TrainingCase, torch.dtype]]:
    """(case, dtype) of every model and batch shape the named criteria run on a GPU, each once: what a first call
    compiles the student's kernels for (criteria.warmup calls them side by side before the graded calls)."""
    if not runtime.has_gpu():
        return []
    found = []
    if "correctness" in criteria:
        found += [(case, dtype) for case in ex.cases_gpu for dtype in _dtypes()]
    if "training" in criteria:
        found.append((ex.training_gpu, _dtypes()[-1]))
    if "performance" in criteria:
        found.append((for_this_card(ex.perf_case), torch.bfloat16))
    if "memory" in criteria:
        found.append((for_this_card(ex.memory_gpu), _dtypes()[-1]))
    unique = {(repr(c.config), c.batch, c.seq_len, str(d)): (c, d) for c, d in found}
    return list(unique.values())


def first_step(ex: TrainingExercise, fn, case: TrainingCase, dtype) -> None:
    """One forward and backward of fn on the case's initial model and a batch of seed 0; the result is dropped."""
    device = runtime.device()
    params = ex.init(case.config, dtype, device, 0)
    tokens, targets = _batch(ex, case, 0, device)
    _step(fn, params, tokens, targets, case.config)()
    sync()


def _step(fn, params, tokens, targets, config):
    leaves = list(params.values())

    def call():
        return torch.autograd.grad(fn(params, tokens, targets, config), leaves)
    return call


def _perf_inputs(ex: TrainingExercise, seed: int):
    """(params, tokens, targets) of the performance case, on the GPU, in bfloat16 (the training dtype)."""
    case = for_this_card(ex.perf_case)
    return (ex.init(case.config, torch.bfloat16, "cuda", 0), *_batch(ex, case, seed, "cuda"))


def compiled_eager(ex: TrainingExercise):
    """torch.compile of the eager model, the yardstick of performance: the grader's own compilation, the same in
    every student's grading (classroom.compile_cache compiles it once per machine ahead of a class)."""
    return torch.compile(ex.eager, dynamic=False)


def compile_yardstick(ex: TrainingExercise) -> None:
    """Compile and run once what performance compiles of its own, at the same shapes: its caches then hold it."""
    params, tokens, targets = _perf_inputs(ex, 0)
    _step(compiled_eager(ex), params, tokens, targets, ex.perf_case.config)()
    sync()


def _audit(ex: TrainingExercise, fn, params: dict, sets: list, sampled, yours, t, prof):
    """criteria.audit on a training step: timed calls' gradients against an untimed call's on new tensors, every
    stream's work, the synchronized time, and the bf16 matmul rate as the ceiling of the step's flops."""
    case, refs = for_this_card(ex.perf_case), {}

    def problem(i, grads) -> str | None:
        if i not in refs:
            fresh = {n: p.detach().clone().requires_grad_() for n, p in params.items()}
            try:
                loss = fn(fresh, *(v.clone() for v in sets[i]), case.config)
                refs[i] = torch.autograd.grad(loss, list(fresh.values()))
            except Exception as exc:  # noqa: BLE001  the student's code: its error is the message
                return f"called again untimed on batch {i}: {student_error(exc, ex.function)}"
        for name, g, r in zip(params, grads, refs[i]):
            err = float((g.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30))
            if not err < LOOSE:
                return (f"a timed call (batch {i} of {len(sets)}, picked at random) returned a wrong gradient of "
                        f"{name} (relative error {err:.2g} against the same step called untimed): doing less when "
                        "timed shows")
        return None

    flops = ex.flops_per_token(case.config, case.seq_len) * case.batch * case.seq_len if ex.flops_per_token else 0
    return audit_timing(yours, t.yours_ms, t.spread, [Ceiling(flops, prof.matmul_tflops.get("bf16"), "TFLOP/s",
                        "flops a forward and backward must do", "bf16 matmul rate")], sampled, problem)


@one_at_a_time  # the GPU's timing lock held, as by every timed criterion
def training_performance(ex: TrainingExercise, fn, cfg: GradingConfig) -> CriterionResult:
    case, dtype = for_this_card(ex.perf_case), torch.bfloat16
    params, tokens, targets = _perf_inputs(ex, case_seed(cfg.secret_seed, "training-perf"))
    yours = _step(fn, params, tokens, targets, case.config)
    try:
        yours()
        sync()
    except Exception as exc:  # noqa: BLE001
        return CriterionResult("performance", FAILED, student_error(exc, ex.function))
    compiled = _step(compiled_eager(ex), params, tokens, targets, case.config)
    compiled()  # compilation stays out of the timing
    prof = device_mod.profile(progress=False)
    peak = copy_peak(prof)
    # The timed calls take turns over batches of different tokens; calls picked at random keep their gradients.
    sets = [(tokens, targets)] + [_batch(ex, case, case_seed(cfg.secret_seed, "training-perf", k), "cuda")
                                  for k in range(1, ROTATION)]
    leaves = list(params.values())
    sampled = SampledCalls(lambda x, y: torch.autograd.grad(fn(params, x, y, case.config), leaves), sets,
                           keep=KEPT)
    try:
        t, why = measure(sampled, compiled, peak, in_graph=False)
    except SubmissionWork as exc:
        return submission_failure(exc)
    peak.call = None
    if t is None:
        return shared_gpu(cfg, why)
    audit = _audit(ex, fn, params, sets, sampled, yours, t, prof)
    if audit.failure:
        return CriterionResult("performance", FAILED, audit.failure, {"time_ms": audit.ms, "compiled_ms": t.eager_ms})
    t = dataclasses.replace(t, yours_ms=audit.ms)
    eager_ms = grader_ms(_step(ex.eager, params, tokens, targets, case.config), 25, 200)
    tokens_n = case.batch * case.seq_len
    frac, speedup = t.eager_ms / t.yours_ms, eager_ms / t.yours_ms
    min_frac = cfg.bar(ex, "min_fraction_of_compiled", ex.default_min_fraction)
    min_speedup = cfg.bar(ex, "min_speedup_over_eager", 1.0)
    figures = {"time_ms": t.yours_ms, "compiled_ms": t.eager_ms, "eager_ms": eager_ms,
               "tokens_per_s": tokens_n / t.yours_ms * 1e3, "fraction_of_compiled": frac,
               "speedup_over_eager": speedup, "threshold": min_frac, "spread": t.spread}
    msg = (f"{tokens_n / t.yours_ms:.0f} k tokens/s for a forward and backward ({t.yours_ms:.2f} ms) against "
           f"{tokens_n / t.eager_ms:.0f} k for torch.compile of the eager model ({t.eager_ms:.2f} ms, timed in turns "
           f"with yours): {frac:.2f} of its speed, needs {min_frac:.2f}; eager PyTorch {eager_ms:.2f} ms, so "
           f"{speedup:.2f}x eager, needs more than {min_speedup:.2f}x. {case}, {dtype_name(dtype)}, {prof.name}."
           f"{audit.note}")
    ok = frac >= min_frac and speedup > min_speedup
    return CriterionResult("performance", PASSED if ok else FAILED, msg, figures)


def training_memory(ex: TrainingExercise, fn, cfg: GradingConfig) -> CriterionResult:
    """The peak beyond the parameters during one forward and backward (gradients included), against eager's at
    the same case; in the interpreter every allocation added up, for both."""
    case = for_this_card(ex.memory_gpu) if runtime.has_gpu() else ex.memory_cpu
    dtype = _dtypes()[-1]
    device = runtime.device()
    params = ex.init(case.config, dtype, device, 0)
    tokens, targets = _batch(ex, case, case_seed(cfg.secret_seed, "training-memory"), device)
    try:
        _step(fn, params, tokens, targets, case.config)()  # warm-up: compilation stays out of the measurement
        launches = TritonLaunches()
        _, yours = extra_bytes(_step(fn, params, tokens, targets, case.config), launches)
    except Exception as exc:  # noqa: BLE001
        return CriterionResult("memory", FAILED, student_error(exc, ex.function))
    _, eager = extra_bytes(_step(ex.eager, params, tokens, targets, case.config))
    if launches.count == 0:
        return CriterionResult("memory", FAILED, f"no Triton kernel ran: {ex.function} must run on your kernels")
    how = ("the CUDA allocator's peak" if runtime.has_gpu()
           else "every allocation added up (the interpreter: an upper bound of the peak)")
    logits = 4 * case.batch * case.seq_len * case.config.vocab
    figures = {"extra_bytes": yours, "eager_bytes": eager, "fraction_of_eager": yours / eager,
               "threshold": ex.max_memory_fraction}
    msg = (f"{yours / 2**20:.1f} MiB beyond the parameters during a forward and backward (gradients included; "
           f"{how}) against eager PyTorch's {eager / 2**20:.1f} MiB: {yours / eager:.2f} of it, allowed "
           f"{ex.max_memory_fraction:.2f}. The float32 logits alone take {logits / 2**20:.1f} MiB. {case}, "
           f"{dtype_name(dtype)}.")
    if yours <= ex.max_memory_fraction * eager:
        return CriterionResult("memory", PASSED, msg, figures)
    hint = ("\nThe logits are the largest activation: compute the loss and its gradients a chunk of rows at a "
            "time (exercise 2) instead of materialising them." if yours >= logits else "")
    return CriterionResult("memory", FAILED, msg + hint, figures)


GRADERS = {"correctness": training_correctness, "training": training, "performance": training_performance,
           "memory": training_memory}
