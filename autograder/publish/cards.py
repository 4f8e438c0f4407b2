"""The "Graded." table of an exercise card, generated from the exercise's spec and the grading configuration.

A markdown cell of a notebook's text source may hold the line

    <!-- graded: 02.rmsnorm -->

which the build (build.notebook_from_source) replaces by graded_table(get("02.rmsnorm"), config.load()): a
one-line summary (the criteria, each with its headline bar, and the exercise's points), then, folded in a
<details> block, a table with one row per criterion saying in numbers what it must reach. The bars are read where the
grader reads them (the spec's fields, `bars=` through GradingConfig.bar, so an instructor's grading.toml shows),
so the text a student reads cannot drift from what the grader does.
"""

from __future__ import annotations

import re

import torch

from autograder import config, specs
from autograder.config import GradingConfig
from autograder.measure import capability
from autograder.specs.exercise import (
    UNIT_ROUNDOFF,
    CompiledExercise,
    Exercise,
    KernelExercise,
    NumericExercise,
    StepExercise,
    TrainingExercise,
)

MARKER = re.compile(r"^<!-- graded: (\S+) -->[ \t]*$", re.MULTILINE)
# The marker with the card's label on the line above: the two become one sentence, "**Graded** on ...".
LABELLED = re.compile(r"^(\*\*Graded\.\*\*[ \t]*\n)?<!-- graded: (\S+) -->[ \t]*$", re.MULTILINE)

_NAMES = {
    "correctness": "Correctness",
    "precision": "Precision",
    "performance": "Performance",
    "fusion": "Fusion",
    "memory": "Memory",
    "graph": "One graph",
    "kernels": "Kernels",
    "training": "Training run",
}


def num(x: float) -> str:
    """A bar as people write it: 1e-5, 0.6, 2e-3, 1.1."""
    if x == 0:
        return "0"
    s = f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.2e}".replace(".00e", "e").replace("0e", "e")
    m = re.fullmatch(r"(-?[\d.]+)e([+-])0*(\d+)", s)
    if m:
        return f"{m.group(1)}e{'-' if m.group(2) == '-' else ''}{m.group(3)}"
    return s


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _size(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def _shapes(shapes) -> str:
    return ", ".join(str(s) for s in shapes)


def _not_on_cpu(cfg: GradingConfig) -> str:
    return (" Measured on a CUDA GPU; without one it fails (this course requires a measurement)."
            if cfg.require_performance else " Measured on a CUDA GPU only; skipped in the CPU interpreter.")


def _speedup(min_speedup: float, what: str) -> str:
    return f", and more than {num(min_speedup)}x the speed of {what}" if min_speedup > 0 else ""


# ---------------------------------------------------------------- kernel exercises

def _tolerances(tol: dict) -> str:
    return "; ".join(f"{_dt(d)} exactly equal" if a == r == 0 else f"{_dt(d)} atol {num(a)}, rtol {num(r)}"
                     for d, (a, r) in tol.items())


def _kernel_rows(ex: KernelExercise, cfg: GradingConfig) -> dict[str, str]:
    rows = {}
    trials = f"{cfg.trials} fresh random draws and a secret one"
    extra = " (atol raised to what float32 arithmetic must cost on inputs like these)" if ex.atol_from_inputs else ""
    specials = "; also inputs holding NaN and ±Inf, which must come out where the reference's do" if ex.special_values else ""
    outs = "every output" if len(ex.output_names) > 1 else "the output"
    rows["correctness"] = (
        f"{outs} within atol + rtol·|ref| of the float64 reference, elementwise: {_tolerances(ex.tolerance)}"
        f"{extra}. Shapes {_shapes(ex.shapes)}; {trials}{specials}. bfloat16 is graded on a GPU only.")
    shapes = ex.precision_shapes or (ex.precision_shape,)
    floors = "; ".join(f"{_dt(d)} {num(v)}" for d, v in ex.precision_floor.items())
    growth = (f" Measured at {ex.reduced_dim} = {', '.join(str(s.dims[ex.reduced_axis]) for s in shapes)}: an error "
              f"that also grows with {ex.reduced_dim} is named as low-precision accumulation."
              if len(shapes) > 1 else f" Shape {_shapes(shapes)}.")
    rows["precision"] = (
        f"‖out − ref‖ / ‖ref‖ at most {num(ex.precision_factor)}x what rounding the exact result to the output dtype "
        f"costs{f', or the floor ({floors}), whichever is larger' if floors else ''}"
        f"{'; the bound is raised to what float32 arithmetic must cost on inputs like these' if ex.precision_floor_from_inputs else ''}."
        f"{growth}")
    rows["performance"] = _kernel_performance(ex, cfg)
    share = (f"; {', '.join(ex.output_names)} must be views of one buffer the kernel wrote"
             if ex.outputs_share_storage else "")
    rows["fusion"] = (f"at most {ex.max_launches} kernel launch{'es' if ex.max_launches > 1 else ''} a call, and no "
                      f"torch computation outside your kernels (allocation and views only){share}.")
    rows["memory"] = _kernel_memory(ex)
    return rows


def _kernel_performance(ex: KernelExercise, cfg: GradingConfig) -> str:
    parts = ex.perf_shapes.items() if ex.perf_shapes else [(None, ex.perf_shape)]
    lines = []
    for part, shape in parts:
        frac = cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction, part)
        speed = cfg.bar(ex, "min_speedup_over_eager", 1.0, part)
        if ex.perf_baseline is not None:
            what = f"at least {num(frac)} of {ex.perf_baseline_name}'s speed on the same GPU"
        elif ex.flops is not None:
            what = f"at least {num(frac)} of this GPU's measured matmul rate (TFLOP/s)"
        else:
            what = (f"at least {num(frac)} of this GPU's measured copy bandwidth, counting the bytes the op must "
                    "move")
        speedup = "" if ex.perf_baseline is ex.eager else _speedup(speed, ex.eager_name)
        label = f"{part} shape {shape}" if part else f"shape {shape}"
        lines.append(f"{what}{speedup} ({label}, {_dt(ex.perf_dtype)})")
    text = "; ".join(lines) + "."
    if ex.no_spills:
        text += " The compiled kernel must not spill registers to memory."
    if ex.warp_specialized:
        text += (" A kernel it launches there must be warp-specialized by Triton (a producer warp group issuing "
                 "the copies, consumer warp groups computing).")
    return text + ("" if ex.hardware else _not_on_cpu(cfg))


def _kernel_memory(ex: KernelExercise) -> str:
    text = (f"allocates, beyond its inputs (outputs included), less than {ex.memory_what} would take: it must never "
            "exist in memory")
    figures = _memory_figures(ex)
    if figures:
        bound, materialised = figures
        text += (f". At shape {ex.memory_shape} at most {_size(bound)}, where {ex.memory_what} alone take "
                 f"{_size(materialised)} ({num(bound / materialised)} of it)")
    return text + "."


def _memory_figures(ex: KernelExercise) -> tuple[int, int] | None:
    """(bound, materialised bytes) at the GPU's memory shape, from inputs on the meta device (no data made)."""
    if ex.memory_bound is None or ex.memory_shape is None:
        return None
    try:
        with torch.device("meta"):
            inputs = ex.make_inputs(ex.memory_shape, ex.perf_dtype, "meta", None)
        return int(ex.memory_bound(inputs)), int(ex.materialised_bytes(inputs))
    except Exception:  # noqa: BLE001  an input maker that needs real data: words only
        return None


# ---------------------------------------------------------------- the other kinds

def _numeric_rows(ex: NumericExercise, cfg: GradingConfig) -> dict[str, str]:
    return {"correctness": (
        f"every case within a relative tolerance of {num(ex.rtol)} of the model's answer: the grader's cases, drawn "
        f"afresh {cfg.trials} times, and a secret set.")}


def _step_rows(ex: StepExercise, cfg: GradingConfig) -> dict[str, str]:
    atol, rtol = ex.tolerance
    frac = cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction)
    speed = cfg.bar(ex, "min_speedup_over_eager", 1.0)
    n_short, n_long = (len(s) for s in ex.fusion_sizes)
    return {
        "correctness": (
            f"every tensor of every state list after steps {', '.join(map(str, ex.steps))} within "
            f"{num(atol)}·max|ref| + {num(rtol)}·|ref| of the float64 step, elementwise, inputs untouched; "
            f"{len(ex.size_cases)} lists of tensor sizes, {', '.join(map(_dt, ex.dtypes))}."),
        "precision": (
            f"after {ex.precision_steps} steps, each state's relative error against float64 at most "
            f"{num(ex.precision_factor)}x what an exact step that rounds the stored state costs (and at least "
            "1e-7 is allowed); the parameters judged by how far they moved."),
        "performance": (
            f"at least {num(frac)} of this GPU's measured copy bandwidth, counting the bytes a step must move"
            f"{_speedup(speed, 'the per-tensor PyTorch loop')}.{_not_on_cpu(cfg)}"),
        "fusion": (
            f"at most {ex.max_launches} kernel launch{'es' if ex.max_launches > 1 else ''} a step, as many for "
            f"{n_long} tensors as for {n_short}; no torch computation outside your kernels."),
    }


def _compiled_rows(ex: CompiledExercise, cfg: GradingConfig) -> dict[str, str]:
    grads = f"output and the gradients of {', '.join(ex.grads)} match" if ex.grads else "output matches"
    how = ("its own comparison" if ex.compare else
           f"atol + rtol·|ref|: {_tolerances({d: t for d, t in ex.tolerance.items() if d in ex.dtypes})}")
    rows = {
        "correctness": (
            f"under torch.compile(fullgraph=True), the {grads} the float64 reference ({how}); "
            f"shapes {_shapes(ex.shapes)}. bfloat16 is graded on a GPU only."),
        "graph": "Dynamo captures the function in one graph, with no graph break.",
        "kernels": (
            f"{'your own Triton kernels run inside the compiled code, and ' if ex.own_kernels else ''}at most "
            f"{ex.max_kernels} other kernels{f' ({ex.kernels_what})' if ex.kernels_what else ''}, at shape "
            f"{ex.kernels_shape}. Counted on a GPU only."),
    }
    if ex.timed is not None:
        rows["performance"] = "the compiled function: " + _kernel_performance(ex.timed, cfg)
    return rows


def _training_rows(ex: TrainingExercise, cfg: GradingConfig) -> dict[str, str]:
    floors = {d: ex.precision_floor.get(d, 8 * UNIT_ROUNDOFF[d]) for d in (torch.float32, torch.bfloat16)}
    frac = cfg.bar(ex, "min_fraction_of_compiled", ex.default_min_fraction)
    speed = cfg.bar(ex, "min_speedup_over_eager", 1.0)
    gpu, cpu = ex.training_gpu, ex.training_cpu
    return {
        "correctness": (
            f"the loss and every parameter's gradient within {num(ex.precision_factor)}x eager PyTorch's relative "
            f"error against float64 in the same dtype, or the floor ({'; '.join(f'{_dt(d)} {num(v)}' for d, v in floors.items())}), "
            "whichever is larger."),
        "training": (
            f"after {gpu.steps} AdamW steps on a GPU ({cpu.steps} in the interpreter), the mean of the last "
            f"{min(ex.loss_window, gpu.steps)} losses ({min(ex.loss_window, cpu.steps)} in the interpreter) within max({num(ex.loss_floor)}, {num(ex.loss_factor)}x eager's own drift "
            "in the graded dtype) of eager float32's"
            + (f" ({num(ex.loss_floor_float32)} in float32, as in the interpreter)." if ex.loss_floor_float32 is not None
               else ".")),
        "performance": (
            f"tokens/s of a forward and backward at least {num(frac)} of torch.compile's on the eager model"
            f"{_speedup(speed, 'eager PyTorch')} ({ex.perf_case}, bfloat16).{_not_on_cpu(cfg)}"),
        "memory": (
            f"peak memory beyond the parameters during a forward and backward at most "
            f"{num(ex.max_memory_fraction)} of eager PyTorch's ({ex.memory_gpu})."),
    }


def _rows(ex: Exercise, cfg: GradingConfig) -> dict[str, str]:
    for kind, rows in ((CompiledExercise, _compiled_rows), (TrainingExercise, _training_rows),
                       (StepExercise, _step_rows), (KernelExercise, _kernel_rows), (NumericExercise, _numeric_rows)):
        if isinstance(ex, kind):
            return rows(ex, cfg)
    raise TypeError(f"{ex.id}: no card for a {type(ex).__name__}")


def criteria_table(ex: Exercise, cfg: GradingConfig) -> str:
    """The markdown table of what each of ex's criteria must reach, in the grader's numbers, with its notes."""
    rows = _rows(ex, cfg)
    missing = [c for c in ex.criteria if c not in rows]
    if missing:
        raise ValueError(f"{ex.id}: the card has no row for criteria {missing}")
    lines = ["| Criterion | Passes when |", "|---|---|"]
    for c in ex.criteria:
        text = rows[c].replace("|", "\\|")
        lines.append(f"| {_NAMES.get(c, c)} | {text[0].upper()}{text[1:]} |")
    lines.append(f"\n*`check(\"{ex.id}\", {ex.function})` grades it; bars from the exercise's spec"
                 f"{' and ' + cfg.source.split('/')[-1] if cfg.source else ''}.*")
    if ex.hardware:
        lines.append(f"*Graded only on {capability.HARDWARE[ex.hardware]}: on any other GPU and on the CPU every "
                     "criterion reads skip, with the reason, and nothing is held against you.*")
    if ex.optional:
        lines.append("*Optional: its graded cells carry 0 points. They say what passed and what did not, and "
                     "count toward no grade.*")
    return "\n".join(lines)


# ---------------------------------------------------------------- the one-line summary

def _times(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 'es' if what.endswith('h') else 's'}"


def _perf_headline(ex: KernelExercise, cfg: GradingConfig) -> str:
    parts = list(ex.perf_shapes) if ex.perf_shapes else [None]
    frac = min(cfg.bar(ex, "min_fraction_of_peak", ex.default_min_fraction, part) for part in parts)
    speed = max(cfg.bar(ex, "min_speedup_over_eager", 1.0, part) for part in parts)
    if ex.perf_baseline is not None:
        text = f">= {num(frac)} of {ex.perf_baseline_name}'s speed"
    else:
        text = f">= {num(frac)} of {'matmul rate' if ex.flops is not None else 'copy bandwidth'}"
    if ex.perf_baseline is not ex.eager and speed > 0:
        text += ", faster than eager" if speed == 1 else f", > {num(speed)}x eager"
    return text


def _headlines(ex: Exercise, cfg: GradingConfig) -> dict[str, str]:
    """A few words of each criterion's main bar, where one is short enough for a summary line."""
    if isinstance(ex, CompiledExercise):
        out = {"graph": "no graph break", "kernels": f"at most {ex.max_kernels} other kernels"}
        if ex.timed is not None:
            out["performance"] = _perf_headline(ex.timed, cfg)
        return out
    if isinstance(ex, TrainingExercise):
        return {"performance": f">= {num(cfg.bar(ex, 'min_fraction_of_compiled', ex.default_min_fraction))} of "
                               "torch.compile's tokens/s",
                "memory": f"peak <= {num(ex.max_memory_fraction)} of eager's",
                "training": f"{ex.training_gpu.steps} AdamW steps"}
    if isinstance(ex, StepExercise):
        return {"performance": f">= {num(cfg.bar(ex, 'min_fraction_of_peak', ex.default_min_fraction))} of copy "
                               "bandwidth",
                "fusion": _times(ex.max_launches, "launch") + " a step"}
    if isinstance(ex, KernelExercise):
        return {"performance": _perf_headline(ex, cfg), "fusion": _times(ex.max_launches, "launch"),
                "precision": f"<= {num(ex.precision_factor)}x rounding error",
                "memory": f"never stores {ex.memory_what}"}
    if isinstance(ex, NumericExercise):
        return {"correctness": f"relative tolerance {num(ex.rtol)}"}
    return {}


def summary(ex: Exercise, cfg: GradingConfig, points: float | None = None) -> str:
    """One line: the criteria, each with its headline bar, the points where known, where and whether it counts."""
    heads = _headlines(ex, cfg)
    names = [_NAMES.get(c, c).lower() + (f" ({heads[c]})" if c in heads else "") for c in ex.criteria]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    text = f"Graded on {listed}"
    if points is not None:
        text += f"; {num(points)} point{'' if points == 1 else 's'}"
    if ex.hardware:
        text += f"; only on {capability.HARDWARE[ex.hardware]}"
    if ex.optional:
        text += "; optional, counts toward no grade"
    return text + "."


def graded_table(ex: Exercise, cfg: GradingConfig, points: float | None = None, label: bool = False) -> str:
    """What the marker `<!-- graded: ID -->` becomes: the one-line summary (label: its first word in bold, for
    the card's "Graded." line), then the full table folded away in a <details> block (blank lines around the
    table: markdown inside HTML needs them, in JupyterLab, nbgrader's feedback pages and the documentation site)."""
    line = summary(ex, cfg, points)
    if label:
        line = "**Graded**" + line.removeprefix("Graded")
    return (f"{line}\n\n<details><summary>How it is graded</summary>\n\n"
            f"{criteria_table(ex, cfg)}\n\n</details>")


GRADED_CHECK = re.compile(r"""\bcheck\(\s*["']([\w.]+)["']""")


def points_by_exercise(cells) -> dict[str, float]:
    """The points of each exercise, summed over the graded cells (nbgrader `grade: true`) that check it."""
    points: dict[str, float] = {}
    for cell in cells:
        md = cell.get("metadata", {}).get("nbgrader", {})
        if md.get("grade") and cell.get("cell_type") == "code":
            for ex_id in set(GRADED_CHECK.findall(cell.get("source", ""))):
                points[ex_id] = points.get(ex_id, 0) + float(md.get("points", 0))
    return points


def expand_cards(source: str, cfg: GradingConfig | None = None, lookup=None,
                 points: dict[str, float] | None = None) -> str:
    """Replace each line `<!-- graded: ID -->` of a markdown cell's source by ID's summary and folded table;
    points (points_by_exercise of the notebook) adds each exercise's points to its summary."""
    if not LABELLED.search(source):
        return source
    lookup = lookup or specs.get
    cfg = cfg if cfg is not None else config.load()

    def one(match: re.Match) -> str:
        try:
            ex = lookup(match.group(2))
        except KeyError as exc:
            marker = match.group(0).splitlines()[-1].strip()
            raise LookupError(f"the line {marker!r} names no exercise: {exc.args[0]}") from None
        before = source[: match.start()]
        # The summary must not run on from a paragraph above it, unless that is the card's "Graded." label.
        gap = "\n" if not match.group(1) and before.endswith("\n") and not before.endswith("\n\n") else ""
        return gap + graded_table(ex, cfg, (points or {}).get(ex.id), label=bool(match.group(1)))

    return LABELLED.sub(one, source)
