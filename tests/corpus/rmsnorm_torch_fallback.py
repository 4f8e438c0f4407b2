"""RMSNorm by PyTorch's own F.rms_norm: right numbers, no kernel of the student's."""
EXERCISE = "02.rmsnorm"
ROUTE = "check"
CRITERIA = ["correctness", "fusion"]
FAILS = {"correctness": ["the result was computed by torch"], "fusion": ["no Triton kernel ran"]}

import torch


def rmsnorm(x, weight, eps):
    return torch.nn.functional.rms_norm(x.float(), (x.shape[1],), weight.float(), eps).to(x.dtype)
