"""Notebook 03's operations on the torch side: the unfused eager versions, the float64 references and the
bytes of the sibling row statistics, the fused QKV projection and the multi-tensor AdamW step, with
torch.optim.AdamW and the model-like tensor lists the step is timed over. The exercises of notebook 03 grade
against them and the kernels of kernels/ import them; nothing here is graded itself."""

from __future__ import annotations

import math

import torch

# ---------------------------------------------------------------- the torch side: row_sum_sumsq
# The torch side of row sum sumsq: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/row_sum_sumsq.py, which imports these; the grader never imports it.

def row_sum_sumsq_eager(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sibling reductions, each reading all of x: what two separate lines of PyTorch do."""
    return x.sum(-1, dtype=torch.float32), torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32).square()


def row_sum_sumsq_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xd = x.double()
    return xd.sum(-1), xd.square().sum(-1)


def row_sum_sumsq_bytes(x: torch.Tensor) -> int:
    """Read x once, write two fp32 values a row."""
    return x.numel() * x.element_size() + 2 * 4 * x.shape[0]


# ---------------------------------------------------------------- the torch side: qkv_projection
# The torch side of qkv projection: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/qkv_projection.py, which imports these; the grader never imports it.

def split_qkv(out: torch.Tensor, kv_width: int):
    """(q, k, v): the column blocks of an (M, n_q + 2 kv_width) output."""
    n_q = out.shape[1] - 2 * kv_width
    return out[:, :n_q], out[:, n_q : n_q + kv_width], out[:, n_q + kv_width :]


def qkv_projection_eager(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    """Three GEMMs, one per projection, each reading x: the unfused version."""
    w_q, w_k, w_v = split_qkv(w_qkv.t(), kv_width)
    return x @ w_q, x @ w_k, x @ w_v


def qkv_projection_concat(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    """One cuBLAS GEMM over the concatenated weight, then views: what inference engines do."""
    return split_qkv(x @ w_qkv.t(), kv_width)


def qkv_projection_reference(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    return split_qkv(x.double() @ w_qkv.double().t(), kv_width)


def qkv_projection_bytes(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int = 0, fused: bool = True) -> int:
    """Read x (once fused, three times not), read w_qkv, write the (M, N) output."""
    e = x.element_size()
    M, K = x.shape
    N = w_qkv.shape[0]
    return e * ((1 if fused else 3) * M * K + N * K + M * N)


def qkv_projection_flops(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int = 0) -> int:
    return 2 * x.shape[0] * x.shape[1] * w_qkv.shape[0]


# ---------------------------------------------------------------- the torch side: multi_tensor_adamw
# The torch side of multi tensor adamw: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/multi_tensor_adamw.py, which imports these; the grader never imports it.

def adamw_step_eager(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay) -> None:
    """The per-tensor loop (like torch.optim.AdamW(foreach=False)): several kernels per tensor."""
    bc1 = 1.0 - beta1**step
    bc2_sqrt = math.sqrt(1.0 - beta2**step)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p.mul_(1.0 - lr * weight_decay)
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        p.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(eps), value=-lr / bc1)


def adamw_step_reference(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    """The step in float64 without touching the inputs: (new params, new exp_avgs, new exp_avg_sqs) lists."""
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p, g, m, v = p.double(), g.double(), m.double(), v.double()
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**step)
        v_hat = v / (1 - beta2**step)
        new_p.append(p * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps))
        new_m.append(m)
        new_v.append(v)
    return new_p, new_m, new_v


def torch_adamw(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay, **impl):
    """torch.optim.AdamW over the same tensors, picking its implementation with impl (foreach=..., fused=...).

    Returns a function that runs one more step in place each call (the optimizer keeps its step count).
    """
    for p, g in zip(params, grads):
        p.grad = g
    opt = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay, **impl)
    on_device = impl.get("fused", False)
    for p, m, v in zip(params, exp_avgs, exp_avg_sqs):
        step_t = torch.tensor(float(step - 1), device=p.device if on_device else "cpu")
        opt.state[p] = {"step": step_t, "exp_avg": m, "exp_avg_sq": v}
    return opt.step


def model_like_sizes(gen: torch.Generator, total: int = 50_000_000, n: int = 200) -> tuple[int, ...]:
    """Tensor sizes shaped like a model's parameters: two thirds weight matrices of log-uniform size, one
    third short vectors (norms, biases), none a multiple of any block; the matrices hold about `total`."""
    n_mat = 2 * n // 3
    raw = torch.exp(torch.empty(n_mat).uniform_(math.log(1.0), math.log(16.0), generator=gen))
    mats = [int(r) | 1 for r in raw / raw.sum() * total]
    vecs = [int(v) for v in torch.randint(500, 8200, (n - n_mat,), generator=gen)]
    return tuple(mats + vecs)


def random_adamw_state(sizes, device="cuda", generator: torch.Generator | None = None) -> list[list[torch.Tensor]]:
    """[params, grads, exp_avgs, exp_avg_sqs] of the given sizes, random (never zeros), exp_avg_sqs >= 0."""
    # Seeded: drawn on the CPU (reproducible anywhere); unseeded: drawn on the device (fast at model size).
    where = "cpu" if generator is not None else device
    lists = [[torch.randn(n, generator=generator, device=where) * s for n in sizes] for s in (1.0, 1e-2, 1e-3, 1e-3)]
    lists[3] = [v.square() for v in lists[3]]
    return [[t.to(device) for t in lst] for lst in lists]


def adamw_bytes(params, grads=None, exp_avgs=None, exp_avg_sqs=None, *args) -> int:
    """Read p, g, m, v and write p, m, v once each."""
    return 7 * sum(p.numel() * p.element_size() for p in params)
