"""Notebook 07, fusion for training: FlashAttention's backward pass, and a linear layer with cross-entropy whose
forward and backward never hold the logits. (The notebook's predictions are in training_predictions.)"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder import runtime
from autograder.guard.watch import to_device_keeping_layout
from autograder.specs import streaming_reduction_fusion as fa
from autograder.specs.exercise import (
    UNIT_ROUNDOFF,
    KernelExercise,
    Shape,
)
from autograder.specs.streaming_reduction_fusion import (
    attention_inputs,
    attention_naive,
    ce_bytes,
    ce_inputs,
)

# ---------------------------------------------------------------- the torch side: flash_attention_backward
# The torch side of FlashAttention's backward pass: what grading needs and a student may see (the float64
# gradients, the unfused eager backward, the forward's outputs it starts from, flops and bytes, SDPA's backward
# timed alone). The Triton kernels are in kernels/flash_attention_backward.py; the grader never imports them.

def attention_forward_outputs(q, k, v, causal: bool = False, budget: int = 2**27):
    """(o in q's dtype, lse float32) computed in float64 a block of query rows at a time (at most `budget`
    scores held at once): what an exact forward pass hands the backward, at any size."""
    B, H, N, D = q.shape
    rows = max(1, budget // max(1, B * H * k.shape[2]))
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    kd, vd = k.double(), v.double()
    for start in range(0, N, rows):
        s = (q[:, :, start:start + rows].double() @ kd.transpose(-1, -2)) / math.sqrt(D)
        if causal:
            cols = torch.arange(k.shape[2], device=q.device)
            hidden = cols[None, :] > torch.arange(start, min(start + rows, N), device=q.device)[:, None]
            s = s.masked_fill(hidden, float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1)
        o[:, :, start:start + rows] = (torch.exp(s - block_lse[..., None]) @ vd).to(q.dtype)
        lse[:, :, start:start + rows] = block_lse.float()
    return o, lse


def _grads(q, k, v, do, causal, dtype):
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    o, _ = attention_naive(*leaves, causal)
    return torch.autograd.grad(o, leaves, do.to(dtype))


def attention_backward_reference(q, k, v, o, lse, do, causal: bool = False):
    """(dq, dk, dv) in float64, by autograd through the textbook attention: the exact gradients of the loss
    whose output gradient is do. (o and lse are the forward's results a kernel starts from; not needed here.)"""
    return _grads(q, k, v, do, causal, torch.float64)


def attention_backward_eager(q, k, v, o, lse, do, causal: bool = False):
    """PyTorch's autograd through the textbook attention in the inputs' dtype: it recomputes the forward (S and
    P, N x N each) and keeps both for the backward."""
    with torch.enable_grad():
        return _grads(q, k, v, do, causal, q.dtype)


def attention_backward_flops(q, k, v=None, o=None, lse=None, do=None, causal: bool = False) -> int:
    """Five products of 2 N N_kv D flops per head (S rebuilt, dV, dP, dQ, dK); a causal mask halves them."""
    B, H, N, D = q.shape
    return 10 * B * H * N * k.shape[2] * D // (2 if causal else 1)


def attention_backward_bytes(q, k, v, o=None, lse=None, do=None, causal: bool = False) -> int:
    """q, k, v, o and dO read, dQ, dK and dV written, the log-sum-exp read and delta written and read."""
    rows = q.shape[0] * q.shape[1] * q.shape[2]
    return q.element_size() * (4 * q.numel() + 2 * k.numel() + 2 * v.numel()) + 12 * rows


class SdpaBackward:
    """SDPA's backward alone, as a function of the exercise's inputs: the forward runs once per set of inputs
    (kept, with its saved tensors, until the next set), and each call runs only autograd's backward through it."""

    def __init__(self):
        self._key, self._graph = None, None

    def __call__(self, q, k, v, o, lse, do, causal: bool = False):
        key = tuple((t.data_ptr(), t.shape, t.stride()) for t in (q, k, v, do)) + (causal,)
        if key != self._key:
            self._graph = None  # free the last one first
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            with torch.enable_grad():
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            self._key, self._graph = key, (leaves, out)
        leaves, out = self._graph
        return torch.autograd.grad(out, leaves, do, retain_graph=True)



def sdpa_backward_with_backend(backend: str):
    """SDPA's backward with one backend forced (a name of torch.nn.attention.SDPBackend), as SdpaBackward times it.
    Raises runtime.NotTimedHere where this GPU or build lacks the backend, and while the grader runs the notebook."""
    from torch.nn.attention import SDPBackend, sdpa_kernel


    timed = SdpaBackward()

    def run(q, k, v, o, lse, do, causal: bool = False):
        if runtime.small_demos():
            raise runtime.NotTimedHere("SDPA's backends are not timed apart while the grader runs this notebook")
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return timed(q, k, v, o, lse, do, causal)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            raise runtime.NotTimedHere(f"SDPA's {backend} backend does not run here: {first}") from exc

    return run


def saved_bytes(fn, *args) -> int:
    """The bytes autograd saves for the backward while fn(*args) runs, beyond the arguments themselves (alive
    anyway): every tensor packed by a saved-tensor hook, counted once per storage (a view costs nothing more)."""
    seen = {(a.untyped_storage().data_ptr(), a.device) for a in args if isinstance(a, torch.Tensor)}
    total = 0

    def pack(t):
        nonlocal total
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return total


# ---------------------------------------------------------------- the torch side: linear_cross_entropy_backward
# The torch side of linear cross-entropy's forward and backward: what grading needs and a student may see (the
# float64 loss and gradients, the eager version as a training loop runs it, the flops). The Triton kernels are in
# kernels/linear_cross_entropy_backward.py; the grader never imports them.

def _loss_and_grads(h, w, targets, dtype, logits_dtype):
    hl, wl = h.detach().to(dtype).requires_grad_(), w.detach().to(dtype).requires_grad_()
    with torch.enable_grad():
        loss = F.cross_entropy((hl @ wl.t()).to(logits_dtype), targets.long())
        dh, dw = torch.autograd.grad(loss, (hl, wl))
    return loss.detach(), dh, dw


def linear_cross_entropy_backward_reference(h, w, targets):
    """(mean loss, dh, dw) in float64."""
    return _loss_and_grads(h, w, targets, torch.float64, torch.float64)


def linear_cross_entropy_backward_eager(h, w, targets):
    """A training loop's version: the logits in full, upcast to float32 for the loss, and autograd's backward
    (which keeps the float32 logits and makes their gradient, M x V each)."""
    loss, dh, dw = _loss_and_grads(h, w, targets, h.dtype, torch.float32)
    return loss, dh, dw


def linear_cross_entropy_backward_flops(h, w, targets=None) -> int:
    """Three GEMMs of 2 M V K: the logits, dh = dlogits w and dw = dlogitsᵀ h."""
    return 6 * h.shape[0] * h.shape[1] * w.shape[0]


# ---------------------------------------------------------------- the exercises

NOTEBOOK = "07_fusion_for_training"
EPS32 = 2.0**-24


# --- 1. FlashAttention backward -------------------------------------------------------------------------

def _attention_backward_inputs(shape: Shape, dtype, device, gen):
    """notebook 05's q, k, v (query scales 0.5 to 3 per head; layouts "causal" and "bnhd"), the exact forward's
    o (rounded to the dtype) and lse (float32), and an output gradient do of unit spread, in q's layout."""
    inputs = attention_inputs(shape, dtype, device, gen)
    q, k, v, causal = inputs["q"], inputs["k"], inputs["v"], inputs["causal"]
    o, lse = attention_forward_outputs(q, k, v, causal)
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
    dq, dk, dv = attention_backward_reference(q, k, v, o, lse, do, causal)
    return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv


def _without_delta(q, k, v, o, lse, do, causal):
    """dS = P ∘ dP: the softmax's Jacobian without its second term."""
    qd, kd, vd, dod = q.double(), k.double(), v.double(), do.double()
    p = torch.softmax(fa.attention_scores(qd, kd, causal), dim=-1)
    ds = p * (dod @ vd.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return ds @ kd, ds.transpose(-1, -2) @ qd, p.transpose(-1, -2) @ dod


FLASH_ATTENTION_BACKWARD = KernelExercise(
    id="07.flash_attention_backward",
    kernel="flash_attention_backward",  # its reference solution: kernels/flash_attention_backward.py
    # Against SDPA's own backward on the same GPU (cuDNN's on Hopper), at (4, 16, 4096, 128) bf16, not causal. The
    # reference kernels (three launches) reach 0.68 of it on an H100 and 1.4x FlashAttention-2's backward; autograd
    # through the textbook attention, which writes S, P and dP, 0.1.
    bars=dict(min_fraction_of_peak=0.3, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="flash_attention_backward",
    signature="flash_attention_backward(q, k, v, o, lse, do, causal) -> (dq, dk, dv)",
    summary="the gradients of attention for the output gradient do, from the forward's o and log-sum-exp, "
            "rebuilding P tile by tile: no N x N tensor in memory; at most three launches.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_attention_backward_inputs,
    reference=attention_backward_reference,
    eager=attention_backward_eager,
    eager_name="autograd through the textbook attention",
    bytes=attention_backward_bytes,
    flops=attention_backward_flops,
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
    perf_baseline=SdpaBackward(),
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
    loss, dh, dw = linear_cross_entropy_backward_reference(h, w, targets)
    return loss * h.shape[0], dh * h.shape[0], dw * h.shape[0]


def _grads_not_averaged(h, w, targets):
    loss, dh, dw = linear_cross_entropy_backward_reference(h, w, targets)
    return loss, dh * h.shape[0], dw * h.shape[0]


def _without_one_hot(h, w, targets):
    """dlogits = p / M: the -1 at each row's target is missing."""
    hd, wd = h.double(), w.double()
    loss = linear_cross_entropy_backward_reference(h, w, targets)[0]
    g = torch.softmax(hd @ wd.t(), dim=-1) / h.shape[0]
    return loss, g @ wd, g.t() @ hd


LINEAR_CROSS_ENTROPY_BACKWARD = KernelExercise(
    id="07.linear_cross_entropy_backward",
    kernel="linear_cross_entropy_backward",  # its reference solution: kernels/linear_cross_entropy_backward.py
    notebook=NOTEBOOK,
    function="linear_cross_entropy_forward_backward",
    signature="linear_cross_entropy_forward_backward(h, w, targets) -> (loss, dh, dw)",
    summary="the mean cross-entropy of the logits h wᵀ (float32) and its gradients dh, dw, a chunk of rows at a "
            "time: each chunk's gradients made while its logits exist, never all M x V of them.",
    criteria=("correctness", "precision", "memory"),
    make_inputs=ce_inputs,
    reference=linear_cross_entropy_backward_reference,
    eager=linear_cross_entropy_backward_eager,
    bytes=ce_bytes,
    flops=linear_cross_entropy_backward_flops,
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


EXERCISES = (FLASH_ATTENTION_BACKWARD, LINEAR_CROSS_ENTROPY_BACKWARD)
