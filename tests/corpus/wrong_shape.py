"""The result comes back flattened: right numbers, wrong shape."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["output has shape (1,), expected (1, 1)"]}

import torch

from kernels.fused_chain import _fused_chain_kernel


def fused_chain(x, bias, alpha):
    M, N = x.shape
    y = torch.empty(M * N, dtype=x.dtype, device=x.device)  # flat, and returned flat
    _fused_chain_kernel[(M * ((N + 1023) // 1024),)](
        x, bias, y, M, N, x.stride(0), x.stride(1), N, 1, alpha, BLOCK_M=1, BLOCK_N=1024)
    return y
