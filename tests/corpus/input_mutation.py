"""The result is written over x (saves an allocation, destroys the caller's tensor)."""
EXERCISE = "01.fused_chain"
ROUTE = "check"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["input x was modified"]}

from kernels.fused_chain import _fused_chain_kernel


def fused_chain(x, bias, alpha):
    M, N = x.shape
    _fused_chain_kernel[(M * ((N + 1023) // 1024),)](
        x, bias, x, M, N, x.stride(0), x.stride(1), x.stride(0), x.stride(1), alpha, BLOCK_M=1, BLOCK_N=1024)
    return x
