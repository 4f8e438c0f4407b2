"""Notebook 07's capstone: the Llama-style decoder of autograder/specs/decoder.py assembled from the course's fused
kernels, each behind a torch.autograd.Function that says what it saves for its backward.

    RMSNorm            kernels/rmsnorm.py + rmsnorm_backward.py   saves x and the weight; rstd recomputed
    attention          kernels/flash_attention(_backward).py      saves qkv, o and the log-sum-exp (B·H·T)
    SwiGLU activation  kernels/silu_mul.py                        saves the GEMM's output; σ(g) recomputed
    lm_head + loss     kernels/linear_cross_entropy_backward.py   computes dh and dW in the forward, chunk by
                                                                  chunk, and saves them: never the logits
The products (fused QKV, the attention's output projection, the MLP's fused gate-and-up and its down projection)
are cuBLAS GEMMs, the embedding a gather with an atomic backward: fusion here is about everything between the GEMMs.
"""

from __future__ import annotations

import torch

from autograder.specs.decoder import DecoderConfig, check_parameters
from autograder.measure.timing import recording
from kernels.flash_attention import flash_attention
from kernels.flash_attention_backward import flash_attention_backward
from kernels.linear_cross_entropy_backward import linear_cross_entropy_forward_backward_cublas
from kernels.rmsnorm_backward import RMSNormFunction
from kernels.silu_mul import SiluMulFunction


class CausalAttentionFunction(torch.autograd.Function):
    """o = CausalAttentionFunction.apply(qkv, heads): causal attention over the fused projection's output qkv
    (B, T, 3·d), returning (B·T, d) for the output projection. q, k and v are strided views of qkv, o is written
    as (B, T, H, D) and the backward writes dq, dk and dv into one (B, T, 3·d) gradient: no copy either way
    (a (B, H, T, D) layout would cost a transpose of o forward and a stack and a copy of the gradients back)."""

    @staticmethod
    def forward(ctx, qkv, heads):
        b, t, _ = qkv.shape
        q, k, v = _heads(qkv, heads)
        o = torch.empty((b, t, heads, q.shape[-1]), dtype=qkv.dtype, device=qkv.device)
        _, lse = flash_attention(q, k, v, causal=True, out=o.transpose(1, 2))
        ctx.save_for_backward(qkv, o, lse)
        ctx.heads = heads
        return o.view(b * t, -1)

    @staticmethod
    def backward(ctx, do):
        qkv, o, lse = ctx.saved_tensors
        b, t, _ = qkv.shape
        dqkv = torch.empty_like(qkv)
        do = do.contiguous().view(o.shape).transpose(1, 2)
        flash_attention_backward(*_heads(qkv, ctx.heads), o.transpose(1, 2), lse, do, causal=True,
                                 out=_heads(dqkv, ctx.heads))
        return dqkv, None


def _heads(qkv: torch.Tensor, heads: int):
    """q, k, v as (B, H, T, D) views of a (B, T, 3·H·D) tensor."""
    b, t, width = qkv.shape
    return qkv.view(b, t, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4).unbind(0)


class EmbeddingFunction(torch.autograd.Function):
    """x = EmbeddingFunction.apply(table, ids): a gather forward; the backward adds each row's gradient into a
    float32 table with atomics (index_add_). PyTorch's own embedding backward sorts the ids and reads the number
    of distinct ones back to the host: a synchronisation that leaves the GPU idle while the next step's forward
    is launched, and that a CUDA graph cannot capture."""

    @staticmethod
    def forward(ctx, table, ids):
        ctx.save_for_backward(ids)
        ctx.table_shape, ctx.table_dtype = table.shape, table.dtype
        return table[ids]

    @staticmethod
    def backward(ctx, dx):
        (ids,) = ctx.saved_tensors
        grad = torch.zeros(ctx.table_shape, dtype=torch.float32, device=dx.device)
        return grad.index_add_(0, ids, dx.float()).to(ctx.table_dtype), None


class LinearCrossEntropyFunction(torch.autograd.Function):
    """loss = LinearCrossEntropyFunction.apply(h, w, targets): the gradients are made in the forward, while each
    chunk's logits exist, and the backward only scales them by the loss's own gradient (1 in training)."""

    @staticmethod
    def forward(ctx, h, w, targets):
        loss, dh, dw = linear_cross_entropy_forward_backward_cublas(h, w, targets)
        ctx.save_for_backward(dh, dw)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        dh, dw = ctx.saved_tensors
        # Scaled by the loss's gradient (1 in plain training; not 1 under loss scaling or accumulation): one pass
        # over dh and dW in a single launch, cheaper than the host sync that testing it for 1 would cost.
        dh, dw = torch._foreach_mul([dh, dw], dloss)  # not in place: a second backward (retain_graph) stays right
        return dh, dw, None


def decoder_loss(params: dict, tokens: torch.Tensor, targets: torch.Tensor, cfg: DecoderConfig) -> torch.Tensor:
    """The mean cross-entropy (float32, 0-d) of the decoder over tokens (B, T) against targets (B, T), with a
    backward through the course's kernels."""
    check_parameters(params, cfg)
    b, t = tokens.shape
    x = EmbeddingFunction.apply(params["embed"], tokens.reshape(-1))  # (B·T, d)
    for i in range(cfg.layers):
        p = f"layers.{i}."
        qkv = RMSNormFunction.apply(x, params[p + "attn_norm"], cfg.eps) @ params[p + "wqkv"].t()
        o = CausalAttentionFunction.apply(qkv.view(b, t, 3 * cfg.dim), cfg.heads)
        x = torch.addmm(x, o, params[p + "wo"].t())  # the residual added in cuBLAS's epilogue: no kernel of its own
        gu = RMSNormFunction.apply(x, params[p + "mlp_norm"], cfg.eps) @ params[p + "w_gate_up"].t()
        x = torch.addmm(x, SiluMulFunction.apply(gu), params[p + "w_down"].t())
    h = RMSNormFunction.apply(x, params["norm"], cfg.eps)
    return LinearCrossEntropyFunction.apply(h, params["lm_head"], targets.reshape(-1))


def cuda_graphed_step(loss_fn, params: dict, tokens: torch.Tensor, targets: torch.Tensor, cfg: DecoderConfig):
    """A forward and backward of loss_fn recorded once as a CUDA graph: step(tokens, targets) copies the batch into
    the graph's own input buffers, replays every kernel of the step with one launch and returns (loss, grads),
    buffers the next replay overwrites. A small model's step is ~90 launches of a few microseconds of GPU work
    each: Python's launch path, not the GPU, then sets the pace, and a replay removes it. Everything the step does
    must stay on the GPU (no .item(), no host synchronisation) and keep its shapes."""
    static_tokens, static_targets = tokens.clone(), targets.clone()
    leaves = list(params.values())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up away from the capture: compilation, the allocator's first blocks
        for _ in range(2):
            torch.autograd.grad(loss_fn(params, static_tokens, static_targets, cfg), leaves)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with recording(graph):
        loss = loss_fn(params, static_tokens, static_targets, cfg)
        grads = torch.autograd.grad(loss, leaves)

    def step(new_tokens: torch.Tensor | None = None, new_targets: torch.Tensor | None = None):
        if new_tokens is not None:
            static_tokens.copy_(new_tokens)
            static_targets.copy_(new_targets)
        graph.replay()
        return loss, grads

    return step
