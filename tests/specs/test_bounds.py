"""Bounds that PyTorch meets: the grader's tolerances and precision bounds, applied to PyTorch's own ops and to
the algorithm a notebook teaches, written in torch. A bound they fail is stricter than the arithmetic allows.

These call the grader's own numbers (outputs.tolerance, precision.precision_bound) on outputs made by
torch, since the criteria themselves fail any output that torch computed instead of a kernel.
"""

import pytest
import torch
import torch.nn.functional as F

from autograder import runtime
from autograder import specs as registry
from autograder.specs.horizontal_fusion import qkv_projection_eager
from autograder.specs.horizontal_fusion import row_sum_sumsq_eager
from autograder.specs.lora import lora_eager
from autograder.criteria.cases import case_inputs as _inputs
from autograder.criteria.outputs import as_tuple as _as_tuple, compare as _compare, relative_error as _rel_err, tolerance
from autograder.criteria.precision import precision_bound


def _rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _add_rms_norm(x, residual, weight, eps):
    s = x.float() + residual.float()
    return F.rms_norm(s, (x.shape[-1],), weight.float(), eps).to(x.dtype), s.to(x.dtype)


def _layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _layer_norm_two_pass(x, weight, bias, eps):
    """What notebook 02's hint teaches (and Triton's layer-norm tutorial does): the mean first, then the variance
    of the centred values, all in float32."""
    xf = x.float()
    xc = xf - xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xc * xc).mean(-1, keepdim=True) + eps)
    return (xc * rstd * weight.float() + bias.float()).to(x.dtype)


def _layer_norm_cancelling(x, weight, bias, eps):
    """The variance as E[x^2] - E[x]^2 in float32: the bug the exercise's offset rows exist to catch."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf * xf).mean(-1, keepdim=True) - mean * mean
    return ((xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)


def _softmax(x):
    return torch.softmax(x, -1)


def _softmax_online(x):
    """What notebook 05 teaches for long rows: running max and rescaled sum over chunks, float32, one rounding."""
    xf = x.float()
    m = torch.full(x.shape[:-1], float("-inf"), device=x.device)
    s = torch.zeros(x.shape[:-1], device=x.device)
    for chunk in xf.split(1024, dim=-1):
        m_new = torch.maximum(m, chunk.amax(-1))
        s = s * torch.exp(m - m_new) + torch.exp(chunk - m_new[:, None]).sum(-1)
        m = m_new
    return (torch.exp(xf - m[:, None]) / s[:, None]).to(x.dtype)


def _fused_chain_fp32(x, bias, alpha):
    """The taught kernel's arithmetic: float32 throughout, one rounding at the store."""
    return (alpha * F.silu(x.float() + bias.float())).to(x.dtype)


def _rms_norm_backward(x, weight, dy, eps):
    """PyTorch's autograd through its own F.rms_norm."""
    xr, wr = x.detach().requires_grad_(), weight.detach().requires_grad_()
    F.rms_norm(xr, (x.shape[-1],), wr, eps).backward(dy)
    return xr.grad, wr.grad


def _rms_norm_backward_fp32(x, weight, dy, eps):
    """The taught backward: rstd recomputed in float32, dx = rstd (w dy - x rstd^2 mean(x w dy)), dw summed in
    float32 over the rows, each rounded once."""
    xf, wf, dyf = x.float(), weight.float(), dy.float()
    rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    wdy = wf * dyf
    dx = rstd * (wdy - xf * rstd.square() * (xf * wdy).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xf * rstd).sum(0).to(weight.dtype)


def _qkv_one_gemm(x, w_qkv, kv_width):
    """One GEMM over the stacked weight, split into views: the fused kernel's arithmetic as PyTorch runs it."""
    out = x @ w_qkv.t()
    n_q = w_qkv.shape[0] - 2 * kv_width
    return out[:, :n_q], out[:, n_q:n_q + kv_width], out[:, n_q + kv_width:]


def _gemm_epilogue_fp32(x, w, b, r):
    """The taught epilogue: the float32 accumulator, bias, GELU and residual in float32, one rounding."""
    acc = x.float() @ w.float()
    return (F.gelu(acc + b.float(), approximate="tanh") + r.float()).to(x.dtype)


def _swiglu_fp32(x, w_gate, w_up):
    g, u = x.float() @ w_gate.float(), x.float() @ w_up.float()
    return (F.silu(g) * u).to(x.dtype)


def _lora_fp32(x, w, a, b, scale):
    """The taught LoRA kernel: float32 accumulators, s x A^T rounded once to the inputs' dtype, y once."""
    xa = (scale * (x.float() @ a.float().t())).to(x.dtype)
    return (x.float() @ w.float().t() + xa.float() @ b.float().t()).to(x.dtype)


def _sdpa(q, k, v, causal=False):
    """PyTorch's own attention for o; the log-sum-exp as its float32 formula (SDPA does not return it)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, -1)


def _attention_online(q, k, v, causal=False, block=64):
    """What notebook 05 teaches: key blocks, running max and sum, a rescaled float32 accumulator, o rounded once."""
    qf, kf, vf = q.float(), k.float(), v.float()
    n, n_kv = q.shape[-2], k.shape[-2]
    m = torch.full(q.shape[:-1], float("-inf"), device=q.device)
    l_sum = torch.zeros(q.shape[:-1], device=q.device)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), device=q.device)
    rows = torch.arange(n, device=q.device)[:, None]
    for start in range(0, n_kv, block):
        s = qf @ kf[..., start:start + block, :].transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            cols = torch.arange(start, min(start + block, n_kv), device=q.device)
            s = s.masked_fill(cols[None, :] > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        scale = torch.exp(m - safe)
        p = torch.exp(s - safe[..., None])
        l_sum = l_sum * scale + p.sum(-1)
        acc = acc * scale[..., None] + p @ vf[..., start:start + block, :]
        m = m_new
    return (acc / l_sum[..., None]).to(q.dtype), m + torch.log(l_sum)


def _cross_entropy(h, w, targets):
    """PyTorch's F.linear and F.cross_entropy, on float32 logits as the exercise asks. (Logits rounded to the
    inputs' dtype, as a bf16 training loop makes them, are the error the exercise names: on the "confident"
    rows, logits near 150 lose 0.06 to float16.)"""
    return F.cross_entropy(F.linear(h.float(), w.float()), targets.long(), reduction="none")


def _cross_entropy_streaming(h, w, targets, block=4096):
    """What notebook 05 teaches: logits a vocabulary block at a time in float32, a running (max, sum), the
    target's logit picked up on the way; no (M, V) tensor."""
    hf, wf = h.float(), w.float()
    m = torch.full((h.shape[0],), float("-inf"), device=h.device)
    s = torch.zeros(h.shape[0], device=h.device)
    target_logit = torch.zeros(h.shape[0], device=h.device)
    for start in range(0, w.shape[0], block):
        logits = hf @ wf[start:start + block].t()
        m_new = torch.maximum(m, logits.amax(-1))
        s = s * torch.exp(m - m_new) + torch.exp(logits - m_new[:, None]).sum(-1)
        m = m_new
        inside = (targets >= start) & (targets < start + logits.shape[1])
        picked = logits.gather(1, (targets - start).clamp(0, logits.shape[1] - 1).long()[:, None])[:, 0]
        target_logit = torch.where(inside, picked, target_logit)
    return m + torch.log(s) - target_logit


def _sdpa_backward(q, k, v, o, lse, do, causal=False):
    """PyTorch's autograd through its own SDPA."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    return torch.autograd.grad(out, leaves, do)


def _attention_backward_recompute(q, k, v, o, lse, do, causal=False):
    """What notebook 07 teaches: P rebuilt from the saved log-sum-exp in float32, delta = rowsum(dO * O), P and dS
    rounded to the inputs' dtype as the products' operands, float32 sums, each gradient rounded once."""
    scale = q.shape[-1] ** -0.5
    qf, kf, vf, dof = q.float(), k.float(), v.float(), do.float()
    s = qf @ kf.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])
    delta = (dof * o.float()).sum(-1, keepdim=True)
    ds = p * (dof @ vf.transpose(-1, -2) - delta)
    as_operand = lambda t: t.to(q.dtype).float()  # noqa: E731
    dv = as_operand(p).transpose(-1, -2) @ dof
    dq = as_operand(ds) @ kf * scale
    dk = as_operand(ds).transpose(-1, -2) @ qf * scale
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)


def _cross_entropy_backward(h, w, targets):
    """PyTorch's F.linear and F.cross_entropy and autograd, on float32 logits as the exercise asks (as for notebook
    05's: logits rounded to float16 lose 0.06 on the "confident" rows, and the gradients 5% with them), the
    gradients rounded to the inputs' dtype."""
    hl, wl = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    loss = F.cross_entropy(F.linear(hl, wl), targets.long())
    dh, dw = torch.autograd.grad(loss, (hl, wl))
    return loss.detach(), dh.to(h.dtype), dw.to(w.dtype)


def _cross_entropy_backward_chunked(h, w, targets, rows=16):
    """What notebook 07 teaches: a chunk of rows at a time, float32 logits, dlogits = (p - y) / M rounded to the
    inputs' dtype, dh's rows rounded once, dw accumulated in its own dtype chunk after chunk."""
    M = h.shape[0]
    loss = torch.zeros((), device=h.device)
    dh = torch.empty_like(h)
    dw = torch.zeros_like(w)
    for start in range(0, M, rows):
        hc, tc = h[start:start + rows], targets[start:start + rows].long()
        logits = hc.float() @ w.float().t()
        lse = torch.logsumexp(logits, -1)
        loss += (lse - logits.gather(1, tc[:, None])[:, 0]).sum() / M
        g = torch.exp(logits - lse[:, None])
        g[torch.arange(len(tc)), tc] -= 1
        g = (g / M).to(h.dtype).float()
        dh[start:start + rows] = (g @ w.float()).to(h.dtype)
        dw = (dw.float() + g.t() @ hc.float()).to(w.dtype)
    return loss, dh, dw



def _sparse_head_fp32(h, w, b, mask):
    """A SPLADE head as PyTorch computes it in float32: the logits in full, activated, masked, max-pooled."""
    z = torch.log1p(torch.relu(h.float() @ w.float().t() + b.float()))
    return (z * mask[..., None].float()).amax(dim=1)


def _sparse_head_streaming(h, w, b, mask, block=16):
    """What notebook 05 teaches: a running max of the float32 logits over blocks of tokens, the activation once."""
    best = torch.full((h.shape[0], w.shape[0]), float("-inf"), device=h.device)
    for start in range(0, h.shape[1], block):
        z = h[:, start:start + block].float() @ w.float().t() + b.float()
        z = z.masked_fill(~mask[:, start:start + block, None], float("-inf"))
        best = torch.maximum(best, z.amax(dim=1))
    return torch.log1p(torch.relu(best))

# For every kernel exercise: PyTorch's own op, or its eager code where it has none (torch.compile of that code
# is graded on a GPU below), and the algorithm the notebook teaches, written in torch.
TORCH_VERSIONS = [
    ("01.fused_chain", _fused_chain_fp32),
    ("02.rmsnorm", _rms_norm), ("02.rmsnorm_repair", _rms_norm), ("02.add_rmsnorm", _add_rms_norm),
    ("02.layernorm", _layer_norm), ("02.layernorm", _layer_norm_two_pass),
    ("02.rmsnorm_backward", _rms_norm_backward), ("02.rmsnorm_backward", _rms_norm_backward_fp32),
    ("03.row_sum_sumsq", row_sum_sumsq_eager), ("03.qkv_projection", qkv_projection_eager),
    ("03.qkv_projection", _qkv_one_gemm),
    ("04.gemm_gelu_residual", _gemm_epilogue_fp32), ("04.swiglu", _swiglu_fp32),
    ("04.lora", lora_eager), ("04.lora", _lora_fp32),
    ("05.softmax", _softmax), ("05.softmax", _softmax_online),
    ("05.flash_attention", _sdpa), ("05.flash_attention", _attention_online),
    ("05.linear_cross_entropy", _cross_entropy), ("05.linear_cross_entropy", _cross_entropy_streaming),
    ("05.sparse_head", _sparse_head_fp32), ("05.sparse_head", _sparse_head_streaming),
    ("07.flash_attention_backward", _sdpa_backward), ("07.flash_attention_backward", _attention_backward_recompute),
    ("07.linear_cross_entropy_backward", _cross_entropy_backward),
    ("07.linear_cross_entropy_backward", _cross_entropy_backward_chunked),
]
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if runtime.has_gpu() else [])


def _worst(exercise_id, fn, dtype):
    """(the correctness cases whose elements fall outside the tolerance, the worst error / bound of precision)."""
    ex = registry.get(exercise_id)
    failed = []
    for shape in ex.shapes:
        inputs = _inputs(ex, shape, dtype, 2024)
        for i, (out, ref) in enumerate(zip(_as_tuple(fn(**inputs)), _as_tuple(ex.reference(**inputs)))):
            mismatch = _compare(out, ref, ex.out_dtype(dtype, i), *tolerance(ex, inputs, dtype))
            if mismatch:
                failed.append(f"{shape}: {mismatch}")
    worst = 0.0
    for shape in ex.precision_shapes or (ex.precision_shape,):
        inputs = _inputs(ex, shape, dtype, 7)
        refs = _as_tuple(ex.reference(**inputs))
        err = max(_rel_err(o, r) for o, r in zip(_as_tuple(fn(**inputs)), refs))
        worst = max(worst, err / precision_bound(ex, inputs, refs, dtype)[0])
    return failed, worst


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("exercise_id, fn", TORCH_VERSIONS, ids=lambda v: getattr(v, "__name__", v))
def test_pytorch_and_the_taught_algorithm_meet_the_bounds(exercise_id, fn, dtype):
    failed, worst = _worst(exercise_id, fn, dtype)
    assert not failed, f"{exercise_id} {fn.__name__} {dtype}: " + "; ".join(failed[:3])
    assert worst <= 1.0, f"{exercise_id} {fn.__name__} {dtype}: error {worst:.2f} times the precision bound"


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id, fn", [("05.linear_cross_entropy", _cross_entropy),
                                             ("07.linear_cross_entropy_backward", _cross_entropy_backward)])
def test_cross_entropy_bounds_hold_in_the_tail_of_the_confident_cases(exercise_id, fn):
    """The grader draws new inputs every run, so a bound must hold for nearly every seed, not one: a peaked
    softmax (logits of spread 40) carries the float32 logits' error into the gradients, and a bound without it
    failed PyTorch's own backward on 2 seeds in 300 (and the reference, on an H100, once)."""
    ex = registry.get(exercise_id)
    shape = next(s for s in ex.shapes if "confident" in str(s))
    failed = []
    for seed in range(300):  # without the logits term, PyTorch failed 07's on seeds 179 and 274 (8 of 1500)
        inputs = _inputs(ex, shape, torch.float32, seed)
        for i, (out, ref) in enumerate(zip(_as_tuple(fn(**inputs)), _as_tuple(ex.reference(**inputs)))):
            mismatch = _compare(out, ref, ex.out_dtype(torch.float32, i), *tolerance(ex, inputs, torch.float32))
            if mismatch:
                failed.append(f"seed {seed}: {mismatch}")
    assert not failed, "; ".join(failed[:3])


def test_layernorm_bound_still_fails_the_cancelling_variance():
    failed, worst = _worst("02.layernorm", _layer_norm_cancelling, torch.float32)
    assert any("offset" in f for f in failed) and worst > 10


@pytest.mark.parametrize("impl", [{"foreach": False}, {"foreach": True}], ids=["for-loop", "foreach"])
def test_torch_adamw_meets_the_step_bounds(impl):
    """torch.optim.AdamW, run on the grader's cases step after step, within the tolerance and the precision
    bound of 03.adamw_step (the criteria themselves fail it for updating the state with torch, not a kernel)."""
    from autograder import config
    from autograder.criteria import step as step_criterion
    from autograder.specs.horizontal_fusion import torch_adamw

    ex = registry.get("03.adamw_step")
    fn = lambda *args: torch_adamw(*args, **impl)()  # noqa: E731
    mismatches = []
    for sizes in ex.size_cases:
        for dtype in ex.dtypes:
            lists, hyper, gen = step_criterion._case(ex, sizes, dtype, 99)
            for k, step in enumerate(ex.steps):
                if k:
                    lists.update({n: t for n, t in step_criterion._fresh_inputs(ex, lists, dtype, gen).items()
                                  if n not in ex.state})
                before = {n: [t.double().clone() for t in ts] for n, ts in lists.items()}
                fn(*[lists[n] for n in ex.arg_names], step, *hyper.values())
                refs = ex.reference(**before, step=step, **hyper)
                mismatches += [m for n, ref in zip(ex.state, refs) for i, (t, r) in enumerate(zip(lists[n], ref))
                               if (m := step_criterion._mismatch(n, i, t, r, ex))]
    assert not mismatches, mismatches[:3]
    precision = step_criterion.step_precision(ex, fn, config.load())
    assert precision.status == "passed", precision.message


# Where PyTorch has no op, torch.compile of the eager code is what "PyTorch's own" means: graded on a GPU, bf16
# included. (The linear cross-entropy is left out: the exercise asks for float32 logits, and the compiled eager
# code keeps the GEMM's bf16 logits, the rounding the exercise names.)
COMPILED = ["01.fused_chain", "02.add_rmsnorm", "03.row_sum_sumsq", "04.gemm_gelu_residual", "04.swiglu", "04.lora"]


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.has_gpu(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("exercise_id", COMPILED)
def test_torch_compile_of_the_eager_code_meets_the_bounds(exercise_id, dtype):
    import torch._dynamo

    # One compilation per shape and dtype: past dynamo's default limit of 8 it would quietly run eager instead.
    # (dynamo's own patch: its config answers getattr through a module __getattr__, which monkeypatch refuses.)
    with torch._dynamo.config.patch(recompile_limit=256):
        compiled = torch.compile(registry.get(exercise_id).eager, dynamic=False)
        failed, worst = _worst(exercise_id, compiled, dtype)
    assert not failed, f"{exercise_id} torch.compile {dtype}: " + "; ".join(failed[:3])
    assert worst <= 1.0, f"{exercise_id} torch.compile {dtype}: error {worst:.2f} times the precision bound"


def test_adamw_moments_keep_the_rounding_of_terms_that_nearly_cancel():
    """m = 0.9 m + 0.1 g with the two terms almost cancelling: a float32 kernel's one rounding of each term is
    far larger than the small result (a correct kernel once missed at 1.4e-5 relative, a random trial of a
    one-element tensor). The tolerance scales with the moment before the step as well as after it."""
    import torch

    from autograder.criteria import step as step_criterion

    m_old = torch.tensor([5.0e-5], dtype=torch.float64)
    expected = torch.tensor([-5.55332e-06], dtype=torch.float64)
    got = torch.tensor([-5.55324e-06], dtype=torch.float64)
    assert not bool(step_criterion._close(got, expected, 1e-6, 1e-5))  # the old scale: the result alone
    assert bool(step_criterion._close(got, expected, 1e-6, 1e-5, prior=m_old))
    assert not bool(step_criterion._close(-got, expected, 1e-6, 1e-5, prior=m_old))  # a sign error still fails
