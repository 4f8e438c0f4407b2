"""The capstone of notebook 07, a small Llama-style decoder: its configuration, parameters and eager model."""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
import torch.nn.functional as F

from autograder.specs.exercise import TrainingCase, TrainingExercise
from autograder.specs.text_corpus import token_ids

# ---------------------------------------------------------------- the torch side: decoder
# The torch side of notebook 07's capstone, a small Llama-style decoder: its configuration, its parameters, and
# the model in plain PyTorch (the eager yardstick; in float64, the reference its gradients are graded against).
#
#     x = embed[tokens]
#     per layer:  x = x + wo · attention(split(wqkv · rmsnorm(x, attn_norm)), causal)
#                 x = x + w_down · (silu(g) * u),   (g, u) = split(w_gate_up · rmsnorm(x, mlp_norm))
#     loss = cross_entropy(lm_head · rmsnorm(x, norm), targets), the mean over tokens
#
# Each projection is one GEMM: q, k and v from one (3d, d) weight, the gate and up halves of the MLP from one
# (2f, d) weight (horizontal fusion, notebook 03). There is no positional encoding: causal attention alone tells
# the model where a token is, which is enough for a model this small (the rotary embedding of real Llamas would
# be one more elementwise kernel on q and k). Weights are stored (out, in), as torch.nn.Linear stores them.

@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    vocab: int
    dim: int
    layers: int
    heads: int
    hidden: int  # the MLP's width f
    eps: float = 1e-5

    def __post_init__(self):
        for name in ("vocab", "dim", "layers", "heads", "hidden"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"DecoderConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def parameter_count(self, embeddings: bool = True) -> int:
        per_layer = 2 * self.dim + 4 * self.dim * self.dim + 3 * self.dim * self.hidden
        outside = self.dim + self.vocab * self.dim * (2 if embeddings else 1)
        return self.layers * per_layer + outside


def parameter_shapes(cfg: DecoderConfig) -> dict[str, tuple[int, ...]]:
    shapes = {"embed": (cfg.vocab, cfg.dim)}
    for i in range(cfg.layers):
        shapes.update({f"layers.{i}.attn_norm": (cfg.dim,), f"layers.{i}.wqkv": (3 * cfg.dim, cfg.dim),
                       f"layers.{i}.wo": (cfg.dim, cfg.dim), f"layers.{i}.mlp_norm": (cfg.dim,),
                       f"layers.{i}.w_gate_up": (2 * cfg.hidden, cfg.dim), f"layers.{i}.w_down": (cfg.dim, cfg.hidden)})
    shapes.update({"norm": (cfg.dim,), "lm_head": (cfg.vocab, cfg.dim)})
    return shapes


def init_parameters(cfg: DecoderConfig, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """GPT-2's initialisation: weights N(0, 0.02), the projections into the residual stream scaled down by
    sqrt(2 · layers), norms at 1. Drawn in float32 on the CPU, so every device and dtype starts from the same
    model; each call returns tensors of its own."""
    return {name: t.to(device=device, dtype=dtype, copy=True).requires_grad_() for name, t in _drawn(cfg, seed)}


@functools.lru_cache(maxsize=3)
def _drawn(cfg: DecoderConfig, seed: int) -> tuple[tuple[str, torch.Tensor], ...]:
    """The float32 draw on the CPU, kept for the next call and never handed out: drawing the timed model takes
    about a second on one core, and a grading starts a dozen models from the same few draws."""
    gen = torch.Generator().manual_seed(seed)
    drawn = []
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith("norm"):
            t = torch.ones(shape)
        else:
            std = 0.02 / (math.sqrt(2 * cfg.layers) if name.endswith(("wo", "w_down")) else 1.0)
            t = torch.randn(shape, generator=gen) * std
        drawn.append((name, t))
    return tuple(drawn)


def check_parameters(params: dict, cfg: DecoderConfig) -> None:
    shapes = parameter_shapes(cfg)
    missing = [n for n in shapes if n not in params]
    if missing:
        raise ValueError(f"parameters missing: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
    for name, shape in shapes.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(f"parameter {name} has shape {tuple(params[name].shape)}, the config wants {shape}")


def rmsnorm(x, weight, eps):
    """Statistics in float32, the result rounded once to x's dtype (as the course's kernels do)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def decoder_hidden(params: dict, tokens: torch.Tensor, cfg: DecoderConfig) -> torch.Tensor:
    """The final normed hidden states (B·T, d) of the eager model."""
    b, t = tokens.shape
    x = params["embed"][tokens]
    for i in range(cfg.layers):
        p = f"layers.{i}."
        qkv = rmsnorm(x, params[p + "attn_norm"], cfg.eps) @ params[p + "wqkv"].t()
        q, k, v = qkv.view(b, t, 3, cfg.heads, cfg.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, t, cfg.dim) @ params[p + "wo"].t()
        g, u = (rmsnorm(x, params[p + "mlp_norm"], cfg.eps) @ params[p + "w_gate_up"].t()).chunk(2, dim=-1)
        x = x + (F.silu(g) * u) @ params[p + "w_down"].t()
    return rmsnorm(x, params["norm"], cfg.eps).reshape(b * t, cfg.dim)


def decoder_loss_eager(params: dict, tokens: torch.Tensor, targets: torch.Tensor, cfg: DecoderConfig):
    """The mean cross-entropy over all B·T tokens, the logits upcast to float32 as training loops do."""
    h = decoder_hidden(params, tokens, cfg)
    return F.cross_entropy((h @ params["lm_head"].t()).float(), targets.reshape(-1))


def decoder_loss_and_grads_reference(params: dict, tokens, targets, cfg: DecoderConfig):
    """(loss, {name: gradient}) in float64, from a float64 copy of the parameters."""
    leaves = {n: p.detach().double().requires_grad_() for n, p in params.items()}
    with torch.enable_grad():
        h = decoder_hidden(leaves, tokens, cfg)
        loss = F.cross_entropy(h @ leaves["lm_head"].t(), targets.reshape(-1))
        grads = torch.autograd.grad(loss, list(leaves.values()))
    return loss.detach(), dict(zip(leaves, grads))


def training_flops_per_token(cfg: DecoderConfig, seq_len: int) -> int:
    """6 per weight a token meets (forward 2, backward 4; the embedding is a lookup) plus causal attention's two
    products over half the T x T scores: 2 · 2 · T · d / 2 forward per layer, three times that with the
    backward."""
    return 6 * cfg.parameter_count(embeddings=False) + 6 * cfg.layers * seq_len * cfg.dim


# ---------------------------------------------------------------- the exercise: a decoder trained on the student's kernels -------------------------------------------

def _init(config, dtype, device, seed):
    return init_parameters(config, dtype=dtype, device=device, seed=seed)


SMALL = DecoderConfig(vocab=1000, dim=64, layers=2, heads=2, hidden=96)
TINY = DecoderConfig(vocab=512, dim=32, layers=1, heads=2, hidden=64)
# The notebook's model: 4 layers of width 512 over the 32k-token vocabulary; the timed one twice as wide.
CAPSTONE = DecoderConfig(vocab=32768, dim=512, layers=4, heads=8, hidden=1408)
CAPSTONE_WIDE = DecoderConfig(vocab=32768, dim=1024, layers=4, heads=16, hidden=2816)

DECODER = TrainingExercise(
    id="07.decoder",
    # The capstone's forward and backward at d = 1024 (4 layers, 8 x 1024 tokens, bf16) against torch.compile of the
    # eager model, timed in turns. A step of ~90 kernels is partly bound by Python's launches: under the grader the
    # reference reaches 0.67-0.96 of torch.compile's speed and 1.51x eager at its slowest of 5 runs on an H100
    # (bench/results/headroom/); at d = 512 launches bound it more, hence the wider model. Eager itself reaches
    # 0.44 of torch.compile (0.49 on an H200), so the speed-up bar is what fails it: more than 1.15x, past eager's
    # noise against itself.
    bars=dict(min_fraction_of_compiled=0.4, min_speedup_over_eager=1.15),
    notebook="07_fusion_for_training",
    kernel="decoder",  # its reference solution: kernels/decoder.py
    function="decoder_loss",
    signature="decoder_loss(params, tokens, targets, config) -> loss",
    summary="the mean cross-entropy of a Llama-style decoder whose forward and backward run on your kernels "
            "(RMSNorm, FlashAttention, SwiGLU's activation, linear cross-entropy) behind autograd Functions.",
    criteria=("correctness", "training", "performance", "memory"),
    init=_init,
    reference=decoder_loss_and_grads_reference,
    eager=decoder_loss_eager,
    tokens=token_ids,
    cases_cpu=(TrainingCase(SMALL, 2, 64), TrainingCase(DecoderConfig(700, 32, 1, 2, 48), 1, 40)),
    cases_gpu=(TrainingCase(DecoderConfig(32768, 512, 2, 8, 1408), 2, 256),
               TrainingCase(DecoderConfig(5000, 256, 2, 4, 688), 3, 200)),
    # In the interpreter both runs are float32 and agree to 1e-4 or better: 4 steps within 0.005 catch 4 to 6 of
    # the stale weights and wrong backwards of tests/criteria/test_training.py (over five seeds), where 8 steps
    # within the GPU's 0.08 caught a stale lm_head alone.
    training_cpu=TrainingCase(TINY, 2, 32, steps=4, lr=1e-2),
    training_gpu=TrainingCase(CAPSTONE, 8, 1024, steps=200, lr=1e-3),
    # 32 x 1024 tokens: at 8 x 1024 a step of ~90 kernels took ~9-18 ms and the reference read 0.40-0.92 of
    # torch.compile's speed on one quiet H100 (1.11x eager in one cold check, under the 1.15 bar); four times the
    # batch, 1.00-1.07 and 2.11-2.16x eager, quiet or with every core busy (bench/noise.py, 2026-11-28).
    perf_case=TrainingCase(CAPSTONE_WIDE, 32, 1024),
    flops_per_token=training_flops_per_token,
    memory_cpu=TrainingCase(DecoderConfig(8192, 32, 1, 2, 64), 4, 64),
    memory_gpu=TrainingCase(CAPSTONE_WIDE, 32, 1024),  # the timed case: warmed up once
    precision_floor={torch.float32: 1e-5, torch.bfloat16: 1e-2},
    # Runs in bfloat16 go their own ways: on an H100, 100 steps in (the loss still falling fast), eager and
    # torch.compile stood 0.07 apart and the reference 0.11 below eager; after 200 steps, 0.04 and 0.03. The
    # mean of the last 20 of 200 losses, within 0.08 (or three times eager's own float32-bfloat16 gap).
    loss_window=20,
    loss_floor=0.08,
    loss_floor_float32=0.005,
)


EXERCISES = (DECODER,)
