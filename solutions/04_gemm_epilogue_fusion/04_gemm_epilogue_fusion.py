# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 04 · GEMM epilogue fusion: bias, GELU and residual in the matmul, a fused SwiGLU and a fused LoRA
#
# About 5-7 hours · difficulty ★★★ · prerequisites: notebooks 01 (the cost model), 02 (a row-wise fused kernel)
# and 03 (the tiled matmul and the fused QKV projection)
#
# In notebook 03 you wrote (or read) a tiled matmul in Triton: a program per output tile, a loop over `K`,
# one float32 accumulator. This notebook is about what happens *after* that loop, in the matmul's
# **epilogue**: the few instructions between the last `tl.dot` and the one store.
#
# Every linear layer of a transformer is a GEMM (GEneral Matrix Multiply, `x @ W`) followed by a few
# elementwise operations: a bias, an activation, a residual add, a gate. Run as separate kernels, each of
# them reads the GEMM's whole output from HBM (the GPU's main memory) and writes it back. Yet when the GEMM
# finishes an output tile, that tile sits in registers, in float32; anything elementwise done to it *there*,
# before the one store, is nearly free. That is **epilogue fusion**, and it is what cuBLASLt epilogues,
# CUTLASS and every inference engine do.
#
# You will
# 1. recap the tiled matmul of notebook 03 (tile order, tile shape, occupancy), time it against cuBLAS and
#    let `triton.autotune` choose a tile;
# 2. **predict** the HBM traffic of `gelu(x @ W + b) + r` unfused and fused (graded), and from it where
#    fusing pays (few rows, short K) and where the matmul hides it (many rows, long K);
# 3. write the **GEMM with a bias + GELU + residual epilogue** (exercise 04.gemm_gelu_residual) and measure it
#    against your prediction;
# 4. measure why the epilogue math belongs in float32 before the one rounding;
# 5. see what closes the last gap to cuBLAS on Hopper (persistent programs fed by the TMA copy engine), as
#    an optional, ungraded exercise;
# 6. fuse two GEMMs and their epilogue: the **fused SwiGLU** (exercise 04.swiglu), with an optional Hopper
#    version;
# 7. **predict** what a LoRA adapter adds to a GEMM (graded), fuse it into the GEMM (exercise 04.lora), and
#    measure it against the unfused adapter and the merged weight;
# 8. answer four short written questions about what you measured.
#
# | exercise | what | time · difficulty | points |
# |---|---|---|---|
# | 04.predict_epilogue_bytes | the epilogue's HBM bytes, unfused and fused | 15 min · ★☆☆ | 2 |
# | 04.gemm_gelu_residual | GEMM + bias + GELU + residual in one kernel | 90 min · ★★★ | 13 |
# | 04.swiglu | two GEMMs and `silu(g)·u` in one kernel | 60 min · ★★☆ | 10 |
# | 04.predict_lora_overhead | a LoRA adapter's extra flops and bytes | 15 min · ★☆☆ | 2 |
# | 04.lora | a GEMM with its low-rank adapter in one kernel | 60 min · ★★★ | 10 |
# | four written questions | | 25 min | 4 |
#
# The kernel exercises are graded on correctness, precision, measured TFLOP/s and fusion (how many kernels
# a call launches). Each cell that times or calls your kernels comes after the exercise's tests; until you
# have written an exercise it leaves your kernel out and says so. Without a GPU, kernels run in Triton's
# interpreter: graded for correctness there, not for speed, and the plots show the cost model for a
# reference H200 instead of measurements. Terms are defined where they first appear; the course glossary
# (`docs/glossary.md`) has them all.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.specs import gemm_epilogue_fusion  # float64 references and eager versions of 04.gemm_gelu_residual's and 04.swiglu's ops
from autograder.specs import lora  # the same for exercise 04.lora's, with the weight merge
from autograder.teach.plots import launch_seconds, peaks
from autograder.measure.timing import bench_interleaved, bench_ms, cuda_graph, not_written, written_versions
from kernels import matmul as tiled  # section 1's tiled matmul
from kernels.matmul import check_gemm_inputs, dot_precision
# The TMA copy engine's host-side helpers, for section 4's optional exercises:
from kernels.tma import descriptor, first_that_compiles, persistent_programs, weight_descriptor
from kernels.tma import tma_path_applies, tma_ready

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()
bw_gbps, peak_tflops, peak_label = peaks(profile)
launch_s = launch_seconds(profile)


def rel_err(got, exact):
    return float((got.double() - exact).norm() / exact.norm())


def time_in_turns(calls: dict, desc: str) -> dict:
    """{name: µs} of each call, as CUDA-graph replays (no host launch cost) timed in turns (A B C, A B C, ...)
    so that all meet the same clocks. A call whose exercise is not written yet is left out, with a line that
    says so."""
    replays = {name: cuda_graph(fn) for name, fn in written_versions(calls, desc).items()}
    return {name: 1e3 * t for name, t in bench_interleaved(replays, rounds=3, rep=30).items()}


# %% [markdown] nbgrader={"grade": false, "grade_id": "tiles-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. Recap: the tiled matmul of notebook 03
#
# A quick reminder of the loop you met in notebook 03, with the three things that decide its speed. A
# **tile** is a small rectangular block of a matrix that one program handles; a **stride** is how many
# elements apart two neighbours along one dimension sit in memory (`x.stride()`), which lets a kernel read
# transposed or padded tensors without copying them.
#
# `out = x @ w`, `x` of shape `(M, K)`, `w` of shape `(K, N)`. A program owns one `BLOCK_M × BLOCK_N` tile of
# `out`. It walks `K` in steps of `BLOCK_K`: each step loads a `BLOCK_M × BLOCK_K` tile of `x` and a
# `BLOCK_K × BLOCK_N` tile of `w` and adds their product into **one float32 accumulator** (`tl.dot(a, b,
# acc)`, which the tensor cores run). After the last step it rounds the accumulator to the output dtype and
# stores it, once. Three things decide how fast that is:
#
# * **Reuse.** A tile of `x` is needed by every program in its tile-row, a tile of `w` by every program in its
#   tile-column. HBM sees each of them once only if the programs that share them run close together in time
#   and L2 keeps them in between. Programs are launched in index order, so the order in which the index
#   maps to tiles matters: row by row, a wave of programs (one or two per **SM**, streaming
#   multiprocessor, the GPU's unit that runs programs; an H100 or H200 has 132) covers one or two tile-rows and every column of `w`; in **groups** of `GROUP_M` tile-rows, walked column by column, a wave covers a compact block
#   whose `x` rows and `w` columns fit in L2 together (`grouped_tile` below).
# * **Tile shape.** Bigger tiles do more arithmetic per byte loaded (`2·BM·BN·BK` flops for
#   `(BM + BN)·BK` elements) but cost more **registers** (each thread's private, fastest storage; the
#   accumulator alone is `BM·BN` floats spread over the program's threads, which come in **warps** of 32
#   that execute together) and more **shared memory** (a fast on-chip scratchpad of each SM that a program's
#   threads share; here `num_stages − 1` pairs of `x` and `w` tiles, loaded ahead while the tensor cores
#   work on the current pair).
# * **Occupancy**, the number of programs an SM runs at once. A multiprocessor holds as many programs as its 65536 registers and ~228 KB of shared
#   memory allow: fewer when a tile is greedy. A GEMM needs few programs per SM if each keeps the tensor
#   cores busy, but a spilled accumulator (registers that did not fit, moved to local memory) is fatal.
#
# The kernel of this notebook's exercises, as `kernels/matmul.py` holds it (your solutions below may use
# `grouped_tile` and `tile_dot`):

# %% nbgrader={"grade": false, "grade_id": "matmul-kernel", "locked": true, "schema_version": 3, "solution": false}
# include: kernels/matmul.py (grouped_tile, tile_dot, _matmul_kernel)


# %% [markdown] nbgrader={"grade": false, "grade_id": "tiles-measure-md", "locked": true, "schema_version": 3, "solution": false}
# The cell below checks the kernel against float64 on ragged shapes, then (on a GPU) times it at 8192³ bf16
# for several tiles, each with grouped order (`GROUP_M = 8`) and in plain row order (`GROUP_M = 1`), against
# cuBLAS, and reads each compiled kernel's registers per thread, spilled bytes and shared memory. From
# those follows how many programs fit on one multiprocessor (the occupancy), printed beside the time.

# %% nbgrader={"grade": false, "grade_id": "tiles-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
for m, k, n in ((1, 1, 1), (37, 100, 70), (130, 257, 96)):
    x = torch.randn(m, k, device=DEVICE)
    w = torch.randn(k, n, device=DEVICE)
    err = rel_err(tiled.matmul(x, w, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2),
                  x.double() @ w.double())
    print(f"{m}x{k} @ {k}x{n} float32: relative error {err:.1e}")

TILES = [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),
         dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)]


def tile_label(t):
    return f"{t['BLOCK_M']}x{t['BLOCK_N']}x{t['BLOCK_K']} w{t['num_warps']} s{t['num_stages']}"


def programs_per_sm(res):
    """How many programs of this kernel one multiprocessor holds, by registers and by shared memory."""
    by_regs = 65536 // max(1, res["registers"] * res["threads"])
    by_smem = (228 * 1024) // max(1, res["shared_bytes"] + 1024)  # 1 KB a block is reserved by the system
    return min(by_regs, by_smem, 2048 // res["threads"])


tile_rows = []
if ON_GPU:
    S = 8192
    x = torch.randn(S, S, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(S, S, device="cuda") / S**0.5).to(torch.bfloat16)
    flops = 2 * S**3
    cublas_ms = bench_ms(lambda: x @ w)
    for t in tqdm(TILES, desc="timing tile shapes"):
        try:
            res = tiled.tile_resources(x, w, **t)
        except triton.runtime.errors.OutOfResources as exc:  # this tile does not fit this GPU at all
            print(f"{tile_label(t)}: does not fit ({str(exc).splitlines()[0]})")
            continue
        times = {g: bench_ms(lambda: tiled.matmul(x, w, GROUP_M=g, **t)) for g in (1, 8)}
        tile_rows.append((tile_label(t), res, times))
    del x, w

    fig, ax = plt.subplots(figsize=(10, 3.8))
    pos = np.arange(len(tile_rows))
    for i, g in enumerate((1, 8)):
        ax.barh(pos + (i - 0.5) * 0.38, [flops / (r[2][g] * 1e-3) / 1e12 for r in tile_rows], height=0.38,
                label=f"GROUP_M = {g}" + (" (row order)" if g == 1 else ""))
    ax.axvline(flops / (cublas_ms * 1e-3) / 1e12, color="k", ls="--", label="cuBLAS")
    ax.set_yticks(pos, [f"{r[0]}\n{r[1]['registers']} regs, {r[1]['shared_bytes'] // 1024} KB smem, "
                        f"{programs_per_sm(r[1])}/SM" for r in tile_rows], fontsize=8)
    ax.set_xlabel(f"TFLOP/s, 8192³ bf16 ({peak_label})")
    ax.set_title("one tiled matmul kernel, different tiles and tile orders")
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    print(f"cuBLAS: {cublas_ms:.3f} ms = {flops / (cublas_ms * 1e-3) / 1e12:.0f} TFLOP/s")
    for label, res, times in tile_rows:
        print(f"{label:<22} {res['registers']:>3} registers/thread, {res['spilled_bytes']} bytes spilled, "
              f"{res['shared_bytes'] / 1024:6.1f} KB shared, {programs_per_sm(res)} program(s)/SM; "
              f"{times[8]:.3f} ms grouped, {times[1]:.3f} ms row order ({times[1] / times[8]:.2f}x)")
else:
    print("No GPU: the kernel was checked in the interpreter; tile timings and resources need a compiled kernel.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "autotune-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for. The smallest tile leaves the tensor cores starved (too little arithmetic per load);
# `128 × 256` with 8 warps is near the best a plain kernel gets, and its accumulator takes 128 of each
# thread's registers; `256 × 256` either spills or does not fit. Row order loses most where a wave of
# programs needs more of `w` than L2 holds.
#
# Choosing among tiles by hand per shape is tedious, and the best tile depends on the shape: a decode GEMM
# of 16 rows wants `BLOCK_M = 16` and many narrow tiles. `triton.autotune` times a list of configurations on
# the first call for each distinct value of its `key` arguments and caches the winner. The cache is a
# dictionary you can read: below, two shapes, two different winners. (The course's reference solutions pick
# their tiles with a small function of the shape instead, chosen once by a sweep on an H200: autotuning costs
# seconds per new shape, which a grader timing your first call would count. Your exercises can do the same.)

# %% nbgrader={"grade": false, "grade_id": "autotune", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
if ON_GPU:
    autotuned = triton.autotune(
        configs=[triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g), num_warps=nw, num_stages=ns)
                 for bm, bn, bk, g, nw, ns in ((16, 64, 256, 1, 4, 3), (64, 128, 64, 8, 4, 4),
                                               (128, 256, 64, 8, 8, 4))],
        key=["M", "N", "K"],
    )(tiled._matmul_kernel)
    for m in (16, 4096):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(4096, meta["BLOCK_N"]),)  # noqa: E731
        autotuned[grid](x, w, out, m, 4096, 4096, x.stride(0), 1, w.stride(0), 1, out.stride(0), PRECISION=None)
    for key, config in autotuned.cache.items():
        print(f"key {key}: chose {config}")
else:
    print("No GPU: autotuning times configurations, which means nothing in the interpreter.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "epilogue-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. Why the epilogue is nearly free
#
# A transformer MLP's first layer with a residual: `out = gelu(x @ W + b) + r`, with `x` `(M, K)`, `W`
# `(K, N)`, `b` `(N,)`, `r` `(M, N)`. Call `|y|` the size of one `(M, N)` tensor. In PyTorch:
#
# | kernel | reads | writes | traffic |
# |---|---|---|---|
# | `y = addmm(b, x, W)` (cuBLAS, bias in its epilogue) | `x`, `W`, `b` | `y` | `\|x\| + \|W\| + \|y\|` |
# | `g = gelu(y)` | `y` | `g` | `2\|y\|` |
# | `out = g + r` | `g`, `r` | `out` | `3\|y\|` |
# | **in all** | | | **`\|x\| + \|W\| + 6\|y\|`**, 3 launches |
# | fused: one GEMM whose epilogue adds `b`, applies GELU, adds `r` | `x`, `W`, `b`, `r` | `out` | **`\|x\| + \|W\| + 2\|y\|`**, 1 launch |
#
# (A bias added as its own kernel, `x @ W + b`, costs two more passes: `8|y|`.) The saving, `4|y|`, is
# bytes; the arithmetic, `2·M·N·K` flops, is the same. So the model's answer depends on which of the two
# sets the GEMM's time:
#
# * `K` short, or `M` small: the GEMM is quick or memory-bound and `4|y|` is a large part of the time;
# * `M`, `N` and `K` all large: the GEMM is compute-bound for `2K` flops per output element, and the passes
#   over `y` are a few percent.
#
# The **residual-add trick** is the last line: the GEMM writes its output anyway; adding `r` to the tile
# before that write costs one read of `r`, and saves a whole kernel that would read `y` and `r` and write
# `out`. cuBLASLt's epilogues (`D = act(α·A·B + β·C)`, with `C = r`) do the same.
#
# ![](figures/gemm_tile_epilogue.svg)

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-epilogue-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 04.predict_epilogue_bytes · the epilogue's bytes, before measuring (about 15 min · ★☆☆)
#
# **Spec.** Write `predicted_epilogue_bytes(m, k, n, elem_bytes)` returning the pair `(unfused_bytes,
# fused_bytes)`: the HBM bytes of `gelu(x @ W + b) + r` for `x (m, k)`, `W (k, n)`, `b (n,)`, `r (m, n)`,
# every tensor of `elem_bytes` bytes an element, first as cuBLAS (`addmm`, bias in its epilogue) + two eager
# kernels, then as one fused GEMM. Count each tensor a kernel reads or writes once (caches aside), in bytes,
# as Python ints.
#
# The cell after the test turns your bytes into times (`max(bytes / bandwidth, flops / peak)` plus the
# launches), and the measurement after exercise 04.gemm_gelu_residual draws them against your kernel.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The table above has the answer in units of `|y|`: go down its rows and turn each tensor into bytes.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `|x| = m·k·elem_bytes`, `|W| = k·n·elem_bytes`, `|b| = n·elem_bytes`, `|y| = m·n·elem_bytes`. Both versions
# read `x`, `W` and `b` once; they differ only in how many `(m, n)` tensors pass through HBM.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Unfused: `|x| + |W| + |b| + 6|y|`; fused: `|x| + |W| + |b| + 2|y|`. The traps: counting the bias as a kernel
# of its own (it rides in `addmm`), forgetting that the fused kernel still reads `r`, and returning elements
# instead of bytes.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 04.predict_epilogue_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_epilogue_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_epilogue_bytes(m: int, k: int, n: int, elem_bytes: int) -> tuple[int, int]:
    """(unfused, fused) HBM bytes of gelu(x @ W + b) + r, x (m, k), W (k, n), b (n,), r (m, n), in bytes."""
    ### BEGIN SOLUTION
    common = elem_bytes * (m * k + k * n + n)  # x, W and b, read once by either version
    y = elem_bytes * m * n
    return common + 6 * y, common + 2 * y  # y written, read, g written, read, r read, out written | r, out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_epilogue_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.predict_epilogue_bytes", predicted_epilogue_bytes, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "epilogue-model-md", "locked": true, "schema_version": 3, "solution": false}
# The cell below turns your byte counts into times, the prediction your kernel will be measured against:
# each kernel takes `max(bytes / BW, flops / peak)` plus a launch (the GEMM's own bytes are
# `|x| + |W| + |b| + |y|`; the rest of the unfused count streams at copy bandwidth). First GPT-2-medium's MLP
# shape (`K = 1024 → N = 4096`; GELU-tanh is GPT-2's own activation) from one row to 16384 rows, then
# `M = N = 8192` as `K` grows. Until your function is written, the cell uses the course's own count and says
# so.

# %% nbgrader={"grade": false, "grade_id": "epilogue-model", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def gemm_s(m, k, n, extra_bytes=0, e=2):
    """Roofline time of one GEMM plus `extra_bytes` of traffic, with one launch, in seconds."""
    n_bytes = e * (m * k + k * n + n + m * n) + extra_bytes
    return max(n_bytes / (bw_gbps * 1e9), 2 * m * n * k / (peak_tflops * 1e12)) + launch_s


try:
    predicted_epilogue_bytes(1, 1, 1, 2)
    epilogue_bytes = predicted_epilogue_bytes
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"predicted_epilogue_bytes is not written yet ({type(exc).__name__}): the model below uses the course's "
          "own count until you write it and run this cell again")
    epilogue_bytes = gemm_epilogue_fusion.epilogue_bytes_reference


def epilogue_model_us(m, k, n, e=2):
    """(unfused, fused) µs from the predicted bytes: the GEMM at its roofline, the rest of the unfused traffic
    at copy bandwidth with two more launches; the fused kernel at its own roofline with one launch."""
    unfused_bytes, fused_bytes = epilogue_bytes(m, k, n, e)
    gemm_bytes = e * (m * k + k * n + n + m * n)
    flops_s = 2 * m * n * k / (peak_tflops * 1e12)
    unfused = gemm_s(m, k, n) + (unfused_bytes - gemm_bytes) / (bw_gbps * 1e9) + 2 * launch_s
    fused = max(fused_bytes / (bw_gbps * 1e9), flops_s) + launch_s
    return 1e6 * unfused, 1e6 * fused


MS_EPI = runtime.demo_points([1, 16, 64, 256, 1024, 4096, 16384])  # three of them when the grader runs this
K_EPI, N_EPI = 1024, 4096
model_unfused, model_fused = zip(*(epilogue_model_us(m, K_EPI, N_EPI) for m in MS_EPI))
KS_EPI = runtime.demo_points([256, 512, 1024, 2048, 4096, 8192])
model_k = [epilogue_model_us(8192, k, 8192) for k in KS_EPI]
model_k_ratio = {k: u / f for k, (u, f) in zip(KS_EPI, model_k)}

print(f"The model of gelu(x @ W + b) + r in bf16 on {peak_label}:")
for m, u, f in zip(MS_EPI, model_unfused, model_fused):
    print(f"  M={m:<6} K={K_EPI} N={N_EPI}: unfused {u:8.1f} µs, fused {f:8.1f} µs ({u / f:.2f}x)")
for k, (u, f) in zip(KS_EPI, model_k):
    print(f"  M=N=8192 K={k:<5}: unfused {u:8.1f} µs, fused {f:8.1f} µs ({u / f:.2f}x)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "gemm_gelu_residual-md", "locked": true, "schema_version": 3, "solution": false}
# Read the prediction before writing the kernel. With a few rows every version is launches and latency,
# and fusing saves two of three launches: about 2.3 times. At `K = 1024` the GEMM stays short enough that
# the `4|y|` saved is still close to half the time up to 16384 rows. At `M = N = 8192` the ratio falls from
# about 3 at `K = 256` to 1.1 at `K = 8192`: there the product's flops hide the epilogue, and what decides
# the time is how close the fused GEMM gets to cuBLAS.

# %% [markdown] nbgrader={"grade": false, "grade_id": "gemm_gelu_residual-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 04.gemm_gelu_residual · GEMM + bias + GELU + residual in one kernel (about 90 min · ★★★)
#
# **Spec.** `gemm_gelu_residual(x, w, b, r) -> out`, `out = gelu_tanh(x @ w + b) + r` with
# `gelu_tanh(u) = 0.5·u·(1 + tanh(√(2/π)·(u + 0.044715·u³)))`. `x (M, K)`, `w (K, N)`, `b (N,)`, `r (M, N)`,
# all of one dtype (fp32, fp16 or bf16), any `M`, `N`, `K` (not multiples of the tile: mask) and any strides
# (`x` padded, `w` the transpose of an `nn.Linear` weight, `r` transposed: pass the strides to the kernel).
# Returns a new contiguous `(M, N)` tensor in the inputs' dtype, computed by **one** Triton kernel: the
# K loop of section 1 into one float32 accumulator, then, on that accumulator, add `b`, apply GELU, add `r`
# and round once, at the store. For float32 inputs use `input_precision="ieee"` in `tl.dot`
# (`dot_precision(dtype)` returns it).
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Section 1's kernel already leaves the finished tile in a float32 accumulator. Everything this exercise adds
# happens between the end of the K loop and the store, on that accumulator, with one extra load each for `b`
# and `r`.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `grouped_tile` gives the tile, `tile_dot` the K loop (both from section 1). Then load `b[rn]` (a row vector,
# masked with `rn < N`) and the `r` tile with its two strides (masked like the store), add the bias with
# `bias[None, :]`, apply the GELU, add `r`, and store `.to(out_ptr.dtype.element_ty)`. Write the GELU as a
# `@triton.jit` function of its own: `0.5·(1 + tanh(z)) = 1 / (1 + e^(−2z))` needs one `tl.exp`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `u = acc + bias[None, :]`; `z = 0.7978845608028654 * (u + 0.044715 * u * u * u)`;
# `y = u / (1 + tl.exp(-2 * z)) + res.to(tl.float32)`. The traps: the residual belongs *after* the GELU, the
# bias *inside* it; load `b` and `r` as float32 before the arithmetic, not after; mask both loads as well as the
# store, since edge tiles hang past `M` and `N`.
#
# </details>
# <details><summary>Make it fast</summary>
#
# * Registers: a `128 × 256` float32 accumulator is 128 a thread already, and `r`'s tile and GELU's temporaries
#   on top spill. Use `64 × 128` tiles with 4 warps (they suit the timed short-`K` shape too: one program's
#   epilogue runs while another's products do), or apply the epilogue one column half at a time
#   (`tl.split` of the reshaped accumulator); the compiled kernel's `n_spills` tells.
# * For bf16 results take `tanh` from NVIDIA's `tanh.approx.f32` through `tl.inline_asm_elementwise`: one
#   special-function instruction where `exp` and the division take two; its error, about 2⁻¹¹, is a tenth of
#   a bf16 rounding. Keep the exact form for fp32 and fp16, in the interpreter and on other GPUs.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 04.gemm_gelu_residual -->

# %% nbgrader={"grade": false, "grade_id": "gemm_gelu_residual", "locked": false, "schema_version": 3, "solution": true}
# Helpers your kernel and launcher call (the GELU as a @triton.jit function, the epilogue, launch settings, input
# checks) go here; or write everything inside the two functions below.
### BEGIN SOLUTION
# include: kernels/gemm_epilogue.py (gelu_tanh, approx_tanh_applies, _epilogue_store, gemm_launch_settings,
#     _check_epilogue_inputs)
### END SOLUTION


@triton.jit
def _gemm_gelu_residual_kernel(x_ptr, w_ptr, b_ptr, r_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wk,
                               stride_wn, stride_b, stride_rm, stride_rn, stride_om,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               GROUP_M: tl.constexpr, HALVES: tl.constexpr, PRECISION: tl.constexpr,
                               APPROX_TANH: tl.constexpr):
    """One program computes one BLOCK_M x BLOCK_N tile of out = gelu_tanh(x @ w + b) + r.

    x (M, K), w (K, N), b (N,), r (M, N): one dtype, strides in elements (any layout); out (M, N) row-major
    (stride_om, 1). PRECISION: "ieee" for float32 inputs, None otherwise (dot_precision(dtype)). HALVES: apply the
    epilogue one column half at a time (the register hint); APPROX_TANH: the tanh.approx speed trick. Launch
    with both False to start with."""
    # 1. which tile is mine: pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M);
    #    the row indices rm and column indices rn of the tile
    # 2. the K loop, one float32 accumulator: acc = tile_dot(x_ptr, w_ptr, rm, rn, M, N, K, strides...,
    #    BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
    # 3. epilogue, in float32: load b[rn] and the r tile (masked), u = acc + b, gelu_tanh(u) + r
    # 4. round once to out's dtype (out_ptr.dtype.element_ty) and store, masked at the ragged edges
    ### BEGIN SOLUTION
    # include body: kernels/gemm_epilogue.py (_gemm_gelu_residual_kernel)
    ### END SOLUTION


def gemm_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """out = gelu_tanh(x @ w + b) + r in one kernel.

    x (M, K), w (K, N), b (N,), r (M, N): all fp32, fp16 or bf16, any strides (w may be an nn.Linear
    weight's .t(), x a slice of a wider buffer). Returns out (M, N), contiguous, in x's dtype."""
    # 1. check shapes and dtypes; M, K = x.shape; N = w.shape[1]
    # 2. allocate out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    # 3. choose tile sizes (e.g. 64 x 128 x 64, GROUP_M = 8, 4 warps) and the grid, one program per tile:
    #    (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    # 4. launch with every stride (x.stride(0), x.stride(1), w.stride(0), ...),
    #    PRECISION=dot_precision(x.dtype), HALVES=False and APPROX_TANH=False; return out
    ### BEGIN SOLUTION
    # include body: kernels/gemm_epilogue.py (gemm_gelu_residual)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "gemm_gelu_residual-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("04.gemm_gelu_residual", gemm_gelu_residual)

# %% nbgrader={"grade": true, "grade_id": "test_gemm_gelu_residual_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("04.gemm_gelu_residual", gemm_gelu_residual, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_gemm_gelu_residual_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04.gemm_gelu_residual", gemm_gelu_residual, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_gemm_gelu_residual_performance", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("04.gemm_gelu_residual", gemm_gelu_residual, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_gemm_gelu_residual_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.gemm_gelu_residual", gemm_gelu_residual, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "gemm_gelu_residual-ref", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's reference solution (`kernels/gemm_epilogue.py`, with `tanh.approx` for
# bf16) at the timed shape, slowest of 5 gradings: 0.28 of the bf16 matmul rate and 1.85x cuBLAS + the
# eager epilogue on an H100, 0.27 and 1.55x on an H200 (torch 2.11, triton 3.6); with GELU's exact form
# 1.33x on the H200. cuBLAS + the eager epilogue against itself varies by 0.96-1.04x.
#
# **Why these bars.** The speed-up bar sits above eager's own noise, and the precision bar leaves room for
# `torch.compile` of the eager code (its GEMM rounds `y` before the fused epilogue rounds again: about 1.24
# times one rounding) while a bf16 accumulator, whose error grows with `K`, fails. `docs/grading.md` has the
# rest.

# %% [markdown] nbgrader={"grade": false, "grade_id": "epilogue-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernel against the model
#
# The cell below times, at the shapes of the model above, cuBLAS's product alone, cuBLAS + the eager
# epilogue (`addmm`, `gelu`, add), `torch.compile` of that eager version, and your `gemm_gelu_residual`.
# Each is recorded in a CUDA graph and replayed, so that the host's launch cost (tens of µs for a Triton
# kernel launched from Python) stays out, and the versions take turns, so that all meet the same clocks (a
# GPU running matrix products for long heats up and slows down: timed one after another, the last would be
# penalised). Left: time against `M`, with the model's two lines. Right: your kernel's speed-up over cuBLAS
# + the eager epilogue as `K` grows at `M = N = 8192`, with the model's ratio. Until exercise 04.gemm_gelu_residual is written,
# the cell times the others and says it left yours out.

# %% nbgrader={"grade": false, "grade_id": "epilogue-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
EAGER, MINE = "cuBLAS + eager epilogue", "your gemm_gelu_residual"
EPI_VERSIONS = {EAGER: gemm_epilogue_fusion.gemm_gelu_residual_eager, MINE: lambda x, w, b, r: gemm_gelu_residual(x, w, b, r)}
STYLES = {"cuBLAS matmul alone": ("x-", "0.5"), EAGER: ("o-", "C0"), MINE: ("^-", "C1"), "torch.compile": ("d-", "C3")}


def time_epilogue(m, k, n, versions, with_compile=True):
    """{name: µs} at one shape: cuBLAS's product alone, each of `versions` (name -> f(x, w, b, r)) that is
    written, and torch.compile's version, timed in turns."""
    x, w, b, r = gemm_epilogue_fusion.random_epilogue_inputs(m, k, n)
    calls = {"cuBLAS matmul alone": lambda: x @ w}
    calls.update({name: (lambda f=f: f(x, w, b, r)) for name, f in versions.items()})
    if with_compile:
        calls["torch.compile"] = lambda: compiled_epilogue(x, w, b, r)
    return time_in_turns(calls, desc=f"M={m}, K={k}, N={n}")


def sweep(values, shape, versions, **kw):
    """{name: {value: µs}} for each value, at shape(value) = (m, k, n). A version left out once (its exercise
    not written yet) is not tried again."""
    out = {}
    for v in values:
        times = time_epilogue(*shape(v), versions, **kw)
        versions = {name: f for name, f in versions.items() if name in times}
        for name, t in times.items():
            out.setdefault(name, {})[v] = t
    return out


def speedups(times, name, base=EAGER):
    """(values, speed-up of `name` over `base` at each) where both were timed; empty when `name` was not."""
    xs = [v for v in times.get(name, {}) if v in times.get(base, {})]
    return xs, [times[base][v] / times[name][v] for v in xs]


epi_us, epi_k_us = {}, {}
if ON_GPU:
    compiled_epilogue = runtime.demo_compile(gemm_epilogue_fusion.gemm_gelu_residual_eager)
    print("Timing over M (torch.compile compiles on the way) ...")
    epi_us = sweep(MS_EPI, lambda m: (m, K_EPI, N_EPI), EPI_VERSIONS)
    print("Timing over K ...")
    epi_k_us = sweep(KS_EPI, lambda k: (8192, k, 8192), EPI_VERSIONS, with_compile=False)

fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
ax.loglog(MS_EPI, model_unfused, "k--", label="model: unfused (6|y|, 3 launches)")
ax.loglog(MS_EPI, model_fused, "k:", label="model: fused (2|y|, 1 launch)")
for name, times in epi_us.items():
    ax.loglog(list(times), list(times.values()), STYLES[name][0], color=STYLES[name][1], label=name, ms=4)
ax.set_xlabel("M (rows: tokens)")
ax.set_ylabel("µs")
ax.set_title(f"gelu(x @ W + b) + r, K = {K_EPI}, N = {N_EPI}, bf16")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
bx.semilogx(KS_EPI, list(model_k_ratio.values()), "k--", label="model")
ks, ratio = speedups(epi_k_us, MINE)
if ks:
    bx.semilogx(ks, ratio, STYLES[MINE][0], color=STYLES[MINE][1], label=MINE)
bx.axhline(1.0, color="gray", lw=1)
bx.set_xticks(KS_EPI, [str(k) for k in KS_EPI])
bx.minorticks_off()
bx.set_xlabel("K (M = N = 8192)")
bx.set_ylabel("speed-up over cuBLAS + eager epilogue")
bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
bx.grid(True, which="both", alpha=0.3)
bx.legend(fontsize=8)
plt.tight_layout()
plt.show()
if ON_GPU:
    for i, m in enumerate(MS_EPI):
        measured = ", ".join(f"{name} {t[m]:.1f}" for name, t in epi_us.items() if m in t)
        print(f"M={m:<6} model {model_unfused[i]:8.1f} -> {model_fused[i]:8.1f} µs "
              f"({model_unfused[i] / model_fused[i]:.2f}x) | measured µs: {measured}")
    for k, r_ in zip(*speedups(epi_k_us, MINE)):
        print(f"M=N=8192 K={k:<5} your kernel {r_:.2f}x as fast as cuBLAS + eager (model {model_k_ratio[k]:.2f}x)")
else:
    print("No GPU: the plots show the model only; on a GPU this cell measures your kernel against it.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "epilogue-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for (the figures quoted are an H200's, with the course's reference solution). With a few
# rows, reading the weights (`|W|` = 8 MiB here) takes a couple of µs, so the times are launches and
# latency, and what a fused kernel saves is the two extra launches: compare the first printed row. Around
# `M = 64`, a kernel with `64 × 128` tiles (the reference's choice at that size) has only `N / 128 = 32` of
# them, too few to fill the machine, and loses that lead (a split of `K` across programs, or narrower tiles,
# would win it back: try it). From about a thousand rows a fused kernel gains less than the model's ratio,
# which assumes its product is as fast as cuBLAS's; a pointer-based Triton GEMM like section 1's reaches
# about 80% of cuBLAS on an H200 and loses most of the gain. For the largest `M` it depends on `K`: the
# right panel shows the speed-up shrinking towards 1 as `K` grows and the product's `2K` flops per element
# swamp the `4|y|` saved. Where your kernel falls *below* the model's line, that is the GEMM itself: at
# `K = 8192` the 20% lost is more than everything the epilogue saves. Section 4 closes most of that gap.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-short-k-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 1.** In the right-hand panel, fusing saves the same `4|y|` bytes at every `K`, yet the speed-up
# shrinks towards 1 as `K` grows. In two or three sentences: why, and at which shapes of a real model
# (think of decode and of a small model's MLP) is epilogue fusion worth the trouble?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-short-k", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The saving is bytes, `4|y|`, fixed for a given `M × N`; the product's time grows with `K` (`2K` flops per
# output element), so once the GEMM is compute-bound the passes over `y` are a shrinking share of the total
# and a few percent lost in the GEMM itself wipes them out. Fusion pays where the GEMM is short: few rows
# (decode, where launches and the passes over `y` dominate) or a short `K` (a small model's MLP, a LoRA
# adapter), and wherever the epilogue would otherwise be several kernels.

# %% [markdown] nbgrader={"grade": false, "grade_id": "precision-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Precision in the epilogue: float32 until the one rounding
#
# Exercise 04.gemm_gelu_residual asks for `gelu(acc + b) + r` on the float32 accumulator and one rounding. PyTorch rounds three
# times: `y` to bf16 after the GEMM, `gelu(y)` to bf16, and the sum. A kernel that rounds `acc + b` to the
# input dtype before the GELU (to "save registers") rounds twice. And a kernel whose accumulator is bf16
# rounds at every step of the K loop. The cell measures your kernel and those three (computed with torch,
# in float64 between the roundings each makes) against float64 as `K` grows, divided by what rounding the
# exact result once costs (the best any kernel storing bf16 can do): 1 is perfect. Without a GPU the same
# runs in fp16 in the interpreter (its bf16 arithmetic is not exact). Until exercise 04.gemm_gelu_residual is written, the cell
# shows the other three.

# %% nbgrader={"grade": false, "grade_id": "precision-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
PREC_DTYPE = torch.bfloat16 if ON_GPU else torch.float16
KS_PREC = [256, 1024, 4096, 16384]
PREC_STYLES = {MINE: "o-", "PyTorch (three roundings)": "s-", "rounded before GELU (two)": "^-",
               "low-precision accumulator": "x-"}
ratios = {}
yours_written = True
for k in KS_PREC:
    gen = torch.Generator().manual_seed(k)
    x, w, b, r = (t.to(PREC_DTYPE).to(DEVICE) for t in (
        torch.randn(64, k, generator=gen), torch.randn(k, 128, generator=gen) / k**0.5,
        0.5 * torch.randn(128, generator=gen), torch.randn(64, 128, generator=gen)))
    exact = gemm_epilogue_fusion.gemm_gelu_residual_reference(x, w, b, r)
    once = rel_err(exact.to(PREC_DTYPE), exact)
    acc = x.double() @ w.double()
    y = (acc + b.double()).to(PREC_DTYPE)
    low = torch.zeros_like(acc)
    for k0 in range(0, k, 64):  # what a kernel keeping its accumulator in the input dtype computes
        low = (low + x[:, k0:k0 + 64].double() @ w[k0:k0 + 64].double()).to(PREC_DTYPE).double()
    versions = {}
    if yours_written:
        try:
            versions[MINE] = gemm_gelu_residual(x, w, b, r)
        except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped; anything else is raised
            if not not_written(exc):
                raise
            yours_written = False
            print(f"{MINE}: left out, exercise 04.gemm_gelu_residual is not written yet ({type(exc).__name__}: {exc})")
    gelu_y = F.gelu(y.double(), approximate="tanh")
    versions["PyTorch (three roundings)"] = (gelu_y.to(PREC_DTYPE) + r).to(PREC_DTYPE)
    versions["rounded before GELU (two)"] = (gelu_y + r.double()).to(PREC_DTYPE)
    versions["low-precision accumulator"] = (F.gelu(low + b.double(), approximate="tanh") + r.double()).to(PREC_DTYPE)
    for name, got in versions.items():
        ratios.setdefault(name, []).append(rel_err(got, exact) / once)

fig, ax = plt.subplots(figsize=(8, 3.8))
for name, vals in ratios.items():
    ax.semilogx(KS_PREC, vals, PREC_STYLES[name], label=name)
ax.axhline(1.4, color="gray", ls=":", label="the grader's bound (1.4)")
ax.set_xlabel("K")
ax.set_ylabel("error / error of one rounding")
ax.set_title(f"gelu(x @ W + b) + r in {str(PREC_DTYPE).replace('torch.', '')}, against float64")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
plt.show()
for name, vals in ratios.items():
    print(f"{name:<28}" + "  ".join(f"K={k}: {v:.2f}" for k, v in zip(KS_PREC, vals)))

# %% [markdown] nbgrader={"grade": false, "grade_id": "tma-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: a kernel written as exercise 04.gemm_gelu_residual asks at 1.00 (its float32 accumulation costs nothing you
# can see next to one bf16 rounding); PyTorch's three roundings near 1.4; rounding before the GELU near 1.2,
# flat in `K`; the low-precision accumulator growing with `K`, the signature the grader looks for.
#
# ## 4. The last 20%: persistent programs and the TMA engine
#
# A pointer-based kernel like exercise 04.gemm_gelu_residual's reaches about 80% of cuBLAS on an H200 (the course's reference
# solution does), which at `8192³` leaves it no faster than cuBLAS + the eager epilogue: the time lost in
# the GEMM is as much as the `4|y|` saved. Two Hopper features close most of that gap, and Triton exposes
# both:
#
# * **the TMA copy engine**: a descriptor (`TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_K])`) describes
#   the tensor once; `x_desc.load([row, col])` asks the engine for a whole tile, which it moves into shared
#   memory asynchronously, zero-filling past the edges (and `out_desc.store(...)` drops what lies past
#   them). No address arithmetic or masks in the threads, and the loads no longer compete with the math for
#   issue slots. It needs 16-byte-aligned rows, so a kernel must fall back to pointers for layouts that
#   break that;
# * **persistent programs**: launch one program per multiprocessor and let each loop over output tiles
#   (`for tile in tl.range(pid, n_tiles, PROGRAMS)`). No ramp-up and drain per tile, and the next tile's
#   first loads can be in flight while this one's epilogue runs.
#
# ### Optional exercise (ungraded, needs Hopper): `gemm_gelu_residual_tma`
# Write `gemm_gelu_residual_tma(x, w, b, r)`, the same function as exercise 04.gemm_gelu_residual, as a persistent kernel whose
# tiles the TMA engine moves. `kernels/tma.py`'s helpers, imported in the setup cell, do the host side:
# `tma_path_applies(x, w)` and `tma_ready(r)` say whether the engine can serve these tensors (a Hopper GPU,
# 16-bit dtypes, more than 256 rows, 16-byte-aligned rows); `descriptor(t, block)` makes a descriptor, and
# `weight_descriptor(w, BLOCK_K, BLOCK_N)` one for `w` in either layout (it says whether it holds `w`'s
# transpose, an `nn.Linear` weight, whose tiles you then transpose with `.T`); `persistent_programs(n_tiles,
# device)` is the number of programs; `first_that_compiles(kernel, settings, launch)` tries settings in
# order, skipping those this Triton version cannot compile (warp specialization, for one). Where the engine
# does not apply, return your `gemm_gelu_residual`.
#
# Nothing grades this cell, and everything after it works without it. A GPU older than Hopper, or none,
# runs your fallback only; the cell after it times whatever you wrote.

# %% nbgrader={"grade": false, "grade_id": "gemm_gelu_residual_tma", "locked": false, "schema_version": 3, "solution": true}
# Optional (Hopper, ungraded). Your persistent TMA kernel, its settings and its launch go here.
### BEGIN SOLUTION
# include: kernels/gemm_epilogue.py (_epilogue_tile, _gemm_gelu_residual_tma_kernel, TMA_SETTINGS,
#     _launch_epilogue_tma)
### END SOLUTION


def gemm_gelu_residual_tma(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x @ w + b) + r, as gemm_gelu_residual computes it, with the tiles moved by the TMA engine on
    Hopper; gemm_gelu_residual(x, w, b, r) itself where the engine does not apply."""
    # 1. check the inputs as gemm_gelu_residual does
    # 2. where tma_path_applies(x, w) and tma_ready(r) do not both hold, return gemm_gelu_residual(x, w, b, r)
    # 3. out (M, N); descriptors of x, r and out (descriptor), of w (weight_descriptor: it says whether it holds
    #    w's transpose); programs = persistent_programs(number of tiles, x.device)
    # 4. launch one program per multiprocessor, trying your settings in order (first_that_compiles); return out
    ### BEGIN SOLUTION
    # include body: kernels/gemm_epilogue.py (gemm_gelu_residual_tma)
    ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "tma-measure-md", "locked": true, "schema_version": 3, "solution": false}
# The cell times, at `8192³`, cuBLAS alone, cuBLAS + the eager epilogue, `torch.compile`, your exercise-1
# kernel and your TMA kernel, taking turns as in section 2. It then times your two kernels against cuBLAS +
# the eager epilogue again over section 2's two sweeps, and plots their speed-ups with the model's. A kernel
# you have not written is left out.

# %% nbgrader={"grade": false, "grade_id": "tma-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
TMA = "your gemm_gelu_residual_tma"
TMA_VERSIONS = {**EPI_VERSIONS, TMA: lambda x, w, b, r: gemm_gelu_residual_tma(x, w, b, r)}
STYLES[TMA] = ("s-", "C2")
if ON_GPU:
    big = time_epilogue(8192, 8192, 8192, TMA_VERSIONS, with_compile=True)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.barh(list(big), list(big.values()), color=[STYLES[name][1] for name in big])
    ax.axvline(big["cuBLAS matmul alone"], color="k", ls="--", lw=1)
    ax.set_xlabel("µs, 8192³ bf16 (CUDA-graph replays, versions timed in turns)")
    ax.set_title(peak_label)
    plt.show()
    for name, t in big.items():
        print(f"{name:<28} {t:8.1f} µs = {2 * 8192**3 / (t * 1e-6) / 1e12:5.0f} TFLOP/s, "
              f"{t / big['cuBLAS matmul alone']:.3f}x the product alone")

    print("Timing over M and over K ...")
    tma_m_us = sweep(MS_EPI, lambda m: (m, K_EPI, N_EPI), TMA_VERSIONS, with_compile=False)
    tma_k_us = sweep(KS_EPI, lambda k: (8192, k, 8192), TMA_VERSIONS, with_compile=False)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4))
    ax.semilogx(MS_EPI, [u / f for u, f in zip(model_unfused, model_fused)], "k--", label="model")
    bx.semilogx(KS_EPI, list(model_k_ratio.values()), "k--", label="model")
    for axis, times in ((ax, tma_m_us), (bx, tma_k_us)):
        for name in (MINE, TMA):
            xs, ratio = speedups(times, name)
            if xs:
                axis.semilogx(xs, ratio, STYLES[name][0], color=STYLES[name][1], label=name)
        axis.axhline(1.0, color="gray", lw=1)
        axis.set_ylabel("speed-up over cuBLAS + eager epilogue")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    ax.set_xlabel(f"M (K = {K_EPI}, N = {N_EPI})")
    bx.set_xticks(KS_EPI, [str(k) for k in KS_EPI])
    bx.minorticks_off()
    bx.set_xlabel("K (M = N = 8192)")
    ax.set_title(peak_label)
    plt.tight_layout()
    plt.show()
    for label, times in (("M", tma_m_us), ("K", tma_k_us)):
        for name in (MINE, TMA):
            xs, ratio = speedups(times, name)
            if xs:
                print(f"{name} over {label}: " + ", ".join(f"{v}: {s:.2f}x" for v, s in zip(xs, ratio)))
else:
    print("No GPU: the TMA engine and persistent kernels need Hopper; the interpreter runs them for correctness only.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "tma-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. On an H200, the course's reference kernels at `8192³`: cuBLAS alone 1.60 ms, cuBLAS +
# the eager epilogue 1.74 ms, `torch.compile` 1.70 ms, the pointer kernel 1.76 ms, the TMA kernel 1.66 ms.
# The TMA kernel takes 1.03 times the product alone, so its epilogue costs almost nothing and it beats the
# eager version by 5%; the pointer kernel's slower product eats the whole saving. Over `M`, the reference's
# two kernels are the same up to 256 rows (the TMA path does not apply there and falls back to the pointer
# kernel); from about a thousand rows the TMA kernel keeps more of the model's gain. Over `K` both fall
# towards 1, the TMA kernel above the pointer one.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-gemm-gap-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 2.** At `8192³` a pointer-based fused kernel can be *slower* than cuBLAS + three eager
# kernels, although it moves `4|y|` fewer bytes. What does the time depend on at that shape, and what do
# the TMA engine and persistent programs change?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-gemm-gap", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# At `8192³` the GEMM is compute-bound: its time is set by how busy the tensor cores are kept, and `4|y|`
# (about 0.5 GiB) is a few percent of it. A pointer kernel reaching about 80% of cuBLAS loses more in the
# product than the epilogue saves. The TMA engine moves tiles without address arithmetic in the threads,
# freeing issue slots for the math, and persistent programs remove the per-tile ramp-up and overlap the next
# tile's loads with this tile's epilogue, bringing the product close to cuBLAS so that the saving shows.

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. Horizontal and epilogue fusion together: SwiGLU
#
# Llama-style MLPs compute `h = silu(x @ W_gate) · (x @ W_up)` before the down projection. Notebook 03 stacked
# `W_gate` and `W_up` so that one GEMM reads `x` once; here the epilogue goes in as well. Each program holds
# **two** float32 accumulators for the same output tile, one per weight, fed by the same `x` tile in the K
# loop, and stores only `silu(gate) · up`. With `|h|` one `(M, N)` tensor:
#
# | | traffic | launches |
# |---|---|---|
# | PyTorch: two GEMMs, `silu`, multiply | `2\|x\| + 2\|W\| + 7\|h\|` | 4 |
# | fused | `\|x\| + 2\|W\| + \|h\|` | 1 |
#
# Two accumulators cost the registers of one tile twice as wide: `128 × 128 × 2` is the `128 × 256` of
# section 1. The cell below evaluates the model for a Llama-2-7B MLP (`4096 → 11008`) at decode (16 rows)
# and prefill (8192 rows); after exercise 04.swiglu you measure your kernel against it.

# %% nbgrader={"grade": false, "grade_id": "swiglu-model", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
H_MODEL, H_MLP = 4096, 11008
SWIGLU_MS = (16, 8192)


def swiglu_model_us(m, k=H_MODEL, n=H_MLP, e=2):
    unfused = 2 * gemm_s(m, k, n) + 5 * e * m * n / (bw_gbps * 1e9) + 2 * launch_s
    fused = max(e * (m * k + 2 * k * n + m * n) / (bw_gbps * 1e9), 4 * m * n * k / (peak_tflops * 1e12)) + launch_s
    return {"model: unfused": 1e6 * unfused, "model: fused": 1e6 * fused}


print(f"The model of SwiGLU {H_MODEL} → {H_MLP} in bf16 on {peak_label}:")
for m in SWIGLU_MS:
    model = swiglu_model_us(m)
    print(f"  M={m:<5} unfused {model['model: unfused']:7.1f} µs, fused {model['model: fused']:7.1f} µs "
          f"({model['model: unfused'] / model['model: fused']:.2f}x)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-ex-md", "locked": true, "schema_version": 3, "solution": false}
# The model's gain is modest at both ends: at decode both weights stream once in either version, and
# fusing saves the launches and the small intermediates; at prefill the product dominates, and the fused
# kernel saves `|x|` and `6|h|` (a few hundred MiB), about a tenth of the time, if its GEMM keeps up with
# cuBLAS.

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 04.swiglu · two GEMMs and their gate in one kernel (about 60 min · ★★☆)
#
# **Spec.** `swiglu(x, w_gate, w_up) -> h`, `h = silu(x @ w_gate) · (x @ w_up)` with
# `silu(g) = g · sigmoid(g) = g / (1 + e^(−g))`. `x (M, K)`, `w_gate` and `w_up` `(K, N)`, one dtype (fp32,
# fp16 or bf16), any `M`, `N`, `K` and strides (the weights may be transposed `nn.Linear` weights). Returns a
# new contiguous `(M, N)` tensor in the inputs' dtype, from **one** Triton kernel that writes only `h`: one
# K loop, one `x` tile per step used by both `tl.dot`s, two float32 accumulators, `silu(g)·u` computed in
# float32 and rounded once. `input_precision="ieee"` for fp32.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Both products read the same `x` tile at every K step. Load it once and feed it to two `tl.dot` calls, each
# with its own accumulator; the gate is applied only when both are complete.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Start from your exercise 04.gemm_gelu_residual kernel. `tile_dot` computes one product, so write its loop out
# here: three pointer blocks (`x`, `w_gate`, `w_up`, each with its own strides), one masked load of `x` and two
# of the weights a step, two float32 accumulators. After the loop, one elementwise line and one masked store.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `gate = tl.dot(a, g_tile_values, gate, input_precision=PRECISION)`, `up` likewise with the same `a`; after
# the loop `h = gate / (1 + tl.exp(-gate)) * up`. The traps: SiLU goes on the gate only (`silu(g)·u`, not
# `silu(g)·silu(u)` nor `sigmoid(g)·u`), and both weights' pointers advance by `BLOCK_K` rows each step.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Two `128 × 128` accumulators cost the registers of one `128 × 256`; `64 × 128` tiles with 4 warps suit the
# timed short-`K` shape, as in exercise 04.gemm_gelu_residual.
#
# </details>
#
# **Graded.** Timed at a `d_model = 256` model's gate and up projections (32768 × 256 → 2048 each).
#
# <!-- graded: 04.swiglu -->

# %% nbgrader={"grade": false, "grade_id": "swiglu", "locked": false, "schema_version": 3, "solution": true}
# Helpers your launcher calls (launch settings, input checks) go here; or write everything inside the two
# functions below.
### BEGIN SOLUTION
# include: kernels/swiglu.py (swiglu_launch_settings)
### END SOLUTION


@triton.jit
def _swiglu_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K, stride_xm, stride_xk, stride_gk, stride_gn, stride_uk,
                   stride_un, stride_hm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    """One program computes one BLOCK_M x BLOCK_N tile of h = silu(x @ w_gate) * (x @ w_up).

    x (M, K), w_gate and w_up (K, N): one dtype, strides in elements; h (M, N) row-major (stride_hm, 1)."""
    # 1. which tile is mine (grouped_tile), its rows rm and columns rn, and the K offsets rk
    # 2. pointers to the first x tile and to the first tile of each weight, each with its own strides
    # 3. two float32 accumulators; the K loop: load the x tile once, load both weight tiles (masked past
    #    M, N and K with 0), gate = tl.dot(a, g, gate, input_precision=PRECISION), up likewise; advance
    # 4. epilogue in float32: h = gate / (1 + exp(-gate)) * up; round once and store, masked
    ### BEGIN SOLUTION
    # include body: kernels/swiglu.py (_swiglu_kernel)
    ### END SOLUTION


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """h = silu(x @ w_gate) * (x @ w_up) in one kernel.

    x (M, K), w_gate and w_up (K, N): all fp32, fp16 or bf16, any strides. Returns h (M, N), contiguous,
    in x's dtype."""
    # 1. check shapes; allocate h; tile sizes and the grid (one program per output tile)
    # 2. launch with every stride and PRECISION=dot_precision(x.dtype); return h
    ### BEGIN SOLUTION
    # include body: kernels/swiglu.py (swiglu)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "swiglu-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("04.swiglu", swiglu)

# %% nbgrader={"grade": true, "grade_id": "test_swiglu_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04.swiglu", swiglu, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_swiglu_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.swiglu", swiglu, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_swiglu_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04.swiglu", swiglu, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_swiglu_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.swiglu", swiglu, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-ref", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's reference solution (`kernels/swiglu.py`) at the timed shape, slowest of 5
# gradings: 0.40-0.41 of the bf16 matmul rate and 1.43-1.64x eager on an H100 and an H200 (TMA version
# 0.42-0.43 and 1.53-1.84x); eager PyTorch reaches 0.23-0.30 of the rate.

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu_tma-md", "locked": true, "schema_version": 3, "solution": false}
# ### Optional exercise (ungraded, needs Hopper): `swiglu_tma`
# Write `swiglu_tma(x, w_gate, w_up)`, exercise 04.swiglu's function as a persistent kernel fed by the TMA engine,
# as `gemm_gelu_residual_tma` of section 4 is exercise 04.gemm_gelu_residual's: two accumulators per tile, one `x` tile per K
# step loaded once and used by both products, only `h` stored. Fall back to your `swiglu` where the engine
# does not apply (`tma_path_applies(x, w_gate, w_up)` says), or where the two weights are laid out
# differently (one row-major, the other an `nn.Linear` transpose), since one kernel reads both the same way.
# Nothing grades this cell; the cell after it times whatever you wrote.

# %% nbgrader={"grade": false, "grade_id": "swiglu_tma", "locked": false, "schema_version": 3, "solution": true}
# Optional (Hopper, ungraded). Your persistent TMA kernel, its settings and its launch go here.
### BEGIN SOLUTION
# include: kernels/swiglu.py (_swiglu_tma_kernel, SWIGLU_TMA_SETTINGS, SWIGLU_TMA_SHORT_K, _launch_swiglu_tma)
### END SOLUTION


def swiglu_tma(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """silu(x @ w_gate) * (x @ w_up), as swiglu computes it, with the tiles moved by the TMA engine on Hopper;
    swiglu(x, w_gate, w_up) itself where the engine does not apply or the two weights are laid out differently."""
    # 1. check the inputs as swiglu does
    # 2. where tma_path_applies(x, w_gate, w_up) does not hold, or one weight is row-major and the other an
    #    nn.Linear transpose, return swiglu(x, w_gate, w_up)
    # 3. h (M, N); descriptors of x and h, of each weight (weight_descriptor); persistent_programs(...) programs
    # 4. launch one program per multiprocessor, trying your settings in order (first_that_compiles); return h
    ### BEGIN SOLUTION
    # include body: kernels/swiglu.py (swiglu_tma)
    ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your SwiGLU against the model
#
# The cell times, at decode and prefill, the two cuBLAS GEMMs alone, PyTorch eager (`swiglu_eager` of
# `autograder.specs.gemm_epilogue_fusion`), `torch.compile` of it, your `swiglu` and your `swiglu_tma`, as
# CUDA-graph replays taking turns, beside the model's two bars. A kernel you have not written is left out.

# %% nbgrader={"grade": false, "grade_id": "swiglu-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
SWIGLU_VERSIONS = {"your swiglu": lambda x, wg, wu: swiglu(x, wg, wu),
                   "your swiglu_tma": lambda x, wg, wu: swiglu_tma(x, wg, wu)}
swiglu_us = {m: swiglu_model_us(m) for m in SWIGLU_MS}
if ON_GPU:
    compiled_swiglu = runtime.demo_compile(gemm_epilogue_fusion.swiglu_eager, dynamic=False)
    for m in SWIGLU_MS:
        x = torch.randn(m, H_MODEL, device="cuda", dtype=torch.bfloat16)
        wg, wu = ((torch.randn(H_MODEL, H_MLP, device="cuda") / 64).to(torch.bfloat16) for _ in range(2))
        calls = {"two cuBLAS GEMMs alone": lambda: (x @ wg, x @ wu),
                 "PyTorch eager": lambda: gemm_epilogue_fusion.swiglu_eager(x, wg, wu),
                 "torch.compile": lambda: compiled_swiglu(x, wg, wu)}
        calls.update({name: (lambda f=f: f(x, wg, wu)) for name, f in SWIGLU_VERSIONS.items()})
        times = time_in_turns(calls, desc=f"SwiGLU, M = {m}")
        SWIGLU_VERSIONS = {name: f for name, f in SWIGLU_VERSIONS.items() if name in times}  # written ones only
        swiglu_us[m].update(times)
        del x, wg, wu
fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
for ax, (m, row) in zip(axes, swiglu_us.items()):
    ax.barh(list(row), list(row.values()), color=["0.75", "0.6"] + [f"C{i}" for i in range(len(row) - 2)])
    ax.set_xlabel("µs")
    ax.set_title(f"SwiGLU 4096 → 11008, M = {m}" + ("" if ON_GPU else " (model only, no GPU here)"))
plt.tight_layout()
plt.show()
for m, row in swiglu_us.items():
    print(f"M={m}: " + ", ".join(f"{k} {v:.1f} µs" for k, v in row.items()))

# %% [markdown] nbgrader={"grade": false, "grade_id": "swiglu-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. At decode both weights stream once in either version, and a fused kernel saves the
# launches and the small intermediates. At prefill the product dominates: the fused kernel saves `|x|` and
# `6|h|` and beats PyTorch when its GEMM is within about 10% of cuBLAS (on an H200 the course's reference
# kernels take 2.27 ms with pointers and 2.22 ms with the TMA engine, against 2.41 ms for PyTorch eager and
# 2.17 ms for the two GEMMs alone).

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-swiglu-decode-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 3.** At decode (`M = 16`) the model gives fused SwiGLU only a small gain over PyTorch's four
# kernels. Which bytes dominate there, and what would you fuse next to do better at decode?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-swiglu-decode", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# At 16 rows the two weights (2 × 4096 × 11008 bf16, about 170 MiB) dominate: each version reads them once,
# and the intermediates `g`, `u`, `h` are tiny, so fusing saves only launches and a few small passes. To do
# better one must read fewer weight bytes (quantised weights, dequantised in the K loop) or fuse across
# layers so that the down projection starts while `h` is on chip; batching more tokens per weight read helps
# most of all.

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-md", "locked": true, "schema_version": 3, "solution": false}
# ## 6. A low-rank adapter inside the GEMM: fused LoRA
#
# LoRA fine-tunes a frozen linear layer `W` `(N, K)` by adding a **low-rank** update: two thin matrices
# `A` `(r, K)` and `B` `(N, r)` with a rank `r` of 8 to 64, and a scale `s` (LoRA's `α / r`):
# `y = x Wᵀ + s·(x Aᵀ) Bᵀ`. The adapter's work is small, `2·M·r·(K + N)` flops against the base product's
# `2·M·N·K`, but run as PyTorch writes it (as the PEFT library does) it is four more kernels:
#
# | kernel | reads | writes | traffic, in elements |
# |---|---|---|---|
# | `base = x @ W.T` | `x`, `W` | `base` | `MK + NK + MN` |
# | `xa = x @ A.T` | `x` again, `A` | `xa` | `MK + rK + Mr` |
# | `l = xa @ B.T` | `xa`, `B` | `l` | `Mr + Nr + MN` |
# | `sl = s * l` | `l` | `sl` | `2MN` |
# | `y = base + sl` | `base`, `sl` | `y` | `3MN` |
# | **fused**, one kernel | `x`, `W`, `A`, `B` | `y` | `MK + NK + rK + Nr + MN` |
#
# A third way folds the adapter into the weight once, `W' = W + s·B A` (a GEMM of `2·N·r·K` flops and a pass
# over `W`), after which each call is the base GEMM itself. Which one is right depends on how often `A` and `B`
# change, which is the question at the end of this section.
#
# The fused kernel is this notebook's GEMM with one more accumulator. Each K step loads an `x` tile anyway;
# multiplied by the `(BLOCK_K, r)` tile of `Aᵀ` as well, it builds the `(BLOCK_M, r)` tile of `x Aᵀ` beside the
# output tile: `r` floats a row, a few registers a thread. After the loop the epilogue multiplies that tile by
# the output tile's columns of `Bᵀ` `(r, BLOCK_N)` and adds the product into the accumulator, so `x Aᵀ` never
# reaches HBM and `x` is read once.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-lora-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 04.predict_lora_overhead · what an adapter costs, before measuring (about 15 min · ★☆☆)
#
# **Spec.** `predicted_lora_overhead(m, k, n, r) -> (extra_flops, extra_bytes)`, two floats: what a rank-`r`
# adapter adds to the base GEMM `x Wᵀ` (`x (m, k)`, `W (n, k)`), each as a fraction of the base GEMM's own
# count. `extra_flops`: the adapter's two products over the base product's `2·m·n·k`. `extra_bytes`: the HBM
# traffic of the unfused route in the table beyond the base GEMM's row, over that row (`x` and `W` read, the
# output written). Every tensor has one dtype, so the element size cancels.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Both answers are ratios of counts you can read off the table: one product row against the others, one
# traffic row against the rest.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# A product of an `(a, b)` matrix by a `(b, c)` one costs `2·a·b·c` flops; the adapter has two, `x Aᵀ` and
# `(x Aᵀ) Bᵀ`. For the bytes, add the traffic of the four rows below the base GEMM's and divide by
# `m·k + n·k + m·n`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `extra_flops = r·(k + n) / (n·k)`; the unfused adapter moves `m·k + r·k + 2·m·r + n·r + 6·m·n` elements. The
# traps: `x` is read a second time by `x @ A.T`, `x Aᵀ` is written and read back (`2·m·r`), and the scale is a
# pass of its own.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 04.predict_lora_overhead -->

# %% nbgrader={"grade": false, "grade_id": "predicted_lora_overhead", "locked": false, "schema_version": 3, "solution": true}
def predicted_lora_overhead(m: int, k: int, n: int, r: int) -> tuple[float, float]:
    """(extra_flops, extra_bytes) of a rank-r adapter on x (m, k) @ W.T, W (n, k), relative to the base GEMM."""
    ### BEGIN SOLUTION
    flops = r * (k + n) / (n * k)  # 2 m r (k + n) over 2 m n k
    unfused = m * k + r * k + 2 * m * r + n * r + 6 * m * n  # x again, A, xa both ways, B, l, s*l, the add
    return flops, unfused / (m * k + n * k + m * n)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_lora_overhead", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.predict_lora_overhead", predicted_lora_overhead, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-model-md", "locked": true, "schema_version": 3, "solution": false}
# The cell below turns your ratios into times with section 2's roofline: the base GEMM at `max(bytes / BW,
# flops / peak)` plus a launch; the unfused route adds your extra bytes at copy bandwidth and four launches;
# the fused kernel adds your extra flops to the product and `A` and `B` to its bytes; the merged weight costs
# the base GEMM alone. The shape is a 7B model's attention projection (`4096 → 4096`) with a rank-16 adapter,
# from decode to prefill. Until your function is written, the cell uses the course's own count and says so.

# %% nbgrader={"grade": false, "grade_id": "lora-model", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
try:
    predicted_lora_overhead(1, 1, 1, 8)
    lora_overhead = predicted_lora_overhead
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is passed over
    if not not_written(exc):
        raise
    print(f"predicted_lora_overhead is not written yet ({type(exc).__name__}): the model below uses the course's "
          "own count until you write it and run this cell again")
    lora_overhead = lora.lora_overhead_reference

K_LORA, N_LORA, R_LORA = 4096, 4096, 16
MS_LORA = runtime.demo_points([16, 64, 256, 1024, 4096, 16384])


def lora_model_us(m, k=K_LORA, n=N_LORA, r=R_LORA, e=2):
    """{version: µs} from the predicted ratios, each version at its roofline plus its launches."""
    extra_flops, extra_bytes = lora_overhead(m, k, n, r)
    base_bytes, base_flops = e * (m * k + n * k + m * n), 2 * m * n * k
    base = max(base_bytes / (bw_gbps * 1e9), base_flops / (peak_tflops * 1e12)) + launch_s
    fused = max((base_bytes + e * r * (k + n)) / (bw_gbps * 1e9),
                (1 + extra_flops) * base_flops / (peak_tflops * 1e12)) + launch_s
    unfused = base + extra_bytes * base_bytes / (bw_gbps * 1e9) + 4 * launch_s
    return {"model: merged weight": 1e6 * base, "model: unfused adapter": 1e6 * unfused, "model: fused": 1e6 * fused}


lora_model = {m: lora_model_us(m) for m in MS_LORA}
print(f"The model of a {K_LORA} → {N_LORA} layer with a rank-{R_LORA} adapter in bf16 on {peak_label}:")
for m in MS_LORA:
    extra_flops, extra_bytes = lora_overhead(m, K_LORA, N_LORA, R_LORA)
    print(f"  M={m:<6} the adapter adds {100 * extra_flops:.2f}% to the flops; unfused, {100 * extra_bytes:.0f}% "
          "to the bytes")
for m, row in lora_model.items():
    print(f"  M={m:<6} " + ", ".join(f"{name.removeprefix('model: ')} {t:8.1f} µs" for name, t in row.items()))

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-ex-md", "locked": true, "schema_version": 3, "solution": false}
# Read the model before writing the kernel: at this shape the adapter's flops are under one percent of the
# product's, `r (K + N) / (N K)` whatever `M`; its unfused bytes grow with `M`, because of the passes over
# `(M, N)`. With a few rows the extra launches weigh most.

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 04.lora · a low-rank adapter inside the GEMM (about 60 min · ★★★)
#
# **Spec.** `lora_linear(x, w, a, b, scale) -> y`, `y = x Wᵀ + s·(x Aᵀ) Bᵀ`. `x (M, K)`; `w (N, K)`,
# `a (r, K)` and `b (N, r)` as `nn.Linear` stores its weights; `r` from 1 to 128; `scale` a Python float. One
# dtype (fp32, fp16 or bf16), any `M`, `N`, `K` and strides (the grader passes padded rows and transposed
# views). Returns a new contiguous `(M, N)` tensor in the inputs' dtype from **one** Triton kernel: each K
# step's `x` tile feeds two float32 accumulators, `x Wᵀ` `(BLOCK_M, BLOCK_N)` and `x Aᵀ` `(BLOCK_M, r)`; the
# epilogue adds `s·(x Aᵀ)` times the tile's columns of `Bᵀ`, rounds once and stores. `x Aᵀ` never goes to
# HBM. For fp32 pass `input_precision="ieee"` to every `tl.dot`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The adapter is two thin GEMMs. The first, `x Aᵀ`, reduces over `K` like the base product, so it rides in the
# same loop on the same `x` tile. The second reduces over `r`, short enough for one `tl.dot` after the loop.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Three pointer blocks walk `K`: `x` `(BLOCK_M, BLOCK_K)`, `Wᵀ` `(BLOCK_K, BLOCK_N)` and `Aᵀ`
# `(BLOCK_K, BLOCK_R)`, the last two read from `w` and `a` with their strides swapped. `BLOCK_R =
# max(16, next_power_of_2(r))` (`tl.dot` wants at least 16), masked with `rr < r`. After the loop, load the
# `(BLOCK_R, BLOCK_N)` tile of `Bᵀ` and add one more `tl.dot` into the accumulator.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# In the loop `acc = tl.dot(xt, wt, acc)` and `xa = tl.dot(xt, at, xa)` on the same `xt`; after it
# `acc = tl.dot((xa * scale).to(bt.dtype), bt, acc)`: both operands of `tl.dot` need one dtype, so `s·x Aᵀ`
# is rounded once to the inputs' dtype, as PyTorch's `x @ A.T` is. The traps: `s` scales the adapter's term
# only; the rows of `Aᵀ` and `Bᵀ` past `r` must load as zeros; pass `scale` as a plain argument, not a
# `tl.constexpr` (each new value would compile a new kernel).
#
# </details>
# <details><summary>Make it fast</summary>
#
# Every program of a tile-row computes the same `x Aᵀ` tile, `r / BLOCK_N` more products than the base GEMM:
# wide tiles keep that small. The timed shape has a short `K`: `64 × 128` tiles, 4 warps and 2 stages let
# several programs share a multiprocessor, as in exercise 04.gemm_gelu_residual; avoid `128 × 256`, whose
# accumulator already fills the registers before `x Aᵀ` joins it.
#
# </details>
#
# **Graded.** Timed at a `d_model = 256` model's up-projection with a rank-16 adapter (32768 × 256 → 2048).
#
# <!-- graded: 04.lora -->

# %% nbgrader={"grade": false, "grade_id": "lora", "locked": false, "schema_version": 3, "solution": true}
# Helpers your launcher calls (launch settings, input checks) go here; or write everything inside the two
# functions below.
### BEGIN SOLUTION
# include: kernels/lora.py (MAX_RANK, lora_launch_settings, check_lora_inputs)
### END SOLUTION


@triton.jit
def _lora_kernel(x_ptr, w_ptr, a_ptr, b_ptr, y_ptr, M, N, K, R, scale, stride_xm, stride_xk, stride_wn, stride_wk,
                 stride_ar, stride_ak, stride_bn, stride_br, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                 GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    """One program computes one BLOCK_M x BLOCK_N tile of y = x @ w.T + scale * (x @ a.T) @ b.T.

    x (M, K), w (N, K), a (R, K), b (N, R): one dtype, strides in elements; y (M, N) row-major (stride_ym, 1).
    BLOCK_R: R rounded up to a power of two, at least 16. PRECISION: dot_precision(dtype)."""
    # 1. which tile is mine (grouped_tile), its rows rm and columns rn, the K offsets rk and the rank offsets rr
    # 2. pointers to the first tiles of x (BLOCK_M, BLOCK_K), of w.T (BLOCK_K, BLOCK_N) and of a.T
    #    (BLOCK_K, BLOCK_R): w and a read with their two strides swapped
    # 3. two float32 accumulators, acc (BLOCK_M, BLOCK_N) and xa (BLOCK_M, BLOCK_R); the K loop: load the x tile
    #    once (masked), acc = tl.dot(x, w tile, acc), xa = tl.dot(x, a tile, xa), both with PRECISION; advance
    # 4. epilogue: load the (BLOCK_R, BLOCK_N) tile of b.T (masked past R and N), add
    #    tl.dot((xa * scale).to(its dtype), b tile) into acc
    # 5. round once to y's dtype and store, masked at the ragged edges
    ### BEGIN SOLUTION
    # include body: kernels/lora.py (_lora_kernel)
    ### END SOLUTION


def lora_linear(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """x @ w.T + scale * (x @ a.T) @ b.T in one kernel: x (M, K), w (N, K), a (r, K), b (N, r), any strides."""
    # 1. check shapes, dtypes and devices (a ValueError that says what is wrong); M, K = x.shape; N, r
    # 2. allocate y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    # 3. tile sizes (e.g. 64 x 128 x 64, GROUP_M = 8, 4 warps), BLOCK_R = max(16, triton.next_power_of_2(r)),
    #    and the grid, one program per output tile
    # 4. launch with every stride, float(scale) and PRECISION=dot_precision(x.dtype); return y
    ### BEGIN SOLUTION
    # include body: kernels/lora.py (lora_linear)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "lora-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("04.lora", lora_linear)

# %% nbgrader={"grade": true, "grade_id": "test_lora_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04.lora", lora_linear, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_lora_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.lora", lora_linear, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_lora_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("04.lora", lora_linear, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_lora_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("04.lora", lora_linear, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-ref", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's reference solution (`kernels/lora.py`) at the timed shape, three gradings on
# an H100 (torch 2.11, triton 3.6, 2026-11-28): 0.30-0.31 of the bf16 matmul rate and 2.31-2.40x the unfused
# adapter, with no register spills; eight cold gradings on two H200s (2026-11-28/29): 0.29-0.33 of the rate and
# 1.83-2.00x the unfused adapter. The bars, those of exercise 04.gemm_gelu_residual, sit below the H200's worst
# cold run by more than 1.2x; they stay provisional until the reference has had its cold gradings on an H100.

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your fused LoRA against the model, the unfused adapter and the merged weight
#
# The cell times, at the model's shapes, cuBLAS's base GEMM alone, the unfused adapter (`x @ W.T + s *
# ((x @ A.T) @ B.T)`), the merged weight (`x @ W'.T`, merged beforehand) and your `lora_linear`, as CUDA-graph
# replays taking turns. It also times the merge itself, once, and prints after how many calls merging has paid
# for itself against your kernel. Left: time against `M` with the model's lines. Right: each version's speed-up
# over the unfused adapter. Until exercise 04.lora is written, the cell leaves your kernel out and says so.

# %% nbgrader={"grade": false, "grade_id": "lora-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
UNFUSED_LORA, MERGED, BASE, MY_LORA = "unfused adapter", "merged weight", "cuBLAS base GEMM alone", "your lora_linear"
LORA_STYLES = {BASE: ("x-", "0.5"), UNFUSED_LORA: ("o-", "C0"), MERGED: ("s-", "C2"), MY_LORA: ("^-", "C1")}
lora_us, merge_ms = {}, None
if ON_GPU:
    lora_written = True
    for m in MS_LORA:
        gen = torch.Generator(device="cuda").manual_seed(m)
        x = torch.randn(m, K_LORA, device="cuda", generator=gen).to(torch.bfloat16)
        w = (torch.randn(N_LORA, K_LORA, device="cuda", generator=gen) / K_LORA**0.5).to(torch.bfloat16)
        a = (torch.randn(R_LORA, K_LORA, device="cuda", generator=gen) / K_LORA**0.5).to(torch.bfloat16)
        b = (torch.randn(N_LORA, R_LORA, device="cuda", generator=gen) / R_LORA**0.5).to(torch.bfloat16)
        w_merged = lora.merge_lora(w, a, b, 2.0)
        if merge_ms is None:
            merge_ms = bench_ms(lambda: lora.merge_lora(w, a, b, 2.0))
        calls = {BASE: lambda: x @ w.t(), UNFUSED_LORA: lambda: lora.lora_eager(x, w, a, b, 2.0),
                 MERGED: lambda: lora.lora_merged(x, w_merged)}
        if lora_written:
            calls[MY_LORA] = lambda: lora_linear(x, w, a, b, 2.0)
        times = time_in_turns(calls, desc=f"LoRA, M = {m}")
        lora_written = MY_LORA in times
        for name, t in times.items():
            lora_us.setdefault(name, {})[m] = t
        del x, w, a, b, w_merged

fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
for name, style in (("model: unfused adapter", "k--"), ("model: fused", "k:"), ("model: merged weight", "k-.")):
    ax.loglog(MS_LORA, [lora_model[m][name] for m in MS_LORA], style, lw=1, label=name)
for name, times in lora_us.items():
    ax.loglog(list(times), list(times.values()), LORA_STYLES[name][0], color=LORA_STYLES[name][1], label=name, ms=4)
ax.set_xlabel("M (rows: tokens)")
ax.set_ylabel("µs")
ax.set_title(f"x W^T + s (x A^T) B^T, {K_LORA} → {N_LORA}, r = {R_LORA}, bf16")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=7)
bx.semilogx(MS_LORA, [lora_model[m]["model: unfused adapter"] / lora_model[m]["model: fused"] for m in MS_LORA],
            "k:", label="model: fused")
for name in (MERGED, MY_LORA):
    ms = [m for m in lora_us.get(name, {}) if m in lora_us.get(UNFUSED_LORA, {})]
    if ms:
        bx.semilogx(ms, [lora_us[UNFUSED_LORA][m] / lora_us[name][m] for m in ms], LORA_STYLES[name][0],
                    color=LORA_STYLES[name][1], label=name)
bx.axhline(1.0, color="gray", lw=1)
bx.set_xlabel("M (rows: tokens)")
bx.set_ylabel("speed-up over the unfused adapter")
bx.set_title(peak_label + ("" if ON_GPU else " — model only, no GPU here"))
bx.grid(True, which="both", alpha=0.3)
bx.legend(fontsize=8)
plt.tight_layout()
plt.show()
if ON_GPU:
    for m in MS_LORA:
        print(f"M={m:<6} " + ", ".join(f"{name} {t[m]:.1f} µs" for name, t in lora_us.items() if m in t))
    print(f"Merging the adapter into W once: {1e3 * merge_ms:.1f} µs")
    for m in MS_LORA:
        if m in lora_us.get(MY_LORA, {}):
            gap = lora_us[MY_LORA][m] - lora_us[MERGED][m]
            calls_to_pay = f"{1e3 * merge_ms / gap:.0f} calls" if gap > 0 else "never (your kernel is as fast)"
            print(f"  M={m:<6} merging pays for itself against your kernel after {calls_to_pay}")
else:
    print("No GPU: the plots show the model only; on a GPU this cell measures the three versions against it.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "lora-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for. The merged weight runs at the base GEMM's speed: after the merge the adapter costs nothing.
# The unfused adapter pays its four launches at decode and its passes over `(M, N)` at prefill, as the model
# says. A fused kernel does the adapter's products and reads `A` and `B`, but no intermediate reaches HBM.
# Where it falls short of the model's fused line, compare it with the base GEMM alone: most of that gap is your
# GEMM against cuBLAS (section 4), the rest the `x Aᵀ` tile that every program of a tile-row computes again.
# The last lines weigh the merge, paid once, against what your kernel costs more than the merged weight on every
# call: merging wins after that many calls, as long as `A` and `B` stay fixed.
#
# Reference figures, not measured here (the course's reference kernel, an H100, torch 2.11, triton 3.6,
# 2026-11-28): the unfused adapter took 1.4-1.6 times the base GEMM; the fused kernel was 1.06-1.16 times as
# fast as the unfused adapter from 256 rows up (and slower at 64 rows), but 1.3 times the base GEMM at 4096
# rows and more; the merge took 57 µs, less than one call at 4096 rows.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-lora-md", "locked": true, "schema_version": 3, "solution": false}
# **Question 4.** Three deployments use rank-16 adapters on the same base model: (a) one adapter, served for
# months; (b) a server with hundreds of adapters, each request of a batch naming its own (multi-LoRA serving);
# (c) fine-tuning the adapter. For each, would you merge the weight, run the adapter unfused, or fuse it into
# the GEMM, and why? Use what you measured.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-lora", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# (a) Merge once: the merge costs one thin GEMM and a pass over `W`, paid back within a few calls, and every
# call after it is exactly the base GEMM, with no extra flops, bytes or launches. (b) Keep the adapters apart
# and fuse them: one merged copy of `W` per adapter would not fit, and a batch mixes adapters row by row, so
# each row's `x Aᵢᵀ` is computed beside the shared base product (the fused kernel, with an adapter index a
# row) and never written out. (c) Keep them apart and fuse: `A` and `B` change every step, so a merge would be
# redone every step, and the backward needs `x Aᵀ` and the base weight separately; the fused kernel saves the
# passes over `(M, N)` that the unfused route pays on every forward.

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * A GEMM's epilogue runs on the accumulator tile while it is in registers: bias, activation, residual and
#   gates cost a few instructions per element and one read of whatever they add, against a full pass over
#   the output each when run as kernels. Unfused `|x| + |W| + 6|y|`, fused `|x| + |W| + 2|y|`.
# * That matters in proportion to how short the GEMM is: few rows (decode) or short `K`. For long, square
#   GEMMs the product's flops hide it, and what decides the time is how close the GEMM gets to cuBLAS:
#   grouped tile order, the right tile, and on Hopper the TMA engine and persistent programs.
# * Do the epilogue's math in float32 and round once: PyTorch's chain of bf16 kernels rounds three times.
# * Horizontal and epilogue fusion combine: SwiGLU's two GEMMs share `x` tiles and their `silu(g)·u` is
#   applied before anything is written.
# * A low-rank adapter rides in the same K loop: a `(BLOCK_M, r)` accumulator of `x Aᵀ` beside the output tile,
#   and one `tl.dot` with `Bᵀ` in the epilogue. Merge the weight when one adapter is served for long; fuse
#   when adapters change (training) or many share a batch.
#
# **Not covered here.** Some GEMM fusions of production libraries stay out of this notebook, on purpose:
#
# * **CUTLASS's C++ epilogue templates.** They state the same epilogues as a C++ type chosen at compile time. The
#   course writes every kernel in Triton, where the epilogue is plain code after the K loop, and measures against
#   cuBLAS, whose epilogues `addmm` already uses; building CUTLASS would add a toolchain and no new idea.
# * **The down projection fused into SwiGLU.** To start the down projection while `h` is on chip, each of its
#   output tiles needs whole rows of `h` (11008 values a token). That fits for a few decode tokens, not for a
#   training batch, so the course stops after the gate and up products; Question 3 says where it would pay.
# * **An RMSNorm folded into the next projection's prologue.** Normalising each `x` tile as the K loop loads it
#   needs the row's statistic before the loop starts, from one more small kernel or from the kernel before (the
#   add + RMSNorm of notebook 02 could write it). It saves one write and one read of `x`, a small share of a
#   GEMM's time once the product is long, so the course fuses the residual add into the norm and stops there.
# * **Quantized GEMMs** (weights of 4 or 8 bits unpacked and scaled inside the K loop, as Marlin does). The
#   storage formats and their packing are a subject of their own; the course's products stay in bf16.
# * **Recommendation models (DLRM).** Their hot spots are embedding-table lookups and feature interactions. The
#   course keeps to transformers, where the same patterns (the epilogues and the adapter above) appear in the
#   shapes its grader uses.
#
# Next, notebook 05 fuses a reduction over a whole row into a streaming loop: online softmax and
# FlashAttention, where the intermediate is an `N × N` matrix that must never be written.
#
# ## Further reading
#
# * Triton's matrix multiplication tutorial, with grouped tile order and autotuning:
#   https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html
# * Triton's persistent matmul tutorial (TMA descriptors, persistent programs):
#   https://triton-lang.org/main/getting-started/tutorials/09-persistent-matmul.html
# * cuBLASLt's epilogues (`CUBLASLT_EPILOGUE_GELU_BIAS` and friends), in the cuBLAS documentation:
#   https://docs.nvidia.com/cuda/cublas/index.html#cublasltepilogue-t
# * CUTLASS, NVIDIA's templates for GEMMs and their fused epilogues: https://github.com/NVIDIA/cutlass
# * NVIDIA's Hopper tuning guide: https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html
# * Shazeer, *GLU Variants Improve Transformer* (2020), where SwiGLU comes from: https://arxiv.org/abs/2002.05202
# * Hu et al., *LoRA: Low-Rank Adaptation of Large Language Models* (2021): https://arxiv.org/abs/2106.09685
# * Williams, Waterman and Patterson, *Roofline: an insightful visual performance model* (2009):
#   https://doi.org/10.1145/1498765.1498785
