"""Notebook 05's sparse head: a SPLADE-style vocabulary head that never holds its logits.

A learned sparse retriever turns a passage into one weight per vocabulary entry: the hidden states h (B, S, H) of
a BERT-like encoder go through its masked-language-model head, logits z = h Wᵀ + b (B, S, V over a 30522-word
vocabulary), then each entry keeps its strongest evidence over the sequence:

    out[b, v] = max over the tokens s with mask[b, s] of log(1 + relu(z[b, s, v]))      (0 where none is kept)

Written as it reads, PyTorch stores the B x S x V logits (8 passages of 512 tokens: 500 MB in float32) and passes
over them three more times. log(1 + relu(.)) never decreases, so the max can be taken on z itself and the
activation applied once per (b, v): streamed over vocabulary tiles through the GEMM, each program keeps one
running max per entry in registers and writes B x V numbers.
"""

from __future__ import annotations

import math

import torch

from autograder.specs.exercise import KernelExercise, NumericExercise, Shape

NOTEBOOK = "05_streaming_reduction_fusion"
EPS32 = 2.0**-24  # float32's unit roundoff


# ---------------------------------------------------------------- the torch side
def sparse_head_reference(h, w, b, mask):
    """Exact, in float64: the masked max over the sequence of log1p(relu(h wᵀ + b))."""
    z = h.double() @ w.double().t() + b.double()
    z = z.masked_fill(~mask.bool()[..., None], -math.inf)
    return torch.log1p(torch.relu(z.amax(dim=1)))


def sparse_head_eager(h, w, b, mask):
    """As a SPLADE model's code writes it: the logits in full, the activation, the mask, the max."""
    weights = torch.log1p(torch.relu(h @ w.t() + b)) * mask[..., None].to(h.dtype)
    return weights.amax(dim=1).float()


def sparse_head_flops(h, w, b=None, mask=None) -> int:
    return 2 * h.shape[0] * h.shape[1] * h.shape[2] * w.shape[0]


def sparse_head_bytes(h, w, b, mask) -> int:
    """Each input read once, the (B, V) float32 output written once."""
    return (h.element_size() * h.numel() + w.element_size() * w.numel() + b.element_size() * b.numel()
            + mask.element_size() * mask.numel() + 4 * h.shape[0] * w.shape[0])


def sparse_logits_bytes(h, w) -> int:
    """What the unfused version stores: the B x S x V logits in float32."""
    return 4 * h.shape[0] * h.shape[1] * w.shape[0]


# ---------------------------------------------------------------- the exercise
def sparse_head_inputs(shape: Shape, dtype, device, gen):
    """h (B, S, H), w (V, H) and b (V,) scaled so that about half the logits are positive, and a mask (B, S) of
    each passage's real tokens: passage i keeps a random length, at least one token (layout "full": every token;
    "empty": the last passage is all padding, its weights all 0)."""
    bsz, seq, hid, voc = shape.dims
    h = torch.randn(bsz, seq, hid, generator=gen)
    w = torch.randn(voc, hid, generator=gen) / math.sqrt(hid)
    b = 0.5 * torch.randn(voc, generator=gen)
    lengths = torch.randint(1, seq + 1, (bsz,), generator=gen)
    if shape.layout == "full":
        lengths[:] = seq
    mask = torch.arange(seq)[None, :] < lengths[:, None]
    if shape.layout == "empty":
        mask[-1] = False
    return {"h": h.to(dtype).to(device), "w": w.to(dtype).to(device), "b": b.to(dtype).to(device),
            "mask": mask.to(device)}


def _logits_bytes(inputs: dict) -> int:
    return sparse_logits_bytes(inputs["h"], inputs["w"])


def _float32_sums(inputs: dict, dtype) -> tuple[float, str]:
    k = inputs["h"].shape[2]
    return 4 * EPS32 * math.sqrt(k), f"float32 accumulation over H = {k} (4 eps sqrt(H))"


def _no_mask(h, w, b, mask):
    return sparse_head_reference(h, w, b, torch.ones_like(mask))


def _no_bias(h, w, b, mask):
    return sparse_head_reference(h, w, torch.zeros_like(b), mask)


def _sum_not_max(h, w, b, mask):
    z = torch.log1p(torch.relu(h.double() @ w.double().t() + b.double())) * mask[..., None].double()
    return z.sum(dim=1)


SPARSE_HEAD = KernelExercise(
    id="05.sparse_head",
    kernel="sparse_head",  # its reference solution: kernels/sparse_head.py
    notebook=NOTEBOOK,
    function="sparse_head",
    signature="sparse_head(h, w, b, mask) -> weights",
    summary="weights[b, v] = max over the unmasked tokens s of log(1 + relu(h[b, s] · w[v] + b[v])), float32 "
            "(B, V), streamed over vocabulary tiles through the GEMM without the B x S x V logits.",
    criteria=("correctness", "precision", "memory", "performance", "fusion"),
    make_inputs=sparse_head_inputs,
    reference=sparse_head_reference,
    eager=sparse_head_eager,
    eager_name="the unfused SPLADE head, eager",
    bytes=sparse_head_bytes,
    flops=sparse_head_flops,
    shapes=(Shape((1, 1, 16, 1)), Shape((2, 5, 16, 7)), Shape((3, 33, 64, 300)), Shape((2, 70, 32, 129), "full"),
            Shape((3, 17, 48, 257), "empty"), Shape((1, 129, 64, 1000))),
    extra_shapes=(Shape((2, 65, 80, 1031)), Shape((5, 3, 16, 2), "empty"), Shape((1, 200, 24, 129), "full")),
    precision_shapes=tuple(Shape((4, 32, k, 512)) for k in (64, 512, 2048)),
    reduced_dim="H",
    reduced_axis=2,
    # 8 passages of 512 tokens through a BERT-base head (768 -> 30522): the float32 logits would take 500 MB.
    # The interpreter runs a smaller problem whose logits take 4 MiB.
    memory_shape=Shape((8, 512, 768, 30522)),
    memory_shape_cpu=Shape((4, 64, 64, 4096)),
    memory_bound=lambda inputs: _logits_bytes(inputs) // 8,
    materialised_bytes=_logits_bytes,
    memory_what="the float32 logits (B x S x V)",
    # provisional until an H100's cold checks: notebook 04's GEMM epilogue bar, a GEMM of the same shape class. On
    # two H200s, 11 cold checks (torch 2.11, triton 3.6, 2026-11-28/29): 0.439-0.498 of the matmul rate (spread
    # 1.14) and 3.26-3.46x eager; worst / 1.2 is 0.37 and 2.72, above both bars (bench/results/coldstart/).
    bars=dict(min_fraction_of_peak=0.35, min_speedup_over_eager=1.5),
    perf_shape=Shape((16, 512, 768, 30522)),
    output_dtype=torch.float32,
    tolerance={torch.float32: (1e-4, 1e-5), torch.float16: (3e-3, 2e-3), torch.bfloat16: (2e-2, 1e-2)},
    precision_factor=1.5,
    precision_floor_from_inputs=_float32_sums,
    precision_note="Keep the logits in the float32 accumulator: add the bias, mask and take the max there.",
    special_values=False,
    diagnoses=(
        ("padding tokens were not masked out: a position with mask False must not count", _no_mask),
        ("the bias b was not added to the logits", _no_bias),
        ("the weights were summed over the sequence: SPLADE's pooling takes the max", _sum_not_max),
    ),
)

# --- Predict: what the unfused head stores, what the fused one writes ---------------------------------------

def predicted_sparse_head_bytes_reference(b: int, s: int, v: int) -> tuple[int, int]:
    """(the float32 logits the unfused head stores, the float32 weights the fused head writes), in bytes."""
    return 4 * b * s * v, 4 * b * v


def _sparse_bytes_cases(rng):
    cases = [(16, 512, 30522), (1, 1, 1)]
    for _ in range(5):
        cases.append((rng.randint(1, 64), rng.randint(1, 2048), rng.randint(1000, 250_000)))
    return cases


def _diagnose_sparse_bytes(args, got, expected):
    b, s, v = args
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return "return two numbers: (the unfused head's logits, the fused head's output), in bytes"
    if math.isclose(got[0], 2 * b * s * v, rel_tol=1e-6):
        return "the logits are float32 (4 bytes each) whatever h's dtype: they leave the float32 accumulator"
    if math.isclose(got[0], b * s * v, rel_tol=1e-6) or math.isclose(got[1], b * v, rel_tol=1e-6):
        return "count bytes, not elements"
    if math.isclose(got[1], 4 * b * s * v, rel_tol=1e-6):
        return "the fused head writes one weight per (passage, word): the sequence is reduced away"
    return None


PREDICT_SPARSE_HEAD_BYTES = NumericExercise(
    id="05.predict_sparse_head_bytes",
    notebook=NOTEBOOK,
    function="predicted_sparse_head_bytes",
    signature="predicted_sparse_head_bytes(b, s, v) -> (unfused_logits, fused_output)",
    summary="Bytes of the float32 logits an unfused SPLADE head stores, and of the weights the fused head writes.",
    criteria=("correctness",),
    cases=_sparse_bytes_cases,
    reference=predicted_sparse_head_bytes_reference,
    diagnose=_diagnose_sparse_bytes,
)

EXERCISES = (PREDICT_SPARSE_HEAD_BYTES, SPARSE_HEAD)
