"""What a graded function's Triton kernels compiled to, where an exercise asks about the code and not only the
speed (KernelExercise.no_spills, KernelExercise.warp_specialized): read from the compiled kernels its call
launched, on a GPU (the interpreter compiles nothing)."""

from __future__ import annotations

import torch

from autograder.measure.meters import CompiledFigures, TritonLaunches


def compiled_kernels(fn, args) -> list[CompiledFigures]:
    """What each kernel one call of fn(*args) launched compiled to."""
    launches = TritonLaunches()
    with launches:
        fn(*args)
    torch.cuda.synchronize()
    return launches.compiled


def spills(kernels: list[CompiledFigures]) -> list[str]:
    """The kernels whose compiled code spills registers, each named with its figures."""
    return [f"{k.name} ({k.settings}: {k.n_regs} registers a thread, {k.n_spills} spilled)"
            for k in kernels if k.n_spills]


def not_warp_specialized(kernels: list[CompiledFigures]) -> str | None:
    """Why none of the kernels counts as warp-specialized, with what each compiled to; None when one does."""
    if any(k.warp_specialized for k in kernels):
        return None
    seen = "; ".join(f"{k.name} ({k.settings})" for k in kernels) or "no compiled Triton kernel"
    return ("No kernel your function launched at the benchmark size was warp-specialized by Triton (launched: "
            f"{seen}). Triton splits the key loop into a producer warp group and consumer warp groups when the loop "
            "is tl.range(..., warp_specialize=True) at num_warps=4, every load in it is a TMA descriptor load (Q's "
            "descriptor made in the kernel), and it is the kernel's only loop with nothing loaded after it; "
            "otherwise the flag is ignored without a word.")
