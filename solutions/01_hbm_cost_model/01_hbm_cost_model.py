# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 01 · The HBM cost model: why fusion pays
#
# *About 3-5 h · difficulty ★☆☆ · prerequisites: PyTorch; no CUDA or Triton experience assumed.*
#
# Most operators in a transformer's forward pass do a handful of arithmetic operations per byte they
# touch. On a modern GPU that makes them wait on memory, not on arithmetic, and it makes one number
# predict their run time: **the bytes they move through HBM** (high-bandwidth memory, the GPU's main memory).
# Fusion is the art of moving fewer of them.
#
# In this notebook you will
# 1. measure your GPU's two ceilings (copy bandwidth and matmul rate) and draw its roofline;
# 2. write the cost model of a chain of elementwise operations, unfused and fused (**exercise 01.cost_model**);
# 3. test the model against a chain of 1 to 8 operations run by eager PyTorch, by `torch.compile` and by a
#    hand-written Triton kernel, and against tiny tensors where launches, not bytes, set the time;
# 4. count the bytes a Llama-2-7B decoder layer's elementwise and normalisation ops move
#    (**exercise 01.layer_traffic**);
# 5. read one Triton kernel line by line and see which elements each of its programs touches;
# 6. debug a kernel without the grader (the interpreter, printing from inside a kernel, the compiler's common
#    errors) and repair a broken one (**01.warmup_repair**), then write five small warm-up kernels
#    (**01.warmup_copy** to **01.warmup_running_max**);
# 7. write your first real fused kernel, bias + SiLU + scale (**exercise 01.fused_chain**), graded on
#    correctness, precision, measured bandwidth and fusion.
#
# **No GPU?** The course then runs Triton kernels in Triton's interpreter on the CPU. Everything is
# graded for correctness there, but nothing about speed can be measured: the plots show the model with an
# H200's measured figures instead, and say so. Terms in **bold** are defined where they first appear; the
# course glossary (`docs/glossary.md`) collects them.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined
import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.teach.plots import launch_seconds, peaks, roofline
from autograder.teach.programs import draw_programs
from kernels import op_chain as chain

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()

# %% [markdown] nbgrader={"grade": false, "grade_id": "roofline-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. Two ceilings and the roofline
#
# ![](figures/memory_hierarchy.svg)
#
# A GPU is made of many **streaming multiprocessors (SMs)**, each running many threads at once with its own
# registers and a small, fast scratchpad (**shared memory**); all of them share an L2 cache and, behind it, the
# HBM that holds every tensor. A kernel's inputs start in HBM and its outputs end there, so the bytes it moves
# through HBM are the part of its cost it cannot avoid.
#
# A kernel can go no faster than either of two limits:
#
# * the **memory ceiling**: the bytes it must move through HBM divided by the bandwidth `BW`;
# * the **compute ceiling**: the floating-point operations it must do divided by the arithmetic rate `P`.
#
# The ratio of the two rates, `I* = P / BW` in FLOPs per byte, belongs to the machine: it is its **balance
# point**, the *ridge point* of the roofline. A kernel has its own **arithmetic intensity** `I = FLOPs / bytes`:
# the FLOPs it does over the bytes it moves. Below the ridge point (`I < I*`) the memory ceiling is the lower
# one and the kernel is memory-bound; above it, compute-bound.
# The profile printed above holds both ceilings *measured* on this machine (a large device-to-device copy
# and an 8192³ bf16 matrix product), because datasheet numbers are not what code reaches.
#
# Where do everyday operators sit? An elementwise `y = a * x + b` in bf16 does 2 FLOPs while it reads
# 2 bytes and writes 2: `I = 0.5`. RMSNorm does about 4 FLOPs per element for 4 bytes: `I ≈ 1`. A square
# matmul of size n does `2n³` FLOPs over `3·2n²` bytes: `I = n/3`, which passes the ridge point only for
# n in the hundreds. The ridge point of an H100 or H200 sits at a few hundred FLOP/byte, so everything
# but the matmuls lives far down the slanted part of the roof.

# %% nbgrader={"grade": false, "grade_id": "roofline-plot", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
points = [("elementwise a*x+b, bf16", 0.5, None), ("RMSNorm, bf16", 1.0, None)]
if ON_GPU:
    from autograder.measure.timing import bench_ms

    for n in (512, 2048, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        ms = bench_ms(lambda: a @ b)
        points.append((f"matmul {n}³, bf16", n / 3, 2 * n**3 / (ms * 1e-3) / 1e12))
    x = torch.randn(2**27, device="cuda", dtype=torch.bfloat16)
    ms = bench_ms(lambda: x * 1.5 + 0.5)  # two eager kernels: each reads and writes x
    # 2 FLOPs per element over 2 kernels x (read + write): 4 element-sized transfers
    points.append(("eager x*1.5+0.5 (2 kernels)", 2 / (4 * x.element_size()), 2 * x.numel() / (ms * 1e-3) / 1e12))
    del a, b, x

fig, ax = plt.subplots(figsize=(8, 5))
roofline(ax, profile, points)
ax.set_title("Roofline" + ("" if ON_GPU else " — no GPU here: an H200's measured peaks, for illustration"))
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "model-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. The cost model of an elementwise chain
#
# Take a chain of `n` elementwise operations on a tensor of `S` bytes, e.g. `x → x·1.25 → +0.5 → sin → …`.
#
# **Unfused**, every operation is its own kernel. Each one reads the `S` bytes its predecessor wrote,
# writes `S` bytes for its successor, and pays a launch overhead `L` (the time the GPU spends starting a
# kernel, plus the gap between two of them):
#
# $$T_\text{unfused}(n) = n \left( \frac{2S}{BW} + L \right)$$
#
# **Fused**, one kernel loads each element once, applies all `n` operations in registers and stores the
# result once:
#
# $$T_\text{fused}(n) = \frac{2S}{BW} + L$$
#
# The arithmetic is free as long as the chain stays far below the ridge point, which elementwise chains
# of any sensible length do. So the model predicts a speed-up of `n` for large tensors, and for tiny
# tensors, where `L` dominates, a speed-up of `n` as well, for a different reason: `n` launches against one.
#
# The model predicts before anything is measured: write it now, and section 3 times the real thing against it.

# %% [markdown] nbgrader={"grade": false, "grade_id": "cost-model-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.cost_model · The cost model of a chain   (about 15 min · ★☆☆)
#
# **Spec.** `chain_times(n_ops, size_bytes, bandwidth, launch_s) -> (t_unfused, t_fused)`: the two formulas
# above, in **seconds**, for `n_ops` ≥ 1 operations on a tensor of `size_bytes` bytes, with `bandwidth` in
# bytes per second and `launch_s` in seconds. Python numbers in, a tuple of two floats out.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Count one kernel at a time: what does it read, what does it write, and what does starting it cost? Then count
# the kernels: `n` unfused, one fused.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# One pass over the tensor costs `2 * size_bytes / bandwidth` seconds (a read and a write of `S` bytes). The
# unfused chain pays a pass and a launch per operation; the fused kernel pays one of each. Return the two
# numbers as a tuple, unfused first.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `one_pass = 2 * size_bytes / bandwidth`, then `n_ops * (one_pass + launch_s)` and `one_pass + launch_s`.
# The traps: forgetting the factor 2, or the launch of the fused kernel. The plots below draw *your* model
# against the measurements, so a wrong formula shows there too.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.cost_model -->

# %% nbgrader={"grade": false, "grade_id": "chain_times", "locked": false, "schema_version": 3, "solution": true}
def chain_times(n_ops, size_bytes, bandwidth, launch_s):
    """Predicted (unfused, fused) time in seconds of an n-op elementwise chain on size_bytes of data."""
    ### BEGIN SOLUTION
    one_pass = 2 * size_bytes / bandwidth  # read S bytes and write S bytes
    return n_ops * (one_pass + launch_s), one_pass + launch_s
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_cost_model", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.cost_model", chain_times, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "chain-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Testing the model: a chain of 1 to 8 operations
#
# `kernels/op_chain.py` defines eight cheap elementwise operations (`x·1.25`, `+0.5`, `sin`, `x·x`,
# `sigmoid`, `−0.25`, `abs`, `cos`). The first `n` of them run three ways:
#
# * **eager** PyTorch: `n` kernels, `n` round trips through HBM;
# * **`torch.compile`**: Inductor fuses the chain into one generated Triton kernel;
# * **Triton by hand**: `op_chain`, one kernel whose loop over the operations is unrolled at compile time.
#
# The tensor is 256 MiB of fp32, several times larger than any L2 cache, so each pass really goes to HBM.
# Times are medians from `triton.testing.do_bench`, which warms up and flushes L2 between runs. The model
# lines use *your* `chain_times` with this GPU's measured copy bandwidth and launch time.

# %% nbgrader={"grade": false, "grade_id": "chain-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
N_OPS = runtime.demo_points(range(1, chain.MAX_OPS + 1))  # a few of them when the grader runs this
bw_gbps, _, peak_label = peaks(profile)
launch_s = launch_seconds(profile)
size = 2**26 * 4  # bytes: 2**26 fp32 elements = 256 MiB

measured = {"eager": [], "compiled": [], "triton": []}
if ON_GPU:
    x = torch.randn(size // 4, device="cuda")
    for n in tqdm(N_OPS, desc="timing chains (torch.compile compiles each length once)"):
        for version, ms in chain.time_versions(x, n).items():
            measured[version].append(ms)
    del x

from autograder.measure.timing import not_written

try:
    model = [chain_times(n, size, bw_gbps * 1e9, launch_s) for n in N_OPS]
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"chain_times is not written yet ({type(exc).__name__}): the plot has no model lines until you write "
          "exercise 01.cost_model above and run this cell again")
    model = []
fig, ax = plt.subplots(figsize=(8, 5))
if model:
    ax.plot(N_OPS, [1e3 * u for u, _ in model], "k--", label="model, unfused")
    ax.plot(N_OPS, [1e3 * f for _, f in model], "k:", label="model, fused")
for version, style in (("eager", "o-"), ("compiled", "s-"), ("triton", "^-")):
    if measured[version]:
        ax.plot(N_OPS, measured[version], style, label=f"measured: {version}")
ax.set_xlabel("operations in the chain (n)")
ax.set_ylabel("time (ms)")
ax.set_title(f"256 MiB fp32, {peak_label}" + ("" if ON_GPU else " — model only, no GPU here"))
ax.legend()
ax.grid(alpha=0.3)
plt.show()
if ON_GPU and model:
    print(f"{'n':>2} {'eager ms':>9} {'model':>7} {'compile ms':>11} {'triton ms':>10} {'model':>7} {'speed-up':>8}")
    for n, e, c, t, (mu, mf) in zip(N_OPS, measured["eager"], measured["compiled"], measured["triton"], model):
        print(f"{n:>2} {e:9.3f} {1e3 * mu:7.3f} {c:11.3f} {t:10.3f} {1e3 * mf:7.3f} {e / t:7.1f}x")

# %% [markdown] nbgrader={"grade": false, "grade_id": "chain-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for:
#
# * The eager line climbs by one full pass over the tensor per operation, as the model says: each op is
#   memory-bound, so how clever its kernel is makes no difference.
# * Both fused versions stay flat: adding a `sin` or a `sigmoid` costs nothing measurable while the data
#   are in registers. The hand-written kernel should sit on the fused model line, at the copy bandwidth.
# * At n = 8 both fused versions slow down a little: the chain now holds `sin`, `sigmoid` and `cos`, tens
#   of instructions each, and at full bandwidth the GPU has time for only a few dozen instructions per
#   fp32 element (its fp32 rate over the elements per second the copy bandwidth delivers). The model
#   assumes arithmetic is free; here it stops being quite free, and the kernel leaves the memory roof.
# * `torch.compile` finds this fusion by itself. Compilers fuse chains like this one; you write a kernel by
#   hand for the patterns they miss, which the later notebooks are about.

# %% [markdown] nbgrader={"grade": false, "grade_id": "launch-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. Tiny tensors: when launches set the time
#
# The model has two terms. For small `S` the bandwidth term vanishes and what is left is `n·L` unfused
# against `L` fused. The two terms are equal at `S* = L·BW/2`: a few megabytes on a current GPU. Below it a
# kernel is **launch-bound**, and fusion saves launches rather than bytes (so do CUDA graphs, which
# shrink `L` itself; notebook 03 returns to that).
#
# Below: the 8-op chain over sizes from 4 KiB to 256 MiB, measured against your model.

# %% nbgrader={"grade": false, "grade_id": "launch-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
sizes = runtime.demo_points([2**k for k in range(12, 29, 2)])  # bytes, 4 KiB .. 256 MiB
n = chain.MAX_OPS
eager_ms, fused_ms = [], []
if ON_GPU:
    for s in tqdm(sizes, desc="timing sizes"):
        x = torch.randn(s // 4, device="cuda")
        eager_ms.append(bench_ms(lambda: chain.op_chain_eager(x, n)))
        fused_ms.append(bench_ms(lambda: chain.op_chain(x, n)))
    del x

fig, ax = plt.subplots(figsize=(8, 5))
if model:  # chain_times is written (the cell above says so otherwise)
    ax.loglog(sizes, [1e3 * chain_times(n, s, bw_gbps * 1e9, launch_s)[0] for s in sizes], "k--",
              label="model, unfused")
    ax.loglog(sizes, [1e3 * chain_times(n, s, bw_gbps * 1e9, launch_s)[1] for s in sizes], "k:", label="model, fused")
if ON_GPU:
    ax.loglog(sizes, eager_ms, "o-", label=f"measured: eager ({n} kernels)")
    ax.loglog(sizes, fused_ms, "^-", label="measured: fused Triton (1 kernel)")
s_star = launch_s * bw_gbps * 1e9 / 2
ax.axvline(s_star, color="gray", ls=":")
ax.annotate(f"S* = L·BW/2 ≈ {s_star / 2**20:.1f} MiB", (s_star, ax.get_ylim()[1] / 3), ha="right", fontsize=8)
ax.set_xlabel("tensor size (bytes)")
ax.set_ylabel("time (ms)")
ax.set_title(f"{n}-op chain, {peak_label}" + ("" if ON_GPU else " — model only, no GPU here"))
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "llama-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. Quantify the win: one Llama-2-7B decoder layer
#
# Llama-2-7B has `hidden = 4096`, an MLP of width `intermediate = 11008`, and 32 decoder layers. Take a
# forward pass at batch 4, sequence 2048, in bf16 (2 bytes per element), and count the HBM traffic of the
# layer's **elementwise and normalisation** operations only (matmuls and attention are the subject of
# later notebooks). Write `|x| = batch·seq·hidden·bytes` for one residual-stream activation and
# `|h| = batch·seq·intermediate·bytes` for one tensor of the MLP's width. Ignore anything with only
# `batch·seq` or `hidden` elements (statistics, weights): they are below 0.1% of the traffic.
#
# The layer runs, in order: RMSNorm → attention → residual add → RMSNorm → gate and up projections →
# SiLU(gate) · up → down projection → residual add.
#
# **Unfused**, in a simple model of eager PyTorch:
# * each RMSNorm is 3 kernels: the mean of squares reads `x`; the division by the RMS reads `x` and
#   writes the result; the multiplication by the weight reads that and writes `y`;
# * each residual add reads two activations and writes one;
# * SwiGLU's activation is 2 kernels: SiLU reads `gate` and writes its result; the product with `up`
#   reads two tensors and writes one.
#
# The RMSNorm line is a **simplified model** and a lower bound. RMSNorm written op by op in bf16 with its
# statistic in float32, as real code writes it, launches about 8 kernels (an upcast copy, the square, the mean,
# `+ eps`, the reciprocal square root, two multiplications and a downcast) and moves about `18|x|`, partly in
# float32 tensors twice the size of `x`: notebook 06 counts them with the profiler. The simple model is enough to
# see where the bytes go; the real count only makes fusion pay more.
#
# **Fused**: each RMSNorm is one kernel that reads `x` once and writes `y` once; the SwiGLU activation is
# one kernel that reads `gate` and `up` and writes their product; the residual adds are unchanged.

# %% [markdown] nbgrader={"grade": false, "grade_id": "layer-traffic-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.layer_traffic · The bytes of one decoder layer   (about 20 min · ★☆☆)
#
# **Spec.** `layer_traffic(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth)` returns
# `(unfused_bytes, fused_bytes, saving_s)`: the HBM bytes of the layer's elementwise and normalisation ops under
# the simple model above, unfused and fused, and the time in seconds the fused layer saves at `bandwidth` bytes
# per second. All arguments are Python numbers.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Work in bytes of whole tensors. Two sizes are enough, `|x|` and `|h|`; every kernel of the list above moves a
# small whole number of each.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Compute `x = batch * seq * hidden * bytes_per_elem` and `h` likewise with `intermediate`. Then one line per
# op, written as "reads …, writes …": an RMSNorm, a residual add, the SwiGLU activation, unfused and fused. Sum
# them (two RMSNorms and two residual adds per layer) and divide the difference by the bandwidth.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Unfused RMSNorm `5x`, fused `2x`; residual add `3x` either way; SwiGLU unfused `2h + 3h`, fused `3h`. The
# traps: counting elements instead of bytes, using `hidden` for the MLP's tensors, and a saving in bytes rather
# than seconds. It is graded on other model shapes too, so nothing may be specific to 4096 or 11008.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.layer_traffic -->

# %% nbgrader={"grade": false, "grade_id": "layer_traffic", "locked": false, "schema_version": 3, "solution": true}
def layer_traffic(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth):
    """HBM bytes of one decoder layer's elementwise + norm ops, unfused and fused, and the time saved."""
    ### BEGIN SOLUTION
    x = batch * seq * hidden * bytes_per_elem
    h = batch * seq * intermediate * bytes_per_elem
    rmsnorm_unfused, rmsnorm_fused = 5 * x, 2 * x  # model: read x | read x, write x/rms | read, write y
    residual_add = 3 * x  # read two activations, write one
    swiglu_unfused, swiglu_fused = 2 * h + 3 * h, 3 * h  # silu(g), then g*u | one kernel: read g, u; write
    unfused = 2 * rmsnorm_unfused + 2 * residual_add + swiglu_unfused
    fused = 2 * rmsnorm_fused + 2 * residual_add + swiglu_fused
    return unfused, fused, (unfused - fused) / bandwidth
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_layer_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.layer_traffic", layer_traffic, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": false, "grade_id": "llama-use", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
from autograder.measure.timing import not_written

try:
    unfused, fused, saving = layer_traffic(4, 2048, 4096, 11008, 2, bw_gbps * 1e9)
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"layer_traffic is not written yet ({type(exc).__name__}): write exercise 01.layer_traffic above, then run this cell")
else:
    print(f"per layer: unfused {unfused / 1e9:.2f} GB, fused {fused / 1e9:.2f} GB "
          f"({unfused / fused:.2f}x less traffic)")
    print(f"at {bw_gbps:.0f} GB/s ({peak_label}): {1e6 * saving:.0f} us saved per layer, "
          f"{1e3 * 32 * saving:.1f} ms per forward pass of 32 layers")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.barh(["unfused", "fused"], [unfused / 1e9, fused / 1e9], color=["C3", "C2"])
    ax.set_xlabel("GB moved per decoder layer (elementwise + norm ops)")
    ax.set_title("Llama-2-7B, batch 4, seq 2048, bf16")
    plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "kernel-md", "locked": true, "schema_version": 3, "solution": false}
# ## 6. Reading a Triton kernel: a scaled vector add
#
# Before you write a kernel, read one whole. This one computes `out = alpha · x + y` for two vectors of `n`
# elements. How Triton organises the work:
#
# * A **program** is one instance of the `@triton.jit` function. The launcher starts a **grid** of them; each
#   handles one **block** (a **tile**, in 2-D) of `BLOCK` consecutive elements, and `tl.program_id(0)` tells a
#   program which block is its own. Programs run in any order, many at once, on different SMs.
# * Inside a program, code works on whole blocks at a time: `tl.arange(0, BLOCK)` is the vector `0, 1, …,
#   BLOCK-1`, and every operation on it runs on all its elements (its **lanes**) together.
# * Pointers are plain addresses: `x_ptr + offs` is a block of addresses, one per lane, and `tl.load` /
#   `tl.store` read and write HBM at those addresses.
# * `BLOCK` is a **`tl.constexpr`**: a compile-time constant, so the compiler knows the block's size and
#   compiles one version of the kernel per value. Triton requires it to be a power of two.
# * `num_warps` (a launch option, not a kernel argument) says how many **warps** run one program on the GPU: a
#   warp is 32 threads that execute the same instruction together, so `num_warps=4` spreads a block over 128
#   threads. For an elementwise kernel it changes speed, never the result. A reduction is different: the layout
#   decides in which order a block's lanes are added, and float addition is not associative, so a float `tl.sum`
#   can change in its last bits with `num_warps` (or the block size). The interpreter ignores `num_warps`.
#
# ![](figures/program_grid.svg)

# %% nbgrader={"grade": false, "grade_id": "worked-kernel", "locked": true, "schema_version": 3, "solution": false}
@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)  # which program am I: 0, 1, ..., grid[0] - 1
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # the indices of my block: BLOCK of them, one per lane
    mask = offs < n  # the last block runs past the end of the vector: those lanes must do nothing
    x = tl.load(x_ptr + offs, mask=mask)  # read my block from HBM; masked-off lanes read nothing
    y = tl.load(y_ptr + offs, mask=mask)
    out = alpha * x.to(tl.float32) + y.to(tl.float32)  # compute in registers, in float32 whatever the storage
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)  # round once, write back to HBM


def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float, BLOCK: int = 1024) -> torch.Tensor:
    """alpha * x + y for contiguous vectors of the same shape: one kernel, one read of each, one write."""
    assert x.shape == y.shape and x.is_contiguous() and y.is_contiguous()
    out = torch.empty_like(x)  # the launcher allocates the output ...
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)  # ... decides how many programs: enough blocks to cover n elements ...
    _scaled_add_kernel[grid](x, y, out, alpha, n, BLOCK=BLOCK, num_warps=4)  # ... and launches them
    return out

# %% [markdown] nbgrader={"grade": false, "grade_id": "worked-run-md", "locked": true, "schema_version": 3, "solution": false}
# Tensors are passed to the kernel as pointers to their first element; Python numbers (`alpha`, `n`) as
# scalars. Run it and compare with torch: on 10 000 elements and `BLOCK = 1024`, ten programs run, the last
# with only 784 of its 1024 lanes switched on.

# %% nbgrader={"grade": false, "grade_id": "worked-run", "locked": true, "schema_version": 3, "solution": false}
x = torch.randn(10_000, device=DEVICE)
y = torch.randn(10_000, device=DEVICE)
out = scaled_add(x, y, 0.5)
print(f"programs: {triton.cdiv(x.numel(), 1024)}, max |scaled_add - torch| = {(out - (0.5 * x + y)).abs().max().item():.1e}")
torch.testing.assert_close(out, 0.5 * x + y)

# %% [markdown] nbgrader={"grade": false, "grade_id": "draw-md", "locked": true, "schema_version": 3, "solution": false}
# ### Seeing the programs
#
# `draw_programs(kernel, grid, *args, **kwargs)` runs one small launch in Triton's interpreter (even on a GPU
# machine) and draws each tensor as a row of cells, coloured and numbered by the program that read or wrote
# them. Hatched cells are lanes that were masked off; red crossed cells are accesses **outside the tensor**
# (recorded, not performed). Here: 10 elements, blocks of 4, so 3 programs, the last one half empty.

# %% nbgrader={"grade": false, "grade_id": "draw-good", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
xs, ys, outs = torch.arange(10.0), torch.ones(10), torch.empty(10)
draw_programs(_scaled_add_kernel, (3,), xs, ys, outs, 0.5, 10, BLOCK=4)

# %% [markdown] nbgrader={"grade": false, "grade_id": "draw-bad-md", "locked": true, "schema_version": 3, "solution": false}
# Now the same kernel with one character wrong: `offs <= n` instead of `offs < n`. Program 2 switches on one
# lane too many, and reads and writes the element just past the end of each vector. On a GPU that write lands
# in whatever memory follows the tensor: often unused padding, sometimes another tensor, so the bug can stay
# silent for months. The drawing shows it at once.

# %% nbgrader={"grade": false, "grade_id": "draw-bad", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
@triton.jit
def _scaled_add_wrong_mask(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n  # BUG: lane n is past the end
    out = alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, out, mask=mask)


fig = draw_programs(_scaled_add_wrong_mask, (3,), xs, ys, outs, 0.5, 10, BLOCK=4)
print(fig.recording.summary())
fig

# %% [markdown] nbgrader={"grade": false, "grade_id": "debug-md", "locked": true, "schema_version": 3, "solution": false}
# ## 7. Debugging a kernel without the grader
#
# The grader tells you *that* a kernel is wrong. To find out *why*, look inside it. Three tools do most of the
# work: running the kernel in Triton's **interpreter**, where it is plain Python you can print from and stop in;
# `tl.static_print` and `tl.device_print`, which also work on a GPU; and reading the compiler's errors, of which
# five come up again and again. The section ends with a kernel that has two bugs, for you to repair.
#
# ### The interpreter
#
# With `TRITON_INTERPRET=1` in the environment, `@triton.jit` does not compile a kernel: each launch runs the
# kernel's Python code once per program, one program after another, on NumPy arrays in the CPU's memory. It is
# far slower, and it knows nothing of warps or shared memory, but every value is a real array you
# can print, and an access outside a tensor is reported instead of corrupting memory.
#
# Triton reads the variable when `@triton.jit` decorates a function, so it must be set before any kernel is
# defined. The set-up cell's `import autograder` does this for you on a machine without a CUDA GPU: that is why
# this notebook runs everywhere. On a GPU machine, to debug, restart the Jupyter kernel and run this as the
# very first cell, before the set-up cell:
#
# ```python
# import os
# os.environ["TRITON_INTERPRET"] = "1"  # before `import autograder`, `import triton` and any @triton.jit
# ```
#
# The course then puts its tensors on the CPU (`DEVICE` is `"cpu"`) and grades correctness only. Delete the
# line and restart the kernel to go back to compiled kernels. From a terminal, `TRITON_INTERPRET=1 python
# my_script.py` does the same.
#
# In the interpreter a plain `print` inside a kernel prints the real values of one program's block, and
# `breakpoint()` opens Python's debugger inside it. Stop in one program only, or you will step through all of
# them:
#
# ```python
# @triton.jit
# def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
#     pid = tl.program_id(axis=0)
#     offs = pid * BLOCK + tl.arange(0, BLOCK)
#     mask = offs < n
#     if pid == 3:
#         breakpoint()  # interpreter only: `p offs`, `p mask`, `n` for the next line, `c` to go on
#     ...
# ```
#
# (This is shown, not run: a breakpoint would stop "Run All". A compiled kernel cannot stop at a breakpoint.)
# The cell below prints the block of program 2 of the worked kernel's layout: 10 elements, blocks of 4.

# %% nbgrader={"grade": false, "grade_id": "debug-print", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
@triton.jit
def _peek_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=-1.0)
    if pid == 2:  # one program only
        print("program 2: offs, mask, x =", offs, mask, x)


_peek_kernel[(3,)](torch.arange(10.0, device=DEVICE), 10, BLOCK=4)
if not runtime.interpreted():
    torch.cuda.synchronize()  # a compiled kernel's prints arrive when it has finished

# %% [markdown] nbgrader={"grade": false, "grade_id": "debug-prints-md", "locked": true, "schema_version": 3, "solution": false}
# In the interpreter that is one line, with whole arrays. Compiled on a GPU, Triton turns a `print` inside a
# kernel into `tl.device_print`, below, and the line comes out once per element instead.
#
# ### `tl.static_print` and `tl.device_print`
#
# * `tl.static_print(...)` runs while the kernel is **compiled**: it prints what the compiler knows, such as a
#   block's dtype and shape and the value of a `tl.constexpr`, never the data. Compiled
#   kernels are cached, so it prints only the first time a kernel is compiled for those arguments. In the
#   interpreter nothing is compiled: it prints each program's values, like `print`.
# * `tl.device_print("prefix", x)` runs while the kernel **runs**, on the GPU: one line per element of `x`,
#   tagged with the program id and the element's index, in no particular order (and a line can repeat where
#   several threads hold the same element). Guard it with an `if` on the program id, or it prints every
#   element of every program. The lines come from the GPU's own print buffer: in JupyterLab they appear under
#   the cell, or in the terminal that started Jupyter on some set-ups. In the interpreter it prints one line
#   per program, with the whole block.

# %% nbgrader={"grade": false, "grade_id": "debug-static-device-print", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
@triton.jit
def _print_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.static_print("static_print: x is", x, "and BLOCK is", BLOCK)
    if pid == 1:
        tl.device_print("device_print x", x)


_print_kernel[(2,)](torch.arange(6.0, device=DEVICE), 6, BLOCK=4)
if not runtime.interpreted():
    torch.cuda.synchronize()

# %% [markdown] nbgrader={"grade": false, "grade_id": "debug-errors-md", "locked": true, "schema_version": 3, "solution": false}
# ### Five common compile errors, and a PyTorch habit
#
# A kernel is compiled at its first launch, so its errors come from the launch line. Triton's message names the
# line of the kernel and what is wrong with it. The interpreter compiles nothing, but it reports most of the same
# mistakes while it runs, with the same words. Two it lets through: a Python `if` on a block runs there with one
# decision for the whole block, a silent wrong answer where the compiler refuses the kernel; and its `tl.dot`
# has no smallest tile, where the compiler for NVIDIA GPUs wants at least 16 along the reduced dimension K. Each
# cell below makes one mistake for real, catches the error, prints the end of Triton's own message (or what
# happened instead), then the fix.

# %% nbgrader={"grade": false, "grade_id": "debug-errors-helpers", "locked": true, "schema_version": 3, "solution": false}
def launch_error(launch):
    """Call launch() and return the exception it raised, or None if it ran."""
    try:
        launch()
    except Exception as exc:  # noqa: BLE001  the cells below show whichever error comes, compiled or interpreted
        return exc
    return None


def show_error(exc, fix, instead=lambda: ""):
    """Print the error's type and the end of Triton's message (or that none came, and instead()), then the fix."""
    if exc is None:
        print("no error was raised here. " + instead())
    else:
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        print(f"{type(exc).__name__}: " + "\n    ".join(lines[-6:]))
    print(f"fix: {fix}")

# %% nbgrader={"grade": false, "grade_id": "debug-error-arange", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# 1. tl.arange with a bound known only at run time.
@triton.jit
def _runtime_arange_kernel(x_ptr, y_ptr, n):
    offs = tl.arange(0, n)  # n is a run-time argument: a block's size must be known when compiling
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


x = torch.randn(64, device=DEVICE)
show_error(launch_error(lambda: _runtime_arange_kernel[(1,)](x, torch.empty_like(x), 64)),
           "a compile-time block, BLOCK: tl.constexpr, and a mask for the lanes past n: "
           "offs = pid * BLOCK + tl.arange(0, BLOCK); mask = offs < n")

# %% nbgrader={"grade": false, "grade_id": "debug-error-power-of-two", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# 2. A block size that is not a power of two.
@triton.jit
def _block_1000_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


x = torch.randn(3000, device=DEVICE)
show_error(launch_error(lambda: _block_1000_kernel[(3,)](x, torch.empty_like(x), 3000, BLOCK=1000)),
           "BLOCK = 1024 (triton.next_power_of_2(1000)) and a mask: the grid is triton.cdiv(n, BLOCK)")

# %% nbgrader={"grade": false, "grade_id": "debug-error-if", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# 3. A Python `if` on a block of values: which lane decides?
@triton.jit
def _branch_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if x > 0:  # wanted: double the positive elements
        x = x * 2.0
    tl.store(y_ptr + offs, x, mask=offs < n)


x = torch.tensor([-1.0, 1.0, -2.0, 2.0, -3.0, 3.0, -4.0, 4.0], device=DEVICE)
y = torch.zeros_like(x)
show_error(launch_error(lambda: _branch_kernel[(1,)](x, y, 8, BLOCK=8)),
           "decide lane by lane: x = tl.where(x > 0, x * 2.0, x). (An `if` on a scalar, such as the program id "
           "or a constexpr, is fine.)",
           instead=lambda: (f"{'The interpreter' if runtime.interpreted() else 'This Triton'} took one decision "
                            f"for the whole block:\n    got    {y.tolist()}\n"
                            f"    wanted {torch.where(x > 0, 2 * x, x).tolist()}"))

# %% nbgrader={"grade": false, "grade_id": "debug-error-dot-size", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# 4. A tl.dot whose tiles are too small (here 8 x 8: K = 8).
@triton.jit
def _small_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    i = tl.arange(0, B)
    a = tl.load(a_ptr + i[:, None] * B + i[None, :])
    b = tl.load(b_ptr + i[:, None] * B + i[None, :])
    tl.store(c_ptr + i[:, None] * B + i[None, :], tl.dot(a, b))


a, b = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
c = torch.zeros(8, 8, device=DEVICE)
show_error(launch_error(lambda: _small_dot_kernel[(1,)](a, b, c, B=8)),
           "tiles of at least 16 along K (16 x 16 or more is safest on every Triton version): pad the small "
           "matrices with masked loads (other=0.0) up to 16",
           instead=lambda: (f"{'The interpreter (its tl.dot is NumPy)' if runtime.interpreted() else 'This GPU'} "
                            f"accepted the 8 x 8 tiles: max |c - a @ b| = {(c - a @ b).abs().max().item():.1e}"))

# %% nbgrader={"grade": false, "grade_id": "debug-error-dot-dtype", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# 5. tl.dot of two tiles of different dtypes.
@triton.jit
def _mixed_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    i = tl.arange(0, B)
    a = tl.load(a_ptr + i[:, None] * B + i[None, :])  # float32
    b = tl.load(b_ptr + i[:, None] * B + i[None, :])  # float16
    tl.store(c_ptr + i[:, None] * B + i[None, :], tl.dot(a, b))


a, b = torch.randn(16, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE).half()
exc = launch_error(lambda: _mixed_dot_kernel[(1,)](a, b, torch.zeros(16, 16, device=DEVICE), B=16))
show_error(exc, "convert one operand so both match: tl.dot(a.to(tl.float16), b), accumulating in float32 "
                "(tl.dot's default)")

# %% nbgrader={"grade": false, "grade_id": "debug-error-torch", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# A PyTorch habit: a torch function inside a kernel.
@triton.jit
def _torch_inside_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, torch.sigmoid(x), mask=offs < n)  # torch runs on tensors, not on Triton blocks


x = torch.randn(100, device=DEVICE)
show_error(launch_error(lambda: _torch_inside_kernel[(1,)](x, torch.empty_like(x), 100, BLOCK=128)),
           "torch functions do not run inside a kernel: use triton.language, tl.sigmoid(x), or write it out, "
           "1 / (1 + tl.exp(-x))")

# %% [markdown] nbgrader={"grade": false, "grade_id": "repair-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_repair · Repair a broken kernel   (about 15 min · ★☆☆)
#
# **Spec.** `clamp(x, lo, hi)` returns a new tensor of `x`'s shape and dtype holding `min(max(x, lo), hi)`
# element by element, for a 1-D contiguous `x` of any length (float32 or float16) and Python floats `lo ≤ hi`,
# computed by one launch of `_clamp_kernel`. The kernel in the cell below was handed to you with **two bugs**:
# one stops it compiling, the other writes where it must not. Repair both in place (its plan is right, two lines
# are not), and write the launcher.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Write the launcher first and run the try cell under it: the first bug announces itself, and section 7 showed
# its message. The second does not: the output can look right. Print one program's `offs` and `mask`, or draw
# the programs with `draw_programs`, on a length that is not a multiple of the block.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# A block's size must be a `tl.constexpr`, so the offsets come from `BLOCK`, not from `n`. Then follow the mask
# from where it is made to every access that needs it: a load *and* a store.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `offs = pid * BLOCK + tl.arange(0, BLOCK)`, and `tl.store(y_ptr + offs, y, mask=mask)`. The launcher is
# `block_copy`'s with `lo` and `hi` passed: `torch.empty_like(x)`, `triton.cdiv(n, BLOCK)` programs.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_repair -->

# %% nbgrader={"grade": false, "grade_id": "clamp", "locked": false, "schema_version": 3, "solution": true}
# As handed to you: two bugs. Repair this kernel in place.
@triton.jit
def _clamp_kernel(x_ptr, y_ptr, n, lo, hi, BLOCK: tl.constexpr):
    """Program i writes y = min(max(x, lo), hi) for elements i*BLOCK ... i*BLOCK + BLOCK - 1 (those below n)."""
    # 1. my block's offsets and a mask for those below n
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, n)
    mask = offs < n
    # 2. load, clamp, store
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.minimum(tl.maximum(x, lo), hi)
    tl.store(y_ptr + offs, y)


### BEGIN SOLUTION
# The repaired kernel, under the same name (it replaces the one above): the offsets come from the constexpr
# BLOCK, not from the run-time n, and the store is masked as the load is.
@triton.jit
def _clamp_kernel(x_ptr, y_ptr, n, lo, hi, BLOCK: tl.constexpr):  # noqa: F811
    """Program i writes y = min(max(x, lo), hi) for elements i*BLOCK ... i*BLOCK + BLOCK - 1 (those below n)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.minimum(tl.maximum(x, lo), hi)
    tl.store(y_ptr + offs, y, mask=mask)
### END SOLUTION


def clamp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """min(max(x, lo), hi) for the 1-D contiguous tensor x: a new tensor of x's shape and dtype, from one launch
    of _clamp_kernel."""
    # allocate the output, choose BLOCK (a power of two, e.g. 256), launch cdiv(n, BLOCK) programs, return it
    ### BEGIN SOLUTION
    y = torch.empty_like(x)
    n, BLOCK = x.numel(), 256
    _clamp_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, lo, hi, BLOCK=BLOCK)
    return y
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "repair-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
x = torch.linspace(-2.0, 2.0, 1000, device=DEVICE)
print(f"max |clamp - torch.clamp| = {(clamp(x, -0.75, 1.25) - x.clamp(-0.75, 1.25)).abs().max().item():.1e}")
xs = torch.linspace(-2.0, 2.0, 10)
fig = draw_programs(_clamp_kernel, (3,), xs, torch.empty(10), 10, -0.75, 1.25, BLOCK=4)
print(fig.recording.summary())
fig

# %% nbgrader={"grade": true, "grade_id": "test_warmup_repair", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.warmup_repair", clamp).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmups-md", "locked": true, "schema_version": 3, "solution": false}
# ## 8. Five warm-ups
#
# Five small kernels, each a step toward exercise 01.fused_chain, each graded at once on small odd-sized
# tensors (1 point each). Every stub gives the kernel's signature and a commented plan; you write the code
# under `# YOUR CODE HERE`. `draw_programs` works on your kernels too: draw one whenever a check fails.
#
# Reading the grader's messages:
# * *"out-of-bounds write … (a store without a correct mask?)"*: the grader surrounds every tensor with guard
#   memory and found it changed. A lane past the end was switched on.
# * *"got 3.40282e+38"* (or 65504 in float16): the grader fills the guard memory and unwritten outputs with
#   that value, so your kernel **read outside the tensor** (a wrong mask or stride) or never wrote that element.
# * *"likely cause: …"*: the output matched a known wrong formula, named there.
#
# When a message is not enough, the tools of section 7 are: print the block of the program that fails.

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmup-copy-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_copy · A masked block copy   (about 10 min · ★☆☆)
#
# **Spec.** `block_copy(x)` returns a new tensor equal to the 1-D contiguous `x` (any length, float32 or
# float16), copied by `_copy_kernel`, one block of `BLOCK` elements per program.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# It is the worked kernel of section 6 without the arithmetic: one load and one store per program, both masked.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# In the kernel: offsets from `tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)`, `mask = offs < n`, a masked
# `tl.load` and a masked `tl.store`. In the launcher: `torch.empty_like(x)` and a grid of `triton.cdiv(n, BLOCK)`
# programs.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_copy -->

# %% nbgrader={"grade": false, "grade_id": "block_copy", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Program i copies elements i*BLOCK ... i*BLOCK + BLOCK - 1 of x to y (those below n)."""
    # 1. my block's offsets, from tl.program_id(0) and tl.arange, and a mask for those below n
    # 2. load them from x_ptr (masked), store them to y_ptr (masked)
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    ### END SOLUTION


def block_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy of the 1-D contiguous tensor x, made by _copy_kernel; same shape and dtype."""
    # allocate the output, choose BLOCK (a power of two, e.g. 128), launch cdiv(n, BLOCK) programs
    ### BEGIN SOLUTION
    y = torch.empty_like(x)
    n, BLOCK = x.numel(), 128
    _copy_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_warmup_copy", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01.warmup_copy", block_copy).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmup-tile-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_tile · A 2-D tile with strides   (about 20 min · ★☆☆)
#
# **Spec.** `tile_copy(x)` returns a new **contiguous** tensor equal to the 2-D `x` of shape `(M, N)`, whose
# layout may be anything: contiguous, transposed (`x.t()`) or every other column (`x[:, ::2]`). A tensor's
# **stride** along a dimension is how many elements apart in memory two neighbours along it are: element
# `(i, j)` is at `x_ptr + i * x.stride(0) + j * x.stride(1)`. Use a 2-D grid: program `(pid_m, pid_n)` copies
# the tile of rows `pid_m*BLOCK_M …` and columns `pid_n*BLOCK_N …`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# A tile is a block of rows times a block of columns. The address of element `(i, j)` comes from the strides
# alone, whatever the layout; the output is contiguous and has strides of its own.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `rows[:, None]` and `cols[None, :]` make a column and a row of offsets; adding them broadcasts to a
# `(BLOCK_M, BLOCK_N)` tile, and the mask is `(rows[:, None] < M) & (cols[None, :] < N)`. Pass all four strides
# to the kernel.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# A kernel that assumes row stride `N` and column stride 1 passes on contiguous inputs and fails on the others:
# the grader then names it. Use `x.stride(0)`, `x.stride(1)` for the load and `y.stride(0)`, `y.stride(1)` for
# the store.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_tile -->

# %% nbgrader={"grade": false, "grade_id": "tile_copy", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _tile_copy_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (pid_m, pid_n) copies one BLOCK_M x BLOCK_N tile of x into y, through both tensors' strides."""
    # 1. rows of my tile from tl.program_id(0), columns from tl.program_id(1); a 2-D mask for the edges
    # 2. load the tile at x_ptr + rows * stride_xm + cols * stride_xn (masked)
    # 3. store it at the same (row, column) of y, through y's strides (masked)
    ### BEGIN SOLUTION
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, tile, mask=mask)
    ### END SOLUTION


def tile_copy(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of the 2-D tensor x (any strides), same shape and dtype, made by _tile_copy_kernel."""
    # allocate a contiguous (M, N) output; a 2-D grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); pass both strides
    ### BEGIN SOLUTION
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    BLOCK_M, BLOCK_N = 16, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _tile_copy_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return y
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_warmup_tile", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01.warmup_tile", tile_copy).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmup-broadcast-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_broadcast · A row vector added to a matrix   (about 15 min · ★☆☆)
#
# **Spec.** `add_row(x, v)` returns `x + v` as a new contiguous `(M, N)` tensor, for `x` of shape `(M, N)` (any
# strides) and `v` of shape `(N,)`, added to every row. Exercise 01.fused_chain adds its bias the same way.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Start from your tile copy. `v` depends on the column only: which offsets does a program need to read it?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Load `v` with the tile's column offsets (a vector of `BLOCK_N`, masked by `cols < N`), then `v[None, :]`
# broadcasts it down the tile's rows before the add.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Loading `v` with the tile's 2-D offsets reads far past the end of `v`: the grader reports a read outside the
# tensor. The store is the tile copy's, with `x + v[None, :]`.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_broadcast -->

# %% nbgrader={"grade": false, "grade_id": "add_row", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _add_row_kernel(x_ptr, v_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (pid_m, pid_n) writes one tile of y = x + v, v broadcast down the rows."""
    # 1. the tile's rows, columns and 2-D mask, as in _tile_copy_kernel
    # 2. load the x tile; load BLOCK_N elements of v at the tile's columns (masked by the columns alone)
    # 3. add, v[None, :] broadcast down the rows, and store the tile of y
    ### BEGIN SOLUTION
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    v = tl.load(v_ptr + cols, mask=cols < N)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, x + v[None, :], mask=mask)
    ### END SOLUTION


def add_row(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x + v for x (M, N), any strides, and v (N,) contiguous: a new contiguous (M, N) tensor of x's dtype."""
    # as tile_copy, with v passed too
    ### BEGIN SOLUTION
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    BLOCK_M, BLOCK_N = 16, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _add_row_kernel[grid](x, v, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return y
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_warmup_broadcast", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01.warmup_broadcast", add_row).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmup-row-sum-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_row_sum · The sum of each row   (about 15 min · ★☆☆)
#
# **Spec.** `row_sum(x)` returns the `(M,)` tensor of the sums of the rows of `x` `(M, N)` (any strides; `N` up
# to a few thousand), in `x`'s dtype, accumulated in float32. One program per row, the whole row in one block:
# `BLOCK = triton.next_power_of_2(N)`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# One program, one row, one block: the lanes past the end of the row are still there, and must add nothing.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `tl.sum(v, axis=0)` adds a block's lanes into one number. Load with `other=0.0` so that masked-off lanes count
# as zero, upcast to float32 before summing.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Storing one number is `tl.store(out_ptr + row, s.to(out_ptr.dtype.element_ty))`. The row's address uses its
# stride: `x_ptr + row * stride_xm + cols * stride_xn`.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_row_sum -->

# %% nbgrader={"grade": false, "grade_id": "row_sum", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK: tl.constexpr):
    """Program `row` writes out[row] = sum of x[row, :], the row loaded as one block of BLOCK >= N lanes."""
    # 1. which row is mine; the column offsets 0 .. BLOCK-1 and the mask cols < N
    # 2. load the row (masked, other=0.0) and upcast it to float32
    # 3. tl.sum it and store the one number at out_ptr + row
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(out_ptr.dtype.element_ty))
    ### END SOLUTION


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x (M, N), any strides: an (M,) tensor of x's dtype."""
    # allocate (M,), launch M programs with BLOCK = triton.next_power_of_2(N)
    ### BEGIN SOLUTION
    M, N = x.shape
    out = torch.empty(M, dtype=x.dtype, device=x.device)
    _row_sum_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK=triton.next_power_of_2(N))
    return out
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_warmup_row_sum", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01.warmup_row_sum", row_sum).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "warmup-running-max-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.warmup_running_max · A running max over blocks   (about 20 min · ★★☆)
#
# **Spec.** `row_max(x)` returns the `(M,)` tensor of the largest element of each row of `x` `(M, N)` (any
# strides, any `N`), in `x`'s dtype. One program per row, reading it in blocks of `BLOCK = 64` columns with a
# loop, keeping a running maximum: a row need not fit in one block (notebook 02's long rows will not).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Keep one running maximum per lane while you walk along the row, and reduce the lanes to one number only at the
# end. What value can never win a maximum?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# A loop in a kernel is a Python `for start in range(0, N, BLOCK):`. Keep a block-wide accumulator
# `acc = tl.full([BLOCK], float("-inf"), tl.float32)`, update it with `tl.maximum`, and reduce it once after the
# loop with `tl.max(acc, axis=0)`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The grader's rows are all negative: a masked lane loaded as 0 (load with `other=float("-inf")`) or an
# accumulator started at 0 would win, and the grader says so.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.warmup_running_max -->

# %% nbgrader={"grade": false, "grade_id": "row_max", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _row_max_kernel(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK: tl.constexpr):
    """Program `row` writes out[row] = max of x[row, :], reading the row BLOCK columns at a time."""
    # 1. which row is mine; a float32 accumulator of BLOCK lanes, all -inf
    # 2. loop over the row's blocks: load one (masked, other=-inf), fold it into the accumulator with tl.maximum
    # 3. reduce the accumulator to one number and store it at out_ptr + row
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"))
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(out_ptr + row, tl.max(acc, axis=0).to(out_ptr.dtype.element_ty))
    ### END SOLUTION


def row_max(x: torch.Tensor) -> torch.Tensor:
    """The largest element of each row of x (M, N), any strides: an (M,) tensor of x's dtype."""
    # allocate (M,), launch M programs with BLOCK = 64
    ### BEGIN SOLUTION
    M, N = x.shape
    out = torch.empty(M, dtype=x.dtype, device=x.device)
    _row_max_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK=64)
    return out
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_warmup_running_max", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("01.warmup_running_max", row_max).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fused-md", "locked": true, "schema_version": 3, "solution": false}
# ## 9. Your first fused kernel: bias + SiLU + scale in one pass
#
# Compute `y = alpha · silu(x + bias)` where `silu(z) = z · sigmoid(z)`, for `x` of shape `(M, N)`, `bias` of
# shape `(N,)` (broadcast along the rows, as in 01.warmup_broadcast) and a Python float `alpha`. Eager PyTorch
# runs three kernels (`x + bias`, `silu`, `alpha · …`), each a full round trip through HBM: about `6|x|` bytes.
# Your kernel reads `x` once and writes `y` once: about `2|x|`, so the cost model predicts about 3× faster.
#
# ![](figures/unfused_vs_fused.svg)

# %% [markdown] nbgrader={"grade": false, "grade_id": "fused-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 01.fused_chain · Bias + SiLU + scale in one kernel   (about 45 min · ★★☆)
#
# **Spec.** `fused_chain(x, bias, alpha) -> Tensor`: `x` is `(M, N)` of any strides (transposed and sliced views
# included), `bias` is `(N,)`, both float32, float16 or bfloat16; `alpha` a Python float. It returns
# `alpha * silu(x + bias)` as a new `(M, N)` tensor of `x`'s dtype, allocated with `torch.empty`, computed by
# **one** Triton kernel launch and no torch arithmetic. Load in the input dtype, compute in float32
# (`.to(tl.float32)`), round once at the store.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# It is 01.warmup_broadcast with a different formula: everything between the load and the store happens in
# registers, so the whole chain costs one read of `x` and one write of `y`.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Tile, mask and bias load as in 01.warmup_broadcast; then `z = x.to(tl.float32) + b.to(tl.float32)[None, :]`,
# `y = alpha * z * tl.sigmoid(z)`, and a store cast to `y_ptr.dtype.element_ty`. `tl.sigmoid` exists.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Pass both tensors' strides (a transposed or sliced `x` is graded). Offsets of huge tensors can pass 2³¹: cast
# the rows to `tl.int64` before multiplying by the stride. Load with `other=0.0` so masked lanes hold no
# garbage.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Tiles of about 2048 elements (e.g. `BLOCK_M = 2048 // BLOCK_N` rows of `BLOCK_N = min(2048,
# next_power_of_2(N))`) with `num_warps=4` reach the copy bandwidth. A 1-D grid, numbered so that consecutive
# programs take the consecutive tiles of one band of rows (`pid_m = pid // tiles_per_row`,
# `pid_n = pid % tiles_per_row`: the column tile varies fastest), makes programs running at the same time read
# neighbouring memory. For a transposed `x`, square 64 × 64 tiles keep the loads and stores both reading
# neighbouring memory.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 01.fused_chain -->

# %% nbgrader={"grade": false, "grade_id": "fused_chain", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _fused_chain_kernel(
    x_ptr, bias_ptr, y_ptr,
    M, N,
    stride_xm, stride_xn, stride_ym, stride_yn,
    alpha,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program writes one BLOCK_M x BLOCK_N tile of y = alpha * silu(x + bias)."""
    # 1. which tile is mine: from tl.program_id(0) (a 1-D grid over tiles) or two program ids (a 2-D grid)
    # 2. the tile's rows and columns (rows as int64), and a 2-D mask for the tensor's edges
    # 3. load the x tile through its strides, and the bias at the tile's columns (masked by columns only)
    # 4. upcast both to float32; z = x + bias[None, :]; y = alpha * z * sigmoid(z)
    # 5. store y, cast to y's dtype, through y's strides (masked)
    ### BEGIN SOLUTION
    # include body: kernels/fused_chain.py (_fused_chain_kernel)
    ### END SOLUTION


def fused_chain(x: torch.Tensor, bias: torch.Tensor, alpha: float) -> torch.Tensor:
    """y = alpha * silu(x + bias) for x (M, N) of any strides and bias (N,): a new (M, N) tensor of x's dtype,
    computed by one launch of _fused_chain_kernel."""
    # 1. check the shapes; allocate y with torch.empty((M, N), dtype=x.dtype, device=x.device)
    # 2. choose BLOCK_M, BLOCK_N (powers of two) and num_warps; the grid covers every tile
    # 3. launch the kernel with both tensors' strides, and return y
    ### BEGIN SOLUTION
    # include body: kernels/fused_chain.py (fused_chain)
    ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "try-md", "locked": true, "schema_version": 3, "solution": false}
# Try it before you grade it: a quick comparison with eager PyTorch, then the full report (the same
# checks the graded cells below run, in one table).

# %% nbgrader={"grade": false, "grade_id": "try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
x = torch.randn(37, 4099, device=DEVICE)
bias = torch.randn(4099, device=DEVICE)
err = (fused_chain(x, bias, 0.8) - 0.8 * torch.nn.functional.silu(x + bias)).abs().max().item()
print(f"max |fused_chain - eager| = {err:.2e}")
report = check("01.fused_chain", fused_chain)
report

# %% nbgrader={"grade": true, "grade_id": "test_fused_chain_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("01.fused_chain", fused_chain, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_fused_chain_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.fused_chain", fused_chain, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_fused_chain_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("01.fused_chain", fused_chain, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_fused_chain_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.fused_chain", fused_chain, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fused-reference-run", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's own kernel (the hints' settings) reaches about 0.9 of the measured copy
# bandwidth on an H100 and an H200 at the graded 16384 × 8192 bf16 shape, about 3× eager, as the cost model
# predicts; `torch.compile` fuses the same chain and lands close to it.

# %% [markdown] nbgrader={"grade": false, "grade_id": "compare-md", "locked": true, "schema_version": 3, "solution": false}
# ## 10. Your kernel against eager and `torch.compile`
#
# The same bf16 tensor as the performance grade (16384 × 8192, 256 MiB), three ways, as effective
# bandwidth (the minimal `2|x|` bytes over the time) next to this GPU's measured copy bandwidth. The model
# says eager should reach about a third of it (it moves about `6|x|`) and a fused kernel all of it.

# %% nbgrader={"grade": false, "grade_id": "compare", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
if ON_GPU:
    from autograder.specs.hbm_cost_model import fused_chain_bytes, fused_chain_eager
    from autograder.measure.timing import bench_versions

    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(fused_chain_eager)
    versions = {
        "eager (3 kernels)": lambda: fused_chain_eager(x, bias, 0.8),
        "torch.compile": lambda: compiled(x, bias, 0.8),
        "your fused_chain": lambda: fused_chain(x, bias, 0.8),
    }
    ms = bench_versions(versions, desc="timing the chain")  # leaves out your kernel until you have written it
    gbps = {name: fused_chain_bytes(x, bias) / (t * 1e-3) / 1e9 for name, t in ms.items()}
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(list(gbps), list(gbps.values()), color=["C3", "C1", "C2"][: len(gbps)])
    ax.axvline(profile.copy_gbps, color="k", ls="--", label=f"measured copy bandwidth {profile.copy_gbps:.0f} GB/s")
    ax.set_xlabel("effective GB/s (minimal bytes / time)")
    ax.legend(loc="lower right")
    plt.show()
    for name, v in gbps.items():
        print(f"{name:<20} {v:7.0f} GB/s  = {v / profile.copy_gbps:.2f} of copy")
    del x, bias
else:
    print("No GPU here: speed is not measured in Triton's interpreter. Run this notebook on a CUDA GPU to see it.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "questions-md", "locked": true, "schema_version": 3, "solution": false}
# ## 11. Questions
#
# Answer each in two to four sentences, in the cell below it.
#
# **Q1.** At 4 KiB the 8-op chain is far from any bandwidth limit, yet the fused kernel is still about 8×
# faster than eager (section 4). Where does the saving come from there, and which term of the cost model says so?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-launch-bound", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# At 4 KiB the bandwidth term 2S/BW is a few nanoseconds, so each kernel costs about the launch overhead L.
# Eager pays n·L for n kernels, the fused kernel pays L once: the saving is n − 1 launches, not bytes. The
# launch term of the model says so; CUDA graphs, which shrink L itself, would help eager there too.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q2-md", "locked": true, "schema_version": 3, "solution": false}
# **Q2.** The kernel with the mask `offs <= n` (section 6) gave the right answer for every element of `out`.
# Why is it still a bug, and why can such a bug go unnoticed on a GPU?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-wrong-mask", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Its last program reads and writes one element past the end of each vector: memory the tensors do not own.
# On a GPU the allocator rounds allocations up and packs tensors close together, so the stray write lands in
# padding (harmless, silent) or in a neighbouring tensor (corrupting it, far from the cause); nothing faults
# unless the address leaves the allocation entirely. Correct outputs prove nothing about the memory around them.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q3-md", "locked": true, "schema_version": 3, "solution": false}
# **Q3.** Exercise 01.layer_traffic counts an unfused RMSNorm as 3 kernels and `5|x|`; notebook 06's profiler
# finds about 8 kernels and `18|x|` for RMSNorm written op by op in bf16. Where do the extra bytes come from,
# and does the difference change how much fusing RMSNorm saves?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-rmsnorm-count", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Real code computes the statistic in float32: the upcast writes a float32 copy of x (twice its bytes), and
# the square, mean, eps, rsqrt and multiplications each read and write full-size tensors, several of them in
# float32, before a downcast. The fused kernel still moves 2|x|, so the saving grows from 3|x| to about
# 16|x| per RMSNorm: fusion pays more than the simple model said, and the conclusion only gets stronger.

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * Below the ridge point, time is bytes over bandwidth. Count the bytes first; the speed-up of a fusion
#   follows from arithmetic before anything is timed.
# * An unfused chain of `n` elementwise ops pays `n` round trips and `n` launches; a fused one pays one of
#   each. On large tensors the bytes dominate, on tiny ones the launches.
# * A Triton kernel is a grid of programs, each owning a block: offsets from `tl.program_id` and `tl.arange`, a
#   mask for the edges, strides for any layout. Draw the programs when in doubt.
# * When a kernel is wrong, look inside it: the interpreter runs it as Python you can print from and stop in,
#   `tl.static_print` shows what the compiler knows and `tl.device_print` what a GPU computes. Passing in the
#   interpreter is not compiling on a GPU: a Python `if` on a block or a small `tl.dot` gets through there.
# * A fused kernel is judged against the copy bandwidth measured on the same GPU: a memory-bound kernel that
#   reaches 90% or more of it has nothing left to gain.
#
# Next, notebook 02 fuses across a reduction: RMSNorm and LayerNorm, where the statistic must be known
# before the output can be written (your row sum and running max are its first half).
#
# ## Further reading
#
# * Triton's tutorials, starting with vector addition and fused softmax:
#   <https://triton-lang.org/main/getting-started/tutorials/index.html>; the `triton.language` reference:
#   <https://triton-lang.org/main/python-api/triton.language.html>.
# * S. Williams, A. Waterman, D. Patterson, *Roofline: an insightful visual performance model for multicore
#   architectures*, Communications of the ACM, 2009: <https://doi.org/10.1145/1498765.1498785>.
# * H. He, *Making Deep Learning Go Brrrr From First Principles* (compute, memory and overhead):
#   <https://horace.io/brrr_intro.html>.
# * Triton-Puzzles, small graded kernels on the interpreter, with drawings of what each program touches:
#   <https://github.com/srush/Triton-Puzzles>.
# * PyTorch's `torch.compile` documentation: <https://pytorch.org/docs/stable/generated/torch.compile.html>.
# * NVIDIA's CUDA C++ Best Practices Guide, on memory bandwidth and coalesced access:
#   <https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/>.
