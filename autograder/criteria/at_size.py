"""The performance criterion's work at the benchmark size besides timing: the float64 reference and the eager
yardstick where they fit in the GPU's memory, a training case's batch sized to the card, and the check, after
timing, that the timed calls computed their results rather than returning stored ones."""

from __future__ import annotations

import dataclasses
import math
import os

import torch

from autograder import runtime
from autograder.criteria.cases import student_error
from autograder.criteria.outputs import as_outputs, as_tuple, relative_error, shares_storage
from autograder.specs.exercise import KernelExercise, TrainingCase


def compact(outputs) -> tuple | None:
    """Reference outputs with float64 narrowed to float32 (6e-8: far below any bound a timed output is held to)."""
    return None if outputs is None else tuple(o.float() if isinstance(o, torch.Tensor) and o.dtype == torch.float64 else o for o in outputs)


# The timed and measured case (32 x 1024 tokens, 1024 wide): eager PyTorch's step there peaks above 16 GiB (its
# float32 logits take 4 GiB, their gradient as much), so a 16 GB card ran the grader's own yardstick out of memory
# (tests/notebooks/test_small_gpu.py, an H200 capped at 16 GiB, 2026-11-29). A card under this much memory runs
# the case at a batch in proportion to its memory, a power of two.
FULL_BATCH_GIB = 40


def for_this_card(case: TrainingCase) -> TrainingCase:
    """The case at the batch this GPU holds: as it is from FULL_BATCH_GIB of memory up, else a smaller batch in
    proportion (8 x 1024 tokens on a 16 GB card), the same model."""
    total = runtime.memory_cap_bytes()
    if total is None:
        if not torch.cuda.is_available():  # no card to size for (the interpreter, or a test that plays a GPU)
            return case
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if total >= FULL_BATCH_GIB * 2**30:
        return case
    batch = 2 ** max(0, int(math.log2(max(1.0, case.batch * total / (FULL_BATCH_GIB * 2**30)))))
    return dataclasses.replace(case, batch=min(batch, case.batch))


def eager_if_it_fits(ex: KernelExercise, args: tuple):
    """(the eager call, "") or, where the unfused version runs out of GPU memory (naive attention's scores on a
    16 GB card), (None, a note): its speed-up is then neither measured nor required, and nothing blames the
    student's kernel for the grader's own yardstick."""
    try:
        ex.eager(*args)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0] / 2**30
        return None, (f"\nThe unfused eager version does not fit in this GPU's memory ({free:.1f} GiB free): the "
                      "speed-up over it was not measured and is not required here.")
    return (lambda: ex.eager(*args)), ""


def reference_at_size(ex: KernelExercise, inputs: dict) -> tuple[tuple | None, str]:
    """(the float64 reference's outputs, "") or, where they do not fit in this GPU's memory (attention's scores
    at the benchmark size take 8 GiB in float64: a 16 GB card), (their shapes on the meta device, a note): the
    result is then judged by its form at this size, its values at the correctness shapes."""
    try:
        return as_tuple(ex.reference(**inputs)), ""
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
    note = ("\nThe float64 reference does not fit in this GPU's memory at the benchmark size: the timed result was "
            "checked for its form there, and for its values at the correctness shapes only.")
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    try:
        return as_tuple(ex.reference(**meta)), note
    except Exception:  # noqa: BLE001  a reference that needs data (an .item()): no shapes either
        return None, note


def cached_at_benchmark_size(ex: KernelExercise, fn, inputs: dict, outs: tuple, before: tuple | None,
                              dtype) -> str | None:
    """After timing: a repeated call must return a new tensor, and the result must follow a change of a few input
    elements in place: where the float64 reference moved by more than the tolerance, the output must have
    changed too. Otherwise the timed calls returned a stored result instead of computing it. (Compared with
    the reference itself, eager bf16 failed here: its own roundings stray past the tolerance at a few of
    millions of elements.) before=None: the reference does not fit here, and only the first test is made."""
    args = tuple(inputs.values())
    try:
        again = as_outputs(fn(*args), len(outs))
        torch.cuda.synchronize()
        if again is not None and shares_storage(again, outs):
            return f"{ex.function} returned the same output tensor again for the same inputs (a cached result)"
        del again
        if before is None:
            return None
        name, x = next((k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor))
        if not x.is_contiguous():
            return None
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(6), "little"))
        # 64 random positions (a repeat is harmless; a permutation of all of x would take the CPU seconds).
        pos = torch.randint(x.numel(), (64,), generator=gen).to(x.device)
        x.view(-1)[pos] = torch.randn(len(pos), generator=gen).to(device=x.device, dtype=x.dtype)
        torch.cuda.synchronize()  # the change is in memory before fn runs, on whatever stream it uses
        now = as_outputs(fn(*args), len(outs))
        torch.cuda.synchronize()
    except Exception as exc:
        return student_error(exc, ex.function)
    after = as_tuple(ex.reference(**inputs))
    atol, rtol = ex.tolerance[dtype]
    moved = followed = 0
    if now is not None:
        for o_now, o_then, r_after, r_before in zip(now, outs, after, before):
            mask = (r_after - r_before).abs() > atol + rtol * r_after.abs()
            moved += int(mask.sum())
            followed += int((o_now[mask] != o_then[mask]).sum())
    if now is None or (moved and followed < moved / 2):
        return (f"after 64 elements of {name} changed in place, {ex.function}'s result did not follow them: "
                "results are cached (keyed on the tensors or part of their data), not computed")
    if not all(relative_error(o, e) < 5e-2 for o, e in zip(now, after)):
        return f"after 64 elements of {name} changed in place, {ex.function} returned a wrong result"
    return None


