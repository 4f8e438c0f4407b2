# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 03 · Horizontal fusion: shared inputs, sibling reductions, one launch for many tensors
#
# About 3-5 hours · difficulty ★★☆ · prerequisites: notebooks 01 and 02 (the cost model, row-wise Triton kernels)
#
# Notebooks 01 and 02 fused a producer into its consumer. This one fuses **siblings**: operations with no
# data dependency between them, side by side. Two things can be saved that way:
#
# * **bytes**, when the siblings read the same input: read it once instead of once per sibling;
# * **launches**, when there are many small siblings: one launch that does all of them instead of one each.
#
# You will write three kernels, all graded on correctness, precision, measured bandwidth and fusion: **two
# row statistics from one read**, a **fused QKV projection**, and a **multi-tensor AdamW step** (the heart of
# PyTorch's `fused=True` optimizers). Each section predicts with the cost model first, then you write the
# kernel, then you measure yours against the prediction:
#
# 1. count what siblings sharing an input cost unfused and fused, and measure your two row statistics against
#    two separate reductions;
# 2. measure Q, K and V as three GEMMs against one GEMM over the concatenated weight, at a decode shape and a
#    prefill shape, against the model, see why the answer differs between the two; read a worked tiled
#    matmul in Triton (`tl.dot` over tiles), then write your fused QKV kernel on that pattern and place it
#    among them;
# 3. measure the time of updating many small tensors against their number: your AdamW step launched once per
#    tensor, the same under a CUDA graph, and one launch for all of them.
#
# | exercise | time | difficulty | points |
# |---|---|---|---|
# | 03.predict_row_stats_bytes | 10 min | ★☆☆ | 2 |
# | 03.row_sum_sumsq | 30 min | ★☆☆ | 7 |
# | 03.qkv_projection | 75 min | ★★★ | 12 |
# | 03.adamw_step | 75 min | ★★☆ | 12 |
# | two written questions | 15 min | ★☆☆ | 2 |
#
# Without a GPU, kernels run in Triton's interpreter: graded for correctness there, not for speed, and the
# plots show the cost model for a reference H200 instead of measurements.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined
import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.specs import horizontal_fusion
from autograder.teach.plots import bars_against_model, launch_seconds, peaks, print_against_model
from autograder.measure.timing import bench_versions, not_written
from kernels import matmul as tiled  # the worked tiled matmul of section 3

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()
bw_gbps, peak_tflops, peak_label = peaks(profile)
launch_s = launch_seconds(profile)
if ON_GPU:
    from autograder.measure.timing import bench_ms, cuda_graph

# %% [markdown] nbgrader={"grade": false, "grade_id": "siblings-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. Siblings that share an input
#
# Take `k` operations that all read the same tensor `X` and write outputs `Y₁ … Y_k`, none needing another's
# result. Run one kernel each, and `X` crosses HBM `k` times. Run them in one kernel that loads each **tile** of
# `X` (a rectangular block of it, the piece one program loads and works on at a time) once and hands it to all
# `k`, and it crosses once:
#
# ![](figures/shared_input_siblings.svg)
#
# | | HBM traffic | launches |
# |---|---|---|
# | unfused | `k·\|X\| + Σ\|Yᵢ\|` | `k` |
# | fused | `\|X\| + Σ\|Yᵢ\|` | 1 |
#
# The saving, `(k − 1)·|X|`, is large when the outputs are small next to the input (statistics of rows) and
# small when something else dominates the traffic (a weight matrix, or a GEMM's arithmetic).
#
# ## 2. Two row statistics from one read
#
# The sum and the sum of squares of each row give its mean and variance (LayerNorm, BatchNorm statistics,
# the RMS of a row); the max and the sum give a softmax's normaliser. Written as two lines of PyTorch,
# each statistic is its own reduction kernel and reads all of `x`: `2|x|`. The outputs are one number a
# row. Fused: `|x|`, so the prediction is a speed-up of about 2 from bytes alone. Write that prediction down
# as a function first; the cell after it turns it into times for 32768 × 4096 bf16 (256 MiB) on this GPU, and
# after the exercise you measure your kernel against them.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 03.predict_row_stats_bytes · Predict the traffic of two row statistics   (about 10 min · ★☆☆)
#
# **Spec.** `predicted_row_stats_bytes(rows, cols, elem_bytes) -> (two_reductions, fused)`: the bytes that
# computing each row's sum and sum of squares of `x` (shape `(rows, cols)`, `elem_bytes` bytes an element) moves
# through HBM, as two separate reduction kernels and as one fused kernel, two integers. Both outputs are
# float32 vectors of `rows` values; count them too, and assume every read misses the cache.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Count what each kernel reads and writes through HBM; nothing stays on chip from one kernel to the next.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `x` is `rows·cols·elem_bytes` bytes; each output is `rows` float32 values, 4 bytes each. Two reduction kernels
# each read all of `x` and write their own output; the fused kernel reads `x` once and writes both outputs.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Two kernels: `2·|x| + 8·rows`; fused: `|x| + 8·rows`. The traps: the outputs are float32 whatever
# `elem_bytes` is, and the fused kernel still writes both of them.
#
# </details>
#
# **Graded.**
# <!-- graded: 03.predict_row_stats_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_row_stats_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_row_stats_bytes(rows: int, cols: int, elem_bytes: int) -> tuple[int, int]:
    """HBM bytes of (two reductions, one fused kernel) for the float32 row sums and sums of squares of x."""
    ### BEGIN SOLUTION
    x = rows * cols * elem_bytes
    return 2 * x + 8 * rows, x + 8 * rows  # each output: rows float32 values
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_predict_row_stats_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.predict_row_stats_bytes", predicted_row_stats_bytes).assert_passed("correctness")

# %% nbgrader={"grade": false, "grade_id": "stats-model", "locked": true, "schema_version": 3, "solution": false}
STATS_M, STATS_N = 32768, 4096
x_bytes = STATS_M * STATS_N * 2
try:
    stats_bytes = predicted_row_stats_bytes(STATS_M, STATS_N, 2)
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print("predicted_row_stats_bytes is not written yet: the grader's model stands in for it")
    stats_bytes = horizontal_fusion.predicted_row_stats_bytes_reference(STATS_M, STATS_N, 2)
stats_model_ms = {name: n / (bw_gbps * 1e6) for name, n in zip(("eager (2 reductions)", "your row_sum_sumsq"),
                                                              stats_bytes)}
print(f"{STATS_M} x {STATS_N} bf16 = {x_bytes / 2**20:.0f} MiB at {bw_gbps:.0f} GB/s ({peak_label}):")
for name, ms in stats_model_ms.items():
    print(f"  model, {name:<22} {ms:6.3f} ms")

# %% [markdown] nbgrader={"grade": false, "grade_id": "stats-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 03.row_sum_sumsq · One read, two statistics   (about 30 min · ★☆☆)
#
# **Spec.** `row_sum_sumsq(x) -> (row_sum, row_sumsq)`: `x` of shape `(M, N)` in float32, float16 or bfloat16,
# any `N` (rows longer than one block too) and any strides (the grader also passes transposed and padded views:
# use both `x.stride(0)` and `x.stride(1)`). Returns two new float32 tensors of shape `(M,)`: each row's sum and
# sum of squares, both accumulated in float32, from **one** launch that reads `x` once. The grader's rows reach
# values of a few hundred, whose squares do not fit in float16, and it measures the error for rows of 1024 to
# 65536 elements.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Both statistics need every element of a row once, so one loop over the row can feed two running sums:
# everything the second kernel would read is already in registers.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# A program owns `BLOCK_M` rows; it loops over the columns `BLOCK_N` at a time, loads a `(BLOCK_M, BLOCK_N)`
# tile through both strides, and adds it and its square into two float32 accumulators of that shape. After the
# loop, `tl.sum(..., axis=1)` of each, and two masked stores.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `v = tl.load(ptrs, mask=row_mask[:, None] & (cols[None, :] < N), other=0.0).to(tl.float32)`, then
# `acc += v` and `acc2 += v * v`. The traps: upcast before squaring (a float16 square of a few hundred
# overflows), use `x.stride(1)` too (transposed inputs), and mask the rows past `M` at the store.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Blocks of a few hundred columns keep more loads in flight than one block spanning a long row; when rows are
# short, give a program several of them (`BLOCK_M > 1`) so that each load is still wide.
#
# </details>
#
# **Graded.**
# <!-- graded: 03.row_sum_sumsq -->

# %% nbgrader={"grade": false, "grade_id": "row_sum_sumsq", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _row_sum_sumsq_kernel(x_ptr, sum_ptr, sumsq_ptr, M, N, stride_xm, stride_xn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows tl.program_id(0) * BLOCK_M .. + BLOCK_M - 1 of x (M, N; strides stride_xm, stride_xn): their float32 sums
    and sums of squares into sum_ptr[rows] and sumsq_ptr[rows]."""
    # 1. my rows (and a mask for those past M); float32 accumulators of shape (BLOCK_M, BLOCK_N) for both sums
    # 2. loop over the columns BLOCK_N at a time: load the (BLOCK_M, BLOCK_N) tile through both strides (masked,
    #    padding 0), upcast to float32, add it and its square to the accumulators
    # 3. reduce each accumulator along axis=1 and store both (masked)
    ### BEGIN SOLUTION
    # include body: kernels/row_sum_sumsq.py (_row_sum_sumsq_kernel)
    ### END SOLUTION


def sumsq_launch_settings(M: int, N: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for x of shape (M, N): powers of two."""
    # a block of a few hundred columns at most, and enough rows a program to fill it when rows are short
    ### BEGIN SOLUTION
    # include body: kernels/row_sum_sumsq.py (sumsq_launch_settings)
    ### END SOLUTION


def row_sum_sumsq(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum over each row, sum of squares over each row) of x (M, N), both new float32 tensors (M,),
    from one launch."""
    # 1. check that x is 2-D and floating-point
    # 2. allocate the two float32 outputs
    # 3. launch cdiv(M, BLOCK_M) programs with both strides of x; return (sums, sumsqs)
    ### BEGIN SOLUTION
    # include body: kernels/row_sum_sumsq.py (row_sum_sumsq)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "row_sum_sumsq-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("03.row_sum_sumsq", row_sum_sumsq)

# %% nbgrader={"grade": true, "grade_id": "test_row_sum_sumsq_correctness", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.row_sum_sumsq", row_sum_sumsq, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_row_sum_sumsq_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.row_sum_sumsq", row_sum_sumsq, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_row_sum_sumsq_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.row_sum_sumsq", row_sum_sumsq, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_row_sum_sumsq_fusion", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("03.row_sum_sumsq", row_sum_sumsq, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "stats-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernel against two reductions
#
# The cell times `x.sum(-1)` plus a norm (two reduction kernels), `torch.compile` of the same two lines, and
# your `row_sum_sumsq`, on the 32768 × 4096 bf16 input, against the model above. Until you have written
# the exercise, your kernel is left out and the cell says so.

# %% nbgrader={"grade": false, "grade_id": "stats-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
stats_ms = {}
if ON_GPU:
    x = torch.randn(STATS_M, STATS_N, device="cuda", dtype=torch.bfloat16)
    compiled_stats = runtime.demo_compile(horizontal_fusion.row_sum_sumsq_eager)
    stats_ms = bench_versions({"eager (2 reductions)": lambda: horizontal_fusion.row_sum_sumsq_eager(x),
                               "torch.compile": lambda: compiled_stats(x),
                               "your row_sum_sumsq": lambda: row_sum_sumsq(x)}, desc="timing row statistics")
    del x

fig, ax = plt.subplots(figsize=(8, 3.5))
names = bars_against_model(ax, stats_ms, stats_model_ms, f"ms ({STATS_M} x {STATS_N} bf16)",
                           f"row sum and sum of squares, {peak_label}", ON_GPU)
plt.show()
print_against_model(names, stats_ms, stats_model_ms, x_bytes, bw_gbps)

# %% [markdown] nbgrader={"grade": false, "grade_id": "stats-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for: your kernel near its line (it only reads, so it can even edge past a copy, which both
# reads and writes); eager near twice
# that. Whatever `torch.compile` does, compare it with both lines: a compiler may or may not put the two
# reductions in one loop. If yours sits well above its line, look at how much of a row one program loads
# at a time: blocks of a few hundred columns keep more loads in flight than one block spanning the row.

# %% [markdown] nbgrader={"grade": false, "grade_id": "stats-ref-run", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's kernel (blocks of 512 columns, 4 warps) reached 0.89 of copy bandwidth on an
# H200 at 32768 × 4096 bf16, against 0.62 with one 4096-wide block a row.

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Q, K and V: three GEMMs or one
#
# Attention starts with three projections of the same activations `X` (`M` rows of width `K`):
# `Q = X·W_qᵀ`, `K = X·W_kᵀ`, `V = X·W_vᵀ`. Stack the three weights into one `W_qkv` of `n_q + 2·n_kv` rows
# (with grouped-query attention `n_kv < n_q`), run one GEMM, and Q, K and V are column slices of its output:
# views, no copies. Inference engines store the weight stacked for exactly this reason.
#
# ![](figures/qkv_stacking.svg)
# With `e` bytes an
# element and `N = n_q + 2·n_kv`:
#
# | | bytes | flops | launches |
# |---|---|---|---|
# | three GEMMs | `e·(3·M·K + N·K + M·N)` | `2·M·N·K` | 3 |
# | one GEMM over `W_qkv` | `e·(M·K + N·K + M·N)` | `2·M·N·K` | 1 |
#
# Each GEMM takes at least `max(bytes / BW, flops / peak)` plus a launch. Where does the saved `2·M·K·e`
# matter?
#
# * **Decode** (`M` = a few rows, one per sequence being generated): the weights are nearly all the bytes,
#   and a GEMM of 16 rows does far too little arithmetic to be compute-bound. The fused version saves two
#   launches, and it gives the GPU one wide grid of tiles instead of three narrow ones, two of which (K
#   and V, `n_kv` wide) cannot fill the machine by themselves.
# * **Prefill** (`M` = thousands of tokens): each GEMM is compute-bound, and `2·|X|` is a few percent of the
#   time at most. Fusing gains little; what matters is how good the GEMM is.
#
# The cell below times both regimes for an 8B-class model's shapes (`K = 4096`, 32 query heads and 8 KV
# heads of 128: `n_q = 4096`, `n_kv = 1024`) in bf16 with cuBLAS: three GEMMs, and one GEMM over `W_qkv`,
# against the model (roofline plus launches). Each version is timed as replays of a CUDA graph, as inference
# engines run decode: a kernel of 20 µs would otherwise be timed together with the host's work of launching
# it (section 4 measures that part). Your own Triton kernel joins these curves after its exercise.

# %% nbgrader={"grade": false, "grade_id": "qkv-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
K_DIM, N_Q, N_KV = 4096, 4096, 1024
MS = runtime.demo_points([1, 4, 16, 64, 256, 1024, 4096, 8192])  # three of them when the grader runs this


def gemm_model_s(m, k, n, e=2):
    """Roofline time of one GEMM (m x k) @ (k x n) in seconds, plus one launch."""
    n_bytes = e * (m * k + n * k + m * n)
    return max(n_bytes / (bw_gbps * 1e9), 2 * m * n * k / (peak_tflops * 1e12)) + launch_s


def plot_qkv(qkv_us):
    """µs against M (left) and the speed-up over three GEMMs (right), measured where qkv_us has times."""
    styles = {"three cuBLAS GEMMs": "o-", "one cuBLAS GEMM over W_qkv": "s-", "your qkv_projection": "^-"}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
    ax.loglog(MS, model_three, "k--", label="model: three GEMMs")
    ax.loglog(MS, model_one, "k:", label="model: one GEMM")
    for name, times in qkv_us.items():
        if times:
            ax.loglog(MS, times, styles[name], label=name)
    ax.set_xlabel("M (rows of X: sequences at decode, tokens at prefill)")
    ax.set_ylabel("µs")
    ax.set_title(f"QKV projection, K = {K_DIM}, N = {N_Q} + 2·{N_KV}, bf16")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    bx.semilogx(MS, [a / b for a, b in zip(model_three, model_one)], "k--", label="model")
    for name, times in qkv_us.items():
        if name != "three cuBLAS GEMMs" and times and qkv_us["three cuBLAS GEMMs"]:
            bx.semilogx(MS, [a / b for a, b in zip(qkv_us["three cuBLAS GEMMs"], times)], styles[name], label=name)
    bx.axhline(1.0, color="gray", lw=1)
    bx.set_xlabel("M")
    bx.set_ylabel("speed-up over three GEMMs")
    bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=8)
    plt.show()


model_three = [sum(gemm_model_s(m, K_DIM, n) for n in (N_Q, N_KV, N_KV)) * 1e6 for m in MS]
model_one = [gemm_model_s(m, K_DIM, N_Q + 2 * N_KV) * 1e6 for m in MS]
qkv_us = {"three cuBLAS GEMMs": [], "one cuBLAS GEMM over W_qkv": []}
if ON_GPU:
    w_qkv = (torch.randn(N_Q + 2 * N_KV, K_DIM, device="cuda") / K_DIM**0.5).to(torch.bfloat16)
    for m in tqdm(MS, desc="timing QKV (cuBLAS)"):
        x = torch.randn(m, K_DIM, device="cuda", dtype=torch.bfloat16)
        for name, f in (("three cuBLAS GEMMs", horizontal_fusion.qkv_projection_eager),
                        ("one cuBLAS GEMM over W_qkv", horizontal_fusion.qkv_projection_concat)):
            qkv_us[name].append(1e3 * bench_ms(cuda_graph(lambda: f(x, w_qkv, N_KV))))
    del x, w_qkv

plot_qkv(qkv_us)
for m, t3, t1 in zip(MS, model_three, model_one):
    saved = 2 * m * K_DIM * 2
    print(f"M={m:<5} 2|X| saved = {saved / 2**20:8.2f} MiB; model {t3:7.1f} µs -> {t1:7.1f} µs ({t3 / t1:.2f}x)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. At decode, one GEMM over the stacked weight beats three by about the factor the model
# predicts, and for the model's reason: the `2·|X|` saved is a fraction of a MiB, nothing next to the
# weights; what goes is two launches, each costing a GEMM of this size a good part of its time. At prefill
# the curves meet: each GEMM is compute-bound, and the saved bytes are a few percent of the time, easily
# lost to the tile count of a different output width. There a fused kernel is only as fast as its GEMM.
#
# The same holds for SwiGLU's **gate and up projections**: both read the normalised activations, so
# `W_gate` and `W_up` stack into one weight. The cell below measures the two GEMMs against one over the
# stacked weight (cuBLAS, Llama-2-7B's MLP: 4096 → 2 × 11008; graph replays again). Notebook 04 goes further and applies
# `silu(gate) · up` in the same kernel, so that neither half is ever written.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-prefill-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** At prefill (M = 8192) the fused GEMM saves `2·|X|`, 128 MiB here, yet it is barely
# faster than three GEMMs. Why? Use the model's two terms in your answer. (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-prefill", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Each GEMM at M = 8192 is compute-bound: 2·M·N·K flops take longer at the matmul peak than its bytes take at
# the copy bandwidth, so the time is flops / peak and the flops are the same fused or not. The 128 MiB saved would
# cost about 40 µs of bandwidth, a few percent of GEMMs that take over a millisecond, and even that overlaps with
# the arithmetic; what decides the time is how close each GEMM gets to the peak (its tile shape), not the bytes.

# %% nbgrader={"grade": false, "grade_id": "swiglu-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
H_MODEL, H_MLP = 4096, 11008
swiglu_rows = {}
for m in (16, 8192):
    two = sum(gemm_model_s(m, H_MODEL, H_MLP) for _ in range(2)) * 1e6
    one = gemm_model_s(m, H_MODEL, 2 * H_MLP) * 1e6
    swiglu_rows[m] = {"model: two GEMMs": two, "model: one GEMM": one}
    if ON_GPU:
        x = torch.randn(m, H_MODEL, device="cuda", dtype=torch.bfloat16)
        w_gate = (torch.randn(H_MLP, H_MODEL, device="cuda") / 64).to(torch.bfloat16)
        w_up = (torch.randn(H_MLP, H_MODEL, device="cuda") / 64).to(torch.bfloat16)
        w_gate_up = torch.cat([w_gate, w_up])
        swiglu_rows[m]["measured: two GEMMs"] = 1e3 * bench_ms(cuda_graph(lambda: (x @ w_gate.t(), x @ w_up.t())))
        swiglu_rows[m]["measured: one GEMM"] = 1e3 * bench_ms(cuda_graph(lambda: (x @ w_gate_up.t()).chunk(2, dim=-1)))
        del x, w_gate, w_up, w_gate_up
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
for ax, (m, row) in zip(axes, swiglu_rows.items()):
    ax.barh(list(row), list(row.values()), color=["0.6", "0.6"] + ["C0", "C1"][: len(row) - 2])
    ax.set_xlabel("µs")
    ax.set_title(f"gate + up projections, M = {m}" + ("" if ON_GPU else " (model only)"))
plt.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "matmul-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3b. A tiled matmul in Triton, worked
#
# Your fused QKV kernel is a GEMM. Before you write one, read one: `kernels/matmul.py` (handed out with the
# course) computes `out = x @ w` for `x (M, K)` and `w (K, N)`. Notebook 04 builds on this same kernel.
#
# * **One program, one output tile.** A program owns a `BLOCK_M × BLOCK_N` tile of `out`: rows `rm` and columns
#   `rn`. The grid has `cdiv(M, BLOCK_M) · cdiv(N, BLOCK_N)` programs.
# * **Walk K in steps.** `tile_dot` keeps pointers to an `x` tile (`BLOCK_M × BLOCK_K`) and a `w` tile
#   (`BLOCK_K × BLOCK_N`), built from the **strides** (how many elements apart two neighbours along an axis
#   are: `x.stride(0)` between rows, `x.stride(1)` between columns). Each step loads both tiles, masked at the
#   ragged edges with `other=0.0` (zeros add nothing to a dot product), and adds `tl.dot(a, b)` into **one
#   float32 accumulator**; then it moves both pointers `BLOCK_K` along K.
# * **Round once, store once.** After the loop the tile is cast to the output's dtype and stored, masked.
# * **Order of the tiles.** `grouped_tile` numbers the tiles so that programs running at the same time share
#   rows of `x` and columns of `w` in L2 (notebook 04 measures what that is worth).
# * **float32.** `tl.dot` rounds float32 operands to TF32 (11 significant bits) unless given
#   `input_precision="ieee"`; PyTorch's float32 matmul does not, hence `dot_precision`.
#
# Strides make transposes free: `w_qkv` is stored `(N, K)` (`nn.Linear`'s layout), and `w_qkv.T` is the same
# memory read with its two strides swapped. The cell below prints the loop and checks the kernel against
# PyTorch on a ragged shape, both ways round.

# %% nbgrader={"grade": false, "grade_id": "matmul-demo", "locked": true, "schema_version": 3, "solution": false}
import inspect

print(inspect.getsource(tiled.tile_dot.fn))  # .fn: the Python function under @triton.jit
x_demo = torch.randn(37, 70, device=DEVICE)
w_demo = torch.randn(100, 70, device=DEVICE)  # (N, K), nn.Linear's layout
small = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
got = tiled.matmul(x_demo, w_demo.T, **small)  # w_demo.T: a view, strides (1, 70); nothing is copied
print(f"x @ w.T, {tuple(got.shape)}: largest difference from torch {(got - x_demo @ w_demo.T).abs().max().item():.1e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 03.qkv_projection · The fused QKV projection   (about 75 min · ★★★)
#
# **Spec.** `qkv_projection(x, w_qkv, kv_width) -> (q, k, v)`: `x (M, K)` (rows possibly further apart than `K`)
# and `w_qkv (n_q + 2·kv_width, K)` of one floating dtype, in `nn.Linear.weight`'s layout: the rows of `W_q`, then
# `W_k`, then `W_v`. Returns `q (M, n_q)`, `k (M, kv_width)`, `v (M, kv_width)` of `x`'s dtype: `x @ w_qkv.T`,
# computed by **one** Triton GEMM kernel that writes one `(M, N)` output, of which `q`, `k` and `v` are **views**
# (column slices).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Stacked along `N`, the three weights are one matrix: one GEMM reads `x` once and writes one output, and `q`,
# `k` and `v` are just three column ranges of it.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Follow the worked matmul above: one program per output tile, one float32 accumulator for the whole K loop,
# masked loads and store. Read `w_qkv` as `w_qkv.T` by swapping its two strides (no transpose is ever
# materialised); your kernel may call `tiled.tile_dot` and `tiled.grouped_tile` directly. Then slice the output
# `out[:, :n_q]`, `out[:, n_q:n_q + kv_width]`, `out[:, n_q + kv_width:]`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `tiled.tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, x.stride(0), x.stride(1), w.stride(1), w.stride(0), ...)`: the
# weight's strides go in as `(stride along K, stride along N)`. The traps: `n_q = N - 2·kv_width`; return views,
# never `.contiguous()` copies (the grader checks they share one buffer); for float32 pass
# `input_precision="ieee"` to `tl.dot`, since by default it rounds to TF32.
#
# </details>
# <details><summary>Make it fast</summary>
#
# At decode (16 rows) small tiles (`BLOCK_M = 16`, `BLOCK_N = 32`, `BLOCK_K = 128`) stream the weight through
# many programs; larger tiles suit larger `M`.
#
# </details>
#
# **Graded.** Performance is measured at an 8B-class model's decode shape, each version replayed from a CUDA
# graph so that the host's launch cost stays out.
# <!-- graded: 03.qkv_projection -->

# %% nbgrader={"grade": false, "grade_id": "qkv_projection", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _qkv_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk, stride_om,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                PRECISION: tl.constexpr):
    # Output tiles in groups of GROUP_M tile-rows: neighbouring programs share x and w tiles in L2.
    """One BLOCK_M x BLOCK_N tile of out (M, N) = x (M, K) @ w.T, w (N, K): strides stride_wn between w's rows,
    stride_wk along them. PRECISION is tl.dot's input_precision."""
    # 1. which tile is mine: from tl.program_id(0), a tile-row pid_m and tile-column pid_n (grouped, for L2)
    # 2. rows rm and columns rn of the tile; pointers to the first x tile (BLOCK_M, BLOCK_K) and to the first tile
    #    of w.T (BLOCK_K, BLOCK_N), built with w's strides swapped
    # 3. a float32 accumulator; loop over K in steps of BLOCK_K: masked loads (other=0.0), tl.dot into the
    #    accumulator, advance both pointers
    # 4. cast the tile to out's dtype and store it (masked)
    ### BEGIN SOLUTION
    # include body: kernels/qkv_projection.py (_qkv_kernel)
    ### END SOLUTION


def qkv_launch_settings(M: int, N: int, K: int) -> dict:
    """Tile sizes and launch options (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) for
    an (M, K) x (K, N) GEMM."""
    # small tiles at decode (a few rows), larger ones as M grows
    ### BEGIN SOLUTION
    # include body: kernels/qkv_projection.py (qkv_launch_settings)
    ### END SOLUTION


def split_qkv(out: torch.Tensor, kv_width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v): column slices (views) of out (M, n_q + 2 kv_width)."""
    # three slices of out's columns; no copies
    ### BEGIN SOLUTION
    # include body: kernels/qkv_projection.py (split_qkv)
    ### END SOLUTION


def qkv_projection(x: torch.Tensor, w_qkv: torch.Tensor, kv_width: int):
    """(q, k, v) = split(x @ w_qkv.T) for x (M, K), w_qkv (n_q + 2 kv_width, K): views of one (M, N)
    output of x's dtype, from one launch."""
    # 1. check the shapes and dtypes, and that 0 < 2 * kv_width < N
    # 2. allocate out (M, N); choose the tiles; grid = the number of output tiles
    # 3. launch with both strides of x and of w_qkv, and tl.dot's precision for the dtype
    # 4. return the three views of out
    ### BEGIN SOLUTION
    # include body: kernels/qkv_projection.py (qkv_projection)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "qkv_projection-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("03.qkv_projection", qkv_projection)

# %% nbgrader={"grade": true, "grade_id": "test_qkv_projection_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("03.qkv_projection", qkv_projection, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_qkv_projection_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("03.qkv_projection", qkv_projection, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_qkv_projection_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("03.qkv_projection", qkv_projection, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_qkv_projection_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.qkv_projection", qkv_projection, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-yours-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernel among the GEMMs
#
# The cell times your `qkv_projection` at the same shapes, again as CUDA graph replays, and draws it with
# the two cuBLAS curves and the model from section 3. Until you have written the exercise, it says so and
# draws the cuBLAS curves alone.

# %% nbgrader={"grade": false, "grade_id": "qkv-measure-yours", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def replay_ms(fn):
    """ms per CUDA graph replay of fn; launch by launch (and saying so) if fn cannot be recorded in a graph."""
    try:
        with warnings.catch_warnings():  # a failed capture also warns that the graph is empty
            warnings.simplefilter("ignore")
            replay = cuda_graph(fn)
    except RuntimeError as exc:  # e.g. a copy from the host or a wait for the GPU inside fn
        print(f"not captured in a CUDA graph ({str(exc).splitlines()[0]}): timed launch by launch")
        return bench_ms(fn)
    return bench_ms(replay)


if ON_GPU:
    w_qkv = (torch.randn(N_Q + 2 * N_KV, K_DIM, device="cuda") / K_DIM**0.5).to(torch.bfloat16)
    xs = {m: torch.randn(m, K_DIM, device="cuda", dtype=torch.bfloat16) for m in MS}
    versions = {f"your qkv_projection, M = {m}": (lambda x=xs[m]: qkv_projection(x, w_qkv, N_KV)) for m in MS}
    first, *rest = versions.items()
    # The first shape alone: if your kernel is not written yet, one line says so instead of one per shape.
    yours = bench_versions(dict([first]), desc="timing your qkv_projection", bench=replay_ms)
    if yours:
        yours |= bench_versions(dict(rest), desc="timing your qkv_projection", bench=replay_ms)
        qkv_us["your qkv_projection"] = [1e3 * yours[name] for name in versions]
    del xs, w_qkv

plot_qkv(qkv_us)
if qkv_us.get("your qkv_projection"):
    for m, t1, tf in zip(MS, qkv_us["one cuBLAS GEMM over W_qkv"], qkv_us["your qkv_projection"]):
        print(f"M={m:<5} one cuBLAS GEMM {t1:8.1f} µs   yours {tf:8.1f} µs   ({t1 / tf:.2f} of cuBLAS's speed)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-yours-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. At decode your kernel should reach the one-GEMM line: a 16-row GEMM streams the weight,
# and a plain Triton kernel with small tiles streams it about as well as cuBLAS. Between decode and prefill
# and at prefill, your fused kernel is only as fast as its GEMM. Notebook 04 builds a faster GEMM.

# %% [markdown] nbgrader={"grade": false, "grade_id": "qkv-ref-run", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's kernel, with a tile shape chosen for each regime, kept up with cuBLAS at
# decode (the weights streamed at 0.75 of copy bandwidth), fell behind between (M of 64 to 256, where its tile
# choice is poorer) and reached about three quarters of cuBLAS at prefill, on an H200.

# %% [markdown] nbgrader={"grade": false, "grade_id": "launch-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. Many small tensors: one launch for all of them
#
# An optimizer step touches every parameter of a model: hundreds of tensors, many of them small (norm
# weights, biases), and the same few elementwise operations on each. Notebook 01's model, with `L` the
# time a launch costs the GPU and `b` the bytes of one tensor's update:
#
# * one launch per tensor: `T·(L + b/BW)`;
# * one launch for all `T` tensors: `L + T·b/BW`.
#
# A fused AdamW step reads the parameter, its gradient and both moments, and writes the parameter and the
# moments: `b = 7·4·n` bytes for `n` fp32 elements. For small tensors `L` dominates the first line and the
# second is `T` times cheaper. Launching from Python adds the host's cost on top (tens of µs per Triton
# launch); a **CUDA graph** records the launches once and replays them without the host, which removes that
# part, but the GPU still starts `T` kernels, and a kernel over a tiny tensor occupies a few SMs out of
# a hundred or more while the rest wait. Only putting all the tensors in one launch removes both.
#
# How can one launch reach `T` separate tensors? The launcher builds a **table**: each tensor's address
# (an `int64`) and size, and for each block of work the tensor it belongs to and its offset. The table is
# uploaded once and reused while the same tensors come back, step after step. A program reads its row of
# the table and turns the address into a pointer: `tl.load(addr_ptr + t).to(tl.pointer_type(tl.float32))`.
#
# ![](figures/multi_tensor_launch.svg)
#
# The model's prediction for tensors of 16384 fp32 elements, `T` from 1 to 1024 (you measure your step
# against it after exercise 3):

# %% nbgrader={"grade": false, "grade_id": "launch-model", "locked": true, "schema_version": 3, "solution": false}
TS = runtime.demo_points([1, 2, 4, 8, 16, 64, 256, 1024])
NUMEL = 16384
HYPER = (5, 1e-3, 0.9, 0.999, 1e-8, 0.01)  # step, lr, beta1, beta2, eps, weight_decay
b = 7 * 4 * NUMEL
model_per_tensor = [t * (launch_s + b / (bw_gbps * 1e9)) * 1e6 for t in TS]
model_one_launch = [(launch_s + t * b / (bw_gbps * 1e9)) * 1e6 for t in TS]
print(f"L = {launch_s * 1e6:.1f} µs, b/BW = {b / (bw_gbps * 1e9) * 1e6:.2f} µs ({peak_label})")
print(f"{'T':>6} {'one launch per tensor':>22} {'one launch for all':>19}")
for t, per, one in zip(TS, model_per_tensor, model_one_launch):
    print(f"{t:>6} {per:>19.1f} µs {one:>16.1f} µs")

# %% [markdown] nbgrader={"grade": false, "grade_id": "adamw-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 03.adamw_step · A multi-tensor AdamW step   (about 75 min · ★★☆)
#
# **Spec.** `adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay) -> None`.
# The four arguments are lists of float32 tensors (contiguous; the same sizes across the lists, different sizes
# from one tensor to the next, possibly empty). For every element, with `t = step` (1 for the first update):
#
# ```
# p ← p · (1 − lr · weight_decay)                 (decoupled weight decay: AdamW, not Adam + L2)
# m ← beta1 · m + (1 − beta1) · g
# v ← beta2 · v + (1 − beta2) · g²
# p ← p − lr / (1 − beta1ᵗ) · m / (sqrt(v / (1 − beta2ᵗ)) + eps)
# ```
#
# updating `params`, `exp_avgs` and `exp_avg_sqs` **in place** and returning `None`, as `torch.optim.AdamW` does;
# `grads` are only read. The number of kernel launches must not grow with the number of tensors (at most 2: a
# kernel, and an upload of your table when it is new).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# One launch cannot take a Python list, but it can take a table: the tensors' addresses and sizes in a small
# integer tensor, from which each program finds the tensor and the block it updates.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# On the host: the four lists' `data_ptr()`s in an int64 tensor, and for every block of work the index of its
# tensor and its first element; upload them once per list of tensors and keep them (keyed on the addresses and
# sizes) while the same tensors come back. Compute the bias corrections on the host, once per step, and pass
# plain floats. In the kernel, a program reads its row of the tables and turns an address into a pointer.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `p_ptr = tl.load(addr_ptr + t).to(tl.pointer_type(tl.float32))`, and the same for the other three lists;
# update in float32 in the order of the spec (decay `p` first, then `m` and `v`, then `p`). The traps: empty
# tensors get no blocks; `grads` are only read; the step size is `lr / (1 − beta1ᵗ)` and the denominator
# `sqrt(v) / sqrt(1 − beta2ᵗ) + eps`, with `eps` outside the square root.
#
# </details>
# <details><summary>Make it fast</summary>
#
# `tl.multiple_of` tells the compiler what the launcher guarantees about alignment, and full blocks need no
# mask.
#
# </details>
#
# **Graded.** Correctness over consecutive steps against a float64 reference, precision over 20 steps, speed
# over 200 tensors of about 5·10⁷ parameters against the 7 passes a step must make.
# <!-- graded: 03.adamw_step -->

# %% nbgrader={"grade": false, "grade_id": "adamw_helpers", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _adamw_kernel(addr_ptr, numel_ptr, block_tensor_ptr, block_start_ptr, n_tensors,
                  lr, beta1, beta2, eps, decay, step_size, rsqrt_bc2,
                  DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    """Program pid updates block pid of the work: tensor block_tensor[pid], elements block_start[pid] ..
    + BLOCK - 1 (those below its numel). addr holds the four lists' addresses as int64, (4, n_tensors)."""
    # 1. my tensor t and my block's start, from the block tables
    # 2. the tensor's numel, and its four pointers: tl.load(addr_ptr + i * n_tensors + t).to(tl.pointer_type(DTYPE))
    # 3. the offsets of my block and a mask past numel
    # 4. load p, g, m, v in float32; decay p, update m and v, then p; store p, m, v in their dtype
    ### BEGIN SOLUTION
    # include body: kernels/multi_tensor_adamw.py (_adamw_kernel)
    ### END SOLUTION


# The table of tensors (a class or function that builds and keeps it) and anything else your step needs.
### BEGIN SOLUTION
# include: kernels/multi_tensor_adamw.py (ADAMW_BLOCK, _ADAMW_DTYPES, _adamw_block, _Tables,
#     _TABLE_CACHE, _TABLE_CACHE_SIZE, _tables, _validate)
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "adamw_step", "locked": false, "schema_version": 3, "solution": true}
def adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay) -> None:
    """One AdamW step for every tensor of the four lists (float32, contiguous), in place, with step counting
    from 1; returns None. One kernel launch, plus an upload of the table the first time these tensors are seen."""
    # 1. the table for these lists (built and uploaded once, then reused); nothing to do for empty lists
    # 2. the per-step scalars on the host: lr / (1 - beta1**step), 1 / sqrt(1 - beta2**step), 1 - lr * weight_decay
    # 3. one launch, one program per block of work
    ### BEGIN SOLUTION
    # include body: kernels/multi_tensor_adamw.py (adamw_step)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "adamw_step-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("03.adamw_step", adamw_step)

# %% nbgrader={"grade": true, "grade_id": "test_adamw_step_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("03.adamw_step", adamw_step, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_adamw_step_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("03.adamw_step", adamw_step, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_adamw_step_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("03.adamw_step", adamw_step, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_adamw_step_fusion", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("03.adamw_step", adamw_step, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "launch-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your step: one launch per tensor against one launch for all
#
# The cell below times an AdamW step over `T` tensors of 16384 fp32 elements, for `T` from 1 to 1024, five
# ways: your `adamw_step` called once per tensor in a Python loop (one launch per tensor, as a loop over the
# parameters makes), the same loop captured in a CUDA graph, your `adamw_step` over all `T` tensors at once
# (one launch for all), the same in a graph, and PyTorch's `AdamW(fused=True)`.
#
# A CUDA graph records work on the GPU only: PyTorch refuses to record a copy from ordinary host memory. A
# step that uploads its table during the call therefore cannot be captured; the cell says so and leaves that
# point out. That happens to the per-tensor loop when it has more tensors than your step keeps tables for
# (the course's solution keeps the tables of the last 8 lists): every call then builds and uploads a table
# again, which also shows in the loop's time without a graph.

# %% nbgrader={"grade": false, "grade_id": "launch-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def one_launch_per_tensor(lists):
    """Your adamw_step called once for each tensor: T launches, as a loop over the parameters makes."""
    for p, g, m, v in zip(*lists):
        adamw_step([p], [g], [m], [v], *HYPER)


def graph_us(fn, label):
    """µs per replay of fn captured in a CUDA graph, or None (saying why) when it cannot be captured."""
    try:
        with warnings.catch_warnings():  # a failed capture also warns that the graph is empty
            warnings.simplefilter("ignore")
            replay = cuda_graph(fn)
    except RuntimeError as exc:  # a copy from the host during the step: a graph cannot record it
        print(f"{label}: not captured in a CUDA graph ({str(exc).splitlines()[0]})")
        return None
    return 1e3 * bench_ms(replay)


VERSIONS = ("one launch per tensor", "one launch per tensor, CUDA graph", "one launch for all",
            "one launch for all, CUDA graph", "torch AdamW(fused=True)")
launch_us = {name: {} for name in VERSIONS}  # name -> {T: µs}: a version may lack some T
if ON_GPU:
    written, uncaptured = True, set()
    for t in TS:
        lists = horizontal_fusion.random_adamw_state([NUMEL] * t)
        if written:  # your adamw_step, eagerly, then in a graph
            yours = {"one launch per tensor": lambda: one_launch_per_tensor(lists),
                     "one launch for all": lambda: adamw_step(*lists, *HYPER)}
            ms = bench_versions(yours, desc=f"timing T = {t}")
            written = bool(ms)
            for name in ms:
                launch_us[name][t] = 1e3 * ms[name]
                if name not in uncaptured:
                    us = graph_us(yours[name], f"{name}, T = {t}")
                    if us is None:
                        uncaptured.add(name)  # more tensors would not be captured either
                        print(f"  {name}: no CUDA graph tried for more than {t} tensors")
                    else:
                        launch_us[name + ", CUDA graph"][t] = us
        fused = horizontal_fusion.torch_adamw(*horizontal_fusion.random_adamw_state([NUMEL] * t), *HYPER, fused=True)
        launch_us["torch AdamW(fused=True)"][t] = 1e3 * bench_ms(fused)
    del lists, fused

fig, ax = plt.subplots(figsize=(8, 5))
ax.loglog(TS, model_per_tensor, "k--", label="model: T·(L + b/BW)")
ax.loglog(TS, model_one_launch, "k:", label="model: L + T·b/BW")
for (name, times), style in zip(launch_us.items(), ("o-", "o--", "^-", "^--", "s-")):
    if times:
        ax.loglog(list(times), list(times.values()), style, label=name.replace("one launch", "yours: one launch"))
ax.set_xlabel(f"T (tensors of {NUMEL} fp32 elements)")
ax.set_ylabel("µs per AdamW step")
ax.set_title(f"{peak_label}, L = {launch_s * 1e6:.1f} µs" + ("" if ON_GPU else " — model only, no GPU here"))
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
plt.show()
for name, times in launch_us.items():
    if times:
        print(f"{name:<34} " + "  ".join(f"T={t}: {us:.1f} µs" for t, us in times.items()))

# %% [markdown] nbgrader={"grade": false, "grade_id": "launch-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. One launch per tensor from Python lies far above every model line: the host, not the
# GPU, sets the pace (tens of µs a Triton launch, plus whatever your step checks or prepares per call on the
# host). Where the loop has more tensors than your step keeps tables for, it jumps up again: each call
# uploads a table and waits for the copy. The CUDA graph brings the loop down to near the `T·L` line, the
# GPU's own cost of starting `T` small kernels, and no further. The single launch follows the `L + T·b/BW`
# line under a graph. Without a graph, at large `T` it is the host again: the launcher looks at every
# tensor's address (to find its table) in Python, a few hundred nanoseconds apiece. PyTorch's `fused=True`
# optimizer does the same kind of multi-tensor launch, but its Python bookkeeping per parameter shows at
# these sizes. So: graphs remove the host; fusion removes the launches; for the smallest steps you want both.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-graph-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** Under a CUDA graph, the loop of one launch per tensor comes down to near the `T·L`
# line, but no lower. What is left that a graph cannot remove, and why does a single launch for all the tensors
# remove it? (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-graph", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# A graph removes the host's work (Python, argument handling, the driver's launch calls) but the GPU still
# starts T separate kernels, each paying its own start-up and ramp-down, and each small kernel occupies a few SMs
# while the rest of the GPU idles. One launch for all tensors pays the start-up once and spreads all T tensors'
# blocks over every SM at the same time, so the time approaches L + T·b/BW.

# %% [markdown] nbgrader={"grade": false, "grade_id": "adam-torch-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. Your step against `torch.optim.AdamW`
#
# First, agreement: the parameters of a small MLP take five steps with your `adamw_step` and five with
# `torch.optim.AdamW` from the same state and the same gradients (`foreach=False`, the reference loop; it
# runs on the CPU too). Then, on a GPU, speed at the scale of a real model: 200 tensors holding about
# 5·10⁷ parameters, shaped like a transformer's weight matrices and norm vectors, timed for your kernel and
# for PyTorch's three implementations: `foreach=False` (a loop of small kernels per tensor),
# `foreach=True` (PyTorch's multi-tensor apply for each operation, so about a dozen passes over all the
# parameters), and `fused=True` (one multi-tensor kernel for the whole update, like yours). The model line
# is the 7 passes every version must make at least, at the copy bandwidth.

# %% nbgrader={"grade": false, "grade_id": "adam-torch", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(96, 200), torch.nn.GELU(), torch.nn.LayerNorm(200), torch.nn.Linear(200, 10))
ours = [p.detach().clone().to(DEVICE) for p in mlp.parameters()]
theirs = [p.detach().clone().to(DEVICE) for p in mlp.parameters()]
m_ours = [torch.zeros_like(p) for p in ours]
v_ours = [torch.zeros_like(p) for p in ours]
m_theirs = [torch.zeros_like(p) for p in theirs]
v_theirs = [torch.zeros_like(p) for p in theirs]
hyper = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.05)
try:
    for step in range(1, 6):
        grads = [torch.randn_like(p) * 0.1 for p in ours]
        adamw_step(ours, grads, m_ours, v_ours, step, **hyper)
        horizontal_fusion.torch_adamw(theirs, [g.clone() for g in grads], m_theirs, v_theirs, step, **hyper, foreach=False)()
except Exception as exc:  # noqa: BLE001  only an unwritten exercise is skipped
    if not not_written(exc):
        raise
    print(f"agreement with torch.optim.AdamW: not checked, adamw_step is not written yet "
          f"({type(exc).__name__}: {exc})")
else:
    worst = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours, theirs))
    print(f"after 5 steps over {len(ours)} tensors: largest difference from torch.optim.AdamW, relative to the "
          f"tensor's largest value: {worst:.2e}")

sizes = horizontal_fusion.model_like_sizes(torch.Generator().manual_seed(0))
n_params = sum(sizes)
adam_bytes = 7 * 4 * n_params
adam_model_ms = adam_bytes / (bw_gbps * 1e6)
adam_ms = {}
if ON_GPU:
    impls = {"torch foreach=False": dict(foreach=False), "torch foreach=True": dict(foreach=True),
             "torch fused=True": dict(fused=True)}
    for name, impl in tqdm(impls.items(), desc="timing torch.optim.AdamW"):
        adam_ms[name] = bench_ms(horizontal_fusion.torch_adamw(*horizontal_fusion.random_adamw_state(sizes), *HYPER, **impl))
    lists = horizontal_fusion.random_adamw_state(sizes)
    adam_ms |= bench_versions({"your adamw_step": lambda: adamw_step(*lists, *HYPER)}, desc="timing your adamw_step")
    del lists

fig, ax = plt.subplots(figsize=(8, 3.5))
adam_model = {n: adam_model_ms for n in (adam_ms if ON_GPU else ["7 passes at copy bandwidth"])}
bars_against_model(ax, adam_ms, adam_model, f"ms per step (log); model: 7 passes over {n_params / 1e6:.0f}M fp32",
                   f"AdamW over {len(sizes)} tensors, {peak_label}", ON_GPU)
ax.set_xscale("log")
plt.show()
for n, ms in adam_ms.items():
    print(f"{n:<20} {ms:7.3f} ms  {adam_bytes / (ms * 1e6):6.0f} GB/s = {adam_bytes / (ms * 1e6) / bw_gbps:.2f} of copy")

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * Siblings that read the same input fuse into one kernel that reads it once: `(k − 1)·|X|` saved. Worth
#   most when the outputs are small (row statistics: a factor of 2 for two of them).
# * Q, K, V (and SwiGLU's gate and up) stack their weights so one GEMM serves all of them. At decode that
#   wins by more than the bytes saved, because one wide grid streams the weights better than three narrow
#   ones and two launches disappear; at prefill the GEMM is compute-bound and the gain is small.
# * Many small tensors: launches, not bytes, set the time. CUDA graphs remove the host's share of each
#   launch; only fusing all the tensors into one launch removes the launches. A table of addresses is how
#   one kernel reaches tensors that live apart.
# * A fused optimizer step moves each byte once each way: 7 passes for AdamW, against a dozen or more for
#   an unfused one.
#
# Next, notebook 04 fuses work into the GEMM itself: bias, activation and residual applied to the
# accumulator of the tiled matmul you read in section 3b, before the output tile is ever written.
#
# ## Further reading
#
# * Triton's tutorial on [matrix multiplication](https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html):
#   tiles, `tl.dot` and the grouped order of section 3b.
# * PyTorch's [torch.optim.AdamW](https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html) (its `foreach`
#   and `fused` implementations) and Loshchilov and Hutter, [Decoupled Weight Decay Regularization](https://arxiv.org/abs/1711.05101)
#   (2017), the paper behind AdamW.
# * Ainslie et al., [GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints](https://arxiv.org/abs/2305.13245)
#   (2023): why `n_kv < n_q`.
# * NVIDIA's [CUDA Graphs](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-graphs) section of
#   the CUDA C++ Programming Guide, and PyTorch's [torch.cuda.graphs](https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs).
# * Williams, Waterman and Patterson, [Roofline: an insightful visual performance model](https://doi.org/10.1145/1498765.1498785)
#   (2009): the max(bytes / BW, flops / peak) of section 3.
