# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 07 · Fusion for training: backward kernels, and what to save for them
#
# **About 13-20 h · difficulty ★★★ · prerequisites: notebooks 02 (RMSNorm's backward), 04 (the tiled
# GEMM), 05 (FlashAttention's forward, the linear cross-entropy) and 06 (autograd around your own kernels).**
# This is the course's longest notebook; plan it as four sessions:
#
# 1. sections 1 and the prediction (07.predict_saved): what the backward needs, about 2 hours;
# 2. section 2, FlashAttention's backward (07.predict_backward_flops, 07.flash_attention_backward), 4 to 6 hours;
# 3. section 3, the linear cross-entropy forward and backward (07.predict_logits_bytes,
#    07.linear_cross_entropy_backward), 3 to 5 hours;
# 4. section 4, the capstone decoder (07.decoder), 4 to 7 hours, most of it making it fast.
#
# Terms are defined where they first appear; the course's [glossary](../../docs/glossary.md) has them all.
#
# Every kernel so far ran forward only (RMSNorm's backward in notebook 02 aside). Training also runs the
# backward pass, and that is where fusion gets hard: the backward needs intermediate values of the forward, and
# a fused forward is precisely the kernel that never wrote them. FlashAttention's forward keeps its `N × N`
# probabilities in registers; its backward needs them again. The fused cross-entropy of notebook 05 never holds
# the logits, and their gradient needs them: the gradient of the cross-entropy with respect to the logits is
# their softmax minus the one-hot of each row's target (divided by the number of rows, for the mean). Each intermediate is either **saved** (written in the
# forward, read in the backward: memory, and bytes both ways) or **recomputed** (the backward does that part of
# the forward again: flops). Fusing for training is choosing, value by value. (Autograd is PyTorch's automatic
# differentiation: as the forward runs it records each op and the tensors that op's backward will need, its
# *saved tensors*.)
#
# You will
# 1. measure what autograd saves for the backward of an unfused block and of attention, and read how
#    `torch.compile`'s partitioner decides between saving and recomputing, from the graphs it produces;
# 2. derive FlashAttention's backward (rebuild `P` tile by tile from the saved log-sum-exp, the
#    `delta = rowsum(dO ∘ O)` trick, two loops for `dK, dV` and `dQ`), predict its flops against the forward's
#    (**graded**, then read off SDPA's measured times) and write it: **graded** on correctness,
#    precision against float64 gradients, speed against SDPA's own backward, and at most three launches; then
#    measure it against SDPA's backends over sequence lengths;
# 3. predict the bytes of the float32 logits, whole and a chunk of rows (**graded**, then measured), and write
#    the forward and backward of a linear layer with cross-entropy that never holds the `M × V` logits,
#    a chunk of rows at a time: **graded** on correctness, precision and the memory it allocates; then measure
#    its memory and time against eager PyTorch and `torch.compile` up to a 128k vocabulary;
# 4. assemble a small Llama-style decoder from `torch.autograd.Function`s around your kernels and train it on the
#    Python standard library's source: **graded** on its gradients against float64, a training run against eager
#    PyTorch's, tokens/s against `torch.compile` and peak memory against eager; then plot the three loss curves,
#    their speed and memory, and one training step's kernels on a timeline.
#
# Without a GPU the kernels run in Triton's interpreter: graded for correctness and memory there, not for speed,
# and the time plots then show the cost model only.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined

import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.measure import sizes
from autograder.specs import streaming_reduction_fusion
from autograder.specs import fusion_for_training
from autograder.specs import decoder as dec
from autograder.specs.decoder import DecoderConfig, check_parameters
from autograder.teach.plots import kernel_timeline, peaks
from autograder.specs.text_corpus import batches, load_corpus, token_ids
from autograder.measure.timing import extra_bytes as measured_extra_bytes
from autograder.measure.timing import not_written, written_versions
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


def timed_in_turns(calls, desc, rounds=3, rep=30):
    """{name: median ms} of the versions in calls (name -> function of no arguments) that run, timed in turns;
    a version whose exercise is not written yet is named and left out."""
    return bench_interleaved(written_versions(calls, desc), rounds=rounds, rep=rep)


# %% [markdown] nbgrader={"grade": false, "grade_id": "saved-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. What the backward pass needs: save or recompute
#
# Take RMSNorm, `y = x · rstd · w` with `rstd = 1/√(mean(x²) + ε)` per row. Its backward (notebook 02) is
# `dx = rstd · (w ∘ dy − x̂ · mean(x̂ ∘ w ∘ dy))` with `x̂ = x · rstd`, and `dw = Σ_rows dy ∘ x̂`. It needs `x`,
# `w` and `rstd`. Eager PyTorch runs RMSNorm as five or six ops and autograd saves what each op's backward
# wants: the squares, the mean, the reciprocal root, the normalised `x̂` — several tensors the size of `x`.
# A fused forward saves `x` (the layer's input, alive anyway) and `rstd`, **one float per row**; its backward
# recomputes `x̂ = x · rstd` on the fly, for free, while it reads `x`. Saving costs bytes twice (written by
# the forward, read by the backward) and memory in between, for every layer of the model; recomputing costs
# flops and, if it needs inputs that were not saved, reads.
#
# | intermediate | save (bytes written + read, memory held) | recompute (extra work in the backward) |
# |---|---|---|
# | RMSNorm's `x̂`, `(M, H)` | `2·e·M·H` | one multiply per element, `x` is read anyway |
# | RMSNorm's `rstd`, `(M,)` | `8·M` | a row reduction over `x` |
# | attention's `P`, `(B, H, N, N)` | `2·e·B·H·N²` (16 GiB at 4 × 16 × 8192² in bf16, per layer) | `Q Kᵀ` again: `2·N²·D` flops a head |
# | attention's log-sum-exp, `(B, H, N)` | `8·B·H·N` | — (it makes the recomputation of `P` one `exp`) |
#
# The rule of thumb: save what is small or expensive to recompute (row statistics, matrix products' outputs
# that feed a nonlinearity), recompute what is cheap and large (elementwise functions of saved values).
#
# ![](figures/save_vs_recompute.svg)

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.predict_saved · What does attention keep for its backward?   (about 20 min · ★☆☆)
#
# **Spec.** `saved_for_backward(batch, heads, n, d, elem_bytes) -> (textbook_bytes, flash_bytes)`, two integers:
# the bytes autograd keeps for the backward, beyond `q, k, v` themselves (the layer's inputs, alive anyway), for
# inputs of shape `(batch, heads, n, d)` and `elem_bytes` bytes an element,
#
# * `textbook_bytes`: for `attention_textbook` below, `softmax(q kᵀ / √d) @ v` in three lines, the softmax in
#   the inputs' dtype;
# * `flash_bytes`: for a fused attention such as SDPA or your notebook-05 kernel, which keeps its output `o` and
#   one float32 log-sum-exp per query row.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Walk the three lines of `attention_textbook` and ask, op by op, what that op's backward needs to know.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# The product `q kᵀ` needs `q` and `k` (inputs: free), the scaling a constant, the softmax its own output `P`,
# and the product with `v` its two operands, `P` and `v`. A tensor kept by two ops is stored once. The fused
# version keeps `o`, `(batch, heads, n, d)`, and one float32 per query row.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# With `rows = batch · heads · n`: the textbook keeps `rows · n` elements of `elem_bytes`, the fused one
# `rows · d` elements of `elem_bytes` plus `4 · rows` bytes. The traps: counting `P` twice, and giving the
# log-sum-exp the inputs' size instead of 4 bytes.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 07.predict_saved -->

# %% nbgrader={"grade": false, "grade_id": "saved_for_backward", "locked": false, "schema_version": 3, "solution": true}
def saved_for_backward(batch: int, heads: int, n: int, d: int, elem_bytes: int) -> tuple[int, int]:
    """(textbook_bytes, flash_bytes) that autograd saves for attention's backward beyond q, k, v, for inputs
    (batch, heads, n, d) of elem_bytes: the textbook version's n x n probabilities against a fused attention's
    output o and its float32 log-sum-exp."""
    ### BEGIN SOLUTION
    rows = batch * heads * n  # query rows
    textbook = rows * n * elem_bytes  # P, kept by the softmax (its output) and by P @ v (an operand): one tensor
    flash = rows * d * elem_bytes + rows * 4  # o in the inputs' dtype, the log-sum-exp in float32
    return textbook, flash
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_saved", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("07.predict_saved", saved_for_backward, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "saved-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Measured: a saved-tensor hook
#
# The cell measures what autograd saves, with a saved-tensor hook (`fusion_for_training.saved_bytes`: a function
# `torch.autograd.graph.saved_tensors_hooks` calls for every tensor an op keeps, which adds up their storages),
# for the textbook attention and for PyTorch's own fused attention (SDPA), against `N`, and draws your
# prediction beside it: quadratic against linear.


# %% nbgrader={"grade": false, "grade_id": "saved-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
SAVE_B, SAVE_H, SAVE_D = (1, 16, 128) if ON_GPU else (1, 2, 64)
SAVE_NS = runtime.demo_points([512, 1024, 2048, 4096] if ON_GPU else [64, 128, 256])
SAVE_DTYPE = torch.bfloat16 if ON_GPU else torch.float32


def attention_textbook(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


saved = {"textbook attention (autograd saves P)": [], "SDPA (saves o and the log-sum-exp)": []}
for n in tqdm(SAVE_NS, desc="saved tensors over sequence lengths"):
    q, k, v = (torch.randn(SAVE_B, SAVE_H, n, SAVE_D, device=DEVICE, dtype=SAVE_DTYPE, requires_grad=True)
               for _ in range(3))
    saved["textbook attention (autograd saves P)"].append(fusion_for_training.saved_bytes(attention_textbook, q, k, v))
    saved["SDPA (saves o and the log-sum-exp)"].append(
        fusion_for_training.saved_bytes(lambda a, b, c: F.scaled_dot_product_attention(a, b, c), q, k, v))
    del q, k, v
ns = np.array(SAVE_NS, dtype=float)
e = SAVE_DTYPE.itemsize
fig, ax = plt.subplots(figsize=(7, 4.2))
try:
    predicted = np.array([saved_for_backward(SAVE_B, SAVE_H, n, SAVE_D, e) for n in SAVE_NS], dtype=float)
    ax.loglog(ns, predicted[:, 0] / 2**20, "k--", label="your prediction: textbook")
    ax.loglog(ns, predicted[:, 1] / 2**20, "k:", label="your prediction: fused")
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
    if not not_written(exc):
        raise
    print(f"saved_for_backward is not written yet ({type(exc).__name__}): the plot shows the measurements alone")
for (name, vals), style in zip(saved.items(), ("x-", "o-")):
    ax.loglog(ns, np.array(vals) / 2**20, style, label=name)
ax.set_xticks(SAVE_NS, [str(n) for n in SAVE_NS])
ax.minorticks_off()
ax.set_xlabel("sequence length N")
ax.set_ylabel("MiB saved for the backward")
ax.set_title(f"({SAVE_B}, {SAVE_H}, N, {SAVE_D}) {str(SAVE_DTYPE).replace('torch.', '')}, one layer")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, n in enumerate(SAVE_NS):
    print(f"N={n:<5} " + ", ".join(f"{name}: {vals[i] / 2**20:.3g} MiB" for name, vals in saved.items()))

# %% [markdown] nbgrader={"grade": false, "grade_id": "partitioner-md", "locked": true, "schema_version": 3, "solution": false}
# ### How `torch.compile` decides
#
# `torch.compile` traces the forward and the backward into **one** joint graph (AOTAutograd), then cuts it in
# two: what the forward graph returns besides the output is what is saved. Where to cut is the partitioner's
# choice. The default one for training, `min_cut_rematerialization_partition`, treats it as a minimum cut: every
# value crossing from forward to backward costs its bytes, recomputing an elementwise op in the backward costs
# nothing (it will be fused into a backward kernel that reads its inputs anyway), and matrix products and
# reductions over long rows are never recomputed. The simpler `default_partition` saves whatever the backward
# uses. The cell compiles a pre-norm MLP block, `y = x + (gelu(rmsnorm(x) · w) @ W)`, with each partitioner and
# prints what each forward graph hands the backward, with sizes. (`aot_function` runs the partitioner without
# generating code, so this works without a GPU.)

# %% nbgrader={"grade": false, "grade_id": "partitioner", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
from functorch.compile import aot_function, default_partition, make_boxed_func, min_cut_rematerialization_partition


def mlp_block(x, w, w_up):
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return x + F.gelu(h @ w_up, approximate="tanh").sum(-1, keepdim=True)


VIEWS = {torch.ops.aten.t.default, torch.ops.aten.view.default, torch.ops.aten.permute.default,
         torch.ops.aten.transpose.int, torch.ops.aten.expand.default, torch.ops.aten.detach.default}


def saved_by(partition):
    """[(node, shape, what it is, bytes it adds)] of what the forward graph hands the backward under this
    partitioner. Inputs (alive anyway) and views of an already counted tensor add no bytes."""
    seen = {}

    def fw_compiler(gm, example_inputs):
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        rows, counted = [], set()
        for node in outputs[1:]:  # the first output is the block's result; the rest is saved
            base = node
            while base.op == "call_function" and base.target in VIEWS:
                base = base.args[0]
            val = base.meta["val"]
            if base.op == "placeholder":
                what, nbytes = "an input", 0
            else:
                what = f"{base.target.__name__.split('.')[0]}" + (f" (saved as a view, {node})" if base is not node
                                                                 else "")
                nbytes = 0 if base in counted else val.numel() * val.element_size()
                counted.add(base)
            rows.append((str(base), tuple(val.shape), what, nbytes))
        seen["saved"] = rows
        return make_boxed_func(gm)

    compiled = aot_function(mlp_block, fw_compiler=fw_compiler, bw_compiler=lambda gm, _: make_boxed_func(gm),
                            partition_fn=partition)
    rows, hidden = (4096, 2048) if ON_GPU else (256, 128)
    x = torch.randn(rows, hidden, device=DEVICE, requires_grad=True)
    w = torch.randn(hidden, device=DEVICE, requires_grad=True)
    w_up = torch.randn(hidden, 2 * hidden, device=DEVICE, requires_grad=True)
    compiled(x, w, w_up).sum().backward()
    return seen["saved"]


partitions = {"default_partition": saved_by(default_partition),
              "min_cut_rematerialization_partition": saved_by(min_cut_rematerialization_partition)}
for name, rows in partitions.items():
    print(f"{name}: {sum(b for *_, b in rows) / 2**20:.2f} MiB of activations saved")
    for node, shape, what, nbytes in rows:
        print(f"    {node:<10} {str(shape):<14} {what:<36} {nbytes / 2**20:8.3f} MiB")
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh(list(partitions), [sum(b for *_, b in rows) / 2**20 for rows in partitions.values()])
ax.set_xlabel("MiB of activations saved for the backward (float32)")
ax.set_title("one pre-norm MLP block: what each partitioner saves")
plt.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "partitioner-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for (these sizes at 256 × 128 on the CPU; four times larger per dimension on a GPU). Both keep
# the inputs (alive anyway, no cost), `rstd` (one float a row) and the product `h @ W` (GELU's input: getting
# it back would cost the matrix product again). The default partitioner also keeps `x · rstd` and
# `h = x · rstd · w`, two `(rows, hidden)` tensors. The min-cut partitioner drops `x · rstd`, which the backward
# rebuilds from `x` and `rstd` in a fused elementwise kernel, and keeps `h`, because the product's backward
# needs it as an operand (`dW = hᵀ · dY`) and rebuilding it would not save its bytes: 25% fewer bytes saved
# here. What it cannot do is what the kernels below do: it only cuts the graph it is given, so it never turns
# attention's `P` into "the log-sum-exp plus one `exp`", which takes knowing that a softmax can be rebuilt from
# one statistic per row.

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. FlashAttention's backward
#
# Per head, with `S = Q Kᵀ / √D`, `P = softmax(S)` row by row and `O = P V`, and `dO` the gradient of the loss
# with respect to `O`:
#
# * `dV = Pᵀ dO` and `dP = dO Vᵀ` (the product rule on `O = P V`);
# * the softmax's Jacobian, row by row: `dS_ij = P_ij (dP_ij − Σ_k P_ik dP_ik)`. The sum is one number per
#   row, and it does not need `P` at all: `Σ_k P_ik dP_ik = Σ_k P_ik (dO_i · V_k) = dO_i · O_i`. Call it
#   `delta_i`; it takes one pass over `O` and `dO` before anything else;
# * `dQ = dS K / √D` and `dK = dSᵀ Q / √D`.
#
# ![](figures/flash_backward.svg)
#
# `P` is needed tile by tile, and it can be rebuilt exactly from what the forward saved: `P_ij = exp(S_ij −
# lse_i)`, one subtraction and one `exp` per score, no running max, no rescaling. So the backward saves no
# `N × N` tensor either. The sums, though, run in two directions: `dK` and `dV` sum over queries (a column of
# tiles), `dQ` over keys (a row of tiles). One program cannot own both without sharing partial sums with other
# programs (FlashAttention-2 adds `dQ` with atomic float adds). The simplest schedule that stays exact and
# deterministic is **two kernels**:
#
# 1. `delta`: a row reduction over `dO ∘ O`;
# 2. `dK, dV`: a program per block of `BLOCK_N` keys loads its `K` and `V` tiles once and walks the query
#    blocks that see them, rebuilding `Pᵀ` and `dSᵀ` tile by tile (keys down, queries across: then `dV += Pᵀ dO`
#    and `dK += dSᵀ Q` are plain products of tiles it holds);
# 3. `dQ`: a program per block of `BLOCK_M` queries walks the key tiles, as the forward did, and accumulates
#    `dQ += dS K`.
#
# The price: `S` and `dP` are computed twice (once in each kernel), two tile products more than the math needs.
# Flops: you count the products the math needs in the exercise below, against the forward's. Bytes: `q, k, v, o, dO` read and
# `dQ, dK, dV` written once each, a few floats per row; `K` and `V` (in the `dQ` loop) and `Q, dO` (in the
# `dK, dV` loop) are re-read per block, mostly from L2. At `N = 4096`, `D = 128` the arithmetic intensity is in
# the thousands of flops per byte: compute-bound, judged in TFLOP/s.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-flops-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.predict_backward_flops · Count the backward's flops   (about 15 min · ★☆☆)
#
# **Spec.** `attention_flops(batch, heads, n, d, causal) -> (forward_flops, backward_flops)`, two integers: the
# flops of attention's matrix products for `q, k, v` of shape `(batch, heads, n, d)`, in the forward
# (`S = Q Kᵀ`, `O = P V`) and in the backward derived above, which starts by rebuilding `S`. Count 2 flops a
# multiply-add, leave out the softmax's elementwise work, and count the products the math needs (not those a
# schedule computes twice). `causal`: the tiles above the diagonal are skipped, in both passes.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Every product here multiplies an `n × d` matrix by a `d × n` one, or an `n × n` by an `n × d`: the same count
# each. List the products of each pass, then multiply.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# One product of one head costs `2 · n · n · d` flops. The forward has two; go down the derivation's bullets
# for the backward (`S` rebuilt, then one product per gradient or intermediate it names). Multiply by
# `batch · heads`, and halve both totals when `causal`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The backward's products are `S`, `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dQ = dS K` and `dK = dSᵀ Q`: five. The traps:
# counting `n · n · d` (multiply-adds, not flops), the seven products of the two-kernel schedule, and halving
# only one pass for `causal`. Integers: `//` where you halve.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 07.predict_backward_flops -->

# %% nbgrader={"grade": false, "grade_id": "attention_flops", "locked": false, "schema_version": 3, "solution": true}
def attention_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> tuple[int, int]:
    """(forward_flops, backward_flops) of attention's matrix products over q, k, v of shape (batch, heads, n, d),
    2 flops a multiply-add; a causal mask halves both."""
    ### BEGIN SOLUTION
    product = 2 * batch * heads * n * n * d  # one n x n x d product, every head
    halve = 2 if causal else 1
    return 2 * product // halve, 5 * product // halve  # forward: S, O; backward: S, dV, dP, dQ, dK
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_backward_flops", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("07.predict_backward_flops", attention_flops, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "flops-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Measured: the rate your count gives
#
# The cell times SDPA's forward and its backward alone (the forward run once before), in turns, at
# (4, 16, N, 128) bf16 over `N`, causal and not, and divides your counts by the times: TFLOP/s of each pass
# against this GPU's matmul peak, and the backward's time over the forward's against the ratio your counts
# predict. Without a GPU it prints your counts and times nothing.

# %% nbgrader={"grade": false, "grade_id": "flops-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
FL_B, FL_H, FL_D = sizes.ATTENTION_BHD if ON_GPU else (1, 2, 64)
FL_NS = runtime.demo_points([1024, 2048, 4096, 8192] if ON_GPU else [64, 256])
try:
    counted = {(n, c): attention_flops(FL_B, FL_H, n, FL_D, c) for n in FL_NS for c in (False, True)}
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
    if not not_written(exc):
        raise
    print(f"attention_flops is not written yet ({type(exc).__name__}): nothing to measure against")
    counted = {}
fl_ms = {}
if ON_GPU and counted:
    sdpa_backward_alone = fusion_for_training.SdpaBackward()
    for n in tqdm(FL_NS, desc="SDPA forward and backward over sequence lengths"):
        for causal in (False, True):
            q, k, v, do = (torch.randn(FL_B, FL_H, n, FL_D, device=DEVICE, dtype=torch.bfloat16) for _ in range(4))
            fl_ms[(n, causal)] = timed_in_turns(
                {"forward": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 "backward": lambda: sdpa_backward_alone(q, k, v, None, None, do, causal)},
                desc=f"N = {n}{', causal' if causal else ''}")
            del q, k, v, do
    del sdpa_backward_alone
    torch.cuda.empty_cache()
if fl_ms:
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.2))
    ax.axhline(peak_tflops, color="k", ls="--", lw=1, label=f"matmul peak ({peak_tflops:.0f} TFLOP/s)")
    for i, which in enumerate(("forward", "backward")):
        for causal, style in ((False, "o-"), (True, "x--")):
            rate = [counted[(n, causal)][i] / (fl_ms[(n, causal)][which] * 1e9) for n in FL_NS]
            ax.semilogx(FL_NS, rate, style, color=f"C{i}", label=f"SDPA {which}{', causal' if causal else ''}")
    ax.set(xlabel="sequence length N", ylabel="TFLOP/s (your count / measured time)",
           title=f"({FL_B}, {FL_H}, N, {FL_D}) bf16, {peak_label}")
    for causal, style in ((False, "o-"), (True, "x--")):
        bx.semilogx(FL_NS, [fl_ms[(n, causal)]["backward"] / fl_ms[(n, causal)]["forward"] for n in FL_NS], style,
                    label=f"measured{', causal' if causal else ''}")
    bx.axhline(counted[(FL_NS[0], False)][1] / counted[(FL_NS[0], False)][0], color="k", ls=":",
               label="your counts' ratio")
    bx.set(xlabel="sequence length N", ylabel="backward time / forward time", title="SDPA, backward against forward")
    for a in (ax, bx):
        a.set_xticks(FL_NS, [str(n) for n in FL_NS])
        a.minorticks_off()
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    plt.tight_layout()
    plt.show()
    for (n, causal), ms in fl_ms.items():
        fwd, bwd = counted[(n, causal)]
        print(f"N={n:<5} causal={causal!s:<5} forward {ms['forward']:.3f} ms = {fwd / ms['forward'] / 1e9:5.0f} "
              f"TFLOP/s, backward {ms['backward']:.3f} ms = {bwd / ms['backward'] / 1e9:5.0f} TFLOP/s, "
              f"time ratio {ms['backward'] / ms['forward']:.2f} (your counts: {bwd / fwd:.2f})")
elif counted:
    for (n, causal), (fwd, bwd) in counted.items():
        print(f"N={n:<4} causal={causal!s:<5} your counts: forward {fwd:.3g} flops, backward {bwd:.3g} flops")
    print("No GPU: nothing was timed; on a GPU this cell divides your counts by SDPA's measured times.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-backward-rate-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Your counts say the backward does 2.5 times the forward's flops. On a GPU, does SDPA's backward
# take 2.5 times its forward's time, and does it reach the forward's TFLOP/s? Name two things the backward does
# that your count leaves out or that keep the tensor cores less busy than in the forward.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-backward-rate", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Expect more than 2.5 times the forward's time (the plot shows how much more on this GPU), so its rate by the
# count is lower. The count leaves out work the
# backward cannot avoid: the `delta = rowsum(dO ∘ O)` pass, rebuilding `P` with one `exp` per score and forming
# `dS = P ∘ (dP − delta)` elementwise, and, in a schedule that avoids atomics, `S` and `dP` computed a second
# time. And its products run less efficiently: a program holds more operands and float32 accumulators (`dK`
# and `dV`, or `dQ`), so tiles are smaller or fewer programs fit on an SM; `dQ` is added across programs (with
# float atomics or a second kernel), and `P` and `dS` are rounded and fed back as operands between products, a
# dependency the forward has only once per tile.

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.flash_attention_backward · FlashAttention's backward in three launches   (about 5 h · ★★★)
#
# **Spec.** `flash_attention_backward(q, k, v, o, lse, do, causal=False, out=None) -> (dq, dk, dv)`, each with its
# input's shape and dtype: `q (B, H, N, D)`, `k, v (B, H, N_kv, D)`, `o` and `do` like `q`, `lse (B, H, N)` float32
# (the natural log-sum-exp of the scaled scores, as your notebook-05 forward returns it); float32, float16 or bf16;
# any strides (the grader passes `(B, N, H, D)` buffers seen as `(B, H, N, D)`); `D` in 16…256; any `N`, `N_kv`.
# `out`, if given, is three tensors to write the gradients into (the capstone uses it; the grader does not).
# Causal: query `i` sees keys `j ≤ i`. At most three launches.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# `P` can be rebuilt exactly, tile by tile, from the saved log-sum-exp; then follow the derivation. Its sums run
# along two axes (`dK`, `dV` over queries, `dQ` over keys), so give each axis a pass of its own.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# The stubs follow the text's schedule: `_delta_kernel`, a row reduction; `_dkdv_kernel`, a program per block of
# keys that loads its `K` and `V` once and loops over the query blocks, accumulating `dV += Pᵀ dO` and
# `dK += dSᵀ Q`; `_dq_kernel`, a program per block of queries that loops over the key blocks, accumulating
# `dQ += dS K`. Accumulators in float32; `1/√D` applied to `dQ` and `dK` once, at the store. Your own schedule is
# welcome within three launches.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Rebuild `P` as `exp2(s · log2(e)/√D − lse · log2(e))`; round `P` and `dS` to the inputs' dtype only as
# operands of `tl.dot` (`input_precision="ieee"` for float32). The traps: with `causal`, the key block's loop
# starts at the query block holding its first key, tiles wholly hidden are skipped and the diagonal ones masked;
# rows past `N` and keys past `N_kv` must contribute zero; the inputs are strided views (pass every stride);
# `out`, when given, is written into, not replaced.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Put the loop over the tiles that need no mask in a helper called twice (unmasked, then masked only across the
# diagonal), and try a third pipeline stage (`num_stages=3`) for the `dQ` loop; time each kernel alone over
# `BLOCK_M`, `BLOCK_N` and `num_warps`.
#
# </details>
#
# **Graded.** Correctness on shapes from 1 × 1 × 1 × 16 up, causal and not; precision against float64 gradients
# for `N` = 64 to 1024; (GPU) speed at (4, 16, 4096, 128) bf16 against SDPA's own backward on this GPU and against
# autograd through the textbook attention; at most three launches.
#
# <!-- graded: 07.flash_attention_backward -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention_backward", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _delta_kernel(o_ptr, do_ptr, delta_ptr, H, N, stride_ob, stride_oh, stride_on, stride_od,
                  stride_db, stride_dh, stride_dn, stride_dd, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    # delta_i = dO_i · O_i in float32, for BLOCK_M query rows of one head.
    """delta[b, h, i] = sum over d of o[b, h, i, d] * do[b, h, i, d], float32, for BLOCK_M query rows of one
    head; grid (cdiv(N, BLOCK_M), B * H); delta is a contiguous (B, H, N) float32 buffer."""
    # 1. which rows and which head: tl.program_id(0) a block of rows, tl.program_id(1) = b * H + h
    # 2. load the (BLOCK_M, HEAD_DIM) tiles of o and do (masked past N), upcast to float32
    # 3. the row sums of their product, stored at delta[(b * H + h) * N + row]
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_backward.py (_delta_kernel)
    ### END SOLUTION


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, H, N, N_KV,
                 stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd, stride_db, stride_dh, stride_dn, stride_dd,
                 stride_gb, stride_gh, stride_gn, qk_scale, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                 CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """dK and dV of BLOCK_N keys of one head: grid (cdiv(N_KV, BLOCK_N), B * H). qk_scale = log2(e) / sqrt(D),
    sm_scale = 1 / sqrt(D); stride_g* are dk's (and dv's) strides."""
    # 1. load this program's K and V tiles (BLOCK_N keys, masked past N_KV); dk, dv = float32 zeros
    # 2. walk the query blocks that see these keys (causal: from the block of the first key on):
    #    q, do tiles, and lse, delta of those queries;
    #    p_t = exp2(k qᵀ · qk_scale − lse · log2 e), keys down, queries across, masked where hidden;
    #    dv += p_t @ do;  dp_t = v @ doᵀ;  ds_t = p_t ∘ (dp_t − delta);  dk += ds_t @ q
    # 3. store dk · sm_scale and dv, in the inputs' dtype
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_backward.py (_dkdv_kernel)
    ### END SOLUTION


@triton.jit
def _dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, H, N, N_KV,
               stride_qb, stride_qh, stride_qn, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
               stride_vb, stride_vh, stride_vn, stride_vd, stride_db, stride_dh, stride_dn, stride_dd,
               stride_gb, stride_gh, stride_gn, qk_scale, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # Causal: the last query blocks walk the most keys; starting them first keeps the tail short.
    """dQ of BLOCK_M queries of one head: grid (cdiv(N, BLOCK_M), B * H); stride_g* are dq's strides."""
    # 1. load this program's q and do tiles, its lse (times log2 e) and delta; dq = float32 zeros
    # 2. walk the key blocks these queries see, as notebook 05's forward does:
    #    p = exp2(q kᵀ · qk_scale − lse), masked; dp = do @ vᵀ; ds = p ∘ (dp − delta); dq += ds @ k
    # 3. store dq · sm_scale in the inputs' dtype
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_backward.py (_dq_kernel)
    ### END SOLUTION


def flash_attention_backward(q, k, v, o, lse, do, causal: bool = False, out=None):
    """(dq, dk, dv) of attention(q, k, v) for the output gradient do, given the forward's o (like q) and lse
    (B, H, N) float32: each gradient with its input's shape and dtype. q (B, H, N, D); k, v (B, H, N_kv, D); any
    strides. out: None, or (dq, dk, dv) tensors to write the gradients into. Three launches at most."""
    # 1. check the inputs (shapes, dtypes, D); allocate dq, dk, dv (or take them from out)
    # 2. delta = a float32 (B, H, N) buffer; launch _delta_kernel
    # 3. launch _dkdv_kernel, then _dq_kernel, with qk_scale = log2(e) / sqrt(D) and sm_scale = 1 / sqrt(D)
    # 4. return dq, dk, dv
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_backward.py (flash_attention_backward)
    ### END SOLUTION


# Helpers your kernels and launcher call (tile loops, launch settings, input checks) go here.
### BEGIN SOLUTION
# include: kernels/flash_attention.py (LOG2E, _key_ranges, _check_out)
# include: kernels/flash_attention_backward.py (_dkdv_over_queries, _dq_over_keys, attention_backward_settings,
#     _check_backward_inputs)
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "flash_attention_backward-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("07.flash_attention_backward", flash_attention_backward)

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward_correctness", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("07.flash_attention_backward", flash_attention_backward, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07.flash_attention_backward", flash_attention_backward, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward_performance", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("07.flash_attention_backward", flash_attention_backward,
      criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("07.flash_attention_backward", flash_attention_backward, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-debug-md", "locked": true, "schema_version": 3, "solution": false}
# ### Debugging tile by tile
#
# When a gradient is wrong, ask which program made the mistake. Your `flash_attention_torch` of notebook 05
# (05.flash_attention_torch) runs the forward as the kernel runs it, a block of queries and a block of keys at a
# time, in plain PyTorch: paste it in the first cell below (optional; without it the exact forward stands in),
# and its `o` and `lse` are what your backward starts from. The second cell makes the backward's inputs with it at a small shape whose length
# is not a multiple of the block, runs your backward, and names for each gradient the first block of rows that
# differs from float64: a block of queries of `dQ` is one program of `_dq_kernel`, a block of keys of `dK` or
# `dV` one program of `_dkdv_kernel`. Set `DBG_BLOCK` to your kernels' block size, and step through that program
# in the interpreter (a `print` inside the kernel, guarded by `tl.program_id`).

# %% nbgrader={"grade": false, "grade_id": "flash_attention_torch-paste", "locked": false, "schema_version": 3, "solution": true}
# Optional: your flash_attention_torch(q, k, v, causal=False, block_m=64, block_n=64) -> (o, lse) from notebook 05.
### BEGIN SOLUTION
# include: kernels/flash_attention_torch.py (flash_attention_torch)
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "attention-debug", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def first_differing_block(got, exact, block, tol=1e-4):
    """(batch, head, first row, stop) of the first block of `block` rows (dim 2) where got and exact (B, H, N, D)
    differ beyond tol + tol |exact|, or None."""
    bad = ((got.double() - exact).abs() > tol + tol * exact.abs()).any(dim=-1)  # (B, H, N)
    for b, h, row in bad.nonzero().tolist()[:1]:
        return b, h, row // block * block, min(row // block * block + block, got.shape[2])
    return None


DBG_SHAPE, DBG_BLOCK = (1, 2, 100, 64), 32
dbg_gen = torch.Generator().manual_seed(0)
q, k, v, do = (torch.randn(DBG_SHAPE, generator=dbg_gen).to(DEVICE) for _ in range(4))
for causal in (False, True):
    exact_o, exact_lse = fusion_for_training.attention_forward_outputs(q, k, v, causal)
    try:
        o, lse = flash_attention_torch(q, k, v, causal, block_m=DBG_BLOCK, block_n=DBG_BLOCK)
        print(f"causal={causal}: your tiled forward against the exact one, largest difference: o "
              f"{float((o - exact_o).abs().max()):.1e}, lse {float((lse - exact_lse).abs().max()):.1e}")
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"causal={causal}: flash_attention_torch is not pasted ({type(exc).__name__}): the exact forward's "
              "o and lse stand in")
        o, lse = exact_o, exact_lse
    try:
        got = flash_attention_backward(q, k, v, o, lse, do, causal)
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"flash_attention_backward is not written yet ({type(exc).__name__}): nothing to compare")
        break
    exact = fusion_for_training.attention_backward_reference(q, k, v, o, lse, do, causal)
    for name, g, x, kernel in zip(("dq", "dk", "dv"), got, exact, ("_dq_kernel", "_dkdv_kernel", "_dkdv_kernel")):
        where = first_differing_block(g, x, DBG_BLOCK)
        if where is None:
            print(f"    {name}: every block of {DBG_BLOCK} rows matches float64")
        else:
            b, h, first, stop = where
            print(f"    {name}: first differs at batch {b}, head {h}, rows {first}..{stop - 1}: the {kernel} "
                  f"program that owns them")
del q, k, v, do, o, lse

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your backward against SDPA's
#
# The cell times, over sequence lengths at (4, 16, N, 128) bf16, causal and not: your
# `flash_attention_backward`, SDPA's backward as SDPA picks it and with its cuDNN and FlashAttention-2 backends
# forced (a backend this GPU or build lacks is named and left out), and autograd through the textbook attention
# where its `N × N` tensors fit. Each is the backward alone: the forward runs once, before the timing. The
# model line is the five products' flops at this GPU's measured matmul rate. Without a GPU it checks your
# gradients against float64 at small sizes instead and draws the model.

# %% nbgrader={"grade": false, "grade_id": "attention-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
ATT_B, ATT_H, ATT_D = sizes.ATTENTION_BHD if ON_GPU else (1, 2, 64)
ATT_NS = runtime.demo_points([1024, 2048, 4096, 8192, 16384] if ON_GPU else [64, 128, 256])
ATT_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
YOURS = "your flash_attention_backward"


def bwd_flops(n, causal=False):
    return 10 * ATT_B * ATT_H * n * n * ATT_D // (2 if causal else 1)


versions = {YOURS: lambda *a: flash_attention_backward(*a)}
if ON_GPU:
    versions["SDPA backward"] = fusion_for_training.SdpaBackward()
    versions.update({f"{name} backward": fusion_for_training.sdpa_backward_with_backend(be)
                     for name, be in streaming_reduction_fusion.SDPA_BACKENDS.items()})
    versions["autograd, textbook attention"] = fusion_for_training.attention_backward_eager
att_tflops, left_out = {}, set()
for n in tqdm(ATT_NS, desc="attention backward over sequence lengths"):
    for causal in (False, True):
        q, k, v, do = (torch.randn(ATT_B, ATT_H, n, ATT_D, device=DEVICE, dtype=ATT_DTYPE) for _ in range(4))
        o, lse = fusion_for_training.attention_forward_outputs(q, k, v, causal)
        args = (q, k, v, o, lse, do, causal)
        if not ON_GPU:
            if YOURS in left_out:
                continue
            try:
                got = flash_attention_backward(*args)
            except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
                if not not_written(exc):
                    raise
                print(f"{YOURS}: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
                left_out.add(YOURS)
                continue
            exact = fusion_for_training.attention_backward_reference(*args)
            print(f"N={n:<4} causal={causal!s:<5} relative error against float64: " + ", ".join(
                f"{name} {rel_err(g, x):.2e}" for name, g, x in zip(("dq", "dk", "dv"), got, exact)))
            continue
        fits = runtime.fits(3 * sizes.naive_attention_bytes(n, ATT_B, ATT_H), share=sizes.NAIVE_SHARE)
        calls = {name: (lambda f=f: f(*args)) for name, f in versions.items()
                 if name not in left_out and (fits or not name.startswith("autograd"))}
        times = timed_in_turns(calls, desc=f"N = {n}{', causal' if causal else ''}")
        left_out |= set(calls) - set(times)
        for name in versions:
            att_tflops.setdefault((name, causal), []).append(
                bwd_flops(n, causal) / (times[name] * 1e9) if name in times else math.nan)
        del q, k, v, do, o, lse, args, calls
        torch.cuda.empty_cache()

fig, axes = plt.subplots(1, 2, figsize=(14, 4.4), sharey=True)
for ax, causal in zip(axes, (False, True)):
    ax.axhline(peak_tflops, color="k", ls="--", lw=1, label=f"matmul peak ({peak_tflops:.0f} TFLOP/s)")
    for (name, c), vals in att_tflops.items():
        if c == causal and not all(map(math.isnan, vals)):
            ax.semilogx(ATT_NS, vals, "o-" if name == YOURS else "x--", label=name)
    ax.set_xticks(ATT_NS, [str(n) for n in ATT_NS])
    ax.minorticks_off()
    ax.set_xlabel("sequence length N")
    ax.set_title(f"backward, ({ATT_B}, {ATT_H}, N, {ATT_D}) {str(ATT_DTYPE).replace('torch.', '')}"
                 f"{', causal' if causal else ''}" + ("" if ON_GPU else "\nno GPU: model only"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
axes[0].set_ylabel("TFLOP/s (5 products of 2·N²·D per head)")
plt.tight_layout()
plt.show()
if ON_GPU:
    for (name, causal), vals in att_tflops.items():
        print(f"{name + (', causal' if causal else ''):<48} " + " ".join(
            f"N={n}: {t:5.0f}" for n, t in zip(ATT_NS, vals)) + " TFLOP/s")
else:
    print("No GPU: time was not measured.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attention-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: your two-kernel schedule against SDPA's backends. It cannot match the best of them, and the
# reasons are in its design: the `dK, dV` kernel holds two `BLOCK_N × D` float32 accumulators and issues four tile
# products per step, so at `D = 128` its registers leave room for one program per SM; and `S` and `dP` are
# computed twice, once in each kernel. The published FlashAttention-2 and -3 backward passes compute them once and
# add `dQ` with float atomics instead. FlashAttention-3 also splits each program's warps into a producer, which
# only issues the TMA loads, and consumer warp groups, which compute (*warp specialisation*, notebook 08), and
# alternates two consumer warp groups so that one's softmax arithmetic runs while the other's tensor-core
# products do (*ping-pong scheduling*), which Triton does not do for this loop on Hopper.
#
# **Reference run.** The course's reference solution on an H100 (torch 2.11, Triton 3.6, bf16), at (4, 16, 4096,
# 128): 386 TFLOP/s not causal and 321 causal; SDPA's backward (cuDNN's on Hopper) 523 and 439; its
# FlashAttention-2 backend 273 and 238. So 1.35 to 1.4 times FlashAttention-2's backward and 0.73 to 0.74 of
# cuDNN's; at `N = 16384` 0.69 to 0.71, at `D = 64` 0.77 (not causal) and 0.84 (causal). The tile settings of
# both kernels came from timing each alone (`python -m bench.training --sweep`): the `dQ` kernel gained
# 15% from a third pipeline stage.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-two-kernels-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Your backward computes every tile of `S` and `dP` twice, once in each kernel. What would a single
# kernel that owns a block of keys and adds its share of `dQ` with atomic float adds gain, and what would it cost?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-two-kernels", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Gain: each tile of `S`, `P` and `dP` is computed once, so two of the seven tile products per tile disappear
# (about 5 instead of 7, some 30% fewer flops), and `K`, `V` are read by one kernel only. Cost: every key block
# adds into every query row's `dQ`, so `dQ` is accumulated in float32 in global memory with atomics (more
# traffic, contention on the same rows, an extra pass to convert it to the inputs' dtype), and the order of the
# additions changes from run to run: the result is no longer bitwise deterministic.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Linear + cross-entropy, forward and backward, without the logits
#
# Notebook 05 fused the loss `mean_i(lse_i − logit_{i,t_i})` into the logits' matrix product so that the
# `M × V` logits never exist in the forward. Training needs the gradients too. With `p = softmax(logits)` per
# row and `y` the one-hot targets, `dlogits = (p − y) / M`, and
#
# `dh = dlogits · W` (M × K),   `dW = dlogitsᵀ · h` (V × K).
#
# `dlogits` is as large as the logits, and it needs every row's `lse`, so it cannot be formed in the forward's
# epilogue tile by tile without a second pass. Eager PyTorch (with autograd) holds the float32 logits, their
# log-softmax and their gradient at once: at 8192 tokens × 128256 words, 4 GiB each. The way out is to do the
# backward **during** the forward, a chunk of rows at a time, while that chunk's logits exist:
#
# 1. `logits_c = h_c Wᵀ`, a GEMM into a float32 buffer of `C × V`;
# 2. one pass over each row: its log-sum-exp (online max and sum), its loss, and `dlogits_c = (p − y) / M`
#    written in the inputs' dtype (the operand of the next two products);
# 3. `dh_c = dlogits_c W`: these `C` rows of `dh` are finished;
# 4. `dW += dlogits_cᵀ h_c`: a GEMM whose epilogue adds the previous chunks' sum.
#
# ![](figures/chunked_cross_entropy.svg)
#
# Memory beyond the outputs: one chunk's logits and their gradient instead of all of them (the exercise below
# counts the bytes). Flops: the three products, `6·M·V·K`, nothing recomputed. The price of chunking is in step 4: `dW` (V × K,
# 1 GiB at 128256 × 4096 in bf16) is read and written once per chunk, so chunks should not be too small. The
# loss is returned already reduced (the mean over rows, float32), and the gradients are those of that mean.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-logits-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.predict_logits_bytes · The logits, whole or a chunk at a time   (about 10 min · ★☆☆)
#
# **Spec.** `logits_bytes(n, v, chunk) -> (whole_bytes, chunk_bytes)`, two integers: the bytes of the float32
# logits of `n` rows over a vocabulary of `v`, all of them (as eager PyTorch holds them) and one chunk of at most
# `chunk` rows (as the chunked forward and backward holds them, one chunk at a time).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# A logit is one number per row and word; ask how many rows exist at once in each version, and how large a
# float32 is.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `whole = rows · v · 4` with all `n` rows; `chunk_bytes` the same with the rows of one chunk.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The traps: the logits are float32 (4 bytes) whatever the inputs' dtype, and a chunk never holds more rows than
# there are: `min(chunk, n)`.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 07.predict_logits_bytes -->

# %% nbgrader={"grade": false, "grade_id": "logits_bytes", "locked": false, "schema_version": 3, "solution": true}
def logits_bytes(n: int, v: int, chunk: int) -> tuple[int, int]:
    """(whole_bytes, chunk_bytes): the float32 logits of n rows over a vocabulary of v, all of them and one
    chunk of at most `chunk` rows."""
    ### BEGIN SOLUTION
    return 4 * n * v, 4 * min(chunk, n) * v
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_logits_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("07.predict_logits_bytes", logits_bytes, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.linear_cross_entropy_backward · Linear + cross-entropy, forward and backward, without the logits   (about 4 h · ★★★)
#
# **Spec.** `linear_cross_entropy_forward_backward(h, w, targets) -> (loss, dh, dw)`: `h (M, K)` and `w (V, K)` of
# one floating dtype (any strides), `targets (M,)` int32 or int64 in `[0, V)`; `loss` the mean cross-entropy of
# the logits `h wᵀ`, a 0-dimensional float32 tensor; `dh (M, K)` and `dw (V, K)` its gradients, in the inputs'
# dtype. Triton kernels compute every output, the products too (notebook 04's tiled GEMM, `tile_dot` from
# `kernels.matmul`, reads any strides, so `wᵀ` and `dlogits_cᵀ` are views, not copies).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Do the backward during the forward: while one chunk of rows has its logits, finish everything that chunk
# contributes (its share of the loss, its rows of `dh`, its part of `dW`), then reuse the buffer.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# A loop over chunks of `C` rows: `logits_c = h_c wᵀ` into a float32 `(C, V)` buffer (a Triton GEMM such as
# `gemm_into` below, around `tile_dot`); the rows kernel, two passes a row (the log-sum-exp online, then
# `dlogits_c = (p − y) / M` in the inputs' dtype); `dh_c = dlogits_c w`; `dw (+)= dlogits_cᵀ h_c`, the first
# chunk writing, the others adding. Size `C` so that a chunk's logits stay well under a quarter of all of them
# (the memory bar).
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The loss: each row adds `(lse − logit[target]) / M` into one float32 zero with `tl.atomic_add`. The traps:
# divide by `M`, all the rows, not by the chunk's `C`; the `−1` at each row's target column; int32 targets;
# `h` with a row stride wider than `K`; the last chunk's rows.
#
# </details>
# <details><summary>Make it fast</summary>
#
# `dW` is read and written once per chunk: chunks too small make that traffic dominate. On a GPU give the rows
# kernel one row a program, and time the three GEMMs' tile sizes apart.
#
# </details>
#
# **Graded.** Correctness (vocabularies up to 3001, "confident" rows whose logits spread to ±40, int32 targets, a
# padded `h`); precision of all three outputs against float64 for `V` = 1000 to 16000; memory at 4096 × 1024 →
# 32768, where the float32 logits alone take 512 MiB.
#
# <!-- graded: 07.linear_cross_entropy_backward -->

# %% nbgrader={"grade": false, "grade_id": "linear_cross_entropy_forward_backward", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _ce_rows_kernel(logits_ptr, dlogits_ptr, t_ptr, loss_ptr, N_ROWS, V, stride_l, stride_g, inv_m,
                    ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    # ROWS rows of the chunk (one on a GPU), two passes over their float32 logits. The first finds each row's
    # log-sum-exp online (per lane: a running max, and a running sum rescaled when the max grows); the second
    # writes (p - y) / M.
    """ROWS rows of a chunk's float32 logits (N_ROWS, V): adds their (lse - logit[target]) * inv_m to the loss (a
    float32 scalar) and writes dlogits = (softmax - onehot(target)) * inv_m in dlogits' dtype. Grid
    (cdiv(N_ROWS, ROWS),); inv_m = 1 / M, M all the rows of the batch."""
    # 1. the rows of this program, and a mask for those past N_ROWS
    # 2. pass 1 over the row, BLOCK_V columns at a time: a running max and a rescaled running sum -> lse
    # 3. the loss: atomically add sum over the rows of (lse - logit[target]) * inv_m
    # 4. pass 2: dlogits = (exp(logit - lse) - (col == target)) * inv_m, stored masked
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy_backward.py (_ce_rows_kernel)
    ### END SOLUTION


def linear_cross_entropy_forward_backward(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor):
    """(loss, dh, dw) for h (M, K), w (V, K) and targets (M,): the mean cross-entropy of h @ w.T, float32 and
    0-d, and its gradients in h's and w's dtype, a chunk of rows at a time, never holding all the logits."""
    # 1. check the inputs; loss = float32 zero, dh, dw empty; a chunk of rows and its float32 logits buffer
    # 2. per chunk: logits_c = h_c @ w.t() (a Triton GEMM); the rows kernel (loss, dlogits_c);
    #    dh_c = dlogits_c @ w;  dw (+)= dlogits_c.t() @ h_c  (the first chunk writes, the others add)
    # 3. return loss, dh, dw
    ### BEGIN SOLUTION
    # include body: kernels/linear_cross_entropy_backward.py (linear_cross_entropy_forward_backward)
    ### END SOLUTION


# Your GEMM kernel and its launcher (c = x @ w, or c += x @ w), and any helper, go here.
### BEGIN SOLUTION
# include: kernels/linear_cross_entropy.py (_check_inputs)
# include: kernels/linear_cross_entropy_backward.py (_gemm_into_kernel, gemm_into, chunk_rows)
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "linear_cross_entropy_forward_backward-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("07.linear_cross_entropy_backward", linear_cross_entropy_forward_backward)

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_backward_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("07.linear_cross_entropy_backward", linear_cross_entropy_forward_backward,
      criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_backward_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07.linear_cross_entropy_backward", linear_cross_entropy_forward_backward,
      criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_linear_cross_entropy_backward_memory", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("07.linear_cross_entropy_backward", linear_cross_entropy_forward_backward,
      criteria=["memory"]).assert_passed("memory")

# %% [markdown] nbgrader={"grade": false, "grade_id": "logits-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Measured: the logits each version holds
#
# The cell measures what one call allocates beyond its outputs (`loss`, `dh`, `dW`), for eager PyTorch and for
# your `linear_cross_entropy_forward_backward`, over the number of rows `M` at a fixed vocabulary, and draws your
# 07.predict_logits_bytes beside it: the whole float32 logits, and chunks of 256 and 1024 rows. It then reads
# off how many rows' float32 logits your function holds at once. (A GPU reports the allocator's peak; the
# interpreter adds up every storage created, an upper bound.)

# %% nbgrader={"grade": false, "grade_id": "logits-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
LB_K, LB_V = (1024, 32768) if ON_GPU else (32, 2048)
LB_MS = runtime.demo_points([1024, 2048, 4096, 8192] if ON_GPU else [64, 256])
LB_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
YOURS = "your linear_cross_entropy_forward_backward"
held = {"eager": [], YOURS: []}
w = (torch.randn(LB_V, LB_K, device=DEVICE) / LB_K**0.5).to(LB_DTYPE)
outputs = lambda m: LB_DTYPE.itemsize * (m * LB_K + LB_V * LB_K) + 4  # noqa: E731  loss, dh and dW
for m in tqdm(LB_MS, desc="memory beyond the outputs over rows"):
    h = torch.randn(m, LB_K, device=DEVICE, dtype=LB_DTYPE)
    targets = torch.randint(0, LB_V, (m,), device=DEVICE)
    held["eager"].append(extra_bytes(lambda: fusion_for_training.linear_cross_entropy_backward_eager(h, w, targets)) - outputs(m))
    if YOURS in held:
        try:
            linear_cross_entropy_forward_backward(h, w, targets)  # first call: compilation
            held[YOURS].append(extra_bytes(lambda: linear_cross_entropy_forward_backward(h, w, targets)) - outputs(m))
        except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
            if not not_written(exc):
                raise
            print(f"{YOURS}: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
            del held[YOURS]
    del h, targets
del w
try:
    predicted = {c: [logits_bytes(m, LB_V, c) for m in LB_MS] for c in (256, 1024)}
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
    if not not_written(exc):
        raise
    print(f"logits_bytes is not written yet ({type(exc).__name__}): the plot shows the measurements alone")
    predicted = {}
ms_ = np.array(LB_MS, dtype=float)
fig, ax = plt.subplots(figsize=(7.5, 4.4))
if predicted:
    ax.loglog(ms_, [p[0] / 2**20 for p in predicted[256]], "k--", label="your prediction: the whole logits")
    for c, style in ((256, "k:"), (1024, "k-.")):
        ax.loglog(ms_, [p[1] / 2**20 for p in predicted[c]], style, label=f"your prediction: a chunk of {c} rows")
for (name, vals), style in zip(held.items(), ("x-", "o-")):
    ax.loglog(ms_, np.maximum(np.array(vals, dtype=float), 1) / 2**20, style, label=f"{name}, measured")
ax.set_xticks(LB_MS, [str(m) for m in LB_MS])
ax.minorticks_off()
ax.set(xlabel="rows M", ylabel="MiB beyond the outputs",
       title=f"K = {LB_K}, V = {LB_V}, {str(LB_DTYPE).replace('torch.', '')}"
             + ("" if ON_GPU else " (interpreter: allocations added up)"))
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, m in enumerate(LB_MS):
    line = f"M={m:<5} eager {held['eager'][i] / 2**20:8.1f} MiB = {held['eager'][i] / (4 * m * LB_V):4.1f} x the logits"
    if YOURS in held:
        line += (f"; yours {held[YOURS][i] / 2**20:7.1f} MiB, the float32 logits of about "
                 f"{held[YOURS][i] / (4 * LB_V):.0f} rows")
    print(line)

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-logits-held-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Eager PyTorch holds more than your prediction of the whole logits, by the factor the cell
# printed. Which `M × V` tensors does it hold at its peak, and what do the rows your own function holds at once
# consist of?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-logits-held", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Eager makes the logits in the inputs' dtype, upcasts them to float32, and `F.cross_entropy`'s log-softmax
# keeps its float32 output for the backward; the backward then makes the float32 gradient of the logits and
# casts it back to the inputs' dtype for the two products. Several of these are alive together, so the peak is
# a few times the float32 logits, and it grows with `M`. Mine holds one chunk: its float32 logits and its
# `dlogits` in the inputs' dtype, `C·V·(4 + e)` bytes (the "rows" the cell prints count both, in float32 logits'
# worth). How that grows with `M` is the chunk's sizing: a fixed `C` keeps it flat; a chunk sized as a fraction
# of all the logits (an eighth, say, under the memory bar's quarter) grows with `M` as eager does, a fixed small
# share of it, until a cap on the chunk's bytes stops it.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your fused forward and backward against eager and compiled PyTorch
#
# The cell measures the memory one call allocates (outputs included) against `V` for eager PyTorch (logits,
# upcast to float32, `F.cross_entropy`, autograd's backward) and your function, next to the model: eager holds
# at least the float32 logits and their gradient (`8·M·V`), yours one chunk. On a GPU it also times the largest
# `V` for eager, `torch.compile` of eager, and yours, against the model: the three products at the matmul peak.

# %% nbgrader={"grade": false, "grade_id": "ce-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
CE_M, CE_K = sizes.CE_MK if ON_GPU else (64, 64)
CE_VS = runtime.demo_points(list(sizes.CE_VOCABS) if ON_GPU else [1024, 4096, 16384])
CE_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
fitting = [v for v in CE_VS
           if runtime.fits(1.6 * sizes.eager_cross_entropy_bytes(v, CE_M, CE_K), share=sizes.CE_SHARE)] or CE_VS[:1]
if fitting != CE_VS:
    print(f"V = {', '.join(str(v) for v in CE_VS if v not in fitting)} left out: eager PyTorch's logits and their "
          f"gradient would not fit in this GPU's free memory ({runtime.free_gpu_bytes() / 2**30:.1f} GiB)")
CE_VS = fitting
YOURS = "your linear_cross_entropy_forward_backward"
h = torch.randn(CE_M, CE_K, device=DEVICE, dtype=CE_DTYPE)
ce_mem = {"eager (logits and their gradient in memory)": [], YOURS: []}
for v in tqdm(CE_VS, desc="cross-entropy forward and backward over vocabulary sizes"):
    w = (torch.randn(v, CE_K, device=DEVICE) / CE_K**0.5).to(CE_DTYPE)
    targets = torch.randint(0, v, (CE_M,), device=DEVICE)
    ce_mem["eager (logits and their gradient in memory)"].append(
        extra_bytes(lambda: fusion_for_training.linear_cross_entropy_backward_eager(h, w, targets)))
    if YOURS not in ce_mem:
        continue
    try:
        loss, dh, dw = linear_cross_entropy_forward_backward(h, w, targets)  # first call: compilation
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"{YOURS}: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
        del ce_mem[YOURS]
        continue
    exact = fusion_for_training.linear_cross_entropy_backward_reference(h, w, targets)
    print(f"V={v}: relative error against float64: " + ", ".join(
        f"{name} {rel_err(g, x):.1e}" for name, g, x in zip(("loss", "dh", "dw"), (loss, dh, dw), exact)))
    ce_mem[YOURS].append(extra_bytes(lambda: linear_cross_entropy_forward_backward(h, w, targets)))
    del loss, dh, dw, exact

ce_ms, ce_mem_last = {}, {}
if ON_GPU:
    compiled_ce = runtime.demo_compile(fusion_for_training.linear_cross_entropy_backward_eager, dynamic=False)
    calls = {"eager": lambda: fusion_for_training.linear_cross_entropy_backward_eager(h, w, targets),
             "torch.compile": lambda: compiled_ce(h, w, targets),
             YOURS: lambda: linear_cross_entropy_forward_backward(h, w, targets)}
    ce_ms = timed_in_turns(calls, desc=f"forward and backward, V = {CE_VS[-1]}", rep=20)
    ce_mem_last = {name: extra_bytes(calls[name]) for name in ce_ms}
model_ms = 1e3 * 6 * CE_M * CE_VS[-1] * CE_K / (peak_tflops * 1e12)

vs = np.array(CE_VS, dtype=float)
fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.4))
ax.loglog(vs, 8 * CE_M * vs / 2**20, "k--", label="model: float32 logits and their gradient (8·M·V)")
for (name, vals), style in zip(ce_mem.items(), ("x-", "o-")):
    ax.loglog(vs, np.array(vals) / 2**20, style, label=name)
ax.set_xticks(CE_VS, [str(v) for v in CE_VS])
ax.minorticks_off()
ax.set_xlabel("vocabulary size V")
ax.set_ylabel("MiB allocated by one call (outputs included)")
ax.set_title(f"memory, M = {CE_M}, K = {CE_K}, {str(CE_DTYPE).replace('torch.', '')}"
             + ("" if ON_GPU else "\n(interpreter: allocations added up)"))
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
names = list(ce_ms) or ["eager", "torch.compile", YOURS]
bx.barh(names, [ce_ms.get(n, 0) for n in names], color="C0", label="measured")
bx.axvline(model_ms, color="k", ls="--", label="model: three products at the matmul peak")
bx.set_xlabel(f"ms (M = {CE_M}, K = {CE_K}, V = {CE_VS[-1]})")
bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
bx.legend(fontsize=7)
plt.tight_layout()
plt.show()
for i, v in enumerate(CE_VS):
    yours = f"yours {ce_mem[YOURS][i] / 2**20:8.1f} MiB" if YOURS in ce_mem else "yours not written yet"
    print(f"V={v:<7} eager {ce_mem['eager (logits and their gradient in memory)'][i] / 2**20:9.1f} MiB, {yours}; "
          f"float32 logits {4 * CE_M * v / 2**20:.1f} MiB")
for name in ce_ms:
    print(f"{name:<44} {ce_ms[name]:7.2f} ms, {ce_mem_last[name] / 2**30:6.2f} GiB allocated "
          f"(model {model_ms:.2f} ms)")
if not ON_GPU:
    print("No GPU: time was not measured; memory was counted in the interpreter at the small sizes above.")
del h, w, targets

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: memory is the win, a chunk instead of the logits; time is not, and the parts say why. `dW`'s
# product is the slow one: its reduction dimension is the chunk's rows, and each chunk reads and writes all of
# `dW` again. Larger chunks trade memory for that traffic. `torch.compile` fuses the softmax and its gradient
# into one pass but still writes the logits.
#
# **Reference run.** H100, 8192 × 4096 → 128256 bf16: eager 50.8 ms and 11.7 GiB beyond its inputs;
# `torch.compile` 37.4 ms and 3.0 GiB; the chunked reference 64.5 ms and 1.41 GiB, of which 1.06 GiB are the
# outputs `dh` and `dW` themselves (Liger-Kernel's fused linear cross-entropy, the library version of the same
# idea: 64.1 ms, 1.10 GiB). Per chunk of 512 rows, the portable GEMMs of notebook 04 take 1.08 ms for the
# logits, 1.05 ms for `dh` and 1.80 ms for `dW` (cuBLAS: 0.80, 0.68 and 1.13), and the rows kernel 0.23 ms.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-chunk-size-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Halve the chunk, then double it. What happens to the memory your function allocates and to its
# time, and which term of the cost sets the smallest sensible chunk?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-chunk-size", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Memory beyond the outputs is one chunk's logits and gradient, `C·V·(4 + e)` bytes, so it halves or doubles with
# the chunk. The products' flops do not change, but `dW` (`V × K`) is read and written once per chunk, so halving
# the chunk doubles that traffic, and the `dW` product's reduction dimension (the chunk's rows) gets shorter, so
# each of its tiles does less work per byte. The smallest sensible chunk is where re-reading `dW`, `2·V·K·e`
# bytes per chunk, stays small next to the chunk's own products, `6·C·V·K` flops, at the GPU's ratio of flops to
# bytes.

# %% [markdown] nbgrader={"grade": false, "grade_id": "capstone-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. Capstone: a decoder trained on your kernels
#
# A small Llama-style model, every fused piece of it yours: per layer, RMSNorm, one GEMM for `q, k, v`, causal
# FlashAttention, the output projection and the residual; RMSNorm, one GEMM for SwiGLU's gate and up halves, the
# activation `silu(g) · u`, the down projection and the residual; at the end RMSNorm and the linear layer with
# cross-entropy over a 32768-token vocabulary (`autograder.specs.decoder` holds the same model in plain PyTorch).
# The GEMMs stay cuBLAS's: fusion is about what happens between them. Each kernel goes behind a
# `torch.autograd.Function` whose `forward` saves what its `backward` needs, and that choice is this notebook's
# subject, layer by layer:
#
# | piece | your kernels | saved for the backward | eager PyTorch saves |
# |---|---|---|---|
# | RMSNorm | notebook 02's forward and backward | `x`, the weight (`rstd` recomputed) | `x` and float32 temporaries |
# | attention | notebook 05's forward, 07.flash_attention_backward's backward | `q, k, v, o` and the log-sum-exp | the same (SDPA) |
# | SwiGLU | `silu_mul` and its backward, one pass each | the GEMM's output `[g | u]` | `g`, `u`, `silu(g)` |
# | lm_head + loss | 07.linear_cross_entropy_backward, its products on cuBLAS | `dh`, `dW`: the gradients, made in the forward | the logits, float32 |
#
# The model has no positional encoding: causal attention alone lets it tell positions apart, enough at this size
# (the rotary embedding of real Llamas would be one more elementwise kernel on `q` and `k`). The text is the
# Python standard library's own source, which every Python installation carries: tokens are words, digits,
# punctuation and runs of spaces, the 32767 most frequent of them plus an unknown token.
#
# The cost model for memory: at `B·T` tokens, a layer keeps a few `B·T × d` activations, while the logits alone
# are `B·T × V` in float32, and eager PyTorch keeps them, their softmax and their gradient. With `d = 512` and
# `V = 32768`, the logits weigh as much as about sixty layers' activations.

# %% nbgrader={"grade": false, "grade_id": "corpus", "locked": true, "schema_version": 3, "solution": false}
corpus = load_corpus(32768)
print(corpus.describe())
print(repr(corpus.decode(corpus.tokens[5000:5060])))
logit_share = {}
for d_model in (512, 1024, 4096):
    layer_bytes = 2 * 12 * d_model  # about a dozen bf16 activations of width d per token and layer
    per_token = 3 * 4 * 32768  # float32 logits, their softmax and their gradient
    logit_share[d_model] = per_token / layer_bytes
    print(f"d = {d_model:4}: the logits and their gradient weigh as much as {per_token / layer_bytes:5.1f} "
          f"layers' activations")

# %% [markdown] nbgrader={"grade": false, "grade_id": "decoder-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 07.decoder · The capstone: a decoder trained on your kernels   (about 6 h · ★★★)
#
# **Spec.** `decoder_loss(params, tokens, targets, cfg) -> loss`: `params` a dict of leaf tensors named as
# `dec.parameter_shapes(cfg)` lists them (weights stored `(out, in)`, as `torch.nn.Linear` stores them),
# `tokens` and `targets` `(B, T)` int64, `cfg` a `DecoderConfig`; `loss` the mean cross-entropy over all `B·T`
# tokens, a 0-dimensional float32 tensor whose backward runs your kernels. Paste notebook 02's RMSNorm forward
# and backward and notebook 05's FlashAttention forward into the cell (the grader's environment holds no
# solutions), write the SwiGLU activation's two small kernels, and wrap each piece in a `torch.autograd.Function`
# (static `forward(ctx, ...)` and `backward(ctx, *grads)`).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Each fused piece becomes a `Function`: its `forward` runs your kernel and saves the least its `backward`
# needs; its `backward` is handed the gradient of the piece's output and must return the gradients of its
# inputs *for that gradient*. That holds for the loss too: its gradient is 1 in plain training, but not under
# loss scaling or gradient accumulation, and the grader hands it another value.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Four `Function`s (the skeleton in the cell): RMSNorm (saves `x` and the weight), attention (saves `q, k, v`,
# `o` and the log-sum-exp; its backward is 07.flash_attention_backward), the SwiGLU activation (saves `[g | u]`),
# and the loss, which calls 07.linear_cross_entropy_backward's chunked forward and backward in its `forward` and
# keeps `dh, dW`. The GEMMs, the residuals and the embedding's gather stay PyTorch ops that autograd handles.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The loss's `backward(ctx, dloss)` returns `dh · dloss, dW · dloss, None`: returning `dh, dW` as saved passes at
# a gradient of 1 and fails the grader. Every `backward` returns one value per `forward` input, `None` for the
# non-tensors (`eps`, `heads`, the targets), each gradient in its input's dtype and shape. The attention's `dO`
# arrives in the layout the next op made: make it match what your backward kernel reads.
#
# </details>
# <details><summary>Make it fast</summary>
#
# The loss's three products may be `torch.mm` (cuBLAS) and the chunk's logits bf16, as eager has them, with the
# rows kernel writing `dlogits` over them in place. Nothing in the step may wait for the GPU (no `.item()`, no
# `int(tensor)`): it would leave the GPU idle while Python launches the next kernels. Mind the layouts between
# the GEMMs: `q, k, v` can be strided views of the fused projection's output, and `o` can be written where the
# output projection reads it; every `.contiguous()`, transpose or `torch.stack` there is one more pass over the
# activations, forward or back. A residual can be added in cuBLAS's epilogue with `torch.addmm`.
#
# </details>
#
# **Graded.** Correctness: the loss and every gradient against float64, for a loss's gradient other than 1,
# within a few times eager PyTorch's error; training: AdamW from eager's model on eager's batches ends at eager's
# loss; (GPU) tokens/s at `d = 1024` against `torch.compile` and eager; peak memory against eager's.
#
# <!-- graded: 07.decoder -->

# %% nbgrader={"grade": false, "grade_id": "decoder_loss", "locked": false, "schema_version": 3, "solution": true}
# Paste rmsnorm, rmsnorm_backward (notebook 02) and flash_attention (notebook 05) here, with the kernels they
# launch; then your SwiGLU kernels and the autograd Functions. A skeleton of the pieces:
#
# @triton.jit
# def _silu_mul_kernel(gu_ptr, s_ptr, F, stride_gu, stride_s, BLOCK: tl.constexpr):
#     ...  # one row's block of columns: g and u from the two halves, s = g * sigmoid(g) * u in float32, stored
#
# class RMSNormFunction(torch.autograd.Function):
#     @staticmethod
#     def forward(ctx, x, weight, eps):
#         ctx.save_for_backward(x, weight)
#         ctx.eps = eps
#         return rmsnorm(x, weight, eps)
#
#     @staticmethod
#     def backward(ctx, dy):
#         ...  # dx, dweight from your backward kernels; None for eps
#
# ... CausalAttentionFunction (save q, k, v, o, lse), SiluMulFunction (save gu), EmbeddingFunction,
#     LinearCrossEntropyFunction (the gradients made in the forward; its backward returns them times dloss)
### BEGIN SOLUTION
# include: kernels/rmsnorm.py (_rmsnorm_kernel, rmsnorm)
# include: kernels/rmsnorm_backward.py (_rmsnorm_bwd_kernel, _sum_partials_kernel, _programs, rmsnorm_backward,
#     RMSNormFunction)
# include: kernels/flash_attention.py (_online_softmax_step, _visible, _attend, _flash_attention_kernel,
#     attention_launch_settings, _check_attention_inputs, flash_attention)
# include: kernels/silu_mul.py (_silu_mul_kernel, _silu_mul_backward_kernel, _check, _grid, silu_mul,
#     silu_mul_backward, SiluMulFunction)
# include: kernels/linear_cross_entropy_backward.py (linear_cross_entropy_forward_backward_cublas)
# include: kernels/decoder.py (CausalAttentionFunction, _heads, EmbeddingFunction, LinearCrossEntropyFunction)
### END SOLUTION


def decoder_loss(params: dict, tokens: torch.Tensor, targets: torch.Tensor, cfg: DecoderConfig) -> torch.Tensor:
    """The mean cross-entropy (float32, 0-d) of the decoder over tokens (B, T) int64 against targets (B, T),
    with params named as dec.parameter_shapes(cfg) lists them; its backward runs through your kernels."""
    # 1. check_parameters(params, cfg); b, t = tokens.shape
    # 2. x = the embedding of the B·T tokens, (B·T, d)
    # 3. per layer i (prefix f"layers.{i}."): qkv = rmsnorm(x, attn_norm) @ wqkv.t(); o = causal attention of qkv's
    #    heads; x = x + o @ wo.t(); gu = rmsnorm(x, mlp_norm) @ w_gate_up.t(); x = x + silu_mul(gu) @ w_down.t()
    # 4. h = rmsnorm(x, norm); return the linear cross-entropy of h against lm_head and the flattened targets
    ### BEGIN SOLUTION
    # include body: kernels/decoder.py (decoder_loss)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "decoder_loss-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("07.decoder", decoder_loss)

# %% nbgrader={"grade": true, "grade_id": "test_decoder_correctness", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("07.decoder", decoder_loss, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_decoder_training", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("07.decoder", decoder_loss, criteria=["training"]).assert_passed("training")

# %% nbgrader={"grade": true, "grade_id": "test_decoder_performance", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("07.decoder", decoder_loss, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_decoder_memory", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("07.decoder", decoder_loss, criteria=["memory"]).assert_passed("memory")

# %% [markdown] nbgrader={"grade": false, "grade_id": "capstone-train-md", "locked": true, "schema_version": 3, "solution": false}
# ### Training it: eager, `torch.compile` and yours
#
# The cell trains three copies of the same initial model on the same batches with AdamW: eager PyTorch, its
# `torch.compile`, and your `decoder_loss` (on a GPU: 4 layers of width 512, 8 × 1024 tokens a step, bf16; in the
# interpreter a one-layer model for a few steps, which says nothing about speed). Then it times a forward and
# backward of each, in turns, measures each one's peak memory, and records one of your steps with
# `torch.profiler` to draw its kernels on a timeline: where the GPU is busy, with what, and where it waits.

# %% nbgrader={"grade": false, "grade_id": "capstone-train", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
if ON_GPU:
    CAP = dec.DecoderConfig(vocab=32768, dim=512, layers=4, heads=8, hidden=1408)
    CAP_B, CAP_T, CAP_STEPS, CAP_DTYPE, CAP_LR = 8, 1024, (60 if runtime.small_demos() else 200), torch.bfloat16, 1e-3
else:
    CAP = dec.DecoderConfig(vocab=512, dim=32, layers=1, heads=2, hidden=64)
    CAP_B, CAP_T, CAP_STEPS, CAP_DTYPE, CAP_LR = 2, 32, 4, torch.float32, 1e-2
cap_ids = token_ids(CAP.vocab)
models = {"eager": dec.decoder_loss_eager, "torch.compile": runtime.demo_compile(dec.decoder_loss_eager, dynamic=False),
          "yours": decoder_loss}
curves = {}
for name, loss_fn in models.items():
    params = dec.init_parameters(CAP, dtype=CAP_DTYPE, device=DEVICE, seed=0)
    opt = torch.optim.AdamW(params.values(), lr=CAP_LR, weight_decay=0.0)
    losses = []
    try:
        for tokens, targets in tqdm(batches(cap_ids, CAP_B, CAP_T, CAP_STEPS, seed=2), total=CAP_STEPS,
                                    desc=f"training, {name}"):
            loss = loss_fn(params, tokens.to(DEVICE), targets.to(DEVICE), CAP)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"{name}: left out, its exercise is not written yet ({type(exc).__name__}: {exc})")
        continue
    curves[name] = [float(v) for v in losses]

params = dec.init_parameters(CAP, dtype=CAP_DTYPE, device=DEVICE, seed=0)
tokens, targets = (t.to(DEVICE) for t in next(batches(cap_ids, CAP_B, CAP_T, 1, seed=3)))
leaves = list(params.values())
steps = {name: (lambda fn=fn: torch.autograd.grad(fn(params, tokens, targets, CAP), leaves))
         for name, fn in models.items() if name in curves}
cap_mem = {name: extra_bytes(step) for name, step in steps.items()}
cap_ms, timeline = {}, None
if ON_GPU:
    cap_ms = timed_in_turns(steps, desc="forward and backward", rep=100)
    if "yours" in steps:
        from torch.profiler import ProfilerActivity, profile as torch_profile

        steps["yours"]()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as timeline:
            steps["yours"]()
            torch.cuda.synchronize()

fig, axes = plt.subplots(1, 3, figsize=(17, 4.4))
for name, losses in curves.items():
    axes[0].plot(range(1, len(losses) + 1), losses, label=f"{name} (last: {losses[-1]:.3f})", lw=1)
axes[0].set(xlabel="step", ylabel="training loss (nats)",
            title=f"{CAP.layers} layers, d = {CAP.dim}, V = {CAP.vocab}, {CAP_B} x {CAP_T} tokens")
axes[0].legend(fontsize=8)
names = list(cap_mem)
axes[1].barh(names, [cap_mem[n] / 2**20 for n in names], color="C1")
axes[1].set(xlabel="MiB at the peak of a forward and backward (beyond the parameters)",
            title="memory" + ("" if ON_GPU else " (interpreter: allocations added up)"))
if cap_ms:
    axes[2].barh(list(cap_ms), [CAP_B * CAP_T / cap_ms[n] for n in cap_ms], color="C0")
    axes[2].set(xlabel="k tokens/s, forward and backward", title=peak_label)
else:
    axes[2].text(0.5, 0.5, "no GPU here: speed not measured", ha="center", transform=axes[2].transAxes)
plt.tight_layout()
plt.show()
for name in curves:
    speed = f", {cap_ms[name]:6.2f} ms a step = {CAP_B * CAP_T / cap_ms[name]:6.0f} k tokens/s" if name in cap_ms else ""
    print(f"{name:<14} last loss {curves[name][-1]:.4f}, {cap_mem[name] / 2**20:8.1f} MiB{speed}")
if timeline is not None:
    fig, ax = plt.subplots(figsize=(15, 2.8))
    busy = kernel_timeline(ax, timeline, "one forward and backward of your decoder, GPU kernels")
    plt.tight_layout()
    plt.show()
    print(f"GPU busy {sum(busy.values()):.2f} ms of the {cap_ms['yours']:.2f} ms a step takes: "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in busy.items()))
elif not ON_GPU:
    print("No GPU: time was not measured and there is no kernel timeline; memory was counted in the interpreter.")
del params, leaves, steps

# %% [markdown] nbgrader={"grade": false, "grade_id": "capstone-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for. **The loss curves** lie on one another: your kernels train the same model as eager PyTorch.
# Eager's and the compiled model's own curves move a little from one run to the next (their attention backward
# adds in no fixed order), where deterministic kernels repeat exactly. **Memory** is the clear win: the logits
# never exist, so your step holds a fraction of eager's activations, and less than `torch.compile`'s. **Speed**
# depends on the host as much as on the kernels: a step launches over a hundred kernels, and Triton's launch
# path in Python costs tens of microseconds each, more than many of them run, so the GPU waits for Python. The
# timeline shows it: short bars with gaps between them. Recorded once as a CUDA graph
# (`kernels.decoder.cuda_graphed_step`: the whole step's launches replayed by the driver at once), the same step
# loses those gaps. At a larger width the kernels are longer, and the gaps matter less. Layout matters too: every
# transpose, `.contiguous()` or stack between the GEMMs is one more pass over the activations.
#
# **Reference run.** H100, torch 2.11, Triton 3.6, 8 × 1024 tokens, bf16 (the committed benchmark is in
# `bench/results/training/`):
#
# | | eager | `torch.compile` | the reference solution |
# |---|---|---|---|
# | mean of the last 20 losses after 200 steps | 3.392 | 3.389 | 3.423 |
# | memory beyond the parameters, `d = 512` | 3.82 GiB | 1.06 GiB | 0.69 GiB (0.18 of eager) |
# | memory beyond the parameters, `d = 1024` | 4.64 GiB | 1.61 GiB | 1.25 GiB (0.27 of eager) |
# | k tokens/s, `d = 512` | 617 | 1553 | 860 (GPU busy 4.5 ms of a 9.5 ms step) |
# | k tokens/s, `d = 512`, as one CUDA graph | | | 1809 (1.17x `torch.compile`, 0.98 of its "reduce-overhead" mode) |
# | speed against `torch.compile`, `d = 1024` | | | 0.85 plain, 0.98 graphed |
#
# Eager's and `torch.compile`'s final losses moved by 0.01 to 0.04 between runs. The plain step's ratios moved
# by up to 40% between machines, with the host's speed; the graphed ones by 2%. Two layout choices took the
# reference from 0.50 to 0.55-0.63 of `torch.compile` at `d = 512`: attention reading q, k and v as strided views
# of the fused projection and writing `o` and the gradients where the next GEMM reads them, and each residual
# added in the output projection's epilogue (`torch.addmm`).

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-capstone-speed-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** At `d = 512` your decoder, run step by step, is slower than `torch.compile`'s although each of
# your kernels is at least as good as its counterpart. Using the timeline, say where the time goes, and why
# recording the step as a CUDA graph changes the ranking while it changes no kernel.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-capstone-speed", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The GPU is busy for only part of the step: the timeline shows short kernels separated by gaps. The step is
# a hundred-odd launches, and each Triton launch from Python costs tens of microseconds on the host, longer than
# many of these small kernels run at `d = 512`, so the GPU idles waiting for the next launch; `torch.compile`
# launches fewer kernels through a leaner wrapper. A CUDA graph records the launches once and replays them all
# from the driver, with no Python per kernel: the gaps close and the step's time becomes the kernels' own time,
# where the fused kernels (and the logits never written) win.

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * A fused forward leaves its backward without the intermediates it would have read: each one is saved (its
#   bytes written, held and read back) or recomputed (its flops again). Save what is small or expensive (row
#   statistics, products feeding a nonlinearity), recompute what is large and cheap (elementwise functions).
# * `torch.compile`'s partitioner makes that choice as a minimum cut over the joint forward-backward graph; it
#   recomputes elementwise ops but cannot invent a cheaper statistic, such as the log-sum-exp that makes
#   attention's `P` one `exp` away.
# * FlashAttention's backward rebuilds `P` from `lse`, reduces `dS`'s softmax term to `delta = rowsum(dO ∘ O)`,
#   and splits into a key-parallel kernel (`dK`, `dV`) and a query-parallel one (`dQ`), computing `S` twice
#   instead of adding `dQ` with atomics: exact, deterministic, `O(N)` memory.
# * Where two reductions run along different axes of one large intermediate (the logits' rows for `lse`, its
#   columns for `dW`), chunk the other axis and finish the backward of each chunk while it exists: memory of a
#   chunk, and the cost of re-reading what the chunks accumulate into.
# * A model assembled from fused kernels trains like eager PyTorch in a fraction of its memory. Its speed also
#   depends on what fusion cannot fix: a small model's step is many short kernels, and the host's launches set
#   the pace unless the whole step is recorded as one CUDA graph.
#
# ## Further reading
#
# * Dao, *FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning*, 2023
#   ([arXiv:2307.08691](https://arxiv.org/abs/2307.08691)): its backward pass (Algorithm 2) is the one derived
#   in section 2, with `dQ` added atomically; Dao et al., *FlashAttention*
#   ([arXiv:2205.14135](https://arxiv.org/abs/2205.14135)), and Shah et al., *FlashAttention-3*
#   ([arXiv:2407.08608](https://arxiv.org/abs/2407.08608)), whose producer and consumer warp groups (warp
#   specialisation) and ping-pong scheduling between two consumer groups overlap the softmax with the products.
# * Triton's [fused attention tutorial](https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html),
#   forward and backward.
# * [Liger-Kernel](https://github.com/linkedin/Liger-Kernel) (Hsu et al., [arXiv:2410.10989](https://arxiv.org/abs/2410.10989)):
#   its fused linear cross-entropy chunks the rows and finishes each chunk's backward in the forward, as section 3
#   does.
# * PyTorch, [extending autograd with `torch.autograd.Function`](https://pytorch.org/docs/stable/notes/extending.html),
#   [saved-tensor hooks](https://pytorch.org/tutorials/intermediate/autograd_saved_tensors_hooks_tutorial.html),
#   [`torch.compile`](https://pytorch.org/docs/stable/generated/torch.compile.html),
#   [`torch.library.triton_op`](https://pytorch.org/docs/stable/library.html) and
#   [`torch.profiler`](https://pytorch.org/docs/stable/profiler.html).
# * AOTAutograd's min-cut partitioner, by its author:
#   [Min-cut optimal recomputation with AOTAutograd](https://dev-discuss.pytorch.org/t/min-cut-optimal-recomputation-i-e-activation-checkpointing-with-aotautograd/467);
#   and the idea it automates, Chen et al., *Training Deep Nets with Sublinear Memory Cost*
#   ([arXiv:1604.06174](https://arxiv.org/abs/1604.06174)).
# * The models the capstone imitates: Touvron et al., *LLaMA* ([arXiv:2302.13971](https://arxiv.org/abs/2302.13971))
#   and *Llama 2* ([arXiv:2307.09288](https://arxiv.org/abs/2307.09288)); Llama Team, *The Llama 3 Herd of Models*
#   ([arXiv:2407.21783](https://arxiv.org/abs/2407.21783)).
