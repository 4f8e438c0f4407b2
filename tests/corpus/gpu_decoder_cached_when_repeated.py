"""The capstone's loss remembers each batch it has seen (by the tokens' values) and, on a repeat, returns the loss
it computed then, joined to every parameter by a product with zero: autograd's gradients are zeros, made by a few
tiny kernels. Every graded case is a first call; the performance criterion's timed calls repeat three batches.
Without the audit it would pass, far faster than torch.compile. The timing audit every timed criterion goes through
(criteria/audit.py) finds a rate above this GPU's bf16 matmul rate for the flops a forward and backward must do:
failed. (A cache keyed on the tensors themselves is found sooner: its timed calls' gradients differ from those of
the same step called untimed on new tensors.)"""
EXERCISE = "07.decoder"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["impossible measurement: work escaped the timer", "flops a forward and backward must do"]}

import torch

from kernels.decoder import decoder_loss as _right

_seen = {}


def decoder_loss(params, tokens, targets, config):
    key = (tuple(tokens.shape), int(tokens.sum()), int((tokens * torch.arange(tokens.numel(), device=tokens.device)
                                                          .view_as(tokens)).sum()))
    if key in _seen:
        return _seen[key] + sum((p.reshape(-1)[:1].float() * 0).sum() for p in params.values())
    loss = _right(params, tokens, targets, config)
    _seen[key] = loss.detach()
    return loss
