"""The torch side of multi tensor adamw: what grading needs and a student may see (the float64
reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
kernel is in kernels/multi_tensor_adamw.py, which imports these; the grader never imports it."""

from __future__ import annotations

import math

import torch


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
