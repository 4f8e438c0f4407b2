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
# Most operators in a transformer's forward pass do a handful of arithmetic operations per byte they
# touch. On a modern GPU that makes them wait on memory, not on arithmetic, and it makes one number
# predict their run time: **the bytes they move through HBM**. Fusion is the art of moving fewer of them.
#
# In this notebook you will
# 1. measure your GPU's two ceilings (copy bandwidth and matmul rate) and draw its roofline;
# 2. write the cost model of a chain of elementwise operations, unfused and fused (**exercise a**);
# 3. test the model against a chain of 1 to 8 operations run by eager PyTorch, by `torch.compile` and by a
#    hand-written Triton kernel, and against tiny tensors where launches, not bytes, set the time;
# 4. count the bytes a Llama-2-7B decoder layer's elementwise and normalisation ops move (**exercise b**);
# 5. write your first Triton kernel, a fused bias + SiLU + scale (**exercise c**), graded on correctness,
#    precision, measured bandwidth and fusion.
#
# **No GPU?** The course then runs Triton kernels in Triton's interpreter on the CPU. Everything is
# graded for correctness there, but nothing about speed can be measured: the plots show the model with an
# H200's measured figures instead, and say so.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined
import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.teach.plots import launch_seconds, peaks, roofline
from kernels import op_chain as chain

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()

# %% [markdown] nbgrader={"grade": false, "grade_id": "roofline-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. Two ceilings and the roofline
#
# A kernel can go no faster than either of two limits:
#
# * the **memory ceiling**: the bytes it must move through HBM divided by the bandwidth `BW`;
# * the **compute ceiling**: the floating-point operations it must do divided by the arithmetic rate `P`.
#
# Their ratio is the kernel's **arithmetic intensity** `I = FLOPs / bytes`. Below the *ridge point*
# `I* = P / BW` the memory ceiling is the lower one and the kernel is memory-bound; above it, compute-bound.
# The profile printed above holds both ceilings *measured* on this machine (a large device-to-device copy
# and an 8192³ bf16 matrix product), because datasheet numbers are not what code reaches.
#
# Where do everyday operators sit? An elementwise `y = a * x + b` in bf16 does 2 FLOPs while it reads
# 2 bytes and writes 2: `I = 0.5`. RMSNorm does about 4 FLOPs per element for 4 bytes: `I ≈ 1`. A square
# matmul of size n does `2n³` FLOPs over `3·2n²` bytes: `I = n/3`, which passes the ridge point only for
# n in the hundreds. The ridge point of an H100 or H200 sits at a few hundred FLOP/byte, so everything
# but the matmuls lives far down the slanted part of the roof.

# %% nbgrader={"grade": false, "grade_id": "roofline-plot", "locked": true, "schema_version": 3, "solution": false}
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
# ### Exercise (a): the cost model
# Write `chain_times(n_ops, size_bytes, bandwidth, launch_s)` returning the pair
# `(t_unfused, t_fused)` in **seconds**, with `bandwidth` in bytes per second and `launch_s` in seconds.
# The plots below draw *your* model against measurements.

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
          "exercise (a) above and run this cell again")
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
# **Unfused**, as eager PyTorch runs it:
# * each RMSNorm is 3 kernels: the mean of squares reads `x`; the division by the RMS reads `x` and
#   writes the result; the multiplication by the weight reads that and writes `y`;
# * each residual add reads two activations and writes one;
# * SwiGLU's activation is 2 kernels: SiLU reads `gate` and writes its result; the product with `up`
#   reads two tensors and writes one.
#
# **Fused**: each RMSNorm is one kernel that reads `x` once and writes `y` once; the SwiGLU activation is
# one kernel that reads `gate` and `up` and writes their product; the residual adds are unchanged.
#
# ### Exercise (b)
# Write `layer_traffic(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth)` returning
# `(unfused_bytes, fused_bytes, saving_s)`, where `saving_s` is the time the fused layer saves at
# `bandwidth` bytes per second. It is graded on Llama-2-7B and on other model shapes.

# %% nbgrader={"grade": false, "grade_id": "layer_traffic", "locked": false, "schema_version": 3, "solution": true}
def layer_traffic(batch, seq, hidden, intermediate, bytes_per_elem, bandwidth):
    """HBM bytes of one decoder layer's elementwise + norm ops, unfused and fused, and the time saved."""
    ### BEGIN SOLUTION
    x = batch * seq * hidden * bytes_per_elem
    h = batch * seq * intermediate * bytes_per_elem
    rmsnorm_unfused, rmsnorm_fused = 5 * x, 2 * x  # 3 kernels: read x | read x, write x/rms | read, write y
    residual_add = 3 * x  # read two activations, write one
    swiglu_unfused, swiglu_fused = 2 * h + 3 * h, 3 * h  # silu(g), then g*u | one kernel: read g, u; write
    unfused = 2 * rmsnorm_unfused + 2 * residual_add + swiglu_unfused
    fused = 2 * rmsnorm_fused + 2 * residual_add + swiglu_fused
    return unfused, fused, (unfused - fused) / bandwidth
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_layer_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("01.layer_traffic", layer_traffic, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": false, "grade_id": "llama-use", "locked": true, "schema_version": 3, "solution": false}
from autograder.measure.timing import not_written

try:
    unfused, fused, saving = layer_traffic(4, 2048, 4096, 11008, 2, bw_gbps * 1e9)
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"layer_traffic is not written yet ({type(exc).__name__}): write exercise (b) above, then run this cell")
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
# ## 6. Your first Triton kernel: bias + SiLU + scale in one pass
#
# Compute `y = alpha · silu(x + bias)` where `silu(z) = z · sigmoid(z)`, for `x` of shape `(M, N)`,
# `bias` of shape `(N,)` (broadcast along the rows) and a Python float `alpha`. Eager PyTorch needs three
# kernels (`x + bias`, `silu`, `alpha · …`) and about `6|x|` bytes of traffic; your kernel must read `x`
# once and write `y` once, about `2|x|`.
#
# How a Triton kernel is organised:
# * a **program** (one instance of the `@triton.jit` function) handles one tile of the output; the
#   launcher starts a **grid** of them, and `tl.program_id(axis)` tells a program which tile is its own;
# * `tl.arange(0, BLOCK)` gives the offsets inside a tile; `BLOCK` must be a power of two and a
#   `tl.constexpr`, so tiles at the edge run past the tensor: **mask** every load and store;
# * pointers are plain addresses: element `(i, j)` of `x` is at `x_ptr + i * stride_xm + j * stride_xn`.
#   Pass `x.stride(0)` and `x.stride(1)`, and the kernel works on transposed and sliced inputs too;
# * load in the input dtype, **compute in float32** (`.to(tl.float32)`), and round once at the store.
#
# Write `fused_chain(x, bias, alpha)`: it allocates the output (`torch.empty`), launches **one** Triton
# kernel and returns the output. It must not compute anything with torch operations. It is graded on
# correctness (odd shapes, rows longer than a block, non-contiguous `x`, fp32/fp16, bf16 on a GPU),
# precision (against float64), performance (at least 60% of this GPU's measured copy bandwidth, and faster
# than eager) and fusion (exactly one kernel launch).

# %% nbgrader={"grade": false, "grade_id": "fused_chain", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
# include: kernels/fused_chain.py (_fused_chain_kernel, fused_chain)
### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "try-md", "locked": true, "schema_version": 3, "solution": false}
# Try it before you grade it: a quick comparison with eager PyTorch, then the full report (the same
# checks the graded cells below run, in one table).

# %% nbgrader={"grade": false, "grade_id": "try", "locked": true, "schema_version": 3, "solution": false}
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

# %% [markdown] nbgrader={"grade": false, "grade_id": "compare-md", "locked": true, "schema_version": 3, "solution": false}
# ## 7. Your kernel against eager and `torch.compile`
#
# The same bf16 tensor as the performance grade (16384 × 8192, 256 MiB), three ways, as effective
# bandwidth (the minimal `2|x|` bytes over the time) next to this GPU's measured copy bandwidth. The model
# says eager should reach about a third of it (it moves about `6|x|`) and a fused kernel all of it.

# %% nbgrader={"grade": false, "grade_id": "compare", "locked": true, "schema_version": 3, "solution": false}
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

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * Below the ridge point, time is bytes over bandwidth. Count the bytes first; the speed-up of a fusion
#   follows from arithmetic before anything is timed.
# * An unfused chain of `n` elementwise ops pays `n` round trips and `n` launches; a fused one pays one of
#   each. On large tensors the bytes dominate, on tiny ones the launches.
# * A fused kernel is judged against the copy bandwidth measured on the same GPU: a memory-bound kernel that
#   reaches 90% or more of it has nothing left to gain.
#
# Next, notebook 02 fuses across a reduction: RMSNorm and LayerNorm, where the statistic must be known
# before the output can be written.
