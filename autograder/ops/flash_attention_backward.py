"""The torch side of FlashAttention's backward pass: what grading needs and a student may see (the float64
gradients, the unfused eager backward, the forward's outputs it starts from, flops and bytes, SDPA's backward
timed alone). The Triton kernels are in kernels/flash_attention_backward.py; the grader never imports them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .flash_attention import attention_naive


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

    from .. import runtime

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
