"""Exercise specs: data that says what a student function must compute and how it is judged."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import torch

CRITERIA = ("correctness", "precision", "performance", "fusion")


@dataclasses.dataclass(frozen=True)
class Exercise:
    id: str  # "<notebook number>.<name>", e.g. "01.fused_chain"
    notebook: str  # notebook stem, e.g. "01_hbm_cost_model"
    function: str  # the name the student's function has in the notebook
    signature: str  # how the grader calls it, e.g. "fused_chain(x, bias, alpha) -> Tensor"
    summary: str
    criteria: tuple[str, ...]

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
    precision_shape: Shape = None
    # Several shapes along the reduced dimension, smallest first: the precision check then also fits how
    # the error grows with that length, and names low-precision accumulation when it grows.
    precision_shapes: tuple[Shape, ...] = ()
    perf_shape: Shape = None
    perf_dtype: torch.dtype = torch.bfloat16
    max_launches: int = 1
    # Elementwise closeness for correctness, per dtype: (atol, rtol) against the float64 reference.
    tolerance: dict = dataclasses.field(default_factory=dict)
    # Precision: ||out - ref|| / ||ref|| may be at most `precision_factor` times what rounding the exact
    # result to the output dtype costs, or `precision_floor`, whichever is larger.
    precision_factor: float = 1.5
    precision_floor: dict = dataclasses.field(default_factory=dict)
    special_values: bool = True  # also grade inputs holding NaN and +-Inf
    default_min_fraction: float = 0.5
    precision_note: str = ""  # what low-precision intermediate math looks like in this exercise
    output_names: tuple[str, ...] = ("output",)  # the function returns a tuple when there are several
    # (bug name, reference computing the wrong formula): named when an output matches one of them.
    diagnoses: tuple = ()

    def args(self, inputs: dict) -> tuple:
        return tuple(inputs.values())


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
