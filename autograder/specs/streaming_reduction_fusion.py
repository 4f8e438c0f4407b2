"""Notebook 05, streaming-reduction fusion: softmax rows of any length, FlashAttention forward, and a linear
layer fused with cross-entropy so that the logits never exist."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.guard.watch import to_device_keeping_layout
from autograder.specs.exercise import KernelExercise, NumericExercise, Shape
from autograder.specs.streaming_torch import (  # noqa: F401  re-exported: notebooks and kernels/ import them from here
    SDPA_BACKENDS,
    attention_bytes,
    attention_flops,
    attention_naive,
    attention_reference,
    attention_scores,
    linear_cross_entropy_eager,
    linear_cross_entropy_flops,
    linear_cross_entropy_reference,
    logits_bytes,
    sdpa_with_backend,
    softmax_bytes,
    softmax_eager,
    softmax_reference,
)

# ---------------------------------------------------------------- the exercises

NOTEBOOK = "05_streaming_reduction_fusion"
EPS32 = 2.0**-24


def _layouts(shape: Shape) -> set[str]:
    return set(shape.layout.split())


# --- 1. Softmax over rows of any length ------------------------------------------------------------------

def _softmax_inputs(shape: Shape, dtype, device, gen):
    """(M, N) logits whose rows have scales from 0.1 to 30, the first row 30: there exp(x) overflows float32
    (once N is a few hundred) unless the row's max is subtracted first. Layouts: "padded" (rows in a wider
    buffer), "masked" (about a third of each row -inf, as an attention mask leaves it; never a whole row)."""
    m, n = shape.dims
    width = n + 24 if "padded" in _layouts(shape) else n
    scale = torch.exp(torch.empty(m, 1).uniform_(math.log(0.1), math.log(30.0), generator=gen))
    scale[0] = 30.0  # in every case, so that a kernel which never subtracts the max meets an overflow
    x = torch.randn(m, width, generator=gen) * scale
    if "masked" in _layouts(shape):
        hidden = torch.rand(m, width, generator=gen) < 0.35
        hidden[:, 0] = False
        x = x.masked_fill(hidden, float("-inf"))
    return {"x": to_device_keeping_layout(x.to(dtype)[:, :n], device)}


def _softmax_float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    n = inputs["x"].shape[1]
    return 4 * EPS32 * math.sqrt(n), f"float32 sums over N = {n} (4 eps sqrt(N))"


def _log_softmax(x):
    return torch.log_softmax(x.double(), dim=-1)


def _softmax_over_columns(x):
    return torch.softmax(x.double(), dim=0)


def _exp_not_normalised(x):
    xd = x.double()
    return (xd - xd.max(dim=-1, keepdim=True).values).exp()


SOFTMAX = KernelExercise(
    id="05.softmax",
    kernel="softmax",  # its reference solution: kernels/softmax.py
    # Streaming reductions. Softmax: a fraction of copy bandwidth. Attention: a fraction of SDPA's speed on the same
    # GPU (the reference kernel reaches about 0.8 on an H200), and faster than the naive version that writes S and P.
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="softmax",
    signature="softmax(x) -> y",
    summary="softmax over each row of x (M, N), any N: one read and one write per element where the row fits "
            "in a block, an online running max and sum beyond; statistics in float32.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_softmax_inputs,
    reference=softmax_reference,
    eager=softmax_eager,
    bytes=softmax_bytes,
    shapes=(Shape((1, 1)), Shape((3, 7)), Shape((37, 1000)), Shape((5, 4096), "masked"), Shape((4, 20000)),
            Shape((3, 70001), "masked"), Shape((33, 129), "padded")),
    extra_shapes=(Shape((2, 16385), "masked"), Shape((3, 33000), "padded"), Shape((65, 3))),
    precision_shapes=tuple(Shape((8, n)) for n in (256, 4096, 65536)),
    reduced_dim="N",
    perf_shape=Shape((32768, 4096)),
    tolerance={torch.float32: (1e-6, 1e-5), torch.float16: (1e-5, 2e-3), torch.bfloat16: (1e-4, 1.6e-2)},
    precision_factor=1.25,  # one rounding of the exact result; PyTorch op by op rounds x - max, exp and y
    precision_floor_from_inputs=_softmax_float32_sums,
    precision_note=(
        "Subtract the row's max before exp (exp overflows float32 above 88.7, float16 above 11.1), upcast each "
        "loaded element to float32, keep the running max and the running sum in float32, and round once, at the "
        "store."
    ),
    diagnoses=(
        ("log_softmax: the exercise wants the probabilities, exp(x - max) / sum", _log_softmax),
        ("softmax over columns (dim 0): each row is normalised on its own", _softmax_over_columns),
        ("exp(x - max) is never divided by the row's sum", _exp_not_normalised),
    ),
)


# --- 2a. Predict: attention's HBM traffic, naive against FlashAttention ------------------------------------

def attention_traffic_reference(b: int, h: int, n: int, d: int, elem_bytes: int) -> tuple[int, int]:
    """(naive, flash) HBM bytes of one attention forward over q, k, v, o of shape (b, h, n, d).

    Naive: S = q kᵀ reads q and k and writes S; P = softmax(S) reads S and writes P; o = P v reads P and v and
    writes o: 4 b h n d + 4 b h n² elements. FlashAttention: q, k, v read once, o written once, and the float32
    log-sum-exp of each row: 4 b h n d elements + 4 b h n bytes (re-reads of k and v that L2 serves not counted).
    """
    e = elem_bytes
    qkvo = 4 * b * h * n * d * e
    return qkvo + 4 * b * h * n * n * e, qkvo + 4 * b * h * n


def _attention_traffic_cases(rng):
    cases = [(4, 16, 4096, 128, 2), (1, 1, 1, 16, 4), (2, 8, 1024, 64, 2)]
    for _ in range(5):
        cases.append((rng.randint(1, 8), rng.randint(1, 32), rng.randint(1, 20000), rng.choice([16, 32, 64, 128, 256]),
                      rng.choice([2, 4])))
    return cases


def _diagnose_attention_traffic(args, got, expected):
    b, h, n, d, e = args
    en, ef = expected
    try:
        gn, gf = got
    except (TypeError, ValueError):
        return "return a pair (naive_bytes, flash_bytes)"
    close = lambda a, x: math.isclose(a, x, rel_tol=1e-9)  # noqa: E731
    scores = b * h * n * n * e
    lse = 4 * b * h * n
    if close(gn, ef) and close(gf, en):
        return "the two counts are swapped: return (naive, flash)"
    if close(gf, ef - lse):
        return "FlashAttention also writes each row's log-sum-exp: 4 bytes (float32) a row"
    if close(gf, ef - lse + 4 * b * h * n * e):
        return "the log-sum-exp is float32 whatever the inputs' dtype: 4 bytes a row"
    if close(gn, en - 2 * scores):
        return "S and P each cross HBM twice: written by one kernel, read by the next (4 N² per head)"
    if close(gn, en - scores) or close(gn, en + scores):
        return "count S written and read, P written and read: 4 N² elements per head"
    if close(gn, en / e) or close(gf, (ef - lse) / e + lse):
        return "count bytes, not elements: multiply by elem_bytes"
    if close(gn, en - b * h * n * d * e) or close(gf, ef - b * h * n * d * e):
        return "q, k and v are read and o is written: 4 tensors of (b, h, n, d)"
    return None


PREDICT_ATTENTION_BYTES = NumericExercise(
    id="05.predict_attention_bytes",
    notebook=NOTEBOOK,
    function="predicted_attention_bytes",
    signature="predicted_attention_bytes(b, h, n, d, elem_bytes) -> (naive_bytes, flash_bytes)",
    summary="HBM bytes of attention that writes S and P, against FlashAttention's q, k, v, o and log-sum-exp.",
    criteria=("correctness",),
    cases=_attention_traffic_cases,
    reference=attention_traffic_reference,
    diagnose=_diagnose_attention_traffic,
)


# --- 2. FlashAttention forward --------------------------------------------------------------------------

def attention_inputs(shape: Shape, dtype, device, gen):
    """q, k, v (B, H, N, D) and causal. Queries scaled 0.5 to 3 per head so some heads' softmax is peaked.
    Layouts: "causal"; "bnhd": the tensors are (B, N, H, D) buffers seen as (B, H, N, D), as a model's
    projection leaves them (q.transpose(1, 2)), so strides are not contiguous."""
    b, h, n, d = shape.dims
    bnhd = "bnhd" in _layouts(shape)

    def one(scale=1.0):
        t = torch.randn(b, n, h, d, generator=gen).transpose(1, 2) if bnhd else torch.randn(b, h, n, d, generator=gen)
        return to_device_keeping_layout((t * scale).to(dtype), device)

    head_scale = torch.empty(1, h, 1, 1).uniform_(0.5, 3.0, generator=gen)
    return {"q": one(head_scale), "k": one(), "v": one(), "causal": "causal" in _layouts(shape)}


def _attention_float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    n, d = inputs["k"].shape[2], inputs["q"].shape[3]
    return 4 * EPS32 * (math.sqrt(n) + math.sqrt(d)), f"float32 sums over N = {n} keys and D = {d}"


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _no_scale(q, k, v, causal):
    return attention_reference(q * math.sqrt(q.shape[-1]), k, v, causal)


def _causal_ignored(q, k, v, causal):
    return attention_reference(q, k, v, False)


def _causal_without_diagonal(q, k, v, causal):
    if not causal:
        return attention_reference(q, k, v, causal)
    s = attention_scores(q.double(), k.double(), causal, first_hidden=0)
    # Query 0 sees no key: its sum l is 0, and a kernel computes o = 0 / 0 and lse = -inf + log(0), NaN both.
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ v.double(), lse.masked_fill(lse == float("-inf"), float("nan"))


def _lse_base_2(q, k, v, causal):
    o, lse = attention_reference(q, k, v, causal)
    return o, lse / math.log(2)


def _lse_without_max(q, k, v, causal):
    o, lse = attention_reference(q, k, v, causal)
    return o, lse - attention_scores(q.double(), k.double(), causal).amax(dim=-1)


FLASH_ATTENTION = KernelExercise(
    id="05.flash_attention",
    kernel="flash_attention",  # its reference solution: kernels/flash_attention.py
    bars=dict(min_fraction_of_peak=0.3, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="flash_attention",
    signature="flash_attention(q, k, v, causal) -> (o, lse)",
    summary="o = softmax(q kᵀ / sqrt(D)) v per head, causal or not, and each row's log-sum-exp (float32), "
            "in one kernel that never writes the scores or the probabilities.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=attention_inputs,
    reference=attention_reference,
    eager=attention_naive,
    bytes=attention_bytes,
    flops=attention_flops,
    shapes=(Shape((1, 1, 1, 16)), Shape((1, 2, 7, 32), "causal"), Shape((2, 1, 100, 64)),
            Shape((1, 2, 130, 64), "causal"), Shape((1, 1, 77, 128)), Shape((1, 2, 96, 128), "causal"),
            Shape((2, 3, 50, 64), "bnhd"), Shape((1, 2, 65, 64), "causal bnhd")),
    extra_shapes=(Shape((1, 1, 33, 16), "causal"), Shape((2, 2, 129, 64), "causal bnhd"), Shape((1, 1, 257, 128))),
    precision_shapes=tuple(Shape((1, 2, n, 64)) for n in (64, 256, 1024)),
    reduced_dim="N",
    reduced_axis=2,
    # The benchmark's shape (the issue's: batch 4, 16 heads, 4096 tokens, head_dim 128), not causal.
    perf_shape=Shape((4, 16, 4096, 128)),
    tolerance={torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)},
    # p is rounded to the inputs' dtype before p @ v (the tensor cores' operand): about twice one rounding.
    precision_factor=2.5,
    precision_floor_from_inputs=_attention_float32_sums,
    precision_note=(
        "Keep the running max, the running sum and the output accumulator in float32; round p to the inputs' "
        "dtype only as the operand of p @ v, and o once, at the store."
    ),
    special_values=False,
    output_names=("o", "lse"),
    output_dtypes=(None, torch.float32),
    perf_baseline=_sdpa,
    perf_baseline_name="SDPA",
    default_min_fraction=0.3,
    diagnoses=(
        ("the scores are not scaled by 1/sqrt(D)", _no_scale),
        ("the causal mask is not applied", _causal_ignored),
        ("the causal mask hides the diagonal too: query i sees keys j <= i", _causal_without_diagonal),
        ("the log-sum-exp is in base 2: divide by log2(e) (multiply by ln 2) at the end", _lse_base_2),
        ("the log-sum-exp lacks the row's max: lse = m + log(l)", _lse_without_max),
    ),
)


# --- 3. Linear layer fused with cross-entropy -----------------------------------------------------------

def ce_inputs(shape: Shape, dtype, device, gen):
    """h (M, K), w (V, K) scaled so logits have unit spread (layout "confident": spread 40, where exp of a
    logit overflows float32 unless the max is taken out first), targets (M,) int64 ("int32": int32 targets;
    "padded": h's rows in a wider buffer)."""
    m, k, v = shape.dims
    spread = 40.0 if "confident" in _layouts(shape) else 1.0
    width = k + 8 if "padded" in _layouts(shape) else k
    h = torch.randn(m, width, generator=gen)[:, :k]
    w = torch.randn(v, k, generator=gen) * (spread / math.sqrt(k))
    targets = torch.randint(0, v, (m,), generator=gen)
    if "int32" in _layouts(shape):
        targets = targets.to(torch.int32)
    return {"h": to_device_keeping_layout(h.to(dtype), device), "w": w.to(dtype).to(device),
            "targets": targets.to(device)}


def _logits_bytes(inputs: dict) -> int:
    return logits_bytes(inputs["h"], inputs["w"])


def _ce_float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    # The logits' K sums dominate; the softmax sums over V are tree reductions of positive terms.
    k = inputs["h"].shape[1]
    return 4 * EPS32 * math.sqrt(k), f"float32 accumulation over K = {k} (4 eps sqrt(K))"


def ce_bytes(h, w, targets) -> int:
    return h.element_size() * (h.numel() + w.numel()) + targets.element_size() * targets.numel() + 4 * h.shape[0]


def _lse_only(h, w, targets):
    return torch.logsumexp(h.double() @ w.double().t(), dim=-1)


def _ce_base_2(h, w, targets):
    logits = h.double() @ w.double().t()
    return (torch.logsumexp(logits, dim=-1) - logits.gather(1, targets.long()[:, None])[:, 0]) / math.log(2)


def _logits_rounded(h, w, targets):
    """The logits rounded to the inputs' dtype before the softmax, as an unfused bf16 model does."""
    logits = (h.double() @ w.double().t()).to(h.dtype).double()
    return F.cross_entropy(logits, targets.long(), reduction="none")


LINEAR_CROSS_ENTROPY = KernelExercise(
    id="05.linear_cross_entropy",
    kernel="linear_cross_entropy",  # its reference solution: kernels/linear_cross_entropy.py
    notebook=NOTEBOOK,
    function="linear_cross_entropy",
    signature="linear_cross_entropy(h, w, targets) -> loss",
    summary="loss_i = logsumexp(h_i wᵀ) - h_i · w[targets_i], float32, per row, without holding the (M, V) logits.",
    criteria=("correctness", "precision", "memory"),
    make_inputs=ce_inputs,
    reference=linear_cross_entropy_reference,
    eager=linear_cross_entropy_eager,
    bytes=ce_bytes,
    flops=linear_cross_entropy_flops,
    shapes=(Shape((1, 1, 1)), Shape((3, 16, 5)), Shape((37, 64, 1000)), Shape((70, 96, 3001), "confident"),
            Shape((20, 40, 700), "padded"), Shape((9, 32, 300), "int32"), Shape((130, 128, 2048))),
    extra_shapes=(Shape((65, 48, 4097)), Shape((3, 72, 257), "confident int32"), Shape((2, 8, 2))),
    precision_shapes=tuple(Shape((16, 64, v)) for v in (1000, 8000, 64000)),
    reduced_dim="V",
    # 4096 tokens of a 1024-wide model over a 32768-word vocabulary: the float32 logits would take 512 MiB.
    # The interpreter runs a smaller problem where the logits take 8 MiB.
    memory_shape=Shape((4096, 1024, 32768)),
    memory_shape_cpu=Shape((256, 64, 8192)),
    memory_bound=lambda inputs: _logits_bytes(inputs) // 8,
    materialised_bytes=_logits_bytes,
    memory_what="the float32 logits",
    output_dtype=torch.float32,
    tolerance={torch.float32: (1e-4, 1e-5), torch.float16: (2e-3, 1e-4), torch.bfloat16: (2e-3, 1e-4)},
    precision_factor=1.5,
    precision_floor_from_inputs=_ce_float32_sums,
    precision_note=(
        "Keep each logit tile in the float32 accumulator: take its max and its sum of exp(logit - max) there, "
        "and combine tiles in float32. Rounding the logits to the inputs' dtype first costs precision."
    ),
    special_values=False,
    diagnoses=(
        ("the target's logit is not subtracted: loss = logsumexp(logits) - logits[target]", _lse_only),
        ("the loss is in base 2: use natural exp and log (or multiply by ln 2 at the end)", _ce_base_2),
        ("the logits were rounded to the inputs' dtype before the softmax: keep them in float32", _logits_rounded),
    ),
)

EXERCISES = (SOFTMAX, PREDICT_ATTENTION_BYTES, FLASH_ATTENTION, LINEAR_CROSS_ENTROPY)
