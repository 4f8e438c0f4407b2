"""Notebook 01, the HBM cost model: two numeric exercises and the first Triton kernel."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.guard.watch import to_device_keeping_layout
from autograder.specs.exercise import KernelExercise, NumericExercise, Shape

# ---------------------------------------------------------------- the torch side: fused_chain
# The torch side of fused chain: what grading needs and a student may see (the float64
# reference, the unfused eager version, the bytes and flops an implementation must move). The Triton
# kernel is in kernels/fused_chain.py, which imports these; the grader never imports it.

def fused_chain_eager(x: torch.Tensor, bias: torch.Tensor, alpha: float) -> torch.Tensor:
    """The unfused version: three kernels, three round trips through memory."""
    return alpha * torch.nn.functional.silu(x + bias)


def fused_chain_reference(x: torch.Tensor, bias: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exact up to float64 rounding: the yardstick for correctness and precision."""
    z = x.double() + bias.double()
    return alpha * z * torch.sigmoid(z)


def fused_chain_bytes(x: torch.Tensor, bias: torch.Tensor, alpha: float = 1.0) -> int:
    """The fewest bytes any implementation must move: read x and bias once, write y once."""
    return 2 * x.numel() * x.element_size() + bias.numel() * bias.element_size()


# ---------------------------------------------------------------- the exercises

NOTEBOOK = "01_hbm_cost_model"


# (a) The cost model ---------------------------------------------------------------------------------------

def chain_times_reference(n_ops: int, size_bytes: float, bandwidth: float, launch_s: float) -> tuple[float, float]:
    one_pass = 2 * size_bytes / bandwidth  # read S and write S
    return n_ops * (one_pass + launch_s), one_pass + launch_s


def _log_uniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _cost_cases(rng):
    cases = []
    for _ in range(6):
        cases.append((rng.randint(1, 12), float(round(_log_uniform(rng, 1e3, 1e10))),
                      _log_uniform(rng, 5e11, 5e12), _log_uniform(rng, 1e-6, 2e-5)))
    return cases


def _diagnose_cost(args, got, expected):
    n, s, bw, launch = args
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-6)  # noqa: E731
    (gu, gf), (eu, ef) = got, expected
    if close(gu, ef) and close(gf, eu):
        return "the two times are swapped: return (unfused, fused)"
    if close(gu, n * 2 * s / bw):
        return "the unfused time leaves out the launch overhead each of the n kernels pays"
    if close(gu, n * (s / bw + launch)):
        return "each unfused op reads S bytes and writes S bytes: 2*S per op"
    if close(gf, 2 * s / bw):
        return "the fused kernel still pays one launch"
    if close(gf, n * 2 * s / bw + launch) or close(gf, eu):
        return "the fused kernel moves the tensor once (one read, one write), however long the chain"
    if close(gu, eu * 1e6) or close(gf, ef * 1e6):
        return "times are in seconds, not microseconds"
    return None


COST_MODEL = NumericExercise(
    id="01.cost_model",
    notebook=NOTEBOOK,
    function="chain_times",
    signature="chain_times(n_ops, size_bytes, bandwidth, launch_s) -> (t_unfused, t_fused)",
    summary="The HBM round-trip cost model of an elementwise chain, unfused and fused, in seconds.",
    criteria=("correctness",),
    cases=_cost_cases,
    reference=chain_times_reference,
    diagnose=_diagnose_cost,
)


# (b) Quantify the win on a Llama-2-7B decoder layer -------------------------------------------------------

def layer_traffic_reference(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth):
    x = batch * seq * hidden * bytes_per_elem  # one activation of the residual stream
    h = batch * seq * intermediate * bytes_per_elem  # one tensor of the MLP's hidden width
    # Unfused: 2 RMSNorms as 3 kernels each (5|x|), 2 residual adds (3|x|), SiLU (2|h|) and the gate
    # product (3|h|). Fused: each RMSNorm one kernel (2|x|), adds unchanged, SwiGLU one kernel (3|h|).
    unfused = 2 * 5 * x + 2 * 3 * x + 5 * h
    fused = 2 * 2 * x + 2 * 3 * x + 3 * h
    return unfused, fused, (unfused - fused) / bandwidth


LLAMA2_7B = (4, 2048, 4096, 11008, 2, 3.0e12)


def _traffic_cases(rng):
    cases = [LLAMA2_7B]
    for _ in range(5):
        hidden = 128 * rng.randint(8, 64)
        cases.append((rng.randint(1, 16), 128 * rng.randint(1, 64), hidden, 256 * rng.randint(hidden // 128, hidden // 64),
                      rng.choice([2, 4]), _log_uniform(rng, 1e12, 5e12)))
    return cases


def _diagnose_traffic(args, got, expected):
    b, s, hid, inter, nb, bw = args
    x, h = b * s * hid * nb, b * s * inter * nb
    close = lambda a, e: math.isclose(a, e, rel_tol=1e-6)  # noqa: E731
    if close(got[0], expected[0] / nb) or close(got[1], expected[1] / nb):
        return "the byte counts leave out bytes_per_elem (count bytes, not elements)"
    if close(got[0], 16 * x + 5 * x) or close(got[1], 10 * x + 3 * x):
        return "the SwiGLU tensors have the intermediate width, not the hidden width"
    if close(got[0], 2 * 3 * x + 2 * 3 * x + 5 * h):
        return "an unfused RMSNorm moves 5|x| (3 kernels: read x; read x, write x/rms; read that, write y*w)"
    if close(got[1], 2 * 2 * x + 2 * 3 * x + 2 * h) or close(got[1], 2 * 2 * x + 2 * 3 * x + 4 * h):
        return "fused SwiGLU reads gate and up and writes their product: 3|h|"
    if close(got[0], expected[0]) and close(got[1], expected[1]):
        if close(got[2], (expected[0] - expected[1]) * bw):
            return "the saving is bytes / bandwidth (seconds), not bytes * bandwidth"
        return "the byte counts are right; the saving is (unfused - fused) / bandwidth, in seconds"
    return None


LAYER_TRAFFIC = NumericExercise(
    id="01.layer_traffic",
    notebook=NOTEBOOK,
    function="layer_traffic",
    signature="layer_traffic(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth) -> (unfused_bytes, fused_bytes, saving_s)",
    summary="Bytes moved by the elementwise and normalisation ops of one Llama decoder layer, unfused and fused.",
    criteria=("correctness",),
    cases=_traffic_cases,
    reference=layer_traffic_reference,
    diagnose=_diagnose_traffic,
)


# (c) The first Triton kernel ------------------------------------------------------------------------------

def _chain_inputs(shape: Shape, dtype, device, gen):
    m, n = shape.dims
    # Scale and cast the base tensor first, then take the view: arithmetic on a view would make a new,
    # contiguous tensor and lose the layout being graded. The spread reaches both tails of silu.
    if shape.layout == "transposed":
        x = (2 * torch.randn(n, m, generator=gen)).to(dtype).t()
    elif shape.layout == "strided":
        x = (2 * torch.randn(m, 2 * n, generator=gen)).to(dtype)[:, ::2]
    else:
        x = (2 * torch.randn(m, n, generator=gen)).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    alpha = float(torch.empty(()).uniform_(0.5, 1.5, generator=gen))
    x, bias = to_device_keeping_layout(x, device), bias.to(device)
    return {"x": x, "bias": bias, "alpha": alpha}


def _no_alpha(x, bias, alpha):
    return F.silu(x.double() + bias.double())


def _sigmoid_only(x, bias, alpha):
    return alpha * torch.sigmoid(x.double() + bias.double())


def _no_bias(x, bias, alpha):
    return alpha * F.silu(x.double())


def _bias_after_silu(x, bias, alpha):
    return alpha * (F.silu(x.double()) + bias.double())


FUSED_CHAIN = KernelExercise(
    id="01.fused_chain",
    kernel="fused_chain",  # its reference solution: kernels/fused_chain.py
    bars=dict(min_fraction_of_peak=0.6, min_speedup_over_eager=1.1),
    notebook=NOTEBOOK,
    function="fused_chain",
    signature="fused_chain(x, bias, alpha) -> Tensor",
    summary="y = alpha * silu(x + bias) in one Triton kernel: one read of x, one write of y.",
    criteria=("correctness", "precision", "performance", "fusion"),
    make_inputs=_chain_inputs,
    reference=fused_chain_reference,
    eager=fused_chain_eager,
    bytes=fused_chain_bytes,
    shapes=(
        Shape((1, 1)),
        Shape((1, 7)),
        Shape((5, 1000)),
        Shape((37, 4099)),  # a row longer than any sensible block, not a power of two
        Shape((64, 2048)),
        Shape((33, 1500), "transposed"),
        Shape((17, 3000), "strided"),
    ),
    extra_shapes=(Shape((3, 5003)), Shape((129, 1031), "transposed"), Shape((9, 2050), "strided"), Shape((1, 1))),
    # An elementwise op's error does not grow with the tensor: 64 rows (drawn from 32 to 96) give the norm of the
    # error as surely as 256 did, at a quarter of the programs a laptop's interpreter runs for them.
    precision_shape=Shape((64, 4096)),
    perf_shape=Shape((16384, 8192)),  # 256 MiB in bf16: far past any L2
    tolerance={
        torch.float32: (1e-5, 1e-5),
        torch.float16: (1e-3, 2e-3),
        torch.bfloat16: (8e-3, 1.6e-2),
    },
    precision_floor={torch.float32: 1e-6},
    precision_note="Upcast x and bias to float32 right after tl.load, and round only at the store.",
    default_min_fraction=0.6,
    diagnoses=(
        ("alpha is missing: y = alpha * silu(x + bias)", _no_alpha),
        ("sigmoid(x + bias) without the factor x + bias: SiLU is z * sigmoid(z)", _sigmoid_only),
        ("the bias is missing: silu of x + bias, the bias broadcast along the rows", _no_bias),
        ("the bias was added after the SiLU: it goes inside, silu(x + bias)", _bias_after_silu),
    ),
)


# Warm-ups before (c) ---------------------------------------------------------------------------------------
# A repair and five small kernels, each graded on correctness only, on small shapes (the interpreter runs them in
# well under a second): the compiler's errors, the tail of a block (masks), strides, broadcasting, a reduction, a
# loop over blocks.

_WARMUP_TOL = {torch.float32: (1e-6, 1e-6), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
# A sum of up to a few hundred values of size ~1 rounds once to the output dtype, after float32 accumulation.
_SUM_TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (3e-2, 2e-3), torch.bfloat16: (2.5e-1, 1.6e-2)}


def _vector(shape: Shape, dtype, device, gen):
    (n,) = shape.dims
    return {"x": torch.randn(n, generator=gen).to(dtype).to(device)}


def _matrix(shape: Shape, dtype, device, gen, shift: float = 0.0):
    m, n = shape.dims
    if shape.layout == "transposed":
        x = (torch.randn(n, m, generator=gen) + shift).to(dtype).t()
    elif shape.layout == "strided":
        x = (torch.randn(m, 2 * n, generator=gen) + shift).to(dtype)[:, ::2]
    else:
        x = (torch.randn(m, n, generator=gen) + shift).to(dtype)
    return {"x": to_device_keeping_layout(x, device)}


def _matrix_and_row(shape: Shape, dtype, device, gen):
    inputs = _matrix(shape, dtype, device, gen)
    return {**inputs, "v": torch.randn(shape.dims[1], generator=gen).to(dtype).to(device)}


def _negative_matrix(shape: Shape, dtype, device, gen):
    return _matrix(shape, dtype, device, gen, shift=-6.0)  # every element below 0: a padding lane of 0 would win


def _as_if_contiguous(x):
    """What a kernel reads when it assumes row stride N and column stride 1 whatever x's strides are."""
    return x.as_strided(x.shape, (x.shape[1], 1)).double()


def _copy_bytes(x):
    return 2 * x.numel() * x.element_size()


WARMUP_COPY = KernelExercise(
    id="01.warmup_copy",
    notebook=NOTEBOOK,
    function="block_copy",
    signature="block_copy(x) -> Tensor",
    summary="Warm-up: copy a 1-D tensor block by block, the last block masked.",
    criteria=("correctness",),
    make_inputs=_vector,
    reference=lambda x: x.double(),
    eager=lambda x: x.clone(),
    bytes=_copy_bytes,
    shapes=(Shape((1,)), Shape((7,)), Shape((256,)), Shape((1000,)), Shape((1025,))),
    tolerance=_WARMUP_TOL,
    special_values=False,
)

WARMUP_TILE = KernelExercise(
    id="01.warmup_tile",
    notebook=NOTEBOOK,
    function="tile_copy",
    signature="tile_copy(x) -> Tensor",
    summary="Warm-up: copy a 2-D tensor of any strides into a new contiguous one, one 2-D tile per program.",
    criteria=("correctness",),
    make_inputs=_matrix,
    reference=lambda x: x.double(),
    eager=lambda x: x.contiguous(),
    bytes=_copy_bytes,
    shapes=(Shape((1, 1)), Shape((5, 7)), Shape((16, 16)), Shape((33, 65)), Shape((17, 30), "strided"),
            Shape((20, 9), "transposed")),
    tolerance=_WARMUP_TOL,
    special_values=False,
    diagnoses=(("the kernel assumed a contiguous x (row stride N, column stride 1): pass x.stride(0) and "
                "x.stride(1) and use them", _as_if_contiguous),),
)

WARMUP_BROADCAST = KernelExercise(
    id="01.warmup_broadcast",
    notebook=NOTEBOOK,
    function="add_row",
    signature="add_row(x, v) -> Tensor",
    summary="Warm-up: x + v for x (M, N) and a row vector v (N,) broadcast down the rows.",
    criteria=("correctness",),
    make_inputs=_matrix_and_row,
    reference=lambda x, v: x.double() + v.double()[None, :],
    eager=lambda x, v: x + v,
    bytes=lambda x, v: _copy_bytes(x) + v.numel() * v.element_size(),
    shapes=(Shape((1, 1)), Shape((5, 7)), Shape((16, 16)), Shape((33, 65)), Shape((12, 40), "strided")),
    tolerance=_WARMUP_TOL,
    special_values=False,
    diagnoses=(
        ("v is missing from the result", lambda x, v: x.double()),
    ),
)

WARMUP_ROW_SUM = KernelExercise(
    id="01.warmup_row_sum",
    notebook=NOTEBOOK,
    function="row_sum",
    signature="row_sum(x) -> Tensor",
    summary="Warm-up: the sum of each row of x (M, N), one program per row, accumulated in float32.",
    criteria=("correctness",),
    make_inputs=_matrix,
    reference=lambda x: x.double().sum(dim=1),
    eager=lambda x: x.sum(dim=1),
    bytes=lambda x: (x.numel() + x.shape[0]) * x.element_size(),
    shapes=(Shape((1, 1)), Shape((5, 7)), Shape((16, 16)), Shape((9, 300)), Shape((6, 100), "strided")),
    tolerance=_SUM_TOL,
    special_values=False,
    diagnoses=(
        ("the mean of each row instead of the sum", lambda x: x.double().mean(dim=1)),
        ("only the first element of each row (tl.sum over axis 0 of a row is the whole row)",
         lambda x: x.double()[:, 0]),
    ),
)

WARMUP_RUNNING_MAX = KernelExercise(
    id="01.warmup_running_max",
    notebook=NOTEBOOK,
    function="row_max",
    signature="row_max(x) -> Tensor",
    summary="Warm-up: the largest element of each row of x (M, N), a loop over blocks of the row keeping a running max.",
    criteria=("correctness",),
    make_inputs=_negative_matrix,
    reference=lambda x: x.double().amax(dim=1),
    eager=lambda x: x.amax(dim=1),
    bytes=lambda x: (x.numel() + x.shape[0]) * x.element_size(),
    shapes=(Shape((1, 1)), Shape((5, 7)), Shape((4, 64)), Shape((7, 300)), Shape((3, 1000)), Shape((6, 130), "strided")),
    tolerance=_WARMUP_TOL,
    special_values=False,
    diagnoses=(
        ("masked-off lanes counted as 0 (or the running max started at 0): every element here is negative; load "
         "with other=-float('inf') and start the running max at -inf", lambda x: x.double().amax(dim=1).clamp(min=0)),
        ("only the first block of each row was read: loop over the row's blocks",
         lambda x: x.double()[:, :64].amax(dim=1)),
    ),
)

def _vector_and_bounds(shape: Shape, dtype, device, gen):
    (n,) = shape.dims
    x = (2 * torch.randn(n, generator=gen)).to(dtype).to(device)  # a spread wide enough for both bounds to bite
    return {"x": x, "lo": -0.75, "hi": 1.25}


# The repair warm-up: the notebook hands out a broken clamp kernel (a runtime-bound tl.arange, and a store
# without its mask) to be repaired. Lengths that are not multiples of any block catch the missing store mask.
WARMUP_REPAIR = KernelExercise(
    id="01.warmup_repair",
    notebook=NOTEBOOK,
    function="clamp",
    signature="clamp(x, lo, hi) -> Tensor",
    summary="Warm-up: repair a broken kernel that clamps a 1-D tensor to [lo, hi] (one compile error, one mask bug).",
    criteria=("correctness",),
    make_inputs=_vector_and_bounds,
    reference=lambda x, lo, hi: x.double().clamp(lo, hi),
    eager=lambda x, lo, hi: x.clamp(lo, hi),
    bytes=lambda x, lo, hi: _copy_bytes(x),
    shapes=(Shape((1,)), Shape((7,)), Shape((256,)), Shape((1000,)), Shape((1025,)), Shape((3001,))),
    tolerance=_WARMUP_TOL,
    special_values=False,
    diagnoses=(
        ("only the upper bound was applied: clamp is min(max(x, lo), hi)", lambda x, lo, hi: x.double().clamp(max=hi)),
        ("only the lower bound was applied: clamp is min(max(x, lo), hi)", lambda x, lo, hi: x.double().clamp(min=lo)),
    ),
)

WARMUPS = (WARMUP_REPAIR, WARMUP_COPY, WARMUP_TILE, WARMUP_BROADCAST, WARMUP_ROW_SUM, WARMUP_RUNNING_MAX)

EXERCISES = (COST_MODEL, LAYER_TRAFFIC, *WARMUPS, FUSED_CHAIN)
