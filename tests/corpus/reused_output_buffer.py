"""One output buffer per shape, written by the kernel on every call: each call overwrites the last result."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["two calls returned the same output tensor"]}

import torch

from kernels.fused_chain import _fused_chain_kernel

_buffers = {}


def fused_chain(x, bias, alpha):
    M, N = x.shape
    key = (M, N, x.dtype)
    if key not in _buffers:
        _buffers[key] = torch.empty((M, N), dtype=x.dtype, device=x.device)
    y = _buffers[key]
    _fused_chain_kernel[(M * ((N + 1023) // 1024),)](
        x, bias, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), alpha, BLOCK_M=1, BLOCK_N=1024)
    return y
