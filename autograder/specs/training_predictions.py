"""Notebook 07's predictions, each graded before the notebook measures it: what autograd keeps for attention's
backward, the flops of FlashAttention's forward and backward, and the bytes of the cross-entropy's logits held
whole against one chunk of rows."""

from __future__ import annotations

import math

from autograder.specs.exercise import NumericExercise

NOTEBOOK = "07_fusion_for_training"


def _close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


# --- What autograd keeps for attention's backward ---------------------------------------------------------

def saved_for_backward_reference(batch: int, heads: int, n: int, d: int, elem_bytes: int) -> tuple[int, int]:
    """(textbook, flash) bytes saved for the backward beyond q, k, v, for softmax(q kᵀ / √d) v over (batch, heads,
    n, d) inputs of elem_bytes: the textbook version keeps its n x n probabilities P in the inputs' dtype (the
    softmax's output, which the product with v keeps too: one tensor); a fused attention keeps its output o and
    one float32 log-sum-exp per query row."""
    rows = batch * heads * n
    return rows * n * elem_bytes, rows * (d * elem_bytes + 4)


def _saved_cases(rng):
    cases = [(4, 16, 8192, 128, 2), (1, 16, 4096, 128, 2), (1, 2, 64, 64, 4)]
    for _ in range(4):
        cases.append((rng.randint(1, 8), rng.randint(1, 32), rng.randint(1, 20000), rng.choice([16, 32, 64, 128]),
                      rng.choice([2, 4])))
    return cases


def _diagnose_saved(args, got, expected):
    b, h, n, d, e = args
    rows = b * h * n
    if _close(got[0], rows * n) or _close(got[1], rows * (d + 1)):
        return "the counts are in elements: multiply by elem_bytes (and 4 bytes for each float32 log-sum-exp)"
    if _close(got[0], 2 * rows * n * e) or _close(got[0], rows * n * (e + 4)):
        return "autograd keeps P once: the softmax's output and the operand of P @ v are the same tensor"
    if _close(got[1], rows * d * e):
        return "the fused attention also keeps one float32 log-sum-exp per query row, to rebuild P in the backward"
    if _close(got[1], rows * (d * e + e)):
        return "the log-sum-exp is float32 (4 bytes), whatever the inputs' dtype"
    if _close(got[0], expected[0] + 3 * rows * d * e) or _close(got[1], expected[1] + 3 * rows * d * e):
        return "q, k and v are the layer's inputs, alive anyway: count only what the backward adds"
    return None


PREDICT_SAVED = NumericExercise(
    id="07.predict_saved",
    notebook=NOTEBOOK,
    function="saved_for_backward",
    signature="saved_for_backward(batch, heads, n, d, elem_bytes) -> (textbook_bytes, flash_bytes)",
    summary="The bytes autograd saves for attention's backward beyond q, k, v: the textbook version's n x n "
            "probabilities against a fused attention's output and log-sum-exp; the notebook then measures both "
            "with a saved-tensor hook.",
    criteria=("correctness",),
    cases=_saved_cases,
    reference=saved_for_backward_reference,
    rtol=1e-9,
    diagnose=_diagnose_saved,
)


# --- The flops of FlashAttention's forward and backward ---------------------------------------------------

def attention_flops_reference(batch: int, heads: int, n: int, d: int, causal: bool) -> tuple[int, int]:
    """(forward, backward) flops of attention over (batch, heads, n, d) q, k, v, counting the matrix products
    only, 2 flops a multiply-add: the forward's S = Q Kᵀ and O = P V, two products of 2·n·n·d a head; the
    backward's five, S rebuilt, dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K and dK = dSᵀ Q. A causal mask halves both."""
    product = 2 * batch * heads * n * n * d
    return 2 * product // (2 if causal else 1), 5 * product // (2 if causal else 1)


def _flops_cases(rng):
    cases = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (1, 1, 1, 16, False)]
    for _ in range(5):
        cases.append((rng.randint(1, 8), rng.randint(1, 32), rng.randint(1, 16384), rng.choice([32, 64, 128, 256]),
                      rng.random() < 0.5))
    return cases


def _diagnose_flops(args, got, expected):
    b, h, n, d, causal = args
    halve = 2 if causal else 1
    product = 2 * b * h * n * n * d
    if _close(got[0], expected[0] / 2) and _close(got[1], expected[1] / 2):
        return "a product of an (n x d) and a (d x n) matrix is n·n·d multiply-adds: 2·n·n·d flops"
    if causal and _close(got[0], 2 * expected[0]):
        return "a causal mask hides half of the scores: both passes skip those tiles, so both counts halve"
    if _close(got[1], 7 * product // halve):
        return ("count the five products the gradients need; rebuilding S and dP in a second kernel (seven) is a "
                "choice of schedule, not part of the count")
    if _close(got[1], 4 * product // halve):
        return "the backward has five products: S is rebuilt first (from Q, K and the saved log-sum-exp)"
    if _close(got[1], 3 * product // halve):
        return "dP = dO Vᵀ is a product too: five in all (S, dV, dP, dQ, dK)"
    return None


PREDICT_BACKWARD_FLOPS = NumericExercise(
    id="07.predict_backward_flops",
    notebook=NOTEBOOK,
    function="attention_flops",
    signature="attention_flops(batch, heads, n, d, causal) -> (forward_flops, backward_flops)",
    summary="The matrix products' flops of attention's forward and of FlashAttention's backward, which rebuilds "
            "S and adds dV, dP, dQ and dK; the notebook then times both and reads the rate off your count.",
    criteria=("correctness",),
    cases=_flops_cases,
    reference=attention_flops_reference,
    rtol=1e-9,
    diagnose=_diagnose_flops,
)


# --- The cross-entropy's logits: all of them, or one chunk of rows -----------------------------------------

def logits_bytes_reference(n: int, v: int, chunk: int) -> tuple[int, int]:
    """(whole, chunk) bytes of float32 logits: all n x v of them, as eager PyTorch holds them, against one chunk
    of at most `chunk` rows (the last chunk, or the only one, may be shorter: never more rows than n)."""
    return 4 * n * v, 4 * min(chunk, n) * v


def _logits_cases(rng):
    cases = [(8192, 128256, 512), (4096, 32768, 1024), (100, 1000, 256), (1, 1, 1)]
    for _ in range(5):
        cases.append((rng.randint(1, 65536), rng.randint(1, 262144), rng.choice([64, 128, 256, 512, 1024, 2048])))
    return cases


def _diagnose_logits(args, got, expected):
    n, v, chunk = args
    if _close(got[0], n * v) or _close(got[1], min(chunk, n) * v):
        return "these are elements: the logits are float32, 4 bytes each"
    if _close(got[0], 2 * n * v) or _close(got[1], 2 * min(chunk, n) * v):
        return "the logits are float32 whatever the inputs' dtype (the loss's softmax needs them that precise)"
    if chunk > n and _close(got[1], 4 * chunk * v):
        return "a chunk holds at most n rows: with fewer rows than a chunk, the one chunk is all of them"
    return None


PREDICT_LOGITS_BYTES = NumericExercise(
    id="07.predict_logits_bytes",
    notebook=NOTEBOOK,
    function="logits_bytes",
    signature="logits_bytes(n, v, chunk) -> (whole_bytes, chunk_bytes)",
    summary="The bytes of the float32 logits of n rows over a vocabulary of v, all of them against one chunk of "
            "rows; the notebook then measures what your chunked cross-entropy allocates.",
    criteria=("correctness",),
    cases=_logits_cases,
    reference=logits_bytes_reference,
    rtol=1e-9,
    diagnose=_diagnose_logits,
)


EXERCISES = (PREDICT_SAVED, PREDICT_BACKWARD_FLOPS, PREDICT_LOGITS_BYTES)
