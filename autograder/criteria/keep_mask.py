"""Part of correctness for a dropout drawn inside the kernel (KernelExercise.keep_rates): the keep mask the
kernel really used, read back from its output, must look like independent draws.

Called with x = 0 and y = 1, the kernel's h is 1 / (1 - p) where it kept an element and 0 where it dropped it, so
the mask is h != 0 whatever the kernel did. Then, at each drop probability p:
  - two neighbouring rows agree on a fraction of their elements near r^2 + (1 - r)^2, r the fraction kept (not 1:
    rows have masks of their own), and so do two neighbouring columns (a row is not kept or dropped whole);
  - given draws that independent, the kept fraction is within 5 standard deviations of a binomial's 1 - p over
    the whole tensor;
and the same seed gives the same mask again, another seed a different one. The values given the mask are the
float64 reference's business (the correctness cases).
"""

from __future__ import annotations

import math

import torch

from autograder import runtime
from autograder.criteria.cases import student_error
from autograder.criteria.outputs import as_outputs
from autograder.specs.exercise import KernelExercise

SIGMAS = 5.0  # a check fails an honest kernel about once in 3.5 million


def _shape() -> tuple[int, int]:
    return (512, 4096) if runtime.has_gpu() else (48, 1024)  # the interpreter draws about 50k numbers a second


def _mask(ex: KernelExercise, fn, p: float, seed: int) -> tuple[torch.Tensor | None, str | None]:
    """The mask fn kept, from one call on x = 0, y = 1; or a message saying why it cannot be read."""
    m, h = _shape()
    device = runtime.device()
    x = torch.zeros(m, h, device=device)
    y = torch.ones(m, h, device=device)
    w = torch.ones(h, device=device)
    try:
        outs = as_outputs(fn(x, y, w, p, seed, 1e-5), len(ex.output_names))
    except Exception as exc:  # noqa: BLE001  the student's code: any error is a finding
        return None, student_error(exc, ex.function)
    where = f"{ex.function}(x = zeros({m}, {h}), y = ones, p = {p}, seed = {seed})"
    if outs is None:
        return None, f"{where} did not return ({', '.join(ex.output_names)})"
    hh = outs[-1].detach().float().cpu()
    if hh.shape != (m, h):
        return None, f"{where}: h has shape {tuple(hh.shape)}, expected {(m, h)}"
    kept = hh != 0
    scale = 1.0 / (1.0 - p)
    bad = kept & ((hh - scale).abs() > 1e-5 * scale)
    if bad.any():
        got = hh[bad][0].item()
        return None, (f"{where}: a kept element of h is {got:.6g}, expected 1 / (1 - p) = {scale:.6g}: scale the "
                      "kept values of y by 1 / (1 - p) and drop the others to 0")
    return kept, None


def _agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a == b).double().mean().item()


def _bound(q: float, n: int) -> float:
    return SIGMAS * math.sqrt(q * (1 - q) / n) + 1.0 / n


def problem(ex: KernelExercise, fn, seed: int) -> str | None:
    """What is wrong with the masks fn draws, in words, or None."""
    seed = seed % (2**31 - 2)
    for p in ex.keep_rates:
        kept, why = _mask(ex, fn, p, seed)
        if why:
            return why
        n = kept.numel()
        rate = kept.double().mean().item()
        q = rate * rate + (1 - rate) * (1 - rate)  # two independent draws at the rate the kernel kept
        rows = _agreement(kept[1:], kept[:-1])
        if abs(rows - q) > _bound(q, kept[1:].numel()):
            return (f"at p = {p} neighbouring rows agree on {rows:.4f} of their mask, independent draws on about "
                    f"{q:.4f}: every row needs draws of its own (offsets numbering the whole tensor, row * H + col)")
        cols = _agreement(kept[:, 1:], kept[:, :-1])
        if abs(cols - q) > _bound(q, kept[:, 1:].numel()):
            return (f"at p = {p} neighbouring columns agree on {cols:.4f} of their mask, independent draws on about "
                    f"{q:.4f}: draw one number per element, not one per row")
        if abs(rate - (1 - p)) > _bound(p, n):
            return (f"at p = {p} the kernel kept {rate:.4f} of {n} elements; a keep probability of 1 - p = {1 - p:.4f} "
                    f"gives {1 - p:.4f} ± {_bound(p, n):.4f}: keep an element where tl.rand(seed, offset) > p")
    p = ex.keep_rates[len(ex.keep_rates) // 2]
    first, why = _mask(ex, fn, p, seed)
    again, why2 = _mask(ex, fn, p, seed)
    other, why3 = _mask(ex, fn, p, seed + 1)
    if why or why2 or why3:
        return why or why2 or why3
    if not torch.equal(first, again):
        return (f"at p = {p} two calls with the same seed dropped different elements: draw the mask from the seed "
                "argument (tl.rand(seed, offsets)), not from torch's generator or a state that changes between calls; "
                "a backward pass must be able to draw the same mask again")
    q = p * p + (1 - p) * (1 - p)
    if _agreement(first, other) > q + _bound(q, first.numel()):
        return (f"at p = {p} seeds {seed} and {seed + 1} gave (nearly) the same mask: the seed must go into "
                "tl.rand(seed, offsets)")
    return None
