"""No Triton at all: PyTorch computes the result."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness", "fusion"]
FAILS = {"correctness": ["the result was computed by torch", "not by a Triton kernel"],
         "fusion": ["no Triton kernel ran", "torch silu"]}

import torch


def fused_chain(x, bias, alpha):
    return (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
