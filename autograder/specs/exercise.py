"""Exercise specs: data that says what a student function must compute and how it is judged."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import torch

# The unit roundoff of each dtype (half the gap between 1 and the next number): what one rounding may cost.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}

CRITERIA = ("correctness", "precision", "performance", "fusion", "memory", "graph", "kernels", "training")


@dataclasses.dataclass(frozen=True)
class Exercise:
    id: str  # "<notebook number>.<name>", e.g. "01.fused_chain"
    notebook: str  # notebook stem, e.g. "01_hbm_cost_model"
    function: str  # the name the student's function has in the notebook
    signature: str  # how the grader calls it, e.g. "fused_chain(x, bias, alpha) -> Tensor"
    summary: str
    criteria: tuple[str, ...]
    kernel: str = ""  # the module of kernels/ that holds its reference solution ("" where none or several)
    # The performance criterion's pass bars (min_fraction_of_peak or min_fraction_of_compiled, and
    # min_speedup_over_eager; a sub-dict per benchmark shape where there are several), with the measured headroom
    # that justifies them in a comment beside them. grading.toml may override them (GradingConfig.bar).
    bars: dict = dataclasses.field(default_factory=dict)
    # The kind of GPU it is graded on: "" any (the interpreter included), "hopper" compute capability 9.x only.
    # Elsewhere every criterion reads skip with the reason (autograder.measure.capability.missing_hardware): the
    # hardware a student has never costs them a grade.
    hardware: str = ""
    # An optional exercise: its graded cells carry 0 points (feedback, not credit; tests/notebooks/test_notebooks.py).
    optional: bool = False

    @property
    def n_params(self) -> int:
        inner = self.signature[self.signature.index("(") + 1 : self.signature.index(")")]
        return len([p for p in inner.split(",") if p.strip()])

    def describe(self) -> dict:
        return {
            "id": self.id,
            "notebook": self.notebook,
            "function": self.function,
            "signature": self.signature,
            "criteria": list(self.criteria),
            "summary": self.summary,
        }


@dataclasses.dataclass(frozen=True)
class NumericExercise(Exercise):
    """A plain Python function graded on numbers: e.g. a cost model. Only correctness applies."""

    cases: Callable[[Any], list[tuple]] = None  # rng -> argument tuples
    reference: Callable[..., Any] = None
    rtol: float = 1e-6
    diagnose: Callable[[tuple, Any, Any], str | None] | None = None  # (args, got, expected) -> named bug


@dataclasses.dataclass(frozen=True)
class Shape:
    """One input shape for a kernel exercise, with the memory layout to build it in."""

    dims: tuple[int, ...]
    layout: str = "contiguous"  # or "transposed" (a .t() view) or "strided" (every other column)

    def __str__(self) -> str:
        s = "x".join(map(str, self.dims))
        return s if self.layout == "contiguous" else f"{s} {self.layout}"


@dataclasses.dataclass(frozen=True)
class KernelExercise(Exercise):
    """A Triton kernel exercise. Callables take the inputs dict's items as keyword arguments."""

    make_inputs: Callable[..., dict] = None  # (shape: Shape, dtype, device, generator) -> inputs
    reference: Callable[..., torch.Tensor] = None  # float64 result from the inputs
    eager: Callable[..., torch.Tensor] = None  # the unfused PyTorch version, for speed-ups
    bytes: Callable[..., int] = None  # fewest bytes an implementation must move
    flops: Callable[..., int] | None = None  # set for compute-bound exercises (graded in TFLOP/s)
    shapes: tuple[Shape, ...] = ()
    # Secret: shapes no notebook shows, graded besides `shapes` in correctness's secret case (with the precision
    # shapes drawn from the grading's seed: criteria/cases.py secret_shapes). Odd sizes, layouts and edge cases.
    extra_shapes: tuple[Shape, ...] = ()
    precision_shape: Shape = None
    # Several shapes along the reduced dimension, smallest first: the precision check then also fits how
    # the error grows with that length, and names low-precision accumulation when it grows.
    precision_shapes: tuple[Shape, ...] = ()
    reduced_dim: str = "H"  # what the feedback calls that length (K for a GEMM)
    reduced_axis: int = -1  # where that length sits in Shape.dims (attention's (B, H, N, D): 2)
    perf_shape: Shape = None
    # Several benchmark shapes, each graded alone against its own thresholds (a decode and a training shape):
    # {name: shape}; the criterion passes when every one does. Empty: perf_shape alone.
    perf_shapes: dict = dataclasses.field(default_factory=dict)
    eager_name: str = "unfused eager PyTorch"  # what the timed yardstick `eager` is called in the feedback
    no_spills: bool = False  # performance also fails a kernel whose compiled code spills registers to memory
    # Performance also fails unless a kernel the call launches at the benchmark size was warp-specialized by
    # Triton (its compiled code holds a producer warp group): the exercise is the schedule, not only the speed.
    warp_specialized: bool = False
    perf_dtype: torch.dtype = torch.bfloat16
    # Time the kernel and eager as replays of CUDA graphs: for a perf_shape whose kernel takes about as long as
    # the host takes to launch it (decode), where plain calls measure the launch path's noise.
    time_in_cuda_graph: bool = False
    max_launches: int = 1
    # Elementwise closeness for correctness, per dtype: (atol, rtol) against the float64 reference.
    tolerance: dict = dataclasses.field(default_factory=dict)
    # An atol computed from the inputs where the arithmetic itself cannot do better (LayerNorm's mean of rows far
    # from 0): (inputs, dtype) -> atol; the larger of it and the table's is used.
    atol_from_inputs: Callable[[dict, torch.dtype], float] | None = None
    # Precision: ||out - ref|| / ||ref|| may be at most `precision_factor` times what rounding the exact
    # result to the output dtype costs, or `precision_floor`, whichever is larger.
    precision_factor: float = 1.5
    precision_floor: dict = dataclasses.field(default_factory=dict)
    # A floor computed from the inputs, such as what float32 accumulation over a GEMM's K may cost:
    # (inputs, dtype) -> (floor, what it is, in words for the message).
    precision_floor_from_inputs: Callable[[dict, torch.dtype], tuple[float, str]] | None = None
    special_values: bool = True  # also grade inputs holding NaN and +-Inf
    default_min_fraction: float = 0.5
    # The memory criterion: at memory_shape, the bytes a call may allocate beyond its inputs (outputs
    # included), from the inputs; and what the materialised intermediate it must avoid would take.
    memory_shape: Shape = None
    memory_shape_cpu: Shape = None  # a smaller one for the interpreter, when memory_shape would take minutes there
    memory_bound: Callable[[dict], int] | None = None
    materialised_bytes: Callable[[dict], int] | None = None
    memory_what: str = "the intermediate"  # what the feedback calls the tensor that must not be materialised
    # "total": every byte the call allocates (as above); "largest": the largest single tensor it creates, for a
    # loop in plain torch whose tiles add up to the intermediate's size although no more than one exists at once.
    memory_measure: str = "total"
    # The answer is plain PyTorch (a tiled model of a kernel, such as 05.flash_attention_torch): no Triton kernel
    # has to compute its outputs.
    plain_torch: bool = False
    precision_note: str = ""  # what low-precision intermediate math looks like in this exercise
    output_names: tuple[str, ...] = ("output",)  # the function returns a tuple when there are several
    output_dtype: torch.dtype | None = None  # None: the outputs have the inputs' dtype
    # Per output, when they differ (attention's o in the inputs' dtype, its log-sum-exp in float32); None
    # entries take the inputs' dtype. Overrides output_dtype.
    output_dtypes: tuple | None = None
    # Performance against a library on the same device instead of the matmul peak (e.g. SDPA for attention):
    # a function of the inputs, timed like the student's; the fraction graded is its time over theirs.
    perf_baseline: Callable[..., Any] | None = None
    perf_baseline_name: str = ""
    # The input whose elements the cache probe changes a few of, in place: one the others are not derived from
    # (the backward's do, where o and lse follow from q). None: the first tensor input.
    free_input: str | None = None
    outputs_share_storage: bool = False  # the outputs must be views of one buffer (e.g. Q, K, V of one GEMM)
    # (bug name, reference computing the wrong formula): named when an output matches one of them.
    diagnoses: tuple = ()
    # A dropout drawn in the kernel (inputs p and seed, outputs (out, h), h = x + dropout(y)): correctness also checks
    # the mask at these drop probabilities (kept fraction, rows and seeds drawing apart: criteria/keep_mask.py).
    keep_rates: tuple[float, ...] = ()

    def args(self, inputs: dict) -> tuple:
        return tuple(inputs.values())

    def out_dtype(self, input_dtype: torch.dtype, index: int = 0) -> torch.dtype:
        """The dtype output number `index` must have for inputs of input_dtype."""
        if self.output_dtypes is not None:
            return self.output_dtypes[index] or input_dtype
        return self.output_dtype or input_dtype


@dataclasses.dataclass(frozen=True)
class StepExercise(Exercise):
    """An in-place update of lists of tensors, such as an optimizer step over a model's parameters.

    The student's function is called as fn(*state lists and input lists in `arg_names` order, step, *hyper)
    and returns None; the lists named in `state` are updated in place, those in `inputs` only read.
    """

    arg_names: tuple[str, ...] = ()  # the lists, in the order the function takes them
    state: tuple[str, ...] = ()  # the lists the function updates in place
    make_lists: Callable[..., dict] = None  # (sizes, dtype, device, generator) -> {name: list of tensors}
    make_hyper: Callable[..., dict] = None  # generator -> {name: float}, in the signature's order
    reference: Callable[..., tuple] = None  # float64 (new state lists, in `state` order), inputs untouched
    eager: Callable[..., None] = None  # the unfused PyTorch version, in place
    baselines: Callable[..., dict] = None  # (lists, step, hyper) -> {label: function doing one more step}
    bytes: Callable[..., int] = None  # fewest bytes one step must move
    size_cases: tuple[tuple[int, ...], ...] = ()  # the tensor sizes of each list, one tuple per case
    extra_sizes: tuple[tuple[int, ...], ...] = ()  # secret: more cases no notebook shows, graded after size_cases
    steps: tuple[int, ...] = (1, 2, 10)  # step numbers graded, each from the state the last one left
    precision_sizes: tuple[int, ...] = ()
    precision_steps: int = 20
    perf_sizes: Callable[..., tuple[int, ...]] = None  # generator -> sizes for the timed step
    fusion_sizes: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # a short and a long list
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    max_launches: int = 1
    tolerance: tuple[float, float] = (1e-6, 1e-5)  # (atol as a fraction of the tensor's largest value, rtol)
    precision_factor: float = 3.0
    default_min_fraction: float = 0.5
    diagnoses: tuple = ()  # (bug name, reference computing the wrong update)


@dataclasses.dataclass(frozen=True)
class CompiledExercise(Exercise):
    """A function graded inside torch.compile(fullgraph=True): its results and gradients there, whether Dynamo
    captures it in one graph, and which GPU kernels the compiled code launches.

    `harness(fn)` is what gets compiled: the student's function with the operations around it that Inductor
    should fuse (or fn itself). It takes the inputs dict's values in order.
    """

    make_inputs: Callable[..., dict] = None  # (shape, dtype, device, generator) -> inputs
    harness: Callable[[Callable], Callable] = None
    reference: Callable[..., torch.Tensor] = None  # float64 result of the harness, from float64 inputs
    grads: tuple[str, ...] = ()  # inputs whose gradients are checked (through the reference's autograd)
    shapes: tuple[Shape, ...] = ()
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    tolerance: dict = dataclasses.field(default_factory=dict)  # dtype -> (atol, rtol), outputs and gradients
    # A comparison of its own, where closeness elementwise is not the rule: (out, ref, inputs) -> problem or None.
    compare: Callable[..., str | None] | None = None
    kernels_shape: Shape = None
    own_kernels: bool = False  # the compiled code must launch the student's own Triton kernels
    max_kernels: int = 0  # kernels it may launch besides those (Inductor's, cuBLAS's, copies)
    kernels_what: str = ""  # what those few kernels are, for the message
    timed: "KernelExercise | None" = None  # performance: graded as this kernel exercise, on the compiled function


@dataclasses.dataclass(frozen=True)
class TrainingCase:
    """A model configuration and a batch shape; `steps` and `lr` where a training run is made of it."""

    config: Any
    batch: int
    seq_len: int
    steps: int = 0
    lr: float = 0.0

    def __str__(self) -> str:
        c = self.config
        return (f"{c.layers} layers, d={c.dim}, {c.heads} heads, f={c.hidden}, vocabulary {c.vocab}, "
                f"batch {self.batch} x {self.seq_len} tokens")


@dataclasses.dataclass(frozen=True)
class TrainingExercise(Exercise):
    """A model's loss as a function of its parameters, fn(params, tokens, targets, config) -> 0-d loss, whose
    backward goes through the student's autograd Functions: graded on its gradients against float64, on a
    training run against eager PyTorch's, on time against torch.compile and on peak memory against eager."""

    init: Callable[..., dict] = None  # (config, dtype, device, seed) -> {name: leaf tensor}
    reference: Callable[..., tuple] = None  # (params, tokens, targets, config) -> float64 (loss, {name: grad})
    eager: Callable[..., torch.Tensor] = None  # (params, tokens, targets, config) -> loss, plain PyTorch
    tokens: Callable[..., torch.Tensor] = None  # (vocab) -> the text as ids below vocab, to draw batches from
    cases_cpu: tuple = ()  # TrainingCase: the gradients graded in the interpreter
    cases_gpu: tuple = ()
    training_cpu: TrainingCase = None  # with steps and lr
    training_gpu: TrainingCase = None
    perf_case: TrainingCase = None
    memory_cpu: TrainingCase = None
    memory_gpu: TrainingCase = None
    # A gradient's relative error against float64 may be this many times eager PyTorch's in the same dtype, or
    # the dtype's floor, whichever is larger.
    precision_factor: float = 4.0
    precision_floor: dict = dataclasses.field(default_factory=dict)
    # The last `loss_window` losses of the run, averaged, may differ from eager float32's by the larger of
    # `loss_floor` and `loss_factor` times eager's own difference in the graded dtype.
    loss_window: int = 5
    loss_floor: float = 0.02
    loss_factor: float = 3.0
    loss_floor_float32: float | None = None  # the floor where the run is graded in float32 (the interpreter's)
    max_memory_fraction: float = 0.6  # of eager's peak, at the memory case
    default_min_fraction: float = 0.4  # of torch.compile's tokens/s
    # (config, seq_len) -> the fewest flops a forward and backward must do a token: the timing audit's ceiling.
    flops_per_token: Callable[..., int] | None = None


def _is_triton_kernel(fn) -> bool:
    from triton.runtime.jit import KernelInterface

    return isinstance(fn, KernelInterface)


def check_callable(ex: Exercise, fn) -> str | None:
    """A clear message when fn cannot be called the way the grader calls it, else None."""
    if fn is None:
        return f"no function given: define {ex.function}{ex.signature[ex.signature.index('('):]}"
    if not callable(fn):
        return f"{ex.function} should be a function, got {type(fn).__name__}"
    if _is_triton_kernel(fn):
        return (
            f"{ex.function} is a Triton kernel (@triton.jit); the grader needs the plain Python function that "
            f"allocates the output and launches the kernel, called as {ex.signature}"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins and C functions: let the call itself fail, if it does
    try:
        sig.bind(*range(ex.n_params))
    except TypeError:
        return (
            f"{ex.function} has the signature {getattr(fn, '__name__', ex.function)}{sig}, but the grader calls "
            f"{ex.signature} ({ex.n_params} positional arguments)"
        )
    return None
