"""What the GPU in hand can do, from its compute capability and memory: which dtypes are graded, which dtype the
performance criterion times, whether Hopper's copy engine (TMA) is there, and whether Triton's matrix products
reach the tensor cores at all.

The facts it rests on (see the compatibility table in docs/hardware.md):
- bfloat16 is native (tensor cores and arithmetic) from compute capability 8.0 (Ampere); a Turing card (7.5)
  emulates it, so it is neither graded nor timed there: float16 takes its place.
- Since Triton 3.3, `tl.dot` below compute capability 8.0 compiles to FMA instructions, not tensor cores: a
  Triton GEMM or attention kernel there cannot approach cuBLAS or SDPA, so their performance is not graded.
- TMA descriptors and warpgroup matrix instructions exist from 9.0 (Hopper); elsewhere the course's kernels take
  their portable (pointer) paths.
- Triton's warp specialization of a loop (`tl.range(..., warp_specialize=True)`) is a Hopper pass in Triton 3.6
  and 3.7 (nvgpu-warp-specialization); Blackwell (10.x) takes another path. An exercise on it (notebook 08) is
  graded on 9.x alone, where its bars were measured (missing_hardware).
"""

from __future__ import annotations

import dataclasses

import torch

from autograder import runtime
from autograder.measure import sizes

MIN_CAPABILITY = (7, 5)  # the oldest GPU the course runs on (Turing: T4, RTX 20xx)
NATIVE_BF16 = (8, 0)
TENSOR_CORE_DOT = (8, 0)  # Triton >= 3.3 lowers tl.dot to FMA below this
TMA = (9, 0)
HARDWARE = {"hopper": "a Hopper GPU (compute capability 9.x: an H100, H200 or GH200)"}


@dataclasses.dataclass(frozen=True)
class Capability:
    name: str
    major: int
    minor: int
    total_bytes: int
    free_bytes: int

    @property
    def cc(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def supported(self) -> bool:
        return self.cc >= MIN_CAPABILITY

    @property
    def native_bf16(self) -> bool:
        return self.cc >= NATIVE_BF16

    @property
    def tensor_core_dot(self) -> bool:
        return self.cc >= TENSOR_CORE_DOT

    @property
    def tma(self) -> bool:
        return self.cc >= TMA


def current() -> Capability | None:
    """The GPU kernels run on; None in Triton's interpreter (no GPU, or TRITON_INTERPRET=1)."""

    if not runtime.has_gpu():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    total = min(props.total_memory, runtime.memory_cap_bytes() or props.total_memory)
    major, minor = props.major, props.minor
    if not runtime.tma_allowed() and (major, minor) >= TMA:
        major, minor = 8, 9  # simulated: what the course does on an Ada card (no TMA)
    return Capability(props.name, major, minor, total, runtime.free_gpu_bytes())


def graded_dtypes(cap: Capability | None) -> list[torch.dtype]:
    """The dtypes correctness and precision are graded in. In the interpreter bfloat16 arithmetic is wrong, and
    below compute capability 8.0 it is not native: float32 and float16 there."""
    dtypes = [torch.float32, torch.float16]
    return dtypes + [torch.bfloat16] if cap is not None and cap.native_bf16 else dtypes


def timing_dtype(dtype: torch.dtype, cap: Capability | None) -> torch.dtype:
    """The dtype an exercise is timed in: its own, or float16 where bfloat16 is not native."""
    if dtype == torch.bfloat16 and cap is not None and not cap.native_bf16:
        return torch.float16
    return dtype


def performance_unreachable(uses_dot: bool, cap: Capability | None) -> str | None:
    """Why the performance criterion cannot be met on this GPU by the algorithm a notebook teaches, or None."""
    if cap is None or not uses_dot or cap.tensor_core_dot:
        return None
    return (f"not graded on this GPU ({cap.name}, compute capability {cap.major}.{cap.minor}): since Triton 3.3, "
            "tl.dot below compute capability 8.0 runs on FMA units, not tensor cores, so no Triton kernel of "
            "this kind can approach cuBLAS or SDPA here. Correctness and the other criteria are graded as usual.")


def missing_hardware(needs: str, cap: Capability | None) -> str | None:
    """Why an exercise bound to a kind of GPU (Exercise.hardware) is not graded here, in one line; None where it
    is. needs "" grades anywhere."""
    if not needs:
        return None
    if needs not in HARDWARE:
        raise ValueError(f"unknown hardware {needs!r} for an exercise; the kinds are {', '.join(HARDWARE)}")
    if cap is not None and cap.major == 9:
        return None
    if cap is None:
        here = "no GPU: Triton's interpreter runs the kernels on the CPU, with neither warp groups nor a clock"
    else:
        here = f"{cap.name}, compute capability {cap.major}.{cap.minor}"
        if not runtime.tma_allowed():
            here += f" (Hopper's paths switched off by {runtime.NO_TMA_ENV})"
        elif cap.major > 9:
            here += ", where Triton specializes warps by another path that the course has not measured"
    return (f"not graded here: this exercise needs {HARDWARE[needs]}, and this machine has {here}. "
            "Nothing is held against you: every criterion reads skip.")


def describe(cap: Capability | None) -> list[str]:
    """Lines for `python -m autograder device`: what this GPU supports and what the course does about it."""
    if cap is None:
        return ["gpu           none: Triton's interpreter on the CPU; correctness graded in float32 and float16, "
                "speed not measured"]
    names = ", ".join(str(d).removeprefix("torch.") for d in graded_dtypes(cap))
    lines = [
        f"capability    {cap.major}.{cap.minor}" + ("" if cap.supported else
                                                   f" (below {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}: not supported)"),
        f"memory        {cap.total_bytes / 2**30:.1f} GiB, {cap.free_bytes / 2**30:.1f} GiB free",
        f"graded dtypes {names}" + ("" if cap.native_bf16 else " (bfloat16 is not native here)"),
        f"timed in      {'bfloat16 where an exercise asks for it' if cap.native_bf16 else 'float16 (for bfloat16)'}",
        f"matrix units  {'tensor cores from tl.dot' if cap.tensor_core_dot else 'tl.dot runs on FMA (Triton >= 3.3): GEMM and attention speed not graded'}",
        f"copy engine   {'TMA: the Hopper paths of notebooks 04 and 05 run' if cap.tma else 'no TMA: the portable (pointer) kernels run'}",
        f"notebook 08   {'graded here (Hopper)' if missing_hardware('hopper', cap) is None else 'not graded here: it needs a Hopper GPU (compute capability 9.x)'}",
    ]
    return lines + sizes.lines(cap.free_bytes)
