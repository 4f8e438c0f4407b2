"""A mixture-of-experts router, fused: the softmax over E experts and the top k of each token in one pass.

logits (T, E) -> weights (T, k) float32, the probabilities of the k chosen experts renormalised to sum to 1, and
indices (T, k) int64, largest first; equal logits are taken lowest index first. The renormalised weights of the
top k of a softmax are the softmax over the k chosen logits alone, exp(z_i - z_max) / sum over the chosen, so the
kernel never needs the sum over all E experts. Bytes through HBM:
    PyTorch, op by op:  the cast to float32 (read e|x|, write 4|x|), softmax (read and write 4|x|), top-k (read
                        4|x|), then three small kernels over (T, k)                   about 17|x| for bf16 logits
    fused:  read the logits once, write k weights (4 bytes) and k indices (8 bytes) a token:
                        T E e + 12 T k
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autograder.specs.streaming_softmax import (  # noqa: F401  the torch side of the op, shared with the grader
    router_bytes,
    router_eager,
    router_reference,
)

@triton.jit
def _moe_router_kernel(x_ptr, w_ptr, i_ptr, T, E, stride_xt, stride_xe, K: tl.constexpr, K_PAD: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < T
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xt + cols[None, :] * stride_xe,
                mask=row_ok[:, None] & (cols[None, :] < E), other=-float("inf")).to(tl.float32)
    x = tl.where(row_ok[:, None], x, 0.0)  # rows past T (never stored) stay finite: no NaN from -inf - -inf
    slots = tl.arange(0, K_PAD)
    top = tl.full([BLOCK_T, K_PAD], -float("inf"), dtype=tl.float32)
    idx = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
    for j in tl.static_range(K):  # k passes of argmax-and-mask: the lowest index wins a tie
        best = tl.argmax(x, axis=1, tie_break_left=True)
        value = tl.max(x, axis=1)
        top = tl.where(slots[None, :] == j, value[:, None], top)
        idx = tl.where(slots[None, :] == j, best[:, None], idx)
        x = tl.where(cols[None, :] == best[:, None], -float("inf"), x)
    # The softmax over the k chosen logits: the renormalised top-k probabilities. top[:, 0] is the largest.
    first = tl.max(top, axis=1)
    e = tl.where(slots[None, :] < K, tl.exp(top - first[:, None]), 0.0)
    weights = e / tl.sum(e, axis=1)[:, None]
    out = rows[:, None].to(tl.int64) * K + slots[None, :]
    keep = row_ok[:, None] & (slots[None, :] < K)
    tl.store(w_ptr + out, weights, mask=keep)
    tl.store(i_ptr + out, idx.to(tl.int64), mask=keep)


def router_launch_settings(n_experts: int) -> tuple[int, int, int]:
    """(BLOCK_T, BLOCK_E, num_warps): a block of tokens whose logits fill about 4096 lanes."""
    block_e = triton.next_power_of_2(n_experts)
    block_t = max(1, min(64, 4096 // block_e))
    return block_t, block_e, 4


def moe_router(logits: torch.Tensor, k: int):
    """(weights (T, k) float32, indices (T, k) int64): the top k of softmax(logits) per token, renormalised over
    the k chosen, largest first, ties to the lowest index. logits (T, E) fp32, fp16 or bf16, any strides."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be (T, E), got shape {tuple(logits.shape)}")
    T, E = logits.shape
    if not 1 <= int(k) <= E:
        raise ValueError(f"k must be between 1 and the number of experts E = {E}, got {k}")
    if E > 4096:
        raise ValueError(f"E = {E} experts do not fit one block of registers (at most 4096)")
    k = int(k)
    weights = torch.empty((T, k), dtype=torch.float32, device=logits.device)
    indices = torch.empty((T, k), dtype=torch.int64, device=logits.device)
    if T == 0:
        return weights, indices
    block_t, block_e, warps = router_launch_settings(E)
    _moe_router_kernel[(triton.cdiv(T, block_t),)](
        logits, weights, indices, T, E, logits.stride(0), logits.stride(1), K=k, K_PAD=triton.next_power_of_2(k),
        BLOCK_T=block_t, BLOCK_E=block_e, num_warps=warps)
    return weights, indices
