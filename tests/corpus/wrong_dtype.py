"""The output is always float32, whatever the input's dtype."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["output dtype is float32, expected float16"]}

import torch

from kernels.fused_chain import _fused_chain_kernel


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty((M, N), dtype=torch.float32, device=x.device)  # should be x.dtype
    _fused_chain_kernel[(M * ((N + 1023) // 1024),)](
        x, bias, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), alpha, BLOCK_M=1, BLOCK_N=1024)
    return y
