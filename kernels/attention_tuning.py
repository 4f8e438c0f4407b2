"""The course's FlashAttention kernels launched with any tile setting, and the settings a Hopper sweep walks.

kernels/flash_attention.py and kernels/flash_attention_backward.py launch their kernels with settings chosen by
timing a few candidates on an H100 and an H200. To ask whether a wider search would have found more, a benchmark
(python -m bench.hopper) launches the same kernels, unchanged, with every setting of a larger space:
BLOCK_M and BLOCK_N 64 or 128, 2 to 5 pipeline stages, 4 or 8 warps. The launchers here pass exactly the
arguments the course's launchers pass, so a setting the course uses compiles once for both. Each takes
warmup=True to compile without running (Triton's handle to the compiled kernel is returned), so that many
settings can be compiled at once on a machine's cores (triton.AsyncCompileMode).

Settings that cannot work are left out before anything is compiled, with the reason: those whose tiles need more
shared memory than a block may have. The estimate, e D (BLOCK_M + 2 stages BLOCK_N) for the Q tile and a K and a
V tile per pipeline stage, is what Triton 3.6 allocates for the portable kernel compiled for sm_90, to the byte
(the TMA kernel adds 1 KB of barriers). Registers are not estimated: compiled for sm_90, most settings at D = 128
take all 255 registers a thread may have without spilling, so only the compiled kernel can say
(python -m bench.hopper records registers and spills of every setting it compiles).
"""

from __future__ import annotations

import itertools
import math

import torch
import triton

from kernels.flash_attention import (
    LOG2E,
    _check_attention_inputs,
    _flash_attention_kernel,
    _flash_attention_tma_kernel,
)
from kernels.flash_attention_backward import (
    _check_backward_inputs,
    _delta_kernel,
    _dkdv_kernel,
    _dq_kernel,
)
from kernels.tma import descriptor

SHARED_BYTES = 232448  # the most shared memory a block may have on an H100 or H200 (227 KB)
FORWARD_AXES = {"BLOCK_M": (64, 128), "BLOCK_N": (64, 128), "num_stages": (2, 3, 4, 5), "num_warps": (4, 8)}


def forward_shared_bytes(cfg: dict, head_dim: int, element_size: int = 2) -> int:
    """The Q tile and num_stages buffers of a K and a V tile: what the forward keeps in shared memory."""
    return element_size * head_dim * (cfg["BLOCK_M"] + 2 * cfg["num_stages"] * cfg["BLOCK_N"])


def why_not(cfg: dict, head_dim: int, element_size: int = 2) -> str | None:
    """Why a forward setting cannot work at this head size, or None."""
    shared = forward_shared_bytes(cfg, head_dim, element_size)
    if shared > SHARED_BYTES:
        return f"shared memory: about {shared // 1024} KB for its tiles, {SHARED_BYTES // 1024} KB at most"
    return None


def forward_space(head_dim: int, first: dict, element_size: int = 2) -> tuple[list[dict], dict[str, str]]:
    """(settings to try, {setting: why it is left out}) over FORWARD_AXES. The settings are ordered from `first`
    (the course's own) outwards, fewest changed axes first, then nearest in stages: a sweep cut short by its time
    budget has tried the neighbourhood of the course's choice."""
    kept, left_out = [], {}
    for values in itertools.product(*FORWARD_AXES.values()):
        cfg = dict(zip(FORWARD_AXES, values))
        reason = why_not(cfg, head_dim, element_size)
        if reason:
            left_out[setting_name(cfg)] = reason
        else:
            kept.append(cfg)

    def distance(cfg):
        changed = sum(cfg[k] != first.get(k) for k in FORWARD_AXES)
        return changed, abs(cfg["num_stages"] - first.get("num_stages", 3)), cfg["num_stages"]

    return sorted(kept, key=distance), left_out


def setting_name(cfg: dict) -> str:
    """A setting as one short string: "128x64 s3 w8" (tiles, stages, warps), flags after it."""
    tiles = "x".join(str(cfg[k]) for k in ("BLOCK_M", "BLOCK_N") if k in cfg)
    flags = " ".join(f"{k.lower()}={v}" for k, v in cfg.items()
                     if k not in ("BLOCK_M", "BLOCK_N", "num_stages", "num_warps"))
    return f"{tiles} s{cfg['num_stages']} w{cfg['num_warps']}" + (f" {flags}" if flags else "")


def flash_attention_with(q, k, v, causal: bool, cfg: dict, warmup: bool = False):
    """(o, lse) from the course's portable kernel (kernels.flash_attention.flash_attention) launched with cfg;
    with warmup=True, the compiled kernel's handle instead, nothing run."""
    _check_attention_inputs(q, k, v, causal)
    B, H, N, D = q.shape
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
    args = (q, k, v, o, lse, H, N, k.shape[2], *q.stride(), *k.stride(), *v.stride(), *o.stride()[:3],
            LOG2E / math.sqrt(D))
    meta = dict(HEAD_DIM=D, CAUSAL=causal, PRECISION="ieee" if q.dtype == torch.float32 else None, **cfg)
    if warmup:
        return _flash_attention_kernel.warmup(*args, grid=grid, **meta)
    _flash_attention_kernel[grid](*args, **meta)
    return o, lse


def flash_attention_tma_with(q, k, v, causal: bool, cfg: dict, warmup: bool = False):
    """(o, lse) from the course's TMA kernel (kernels.flash_attention.flash_attention_tma's Hopper path) launched
    with cfg on contiguous 16-bit q, k, v, at any head size and length; warmup as in flash_attention_with."""
    _check_attention_inputs(q, k, v, causal)
    if not all(t.is_contiguous() for t in (q, k, v)) or q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError("the TMA kernel reads contiguous 16-bit q, k and v")
    B, H, N, D = q.shape
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N, bm), B * H)
    descriptors = (descriptor(t.view(-1, D), [rows, D]) for t, rows in ((q, bm), (k, bn), (v, bn)))
    args = (*descriptors, o, lse, N, k.shape[2], LOG2E / math.sqrt(D))
    meta = dict(HEAD_DIM=D, CAUSAL=causal, **cfg)
    if warmup:
        return _flash_attention_tma_kernel.warmup(*args, grid=grid, **meta)
    _flash_attention_tma_kernel[grid](*args, **meta)
    return o, lse


# The backward's two main kernels, each timed over these with the other at the course's setting (D = 128: the
# course's dK/dV setting is the second, its dQ setting the first of DQ_SPACE). Kept small: a backward sweep
# compiles two kernels a setting, each about twice the forward's size.
DKDV_SPACE = tuple({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
                   for bm, bn, w, st in ((32, 128, 8, 3), (64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3),
                                         (128, 128, 8, 2)))
DQ_SPACE = tuple({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
                 for bm, bn, w, st in ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 4, 3),
                                       (128, 32, 4, 3)))


def flash_attention_backward_with(q, k, v, o, lse, do, causal: bool, kv_cfg: dict, q_cfg: dict,
                                  warmup: bool = False):
    """(dq, dk, dv) from the course's backward kernels (kernels.flash_attention_backward) launched with kv_cfg
    (dK and dV) and q_cfg (dQ); with warmup=True, the handles of the three compiled kernels instead."""
    _check_backward_inputs(q, k, v, o, lse, do, causal)
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    lse = lse.contiguous()
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(D)
    common = {"HEAD_DIM": D, "CAUSAL": causal, "PRECISION": "ieee" if q.dtype == torch.float32 else None}
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    launches = (
        (_delta_kernel, (triton.cdiv(N, 64), B * H), (o, do, delta, H, N, *o.stride(), *do.stride()),
         {"BLOCK_M": 64, "HEAD_DIM": D}),
        (_dkdv_kernel, (triton.cdiv(n_kv, kv_cfg["BLOCK_N"]), B * H),
         (q, k, v, do, lse, delta, dk, dv, H, N, n_kv, *strides, *dk.stride()[:3], LOG2E * scale, scale),
         {**common, **kv_cfg}),
        (_dq_kernel, (triton.cdiv(N, q_cfg["BLOCK_M"]), B * H),
         (q, k, v, do, lse, delta, dq, H, N, n_kv, *strides, *dq.stride()[:3], LOG2E * scale, scale),
         {**common, **q_cfg}),
    )
    if warmup:
        return [kernel.warmup(*args, grid=grid, **meta) for kernel, grid, args, meta in launches]
    for kernel, grid, args, meta in launches:
        kernel[grid](*args, **meta)
    return dq, dk, dv
