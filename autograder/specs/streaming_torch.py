"""Notebook 05's operations on the torch side: the unfused eager versions, the float64 references and the bytes
and flops of softmax, attention and a linear layer fused with cross-entropy. The exercises of notebook 05 grade
against them, and the kernels of kernels/ import them; nothing here is graded itself."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder import runtime

# ---------------------------------------------------------------- the torch side: softmax
# The torch side of softmax: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/softmax.py, which imports these; the grader never imports it.

def softmax_eager(x: torch.Tensor) -> torch.Tensor:
    """The textbook formula op by op: five kernels, each a pass over the row."""
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def softmax_bytes(x: torch.Tensor) -> int:
    """The fewest bytes: read x once, write y once."""
    return 2 * x.numel() * x.element_size()


# ---------------------------------------------------------------- the torch side: flash_attention
# The torch side of flash attention: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/flash_attention.py, which imports these; the grader never imports it.

def attention_scores(q, k, causal: bool = False, first_hidden: int = 1):
    """S = q kᵀ / sqrt(D), (B, H, N, N_kv); causal: -inf from key i + first_hidden on in row i (1: the keys
    after the query)."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        hidden = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(first_hidden)
        s = s.masked_fill(hidden, float("-inf"))
    return s


def attention_naive(q, k, v, causal: bool = False):
    """The textbook version: S and P are (B, H, N, N_kv) tensors in memory."""
    s = attention_scores(q, k, causal)
    lse = torch.logsumexp(s.float(), dim=-1)
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v, lse


def attention_reference(q, k, v, causal: bool = False):
    o, lse = attention_naive(q.double(), k.double(), v.double(), causal)
    return o, lse.double()


def attention_flops(q, k, v=None, causal: bool = False) -> int:
    """Two GEMMs of 2 N N_kv D flops per head; a causal mask halves the work that counts."""
    B, H, N, D = q.shape
    return 4 * B * H * N * k.shape[2] * D // (2 if causal else 1)


def attention_bytes(q, k, v, causal: bool = False) -> int:
    return q.element_size() * (2 * q.numel() + k.numel() + v.numel()) + 4 * q.shape[0] * q.shape[1] * q.shape[2]


# SDPA's backends, forced one at a time: cuDNN's attention (what SDPA picks on Hopper for long sequences) and
# FlashAttention-2 (what it picked on earlier GPUs). Demonstrations plot them apart from SDPA's default.
SDPA_BACKENDS = {"SDPA cuDNN": "CUDNN_ATTENTION", "SDPA flash (FlashAttention-2)": "FLASH_ATTENTION"}


def sdpa_with_backend(backend: str):
    """f(q, k, v, causal) running SDPA with one backend forced (a name of torch.nn.attention.SDPBackend). Raises
    runtime.NotTimedHere, which a demonstration reports and leaves out, where this GPU or build lacks the backend,
    and while the grader runs the notebook (nobody reads the plot then)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(q, k, v, causal: bool = False):
        if runtime.small_demos():
            raise runtime.NotTimedHere("SDPA's backends are not timed apart while the grader runs this notebook")
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            raise runtime.NotTimedHere(f"SDPA's {backend} backend does not run here: {first}") from exc

    return run


# ---------------------------------------------------------------- the torch side: linear_cross_entropy
# The torch side of linear cross entropy: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/linear_cross_entropy.py, which imports these; the grader never imports it.

def linear_cross_entropy_eager(h, w, targets):
    """PyTorch as written in most training loops: the logits in full, then cross-entropy."""
    return F.cross_entropy((h @ w.t()).float(), targets.long(), reduction="none")


def linear_cross_entropy_reference(h, w, targets):
    return F.cross_entropy(h.double() @ w.double().t(), targets.long(), reduction="none")


def linear_cross_entropy_flops(h, w, targets=None) -> int:
    return 2 * h.shape[0] * h.shape[1] * w.shape[0]


def logits_bytes(h, w) -> int:
    """What materialising the logits in float32 costs, the memory the fused version does without."""
    return 4 * h.shape[0] * w.shape[0]
