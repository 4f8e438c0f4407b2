"""Notebook 03, horizontal fusion: sibling reductions, a fused QKV projection, a multi-tensor AdamW step."""

from __future__ import annotations

import math

import torch

from autograder.guard.watch import to_device_keeping_layout
from autograder.specs.exercise import KernelExercise, NumericExercise, Shape, StepExercise
from autograder.specs.horizontal_torch import (  # noqa: F401  re-exported: notebook 03 uses them from here
    adamw_bytes,
    adamw_step_eager,
    adamw_step_reference,
    model_like_sizes,
    qkv_projection_bytes,
    qkv_projection_concat,
    qkv_projection_eager,
    qkv_projection_reference,
    random_adamw_state,
    row_sum_sumsq_bytes,
    row_sum_sumsq_eager,
    row_sum_sumsq_reference,
    split_qkv,
    torch_adamw,
)
from autograder.specs.rounding import TF32_NOTE, tf32


# ---------------------------------------------------------------- the exercises

NOTEBOOK = "03_horizontal_fusion"


# --- 1. Sibling reductions --------------------------------------------------------------------------------

def _stat_rows(shape: Shape, dtype, gen) -> torch.Tensor:
    """(M, N) rows with means of either sign and scales from 1e-2 to 300: squares of the largest overflow
    fp16, so they must be taken in fp32. Layouts: "padded" (row stride > N), "transposed" (a .t() view)."""
    m, n = shape.dims
    rows, cols = (n, m) if shape.layout == "transposed" else (m, n)
    width = cols + 37 if shape.layout == "padded" else cols
    scale = torch.exp(torch.empty(m, 1).uniform_(math.log(1e-2), math.log(300.0), generator=gen))
    sign = torch.where(torch.rand(m, 1, generator=gen) < 0.5, -1.0, 1.0)
    mean = sign * torch.empty(m, 1).uniform_(0.5, 2.0, generator=gen)
    x = (mean + torch.randn(m, n, generator=gen)) * scale
    if shape.layout == "transposed":
        return x.t().contiguous().to(dtype).t()
    base = torch.zeros(rows, width)
    base[:, :cols] = x
    return base.to(dtype)[:, :cols]


def _stat_inputs(shape, dtype, device, gen):
    return {"x": to_device_keeping_layout(_stat_rows(shape, dtype, gen), device)}


def _square_of_sum(x):
    s, _ = row_sum_sumsq_reference(x)
    return s, s.square()


def _means(x):
    s, ss = row_sum_sumsq_reference(x)
    return s / x.shape[1], ss / x.shape[1]


def _swapped(x):
    s, ss = row_sum_sumsq_reference(x)
    return ss, s


def _squares_in_input_dtype(x):
    return x.double().sum(-1), (x * x).double().sum(-1)  # x * x rounded to x's dtype: inf past 256 in fp16


ROW_SUM_SUMSQ = KernelExercise(
    id="03.row_sum_sumsq",
    kernel="row_sum_sumsq",  # its reference solution: kernels/row_sum_sumsq.py
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="row_sum_sumsq",
    signature="row_sum_sumsq(x) -> (row_sum, row_sumsq)",
    summary="Two sibling reductions from one read of x: each row's sum and sum of squares, float32, any length.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_stat_inputs,
    reference=row_sum_sumsq_reference,
    eager=row_sum_sumsq_eager,
    bytes=row_sum_sumsq_bytes,
    shapes=(Shape((1, 1)), Shape((1, 7)), Shape((5, 1000)), Shape((37, 4099)), Shape((3, 65537)),
            Shape((300, 33)), Shape((17, 3000), "padded"), Shape((100, 50), "transposed")),
    extra_shapes=(Shape((2, 40961)), Shape((129, 3), "transposed"), Shape((7, 5001), "padded")),
    precision_shapes=tuple(Shape((8, n)) for n in (1024, 4096, 16384, 65536)),
    perf_shape=Shape((32768, 4096)),
    tolerance={dt: (1e-3, 1e-5) for dt in (torch.float32, torch.float16, torch.bfloat16)},
    precision_factor=4.0,
    precision_floor={dt: 1e-5 for dt in (torch.float32, torch.float16, torch.bfloat16)},
    precision_note="Upcast to float32 right after tl.load, and keep both running sums in float32.",
    output_names=("row_sum", "row_sumsq"),
    output_dtype=torch.float32,
    diagnoses=(
        ("row_sumsq is the square of the sum; it should be the sum of the squares", _square_of_sum),
        ("the outputs are means (divided by N), not sums", _means),
        ("the two outputs are swapped: return (row_sum, row_sumsq)", _swapped),
        ("x * x is computed before upcasting: in fp16 it overflows past |x| = 256 (upcast to float32 first)",
         _squares_in_input_dtype),
    ),
)


# --- 2. Fused QKV projection -------------------------------------------------------------------------------

def _qkv_inputs(shape: Shape, dtype, device, gen):
    """dims (M, n_q, kv_width, K); layout "padded": rows of x further apart than K."""
    m, n_q, kv, k = shape.dims
    width = k + 24 if shape.layout == "padded" else k
    x = torch.randn(m, width, generator=gen).to(dtype)[:, :k]
    w = (torch.randn(n_q + 2 * kv, k, generator=gen) / math.sqrt(k)).to(dtype)
    return {"x": to_device_keeping_layout(x, device), "w_qkv": w.to(device), "kv_width": kv}


def _qkv_in_tf32(round_to_nearest: bool):
    def wrong(x, w_qkv, kv_width):
        if x.dtype != torch.float32:
            return qkv_projection_reference(x, w_qkv, kv_width)
        return split_qkv(tf32(x, round_to_nearest) @ tf32(w_qkv, round_to_nearest).t(), kv_width)

    return wrong


def _qkv_k_v_swapped(x, w_qkv, kv_width):
    q, k, v = qkv_projection_reference(x, w_qkv, kv_width)
    return q, v, k


QKV_PROJECTION = KernelExercise(
    id="03.qkv_projection",
    kernel="qkv_projection",  # its reference solution: kernels/qkv_projection.py
    # Timed at an 8B-class decode shape (16 rows), in CUDA graphs: a fraction of copy bandwidth (the 51 MB of
    # weights are too few to reach a 1 GiB copy's rate: the solution reaches 0.50 on an H200, three cuBLAS GEMMs
    # 0.34), and faster than three separate GEMMs (the solution 1.5x).
    bars=dict(min_fraction_of_peak=0.38, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="qkv_projection",
    signature="qkv_projection(x, w_qkv, kv_width) -> (q, k, v)",
    summary="Q, K and V from one GEMM launch over the concatenated weight: x read once, outputs are views.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_qkv_inputs,
    reference=qkv_projection_reference,
    eager=qkv_projection_eager,
    bytes=qkv_projection_bytes,
    shapes=(Shape((1, 64, 32, 64)), Shape((5, 128, 64, 100)), Shape((37, 96, 48, 257)), Shape((130, 64, 32, 512)),
            Shape((16, 256, 128, 1000)), Shape((64, 48, 8, 96), "padded")),
    extra_shapes=(Shape((33, 80, 24, 300)), Shape((3, 128, 64, 4097))),
    precision_shapes=tuple(Shape((32, 64, 32, k)) for k in (256, 1024, 4096, 16384)),
    # Timed at decode (16 rows, an 8B-class model's QKV: d_model 4096, 8 KV heads of 128): the weights' bytes set
    # the time, so it is graded as bandwidth. Three GEMMs are three short launches, two of them too narrow to
    # fill the GPU; one launch over the concatenated weight reads the same bytes at 1.5x the speed (H100 and
    # H200). At a 70B-class shape the same saving is 1.15x, too small a margin to grade (bench/suite.py shows
    # it); at prefill the GEMM is compute-bound and fusing saves little (notebook 03, section 3). About 25 us a
    # call: timed in CUDA graphs, where plain calls measured the launch path's noise (20% from run to run).
    perf_shape=Shape((16, 4096, 1024, 4096)),
    time_in_cuda_graph=True,
    tolerance={torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)},
    precision_factor=1.5,
    # fp32 inputs: an exact fp32 accumulation still loses ~eps * sqrt(K) (2e-6 at K = 16384 on an H200);
    # TF32 products or a bf16 accumulator cost ~1e-3.
    precision_floor={torch.float32: 2e-5},
    precision_note=(
        "Keep one float32 accumulator across the whole K loop (pass it to tl.dot as acc) and round only the "
        "stored tile. For float32 inputs pass input_precision=\"ieee\": by default tl.dot rounds them to TF32."
    ),
    output_names=("q", "k", "v"),
    outputs_share_storage=True,
    special_values=False,
    diagnoses=(
        *((TF32_NOTE, _qkv_in_tf32(rn)) for rn in (False, True)),
        ("k and v are swapped: k is the first kv_width columns after q", _qkv_k_v_swapped),
    ),
)


# --- 3. Multi-tensor AdamW -------------------------------------------------------------------------------

def _adam_lists(sizes, dtype, device, gen):
    """Parameters, gradients whose scale differs by tensor (1e-5 .. 10), and a state from earlier steps."""
    out = {"params": [], "grads": [], "exp_avgs": [], "exp_avg_sqs": []}
    for n in sizes:
        g_scale = math.exp(torch.empty(()).uniform_(math.log(1e-5), math.log(10.0), generator=gen).item())
        out["params"].append(torch.randn(n, generator=gen))
        out["grads"].append(torch.randn(n, generator=gen) * g_scale)
        out["exp_avgs"].append(0.5 * torch.randn(n, generator=gen) * g_scale)
        out["exp_avg_sqs"].append(torch.empty(n).uniform_(0.2, 1.5, generator=gen) * g_scale**2)
    return {k: [t.to(dtype).to(device) for t in v] for k, v in out.items()}


def _adam_hyper(gen):
    u = lambda lo, hi: float(torch.empty(()).uniform_(lo, hi, generator=gen))  # noqa: E731
    return {"lr": math.exp(u(math.log(1e-3), math.log(3e-2))), "beta1": u(0.8, 0.95), "beta2": u(0.95, 0.999),
            "eps": 1e-8 if u(0, 1) < 0.5 else 1e-6, "weight_decay": u(0.01, 0.2)}


def _adam_l2(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    # Adam with L2: the decay goes into the gradient and through the moments.
    g2 = [g.double() + weight_decay * p.double() for p, g in zip(params, grads)]
    return adamw_step_reference(params, g2, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, 0.0)


def _adam_no_bias_correction(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    # beta ** inf = 0: both corrections become 1.
    return adamw_step_reference(params, grads, exp_avgs, exp_avg_sqs, math.inf, lr, beta1, beta2, eps, weight_decay)


def _adam_eps_inside(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    _, m, v = adamw_step_reference(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay)
    new_p = [p.double() * (1 - lr * weight_decay) - lr * (mi / (1 - beta1**step)) / (vi / (1 - beta2**step) + eps).sqrt()
             for p, mi, vi in zip(params, m, v)]
    return new_p, m, v


def _adam_decay_without_lr(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    p, m, v = adamw_step_reference(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, 0.0)
    return [pi - weight_decay * q.double() for pi, q in zip(p, params)], m, v


def _adam_step_off_by_one(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    return adamw_step_reference(params, grads, exp_avgs, exp_avg_sqs, step + 1, lr, beta1, beta2, eps, weight_decay)


def _torch_baselines(lists, step, hyper):
    """torch.optim.AdamW's three implementations over copies of the same tensors, for comparison."""
    out = {}
    for label, impl in (("torch foreach=False", dict(foreach=False)), ("torch foreach=True", dict(foreach=True)),
                        ("torch fused=True", dict(fused=True))):
        copies = {n: [t.clone() for t in ts] for n, ts in lists.items()}
        out[label] = torch_adamw(copies["params"], copies["grads"], copies["exp_avgs"], copies["exp_avg_sqs"],
                                     step, **hyper, **impl)
    return out


ADAMW_STEP = StepExercise(
    id="03.adamw_step",
    kernel="multi_tensor_adamw",  # its reference solution: kernels/multi_tensor_adamw.py
    # Against the per-tensor PyTorch loop; the message also compares with torch.optim.AdamW's foreach and fused.
    bars=dict(min_fraction_of_peak=0.5, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="adamw_step",
    signature="adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay) -> None",
    summary="One AdamW step over a list of tensors, in place, in a launch count that does not grow with the list.",
    criteria=("correctness", "precision", "performance", "fusion"),
    arg_names=("params", "grads", "exp_avgs", "exp_avg_sqs"),
    state=("params", "exp_avgs", "exp_avg_sqs"),
    make_lists=_adam_lists,
    make_hyper=_adam_hyper,
    reference=adamw_step_reference,
    eager=adamw_step_eager,
    baselines=_torch_baselines,
    bytes=adamw_bytes,
    size_cases=((1,), (7, 1000, 3), (4099, 0, 257, 65539), tuple(range(1, 4000, 97))),
    extra_sizes=((2048, 1, 2047, 6151), (5,) * 33),
    steps=(1, 2, 10),
    precision_sizes=(4096, 65536, 1000, 7),
    precision_steps=20,
    perf_sizes=model_like_sizes,
    fusion_sizes=((1000, 7, 4096, 300), tuple(range(5, 64 * 131, 131))),
    max_launches=2,
    tolerance=(1e-6, 1e-5),
    # Rounding p in float32 costs a few 1e-6 of a 20-step move; low-precision arithmetic costs 1e-3.
    precision_factor=10.0,
    diagnoses=(
        ("the weight decay went into the gradient (Adam with L2); AdamW decays the weights directly: "
         "p * (1 - lr * weight_decay)", _adam_l2),
        ("no bias correction: divide m by (1 - beta1^step) and v by (1 - beta2^step)", _adam_no_bias_correction),
        ("eps is inside the square root: use sqrt(v_hat) + eps", _adam_eps_inside),
        ("the weight decay is not multiplied by lr: p * (1 - lr * weight_decay)", _adam_decay_without_lr),
        ("the bias correction uses step + 1: step is already the number of this update (1 for the first)",
         _adam_step_off_by_one),
    ),
)

# Predict before measuring: the bytes of two row statistics, as two reductions and as one kernel -----------

def predicted_row_stats_bytes_reference(rows: int, cols: int, elem_bytes: int) -> tuple[int, int]:
    """HBM bytes of (two separate reductions, one fused kernel) computing each row's sum and sum of squares of
    x (rows, cols), both float32 (rows,) outputs. Each reduction reads x and writes its float32 output; the fused
    kernel reads x once and writes both."""
    x = rows * cols * elem_bytes
    return 2 * x + 8 * rows, x + 8 * rows


def _stats_cases(rng):
    cases = [(32768, 4096, 2), (1, 1, 4), (1000, 1, 2)]
    for _ in range(5):
        cases.append((rng.randint(1, 100_000), rng.randint(1, 65536), rng.choice((1, 2, 4))))
    return cases


def _diagnose_stats(args, got, expected):
    rows, cols, elem_bytes = args
    x = rows * cols * elem_bytes
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-6)
    if close(got[0], 2 * x) or close(got[1], x):
        return "the outputs are bytes too: each statistic writes rows float32 values (4 bytes each)"
    if elem_bytes != 4 and close(got[1], x + 2 * rows * elem_bytes):
        return "the outputs are float32 whatever x's dtype: 4 bytes each"
    if close(got[0], x + 8 * rows):
        return "two separate reductions each read all of x: 2|x|"
    return None


PREDICT_ROW_STATS_BYTES = NumericExercise(
    id="03.predict_row_stats_bytes",
    notebook=NOTEBOOK,
    function="predicted_row_stats_bytes",
    signature="predicted_row_stats_bytes(rows, cols, elem_bytes) -> (two_reductions, fused)",
    summary="Predict the HBM bytes of a row's sum and sum of squares, as two reductions and as one kernel.",
    criteria=("correctness",),
    cases=_stats_cases,
    reference=predicted_row_stats_bytes_reference,
    diagnose=_diagnose_stats,
)


EXERCISES = (PREDICT_ROW_STATS_BYTES, ROW_SUM_SUMSQ, QKV_PROJECTION, ADAMW_STEP)
