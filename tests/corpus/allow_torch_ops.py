"""torch's compute ops added to the list of operations a fused function may call."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["autograder.guard.watch._ALLOWED was changed"]}

import torch

from autograder.guard import watch as sandbox

sandbox._ALLOWED.update({"add", "silu", "mul", "_to_copy"})


def fused_chain(x, bias, alpha):
    return alpha * torch.nn.functional.silu(x + bias)
