"""Notebook 07, fusion for training: FlashAttention's backward pass, and a linear layer with cross-entropy whose
forward and backward never hold the logits."""

from __future__ import annotations

import math

import torch

from ..ops import decoder as dec
from ..ops import flash_attention as fa
from ..ops import flash_attention_backward as fab
from ..ops import linear_cross_entropy_backward as lceb
from ..sandbox import to_device_keeping_layout
from ..specs import UNIT_ROUNDOFF, KernelExercise, Shape, TrainingCase, TrainingExercise
from ..text_corpus import token_ids
from .nb05 import _attention_inputs, _ce_inputs, _ce_bytes

NOTEBOOK = "07_fusion_for_training"
EPS32 = 2.0**-24


# --- 1. FlashAttention backward -------------------------------------------------------------------------

def _attention_backward_inputs(shape: Shape, dtype, device, gen):
    """notebook 05's q, k, v (query scales 0.5 to 3 per head; layouts "causal" and "bnhd"), the exact forward's
    o (rounded to the dtype) and lse (float32), and an output gradient do of unit spread, in q's layout."""
    inputs = _attention_inputs(shape, dtype, device, gen)
    q, k, v, causal = inputs["q"], inputs["k"], inputs["v"], inputs["causal"]
    o, lse = fab.attention_forward_outputs(q, k, v, causal)
    b, h, n, d = shape.dims
    do = (torch.randn(b, n, h, d, generator=gen).transpose(1, 2) if "bnhd" in shape.layout.split()
          else torch.randn(b, h, n, d, generator=gen))
    do = to_device_keeping_layout(do.to(dtype), device)
    return {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do, "causal": causal}


def _attention_backward_float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    n, d = inputs["k"].shape[2], inputs["q"].shape[3]
    return 4 * EPS32 * (math.sqrt(n) + math.sqrt(d)), f"float32 sums over N = {n} keys and D = {d}"




def _attention_grad_atol(inputs: dict, dtype) -> float:
    """What the dtype's roundings cost an element of dQ, dK or dV: P and dS rounded as the products' operands, and
    delta formed from o as it was handed over, rounded. Each rounding is a relative error of at most u, of either
    sign, so the sum over a product's terms grows as their root sum of squares: five of those (the largest over
    all elements of the case) bound what an honest kernel misses by. In bf16 a near-cancelling gradient (0.011
    from terms of up to 8) moved by 0.03 in SDPA's backward, in the course's, and in float32 torch code rounding
    P and dS as the kernels do."""
    q, k, v, o, do = (inputs[n].double() for n in ("q", "k", "v", "o", "do"))
    p = torch.softmax(fa.attention_scores(q, k, inputs["causal"]), dim=-1)
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    rows = (do * o).square().sum(-1, keepdim=True).sqrt()  # delta's rounding error, in units of u, per row
    scale = 1 / math.sqrt(q.shape[-1])
    dv = p.square().transpose(-1, -2) @ do.square()
    dq = (ds.square() + (p * rows).square()) @ k.square() * scale**2
    dk = (ds.square() + (p * rows).square()).transpose(-1, -2) @ q.square() * scale**2
    return 5 * UNIT_ROUNDOFF[dtype] * max(float(t.max().sqrt()) if t.numel() else 0.0 for t in (dv, dq, dk))


def _grads_of(fn):
    """The float64 gradients of o = fn(q, k, v, causal) for the output gradient do."""
    def grads(q, k, v, o, lse, do, causal):
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            out = fn(*leaves, causal)
            return torch.autograd.grad(out, leaves, do.double())
    return grads


def _attention_without_scale_in_grads(q, k, v, o, lse, do, causal):
    dq, dk, dv = fab.attention_backward_reference(q, k, v, o, lse, do, causal)
    return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv


def _without_delta(q, k, v, o, lse, do, causal):
    """dS = P ∘ dP: the softmax's Jacobian without its second term."""
    qd, kd, vd, dod = q.double(), k.double(), v.double(), do.double()
    p = torch.softmax(fa.attention_scores(qd, kd, causal), dim=-1)
    ds = p * (dod @ vd.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return ds @ kd, ds.transpose(-1, -2) @ qd, p.transpose(-1, -2) @ dod


FLASH_ATTENTION_BACKWARD = KernelExercise(
    id="07.flash_attention_backward",
    notebook=NOTEBOOK,
    function="flash_attention_backward",
    signature="flash_attention_backward(q, k, v, o, lse, do, causal) -> (dq, dk, dv)",
    summary="the gradients of attention for the output gradient do, from the forward's o and log-sum-exp, "
            "rebuilding P tile by tile: no N x N tensor in memory; at most three launches.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_attention_backward_inputs,
    reference=fab.attention_backward_reference,
    eager=fab.attention_backward_eager,
    eager_name="autograd through the textbook attention",
    bytes=fab.attention_backward_bytes,
    flops=fab.attention_backward_flops,
    shapes=(Shape((1, 1, 1, 16)), Shape((1, 2, 7, 32), "causal"), Shape((2, 1, 100, 64)),
            Shape((1, 2, 130, 64), "causal"), Shape((1, 1, 77, 128)), Shape((2, 3, 50, 64), "bnhd"),
            Shape((1, 2, 65, 64), "causal bnhd")),
    precision_shapes=tuple(Shape((1, 2, n, 64)) for n in (64, 256, 1024)),
    reduced_dim="N",
    reduced_axis=2,
    perf_shape=Shape((4, 16, 4096, 128)),
    max_launches=3,
    tolerance={torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)},
    atol_from_inputs=_attention_grad_atol,
    # P and dS are rounded to the inputs' dtype as operands of the tensor cores' products: about twice one
    # rounding of the result, as SDPA's own backward measures.
    precision_factor=3.0,
    precision_floor_from_inputs=_attention_backward_float32_sums,
    precision_note=(
        "Rebuild P = exp(s - lse) in float32, keep dK, dV and dQ in float32 accumulators, round P and dS to the "
        "inputs' dtype only as operands of tl.dot, and each gradient once, at the store."
    ),
    special_values=False,
    output_names=("dq", "dk", "dv"),
    free_input="do",
    perf_baseline=fab.SdpaBackward(),
    perf_baseline_name="SDPA's backward",
    default_min_fraction=0.3,
    diagnoses=(
        ("dQ and dK lack the 1/sqrt(D) of the scores: dQ = dS K / sqrt(D), dK = dSᵀ Q / sqrt(D)",
         _attention_without_scale_in_grads),
        ("dS = P ∘ dP misses the softmax's second term: dS = P ∘ (dP - delta), delta_i = dO_i · O_i",
         _without_delta),
        ("the causal mask is not applied in the backward pass", _grads_of(lambda q, k, v, c: fa.attention_naive(
            q, k, v, False)[0])),
    ),
)


# --- 2. Linear + cross-entropy, forward and backward -----------------------------------------------------

def _logits_bytes(inputs: dict) -> int:
    return 4 * inputs["h"].shape[0] * inputs["w"].shape[0]


def _outputs_bytes(inputs: dict) -> int:
    return inputs["h"].element_size() * (inputs["h"].numel() + inputs["w"].numel()) + 4


def _ce_float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    m, k = inputs["h"].shape
    v = inputs["w"].shape[0]
    return (4 * EPS32 * (math.sqrt(k) + math.sqrt(v) + math.sqrt(m)),
            f"float32 sums over K = {k}, V = {v} and M = {m}")


def _gradient_atol(inputs: dict, dtype) -> float:
    """What rounding may cost an element of dh or dW. Each row's |dlogits| sum to at most 2 / M, so an element
    moves by (2 / M) · max|operand| times dlogits' own error: rounding it to the dtype (the products' operand, u)
    and the float32 logits' error, which exp carries into p: a K-term dot product is off by about
    u32 · sqrt(K) · max|h| · max|w|. With a peaked softmax ("confident": logits of spread 40) the second term
    rules, and PyTorch's own float32 backward was outside the table's atol on 2 seeds in 300 without it."""
    if not inputs["h"].numel() or not inputs["w"].numel():
        return 0.0
    h_max, w_max = float(inputs["h"].abs().max()), float(inputs["w"].abs().max())
    logits_error = UNIT_ROUNDOFF[torch.float32] * math.sqrt(inputs["h"].shape[1]) * h_max * w_max
    return (UNIT_ROUNDOFF[dtype] + logits_error) * 2 / max(1, inputs["h"].shape[0]) * max(h_max, w_max)


def _summed(h, w, targets):
    loss, dh, dw = lceb.linear_cross_entropy_backward_reference(h, w, targets)
    return loss * h.shape[0], dh * h.shape[0], dw * h.shape[0]


def _grads_not_averaged(h, w, targets):
    loss, dh, dw = lceb.linear_cross_entropy_backward_reference(h, w, targets)
    return loss, dh * h.shape[0], dw * h.shape[0]


def _without_one_hot(h, w, targets):
    """dlogits = p / M: the -1 at each row's target is missing."""
    hd, wd = h.double(), w.double()
    loss = lceb.linear_cross_entropy_backward_reference(h, w, targets)[0]
    g = torch.softmax(hd @ wd.t(), dim=-1) / h.shape[0]
    return loss, g @ wd, g.t() @ hd


LINEAR_CROSS_ENTROPY_BACKWARD = KernelExercise(
    id="07.linear_cross_entropy_backward",
    notebook=NOTEBOOK,
    function="linear_cross_entropy_forward_backward",
    signature="linear_cross_entropy_forward_backward(h, w, targets) -> (loss, dh, dw)",
    summary="the mean cross-entropy of the logits h wᵀ (float32) and its gradients dh, dw, a chunk of rows at a "
            "time: each chunk's gradients made while its logits exist, never all M x V of them.",
    criteria=("correctness", "precision", "memory"),
    make_inputs=_ce_inputs,
    reference=lceb.linear_cross_entropy_backward_reference,
    eager=lceb.linear_cross_entropy_backward_eager,
    bytes=_ce_bytes,
    flops=lceb.linear_cross_entropy_backward_flops,
    # (50 rows: four chunks of 16 in the reference, the last one ragged.)
    shapes=(Shape((1, 1, 1)), Shape((3, 16, 5)), Shape((37, 64, 1000)), Shape((24, 96, 3001), "confident"),
            Shape((20, 40, 700), "padded"), Shape((9, 32, 300), "int32"), Shape((50, 32, 2048))),
    precision_shapes=tuple(Shape((16, 64, v)) for v in (1000, 4000, 16000)),
    reduced_dim="V",
    # notebook 05's: 4096 tokens of a 1024-wide model over 32768 words, whose float32 logits take 512 MiB. The
    # outputs (dh and dw, 72 MiB in bf16) are allowed, and a quarter of the logits: chunks of rows.
    memory_shape=Shape((4096, 1024, 32768)),
    memory_shape_cpu=Shape((256, 64, 8192)),
    memory_bound=lambda inputs: _outputs_bytes(inputs) + _logits_bytes(inputs) // 4,
    materialised_bytes=_logits_bytes,
    memory_what="the float32 logits",
    output_dtypes=(torch.float32, None, None),
    tolerance={torch.float32: (1e-5, 1e-4), torch.float16: (1e-4, 4e-3), torch.bfloat16: (1e-3, 3e-2)},
    atol_from_inputs=_gradient_atol,
    precision_factor=4.0,
    precision_floor_from_inputs=_ce_float32_sums,
    precision_note=(
        "Keep each chunk's logits in float32 and take the softmax there; round dlogits to the inputs' dtype only "
        "as the operand of the two gradient products, whose sums stay in float32 accumulators."
    ),
    special_values=False,
    output_names=("loss", "dh", "dw"),
    diagnoses=(
        ("the loss and the gradients are summed over rows, not averaged: divide by M", _summed),
        ("the gradients are not divided by M (the loss is the mean over rows)", _grads_not_averaged),
        ("dlogits lacks the -1 at each row's target: dlogits = (softmax - one_hot) / M", _without_one_hot),
    ),
)


# --- 3. The capstone: a decoder trained on the student's kernels -------------------------------------------

def _init(config, dtype, device, seed):
    return dec.init_parameters(config, dtype=dtype, device=device, seed=seed)


SMALL = dec.DecoderConfig(vocab=1000, dim=64, layers=2, heads=2, hidden=96)
TINY = dec.DecoderConfig(vocab=512, dim=32, layers=1, heads=2, hidden=64)
# The notebook's model: 4 layers of width 512 over the 32k-token vocabulary; the timed one twice as wide.
CAPSTONE = dec.DecoderConfig(vocab=32768, dim=512, layers=4, heads=8, hidden=1408)
CAPSTONE_WIDE = dec.DecoderConfig(vocab=32768, dim=1024, layers=4, heads=16, hidden=2816)

DECODER = TrainingExercise(
    id="07.decoder",
    notebook=NOTEBOOK,
    function="decoder_loss",
    signature="decoder_loss(params, tokens, targets, config) -> loss",
    summary="the mean cross-entropy of a Llama-style decoder whose forward and backward run on your kernels "
            "(RMSNorm, FlashAttention, SwiGLU's activation, linear cross-entropy) behind autograd Functions.",
    criteria=("correctness", "training", "performance", "memory"),
    init=_init,
    reference=dec.decoder_loss_and_grads_reference,
    eager=dec.decoder_loss_eager,
    tokens=token_ids,
    cases_cpu=(TrainingCase(SMALL, 2, 64), TrainingCase(dec.DecoderConfig(700, 32, 1, 2, 48), 1, 40)),
    cases_gpu=(TrainingCase(dec.DecoderConfig(32768, 512, 2, 8, 1408), 2, 256),
               TrainingCase(dec.DecoderConfig(5000, 256, 2, 4, 688), 3, 200)),
    training_cpu=TrainingCase(TINY, 2, 32, steps=8, lr=1e-2),
    training_gpu=TrainingCase(CAPSTONE, 8, 1024, steps=200, lr=1e-3),
    perf_case=TrainingCase(CAPSTONE_WIDE, 8, 1024),
    memory_cpu=TrainingCase(dec.DecoderConfig(8192, 32, 1, 2, 64), 4, 64),
    memory_gpu=TrainingCase(CAPSTONE_WIDE, 8, 1024),
    precision_floor={torch.float32: 1e-5, torch.bfloat16: 1e-2},
    # Runs in bfloat16 go their own ways: on an H100, 100 steps in (the loss still falling fast), eager and
    # torch.compile stood 0.07 apart and the reference 0.11 below eager; after 200 steps, 0.04 and 0.03. The
    # mean of the last 20 of 200 losses, within 0.08 (or three times eager's own float32-bfloat16 gap).
    loss_window=20,
    loss_floor=0.08,
)

EXERCISES = (FLASH_ATTENTION_BACKWARD, LINEAR_CROSS_ENTROPY_BACKWARD, DECODER)
