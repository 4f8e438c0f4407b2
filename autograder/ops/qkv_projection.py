"""The torch side of qkv projection: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/qkv_projection.py, which imports these; the grader never imports it."""

from __future__ import annotations

import torch


def split_qkv(out: torch.Tensor, kv_width: int):
    """(q, k, v): the column blocks of an (M, n_q + 2 kv_width) output."""
    n_q = out.shape[1] - 2 * kv_width
    return out[:, :n_q], out[:, n_q : n_q + kv_width], out[:, n_q + kv_width :]


def qkv_projection_eager(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    """Three GEMMs, one per projection, each reading x: the unfused version."""
    w_q, w_k, w_v = split_qkv(w_qkv.t(), kv_width)
    return x @ w_q, x @ w_k, x @ w_v


def qkv_projection_concat(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    """One cuBLAS GEMM over the concatenated weight, then views: what inference engines do."""
    return split_qkv(x @ w_qkv.t(), kv_width)


def qkv_projection_reference(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    return split_qkv(x.double() @ w_qkv.double().t(), kv_width)


def qkv_projection_bytes(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int = 0, fused: bool = True) -> int:
    """Read x (once fused, three times not), read w_qkv, write the (M, N) output."""
    e = x.element_size()
    M, K = x.shape
    N = w_qkv.shape[0]
    return e * ((1 if fused else 3) * M * K + N * K + M * N)


def qkv_projection_flops(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int = 0) -> int:
    return 2 * x.shape[0] * x.shape[1] * w_qkv.shape[0]
