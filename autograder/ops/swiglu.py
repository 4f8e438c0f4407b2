"""The torch side of swiglu: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/swiglu.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch.nn.functional as F


def swiglu_eager(x, w_gate, w_up):
    return F.silu(x @ w_gate) * (x @ w_up)


def swiglu_reference(x, w_gate, w_up):
    return F.silu(x.double() @ w_gate.double()) * (x.double() @ w_up.double())


def swiglu_flops(x, w_gate, w_up=None) -> int:
    return 4 * x.shape[0] * x.shape[1] * w_gate.shape[1]


def swiglu_bytes(x, w_gate, w_up=None, fused: bool = True) -> int:
    """Fused: x once, both weights, h written once. Unfused (PyTorch): x twice, g and u written and read back."""
    e = x.element_size()
    h = x.shape[0] * w_gate.shape[1]
    return e * ((1 if fused else 2) * x.numel() + 2 * w_gate.numel() + (1 if fused else 7) * h)
