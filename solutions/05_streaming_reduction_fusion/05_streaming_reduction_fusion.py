# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 05 · Streaming-reduction fusion: online softmax, FlashAttention, vocabulary heads without their logits
#
# About 7-10 hours · difficulty ★★★ · prerequisites: notebooks 01 (the cost model), 02 (a row held in registers)
# and 04 (the tiled GEMM and its epilogue)
#
# Notebook 02 fused a reduction into its consumer by holding a whole row in registers: compute the row's
# statistic, then normalise the registers. That stops working in two cases. The row may be **too long** for
# one program's registers (a softmax over 100 000 entries). Or the row may **not exist yet**: it is the output
# of a matrix product, such as attention's scores `q·kᵀ` or a language model's logits `h·Wᵀ`, produced one tile
# at a time, and writing it out in full is exactly what fusion should avoid. Both are solved by a reduction
# that can be updated as its input streams past: the **online softmax**.
#
# You will
# 1. see why a reduction over a whole row stands in the way of fusion, and **predict** softmax's traffic op by
#    op, fused with a row in one block, and fused with a row longer than a block;
# 2. derive the online softmax (a running max, and a running sum rescaled when the max grows) and check it
#    numerically, chunk by chunk and by merging partial results in any order;
# 3. write a **softmax** for rows of any length (graded on correctness, precision, bandwidth, fusion), then
#    measure its bandwidth against the row length, against your prediction; then write a **mixture-of-experts
#    router**, a softmax over a token's experts and its top k in one kernel;
# 4. put the online softmax inside a loop over key tiles, first as **FlashAttention-2's loop in plain PyTorch**
#    (graded on never holding the `N × N` scores), then as **FlashAttention**'s forward pass in Triton, whose
#    `N × N` scores never reach memory (graded against SDPA's speed on your GPU); then measure its memory
#    (`O(N)` against `O(N²)`), its time against naive attention and PyTorch's SDPA, and what a causal mask
#    saves when the tiles above the diagonal are skipped;
# 5. apply the same pattern to a linear layer followed by cross-entropy and write a **fused linear
#    cross-entropy** whose logits never exist (graded on the memory it allocates), then measure its memory
#    and time;
# 6. apply it once more to a **sparse retrieval head** (SPLADE), whose max over a passage's tokens never needs
#    the `B × S × V` logits (graded on memory and on speed against the bare GEMM), after **predicting** what the
#    unfused head stores;
# 7. answer six short written questions about what you measured.
#
# | exercise | what | time · difficulty | points |
# |---|---|---|---|
# | 05.predict_softmax_bytes | HBM bytes of softmax op by op, in one block, online | 10 min · ★☆☆ | 2 |
# | 05.softmax | softmax over rows of any length, one kernel | 60 min · ★★☆ | 10 |
# | 05.predict_router_bytes | HBM bytes of a fused router | 5 min · ★☆☆ | 1 |
# | 05.moe_router | softmax and top-k over a token's experts, one kernel | 45 min · ★★☆ | 6 |
# | 05.predict_attention_bytes | HBM bytes of naive attention and of FlashAttention | 15 min · ★☆☆ | 2 |
# | 05.flash_attention_torch | FlashAttention-2's loop in plain PyTorch | 30 min · ★★☆ | 6 |
# | 05.flash_attention | FlashAttention's forward pass | 2 h · ★★★ | 17 |
# | 05.linear_cross_entropy | a linear layer and cross-entropy without the logits | 90 min · ★★★ | 11 |
# | 05.predict_sparse_head_bytes | what an unfused sparse head stores, what the fused one writes | 5 min · ★☆☆ | 1 |
# | 05.sparse_head | a SPLADE head's masked max over the sequence without the logits | 60 min · ★★★ | 11 |
# | six written questions | | 35 min | 6 |
#
# Each exercise comes after the model that predicts its cost, and each measurement after the exercise: it
# times your kernel. A measurement cell run before you have written its exercise leaves your kernel out and
# says so. Without a GPU, kernels run in Triton's interpreter: graded for correctness there, not for speed.
# Memory is measured there too, at small sizes; the time plots show the cost model for a reference H200
# instead.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.guard.largest import largest_allocation
from autograder.measure import sizes
from autograder.specs import streaming_reduction_fusion
from autograder.specs import streaming_softmax
from autograder.teach.plots import bars_against_model, peaks, print_against_model
from autograder.measure.timing import not_written, written_versions
from autograder.measure.timing import extra_bytes as measured_extra_bytes
from kernels.matmul import dot_precision, grouped_tile, tile_dot

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()
bw_gbps, peak_tflops, peak_label = peaks(profile)
if ON_GPU:
    from autograder.measure.timing import bench_interleaved


def extra_bytes(fn) -> int:
    """Bytes one call of fn allocates beyond what was allocated before it, its outputs included: the CUDA
    allocator's peak on a GPU; in the interpreter every storage torch creates during the call, added up."""
    return measured_extra_bytes(fn)[1]


def rel_err(got, exact):
    return float((got.double() - exact).norm() / exact.norm())


def timed_in_turns(calls, desc, rounds=3, rep=50):
    """{name: median ms} of the versions in calls (name -> function of no arguments) that run, timed in turns
    (bench_interleaved: a GPU that heats up lowers its clocks, and taking turns gives every version the same
    mix of clock states). written_versions first calls each version once (a warm-up) and leaves out, naming
    it, a version whose exercise is not written yet."""
    return bench_interleaved(written_versions(calls, desc), rounds=rounds, rep=rep)


# %% [markdown] nbgrader={"grade": false, "grade_id": "barrier-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. A reduction over the whole row is a barrier
#
# `softmax(x)_j = exp(x_j − m) / s`, with `m = max_k x_k` and `s = Σ_k exp(x_k − m)` over the row. (Subtracting
# `m` changes nothing mathematically and keeps every exponent at or below 0: without it, `exp` of a float32
# logit above 88.7 is `inf`.) In a chain of elementwise operations, output element `j` needs input element
# `j` only, so a kernel can load a tile, apply the whole chain and store it. Here output `j` needs `m` and `s`,
# and those need **every** element of the row. No element can be written before the last one has been read.
#
# PyTorch, op by op (`softmax_eager` in `autograder/specs/streaming_reduction_fusion.py`), launches five kernels, and each moves
# the whole row:
#
# | kernel | reads | writes |
# |---|---|---|
# | `m = x.max(-1)` | `x` | one value a row |
# | `t = x − m` | `x` | `t` |
# | `e = exp(t)` | `t` | `e` |
# | `s = e.sum(-1)` | `e` | one value a row |
# | `y = e / s` | `e` | `y` |
#
# A fused kernel that holds the row in registers reads it once and writes once: the floor. A row of 4096 bf16
# values is 8 KiB, which one program holds easily; rows up to 16384 work too (64 KiB in float32, spread over 8
# warps). Past that the registers run out, and the row has to be streamed through in pieces. Streaming the max
# first and the sum second would take three reads before the write. The online softmax of section 2 gets `m`
# and `s` together in **one** sweep, and a second sweep reads the row again and writes `y`.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-softmax-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.predict_softmax_bytes · softmax's traffic, before measuring (about 10 min · ★☆☆)
#
# **Spec.** Write `predicted_softmax_bytes(rows, cols, elem_bytes)` returning `(eager, one_block, online)`, the
# HBM bytes of a softmax over `x (rows, cols)` with `elem_bytes` bytes an element, as Python ints: for the five
# kernels of the table above; for a fused kernel that holds each row in registers; and for a fused kernel whose
# rows are longer than a block (the online sweep for `(m, s)`, then a sweep that reads again and writes). Count
# only tensors of `x`'s size: the one value a row that `max` and `sum` write is too small to matter.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Every entry of the table that names an `x`-sized tensor is one trip of `|x| = rows · cols · elem_bytes`
# bytes through HBM. Count the trips of each version.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `x = rows * cols * elem_bytes`, then three small whole multiples of `x`. Of the five eager kernels, two only
# read a tensor of `x`'s size and three read one and write one.
#
# </details>
#
# The measurement after exercise 05.softmax draws your three predictions as lines and times kernels against them.
#
# **Graded.**
#
# <!-- graded: 05.predict_softmax_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_softmax_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_softmax_bytes(rows: int, cols: int, elem_bytes: int) -> tuple[int, int, int]:
    """(eager, one_block, online) HBM bytes of softmax over an (rows, cols) tensor, elem_bytes an element."""
    ### BEGIN SOLUTION
    x = rows * cols * elem_bytes
    return 8 * x, 2 * x, 3 * x  # max 1, x - max 2, exp 2, sum 1, e / s 2 | read, write | two reads, write
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_softmax_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.predict_softmax_bytes", predicted_softmax_bytes, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "online-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. The online softmax, step by step
#
# Read the row in chunks `c₁, c₂, …`. After chunk `t` keep two numbers: `m_t`, the largest value seen so far,
# and `s_t = Σ_{j seen} exp(x_j − m_t)`, the sum measured **from that max**. When chunk `t+1` arrives:
#
# 1. the max can only grow: `m_{t+1} = max(m_t, max(c_{t+1}))`;
# 2. every term of `s_t` was measured from `m_t`; multiplying by `exp(m_t − m_{t+1})` re-measures it from
#    `m_{t+1}`, since `exp(x_j − m_t) · exp(m_t − m_{t+1}) = exp(x_j − m_{t+1})`;
# 3. add the new chunk's terms: `s_{t+1} = s_t · exp(m_t − m_{t+1}) + Σ_{j ∈ c_{t+1}} exp(x_j − m_{t+1})`.
#
# Every exponent is at most 0, so nothing overflows, and after the last chunk `(m, s)` is the pair the
# two-pass formula would have given. The rescaling factor is 1 whenever the max did not move.
#
# The same algebra **merges two partial results**. Two halves of a row, summarised as `(m_a, s_a)` and
# `(m_b, s_b)`, combine into `m = max(m_a, m_b)`, `s = s_a · exp(m_a − m) + s_b · exp(m_b − m)`. In exact
# arithmetic this merge is associative and commutative, as max and sum are: a row can be cut into pieces of any
# size, handled by different lanes, loops or programs, and combined in any order. In floating point the max still
# is, but a sum is not: every addition rounds, and another order rounds differently, so two orders agree to a few
# units of rounding, not bit for bit (the cell below shows how close). Every kernel of this notebook relies on
# that merge, and none of them promises the same bits as another order would give.
#
# And it goes one step further. What attention needs is not `softmax(x)` but `Σ_j softmax(x)_j · v_j`, a
# weighted sum of value vectors. Keep `o_t = Σ_{j seen} exp(x_j − m_t) · v_j`, measured from the same max:
# when the max moves, `o` is rescaled by the **same** factor as `s`, and `o / s` at the end is the answer.
# Nothing of size `N` is ever stored.
#
# ![](figures/online_softmax.svg)
#
# One trap: a chunk that is entirely `−inf` (a masked region) leaves `m = −inf`, and `exp(m − m_new)` with both
# `−inf` is `exp(NaN)`. A kernel measures from 0 instead while nothing finite has been seen. The cell below
# checks all of this in float32 against float64.

# %% nbgrader={"grade": false, "grade_id": "online-check", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def online_stats(x, chunk):
    """(m, s): the running max of x and the sum of exp(x - m), one chunk at a time, in x's dtype."""
    m, s = torch.tensor(-math.inf, dtype=x.dtype), torch.tensor(0.0, dtype=x.dtype)
    for start in range(0, len(x), chunk):
        c = x[start:start + chunk]
        m_new = torch.maximum(m, c.max())
        ref = m_new if m_new > -math.inf else torch.zeros_like(m_new)  # nothing finite yet: measure from 0
        s = s * torch.exp(m - ref) + torch.exp(c - ref).sum()
        m = m_new
    return m, s


def merge(a, b):
    """Two partial (max, sum) pairs of disjoint pieces of a row -> the pair of their union."""
    (m_a, s_a), (m_b, s_b) = a, b
    m = torch.maximum(m_a, m_b)
    return m, s_a * torch.exp(m_a - m) + s_b * torch.exp(m_b - m)


gen = torch.Generator().manual_seed(0)
row = 30 * torch.randn(20_000, generator=gen)  # float32 logits of spread 30
exact = torch.softmax(row.double(), dim=0)
naive = torch.exp(row) / torch.exp(row).sum()  # no max subtracted
print(f"largest logit {row.max():.0f}: exp(x) overflows float32, and exp(x) / sum(exp(x)) holds "
      f"{int(naive.isnan().sum())} NaN and {int((naive == 0).sum())} zeros in {len(row)} entries")
for chunk in (1, 7, 1000, 20_000):
    m, s = online_stats(row, chunk)
    err = rel_err(torch.exp(row - m) / s, exact)
    print(f"chunks of {chunk:>6}: softmax from the online (m, s), relative error {err:.1e}")

cuts = sorted(torch.randint(1, len(row), (9,), generator=gen).tolist())
pieces = [online_stats(p, 512) for p in torch.tensor_split(row, cuts)]
order = torch.randperm(len(pieces), generator=gen).tolist()
m, s = pieces[order[0]]
for i in order[1:]:
    m, s = merge((m, s), pieces[i])
lse_exact = torch.logsumexp(row.double(), dim=0)
print(f"{len(pieces)} pieces merged in the order {order}: log-sum-exp m + log s = "
      f"{float(m + torch.log(s)):.6f}, float64 {float(lse_exact):.6f}")

v = torch.randn(len(row), 4, generator=gen)  # a value vector per position, as attention's V
m, s, o = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(4)
for start in range(0, len(row), 1000):
    c = row[start:start + 1000]
    m_new = torch.maximum(m, c.max())
    p = torch.exp(c - m_new)
    alpha = torch.exp(m - m_new)  # what was accumulated under the old max is re-measured from the new one
    s, o, m = s * alpha + p.sum(), o * alpha + p @ v[start:start + 1000], m_new
print(f"running output o / s against softmax(x) @ v: relative error {rel_err(o / s, exact @ v.double()):.1e}")

masked = torch.cat([torch.full((1000,), -math.inf), row[:1000]])
m_bad, s_bad = torch.tensor(-math.inf), torch.tensor(0.0)
for c in masked.split(1000):  # the same update without the guard
    m_new = torch.maximum(m_bad, c.max())
    s_bad, m_bad = s_bad * torch.exp(m_bad - m_new) + torch.exp(c - m_new).sum(), m_new
guarded = online_stats(masked, 1000)[1]
exact_sum = torch.exp(row[:1000].double() - row[:1000].max()).sum()
print(f"a first chunk all -inf: unguarded sum {float(s_bad)}, guarded {float(guarded):.4g}, "
      f"float64 {float(exact_sum):.4g}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "softmax-ex-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: the naive formula fails outright (an `inf` in the sum makes every probability 0 or NaN),
# while the online pair gives the float64 answer to float32 rounding whatever the chunk size, one element at a
# time included; pieces merged in a shuffled order agree with the whole row; the running output matches
# `softmax(x) @ v`; and without the guard a masked first chunk poisons the sum with NaN.
#
# ## 3. Softmax for rows of any length
#
# Your prediction of section 1, in time: a kernel that moves only the bytes it must takes its bytes over copy
# bandwidth. A row that fits in one program's registers costs the time of a copy; a row streamed through twice
# costs more, and eager PyTorch more again. The measurement below uses *effective* bandwidth, `2|x|` over the
# time, so a version that moves `c·|x|` bytes at copy speed shows `2/c` of copy bandwidth.
#
# The kernel to write follows that split, one program per row. Up to a block of 16384 (a constant such as
# `ONE_BLOCK_MAX = 16384`) it loads the whole row, upcasts it to float32, reduces and writes: `2|x|`. Longer
# rows take the online path: a first loop over the row in 4096-wide chunks, where **each lane** keeps its own
# running `(m, s)` (so the loop body is pure elementwise work, no cross-lane reduction per chunk), the lanes
# merged once at the end with the rule of section 2; then a second loop that reads the row again and writes
# `exp(x − m) / s`: `3|x|`. Eight warps suit rows of 4096 and longer; short rows need fewer.

# %% [markdown] nbgrader={"grade": false, "grade_id": "softmax-card-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.softmax · softmax over rows of any length (about 60 min · ★★☆)
#
# **Spec.** `softmax(x) -> y`, `softmax(x, dim=-1)` for a 2-D `x (M, N)` in fp32, fp16 or bf16, with any
# strides (rows inside a wider buffer, transposed views). Returns a new contiguous `y (M, N)` in `x`'s dtype,
# from **one** Triton kernel, one program per row: load with `other=-inf` past the row's end (padding never
# wins the max and adds `exp(−inf) = 0`), upcast to float32, round once at the store. Rows up to a block (say
# 16384) are held whole (`2|x|`); longer rows (the grader uses up to 70001) take the online loop of section 2
# and a second sweep that writes (`3|x|`), with the `−inf` guard: about a third of some rows is `−inf`, as an
# attention mask leaves them.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# One kernel, two paths: a `tl.constexpr` flag picks at compile time between a row held whole and a row
# streamed in chunks. Padding lanes must change neither the max nor the sum: which value loaded there does that?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# One block: load with `other=-inf`, `.to(tl.float32)`, `m = tl.max(x, 0)`, `e = tl.exp(x - m)`, store
# `e / tl.sum(e, 0)`. Online: a first loop over chunks in which **each lane** keeps its own running `m` and
# `s` (vectors of `BLOCK_N`), so the loop body is elementwise; after it, merge the lanes once with the rule of
# section 2 (`tl.max(m)`, then `tl.sum(s * exp(m - row_max))`); a second loop loads again and stores
# `exp(x - row_max) / total`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The traps: a lane that has seen only `-inf` has `m = -inf`, and `exp(-inf - (-inf))` is NaN; measure from 0
# there (`ref = tl.where(m_new == -inf, 0.0, m_new)`), in the loop and in the merge. Take
# `row = tl.program_id(0).to(tl.int64)` before multiplying by a stride. `y` is contiguous, `x` need not be: two
# different column strides. Keep the skeleton's kernel signature if you can: the measurement after the tests
# launches `_softmax_kernel` with `ONE_BLOCK=False` to time your online loop at every row length (nothing is
# graded on it).
#
# </details>
# <details><summary>Make it fast</summary>
#
# Hold rows up to 16384 whole and stream longer ones in 4096-wide chunks. Eight warps suit rows of 4096 and
# longer; short rows need fewer (one to four).
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.softmax -->

# %% nbgrader={"grade": false, "grade_id": "softmax", "locked": false, "schema_version": 3, "solution": true}
# Helpers your launcher calls (the choice of BLOCK_N, ONE_BLOCK and warps from N) go here; or write everything
# inside the two functions below.
### BEGIN SOLUTION
# include: kernels/softmax.py (ONE_BLOCK_MAX, softmax_launch_settings)
### END SOLUTION


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, BLOCK_N: tl.constexpr,
                    ONE_BLOCK: tl.constexpr):
    """One program writes one row of y = softmax(x, dim=-1).

    x (M, N) any strides (stride_xm, stride_xn, in elements); y (M, N) row-major (stride_ym, 1), x's dtype.
    ONE_BLOCK: the whole row fits in BLOCK_N lanes (N <= BLOCK_N); otherwise loop over it in BLOCK_N chunks."""
    # row = tl.program_id(0).to(tl.int64)      # int64: row * stride overflows int32 on large inputs
    # cols = tl.arange(0, BLOCK_N)
    # if ONE_BLOCK:
    #     ...  # load the row (mask cols < N, other=-inf), float32: max, exp, sum, store e / sum
    # else:
    #     ...  # loop over the row: per-lane running max and sum (tl.full / tl.zeros of [BLOCK_N]),
    #     ...  # merge the lanes (tl.max, tl.sum), then a second loop that writes exp(x - max) / sum
    ### BEGIN SOLUTION
    # include body: kernels/softmax.py (_softmax_kernel)
    ### END SOLUTION


def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax(x, dim=-1) in one kernel: x (M, N) fp32/fp16/bf16, any strides -> y (M, N) contiguous, x's dtype."""
    # M, N = x.shape
    # y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    # _softmax_kernel[(M,)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=..., ONE_BLOCK=...)
    # return y
    ### BEGIN SOLUTION
    # include body: kernels/softmax.py (softmax)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "softmax-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.softmax", softmax)

# %% nbgrader={"grade": true, "grade_id": "test_softmax_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.softmax", softmax, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.softmax", softmax, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.softmax", softmax, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.softmax", softmax, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "softmax-ref", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's reference solution (`kernels/softmax.py`) at the timed shape (32768 × 4096
# bf16): 0.95 of copy bandwidth on an H200 and 0.98 on an H100, 6 to 8 times faster than eager PyTorch.

# %% [markdown] nbgrader={"grade": false, "grade_id": "softmax-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your softmax against the model
#
# The cell below times, on 32768 × 4096 bf16 (256 MiB), eager PyTorch, `torch.softmax` (PyTorch's own fused
# kernel), `torch.compile` of the eager version and your `softmax` against your predictions (exercise
# 05.predict_softmax_bytes) at this GPU's measured copy bandwidth. Then it keeps the tensor at 2²⁷ elements and sweeps the row length from 1024 to
# 262144, with your kernel as launched and, if your `_softmax_kernel` has the skeleton's parameters, with its
# online loop forced at every length, plotting the effective bandwidth (`2|x|` over the time: what a one-read,
# one-write kernel would need to move). The model's switch from one block to the online loop is drawn at your
# `ONE_BLOCK_MAX` if your solution defines that name, at 16384 otherwise. Without a GPU the cell checks the
# forced online loop on a small input in the interpreter and draws the model alone.

# %% nbgrader={"grade": false, "grade_id": "softmax-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
SM_ONE_BLOCK = globals().get("ONE_BLOCK_MAX", 16384)  # where the model moves from 2|x| to 3|x|
SKELETON_PARAMS = ["x_ptr", "y_ptr", "M", "N", "stride_xm", "stride_xn", "stride_ym", "BLOCK_N", "ONE_BLOCK"]
try:  # the stub of an exercise not written yet raises NotImplementedError
    softmax(torch.randn(2, 8, device=DEVICE))
    softmax_written = True
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    softmax_written = False
FORCED_ONLINE = softmax_written and list(getattr(globals().get("_softmax_kernel"), "arg_names", ())) == SKELETON_PARAMS


def softmax_online(x, block=4096):
    """Your _softmax_kernel with its online loop forced, whatever the row length: 3|x| instead of 2|x|."""
    y = torch.empty_like(x)
    M, N = x.shape
    block = min(block, triton.next_power_of_2(N))
    _softmax_kernel[(M,)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), BLOCK_N=block, ONE_BLOCK=False,
                          num_warps=8)
    return y


if FORCED_ONLINE:
    x_small = 10 * torch.randn(3, 5000, device=DEVICE)
    err = rel_err(softmax_online(x_small, 1024), streaming_reduction_fusion.softmax_reference(x_small))
    print(f"your online loop forced on 3 x 5000 float32: relative error {err:.1e}")
elif softmax_written:
    print("your softmax launches no _softmax_kernel with the skeleton's parameters: its online loop is not forced "
          "here, your softmax is measured as launched")
else:
    print("softmax: not written yet (exercise 05.softmax), so the forced online loop is left out")

M_SM, N_SM = 32768, 4096
x_bytes = M_SM * N_SM * 2
try:
    SM_PREDICTED = predicted_softmax_bytes(M_SM, N_SM, 2)
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"predicted_softmax_bytes is not written yet ({type(exc).__name__}): the model lines use the course's "
          "own count until you write it and run this cell again")
    SM_PREDICTED = streaming_softmax.predicted_softmax_bytes_reference(M_SM, N_SM, 2)
SM_EAGER_X, SM_ONE_X, SM_ONLINE_X = (b / x_bytes for b in SM_PREDICTED)  # the predictions in units of |x|
sm_model_ms = {"eager (5 kernels)": SM_EAGER_X * x_bytes / (bw_gbps * 1e6),  # ms: bytes / (GB/s · 1e6)
               "your softmax": SM_ONE_X * x_bytes / (bw_gbps * 1e6)}
sm_ms = {}
SM_ELEMENTS = 2**27  # 256 MiB in bf16, far past any L2
SM_NS = runtime.demo_points([1024, 4096, 16384, 65536, 262144])  # three of them when the grader runs this
sm_gbps = {}  # version -> effective GB/s at each row length
if ON_GPU:
    x = torch.randn(M_SM, N_SM, device="cuda", dtype=torch.bfloat16)
    compiled_softmax = runtime.demo_compile(streaming_reduction_fusion.softmax_eager, dynamic=False)
    calls = {"eager (5 kernels)": lambda: streaming_reduction_fusion.softmax_eager(x),
             "torch.softmax": lambda: torch.softmax(x, -1),
             "torch.compile": lambda: compiled_softmax(x),
             "your softmax": lambda: softmax(x)}
    sm_ms = timed_in_turns(calls, desc=f"softmax, {M_SM} x {N_SM}")
    for n in tqdm(SM_NS, desc="softmax over row lengths"):
        x = torch.randn(SM_ELEMENTS // n, n, device="cuda", dtype=torch.bfloat16)
        calls = {"eager (5 kernels)": lambda: streaming_reduction_fusion.softmax_eager(x),
                 "torch.softmax": lambda: torch.softmax(x, -1)}
        if "your softmax" in sm_ms:  # written (the line above says when it is not)
            calls["yours as launched"] = lambda: softmax(x)
        if FORCED_ONLINE:
            calls["yours, online loop forced"] = lambda: softmax_online(x)
        for name, ms in timed_in_turns(calls, desc=f"N = {n}").items():
            sm_gbps.setdefault(name, []).append(streaming_reduction_fusion.softmax_bytes(x) / (ms * 1e6))
    del x

fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.2))
names = bars_against_model(ax, sm_ms, sm_model_ms, "ms (32768 x 4096 bf16)", f"softmax, {peak_label}", ON_GPU)
one_block = [n <= SM_ONE_BLOCK for n in SM_NS]
bx.semilogx(SM_NS, [bw_gbps * 2 / SM_ONE_X] * len(SM_NS), "k:", label=f"your prediction: one block, {SM_ONE_X:g}|x|")
bx.semilogx(SM_NS, [bw_gbps * 2 / SM_ONLINE_X] * len(SM_NS), "k-.", label=f"your prediction: online, {SM_ONLINE_X:g}|x|")
bx.semilogx(SM_NS, [bw_gbps * 2 / SM_EAGER_X] * len(SM_NS), "k--", label=f"your prediction: eager, {SM_EAGER_X:g}|x|")
bx.semilogx(SM_NS, [bw_gbps * 2 / (SM_ONE_X if ob else SM_ONLINE_X) for ob in one_block], color="0.6", lw=6,
            alpha=0.4, label="model: your kernel as launched")
for (name, vals), style in zip(sm_gbps.items(), ("x-", "s-", "o-", "^-")):
    bx.semilogx(SM_NS, vals, style, label=name)
bx.axvline(SM_ONE_BLOCK, color="gray", lw=1)
bx.set_xticks(SM_NS, [str(n) for n in SM_NS])
bx.minorticks_off()
bx.set_xlabel("row length N (2²⁷ elements in all, bf16)")
bx.set_ylabel("effective GB/s (2|x| / time)")
bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
bx.set_ylim(0, bw_gbps * 1.15)
bx.grid(True, which="both", alpha=0.3)
bx.legend(fontsize=7)
plt.tight_layout()
plt.show()
print_against_model(names, sm_ms, sm_model_ms, 2 * x_bytes, bw_gbps)
if ON_GPU:
    print("\neffective GB/s by row length (fraction of copy bandwidth):")
    for name, vals in sm_gbps.items():
        print(f"{name:<28}" + "  ".join(f"N={n}: {g:5.0f} ({g / bw_gbps:.2f})" for n, g in zip(SM_NS, vals)))
else:
    print("No GPU: speed was not measured; the plot shows the model with the reference H200's copy bandwidth.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "softmax-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for (figures quoted from the course's reference solution on an H200 and an H100). At 32768 ×
# 4096 a fused kernel should land on its `2|x|` line: the reference reaches 0.95 of copy bandwidth on the H200,
# 0.98 on the H100, 6 to 8 times faster than eager. Eager sits 1.5 to 2 times above its own `8|x|` line: the
# model assumes every kernel streams at copy bandwidth, and PyTorch's generic reductions (`max` also returns
# indices) do not. `torch.softmax`, one fused kernel, reaches 0.3 to 0.75 of copy bandwidth depending on the
# row length; `torch.compile` 0.55 to 0.8 at 4096.
#
# In the sweep, the reference as launched stays near copy bandwidth up to `N = 16384` (on the H200 it drops to
# 0.8 there, likely because a whole row in registers, 64 values a thread, leaves room for fewer programs per
# multiprocessor). Past its one-block limit it takes the online path and lands on or somewhat below its `3|x|`
# line (0.61 to 0.64 of copy bandwidth on the H100, 0.52 to 0.58 on the H200, against the model's 0.67). The
# forced online loop shows what a cache can do: on the H100 it beats its `3|x|` line at 4096 and 16384 (0.71
# and 0.83), since the second sweep re-reads a row read microseconds before and L2 still holds part of it; on
# the H200 it sat on the line. For rows of 1024 it falls below: two dependent sweeps over 2 KiB are latency
# more than bandwidth. The model's line is what moving those bytes at copy bandwidth costs; a cache can beat
# it, and too little parallelism falls short of it. That is the story at the longest rows: one program per row
# gives 2048 programs at `N = 65536` and only 512 at `N = 262144`, too few to keep enough loads in flight.
# Splitting a row over several programs and merging their `(m, s)` pairs, the trick of section 5, is the way
# to recover it: try it. If your kernel sits well below a line the reference reaches, compare its warps and
# block sizes with the ones suggested in the exercise.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-softmax-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 1.** Compare your three predictions with what was measured above (or, without a GPU, with the
# reference figures quoted above): where does a kernel land on its line, where below, where above, and why?
# Name the one-block and the online path separately.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-softmax-model", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# At 4096 the one-block path sits on its `2|x|` line (0.95 to 0.98 of copy bandwidth for the reference): one
# read, one write, enough programs in flight. Eager sits well above its `8|x|` line in time: its reductions do
# not stream at copy speed. The online path lands on or somewhat below `3|x|` (0.52 to 0.64 against the
# model's 0.67): two dependent sweeps, and at the longest rows one program per row leaves too few loads in
# flight. Forced at 4096 to 16384 it can beat `3|x|`, because L2 still holds part of the row for the second sweep.

# %% [markdown] nbgrader={"grade": false, "grade_id": "router-md", "locked": true, "schema_version": 3, "solution": false}
# ### A router: softmax and top-k in one pass
#
# A mixture-of-experts layer sends each token to `k` of its `E` experts (Mixtral: 2 of 8; DeepSeek-V3: 8 of
# 256). Its router scores the token against every expert, `logits (T, E)`, takes the softmax over the `E`
# scores, keeps the `k` largest probabilities with their experts' indices, and renormalises the kept ones to sum
# to 1: they weight the `k` experts' outputs. PyTorch writes it `torch.topk(torch.softmax(logits.float(), -1),
# k)` and a division: a float32 `(T, E)` tensor of probabilities is written by one kernel and read by the next,
# and small kernels follow. A row of `E ≤ 256` fits in registers, so one kernel can read the logits once and
# write only the `(T, k)` results.
#
# Two facts make that kernel short. The softmax is increasing, so the `k` largest probabilities belong to the
# `k` largest logits: the kernel picks from the logits themselves. And renormalised over the `k` chosen,
# `p_i / Σ_chosen p_j = exp(z_i − z_max) / Σ_chosen exp(z_j − z_max)`: the sum over all `E` experts cancels,
# and the weights are the softmax of the `k` chosen logits alone.
#
# Ties need a rule. `torch.topk` does not say which of two equal values comes first (on the CPU it does not
# always take the lower index). This exercise fixes one: **equal logits are taken lowest index first**, as a
# stable sort would. The grader's inputs hold no equal logits except in cases built for ties.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-router-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.predict_router_bytes · the router's bytes (about 5 min · ★☆☆)
#
# **Spec.** Write `predicted_router_bytes(t, e, k, elem_bytes)` returning the HBM bytes of a fused router over
# `t` tokens and `e` experts whose logits take `elem_bytes` bytes an element, as a Python int: the logits read
# once, and for each token `k` float32 weights and `k` int64 indices written.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Three tensors cross HBM once each, one read and two written. The spec fixes the outputs' dtypes, whatever the
# logits' dtype is.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `t * e * elem_bytes` for the logits, plus `t * k` times the bytes of a float32 and of an int64.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.predict_router_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_router_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_router_bytes(t: int, e: int, k: int, elem_bytes: int) -> int:
    """HBM bytes of the fused router: logits (t, e) of elem_bytes read; weights (t, k) float32, indices int64."""
    ### BEGIN SOLUTION
    return t * e * elem_bytes + t * k * (4 + 8)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_router_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("05.predict_router_bytes", predicted_router_bytes, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "router-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.moe_router · softmax and top-k in one kernel (about 45 min · ★★☆)
#
# **Spec.** `moe_router(logits, k) -> (weights, indices)` for `logits (T, E)` in fp32, fp16 or bf16, any
# strides, `E` from 8 to 256, `k` in {1, 2, 8} (any `k ≤ E` should work). Returns `weights (T, k)` float32,
# the `k` largest probabilities of `softmax(logits, -1)` renormalised to sum to 1, largest first, and
# `indices (T, k)` int64, their experts; equal logits are taken lowest index first. **One** Triton kernel, a
# program per block of tokens, reading each logit once.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# A block of tokens' logits is a `(BLOCK_T, BLOCK_E)` tile in registers. The `k` largest of a row are `k`
# rounds of "find the largest, then hide it". The weights need only the `k` chosen logits.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Load the tile with `other=-inf` past `E`, in float32. For `j in tl.static_range(K)`:
# `best = tl.argmax(x, axis=1)`, `value = tl.max(x, axis=1)`, written into column `j` of two
# `(BLOCK_T, K_PAD)` tensors with `tl.where(slots[None, :] == j, ...)`; then hide the chosen expert,
# `x = tl.where(cols[None, :] == best[:, None], -inf, x)`. After the loop, `e = exp(top - top[:, :1])` over the
# first `K` slots (0 in the others) and `weights = e / sum(e)`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `tl.arange` needs a power of two: `K_PAD = triton.next_power_of_2(k)`, and mask the slots `>= K` at the
# stores. `tl.argmax(x, axis=1, tie_break_left=True)` returns the lowest index of equal maxima, the rule asked.
# Hide the chosen expert by its index, not by its value: an equal value elsewhere must stay. Rows past `T`:
# give them finite values (a row all `-inf` makes `exp(-inf - (-inf))`, NaN) and mask their stores. Store the
# indices as int64.
#
# </details>
# <details><summary>Make it fast</summary>
#
# At `E = 256` and `k = 8` the `k` rounds of row reductions cost more than the read of the logits: try small
# blocks of tokens (8 to 16 at `E = 256`, more where `E` is small) with 4 warps, and time a few.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.moe_router -->

# %% nbgrader={"grade": false, "grade_id": "moe_router", "locked": false, "schema_version": 3, "solution": true}
# Helpers your launcher calls (the block sizes from E) go here; or write everything inside the two functions below.
### BEGIN SOLUTION
# include: kernels/moe_router.py (router_launch_settings)
### END SOLUTION


@triton.jit
def _moe_router_kernel(x_ptr, w_ptr, i_ptr, T, E, stride_xt, stride_xe, K: tl.constexpr, K_PAD: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """One program routes BLOCK_T tokens: logits (T, E) any strides; weights (T, K) float32 and indices (T, K)
    int64, row-major. K_PAD = next power of two of K; BLOCK_E >= E, a power of two."""
    # rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T); cols = tl.arange(0, BLOCK_E)
    # 1. load the (BLOCK_T, BLOCK_E) tile in float32, -inf past E; rows past T finite
    # 2. K rounds: argmax and max of each row, into column j of (BLOCK_T, K_PAD) tensors; hide the chosen index
    # 3. weights: exp(top - largest) over the K slots, divided by their sum
    # 4. store weights and indices (int64), masking rows past T and slots past K
    ### BEGIN SOLUTION
    # include body: kernels/moe_router.py (_moe_router_kernel)
    ### END SOLUTION


def moe_router(logits: torch.Tensor, k: int):
    """(weights (T, k) float32, indices (T, k) int64): the top k of softmax(logits) per token, renormalised over
    the k chosen, largest first, ties to the lowest index. logits (T, E) fp32, fp16 or bf16, any strides."""
    # T, E = logits.shape
    # weights = torch.empty((T, k), dtype=torch.float32, device=logits.device); indices likewise, int64
    # _moe_router_kernel[(triton.cdiv(T, BLOCK_T),)](logits, weights, indices, T, E, *logits.stride(), K=k, ...)
    # return weights, indices
    ### BEGIN SOLUTION
    # include body: kernels/moe_router.py (moe_router)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "moe_router-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.moe_router", moe_router)

# %% nbgrader={"grade": true, "grade_id": "test_moe_router_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.moe_router", moe_router, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_moe_router_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.moe_router", moe_router, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_moe_router_fusion", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("05.moe_router", moe_router, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "router-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your router against the model
#
# The cell below checks your router on a row of ties against the stable-sort rule (and shows what `torch.topk`
# does with it here), then, on a GPU, times eager PyTorch, `torch.compile` of it and your `moe_router` on
# 131072 tokens of bf16 logits over 256 experts, `k = 8`, against the model: your `predicted_router_bytes` at
# copy bandwidth for yours; for eager, its kernels counted the same way (the softmax reads the logits and writes
# float32 probabilities, top-k reads them and writes `k` values and indices, the renormalisation reads and
# writes `(T, k)` twice). Without a GPU it draws the model alone.
#
# What to look for (reference figures: the course's reference kernel on an H100, torch 2.11, triton 3.6,
# 2026-11-28). At this shape it reached 0.11 of copy bandwidth, 7.4 times faster than eager PyTorch, far above
# its bytes line in time: eight rounds of reductions over 256 lanes cost more than one read of the logits. With
# fewer rounds and lanes (`E = 64`, `k = 2`) it reached 0.34. Eager and `torch.compile` stayed near 0.015.

# %% nbgrader={"grade": false, "grade_id": "router-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
RT_T, RT_E, RT_K = 131072, 256, 8
tie_row = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 3.0, -1.0]], device=DEVICE)
print("a row with ties:", tie_row.tolist()[0])
print(f"  torch.topk(k=3) indices here: {torch.topk(tie_row, 3).indices.tolist()[0]}; the rule asks [1, 2, 4]")
try:
    print(f"  your moe_router(k=3) indices: {moe_router(tie_row, 3)[1].tolist()[0]}")
    router_written = True
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print("moe_router: not written yet (exercise 05.moe_router), so it is left out below")
    router_written = False
try:
    rt_bytes = predicted_router_bytes(RT_T, RT_E, RT_K, 2)
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print("predicted_router_bytes is not written yet: the model uses the course's own count")
    rt_bytes = streaming_softmax.predicted_router_bytes_reference(RT_T, RT_E, RT_K, 2)
# Eager, kernel by kernel: softmax (read 2 TE, write 4 TE), topk (read 4 TE, write 12 Tk), sum (read 4 Tk,
# write 4 T), division (read 4 Tk + 4 T, write 4 Tk).
rt_eager_bytes = RT_T * RT_E * (2 + 4 + 4) + RT_T * RT_K * (12 + 4 + 8) + 8 * RT_T
rt_model_ms = {"eager": rt_eager_bytes / (bw_gbps * 1e6), "your moe_router": rt_bytes / (bw_gbps * 1e6)}
rt_ms = {}
if ON_GPU:
    logits = torch.randn(RT_T, RT_E, device="cuda", dtype=torch.bfloat16)
    compiled_router = runtime.demo_compile(streaming_softmax.router_eager, dynamic=False)
    calls = {"eager": lambda: streaming_softmax.router_eager(logits, RT_K),
             "torch.compile": lambda: compiled_router(logits, RT_K)}
    if router_written:
        calls["your moe_router"] = lambda: moe_router(logits, RT_K)
    rt_ms = timed_in_turns(calls, desc=f"router, {RT_T} x {RT_E}, k = {RT_K}")
    del logits
fig, ax = plt.subplots(figsize=(7, 3.2))
names = bars_against_model(ax, rt_ms, rt_model_ms, f"ms ({RT_T} x {RT_E} bf16, k = {RT_K})",
                           f"router, {peak_label}", ON_GPU)
plt.tight_layout()
plt.show()
print_against_model(names, rt_ms, rt_model_ms, rt_bytes, bw_gbps)
if not ON_GPU:
    print("No GPU: speed was not measured; the bars show the model with the reference H200's copy bandwidth.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-router-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 2.** Your kernel computes the weights without the softmax's sum over all `E` experts: why is that
# exact, not an approximation? And what would go wrong on the grader's tie cases if your kernel hid the chosen
# expert by its value (`x == value`) instead of by its index?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-router", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Renormalising divides each chosen `p_i = exp(z_i − m) / S` by `Σ_chosen p_j`; the full sum `S` is in every
# term and cancels, leaving `exp(z_i − m) / Σ_chosen exp(z_j − m)`, the softmax of the chosen logits. Hiding by
# value hides every expert equal to the chosen one at once: the next round skips the tied experts, so a row
# whose k-th place is a tie gets a smaller logit (and a wrong index and weight) in its place.

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. FlashAttention: the online softmax over key tiles
#
# One attention head: `O = softmax(Q·Kᵀ / √D) · V`, with `Q`, `K`, `V` and `O` of shape `N × D`. Written as
# three steps, it materialises two `N × N` matrices per head, the scores `S` and the probabilities `P`:
#
# | step | memory it needs | traffic |
# |---|---|---|
# | `S = Q·Kᵀ / √D` | `N²` per head | reads `Q`, `K`; writes `S` |
# | `P = softmax(S)` | another `N²` | reads `S`, writes `P` (more passes if done op by op) |
# | `O = P·V` | | reads `P`, `V`; writes `O` |
#
# For batch 4, 16 heads and `N = 8192` in bf16 that is 8 GiB for `S` alone, while `Q`, `K`, `V` and `O` take
# 512 MiB together; at `N = 16384`, 32 GiB. Memory grows as `N²`, and every pass over `S` and `P` costs time.
#
# The fix is section 2 with `S` computed tile by tile. A program owns `BLOCK_M` rows of `Q` (loaded once, kept
# in registers) and walks over `K` and `V` in tiles of `BLOCK_N` keys:
#
# 1. `S_tile = Q_block · K_tileᵀ` on the tensor cores: `BLOCK_M × BLOCK_N`, in registers;
# 2. per row, `m_new = max(m, rowmax(S_tile))`, `P_tile = exp(S_tile − m_new)`, `α = exp(m − m_new)`,
#    `l = l·α + rowsum(P_tile)`;
# 3. `acc = acc·α + P_tile · V_tile`: the running output of section 2, `BLOCK_M × D` floats in registers.
#
# ![](figures/flash_attention_loop.svg)
#
# This is **FlashAttention-2**'s loop order: the outer loop over blocks of queries, one program each; the
# inner loop over key and value tiles; one normalisation, after the last tile. The first FlashAttention nested
# the loops the other way round: an outer loop over `K`/`V` blocks, an inner one over query blocks, so every
# query block's partial output and statistics went back to HBM and were read, rescaled and written again at each
# step of the outer loop. With the query block outside, `acc`, `m` and `l` stay in registers for the whole walk,
# the division leaves the loop, and the programs are independent (parallel over query blocks as well as over
# batch and heads).
#
# After the last tile, `O = acc / l`, written once, and each row's log-sum-exp `m + log l` (what a backward
# pass needs to rebuild `P` without storing it). `S` and `P` only ever exist one tile at a time, in registers.
# Memory: `O` and the log-sum-exp, `O(N)`. HBM traffic: `Q` and `O` once, `K` and `V` once per query block
# (re-reads that mostly hit L2). Flops: `4·N²·D` per head, the same as the naive version. At `N = 4096`,
# `D = 128` that is about 2000 flops per byte of the minimal traffic: far right of the ridge point, so the
# kernel's time is the tensor cores' time, and the naive version's extra passes over `S` and `P` are pure loss.
#
# Two details make such a kernel fast. Work in base 2: `exp(x) = 2^(x·log₂e)`, and `exp2` is one instruction
# on the GPU, so fold the scale `log₂(e) / √D` into the exponent, `p = exp2(s·c − m)` with `m` kept in the
# same scaled units (one fused multiply-add and one `exp2` per score); the log-sum-exp goes back to natural log
# at the end. And with a **causal** mask (query `i` sees keys `j ≤ i`), never visit the key tiles wholly above
# the diagonal: skip them, rather than compute and mask them. Only tiles that straddle the diagonal (or the end
# of `K`) take the masked path. That should halve the work, plus the diagonal's share.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-attention-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.predict_attention_bytes · attention's bytes, before measuring (about 15 min · ★☆☆)
#
# **Spec.** Write `predicted_attention_bytes(b, h, n, d, elem_bytes)` returning `(naive_bytes, flash_bytes)`,
# the HBM bytes of one attention forward over `q`, `k`, `v`, `o` of shape `(b, h, n, d)` with `elem_bytes`
# bytes an element, as Python ints: first for the naive three steps of the table above, where `S` and `P`
# (`n × n` per head, in the inputs' dtype) are each written by one step and read by the next; then for
# FlashAttention, which reads `q`, `k`, `v` once and writes `o` and each row's float32 log-sum-exp.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Count each tensor a step of the table reads or writes, once per read and once per write; leave out the
# re-reads of `k` and `v` that L2 serves.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `q`, `k`, `v` and `o` are four tensors of `b·h·n·d` elements, in both versions. `S` and `P` are `b·h·n²`
# elements each, each written once and read once. The log-sum-exp is float32 whatever the inputs: 4 bytes a row.
#
# </details>
#
# The measurement after exercise 05.flash_attention turns your naive count into a time line (the flops at the
# matmul rate, plus the bytes FlashAttention does not move, at copy bandwidth).
#
# **Graded.**
#
# <!-- graded: 05.predict_attention_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_attention_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_attention_bytes(b: int, h: int, n: int, d: int, elem_bytes: int) -> tuple[int, int]:
    """(naive, flash) HBM bytes of attention over q, k, v, o of shape (b, h, n, d), elem_bytes an element."""
    ### BEGIN SOLUTION
    qkvo = 4 * b * h * n * d * elem_bytes  # q, k, v read, o written
    scores = b * h * n * n * elem_bytes  # one N x N matrix per head
    return qkvo + 4 * scores, qkvo + 4 * b * h * n  # S written, read; P written, read | lse in float32
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_attention_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.predict_attention_bytes", predicted_attention_bytes, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-torch-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.flash_attention_torch · FlashAttention-2's loop in plain PyTorch (about 30 min · ★★☆)
#
# **Spec.** `flash_attention_torch(q, k, v, causal=False) -> (o, lse)` with the inputs and outputs of the
# Triton exercise below: `q (B, H, N, D)`, `k` and `v` `(B, H, N_kv, D)`; `o` in `q`'s dtype, `lse (B, H, N)`
# float32, natural log. No Triton: torch operations on whole `(B, H, rows, …)` blocks in two loops, the outer
# over blocks of `block_m` queries, the inner over blocks of `block_n` keys and values (64 each by default),
# with a running max, sum and accumulator per query row in float32 and one division at the end. Causal: query
# `i` sees keys `j ≤ i`; skip the key blocks wholly above the diagonal. It is graded on being tiled too: no
# tensor it creates may exceed `o` or a 128 × 128 float64 tile per head, so `softmax(q·kᵀ)·v` in one shot fails.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# It is the running output of section 2's last check (`o / s` over chunks of one row), done for a block of
# query rows at once, with a block of keys for a chunk: every running quantity gains a leading
# `(B, H, rows)` shape.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `for start_m in range(0, N, block_m)`: take `q_blk` in float32, start `m` at `-inf`, `l` and `acc` at 0;
# `for start_n in range(0, stop, block_n)`: `s = q_blk @ k_blkᵀ / √D` (masked), `m_new = max(m, rowmax(s))`,
# `p = exp(s − m_new)`, `alpha = exp(m − m_new)`, `l = l·alpha + rowsum(p)`, `acc = acc·alpha + p @ v_blk`,
# `m = m_new`. After the inner loop, write the block's rows of `o = acc / l` and `lse = m + log l`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Allocate `o` and `lse` once (`torch.empty`) and write each block's rows into them. Causal: the inner loop
# stops at `min(N_kv, start_m + rows)`; inside a block that straddles the diagonal, hide the scores where the
# key's index exceeds the query's (`torch.arange` on each side, `masked_fill` with `-inf`). Every row sees key 0,
# so `m` is finite after the first key block: no `−inf` guard is needed here. `alpha` and `l` need a trailing
# `[..., None]` to scale `acc` and `o` row by row.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.flash_attention_torch -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention_torch", "locked": false, "schema_version": 3, "solution": true}
def flash_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                          block_m: int = 64, block_n: int = 64):
    """(o, lse) of attention over q (B, H, N, D), k and v (B, H, N_kv, D), computed block by block in float32.

    o has q's shape and dtype; lse (B, H, N) float32. block_m queries and block_n keys a step."""
    # o = torch.empty(q.shape, dtype=q.dtype, device=q.device); lse likewise, (B, H, N) float32
    # for start_m in range(0, N, block_m):             # one Triton program's work in the next exercise
    #     ...  # q block in float32; m = -inf, l = 0, acc = 0 for its rows
    #     for start_n in range(0, stop, block_n):      # causal: stop at the diagonal
    #         ...  # scores of the block (masked), online update of m, l, acc
    #     ...  # o rows = acc / l (q's dtype); lse rows = m + log(l)
    # return o, lse
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_torch.py (flash_attention_torch)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "flash_attention_torch-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.flash_attention_torch", flash_attention_torch)

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_torch_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.flash_attention_torch", flash_attention_torch, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_torch_precision", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("05.flash_attention_torch", flash_attention_torch, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_torch_memory", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.flash_attention_torch", flash_attention_torch, criteria=["memory"]).assert_passed("memory")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-torch-measure-md", "locked": true, "schema_version": 3, "solution": false}
# The cell below measures, over sequence lengths on this machine's CPU (one head, `D = 64`, float32), the
# largest tensor one call creates, for the one-shot version (`attention_naive`: `S` and `P` whole) and for
# yours, against the model: `N²` scores of 4 bytes for the one and one `64 × 64` tile (or `o` itself, `N·D`
# values) for the other. It also checks yours against SDPA. The time is not the point here (torch launches an
# operation per line of the loop); the Triton kernel you write next runs that loop inside one program.

# %% nbgrader={"grade": false, "grade_id": "attention-torch-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
TORCH_NS = runtime.demo_points([256, 512, 1024, 2048])
torch_largest = {"one shot (attention_naive)": [], "your flash_attention_torch": []}
for n in TORCH_NS:
    q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
    torch_largest["one shot (attention_naive)"].append(largest_allocation(lambda: streaming_reduction_fusion.attention_naive(q, k, v))[1])
    try:
        (o, lse), largest = largest_allocation(lambda: flash_attention_torch(q, k, v, True))
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
        if not not_written(exc):
            raise
        print(f"flash_attention_torch: not written yet ({type(exc).__name__}), so it is left out")
        torch_largest.pop("your flash_attention_torch")
        break
    torch_largest["your flash_attention_torch"].append(largest)
    err = rel_err(o, F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True))
    print(f"N={n:<5} yours (causal) against SDPA in float64: relative error {err:.1e}")
fig, ax = plt.subplots(figsize=(7, 3.6))
ax.loglog(TORCH_NS, [4 * n * n / 2**10 for n in TORCH_NS], "k--", label="model: the N x N float32 scores")
ax.loglog(TORCH_NS, [4 * max(64 * 64, 64 * n) / 2**10 for n in TORCH_NS], "k:", label="model: a 64 x 64 tile, or o")
for (name, vals), style in zip(torch_largest.items(), ("x-", "o-")):
    ax.loglog(TORCH_NS[:len(vals)], [b / 2**10 for b in vals], style, label=name)
ax.set_xticks(TORCH_NS, [str(n) for n in TORCH_NS])
ax.minorticks_off()
ax.set_xlabel("sequence length N (one head, D = 64, float32, CPU)")
ax.set_ylabel("KiB, the largest tensor of one call")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.flash_attention · FlashAttention's forward pass (about 2 hours · ★★★)
#
# **Spec.** `flash_attention(q, k, v, causal=False) -> (o, lse)`. `q (B, H, N, D)`, `k` and `v`
# `(B, H, N_kv, D)`, one dtype (fp32, fp16 or bf16), any strides (the grader passes `(B, N, H, D)` buffers seen
# as `(B, H, N, D)`, as a model's projections leave them), any `N` and `N_kv`, `D` a power of two from 16 to
# 256. Returns
# `o = softmax(q·kᵀ / √D) · v` over the last two dimensions, `(B, H, N, D)` in `q`'s dtype, and `lse (B, H, N)`
# float32, each row's natural log-sum-exp of the scaled scores. Causal: query `i` sees keys `j ≤ i`. **One**
# Triton kernel, a program per (block of `BLOCK_M` queries, batch × head): `grid = (cdiv(N, BLOCK_M), B·H)`,
# running the loop above with `m`, `l` and `acc` in float32; `input_precision="ieee"` for float32.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# It is your `flash_attention_torch`, one program per query block: the body of its outer loop becomes the
# kernel, its inner loop stays a loop. `m`, `l` and `acc` live in registers, in float32.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# From the program ids, the (batch, head) offsets through the strides; load the query block once (rows past
# `N` masked); loop over the keys: load `K` as a `(HEAD_DIM, BLOCK_N)` tile (transposed through its strides) and
# `V` as `(BLOCK_N, HEAD_DIM)`, `s = tl.dot(q, k)`, `−inf` at keys past `N_kv` (and above the diagonal), the
# online step; after the loop store `acc / l` and `m + log l`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Round `p` to `v`'s dtype only as the operand of `tl.dot(p, v)`; pass `input_precision="ieee"` for float32.
# `tl.dot` needs both tile sides to be at least 16. Causal: the loop ends at `min(N_kv, (pid_m + 1)·BLOCK_M)`.
# If the result is wrong, the debugging cell after the tests compares your kernel with your
# `flash_attention_torch` block by block and names the first query block that differs.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Work in base 2: `exp2`, with `log2(e)/√D` folded into one constant, and the log-sum-exp converted back to
# natural log at the end. Mask only the tiles that straddle the diagonal or the ragged end of the keys (a
# `tl.constexpr` flag or a second loop). Try `BLOCK_M = 128`, `BLOCK_N = 64`, 4 to 8 warps, 2 or 3 stages.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.flash_attention -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention", "locked": false, "schema_version": 3, "solution": true}
# Helpers your kernel and launcher call (the online-softmax step as a @triton.jit function, the loop over key
# tiles, launch settings, input checks) go here; or write everything inside the two functions below.
### BEGIN SOLUTION
# include: kernels/flash_attention.py (LOG2E, _online_softmax_step, _visible, _key_ranges, _attend,
#     attention_launch_settings, _check_attention_inputs, _check_out)
### END SOLUTION


@triton.jit
def _flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, N_KV,
                            stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_on,
                            qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                            CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One program computes o for BLOCK_M queries of one (batch, head), and their log-sum-exp.

    q (B, H, N, D), k and v (B, H, N_KV, D): strides in elements, any layout; o (B, H, N, D) with contiguous
    rows (stride 1 along D); lse (B, H, N) float32 contiguous. qk_scale = log2(e) / sqrt(D): scores are kept in
    base 2. Grid (cdiv(N, BLOCK_M), B * H)."""
    # block_m, bh = tl.program_id(0), tl.program_id(1)
    # ...  # pointers: this head's q rows (load once), K as a (HEAD_DIM, BLOCK_N) tile, V as (BLOCK_N, HEAD_DIM)
    # m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    # l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    # acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # for start in range(0, ..., BLOCK_N):  # causal: stop at the diagonal
    #     ...  # s = tl.dot(q, k), -inf where masked; then the online step, in base 2:
    #     ...  # m_new = max(m_i, rowmax(s) * qk_scale); p = tl.math.exp2(s * qk_scale - m_new[:, None])
    #     ...  # alpha = tl.math.exp2(m_i - m_new); l_i = l_i * alpha + rowsum(p); acc = acc * alpha + p @ v
    # ...  # store acc / l_i[:, None] and the log-sum-exp (natural log: divide a base-2 one by log2(e))
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention.py (_flash_attention_kernel)
    ### END SOLUTION


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    out: torch.Tensor | None = None):
    """(o, lse): o = softmax(q kᵀ / sqrt(D)) v, (B, H, N, D) in q's dtype; lse (B, H, N) float32.

    q (B, H, N, D), k and v (B, H, N_kv, D): fp32, fp16 or bf16, any strides; D a power of two, 16...256. out: None (as the
    grader calls it), or a (B, H, N, D) tensor with contiguous rows to write o into (notebook 07's decoder can
    then skip a copy)."""
    # B, H, N, D = q.shape
    # o = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device) if out is None else out
    # lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    # grid = (triton.cdiv(N, BLOCK_M), B * H)
    # ...  # launch with q, k, v, o strides and qk_scale = 1.4426950408889634 / math.sqrt(D)
    # return o, lse
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention.py (flash_attention)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "flash_attention-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.flash_attention", flash_attention)

# %% nbgrader={"grade": false, "grade_id": "flash_attention-debug", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# Debugging: your Triton kernel against your tiled torch version, one query block at a time. Both run the same
# loop, so the first block whose o or lse differs is where to look (the mask of a ragged block, the diagonal).
DEBUG_BLOCK = 64


def first_differing_block(got, expected, block_m=DEBUG_BLOCK, atol=2e-3, rtol=2e-3):
    """(batch, head, first query, end) of the first block of block_m queries where got and expected differ."""
    bad = (got.double() - expected.double()).abs() > atol + rtol * expected.double().abs()
    bad = (bad | (got.isnan() != expected.isnan())).reshape(*expected.shape[:3], -1).any(dim=-1)
    for b, h in itertools.product(range(bad.shape[0]), range(bad.shape[1])):
        for start in range(0, bad.shape[2], block_m):
            if bool(bad[b, h, start:start + block_m].any()):
                return b, h, start, min(start + block_m, bad.shape[2])
    return None


gen = torch.Generator().manual_seed(1)
for n, n_kv, causal in ((130, 130, True), (100, 77, False), (65, 65, True)):
    q, k, v = (torch.randn(1, 2, m, 64, generator=gen).to(DEVICE) for m in (n, n_kv, n_kv))
    try:
        mine, ref = flash_attention(q, k, v, causal), flash_attention_torch(q, k, v, causal, block_m=DEBUG_BLOCK)
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
        if not not_written(exc):
            raise
        print(f"not written yet ({type(exc).__name__}: {exc}): nothing to compare")
        break
    for name, got, expected in (("o", mine[0], ref[0]), ("lse", mine[1][..., None], ref[1][..., None])):
        where = first_differing_block(got, expected)
        print(f"N={n}, N_kv={n_kv}, causal={causal}, {name}: " + (
            "every block agrees" if where is None else
            f"first differs at batch {where[0]}, head {where[1]}, queries {where[2]}..{where[3] - 1}"))

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_correctness", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("05.flash_attention", flash_attention, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_precision", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("05.flash_attention", flash_attention, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_performance", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("05.flash_attention", flash_attention, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_fusion", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.flash_attention", flash_attention, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "flash_attention-ref", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's reference solution (`kernels/flash_attention.py`) at the timed shape:
# about 0.8 of SDPA's speed on an H100 and an H200 (torch 2.11, triton 3.6), about 20 times faster than the
# naive version at 4096 tokens.

# %% [markdown] nbgrader={"grade": false, "grade_id": "flash_attention_tma-md", "locked": true, "schema_version": 3, "solution": false}
# ### Optional, ungraded, Hopper only: FlashAttention through the TMA copy engine
#
# On Hopper (H100, H200) the same loop can have its `Q`, `K` and `V` tiles moved by the TMA copy engine
# (notebook 04, section 4): a descriptor for each tensor seen as a `(B·H·N, D)` matrix, one request per tile,
# no masks on the loads. If you want to try, write `flash_attention_tma(q, k, v, causal=False)` with
# `flash_attention`'s signature and outputs. Let it fall back to your `flash_attention` where the copy engine
# does not apply (float32, tensors that are not contiguous or not 16-byte aligned, GPUs before Hopper) and for
# sequences shorter than about 2048 tokens, where building the descriptors on the host at every call costs more
# than the engine saves. (The reference falls back for heads of 64 dimensions too: there its portable kernel
# measured 1.15x faster than its TMA one on an H100 and an H200.) A `K` or `V` tile of the 2-d view that reaches past a head's keys holds the next
# head's rows: give those keys `−inf` scores and zero their values (a zero probability does not clear a NaN).
# Two more ideas: with a causal mask, launch the last query blocks first (they have the most tiles to visit),
# and try 128 × 128 tiles before 128 × 64. `kernels.tma` (imported in the cell) has `descriptor`, `tma_ready`,
# `hopper_or_newer` and `first_that_compiles`.
#
# Nothing grades this cell, and no test follows it. The cell runs as it is handed out: until you write the
# function, its stub raises `NotImplementedError` when called, and the measurement below leaves your version
# out (on a GPU it times it once it is written).

# %% nbgrader={"grade": false, "grade_id": "flash_attention_tma", "locked": false, "schema_version": 3, "solution": true}
# Optional (Hopper, ungraded). Your TMA kernel, its settings and its launch go here.
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer, tma_ready

### BEGIN SOLUTION
# include: kernels/flash_attention.py (_attend_tma, _flash_attention_tma_kernel, ATTENTION_TMA_SETTINGS,
#     _launch_attention_tma)
### END SOLUTION


def flash_attention_tma(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        settings: tuple | None = None):
    """(o, lse) as flash_attention returns them, with the Q, K and V tiles moved by the TMA engine on Hopper;
    flash_attention(q, k, v, causal) itself where the engine does not apply. settings: the launch settings to
    try in order (None: your own list)."""
    # 1. check the inputs as flash_attention does
    # 2. where the engine does not apply (float32, tensors not contiguous or not tma_ready, a GPU before Hopper:
    #    hopper_or_newer(q.device)) or the sequence is shorter than about 2048, return flash_attention(...)
    # 3. o and lse; descriptors of q, k and v seen as (B·H·N, D) matrices; launch, trying the settings in order
    #    (first_that_compiles); return o, lse
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention.py (flash_attention_tma)
    ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your FlashAttention against the model
#
# The cell below measures, over sequence lengths, the memory each call allocates and the time of naive
# attention (`attention_naive` from `autograder.specs.streaming_reduction_fusion`: `S` and `P` in memory), PyTorch's
# `scaled_dot_product_attention` (SDPA, which dispatches to a FlashAttention kernel of its own on recent GPUs:
# shown as SDPA picks, and with its cuDNN and FlashAttention-2 backends forced, so that you see where your kernel
# stands against each; a backend your GPU or PyTorch build lacks is named and left out) and your
# `flash_attention`, causal and not; on a GPU your `flash_attention_tma` too, if you wrote it. Naive
# attention is skipped where it would not fit in the GPU's free memory. The time model: the flops at this GPU's
# measured matmul rate, and for the naive version also one write and one read each of `S` and `P` at copy
# bandwidth (4 passes, a floor for any version that materialises them). The causal model is the share of key
# tiles a kernel visits when it skips the tiles above the diagonal, counted with 128-query blocks and 64-key
# tiles (32 × 32 in float32); other tile sizes move it a little. Without a GPU the memory part runs in the
# interpreter at small sizes (one batch, two heads, `D = 64`, float32).

# %% nbgrader={"grade": false, "grade_id": "attention-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
ATT_B, ATT_H, ATT_D = sizes.ATTENTION_BHD if ON_GPU else (1, 2, 64)
ATT_NS = runtime.demo_points(list(sizes.ATTENTION_LENGTHS) if ON_GPU else [64, 128, 256, 512])
ATT_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
ATT_E = ATT_DTYPE.itemsize
ATT_TILES = (128, 64) if ATT_DTYPE != torch.float32 else (32, 32)  # (query block, key tile) the causal model counts


def n_scores(n):
    return ATT_B * ATT_H * n * n


def att_flops(n, causal=False):
    return 4 * ATT_B * ATT_H * n * n * ATT_D // (2 if causal else 1)


def causal_share(n, block_m=ATT_TILES[0], block_n=ATT_TILES[1]):
    """The share of key tiles a causal kernel visits: query block i reads the tiles up to its diagonal."""
    q_blocks, kv_tiles = math.ceil(n / block_m), math.ceil(n / block_n)
    seen = sum(math.ceil(min((i + 1) * block_m, n) / block_n) for i in range(q_blocks))
    return seen / (q_blocks * kv_tiles)


ATT_VERSIONS = {"naive (S and P in memory)": streaming_reduction_fusion.attention_naive,
                "your flash_attention": lambda q, k, v, causal: flash_attention(q, k, v, causal)}
if ON_GPU:  # yours through the copy engine, if you wrote it (the optional exercise)
    ATT_VERSIONS["your flash_attention_tma"] = lambda q, k, v, causal: flash_attention_tma(q, k, v, causal)
    ATT_VERSIONS["SDPA"] = lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ATT_VERSIONS.update({name: streaming_reduction_fusion.sdpa_with_backend(be) for name, be in streaming_reduction_fusion.SDPA_BACKENDS.items()})
att_mem = {name: [] for name in ATT_VERSIONS}
att_ms = {}  # "version" or "version, causal" -> ms at each N (NaN where not run)
not_yet = set()  # versions whose exercise is not written
for n in tqdm(ATT_NS, desc="attention over sequence lengths"):
    q, k, v = (torch.randn(ATT_B, ATT_H, n, ATT_D, device=DEVICE, dtype=ATT_DTYPE) for _ in range(3))
    naive_fits = runtime.fits(sizes.naive_attention_bytes(n, ATT_B, ATT_H), share=sizes.NAIVE_SHARE)
    runnable = {name: f for name, f in ATT_VERSIONS.items()
                if (naive_fits or not name.startswith("naive")) and name not in not_yet}
    for name in ATT_VERSIONS:
        try:
            used = extra_bytes(lambda: runnable[name](q, k, v, False)) if name in runnable else math.nan
        except torch.cuda.OutOfMemoryError:  # the estimate was too hopeful: leave it out at this length
            used = math.nan
            runnable.pop(name)
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001  only an exercise not written yet (or a backend missing) is left out
            if not not_written(exc):
                raise
            why = exc if isinstance(exc, runtime.NotTimedHere) else f"its exercise is not written yet ({exc!r})"
            print(f"{name}: left out, {why}")
            used = math.nan
            runnable.pop(name)
            not_yet.add(name)
        att_mem[name].append(used)
    if ON_GPU:
        calls = {name: (lambda f=f: f(q, k, v, False)) for name, f in runnable.items()}
        causal_calls = {f"{name}, causal": (lambda f=f: f(q, k, v, True)) for name, f in ATT_VERSIONS.items()
                        if not name.startswith("naive") and name not in not_yet}
        times = timed_in_turns(calls | causal_calls, desc=f"N = {n}")
        for name in [version for version in ATT_VERSIONS if version not in not_yet] + list(causal_calls):
            att_ms.setdefault(name, []).append(times.get(name, math.nan))
        torch.cuda.empty_cache()
    del q, k, v
att_mem = {name: vals for name, vals in att_mem.items() if name not in not_yet}
att_ms = {name: vals for name, vals in att_ms.items() if not all(map(math.isnan, vals))}

ns = np.array(ATT_NS, dtype=float)
model_naive_mem = 2 * ATT_E * ATT_B * ATT_H * ns**2  # S and P at once, in the inputs' dtype: the floor
model_flash_mem = ATT_B * ATT_H * ns * (ATT_D * ATT_E + 4)  # o and the float32 log-sum-exp
model_flash_ms = [1e3 * att_flops(n) / (peak_tflops * 1e12) for n in ATT_NS]
try:
    predicted_attention_bytes(1, 1, 1, 16, 2)
    attention_bytes = predicted_attention_bytes
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"predicted_attention_bytes is not written yet ({type(exc).__name__}): the naive model line uses the "
          "course's own count until you write it and run this cell again")
    attention_bytes = streaming_reduction_fusion.attention_traffic_reference
# Naive: the flops, plus the bytes it moves beyond FlashAttention's (the passes over S and P), at copy bandwidth.
model_naive_ms = [f + 1e3 * (lambda nf: nf[0] - nf[1])(attention_bytes(ATT_B, ATT_H, n, ATT_D, ATT_E)) / (bw_gbps * 1e9)
                  for f, n in zip(model_flash_ms, ATT_NS)]

fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(16, 4.4))
ax.loglog(ns, model_naive_mem / 2**20, "k--", label="model: S and P (2·N² per head)")
ax.loglog(ns, model_flash_mem / 2**20, "k:", label="model: o and lse (O(N))")
for (name, vals), style in zip(att_mem.items(), itertools.cycle(("x-", "o-", "^-", "s-", "d-", "v-"))):
    ax.loglog(ns, np.array(vals) / 2**20, style, label=name)
ax.set_xlabel("sequence length N")
ax.set_ylabel("MiB allocated by one call")
ax.set_title(f"memory, ({ATT_B}, {ATT_H}, N, {ATT_D}) {str(ATT_DTYPE).replace('torch.', '')}"
             + ("" if ON_GPU else "\n(interpreter: allocations added up)"))
bx.loglog(ns, model_flash_ms, "k:", label="model: flops / matmul peak")
bx.loglog(ns, model_naive_ms, "k--", label="your prediction: + the naive version's extra bytes")
for (name, vals), style in zip(att_ms.items(), itertools.cycle(("x-", "o-", "^-", "s-", "d-", "v-", "o--", "^--",
                                                                "s--", "d--", "v--"))):
    bx.loglog(ns, vals, style, label=name)
bx.set_xlabel("sequence length N")
bx.set_ylabel("ms")
bx.set_title(f"time, {peak_label}" + ("" if ON_GPU else "\nmodel only, no GPU here"))
cx.semilogx(ns, [causal_share(n) for n in ATT_NS], "k--",
            label=f"model: share of key tiles visited ({ATT_TILES[0]} x {ATT_TILES[1]} tiles)")
for name in ("your flash_attention", "your flash_attention_tma", "SDPA", *streaming_reduction_fusion.SDPA_BACKENDS):
    if name in att_ms and f"{name}, causal" in att_ms:
        cx.semilogx(ns, np.array(att_ms[f"{name}, causal"]) / np.array(att_ms[name]), "o-", label=name)
cx.axhline(0.5, color="gray", lw=1)
cx.set_ylim(0, 1.05)
cx.set_xlabel("sequence length N")
cx.set_ylabel("causal time / full time")
cx.set_title("what the causal mask saves" + ("" if ON_GPU else " (model only)"))
for a in (ax, bx, cx):
    a.set_xticks(ATT_NS, [str(n) for n in ATT_NS])
    a.minorticks_off()
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, n in enumerate(ATT_NS):
    mem = ", ".join(f"{name} {vals[i] / 2**20:.4g}" for name, vals in att_mem.items())
    line = (f"N={n:<6} MiB: {mem} (model: S and P {model_naive_mem[i] / 2**20:.4g}, "
            f"o and lse {model_flash_mem[i] / 2**20:.4g})")
    if ON_GPU:
        line += "\n         ms: " + ", ".join(f"{name} {vals[i]:.3f}" for name, vals in att_ms.items())
        line += f" (model: {model_flash_ms[i]:.3f} at the matmul peak)"
    print(line)
if not ON_GPU:
    print("No GPU: time was not measured; memory was counted in the interpreter at the small sizes above.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for (figures quoted from the course's reference solution on an H200 and an H100, which agree
# closely here). Memory: the naive version on a line of slope 2 (doubling `N` quadruples it), 2.5 times the
# model's floor: at its peak it holds `S` in bf16, a float32 copy and the float32 softmax, 10 bytes a score,
# 40 GiB at `N = 8192`; at 16384 it would need 160 GiB and is skipped. A FlashAttention kernel that allocates
# only its outputs sits exactly on its `O(N)` line (`o` and `lse`, 130 MiB at 8192), SDPA just below it (it
# returns no `lse`). Time: SDPA at 1.1 to 1.15 times the flops line from `N = 4096` on, the reference kernel at
# about 0.8 of SDPA's speed, naive attention about 7 times above its own model line and about 20 times slower
# than the reference kernel at 4096. The reference's TMA variant is within a few percent of its portable kernel
# from 2048 on (below that it is the portable kernel: building its descriptors on the host would take longer
# than the kernel itself). The causal ratio falls towards one half as `N` grows (0.62 at 4096, 0.52 at 16384
# for the portable kernel), above the tile count at moderate lengths: the query blocks near the end of the
# sequence have the most tiles and finish last, and the TMA kernel, which launches them first, gets closer to
# the model (0.56, then 0.50). At 512 and 1024 tokens every version is launch- and latency-bound, and the mask
# saves little. A causal ratio near 1 for your kernel means it computes and masks the tiles above the diagonal
# instead of skipping them.
#
# **What SDPA's kernels add on Hopper.** On an H100 or H200, SDPA runs cuDNN's attention or a FlashAttention-3
# kernel, built on four things a first Triton kernel does not do. *Asynchronous TMA loads*: the copy engine
# (notebook 04, section 4) moves the next `K` and `V` tiles into shared memory while the multiprocessor computes.
# *wgmma*: Hopper's warp-group matrix instruction runs asynchronously, so a tile's product proceeds while other
# instructions issue. *Warp specialisation*: a producer warp group only issues loads, consumer warp groups only
# compute, and with *ping-pong* two consumer groups take turns, one in its softmax (the exponential units) while
# the other keeps the tensor cores busy. *Persistent scheduling*: one program per multiprocessor loops over
# tiles, the longest causal query blocks first. Triton reaches part of this by itself (`num_stages` pipelines
# loads; recent versions can specialise warps); optional notebook 08 measures each step.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-attention-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 3.** At `N = 4096` your kernel (or the reference, at about 0.8) is slower than SDPA, though both
# do the same flops and neither writes `S`. Name two of the techniques above that SDPA's kernel uses and yours
# does not, say what each overlaps or saves, and which measurement above would show it.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-sdpa-gap", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Both are compute-bound, so the gap is how busy each keeps the tensor cores. SDPA's kernels use TMA loads and
# warp specialisation: a producer warp group loads the next `K`/`V` tiles while consumers compute, so loads
# overlap the products; and ping-pong of two consumer groups overlaps one group's softmax with the other's
# `wgmma` products. A first Triton kernel issues loads, softmax and products in turn. Both show in the time
# panel, as SDPA nearer the flops line at every length. Persistent scheduling, longest causal blocks first,
# shows in the third panel: SDPA's causal ratio closer to 0.5.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-causal-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 4.** A causal mask removes half the scores, yet at 512 or 1024 tokens the causal run is barely
# faster than the full one. Why, and why does the ratio approach one half only at long sequences?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-causal", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# At short lengths each call takes a few tens of µs and is dominated by launch and latency: too few programs
# to fill 132 SMs, each with only a handful of key tiles, so skipping some saves little. The skipped share
# also starts below one half: the diagonal tiles are visited (and masked) anyway, a larger share when there
# are few tiles per row. As `N` grows the diagonal's share shrinks and the work, and so the time, tends to
# half, except that the last query blocks, with the most tiles, finish last.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. The same pattern beyond attention: cross-entropy without the logits
#
# A language model's last layer turns hidden states `h (M, K)` into logits `h·Wᵀ (M, V)` over a vocabulary of
# `V` words, and training takes the cross-entropy of each row against its target word `t`:
# `loss_i = logsumexp_v(z_iv) − z_{i,t_i}` with `z = h·Wᵀ`. The loss is one number a row, yet PyTorch computes
# it from the whole logits matrix: 8192 tokens × 128256 words (Llama 3's vocabulary) is 2 GiB in bf16, 4 GiB
# once cast to float32 for the loss, and `F.cross_entropy` adds its own float32 log-softmax. Several GiB of
# temporaries for a vector of 8192 numbers, more than the rest of the model's activations at that size.
#
# A log-sum-exp over a row produced tile by tile is the online softmax's `(m, s)` again. The fused version
# you will write has two kernels:
#
# 1. **tile statistics**: a program computes one `BLOCK_M × BLOCK_V` tile of logits with notebook 04's GEMM
#    (`grouped_tile`, `tile_dot`, the float32 accumulator). In its epilogue, instead of storing the tile, it
#    reduces each row to `(max, Σ exp(z − max))` over its `BLOCK_V` words, and picks out the target's logit if
#    the target falls in this tile. It writes two floats per row and tile.
# 2. **combine**: a program per row merges that row's `V / BLOCK_V` pairs with the rule of section 2 and writes
#    `m + log s − z_target`.
#
# ![](figures/vocab_tile_cross_entropy.svg)
#
# Why not one kernel whose programs loop over the whole vocabulary, as FlashAttention loops over keys? With
# 8192 rows in blocks of 128 there would be only 64 programs for 132 multiprocessors, each looping over 128256
# words. Splitting `V` over programs gives thousands of tiles; the price is a small array of partial pairs,
# `2·M·V / BLOCK_V` floats (about 31 MiB here, against 4 GiB of float32 logits), and a second tiny launch.
# The merge being associative is what makes the split free.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.linear_cross_entropy · cross-entropy without the logits (about 90 min · ★★★)
#
# **Spec.** `linear_cross_entropy(h, w, targets) -> loss`, the per-row loss
# `logsumexp(h·wᵀ) − (h·wᵀ)[target]`, float32 of shape `(M,)`, for `h (M, K)`, `w (V, K)` (an `nn.Linear`
# weight: the product reads it transposed, so swap its strides), both fp32, fp16 or bf16, and integer
# `targets (M,)` (int64 or int32), without ever holding the `M × V` logits: a kernel over `BLOCK_M × BLOCK_V`
# logit tiles writes each row's tile max, sum of `exp(z − max)` and (from the one tile that holds it) the
# target's logit; a second kernel (or a loop) merges each row's pairs with the online rule, in float32.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Notebook 04's GEMM computes a tile of logits; its epilogue reduces the tile instead of storing it. Each row of
# a tile becomes one `(max, sum)` pair, and the online rule merges a row's pairs in any order.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Kernel 1: `grouped_tile` gives the tile, `tile_dot` its float32 logits `(BLOCK_M, BLOCK_V)` (both imported
# above); `−inf` at columns past `V`; each row's max and `Σ exp(z − max)` go to `part_m`, `part_s[row, pid_v]`;
# where a row's target falls in this tile's columns, its logit goes to `tgt[row]`
# (`tl.sum(tl.where(cols == t[:, None], z, 0.0), 1)`). Kernel 2: per row, merge the `n_vtiles` pairs and write
# `m + log s − tgt`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `w` is `(V, K)` and the product needs `wᵀ`: hand `tile_dot` `w`'s strides swapped. Load the targets as they
# come (int32 or int64) and compare them with the columns as integers. Mask the stores of rows past `M`. Keep
# the logits in float32 from the accumulator on: rounding them to the inputs' dtype costs precision the grader
# sees.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Tiles of 128 × 256 in bf16, a grouped launch order (`GROUP_M = 8`) so that the `w` tiles are reused from L2;
# on Hopper, the optional TMA version below.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.linear_cross_entropy -->

# %% nbgrader={"grade": false, "grade_id": "linear_cross_entropy", "locked": false, "schema_version": 3, "solution": true}
# Helpers your kernels and launcher call (the tile's statistics as a @triton.jit function, launch settings,
# input checks, the combine's launch) go here; or write everything inside the three functions below.
### BEGIN SOLUTION
# include: kernels/linear_cross_entropy.py (_tile_stats, ce_launch_settings, _check_inputs, _combine)
### END SOLUTION


@triton.jit
def _logit_tile_stats_kernel(h_ptr, w_ptr, t_ptr, part_m_ptr, part_s_ptr, tgt_ptr, M, V, K, stride_hm, stride_hk,
                             stride_wv, stride_wk, n_vtiles, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    """One program reduces one BLOCK_M x BLOCK_V tile of logits z = h wᵀ, never storing it.

    h (M, K), w (V, K), any strides; t (M,) integer targets. part_m, part_s (M, n_vtiles) float32: the tile's
    per-row max and sum of exp(z - max); tgt (M,) float32: the target's logit."""
    # pid_m, pid_v = grouped_tile(tl.program_id(0), M, V, BLOCK_M, BLOCK_V, GROUP_M)
    # ...  # rm, rv; logits = tile_dot(h_ptr, w_ptr, rm, rv, ..., stride_wk, stride_wv, ...)  # w read as wᵀ
    # ...  # per row: the tile's max and sum of exp(logit - max) -> part_m, part_s[row, pid_v];
    # ...  # the target's logit -> tgt[row], from the one tile that holds it
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy.py (_logit_tile_stats_kernel)
    ### END SOLUTION


@triton.jit
def _combine_kernel(part_m_ptr, part_s_ptr, tgt_ptr, loss_ptr, M, n_vtiles, BLOCK_T: tl.constexpr):
    # One row: fold its tiles' (max, sum) pairs into the log-sum-exp, online, BLOCK_T tiles at a time.
    """One program per row: loss[row] = logsumexp over the row's n_vtiles pairs - tgt[row], float32."""
    # ...  # merge the row's (max, sum) pairs online; loss = max + log(sum) - the target's logit
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy.py (_combine_kernel)
    ### END SOLUTION


def linear_cross_entropy(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """loss (M,) float32 = logsumexp(h wᵀ) - (h wᵀ)[target] per row, without the (M, V) logits.

    h (M, K), w (V, K): fp32, fp16 or bf16, any strides; targets (M,) int64 or int32."""
    # ...  # allocate loss (M,) and the partials (M, n_vtiles) in float32; launch both kernels
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy.py (linear_cross_entropy)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "linear_cross_entropy-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.linear_cross_entropy", linear_cross_entropy)

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("05.linear_cross_entropy", linear_cross_entropy, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.linear_cross_entropy", linear_cross_entropy, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_memory", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("05.linear_cross_entropy", linear_cross_entropy, criteria=["memory"]).assert_passed("memory")

# %% [markdown] nbgrader={"grade": false, "grade_id": "linear_cross_entropy_tma-md", "locked": true, "schema_version": 3, "solution": false}
# ### Optional, ungraded, Hopper only: the tile statistics from the persistent TMA GEMM
#
# On Hopper the tile-statistics kernel can be notebook 04's persistent TMA GEMM instead of the pointer GEMM:
# one program per multiprocessor looping over the logit tiles, `h` and `w` tiles moved by the copy engine, the
# same epilogue (each row's tile max and sum, the target's logit) and the same combine. If you want to try,
# write `linear_cross_entropy_tma(h, w, targets)` with `linear_cross_entropy`'s signature and result. Let it
# fall back to your `linear_cross_entropy` where the copy engine does not apply (float32, decode-sized batches
# of 256 rows or fewer, tensors that are not row-major or not 16-byte aligned, GPUs before Hopper). `w (V, K)`
# is row-major, so its descriptor gives `(BLOCK_V, BLOCK_K)` tiles, read transposed by `tl.dot`. `kernels.tma`
# (imported in the cell) has `descriptor`, `tma_ready`, `hopper_or_newer`, `persistent_programs` and
# `first_that_compiles`.
#
# Nothing grades this cell, and no test follows it. The cell runs as it is handed out: until you write the
# function, its stub raises `NotImplementedError` when called, and the measurement below leaves your version
# out (on a GPU it times it once it is written).

# %% nbgrader={"grade": false, "grade_id": "linear_cross_entropy_tma", "locked": false, "schema_version": 3, "solution": true}
# Optional (Hopper, ungraded). Your persistent TMA kernel, its settings and its launch go here.
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer, persistent_programs, tma_ready

### BEGIN SOLUTION
# include: kernels/linear_cross_entropy.py (_logit_stats_tma_kernel, CE_TMA_SETTINGS, _launch_ce_tma)
### END SOLUTION


def linear_cross_entropy_tma(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor,
                             settings: tuple | None = None) -> torch.Tensor:
    """loss (M,) float32 as linear_cross_entropy returns it, with the tile statistics from a persistent GEMM
    whose h and w tiles the TMA engine moves on Hopper; linear_cross_entropy(h, w, targets) itself where the
    engine does not apply. settings: the launch settings to try in order (None: your own list)."""
    # 1. where the engine does not apply (float32, 256 rows or fewer, h or w not tma_ready, a GPU before
    #    Hopper: hopper_or_newer(h.device)), return linear_cross_entropy(h, w, targets)
    # 2. check the inputs as linear_cross_entropy does
    # 3. the partials and the targets' logits; descriptors of h (BLOCK_M, BLOCK_K) and w (BLOCK_V, BLOCK_K);
    #    persistent_programs(...) programs; launch, trying the settings in order (first_that_compiles)
    # 4. the same combine as linear_cross_entropy; return the loss
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy.py (linear_cross_entropy_tma)
    ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your fused cross-entropy against the model
#
# The cell measures the memory one call allocates (outputs included) against `V` for eager PyTorch and your
# `linear_cross_entropy`, with the float32 logits' size and the fused model (`partials + targets' logits +
# loss`, counted with tiles 256 words wide, 128 in float32: a kernel with narrower tiles writes more partials).
# On a GPU it also times the largest `V` against the model: the product `2·M·V·K` at the matmul peak for the
# fused versions, plus roughly 16 bytes per logit of extra passes for eager (write the bf16 logits, cast them
# to float32, the log-softmax's read and write). `torch.compile` is measured there too, and so is your
# `linear_cross_entropy_tma` if you wrote it.

# %% nbgrader={"grade": false, "grade_id": "ce-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
CE_M, CE_K = sizes.CE_MK if ON_GPU else (64, 64)
CE_VS = runtime.demo_points(list(sizes.CE_VOCABS) if ON_GPU else [1024, 4096, 16384])
CE_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
EAGER_BYTES_PER_LOGIT = sizes.EAGER_BYTES_PER_LOGIT  # eager's peak beyond its inputs: 7.8 GiB at V = 128256
fitting = [v for v in CE_VS
           if runtime.fits(sizes.eager_cross_entropy_bytes(v, CE_M, CE_K), share=sizes.CE_SHARE)] or CE_VS[:1]
if fitting != CE_VS:
    print(f"V = {', '.join(str(v) for v in CE_VS if v not in fitting)} left out: eager PyTorch's logits would not "
          f"fit in this GPU's free memory ({runtime.free_gpu_bytes() / 2**30:.1f} GiB)")
CE_VS = fitting
CE_BLOCK_V = 256 if CE_DTYPE.itemsize == 2 else 128  # the tile width in V the model counts partials with
YOURS = "your linear_cross_entropy"


def ce_model_bytes(v):
    """What a fused version allocates: a (max, sum) pair per row and tile, the targets' logits, the loss."""
    return 4 * (2 * CE_M * math.ceil(v / CE_BLOCK_V) + 2 * CE_M)


h = torch.randn(CE_M, CE_K, device=DEVICE, dtype=CE_DTYPE)
ce_mem = {"eager (logits in memory)": [], YOURS: []}
for v in tqdm(CE_VS, desc="cross-entropy memory over vocabulary sizes"):
    w = (torch.randn(v, CE_K, device=DEVICE) / CE_K**0.5).to(CE_DTYPE)
    targets = torch.randint(0, v, (CE_M,), device=DEVICE)
    ce_mem["eager (logits in memory)"].append(extra_bytes(lambda: streaming_reduction_fusion.linear_cross_entropy_eager(h, w, targets)))
    if YOURS not in ce_mem:
        continue
    try:
        loss = linear_cross_entropy(h, w, targets)  # first call: compilation stays out of the count
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"{YOURS}: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
        del ce_mem[YOURS]
        continue
    diff = (loss - streaming_reduction_fusion.linear_cross_entropy_eager(h.float(), w.float(), targets)).abs().max()
    print(f"V={v}: your loss against eager PyTorch in float32, largest difference {float(diff):.2e}")
    ce_mem[YOURS].append(extra_bytes(lambda: linear_cross_entropy(h, w, targets)))

ce_ms = {}
gemm_ms = 1e3 * 2 * CE_M * CE_VS[-1] * CE_K / (peak_tflops * 1e12)
ce_model_ms = {"eager": gemm_ms + 1e3 * 16 * CE_M * CE_VS[-1] / (bw_gbps * 1e9), YOURS: gemm_ms,
               "your linear_cross_entropy_tma": gemm_ms, "cuBLAS logits alone": gemm_ms}
if ON_GPU:
    compiled_ce = runtime.demo_compile(streaming_reduction_fusion.linear_cross_entropy_eager, dynamic=False)
    calls = {"cuBLAS logits alone": lambda: h @ w.t(),
             "eager": lambda: streaming_reduction_fusion.linear_cross_entropy_eager(h, w, targets),
             "torch.compile": lambda: compiled_ce(h, w, targets),
             YOURS: lambda: linear_cross_entropy(h, w, targets),
             "your linear_cross_entropy_tma": lambda: linear_cross_entropy_tma(h, w, targets)}
    ce_ms = timed_in_turns(calls, desc=f"cross-entropy, V = {CE_VS[-1]}", rep=100)
    ce_mem_last = {name: extra_bytes(calls[name]) for name in ce_ms}

vs = np.array(CE_VS, dtype=float)
fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.4))
ax.loglog(vs, 4 * CE_M * vs / 2**20, "k--", label="the float32 logits (4·M·V bytes)")
ax.loglog(vs, [ce_model_bytes(v) / 2**20 for v in CE_VS], "k:",
          label=f"model: fused (partials of {CE_BLOCK_V}-word tiles, targets, loss)")
for (name, vals), style in zip(ce_mem.items(), ("x-", "o-")):
    ax.loglog(vs, np.array(vals) / 2**20, style, label=name)
ax.set_xticks(CE_VS, [str(v) for v in CE_VS])
ax.minorticks_off()
ax.set_xlabel("vocabulary size V")
ax.set_ylabel("MiB allocated by one call")
ax.set_title(f"memory, M = {CE_M}, K = {CE_K}, {str(CE_DTYPE).replace('torch.', '')}"
             + ("" if ON_GPU else "\n(interpreter: allocations added up)"))
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
names = list(ce_ms) if ON_GPU else list(ce_model_ms)
bx.barh(names, [ce_ms.get(n, 0) for n in names], color="C0", label="measured")
labelled = False
for i, n in enumerate(names):
    if n in ce_model_ms:
        bx.plot([ce_model_ms[n]] * 2, [i - 0.4, i + 0.4], "k--", lw=2,
                label=None if labelled else "model: the product at the matmul peak (+ passes over the logits)")
        labelled = True
bx.set_xlabel(f"ms (M = {CE_M}, K = {CE_K}, V = {CE_VS[-1]})")
bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
bx.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, v in enumerate(CE_VS):
    yours = f"yours {ce_mem[YOURS][i] / 2**20:7.2f} MiB" if YOURS in ce_mem else "yours not written yet"
    print(f"V={v:<7} eager {ce_mem['eager (logits in memory)'][i] / 2**20:9.1f} MiB, {yours} "
          f"(model {ce_model_bytes(v) / 2**20:.2f}); float32 logits {4 * CE_M * v / 2**20:.1f} MiB")
if ON_GPU:
    print(f"\nV={CE_VS[-1]}, time and memory of one call:")
    for name in names:
        model = f" (model {ce_model_ms[name]:.2f} ms)" if name in ce_model_ms else ""
        print(f"{name:<30} {ce_ms[name]:7.2f} ms = {2 * CE_M * CE_VS[-1] * CE_K / (ce_ms[name] * 1e9):5.0f} "
              f"TFLOP/s, {ce_mem_last[name] / 2**30:6.2f} GiB allocated{model}")
else:
    print("No GPU: time was not measured; memory was counted in the interpreter at the small sizes above.")
del h, w, targets

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for (figures quoted from the course's reference solution on an H200 and an H100). Eager's
# memory grows with `V` at twice the float32 logits (the float32 copy and the log-softmax alive together):
# 7.8 GiB at `V = 128256`. A fused kernel's sits on its model's line, `2 / BLOCK_V` of the float32 logits: the
# reference's 31 MiB, 250 times less. `torch.compile` fuses the cast and the log-softmax but still holds the
# 2 GiB of bf16 logits the matrix product writes; only a kernel that reduces each tile in the product's
# epilogue avoids them. In time, a portable fused kernel costs what its GEMM costs (notebook 04's pointer
# kernel runs at 75 to 80% of cuBLAS: the reference takes 1.3 to 1.4 times the bare product here). The
# reference's TMA variant, about 1.1 times the bare product, is on par with `torch.compile` (a few percent
# either way) and 1.3 to 1.45 times faster than eager, with 60 times less memory than the one and 250 times
# less than the other.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-ce-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 5.** `torch.compile` fuses the cast and the log-softmax of the eager cross-entropy, and in the
# measurement above runs about as fast as a fused kernel, yet it allocates far more. What does it still
# hold, and why can it not avoid it?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-ce-compile", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# It still writes the logits: the matrix product is a cuBLAS call (an extern kernel for Inductor), whose
# output, `M × V` in bf16 (2 GiB at 8192 × 128256), must exist before the fused reduction reads it. Inductor
# does not fuse a reduction into a library GEMM's epilogue; only a kernel that computes each logit tile and
# reduces it before storing, as yours does, never holds them.

# %% [markdown] nbgrader={"grade": false, "grade_id": "sparse-md", "locked": true, "schema_version": 3, "solution": false}
# ## 6. A max instead of a softmax: a sparse retrieval head
#
# Learned sparse retrievers (SPLADE and its fused descendants) describe a passage by one weight per word of the
# vocabulary. The encoder's hidden states `h (B, S, H)` go through its masked-language-model head, logits
# `z = h Wᵀ + b` over `V = 30522` words for every token, and each word keeps its strongest evidence in the
# passage:
#
# `weights[b, v] = max over the real tokens s of log(1 + relu(z[b, s, v]))`
#
# Written as it reads, PyTorch stores `z` (`B × S × V`: 16 passages of 512 tokens make 1 GB in float32), then
# reads and writes it again for the activation, the mask and the max. It is section 5's pattern with a simpler
# reduction: stream vocabulary tiles through the GEMM and reduce each tile of logits before it is stored. One
# observation makes it simpler still: `log(1 + relu(z))` never decreases as `z` grows, so **the max can be taken
# on `z` itself** and the activation applied once per `(b, v)` at the end. A program holding one vocabulary tile
# for one passage keeps a running max per word in registers while it walks the passage's tokens, block by
# block; nothing of size `S × V` ever reaches HBM. The product's `2·B·S·H·V` flops stay: the fused head is a
# GEMM with a reduction for an epilogue, and its time is the GEMM's.

# %% [markdown] nbgrader={"grade": false, "grade_id": "sparse-predict-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.predict_sparse_head_bytes · what the head stores (about 5 min · ★☆☆)
#
# **Spec.** Before writing the kernel, count what is at stake. `predicted_sparse_head_bytes(b, s, v)` returns a
# pair: the bytes of the float32 logits an unfused head stores for `b` passages of `s` tokens over `v` words, and
# the bytes of the float32 weights the fused head writes instead. The measurement after the exercise draws your
# numbers beside what each version allocates.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The logits leave the float32 accumulator, whatever the inputs' dtype; the fused head's output has no
# sequence dimension left.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `return 4 * b * s * v, 4 * b * v` is the form; make sure you see why each factor is there.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.predict_sparse_head_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_sparse_head_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_sparse_head_bytes(b: int, s: int, v: int) -> tuple[int, int]:
    """(bytes of the float32 logits of b passages of s tokens over v words, bytes of the fused head's float32
    (b, v) output)."""
    ### BEGIN SOLUTION
    return 4 * b * s * v, 4 * b * v
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_predict_sparse_head_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("05.predict_sparse_head_bytes", predicted_sparse_head_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "sparse-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 05.sparse_head · a SPLADE head without its logits (about 60 min · ★★★)
#
# **Spec.** `sparse_head(h, w, b, mask) -> weights`, float32 of shape `(B, V)`, with
# `weights[i, v] = max over the tokens s with mask[i, s] of log(1 + relu(h[i, s] · w[v] + b[v]))` and 0 for a
# passage with no token kept. `h (B, S, H)`, `w (V, H)` (an `nn.Linear` weight, read transposed) and `b (V,)` in
# fp32, fp16 or bf16; `mask (B, S)` bool. One launch; no tensor of size `S × V` allocated: one program per
# (vocabulary tile, passage) loops over the passage's tokens in blocks, computes each block's logits with
# `tile_dot`, and folds them into a running max per word.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Since `log(1 + relu(·))` only grows with its argument, `max_s log(1 + relu(z_s)) = log(1 + relu(max_s z_s))`:
# keep the max of the raw logits and apply the activation once, at the store. A masked token must not count:
# give it `−inf` before the max.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `pid = tl.program_id(0)`; the passage is `pid % B`, the word tile `pid // B`. `best = −inf` for the tile's
# words; for each block of `BLOCK_S` tokens: `z = tile_dot(...) + bias`, `z = tl.where(keep[:, None], z, −inf)`
# (keep: the mask loaded as bytes, and the token inside `S`), `best = tl.maximum(best, tl.max(z, axis=0))`.
# Store `tl.log(1.0 + tl.maximum(best, 0.0))`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `tile_dot(h_ptr + passage * stride_hb, w_ptr, rs, rv, S, V, H, stride_hs, stride_hh, stride_wh, stride_wv, ...)`
# reads `w` as `wᵀ` by its swapped strides. A bool tensor reaches Triton as bytes: pass `mask.view(torch.uint8)`
# and compare with 0. The max of an empty passage is `−inf`, and `relu(−inf) = 0`: no special case is needed.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Number the programs so that all passages of one word tile run side by side: its `w` tile then comes from L2
# after the first. Tiles of 64 tokens × 128 words, `BLOCK_H = 64` in 16-bit.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 05.sparse_head -->

# %% nbgrader={"grade": false, "grade_id": "sparse_head", "locked": false, "schema_version": 3, "solution": true}
# Helpers your kernel and launcher call (launch settings, input checks) go here; or write everything inside the
# two functions below.
### BEGIN SOLUTION
# include: kernels/sparse_head.py (sparse_head_settings, _check_head_inputs)
### END SOLUTION


@triton.jit
def _sparse_head_kernel(h_ptr, w_ptr, b_ptr, mask_ptr, out_ptr, B, S, H, V, stride_hb, stride_hs, stride_hh,
                        stride_wv, stride_wh, stride_mb, stride_ms, stride_ob,
                        BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                        PRECISION: tl.constexpr):
    """One program: one passage (pid % B) and BLOCK_V words (pid // B); a running max of their logits over the
    passage's kept tokens, stored as log(1 + relu(max)) in out (B, V) float32."""
    # ...  # which passage, which words; the bias of those words; best = -inf per word
    # ...  # for each block of BLOCK_S tokens: z = tile_dot(...) + bias; -inf where a token is masked or past S;
    # ...  #   best = max(best, max of z over the block's tokens)
    # ...  # store log(1 + relu(best)) for the words inside V
    ### BEGIN SOLUTION
    # include body: kernels/sparse_head.py (_sparse_head_kernel)
    ### END SOLUTION


def sparse_head(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weights (B, V) float32: the masked max over the sequence of log(1 + relu(h @ w.T + b)), one launch.

    h (B, S, H), w (V, H), b (V,): fp32, fp16 or bf16; mask (B, S) bool."""
    # ...  # check the shapes; allocate out (B, V) float32; launch one program per (word tile, passage)
    ### BEGIN SOLUTION
    # include body: kernels/sparse_head.py (sparse_head)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "sparse_head-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("05.sparse_head", sparse_head)

# %% nbgrader={"grade": true, "grade_id": "test_sparse_head_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.sparse_head", sparse_head, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_sparse_head_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.sparse_head", sparse_head, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_sparse_head_memory", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05.sparse_head", sparse_head, criteria=["memory"]).assert_passed("memory")

# %% nbgrader={"grade": true, "grade_id": "test_sparse_head_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05.sparse_head", sparse_head, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_sparse_head_fusion", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("05.sparse_head", sparse_head, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "sparse-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your sparse head against the model
#
# The cell counts the memory one call allocates as the passages grow longer, for the head written as it reads
# and for yours, beside your prediction of the logits' bytes and of the output's. On a GPU it also times, at 16
# passages of 512 tokens over BERT's vocabulary, the bare product (cuBLAS), the unfused head, `torch.compile`'s
# and yours, against the model: the product's flops at the matmul peak.

# %% nbgrader={"grade": false, "grade_id": "sparse-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
from autograder.specs import sparse_head as sparse_torch  # the unfused head and the flop count

SP_B, SP_H, SP_V = (16, 768, 30522) if ON_GPU else (2, 64, 2048)
SP_SEQS = runtime.demo_points([64, 128, 256, 512] if ON_GPU else [8, 32, 128])
SP_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
w_sp = (torch.randn(SP_V, SP_H, device=DEVICE) / SP_H**0.5).to(SP_DTYPE)
b_sp = (0.5 * torch.randn(SP_V, device=DEVICE)).to(SP_DTYPE)
sp_mem = {"unfused head (logits in memory)": [], "your sparse_head": []}
for s in tqdm(SP_SEQS, desc="sparse head memory over passage lengths"):
    h_sp = torch.randn(SP_B, s, SP_H, device=DEVICE).to(SP_DTYPE)
    mask_sp = torch.ones(SP_B, s, dtype=torch.bool, device=DEVICE)
    sp_mem["unfused head (logits in memory)"].append(
        extra_bytes(lambda: sparse_torch.sparse_head_eager(h_sp, w_sp, b_sp, mask_sp)))
    if "your sparse_head" not in sp_mem:
        continue
    try:
        sparse_head(h_sp, w_sp, b_sp, mask_sp)  # first call: compilation stays out of the count
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"your sparse_head: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
        del sp_mem["your sparse_head"]
        continue
    sp_mem["your sparse_head"].append(extra_bytes(lambda: sparse_head(h_sp, w_sp, b_sp, mask_sp)))

try:
    sp_predicted = [predicted_sparse_head_bytes(SP_B, s, SP_V) for s in SP_SEQS]
except Exception as exc:  # noqa: BLE001  the prediction not written yet: the true counts instead
    if not not_written(exc):
        raise
    sp_predicted = None
    print("your prediction is not written yet: the lines below are the model's")
sp_model = [sparse_torch.predicted_sparse_head_bytes_reference(SP_B, s, SP_V) for s in SP_SEQS]
fig, ax = plt.subplots(figsize=(7.5, 4.4))
seqs = np.array(SP_SEQS, dtype=float)
ax.loglog(seqs, [m[0] / 2**20 for m in sp_model], "k--", label="the float32 logits (4·B·S·V bytes)")
ax.loglog(seqs, [m[1] / 2**20 for m in sp_model], "k:", label="the fused head's output (4·B·V bytes)")
if sp_predicted:
    ax.loglog(seqs, [p[0] / 2**20 for p in sp_predicted], "r+", ms=12, label="your prediction: logits")
    ax.loglog(seqs, [p[1] / 2**20 for p in sp_predicted], "rx", ms=9, label="your prediction: fused output")
for (name, vals), style in zip(sp_mem.items(), ("s-", "o-")):
    if vals:
        ax.loglog(seqs[: len(vals)], np.array(vals) / 2**20, style, label=name)
ax.set_xticks(SP_SEQS, [str(s) for s in SP_SEQS])
ax.minorticks_off()
ax.set_xlabel("tokens per passage S")
ax.set_ylabel("MiB allocated by one call")
ax.set_title(f"B = {SP_B}, H = {SP_H}, V = {SP_V}, {str(SP_DTYPE).replace('torch.', '')}"
             + ("" if ON_GPU else "\n(interpreter: allocations added up)"))
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, s in enumerate(SP_SEQS):
    yours = (f"yours {sp_mem['your sparse_head'][i] / 2**20:8.2f} MiB" if len(sp_mem.get("your sparse_head", [])) > i
             else "yours not written yet")
    print(f"S={s:<5} unfused {sp_mem['unfused head (logits in memory)'][i] / 2**20:9.1f} MiB, {yours}; "
          f"model: logits {sp_model[i][0] / 2**20:.1f} MiB, fused output {sp_model[i][1] / 2**20:.2f} MiB")
if ON_GPU:
    compiled_sp = runtime.demo_compile(sparse_torch.sparse_head_eager, dynamic=False)
    calls = {"cuBLAS logits alone": lambda: h_sp @ w_sp.t(),
             "unfused head": lambda: sparse_torch.sparse_head_eager(h_sp, w_sp, b_sp, mask_sp),
             "torch.compile": lambda: compiled_sp(h_sp, w_sp, b_sp, mask_sp),
             "your sparse_head": lambda: sparse_head(h_sp, w_sp, b_sp, mask_sp)}
    sp_ms = timed_in_turns(calls, desc=f"sparse head, S = {SP_SEQS[-1]}", rep=100)
    sp_flops = sparse_torch.sparse_head_flops(h_sp, w_sp)
    print(f"\nS={SP_SEQS[-1]}: model (the product at the matmul peak) {1e3 * sp_flops / (peak_tflops * 1e12):.2f} ms")
    for name, ms in sp_ms.items():
        print(f"{name:<22} {ms:7.2f} ms = {sp_flops / (ms * 1e9):5.0f} TFLOP/s")
else:
    print("No GPU: time was not measured; memory was counted in the interpreter at the small sizes above.")
del h_sp, w_sp, b_sp, mask_sp

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-sparse-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 6.** Your fused head relies on `log(1 + relu(·))` never decreasing. Name an activation for which
# the same trick (take the max of the logits, activate once) would give a wrong answer, and say what the kernel
# would have to keep per word instead.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-sparse-monotone", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Any activation that is not monotone: `z²`, `|z|` or GELU (which dips below zero for negative inputs), say. With
# `z²` the largest weight can come from the most negative logit, so the max of the raw logits picks the wrong
# token. The kernel would then apply the activation to every logit of the block before the max (still in
# registers, still never stored: the fusion survives, only the shortcut does not), or, for `z²` or `|z|`, keep
# both the running max and the running min of the raw logits and activate the two at the end.

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * A reduction over a whole row is a barrier: nothing can be written until the whole row has been read. A
#   row that fits in registers costs one read and one write (`2|x|`, against `8|x|` op by op); a longer one
#   costs a second read (`3|x|`), and one program per row then leaves too few programs to keep HBM busy.
# * The online softmax keeps `(m, s)` and rescales `s` by `exp(m_old − m_new)` when the max grows; the same
#   rule merges partial results in any order, across lanes, loop steps and programs, and rescales a running
#   weighted sum along with `s`.
# * A row short enough for registers can carry more than a softmax: a router's top k and its renormalised
#   weights come from one read of the logits, with a tie rule stated rather than left to `torch.topk`.
# * FlashAttention-2's loop can be written and checked in plain PyTorch first, block by block; the Triton
#   kernel then runs the body of its outer loop in one program.
# * FlashAttention is that rule inside a loop over key tiles: scores and probabilities exist one tile at a time
#   in registers, memory is `O(N)` instead of `O(N²)`, the time is the tensor cores', and a causal mask halves
#   it when the tiles above the diagonal are skipped rather than masked.
# * Any reduction over the output of a matrix product can be fused into the product's epilogue the same way:
#   a cross-entropy over a 128k vocabulary needs per-tile `(max, sum)` pairs, not the logits, and a sparse
#   head's max over the sequence needs one running max per word, taken before a monotone activation.
#
# **Not covered here.** Three streaming kernels that production stacks fuse stay out of this notebook, on purpose:
#
# * **Top-k sampling over the logits.** The router's top k fits in registers because a token has at most a few
#   hundred experts; a sampler chooses among a vocabulary of 100 000 words or more. Fused, each vocabulary tile
#   keeps its own k best logits and the short lists are merged afterwards (the k best of a union are among the k
#   best of its parts, just as partial `(m, s)` pairs merge), then one random draw picks among the survivors. It
#   is section 5's loop with a heavier reduction and no new idea, so it is left to you.
# * **MoE dispatch and the grouped GEMM.** After the router, a mixture-of-experts layer gathers each expert's
#   tokens and runs all the experts' products in one launch over groups of uneven size. That is a sort, a
#   scatter and a scheduler of ragged GEMMs: indexing and load balance rather than an intermediate kept out of
#   HBM, and it only means something inside a mixture-of-experts model, which the course does not train.
# * **Paged attention.** Serving engines store the keys and values of many requests in fixed-size pages and
#   give attention a table of page numbers. The kernel is section 4's with one more indirection in its loads;
#   what it adds is memory management across requests, a serving topic rather than a fusion one.
#
# ## Further reading
#
# * Formal, Piwowarski and Clinchant, *SPLADE: Sparse Lexical and Expansion Model for First Stage Ranking*
#   (2021): https://arxiv.org/abs/2107.05720
# * Milakov and Gimelshein, *Online normalizer calculation for softmax* (2018): https://arxiv.org/abs/1805.02867
# * Dao, Fu, Ermon, Rudra and Ré, *FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness*
#   (2022): https://arxiv.org/abs/2205.14135
# * Dao, *FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning* (2023):
#   https://arxiv.org/abs/2307.08691
# * Shah et al., *FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision* (2024):
#   https://arxiv.org/abs/2407.08608
# * Triton's fused softmax and fused attention tutorials:
#   https://triton-lang.org/main/getting-started/tutorials/02-fused-softmax.html and
#   https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html
# * Liger-Kernel's fused linear cross-entropy: https://github.com/linkedin/Liger-Kernel
# * PyTorch's `scaled_dot_product_attention`:
#   https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html
