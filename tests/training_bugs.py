"""Broken backwards of notebook 07's decoder, as students write them, for the training criterion to tell from a
right one: the eager model in plain PyTorch (quick in the interpreter and on a GPU) with one piece's backward
replaced by a wrong one, or its parameters read from a stale copy. Each takes (params, tokens, targets, config)
and returns the mean loss, as decoder_loss does."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.specs import decoder as dec


class _NormNoProjection(torch.autograd.Function):
    """RMSNorm whose backward forgets the term through rstd: dx = rstd * w * dy."""

    @staticmethod
    def forward(ctx, x, w, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(xf, w, rstd)
        return (xf * rstd * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xf, w, rstd = ctx.saved_tensors
        dyf = dy.float()
        dw = (dyf * xf * rstd).reshape(-1, xf.shape[-1]).sum(0)
        return (dyf * w.float() * rstd).to(dy.dtype), dw.to(w.dtype), None


class _SiluMulSigmoidOnly(torch.autograd.Function):
    """silu(g) * u whose backward takes silu's derivative to be sigmoid(g) (the g·σ(1-σ) term missing)."""

    @staticmethod
    def forward(ctx, g, u):
        ctx.save_for_backward(g, u)
        return F.silu(g) * u

    @staticmethod
    def backward(ctx, ds):
        g, u = ctx.saved_tensors
        gf, uf, dsf = g.float(), u.float(), ds.float()
        return (dsf * uf * torch.sigmoid(gf)).to(g.dtype), (dsf * F.silu(gf)).to(u.dtype)


class _AttentionNoDelta(torch.autograd.Function):
    """Causal attention whose backward takes dS = P * dP (the softmax's second term, delta, missing)."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.float() for t in ctx.saved_tensors)
        scale = 1 / math.sqrt(q.shape[-1])
        n = q.shape[-2]
        s = (q @ k.transpose(-1, -2)) * scale
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1)
        ds = p * (do.float() @ v.transpose(-1, -2)) * scale
        dt = ctx.saved_tensors[0].dtype
        return (ds @ k).to(dt), (ds.transpose(-1, -2) @ q).to(dt), (p.transpose(-1, -2) @ do.float()).to(dt)


class _EmbeddingOverwrites(torch.autograd.Function):
    """A row gather whose backward writes each row's gradient instead of adding it: a token met twice in a batch
    keeps one of its gradients."""

    @staticmethod
    def forward(ctx, table, ids):
        ctx.save_for_backward(ids)
        ctx.rows = table.shape[0]
        return table[ids]

    @staticmethod
    def backward(ctx, dx):
        (ids,) = ctx.saved_tensors
        dtable = torch.zeros(ctx.rows, dx.shape[-1], dtype=dx.dtype, device=dx.device)
        dtable[ids.reshape(-1)] = dx.reshape(-1, dx.shape[-1])
        return dtable, None


def _decoder(params, tokens, targets, cfg, norm=None, attention=None, silu_mul=None, embed=None):
    """The eager decoder (specs.decoder.decoder_hidden's structure) with any of its pieces replaced."""
    norm = norm or dec.rmsnorm
    b, t = tokens.shape
    x = embed(params["embed"], tokens) if embed else params["embed"][tokens]
    for i in range(cfg.layers):
        p = f"layers.{i}."
        qkv = norm(x, params[p + "attn_norm"], cfg.eps) @ params[p + "wqkv"].t()
        q, k, v = qkv.view(b, t, 3, cfg.heads, cfg.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        a = attention(q, k, v) if attention else F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, t, cfg.dim) @ params[p + "wo"].t()
        g, u = (norm(x, params[p + "mlp_norm"], cfg.eps) @ params[p + "w_gate_up"].t()).chunk(2, dim=-1)
        x = x + (silu_mul(g, u) if silu_mul else F.silu(g) * u) @ params[p + "w_down"].t()
    h = norm(x, params["norm"], cfg.eps).reshape(b * t, cfg.dim)
    return F.cross_entropy((h @ params["lm_head"].t()).float(), targets.reshape(-1))


def norm_without_projection(params, tokens, targets, config):
    return _decoder(params, tokens, targets, config, norm=_NormNoProjection.apply)


def silu_derivative_sigmoid_only(params, tokens, targets, config):
    return _decoder(params, tokens, targets, config, silu_mul=_SiluMulSigmoidOnly.apply)


def attention_without_delta(params, tokens, targets, config):
    return _decoder(params, tokens, targets, config, attention=_AttentionNoDelta.apply)


def embedding_gradient_overwritten(params, tokens, targets, config):
    return _decoder(params, tokens, targets, config, embed=_EmbeddingOverwrites.apply)


_STALE: dict = {}


def stale_lm_head(params, tokens, targets, config):
    """Keeps a copy of lm_head from the first call on its storage (a cached transposed or cast weight) and computes
    the logits from it ever after; the gradient still reaches lm_head, but the optimizer's updates never reach the
    forward. One call at a time is right: only a run of steps shows it."""
    w = params["lm_head"]
    key = (w.data_ptr(), tuple(w.shape), w.dtype)
    if key not in _STALE:
        _STALE[key] = w.detach().clone()
    stale = _STALE[key] + (w - w.detach())
    return dec.decoder_loss_eager({**params, "lm_head": stale}, tokens, targets, config)


BROKEN = {
    "norm_without_projection": norm_without_projection,
    "silu_derivative_sigmoid_only": silu_derivative_sigmoid_only,
    "attention_without_delta": attention_without_delta,
    "embedding_gradient_overwritten": embedding_gradient_overwritten,
    "stale_lm_head": stale_lm_head,
}
