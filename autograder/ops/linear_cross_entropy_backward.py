"""The torch side of linear cross-entropy's forward and backward: what grading needs and a student may see (the
float64 loss and gradients, the eager version as a training loop runs it, the flops). The Triton kernels are in
kernels/linear_cross_entropy_backward.py; the grader never imports them."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _loss_and_grads(h, w, targets, dtype, logits_dtype):
    hl, wl = h.detach().to(dtype).requires_grad_(), w.detach().to(dtype).requires_grad_()
    with torch.enable_grad():
        loss = F.cross_entropy((hl @ wl.t()).to(logits_dtype), targets.long())
        dh, dw = torch.autograd.grad(loss, (hl, wl))
    return loss.detach(), dh, dw


def linear_cross_entropy_backward_reference(h, w, targets):
    """(mean loss, dh, dw) in float64."""
    return _loss_and_grads(h, w, targets, torch.float64, torch.float64)


def linear_cross_entropy_backward_eager(h, w, targets):
    """A training loop's version: the logits in full, upcast to float32 for the loss, and autograd's backward
    (which keeps the float32 logits and makes their gradient, M x V each)."""
    loss, dh, dw = _loss_and_grads(h, w, targets, h.dtype, torch.float32)
    return loss, dh, dw


def linear_cross_entropy_backward_flops(h, w, targets=None) -> int:
    """Three GEMMs of 2 M V K: the logits, dh = dlogits w and dw = dlogitsᵀ h."""
    return 6 * h.shape[0] * h.shape[1] * w.shape[0]
