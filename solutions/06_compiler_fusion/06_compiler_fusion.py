# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 06 · Compiler-driven fusion: what torch.compile fuses, where it stops, and how your kernels join it
#
# **About 4-6 h · difficulty ★★★ · prerequisites: notebooks 01 and 02 (RMSNorm's forward and backward
# kernels); 04 and 05 for the optional comparisons.** Terms are defined where they first appear; the course's
# [glossary](../../docs/glossary.md) has them all.
#
# Notebooks 01 to 05 fused by hand. Most of the fusion in a real model, though, is done by a compiler:
# `torch.compile` traces your Python with **Dynamo** into graphs of ATen operations (ATen is PyTorch's library of
# tensor operations, the `torch.ops.aten.*` that every `torch` function ends in), and **Inductor** turns each
# graph into kernels, Triton on a GPU and C++ on a CPU. The pointwise and reduction chains of notebooks 01 and 02
# are its everyday work. This notebook opens the compiler up and measures it against the same HBM cost model.
#
# You will
# 1. read the kernels Inductor generates for a bias + GELU + residual chain and an RMSNorm written op by op,
#    count them, and time them against the bytes each version must move; then see what the compile modes change
#    around a matrix product;
# 2. find where it stops: graph breaks (a host sync, a shape that depends on the data, a `print`), attention
#    written by hand, and a cross-entropy whose logits it cannot avoid, each timed next to your own fused
#    kernel from notebooks 04 and 05 if you bring it;
# 3. put **your RMSNorm kernels** from notebook 02 inside a compiled model as a custom op, with a backward pass,
#    in one graph with the operations around it;
# 4. **repair** a function so that Inductor can fuse it (a per-tensor int8 fake quantization);
# 5. measure the limits: registers and spills as a block grows, the launch-overhead plateau, the cost of
#    autotuning; then choose a kernel's **launch settings per shape** with `triton.autotune`;
# 6. profile a transformer block, eager against compiled, kernel by kernel, and (where Nsight Compute runs)
#    check fusion by counting DRAM bytes.
#
# Exercises, in order: predict the bytes (06.predict_traffic, 15 min), the custom operator (06.rmsnorm_op,
# 90 min), the repair (06.fake_quant, 30 min), launch settings per shape (06.row_argmax, 60 min), and three
# short written answers.
#
# Without a GPU, kernels run in Triton's interpreter and nothing is timed: each demonstration says what it left
# out. Inductor compiles C++ on a CPU, tens of seconds per function, so on a CPU this notebook compiles only two
# small functions; when the grader runs it, none.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined

import csv
import io
import math
import shutil
import subprocess
import sys
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.measure import sizes
from autograder.measure.inductor import (gpu_kernel_table, gpu_timeline, graph_report, kernel_source, launches_in_code,
                                 print_kernel_table, quiet, run_code)
from autograder.specs import compiler_fusion
from autograder.specs import streaming_reduction_fusion
from autograder.teach.plots import bars_against_model, launch_seconds, peaks, print_against_model
from autograder.measure.timing import bench_ms, bench_versions, not_written, peak_extra_bytes, written_versions
from kernels.matmul import check_gemm_inputs, dot_precision, grouped_tile, tile_dot  # notebooks 04 and 05's helpers

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()
bw_gbps, peak_tflops, peak_label = peaks(profile)
LEVELS = compiler_fusion.LEVELS  # 127: int8's largest magnitude, as the fake quantization of section 4 uses it
cpu_compiles_left = 2  # Inductor builds C++ on a CPU: tens of seconds a function


def may_compile(what: str) -> bool:
    """True when a demonstration may call torch.compile here; otherwise one printed line says why not."""
    global cpu_compiles_left
    if runtime.small_demos():
        print(f"{what}: skipped, torch.compile is not run while the grader runs this notebook")
        return False
    if ON_GPU:
        return True
    if cpu_compiles_left > 0:
        cpu_compiles_left -= 1
        return True
    print(f"{what}: skipped on the CPU (it needs a GPU, or a C++ build too slow to repeat here)")
    return False


def model_ms(n_bytes: float) -> float:
    """The cost model: n_bytes through HBM at the measured copy bandwidth, in ms."""
    return n_bytes / (bw_gbps * 1e6)


def yours(name: str):
    """Your function of that name (section 1's optional cell), looked up when called; until you define it, a
    stand-in that raises NameError, which the timing helpers report as "not written yet"."""
    def call(*args, **kwargs):
        if name not in globals():
            raise NameError(f"{name} is not defined: paste it into the cell for your kernels from notebooks 04 and 05")
        return globals()[name](*args, **kwargs)
    return call


# %% [markdown] nbgrader={"grade": false, "grade_id": "fuses-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. What Inductor fuses
#
# ![](figures/compiler_pipeline.svg)
#
# Inductor lowers each ATen operation of a graph to a loop body over the output's elements, then its scheduler
# merges loop bodies whose iterations line up: a pointwise op into the pointwise op that reads it, a pointwise op
# into the reduction that consumes it, and a reduction's result into the broadcast that follows (notebook 02's
# "reduction → pointwise" row), as long as one program can hold a row. Each merged group becomes one kernel. Its
# name tells you what it is: `triton_poi_…` pointwise, `triton_red_…` a reduction that loops over its row,
# `triton_per_…` a *persistent* reduction that holds the row in registers, followed by the ops fused into it.
#
# Two functions to compile, with `|x|` the bytes of `x`:
#
# | function | eager kernels | eager traffic | fused traffic (the floor) |
# |---|---|---|---|
# | `gelu(x + b) + r` | 3 (add, GELU, add) | you predict it (exercise below) | you predict it |
# | RMSNorm, op by op, on bf16 `x` (below) | 8, six of them over all of `x` | ≈ 18\|x\| (the float32 copy doubles every pass over it) | you predict it |
#
# **Why 8 kernels here and 3 in notebook 01?** Notebook 01 counted an unfused RMSNorm as three passes (a
# statistic, a normalisation, the weight): a simplified model of the work. The profiler, on an H100 with this
# very function, lists what eager PyTorch really launches: a cast of `x` to float32, `pow`, `mean` (one
# reduction kernel), `+ eps` and `rsqrt` (two tiny kernels over one value per row), the multiply by `rstd`, the
# cast back to bf16 and the multiply by `w`. Six of them stream the whole tensor, and the float32 copy makes
# most of those passes twice as heavy: 3 + 4 + 2 + 4 + 3 + 2 = 18\|x\| (with \|x\| the bf16 bytes of `x`).
# Both counts are right for what they count; the fused floor is the same.
#
# The cell compiles both, lists the kernels the generated `call()` launches (`launches_in_code` of
# `autograder/measure/inductor.py` reads them from the code `torch._inductor.utils.run_and_get_code` captures), and
# prints the start of the first one. On a GPU you will see Triton; on a CPU, C++ (`cpp_fused_…`). To see the same
# code from a script, run it with `TORCH_LOGS="output_code"`; `TORCH_LOGS="graph_breaks,recompiles"` reports the
# events of section 2.

# %% nbgrader={"grade": false, "grade_id": "fuses-code", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def bias_gelu_residual(x, b, r):
    return F.gelu(x + b) + r


def rmsnorm_by_hand(x, w, eps=1e-5):
    xf = x.float()  # the statistic in float32: a full-size float32 copy of x, in eager
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd).to(x.dtype) * w


CH_M, CH_H = (16384, 4096) if ON_GPU else (64, 256)
CH_DTYPE = torch.bfloat16 if ON_GPU else torch.float32
xc = torch.randn(CH_M, CH_H, device=DEVICE, dtype=CH_DTYPE)
bc = torch.randn(CH_H, device=DEVICE, dtype=CH_DTYPE)
rc = torch.randn(CH_M, CH_H, device=DEVICE, dtype=CH_DTYPE)
wc = 1 + 0.1 * torch.randn(CH_H, device=DEVICE, dtype=CH_DTYPE)
compiled = {}  # name -> compiled function, for the timing cell below
inductor_launches = {}  # name -> the kernels its generated call() launches, for the XLA section
for name, fn, args in (("bias + GELU + residual", bias_gelu_residual, (xc, bc, rc)),
                       ("RMSNorm op by op", rmsnorm_by_hand, (xc, wc))):
    if not may_compile(f"compiling {name}"):
        continue
    torch._dynamo.reset()
    compiled[name] = torch.compile(fn)
    out, code = run_code(compiled[name], *args)
    torch.testing.assert_close(out, fn(*args), rtol=2e-2, atol=2e-2)
    launches = inductor_launches[name] = launches_in_code(code)
    print(f"{name}: {len(launches)} kernel launch(es) in the generated call(): {launches}")
    if launches:
        source = kernel_source(code, launches[0]).splitlines()
        print(f"--- the first 30 of {len(source)} lines of {launches[0]} ---")
        print("\n".join(source[:30]))
        print("---\n")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fuses-read-md", "locked": true, "schema_version": 3, "solution": false}
# How to read a generated Triton kernel: `xnumel` is the number of output elements (or rows, for a reduction),
# `r0_numel` the length of the reduced dimension, `XBLOCK`/`R0_BLOCK` the block sizes its heuristics or its
# autotuner picked; the loads at the top are the only reads from HBM, the `tmpN` lines are the fused ops, in
# registers, and `tl.store` at the end is the only write. An op that appears in the body costs no traffic of its
# own: that is fusion, read off the code.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 06.predict_traffic · Predict the bytes before timing them   (about 15 min · ★☆☆)
#
# **Spec.** `predicted_traffic(rows, cols, elem_bytes) -> (eager_chain_bytes, fused_chain_bytes,
# fused_rmsnorm_bytes)`, three integers, for `x` and `r` of shape `(rows, cols)` and the vectors `b` and `w` of
# shape `(cols,)`, every element `elem_bytes` bytes:
#
# * `eager_chain_bytes`: what eager PyTorch's three kernels for `gelu(x + b) + r` read and write together;
# * `fused_chain_bytes`: the fewest bytes Inductor's one fused kernel for it must move;
# * `fused_rmsnorm_bytes`: the same for `rmsnorm_by_hand(x, w)` compiled, with the row held in registers.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Count kernel by kernel, as notebook 01 did: every tensor a kernel reads or writes crosses HBM once in that
# kernel, and a value that stays inside a kernel costs nothing.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Write `x = rows · cols · elem_bytes` and `vec = cols · elem_bytes` first. Eager runs three kernels: the add
# (reads `x` and `b`, writes a temporary), GELU (reads it, writes another), the add of `r` (reads two, writes
# `y`); sum their lines. A fused kernel reads each input once and writes its output once.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Each answer is a small multiple of `x` plus at most one `vec`. The traps: a vector is read once per kernel that
# uses it (so once in each fused kernel, and once in eager's first add); RMSNorm's statistic stays in
# registers, so the fused RMSNorm reads `x` and `w` and writes `y`, nothing more.
#
# </details>
#
# **Graded.**
#
# <!-- graded: 06.predict_traffic -->

# %% nbgrader={"grade": false, "grade_id": "predicted_traffic", "locked": false, "schema_version": 3, "solution": true}
def predicted_traffic(rows: int, cols: int, elem_bytes: int) -> tuple[int, int, int]:
    """(eager_chain_bytes, fused_chain_bytes, fused_rmsnorm_bytes) for x, r (rows, cols) and b, w (cols,) of
    elem_bytes each: eager gelu(x + b) + r as its three kernels run it, and the floors of Inductor's fused
    kernels for that chain and for the op-by-op RMSNorm."""
    ### BEGIN SOLUTION
    x = rows * cols * elem_bytes
    vec = cols * elem_bytes
    eager_chain = (2 * x + vec) + 2 * x + 3 * x  # add: read x, b, write t; GELU: read t, write u; add: u, r -> y
    fused_chain = 3 * x + vec  # read x, r, b once, write y once
    fused_rmsnorm = 2 * x + vec  # read x and w, write y: the row's statistic stays in registers
    return eager_chain, fused_chain, fused_rmsnorm
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06.predict_traffic", predicted_traffic, criteria=["correctness"]).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fuses-time-md", "locked": true, "schema_version": 3, "solution": false}
# The timing cell below sets both chains, eager and compiled, against **your** predictions at this GPU's copy
# bandwidth (and eager RMSNorm against the profiler's 18\|x\|). The compiled RMSNorm should land near your
# `fused_rmsnorm_bytes` and eager far above; the compiled chain near your `fused_chain_bytes`.

# %% nbgrader={"grade": false, "grade_id": "fuses-time", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
ch_bytes = 16384 * 4096 * 2  # the model at the GPU's shape, 16384 x 4096 bf16, wherever this runs
try:
    chain_eager_b, chain_fused_b, rms_fused_b = predicted_traffic(16384, 4096, 2)
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
    if not not_written(exc):
        raise
    print(f"predicted_traffic is not written yet ({type(exc).__name__}): the bars show the notebook's own counts")
    chain_eager_b, chain_fused_b, rms_fused_b = 7 * ch_bytes, 3 * ch_bytes, 2 * ch_bytes
ch_model = {"chain eager (3 kernels)": model_ms(chain_eager_b), "chain compiled": model_ms(chain_fused_b),
            "RMSNorm eager (8 kernels)": model_ms(18 * ch_bytes), "RMSNorm compiled": model_ms(rms_fused_b)}
ch_ms = {}
if ON_GPU:
    versions = {"chain eager (3 kernels)": lambda: bias_gelu_residual(xc, bc, rc),
                "RMSNorm eager (8 kernels)": lambda: rmsnorm_by_hand(xc, wc)}
    if "bias + GELU + residual" in compiled:
        versions["chain compiled"] = lambda: compiled["bias + GELU + residual"](xc, bc, rc)
    if "RMSNorm op by op" in compiled:
        versions["RMSNorm compiled"] = lambda: compiled["RMSNorm op by op"](xc, wc)
    ch_ms = bench_versions(versions, desc="timing the two chains")

fig, ax = plt.subplots(figsize=(8, 3.8))
names = bars_against_model(ax, ch_ms, ch_model, "ms (16384 x 4096 bf16)", f"eager vs torch.compile, {peak_label}",
                           ON_GPU)
plt.tight_layout()
plt.show()
print_against_model(names, ch_ms, ch_model, 2 * ch_bytes, bw_gbps)
if not ON_GPU:
    print("No GPU: nothing was timed; the bars show the model at the reference H200's copy bandwidth.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "xla-md", "locked": true, "schema_version": 3, "solution": false}
# ### Beside Inductor: what XLA fuses
#
# JAX (and TensorFlow's `jit`) hand their graphs to another compiler, **XLA**. `jax.jit(f)` traces the whole
# Python function once per set of input shapes into HLO (XLA's graph of about a hundred high-level operations:
# `add`, `exponential`, `reduce`, `dot`, `convolution`, …), with no graph breaks: a value Python would need from
# the device is an error at tracing time, not a break. XLA's GPU compiler then groups the HLO into **fusions**,
# each one kernel, by a few rules:
#
# * **loop fusion**: elementwise producers are fused into the elementwise op that consumes them, one loop over
#   the output's elements (`kind=kLoop`), as Inductor's pointwise kernels;
# * **input fusion**: a reduction takes in the elementwise ops that produce its input, so its loop reads the
#   original tensors (`kind=kInput`), as Inductor's `red`/`per` kernels;
# * **multi-output fusion**: siblings that read the same input (a reduction and an elementwise op over `x`, or a
#   producer still needed outside its consumer) become one kernel with several outputs, so `x` is read once;
# * **heuristics**: it does not fuse into matrix products or convolutions, beyond simple epilogues (a bias, an
#   activation) that cuBLAS or cuDNN apply themselves; on recent GPUs it may instead emit a GEMM as a Triton
#   kernel with elementwise ops fused around it. It will not duplicate an expensive producer (an `exp`, a
#   reduction) into several consumers, and it caps a fusion's size (operands, registers, shared memory).
#
# What it does not generate, it hands to libraries as **custom calls**: matrix products to cuBLAS (cuBLASLt with
# an epilogue), convolutions to cuDNN, and attention to cuDNN's fused attention where asked for. Inductor makes
# the same choices with other tools: cuBLAS for products (its own Triton GEMM templates in `max-autotune`),
# Triton for everything it fuses, and graph breaks where Python gets in the way.
#
# The cell compiles this section's two functions in JAX, prints the optimised HLO's top-level computation (its
# `fusion` instructions are the kernels; each calls a `fused_computation` listed above it in the full text) and
# counts them against the kernels Inductor made for the same graphs above. JAX is not among the course's
# packages: where it is not installed, the cell says so and does nothing else.

# %% nbgrader={"grade": false, "grade_id": "xla", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
import importlib.util


def hlo_entry(hlo: str) -> list[str]:
    """The instructions of an optimised HLO module's ENTRY computation, one string each, without their metadata."""
    lines, inside = [], False
    for line in hlo.splitlines():
        if line.startswith("ENTRY "):
            inside = True
        elif inside and line.startswith("}"):
            break
        elif inside and "=" in line:
            lines.append(line.strip().split(", metadata=")[0].split(", backend_config=")[0])
    return lines


def hlo_kernels(entry: list[str]) -> dict:
    """{kind: count} of what launches work in an ENTRY computation: fusions, custom calls (library kernels) and
    any other op left on its own (views, tuples and constants launch nothing)."""
    free = ("parameter(", "tuple(", "get-tuple-element(", "bitcast(", "constant(")
    kinds = {}
    for line in entry:
        op = line.split("=", 1)[1]
        if any(f" {f}" in op for f in free):
            continue
        kind = "fusion" if " fusion(" in op else "custom-call" if " custom-call(" in op else "other"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


if importlib.util.find_spec("jax") is None:
    print("JAX is not installed in this environment (it is not among the course's packages): nothing to show. "
          "In an environment with JAX, this cell prints XLA's fused HLO for the two functions above.")
elif runtime.small_demos():
    print("XLA's HLO: skipped while the grader runs this notebook")
else:
    import os

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX would take most of the GPU's memory
    import jax
    import jax.numpy as jnp

    def xla_bias_gelu_residual(x, b, r):
        return jax.nn.gelu(x + b, approximate=False) + r

    def xla_rmsnorm(x, w, eps=1e-5):
        xf = x.astype(jnp.float32)
        rstd = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
        return (xf * rstd).astype(x.dtype) * w

    jdtype = jnp.bfloat16 if CH_DTYPE == torch.bfloat16 else jnp.float32
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; shapes ({CH_M}, {CH_H}), {jnp.dtype(jdtype).name}")
    for name, fn, shapes in (("bias + GELU + residual", xla_bias_gelu_residual, ((CH_M, CH_H), (CH_H,), (CH_M, CH_H))),
                             ("RMSNorm op by op", xla_rmsnorm, ((CH_M, CH_H), (CH_H,)))):
        args = [jnp.ones(shape, jdtype) for shape in shapes]
        entry = hlo_entry(jax.jit(fn).lower(*args).compile().as_text())
        kinds = hlo_kernels(entry)
        print(f"\n{name}: XLA's ENTRY computation, {len(entry)} instruction(s)")
        for line in entry:
            print("    " + (line if len(line) <= 150 else line[:147] + "..."))
        inductor = (f"{len(inductor_launches[name])} kernel(s) from Inductor above"
                    if name in inductor_launches else "Inductor's count: not compiled above")
        print(f"  -> XLA: {kinds.get('fusion', 0)} fusion(s), {kinds.get('custom-call', 0)} custom call(s), "
              f"{kinds.get('other', 0)} other op(s) on their own; {inductor}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "xla-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for, where JAX ran: the chain is pure elementwise work, so both compilers should make it one loop
# (`kind=kLoop` in XLA). RMSNorm has a reduction and a broadcast back over the row: read each fusion's `kind`
# and its operands to see how XLA cut it here (an input fusion for the sum of squares, then a loop fusion for the
# normalisation, or one kernel for both), and set the count beside Inductor's kernels above. The backend
# matters: on a CPU, XLA's host backend cuts the same graph by its own rules, as Inductor's C++ backend does.
# Where the counts differ, the bytes differ: each extra fusion writes its output to memory and the next reads it
# back. The two compilers share the rules (fuse elementwise work into its consumer and into the reduction that
# reads it); they part ways around products (XLA's custom calls with small epilogues, or its Triton GEMM fusions,
# against Inductor's cuBLAS calls and templates) and in how a graph is captured (a whole traced function against
# Dynamo's graphs between breaks).

# %% [markdown] nbgrader={"grade": false, "grade_id": "yours-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your fused kernels from notebooks 04 and 05 (optional, not graded)
#
# Three places below are where Inductor stops short of what you wrote by hand: a GEMM with its epilogue, attention,
# and a cross-entropy without its logits. Paste your solutions here, each with the kernels and helpers it calls:
#
# * `gemm_gelu_residual(x, w, b, r)` from notebook 04 (exercise 04.gemm_gelu_residual, the pointer version);
# * `flash_attention(q, k, v, causal=False)` from notebook 05 (05.flash_attention);
# * `linear_cross_entropy(h, w, targets)` from notebook 05 (05.linear_cross_entropy).
#
# Each comparison below then times yours next to eager PyTorch and `torch.compile` on the same inputs; a function
# you leave out is left out of the comparison, with a line that says so. Nothing else in the notebook needs them.

# %% nbgrader={"grade": false, "grade_id": "yours", "locked": false, "schema_version": 3, "solution": true}
# Optional: your gemm_gelu_residual, flash_attention and linear_cross_entropy, with the kernels and helpers
# they call, go here.
### BEGIN SOLUTION
# include: kernels/gemm_epilogue.py (gelu_tanh, approx_tanh_applies, _epilogue_store, _gemm_gelu_residual_kernel,
#     gemm_launch_settings, _check_epilogue_inputs, gemm_gelu_residual)


# include: kernels/flash_attention.py (LOG2E, _online_softmax_step, _visible, _key_ranges, _attend,
#     _flash_attention_kernel, attention_launch_settings, _check_attention_inputs, _check_out, flash_attention)


# include: kernels/linear_cross_entropy.py (_tile_stats, _logit_tile_stats_kernel, _combine_kernel,
#     ce_launch_settings, _check_inputs, linear_cross_entropy, _combine)
### END SOLUTION



# %% [markdown] nbgrader={"grade": false, "grade_id": "modes-md", "locked": true, "schema_version": 3, "solution": false}
# ### The modes, around a matrix product
#
# `torch.compile(fn, mode=…)` changes what Inductor does around the kernels:
#
# * `"default"`: matrix products go to cuBLAS (`extern_kernels.mm` or `addmm` in the code), and what follows
#   them (the bias, the GELU) becomes a separate Triton pointwise kernel: one extra write and read of the
#   product's output, `2|C|`.
# * `"reduce-overhead"`: the same kernels, replayed from a **CUDA graph**: one launch from the host for the
#   whole graph instead of one per kernel. It copies inputs into static buffers when they are not already
#   there, and the output it returns is overwritten by the next call.
# * `"max-autotune-no-cudagraphs"`: Inductor also benchmarks its own Triton GEMM templates against cuBLAS, and a
#   template can take the pointwise ops as its **epilogue** (notebook 04), removing the `2|C|`. The search costs
#   compile time, tens of seconds here. (`"max-autotune"` adds CUDA graphs.)
#
# The cell compiles notebook 04's `gelu(a @ w + b) + r` in the three modes, lists each one's launches and times
# it, with your `gemm_gelu_residual` if you brought it, against the model: the product at the measured matmul peak,
# plus `2|C|` at copy bandwidth where the epilogue is separate. GPU only.

# %% nbgrader={"grade": false, "grade_id": "modes", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def linear_gelu_residual(a, w, b, r):
    return F.gelu(a @ w + b, approximate="tanh") + r


MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
MINE_GEMM = "yours (notebook 04)"
mode_ms, mode_launches = {}, {}
if ON_GPU and may_compile("the three compile modes"):
    GM, GK, GN = 8192, 4096, 4096
    a = torch.randn(GM, GK, device="cuda", dtype=torch.bfloat16)
    wg = torch.randn(GK, GN, device="cuda", dtype=torch.bfloat16) / GK**0.5
    bg = torch.randn(GN, device="cuda", dtype=torch.bfloat16)
    rg = torch.randn(GM, GN, device="cuda", dtype=torch.bfloat16)
    gemm_ms = 1e3 * 2 * GM * GN * GK / (peak_tflops * 1e12)
    c_bytes = GM * GN * 2
    for mode in tqdm(MODES, desc="compiling the modes"):
        torch._dynamo.reset()
        try:
            fn = torch.compile(linear_gelu_residual, mode=mode)
            _, code = run_code(fn, a, wg, bg, rg)
            mode_launches[mode] = launches_in_code(code)
            mode_ms[mode] = bench_ms(lambda: fn(a, wg, bg, rg))
        except Exception as exc:  # noqa: BLE001  a mode this GPU or this PyTorch cannot compile is reported, not fatal
            print(f"{mode}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    mode_ms.update(bench_versions({"eager": lambda: linear_gelu_residual(a, wg, bg, rg),
                                   MINE_GEMM: lambda: yours("gemm_gelu_residual")(a, wg, bg, rg)}, desc="eager, yours"))
    for mode, launches in mode_launches.items():
        fused = not any(n.startswith("extern_kernels") for n in launches)
        model = gemm_ms + (0 if fused else model_ms(2 * c_bytes))
        print(f"{mode:<28} {mode_ms[mode]:.3f} ms (model {model:.3f} ms)  launches: {launches}")
    if MINE_GEMM in mode_ms:
        print(f"{MINE_GEMM:<28} {mode_ms[MINE_GEMM]:.3f} ms (model {gemm_ms:.3f} ms)  launches: 1, your kernel")
    print(f"{'eager':<28} {mode_ms['eager']:.3f} ms; the product alone at the matmul peak: {gemm_ms:.3f} ms")
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh(list(mode_ms), list(mode_ms.values()), color="C0")
    ax.axvline(gemm_ms, color="k", ls="--", label="the product alone at the matmul peak")
    ax.axvline(gemm_ms + model_ms(2 * c_bytes), color="k", ls=":", label="+ a separate epilogue (2|C|)")
    ax.set_xlabel(f"ms (gelu({GM}x{GK} @ {GK}x{GN} + b) + r, bf16)")
    ax.set_title(peak_label)
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    del a, wg, bg, rg
elif not ON_GPU:
    print("No GPU: the modes are compared on a GPU only (CUDA graphs and Triton GEMM templates need one).")

# %% [markdown] nbgrader={"grade": false, "grade_id": "modes-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: in `"default"` an `extern_kernels` call followed by one `triton_poi_…`; the same list under
# `"reduce-overhead"`, where the time barely moves because a product this large hides any launch cost; under
# `"max-autotune-no-cudagraphs"` either a template kernel (`triton_tem_fused_…`) with the GELU inside it, or
# cuBLAS again if cuBLAS won the benchmark. If the template won, its time should sit near the matmul line, without
# the `2|C|`. Your notebook-04 kernel is the same fusion, written once and without a search at compile time: set
# its bar against the template's and the default's. The CUDA graph matters at the other end, for small tensors:
# section 5 measures that.

# %% [markdown] nbgrader={"grade": false, "grade_id": "breaks-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. Where it stops
#
# ### Graph breaks
#
# Dynamo traces Python bytecode. When it meets something it cannot put into a graph, it **breaks** the graph:
# it compiles what it has, runs the troublesome code in ordinary Python, and starts a new graph after it. Nothing
# fuses across a break, and each break can cost a host synchronisation. Three common causes:
#
# * `.item()` (or `float(t)`, `if t > 0:` on a tensor): the value lives on the GPU, Python wants it on the host.
#   The host waits for every kernel before it, and the Python `if` on the value decides which code runs next;
# * a shape that depends on the data: `x[x > 0]` has as many elements as there are positive values;
# * a call Dynamo does not trace, such as `print`.
#
# `graph_report(fn, *args)` runs `torch._dynamo.explain` (Dynamo only, no code generated, so it is quick on any
# machine) and returns the number of graphs and breaks, with the first line of each reason. `fullgraph=True` in
# `torch.compile` turns any break into an error, which is how you make sure one never creeps in.

# %% nbgrader={"grade": false, "grade_id": "breaks", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def scale_by_max(x):
    amax = x.abs().max().item()  # host sync
    if amax > 1.0:  # a Python branch on a value from the GPU
        return x / amax
    return x


def positives_doubled(x):
    return x[x > 0].sum() * 2  # as many elements as positive values: a shape only the data decides


def logged(x):
    y = x * 2
    print("  (the print inside logged runs here)")
    return y + 1


def branch_free(x):
    return torch.where(x > 0, x, 0.1 * x).sum() * 2


x_small = torch.randn(4096, device=DEVICE)
for fn in (scale_by_max, positives_doubled, logged, branch_free):
    print(f"{fn.__name__}: {graph_report(fn, x_small)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "item-md", "locked": true, "schema_version": 3, "solution": false}
# ### What a break costs: a fake quantization with `.item()`
#
# Quantization-aware training simulates int8 in the forward pass: scale a tensor so its largest magnitude maps
# to 127, round, clamp, scale back. Written the obvious way (`compiler_fusion.fake_quant_broken`, shown in full in
# section 4), it takes the largest magnitude with `.item()` and branches on it in Python. Compiled, that is two
# graphs around a host sync: the reduction runs, its result is copied to the host, Python decides, and the
# pointwise part is launched. The floor is two reads of `x` and one write (the maximum first, then the pointwise
# pass): `3|x|`. Eager: `abs` (2), `max` (1), then divide, round, clamp, multiply (2 each): `11|x|`.
#
# The cell times eager and compiled at 8192 × 8192 bf16 and lists the GPU's events of the compiled version.
# Exercise 06.fake_quant removes the break.
#
# **Reference run.** H100: eager 0.548 ms; compiled with its break 0.223 ms, in four GPU events, one of them a
# device-to-host copy.

# %% nbgrader={"grade": false, "grade_id": "item-time", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
FQ_SHAPE = (8192, 8192)
fq_bytes = FQ_SHAPE[0] * FQ_SHAPE[1] * 2
fq_model = {"eager": model_ms(11 * fq_bytes), "compiled, with the break": model_ms(3 * fq_bytes)}
fq_ms = {}
if ON_GPU and may_compile("fake quantization with .item(), compiled"):
    xq = torch.randn(*FQ_SHAPE, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    fq_broken_compiled = torch.compile(compiler_fusion.fake_quant_broken)
    with quiet():
        fq_ms = bench_versions({"eager": lambda: compiler_fusion.fake_quant_broken(xq),
                                "compiled, with the break": lambda: fq_broken_compiled(xq)}, desc="fake quant")
    print_kernel_table(gpu_kernel_table(fq_broken_compiled, xq), "GPU events of one compiled call:")
    fig, ax = plt.subplots(figsize=(8, 2.6))
    names = bars_against_model(ax, fq_ms, fq_model, "ms (8192 x 8192 bf16)", f"fake quant, {peak_label}", ON_GPU)
    plt.tight_layout()
    plt.show()
    print_against_model(names, fq_ms, fq_model, 3 * fq_bytes, bw_gbps)
elif not ON_GPU:
    print("No GPU: not timed. The break itself shows on any machine: graph_report(compiler_fusion.fake_quant_broken, x) "
          "before exercise 06.fake_quant.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "attn-md", "locked": true, "schema_version": 3, "solution": false}
# ### Attention written out by hand
#
# `softmax(q·kᵀ / √d) · v` written as three lines of PyTorch gives Inductor a matrix product, a row softmax and
# another product. It fuses the softmax into one kernel, but the products stay cuBLAS calls, so the `N × N`
# scores are written to HBM and read back: notebook 05's FlashAttention is a streaming-reduction fusion across
# two matrix products, which Inductor's scheduler does not derive. (Inductor does carry a few pattern rewrites
# that recognise common hand-written attention forms and substitute SDPA; the launch list below shows whether
# yours was recognised.)
#
# The cell times the hand-written version eager and compiled against `F.scaled_dot_product_attention` and your
# notebook-05 `flash_attention` (if you brought it) for batch 4, 16 heads, `d = 128`, causal masking left out, and
# prints the bytes of one copy of the bf16 scores.
# Model: the products at the matmul peak, plus four passes over the scores (written, read and written by the
# softmax, read) for the hand-written versions.

# %% nbgrader={"grade": false, "grade_id": "attn", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def attention_by_hand(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


AB, AH, AD = sizes.ATTENTION_BHD
attn_ms = {}
if ON_GPU and may_compile("attention by hand, compiled"):
    lengths = sizes.naive_attention_lengths(runtime.free_gpu_bytes(), runtime.demo_points([1024, 2048, 4096, 8192]))
    torch._dynamo.reset()
    attn_compiled = torch.compile(attention_by_hand, dynamic=False)
    for n in tqdm(lengths, desc="attention over sequence lengths"):
        q, k, v = (torch.randn(AB, AH, n, AD, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        times = bench_versions({"by hand, eager": lambda: attention_by_hand(q, k, v),
                                "by hand, compiled": lambda: attn_compiled(q, k, v),
                                "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v),
                                "yours (notebook 05)": lambda: yours("flash_attention")(q, k, v)},
                               desc=f"N = {n}")
        for name, ms in times.items():
            attn_ms.setdefault(name, []).append(ms)
    torch._dynamo.reset()  # a compile that finds its cache warm generates no code to read
    _, code = run_code(torch.compile(attention_by_hand, dynamic=False), q, k, v)
    print(f"compiled by hand at N = {lengths[-1]} launches: {launches_in_code(code)}")
    flops = np.array([4 * AB * AH * n * n * AD for n in lengths], dtype=float)
    scores = np.array([AB * AH * n * n * 2 for n in lengths], dtype=float)
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, ms in attn_ms.items():
        ax.loglog(lengths, ms, "o-", label=name)
    ax.loglog(lengths, 1e3 * flops / (peak_tflops * 1e12), "k--", label="model: products at the matmul peak")
    ax.loglog(lengths, 1e3 * flops / (peak_tflops * 1e12) + model_ms(4 * scores), "k:",
              label="model: + 4 passes over the bf16 scores")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel(f"sequence length N (batch {AB}, {AH} heads, d = {AD}, bf16)")
    ax.set_ylabel("ms")
    ax.set_title(peak_label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()
    for i, n in enumerate(lengths):
        row = "  ".join(f"{name} {ms[i]:.3f} ms" for name, ms in attn_ms.items())
        print(f"N={n:<6} scores {scores[i] / 2**20:7.0f} MiB   {row}")
    del q, k, v
elif not ON_GPU:
    print("No GPU: attention was not timed. At N = 8192 with this batch and these heads, one bf16 copy of the "
          f"scores is {AB * AH * 8192**2 * 2 / 2**30:.0f} GiB, against {4 * AB * AH * 8192 * AD * 2 / 2**20:.0f} MiB "
          "for q, k, v and the output together.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ce-md", "locked": true, "schema_version": 3, "solution": false}
# ### A cross-entropy over a large vocabulary
#
# The same limit, seen in memory: a linear layer followed by cross-entropy (`streaming_reduction_fusion.linear_cross_entropy_eager`)
# compiled fuses the cast and the log-softmax, but the logits come out of a cuBLAS product and must exist in full
# before any of it runs. The cell measures the peak memory one call allocates beyond its inputs
# (`torch.cuda.max_memory_allocated`) and its time, eager, compiled and your notebook-05 `linear_cross_entropy`
# (if you brought it), against the bytes of the bf16 logits, which your fused kernel never holds.

# %% nbgrader={"grade": false, "grade_id": "ce", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
if ON_GPU and may_compile("linear + cross-entropy, compiled"):
    CE_M, CE_K = sizes.CE_MK
    ce_v = sizes.eager_cross_entropy_vocabs(runtime.free_gpu_bytes())[-1]
    h = torch.randn(CE_M, CE_K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(ce_v, CE_K, device="cuda") / CE_K**0.5).to(torch.bfloat16)
    targets = torch.randint(0, ce_v, (CE_M,), device="cuda")
    torch._dynamo.reset()
    ce_compiled = torch.compile(streaming_reduction_fusion.linear_cross_entropy_eager, dynamic=False)
    logits_bytes = CE_M * ce_v * 2
    ce_fns = written_versions({"eager": lambda: streaming_reduction_fusion.linear_cross_entropy_eager(h, w, targets),
                               "compiled": lambda: ce_compiled(h, w, targets),  # its first call compiles, here
                               "yours (notebook 05)": lambda: yours("linear_cross_entropy")(h, w, targets)},
                              desc="linear + cross-entropy")
    ce_peak = {name: peak_extra_bytes(fn)[1] for name, fn in ce_fns.items()}
    ce_time = {name: bench_ms(fn) for name, fn in ce_fns.items()}
    print(f"M = {CE_M}, K = {CE_K}, V = {ce_v}: the bf16 logits are {logits_bytes / 2**30:.2f} GiB")
    for name in ce_peak:
        print(f"{name:<19} peak {ce_peak[name] / 2**30:6.2f} GiB = {ce_peak[name] / logits_bytes:4.2f} x the logits, "
              f"{ce_time[name]:.2f} ms")
    fig, ax = plt.subplots(figsize=(7, 2.4))
    ax.barh(list(ce_peak), [b / 2**30 for b in ce_peak.values()], color="C0")
    ax.axvline(logits_bytes / 2**30, color="k", ls="--", label="the bf16 logits")
    ax.set_xlabel("GiB allocated at the peak of one call")
    ax.set_title(f"linear + cross-entropy, V = {ce_v}, {peak_label}")
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    del h, w, targets
elif not ON_GPU:
    print("No GPU: memory was not measured here (notebook 05 measures eager's allocations in the interpreter).")

# %% [markdown] nbgrader={"grade": false, "grade_id": "op-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Your kernel inside a compiled model
#
# A Triton kernel called from a function that `torch.compile` traces does not break the graph: since PyTorch 2.3
# Dynamo records a launch of a user-defined Triton kernel as a node of its own (a higher-order operator,
# `triton_kernel_wrapper_mutation`), and Inductor puts the launch into its generated code next to its own
# kernels. That is enough for a forward pass. A training model needs more of the kernel, and
# `torch.library.triton_op` turns it into a **custom operator**: an operation PyTorch knows by name, like its
# built-in ones. What that adds, as the installed PyTorch's own documentation and source say:
#
# * **a schema**, read from the function's type annotations (`(Tensor x, Tensor weight, float eps) -> Tensor`),
#   and a stable name, `torch.ops.fusion_course.rmsnorm`, by which FX graphs and `torch.export` refer to it;
# * **a fake (meta) implementation**, registered for you: the function's own body, run on tensors that carry only
#   shapes and dtypes, so tracing learns the output's shape without launching anything;
# * **an autograd formula** through `register_autograd`, which a bare kernel launch has no place for;
# * **one operation to every other subsystem**: `torch.export` (strict and non-strict) keeps it as a single,
#   serialisable node instead of the Triton source, and tensor subclasses and dispatch modes see one op;
# * **and Inductor still sees inside**: under `torch.compile` the operator is decomposed into its kernel launches,
#   so Inductor schedules your kernels with its own (`torch.library.custom_op`, by contrast, stays opaque).
#
# The pieces:
#
# * `@torch.library.triton_op("fusion_course::rmsnorm", mutates_args={})` registers the operator. Its body
#   allocates the output and launches your kernel through `torch.library.wrap_triton(_rmsnorm_kernel)[grid](…)`;
#   `wrap_triton` makes the launch traceable by the tracers that work on operators (`make_fx`, non-strict export).
# * Autograd does not differentiate through a Triton kernel. `rmsnorm_op.register_autograd(backward,
#   setup_context=…)` tells it how. `setup_context(ctx, inputs, output)` runs after the forward and saves what
#   the backward needs: `x` and `weight` (with `ctx.save_for_backward`) and `eps` (a plain attribute, a float).
#   RMSNorm's backward recomputes `rstd` from `x` (notebook 02), so nothing else needs to be kept.
# * The backward is **a second `triton_op`** (`fusion_course::rmsnorm_backward`, returning `(dx, dweight)`) and
#   not a plain Python function, so that the compiled backward graph holds your backward kernels the same way:
#   in one graph, next to the SiLU's and the add's gradients Inductor generates.
#
# With that, `torch.compile(block, fullgraph=True)` of `silu(rmsnorm_op(x + residual, w, eps))` compiles without
# a break, forward and backward, and launches your kernels with Inductor's fused kernels around them.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rmsnorm_op-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 06.rmsnorm_op · Your RMSNorm as a custom operator, with its backward   (about 90 min · ★★★)
#
# **Spec.** `rmsnorm_op(x, weight, eps) -> y` for `x (M, H)` with contiguous rows, `weight (H,)`, float32,
# float16 or bf16, `eps` a float; `y (M, H)` in `x`'s dtype. It is the operator `fusion_course::rmsnorm`, with
# autograd registered: the backward is the operator `fusion_course::rmsnorm_backward(x, weight, dy, eps) ->
# (dx, dweight)`. The cell below holds the stubs, with their exact signatures; paste notebook 02's kernels where
# it says so.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# `torch.compile` can keep your kernel in one graph only if it sees an operator it can trace: `triton_op` makes
# one from a function that allocates and launches, and `register_autograd` tells autograd what its backward is.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Two `triton_op`s (the forward, and the backward returning `(dx, dweight)`), each allocating with
# `torch.empty…` and launching notebook 02's kernels through `wrap_triton(kernel)[grid](...)`; a setup function
# that saves `x` and the weight and keeps `eps` on `ctx`; a backward function that calls the backward operator;
# then `rmsnorm_op.register_autograd(backward, setup_context=setup)`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Keep the type annotations: `triton_op` reads the schema from them. Inside a `triton_op` only allocate and
# launch: torch arithmetic there is traced as ops of its own. The backward returns one gradient per input,
# `None` for `eps`, and calls the operator on a contiguous `dy`. Running the cell again registers the operators
# again, with your new code.
#
# </details>
#
# **Graded.** The grader compiles `block(x, residual, w) = silu(rmsnorm_op(x + residual, w, 1e-5))` with
# `fullgraph=True` (Inductor on a GPU; Dynamo alone on a CPU, where the interpreter's kernels cannot run inside
# Inductor's C++) and checks the output and the gradients of `x`, `residual` and `w` against float64; that there
# is one graph; and (GPU) that the compiled forward and backward launch your own kernels with few of Inductor's
# around them.
#
# <!-- graded: 06.rmsnorm_op -->

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_op", "locked": false, "schema_version": 3, "solution": true}
# Paste here, from notebook 02: _rmsnorm_kernel (the forward), _rmsnorm_bwd_kernel and _sum_partials_kernel (the
# backward's two kernels) and _programs (how many programs the backward launches).
### BEGIN SOLUTION
# include: kernels/rmsnorm.py (_rmsnorm_kernel)
# include: kernels/rmsnorm_backward.py (_rmsnorm_bwd_kernel, _sum_partials_kernel, _programs)
### END SOLUTION


@triton_op("fusion_course::rmsnorm", mutates_args={})
def rmsnorm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x**2 over the row) + eps) * weight, for x (M, H) with contiguous rows (any row stride)
    and weight (H,); y a new (M, H) tensor in x's dtype. Registered as torch.ops.fusion_course.rmsnorm."""
    # 1. M, H from x.shape; y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    # 2. launch your forward kernel, one program a row: wrap_triton(_rmsnorm_kernel)[(M,)](x, weight, y, ...),
    #    with the block size and warps notebook 02 used
    # 3. return y
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_op.py (rmsnorm_op)
    ### END SOLUTION


@triton_op("fusion_course::rmsnorm_backward", mutates_args={})
def rmsnorm_backward_op(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of y = rmsnorm(x, weight, eps) given dy (M, H): dx (M, H) in x's dtype, dweight (H,) in
    weight's dtype. Registered as torch.ops.fusion_course.rmsnorm_backward."""
    # 1. allocate dx, dweight, and the float32 (programs, H) partial sums of dweight
    # 2. wrap_triton(_rmsnorm_bwd_kernel)[(programs,)](...): dx, and each program's partial sum of dy * x_hat
    # 3. wrap_triton(_sum_partials_kernel)[grid](...): dweight, the sum of the partials
    # 4. return dx, dweight
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_op.py (rmsnorm_backward_op)
    ### END SOLUTION


def _rmsnorm_op_setup(ctx, inputs, output):
    """After the forward: keep what the backward needs. inputs is (x, weight, eps)."""
    # ctx.save_for_backward(x, weight); ctx.eps = eps  (rstd is recomputed from x in the backward)
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_op.py (_rmsnorm_op_setup)
    ### END SOLUTION


def _rmsnorm_op_backward(ctx, dy):
    """One gradient per input of rmsnorm_op: (dx, dweight, None), eps having none."""
    # x, weight from ctx.saved_tensors; call rmsnorm_backward_op on a contiguous dy
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_op.py (_rmsnorm_op_backward)
    ### END SOLUTION


# Register the backward: rmsnorm_op.register_autograd(_rmsnorm_op_backward, setup_context=_rmsnorm_op_setup)
### BEGIN SOLUTION
# include: kernels/rmsnorm_op.py (RMSNORM_OP_AUTOGRAD)
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_op-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("06.rmsnorm_op", rmsnorm_op)

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_op_correctness", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("06.rmsnorm_op", rmsnorm_op, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_op_graph", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06.rmsnorm_op", rmsnorm_op, criteria=["graph"]).assert_passed("graph")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_op_kernels", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("06.rmsnorm_op", rmsnorm_op, criteria=["kernels"]).assert_passed("kernels")

# %% [markdown] nbgrader={"grade": false, "grade_id": "op-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your op in the compiled block
#
# The cell compiles the graded block with your op, runs a forward and a backward pass, lists the kernels the
# generated code launches (your kernels by their own names, Inductor's as `triton_…`), and times a training
# step (forward + backward) against the same block compiled from the op-by-op RMSNorm of section 1. GPU only.

# %% nbgrader={"grade": false, "grade_id": "op-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def block_with(norm):
    def block(x, residual, weight):
        return F.silu(norm(x + residual, weight, 1e-5))
    return block


if ON_GPU and may_compile("the block with your rmsnorm_op"):
    BM, BH = 16384, 4096
    xb, rb = (torch.randn(BM, BH, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    wb = (1 + 0.1 * torch.randn(BH, device="cuda", dtype=torch.bfloat16)).requires_grad_()
    dyb = torch.randn(BM, BH, device="cuda", dtype=torch.bfloat16)
    steps = {}
    try:
        rmsnorm_op(xb.detach(), wb.detach(), 1e-5)  # eagerly first: compiled, a stub's error reads as Dynamo's
        torch._dynamo.reset()
        yours = torch.compile(block_with(rmsnorm_op), fullgraph=True)

        def forward_backward():
            yours(xb, rb, wb).backward(dyb)

        _, code = run_code(forward_backward)
        print(f"your block, forward + backward, launches: {launches_in_code(code)}")
        steps["compiled, your rmsnorm_op"] = forward_backward
    except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
        if not not_written(exc):
            raise
        print(f"rmsnorm_op: not written yet ({type(exc).__name__}: {exc}); only the op-by-op block is timed")
    by_hand = torch.compile(block_with(rmsnorm_by_hand))
    steps["compiled, RMSNorm op by op"] = lambda: by_hand(xb, rb, wb).backward(dyb)
    steps["eager, RMSNorm op by op"] = lambda: block_with(rmsnorm_by_hand)(xb, rb, wb).backward(dyb)
    step_ms = bench_versions(steps, desc="forward + backward")
    for name, ms in step_ms.items():
        print(f"{name:<30} {ms:.3f} ms per forward + backward")
    del xb, rb, wb, dyb
elif not ON_GPU:
    print("No GPU: the compiled block is not run here (the grader traces it with Dynamo alone on a CPU).")

# %% [markdown] nbgrader={"grade": false, "grade_id": "op-measure-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for: count the kernels in each list. Written op by op, the whole block is Inductor's to fuse, and
# it fuses the add, the normalisation and the SiLU into one kernel each way; with your operator it must stop at
# your kernel's edges, so the add and the SiLU stay kernels of their own and their tensors make a round trip
# through HBM. A custom operator is a fusion boundary.
#
# **Reference run.** H100, 16384 × 4096 bf16, forward and backward: the op-by-op block compiled to 4 kernels and
# 0.79 ms, the block with the custom op to 6 kernels and 0.97 ms, eager to 27 kernels and 3.8 ms.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-custom-op-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Your custom operator made the compiled block *slower* than Inductor's own code for the op-by-op
# RMSNorm. Where does the extra time go, in bytes, and in which situations does wrapping your own kernel as an
# operator still pay?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-custom-op", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The operator is a fusion boundary: Inductor cannot fuse the residual add into the kernel's loads or the SiLU into
# its stores, so the sum `x + residual` is written and read back, and so is the normalised output before the SiLU
# (and their gradients in the backward): about two extra round trips of the activation each way. It pays where
# Inductor has no kernel as good as yours (attention, a cross-entropy that never holds the logits, a GEMM with its
# epilogue), or where the operator already contains its neighbours (an add + RMSNorm + SiLU kernel), leaving
# Inductor nothing to fuse around it.


# %% [markdown] nbgrader={"grade": false, "grade_id": "fq-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. Repairing a function Inductor cannot fuse
#
# Here is the fake quantization of section 2, as written:
#
# ```python
# def fake_quant_broken(x):
#     amax = x.abs().max().item()              # a host sync, and a graph break
#     if amax == 0:                             # Python decides on a value from the GPU
#         return x.clone()
#     scale = amax / 127
#     return (x / scale).round().clamp(-127, 127) * scale
# ```
#
# Everything in it can stay on the GPU. The maximum can stay a 0-dimensional tensor; the branch can become a
# `torch.where` that picks, element by element, between the two results (both are cheap to compute, and the
# choice costs no traffic once fused); and the scale can be computed where it is used. Then Dynamo sees one
# graph, and Inductor can turn it into a reduction (split in two kernels for a tensor this large: partial maxima,
# then their maximum) and one pointwise kernel that reads `x` once more and writes the result: `3|x|`.
#
# The cell below shows what Dynamo makes of the broken version, and on a GPU the kernels its compiled form
# launches.

# %% nbgrader={"grade": false, "grade_id": "fq-report", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
x_fq = torch.randn(256, 256, device=DEVICE, dtype=torch.bfloat16 if ON_GPU else torch.float32)
print(f"fake_quant_broken: {graph_report(compiler_fusion.fake_quant_broken, x_fq)}")
if ON_GPU and may_compile("fake_quant_broken, compiled"):
    torch._dynamo.reset()
    _, code = run_code(torch.compile(compiler_fusion.fake_quant_broken), x_fq)
    print(f"its compiled form launches, graph by graph: {launches_in_code(code)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fq-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 06.fake_quant · Repair a function so that it compiles to one graph   (about 30 min · ★☆☆)
#
# **Spec.** `fake_quant(x) -> y` for `x` of any shape, float32, float16 or bf16: `y = clamp(round(x / s), -127,
# 127) · s` with `s = max|x| / 127`, in `x`'s dtype; an all-zero `x` gives zeros back. Plain PyTorch, with the
# results of `fake_quant_broken`, but no `.item()` and no Python branch on a value from the GPU.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Dynamo breaks the graph where Python needs a value that lives on the GPU. Keep every value a tensor, and turn
# the branch into arithmetic that computes both sides and picks one.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `amax = x.float().abs().amax()` (a 0-d tensor), a scale chosen with `torch.where(amax == 0, …, …)`, then
# divide, `round`, `clamp`, multiply, in float32, and cast back to `x`'s dtype.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Compute in float32: the scale and the division in bf16 would round differently from the reference. Mind the
# zero case: `x / 0` is `nan`, and a `where` computes the branch it does not take; harmless there, but not in a
# product. A scale of 1 where `amax == 0` avoids it.
#
# </details>
#
# **Graded.** Results against the reference on several shapes and dtypes, all-zero input included; one graph
# under `torch.compile(fake_quant, fullgraph=True)`; (GPU) at most three kernels (a split reduction's two and one
# pointwise) and the compiled version's bandwidth, counting two reads and one write of `x`.
#
# <!-- graded: 06.fake_quant -->

# %% nbgrader={"grade": false, "grade_id": "fake_quant", "locked": false, "schema_version": 3, "solution": true}
def fake_quant(x: torch.Tensor) -> torch.Tensor:
    """Per-tensor int8 fake quantization of x (any shape; float32, float16 or bf16): clamp(round(x / s), -127,
    127) * s with s = max|x| / 127, computed in float32 and returned in x's dtype; zeros where x is all zeros.
    No .item(), no Python branch on a value of x: torch.compile(fullgraph=True) must capture it whole."""
    # 1. amax: the largest |x|, a 0-d tensor kept on the device, in float32
    # 2. the scale: amax / 127, or 1 where amax == 0 (torch.where, not `if`)
    # 3. scale, round, clamp to [-127, 127], scale back, in float32; cast to x.dtype
    ### BEGIN SOLUTION
    # include body: kernels/fake_quant.py (fake_quant)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "fake_quant-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("06.fake_quant", fake_quant)

# %% nbgrader={"grade": true, "grade_id": "test_fake_quant_correctness", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06.fake_quant", fake_quant, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_fake_quant_graph", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("06.fake_quant", fake_quant, criteria=["graph"]).assert_passed("graph")

# %% nbgrader={"grade": true, "grade_id": "test_fake_quant_kernels", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("06.fake_quant", fake_quant, criteria=["kernels"]).assert_passed("kernels")

# %% nbgrader={"grade": true, "grade_id": "test_fake_quant_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06.fake_quant", fake_quant, criteria=["performance"]).assert_passed("performance")

# %% [markdown] nbgrader={"grade": false, "grade_id": "fq-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your repair against the model
#
# The cell reports your function's graphs (on any machine), then on a GPU times it compiled next to the broken
# version, eager and compiled, at 8192 × 8192 bf16, lists the GPU events of your compiled version, and draws
# each against the model (`11|x|` eager, `3|x|` fused).
#
# **Reference run.** H100, 8192 × 8192 bf16: the repaired version compiled 0.151 ms in three kernels, the
# compiled version with its break 0.223 ms. At the graded 8192 × 4096 the repaired version reached 0.82 of copy
# bandwidth on an H100 and 0.75 on an H200, the broken one compiled about 0.5, the broken one eager 0.1.

# %% nbgrader={"grade": false, "grade_id": "fq-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
try:
    print(f"your fake_quant: {graph_report(fake_quant, x_fq)}")
    FQ_WRITTEN = True
except Exception as exc:  # noqa: BLE001  only an exercise not written yet is left out
    if not not_written(exc):
        raise
    print(f"your fake_quant: not written yet ({type(exc).__name__}: {exc})")
    FQ_WRITTEN = False
if ON_GPU and FQ_WRITTEN and may_compile("fake quant, yours against the broken version"):
    xq = torch.randn(*FQ_SHAPE, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    broken_c, yours_c = torch.compile(compiler_fusion.fake_quant_broken), torch.compile(fake_quant)
    with quiet():
        fq_ms = bench_versions({"eager": lambda: compiler_fusion.fake_quant_broken(xq),
                                "compiled, with the break": lambda: broken_c(xq),
                                "your fake_quant, compiled": lambda: yours_c(xq)}, desc="fake quant")
    fq_model["your fake_quant, compiled"] = model_ms(3 * fq_bytes)
    print_kernel_table(gpu_kernel_table(yours_c, xq), "GPU events of your compiled fake_quant:")
    fig, ax = plt.subplots(figsize=(8, 2.8))
    names = bars_against_model(ax, fq_ms, fq_model, "ms (8192 x 8192 bf16)", f"fake quant, {peak_label}", ON_GPU)
    plt.tight_layout()
    plt.show()
    print_against_model(names, fq_ms, fq_model, 3 * fq_bytes, bw_gbps)
elif not ON_GPU:
    print("No GPU: not timed.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-graph-break-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** The broken version, compiled, still ran faster than eager, yet slower than your repair. Name
# what the graph break costs besides a second graph, and why the repaired version needs no host synchronisation
# at all.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-graph-break", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The `.item()` copies the maximum to the host, and the host must wait for every kernel before it to finish (a
# synchronisation): the GPU then sits idle while Python compares the value, and only afterwards launches the
# pointwise graph, so the launch latency is no longer hidden behind running kernels. The two graphs cannot fuse
# with each other, and a branch on the value can trigger a recompilation. In the repair the maximum stays a 0-d
# tensor on the GPU and `torch.where` chooses per element, so the whole function is one graph whose kernels the
# host queues without waiting for any result.

# %% [markdown] nbgrader={"grade": false, "grade_id": "limits-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. The limits: registers, launches, autotuning
#
# ### Registers and spills
#
# A fused kernel keeps its intermediates in registers, and registers are finite: 65536 32-bit registers per
# multiprocessor on recent NVIDIA GPUs, at most 255 per thread. A program that holds a block of `BLOCK_N`
# elements spreads them over its `32 · num_warps` threads (a **warp** is 32 threads that execute each instruction
# together; a **multiprocessor**, or SM, is one of the GPU's ~130 cores that run programs); past what fits, the compiler **spills** registers
# to local memory (a slice of HBM, cached in L1), and every spill is extra traffic and latency. Fewer
# registers per thread also means more warps can share a multiprocessor and hide each other's loads; more means
# fewer.
#
# The kernel below (a row argmax, one program per row) is given: it streams a row in chunks of `BLOCK_N`, keeping
# per lane a running maximum and the position where it was reached, two values per element of the block. The
# cell compiles it for a range of `BLOCK_N` with 4 and with 16 warps, without running it
# (`kernel.warmup(…, grid=…)`), and reads the compiled binary's `n_regs` (registers per thread) and `n_spills`.
# Exercise 06.row_argmax launches this kernel.
#
# **Reference run.** H100: `BLOCK_N = 32768` with 4 warps spilled 622 registers; no spill up to 16384 with 32
# warps.

# %% nbgrader={"grade": false, "grade_id": "row_argmax_kernel", "locked": true, "schema_version": 3, "solution": false}
# include: kernels/row_argmax.py (_row_argmax_kernel)

# %% nbgrader={"grade": false, "grade_id": "spills", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
SPILL_BLOCKS = runtime.demo_points([1024, 2048, 4096, 8192, 16384, 32768], keep=4)
SPILL_WARPS = (4, 16)
regs = {w: [] for w in SPILL_WARPS}
spills = {w: [] for w in SPILL_WARPS}
if ON_GPU:
    xs = torch.randn(64, 32768, device="cuda", dtype=torch.bfloat16)
    outs = torch.empty(64, device="cuda", dtype=torch.int64)
    for w in SPILL_WARPS:
        for b in tqdm(SPILL_BLOCKS, desc=f"compiling, {w} warps"):
            try:
                k = _row_argmax_kernel.warmup(xs, outs, xs.shape[1], xs.stride(0), 64, grid=(64,), BLOCK_N=b,
                                              num_warps=w)
                k._init_handles()
                regs[w].append(k.n_regs)
                spills[w].append(k.n_spills)
            except Exception as exc:  # noqa: BLE001  a block that cannot compile at all is a point of the plot too
                print(f"BLOCK_N={b}, {w} warps: did not compile ({type(exc).__name__}: {str(exc)[:120]})")
                regs[w].append(np.nan)
                spills[w].append(np.nan)
    # What the registers cost: how many warps fit on a multiprocessor (occupancy), and the bandwidth each setting
    # reaches streaming 4096 rows of 32768 (256 MiB), as a fraction of the copy bandwidth.
    props = torch.cuda.get_device_properties(0)
    max_warps = getattr(props, "max_threads_per_multi_processor", 2048) // 32
    regs_per_sm = getattr(props, "regs_per_multiprocessor", 65536)
    occupancy = {w: [min(max_warps, (regs_per_sm // (r * 32 * w)) * w) / max_warps if r == r and r else np.nan
                     for r in regs[w]] for w in SPILL_WARPS}
    xt = torch.randn(4096, 32768, device="cuda", dtype=torch.bfloat16)
    ot = torch.empty(4096, device="cuda", dtype=torch.int64)
    copy_frac = {w: [] for w in SPILL_WARPS}
    for w in SPILL_WARPS:
        for b, r in zip(SPILL_BLOCKS, regs[w]):
            if r != r:  # did not compile
                copy_frac[w].append(np.nan)
                continue
            ms = bench_ms(lambda b=b, w=w: _row_argmax_kernel[(4096,)](xt, ot, 32768, 32768, 4096, BLOCK_N=b,
                                                                      num_warps=w))
            copy_frac[w].append(xt.numel() * xt.element_size() / (ms * 1e6) / bw_gbps)
    del xt, ot
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 3.8))
    for w in SPILL_WARPS:
        ax.semilogx(SPILL_BLOCKS, regs[w], "o-", base=2, label=f"{w} warps")
        bx.semilogx(SPILL_BLOCKS, spills[w], "o-", base=2, label=f"{w} warps")
        cx.semilogx(SPILL_BLOCKS, copy_frac[w], "o-", base=2, label=f"{w} warps: bandwidth")
        cx.semilogx(SPILL_BLOCKS, occupancy[w], "x:", base=2, label=f"{w} warps: occupancy")
    ax.axhline(255, color="k", ls="--", lw=1, label="the most a thread can have")
    ax.set_ylabel("registers per thread")
    bx.set_ylabel("registers spilled")
    cx.set_ylabel("fraction of copy bandwidth / of resident warps")
    cx.set_ylim(0, 1.05)
    for axis in (ax, bx, cx):
        axis.set_xlabel("BLOCK_N")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(f"_row_argmax_kernel on {peak_label}")
    plt.tight_layout()
    plt.show()
    for w in SPILL_WARPS:
        print(f"{w:>2} warps: " + "  ".join(f"{b}: {r} regs, {s} spilled, occupancy {o:.2f}, {f:.2f} of copy"
                                             for b, r, s, o, f in zip(SPILL_BLOCKS, regs[w], spills[w],
                                                                      occupancy[w], copy_frac[w])))
    del xs, outs
else:
    print("No GPU: registers and spills belong to a compiled GPU binary; the interpreter has neither.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "launch-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: registers per thread grow with `BLOCK_N / (32 · num_warps)`, the elements each thread
# holds; once they reach the ceiling, spills appear. More warps split the same block over more threads, so
# sixteen warps reach the ceiling at a block four times larger than four warps do. The third panel prices it:
# occupancy (the share of a multiprocessor's warp slots the register use leaves room for) falls as registers
# grow, and once a setting spills, its bandwidth falls far below the copy bandwidth, since every spilled value
# is a store and a load through local memory inside the loop.
#
# ### The launch-overhead plateau
#
# Every kernel launch costs the host a few microseconds, and a small kernel takes less than that on the GPU. Time
# a chain of four small ops (`sigmoid(2x + 1) · x`: multiply, add, sigmoid, multiply) over growing sizes, and at
# the small end the time stops falling: the GPU waits for the host. Fusion helps twice there (one launch instead
# of four); a CUDA graph (`mode="reduce-overhead"`) replays the launches without the host's per-launch work.
# The model: `launches × the measured launch time + bytes / copy bandwidth`. Eager moves `9|x|` (multiply,
# add and sigmoid read one tensor and write one; the last multiply reads two), the fused kernel `2|x|`.

# %% nbgrader={"grade": false, "grade_id": "launch", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def tiny_chain(x):
    return torch.sigmoid(x * 2 + 1) * x


LAUNCH_SIZES = runtime.demo_points([2**k for k in range(10, 27, 2)])
launch_ms = {}
if ON_GPU and may_compile("the launch-overhead sweep"):
    torch._dynamo.reset()
    cfg = torch._dynamo.config
    limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, limit, max(getattr(cfg, limit), len(LAUNCH_SIZES) + 1))  # one specialisation per size

    def tiny_chain_graphed(x):  # a frame of its own, so that each mode keeps its own compiled entries
        return tiny_chain(x)

    chain_default = torch.compile(tiny_chain, dynamic=False)
    chain_graphs = torch.compile(tiny_chain_graphed, mode="reduce-overhead", dynamic=False)
    for n in tqdm(LAUNCH_SIZES, desc="sizes"):
        x = torch.randn(n, device="cuda")
        with quiet():
            for name, fn in (("eager (4 kernels)", tiny_chain), ("compiled", chain_default),
                             ("compiled, CUDA graph", chain_graphs)):
                launch_ms.setdefault(name, []).append(bench_ms(lambda: fn(x)))
    t_launch = launch_seconds(profile) * 1e3
    sizes_bytes = np.array(LAUNCH_SIZES, dtype=float) * 4
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, ms in launch_ms.items():
        ax.loglog(LAUNCH_SIZES, np.array(ms) * 1e3, "o-", label=name)
    ax.loglog(LAUNCH_SIZES, (4 * t_launch + model_ms(9 * sizes_bytes)) * 1e3, "k--", label="model: 4 launches + 9|x|")
    ax.loglog(LAUNCH_SIZES, (t_launch + model_ms(2 * sizes_bytes)) * 1e3, "k:", label="model: 1 launch + 2|x|")
    ax.set_xlabel("elements (float32)")
    ax.set_ylabel("µs per call")
    ax.set_title(peak_label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()
    for i, n in enumerate(LAUNCH_SIZES):
        print(f"{n:>9} elements: " + "  ".join(f"{name} {ms[i] * 1e3:7.1f} us" for name, ms in launch_ms.items()))
elif not ON_GPU:
    print("No GPU: launch overhead is a GPU's; not measured here.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "autotune-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: above a few million elements every line follows its bytes, eager about four times above
# the fused ones. Below the bend the lines go flat: eager at about four launches, the compiled version at one
# launch plus the Python of its wrapper (guards, argument checks), the CUDA graph lowest. In that flat region,
# fusing saves launches rather than bytes.
#
# ### What autotuning costs
#
# `@triton.autotune` runs every configuration the first time it meets a new key, and keeps the fastest for that
# key. The first call pays for compiling and timing them all; the ones after it pay nothing. The cell times the
# first and second calls of a small autotuned kernel with eight configurations, by the wall clock.

# %% nbgrader={"grade": false, "grade_id": "autotune", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024, 4096, 8192) for w in (4, 8)],
                 key=["n"])
@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def scale(x):
    y = torch.empty_like(x)
    _scale_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
    return y


if ON_GPU:
    x = torch.randn(2**24, device="cuda")
    walls = []
    for _ in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        scale(x)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - start)
    print(f"first call {walls[0] * 1e3:.0f} ms (compile and time 8 configurations), second {walls[1] * 1e3:.3f} ms; "
          f"chosen: {_scale_kernel.best_config}")
    print(f"the kernel itself: {bench_ms(lambda: scale(x)):.3f} ms, model {model_ms(8 * x.numel()):.3f} ms")
else:
    print("No GPU: not timed (in the interpreter the autotuner runs each configuration once, by the wall clock).")

# %% [markdown] nbgrader={"grade": false, "grade_id": "tune-cache-md", "locked": true, "schema_version": 3, "solution": false}
# ### What the caches keep between processes
#
# The autotuner's choice lives in the process: a new Python process (the next training run, every rank of a
# distributed job, the grader) times all the configurations again. Two disk caches save work across processes:
#
# * Triton's **kernel cache** (`TRITON_CACHE_DIR`, by default `~/.triton/cache`) keeps every compiled binary,
#   keyed by the kernel's source, its constants and the GPU. A new process skips compilation but, by default,
#   still times every configuration.
# * `triton.autotune(..., cache_results=True)` also writes the **timings' winner** there, keyed by the tuning key,
#   the configurations and the kernel's source, so a new process skips the timing as well. (`TRITON_CACHE_AUTOTUNING=1`
#   turns it on for every autotuned kernel.)
# * Inductor keeps its own: the **FX graph cache** (generated code for a graph it has seen, under
#   `TORCHINDUCTOR_CACHE_DIR`) and its autotuning results, so a second process that compiles the same function
#   loads the code instead of generating and compiling it.
#
# The cell runs a small script three times in fresh Python processes sharing one new cache directory: first with
# empty caches, then warm with `cache_results=True`, then warm with `cache_results=False`. Each run measures the wall
# time of the first call of the eight-configuration kernel above and of the first call of a compiled
# `gelu(x + b) + r`. GPU only (the interpreter neither compiles nor caches), and not while the grader runs.

# %% nbgrader={"grade": false, "grade_id": "tune-cache", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
FIRST_CALLS = r"""
import json, sys, time
import torch, triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024, 4096, 8192) for w in (4, 8)],
                 key=["n"], cache_results=sys.argv[1] == "1")
@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

def chain(x, b, r):
    return torch.nn.functional.gelu(x + b) + r

def first_call(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start

x = torch.randn(2**24, device="cuda")
y = torch.empty_like(x)
launch = lambda: _scale_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
xm, rm = torch.randn(2, 4096, 4096, device="cuda", dtype=torch.bfloat16)
bm = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
compiled = torch.compile(chain)
print(json.dumps({"autotuned kernel": first_call(launch), "torch.compile": first_call(lambda: compiled(xm, bm, rm))}))
"""
RUNS = (("empty caches", "1"), ("warm, cache_results=True", "1"), ("warm, cache_results=False", "0"))


def first_calls_in_new_process(script: str, cache: str, cache_results: str) -> dict:
    """Seconds of each first call, measured by the script in a fresh Python process with its caches under cache."""
    import json
    import os

    # One compile thread: Inductor's pool of compile workers would take longer to start than this graph to build.
    env = dict(os.environ, TRITON_CACHE_DIR=f"{cache}/triton", TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor",
               TRITON_CACHE_AUTOTUNING="0", TORCHINDUCTOR_COMPILE_THREADS="1")
    start = time.perf_counter()
    run = subprocess.run([sys.executable, script, cache_results], env=env, capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"the timing script failed: {(run.stderr or run.stdout).strip().splitlines()[-1:]}")
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "process": time.perf_counter() - start}


if ON_GPU and not runtime.small_demos():
    cache_walls = {}
    with tempfile.TemporaryDirectory() as cache:
        script = f"{cache}/first_calls.py"
        with open(script, "w") as f:
            f.write(FIRST_CALLS)
        for label, flag in tqdm(RUNS, desc="fresh processes"):
            cache_walls[label] = first_calls_in_new_process(script, cache, flag)
    fig, ax = plt.subplots(figsize=(8, 3))
    what = ["autotuned kernel", "torch.compile"]
    for i, label in enumerate(cache_walls):
        ax.barh([j + 0.27 * (i - 1) for j in range(len(what))], [cache_walls[label][w] for w in what], height=0.27,
                label=label)
    ax.set_yticks(range(len(what)), what)
    ax.set_xscale("log")
    ax.set_xlabel("seconds of the first call in a new process (log)")
    ax.set_title(peak_label)
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    for label, walls in cache_walls.items():
        print(f"{label:<27} " + "   ".join(f"{w}: {walls[w]:6.2f} s" for w in what)
              + f"   (the whole process: {walls['process']:.0f} s, most of it importing torch and starting CUDA)")
elif runtime.small_demos():
    print("The caches are not measured while the grader runs this notebook.")
else:
    print("No GPU: not measured (the interpreter compiles nothing, and its autotuner caches nothing on disk).")

# %% [markdown] nbgrader={"grade": false, "grade_id": "tune-cache-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for: with empty caches both first calls pay for compiling (and the kernel for timing eight
# configurations); warm, with `cache_results=True`, the kernel's first call costs little more than a launch, while
# with `cache_results=False` it still pays for the timing though not for the compilation. The compiled function's
# first call drops from compiling kernels to loading them (Dynamo still traces the function in each process).
# In a job that starts many processes, share the cache directories (or ship them with the job) and turn on
# `cache_results`; delete a cache after changing anything its key does not see, such as a driver.

# %% [markdown] nbgrader={"grade": false, "grade_id": "argmax-md", "locked": true, "schema_version": 3, "solution": false}
# ## 6. Launch settings per shape
#
# A kernel's best `BLOCK_N` and `num_warps` depend on the shape it runs on. Take the row argmax above at two
# shapes from a language model:
#
# * **decode**: 64 rows of a 128256-word vocabulary (bf16). Only 64 programs for about 130 multiprocessors: each
#   program must keep many loads in flight by itself, so large blocks and many warps win;
# * **training**: 16384 rows of 32000. Programs queue up on every multiprocessor, and small blocks with few warps
#   let more of them run at once.
#
# **Reference run** (H100), as fractions of copy bandwidth (bytes of `x` read over the time):
#
# | config | decode 64 × 128256 | training 16384 × 32000 |
# |---|---|---|
# | `BLOCK_N` 1024, 4 warps | 0.09 | 0.98 |
# | 4096, 8 warps | 0.14 | |
# | 4096, 4 warps, 3 stages | | 0.99 |
# | 8192, 16 warps | 0.23 | |
# | 16384, 32 warps | 0.31 | 0.65 |
# | `torch.argmax` | 0.13 | 0.59 |
#
# No one setting is best at both. `triton.autotune(configs=[…], key=[…])` picks per shape: it times every
# config the first time it sees a new value of the **key** arguments and reuses that choice whenever the key
# repeats. So the key decides when it re-tunes. Key on the row length alone, and a choice made on the grader's
# small test of 3 rows of 32000 would be reused for 16384 rows of 32000. Key on the row count too, but not on
# its exact value (every batch size would re-tune): pass a bucket, `rows_bucket =
# triton.next_power_of_2(min(M, 4096))`, as an extra integer argument. The given kernel takes it
# (`_row_argmax_kernel(x_ptr, out_ptr, n_cols, stride_row, rows_bucket, BLOCK_N)`) and does not read it; it is
# there for the key.
#
# %% [markdown] nbgrader={"grade": false, "grade_id": "row_argmax-card", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 06.row_argmax · Launch settings chosen per shape   (about 60 min · ★★☆)
#
# **Spec.** `row_argmax(x) -> indices`: for a 2-D `x (M, N)` (float32, float16 or bf16) whose rows are contiguous
# (`x.stride(1) == 1`, any `x.stride(0)`), the first position of each row's largest value, int64, shape `(M,)`.
# Launch the given `_row_argmax_kernel` one program per row through your own `triton.autotune` wrapper of it,
# `_row_argmax_tuned`, with your list of configs `ROW_ARGMAX_CONFIGS`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The kernel is written; what you choose is the menu of launch settings and when the tuner may choose again.
# The table above says no single setting serves both shapes.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `ROW_ARGMAX_CONFIGS = [triton.Config({"BLOCK_N": …}, num_warps=…, num_stages=…), …]`, then
# `_row_argmax_tuned = triton.autotune(configs=ROW_ARGMAX_CONFIGS, key=[…])(_row_argmax_kernel)`, and `row_argmax`
# launches it with a grid of one program a row and `rows_bucket` as the stub's comments say.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# The key decides when the tuner times again: name the row length and `rows_bucket`, never the raw row count.
# The traps: `x.stride(1) != 1` or a non-2-D `x` must be refused with a `ValueError`, the output is int64, and
# `BLOCK_N` is a `triton.Config` key, not an argument you pass at the launch.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Take configs from both columns of the table above (large blocks and many warps for the decode shape, small
# blocks with few warps and three stages for the training shape). Every config must compile without spilling
# at the graded shapes: section 5's plot shows where spills start.
#
# </details>
#
# **Graded.** Correctness (ties between equal maxima included), and (GPU) speed at the decode and the training
# shape against `torch.argmax`, timed in turns on your GPU, with no register spills.
#
# <!-- graded: 06.row_argmax -->
#
# *Why `torch.argmax` and not the copy bandwidth?* A bar should be one PyTorch itself clears, and at the decode
# shape `torch.argmax` reaches only about a tenth of the copy bandwidth: a bar it clears in bytes per second
# would pass a kernel tuned for neither shape.

# %% nbgrader={"grade": false, "grade_id": "row_argmax", "locked": false, "schema_version": 3, "solution": true}
# Your configs (triton.Config({"BLOCK_N": ...}, num_warps=..., num_stages=...)) and the autotuned kernel:
#   ROW_ARGMAX_CONFIGS = [...]
#   _row_argmax_tuned = triton.autotune(configs=ROW_ARGMAX_CONFIGS, key=[...])(_row_argmax_kernel)
### BEGIN SOLUTION
# include: kernels/row_argmax_tuned.py (ROW_ARGMAX_CONFIGS, _row_argmax_tuned)
### END SOLUTION


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """The index of each row's largest value (the first one among equals), as int64 of shape (M,), for a 2-D x
    (M, N) whose rows are contiguous (x.stride(1) == 1, any x.stride(0))."""
    # 1. refuse what the kernel cannot read: x not 2-D, or x.stride(1) != 1 (a ValueError that says why)
    # 2. out = torch.empty(M, dtype=torch.int64, device=x.device)
    # 3. launch _row_argmax_tuned[(M,)](x, out, N, x.stride(0), rows_bucket) with
    #    rows_bucket = triton.next_power_of_2(min(M, 4096)); return out
    ### BEGIN SOLUTION
    # include body: kernels/row_argmax_tuned.py (row_argmax)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "row_argmax-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("06.row_argmax", row_argmax)

# %% nbgrader={"grade": true, "grade_id": "test_row_argmax_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("06.row_argmax", row_argmax, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_row_argmax_performance", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("06.row_argmax", row_argmax, criteria=["performance"]).assert_passed("performance")

# %% [markdown] nbgrader={"grade": false, "grade_id": "argmax-reference", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's tuned kernel: 2.5x `torch.argmax` at the decode shape on an H100 (2.6x on an
# H200), 1.7x (2.4x) at the training shape; one setting of 1024 columns over 4 warps for both shapes reached
# only 0.68x `torch.argmax` at the decode shape.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-autotune-key-md", "locked": true, "schema_version": 3, "solution": false}
# **Question.** Your key names `rows_bucket`, a power of two, rather than the row count `M` itself, or nothing
# about the rows. What would go wrong with each of the other two choices in a training job whose batches vary
# in length?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-autotune-key", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Without the rows in the key, the first shape the tuner meets decides for every later one with the same row
# length: a choice timed on 3 rows (one program per row: large blocks, many warps win) would be reused for 16384
# rows, where small programs win, and the reverse. With `M` itself in the key, every new batch size is a new key,
# so the job pays for timing all the configs again and again (seconds each time). A power-of-two bucket keeps
# the rows' order of magnitude, which is what changes the answer, in a dozen keys at most.

# %% [markdown] nbgrader={"grade": false, "grade_id": "argmax-sweep-md", "locked": true, "schema_version": 3, "solution": false}
# ### Every config at both shapes
#
# The cell launches the given kernel with each of a set of configs at the two graded shapes, with
# `torch.argmax` and your `row_argmax`, and draws the fractions of copy bandwidth as a heat map. Find the
# config your autotuner chose at each shape in it. GPU only.

# %% nbgrader={"grade": false, "grade_id": "argmax-sweep", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
SWEEP = runtime.demo_points([(1024, 4, 2), (2048, 4, 2), (4096, 4, 3), (4096, 8, 2), (8192, 8, 2), (8192, 16, 2),
                             (16384, 16, 2), (16384, 32, 2)], keep=4)
ARGMAX_SHAPES = {"decode 64 x 128256": (64, 128256), "training 16384 x 32000": (16384, 32000)}


def launch_given(x, out, block, warps, stages):
    _row_argmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), 1, BLOCK_N=block, num_warps=warps,
                                      num_stages=stages)
    return out


if ON_GPU:
    frac = np.full((len(SWEEP) + 2, len(ARGMAX_SHAPES)), np.nan)
    row_names = [f"BLOCK_N {b}, {w} warps, {s} stages" for b, w, s in SWEEP] + ["torch.argmax", "your row_argmax"]
    for j, (shape_name, (m, n)) in enumerate(ARGMAX_SHAPES.items()):
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, device="cuda", dtype=torch.int64)
        versions = {name: (lambda b=b, w=w, s=s: launch_given(x, out, b, w, s))
                    for name, (b, w, s) in zip(row_names, SWEEP)}
        versions["torch.argmax"] = lambda: torch.argmax(x, dim=-1)
        versions["your row_argmax"] = lambda: row_argmax(x)
        times = bench_versions(versions, desc=shape_name)
        for i, name in enumerate(row_names):
            if name in times:
                frac[i, j] = compiler_fusion.row_argmax_bytes(x) / (times[name] * 1e6) / bw_gbps
        chosen = getattr(globals().get("_row_argmax_tuned"), "best_config", None)
        if chosen is not None:
            print(f"{shape_name}: your autotuner chose {chosen}")
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(row_names) + 1.2))
    im = ax.imshow(frac, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(ARGMAX_SHAPES)), list(ARGMAX_SHAPES))
    ax.set_yticks(range(len(row_names)), row_names)
    for (i, j), f in np.ndenumerate(frac):
        if not np.isnan(f):
            ax.text(j, i, f"{f:.2f}", ha="center", va="center", color="w" if f < 0.6 else "k", fontsize=9)
    fig.colorbar(im, label="fraction of copy bandwidth")
    ax.set_title(f"row argmax, bf16, {peak_label}")
    plt.tight_layout()
    plt.show()
    del x, out
else:
    print("No GPU: configs are compared on a GPU only.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "profile-md", "locked": true, "schema_version": 3, "solution": false}
# ## 7. Profiling: did fusion happen?
#
# ### torch.profiler, kernel by kernel
#
# The most direct check is the list of kernels the GPU ran. `gpu_kernel_table(fn, *args)` (in
# `autograder/measure/inductor.py`) wraps `torch.profiler` with CUDA activity only, calls `fn` twice to warm up, profiles
# one call, and groups the GPU's events by name: count and time. The cell runs it on one transformer block
# written in plain PyTorch (RMSNorm, attention through SDPA with a causal mask, a SwiGLU MLP, two residual adds),
# eager and compiled, and splits the time into matrix products, attention and everything else. The products and
# the attention kernel are the same library calls in both; what changes is the rest. Then the **timeline** of one
# call of each (`gpu_timeline`: when each kernel started and how long it ran): a gap between two bars is time the
# GPU sat idle waiting for the host to launch the next kernel. `gpu_timeline(fn, *args, trace="block.json")`
# also writes the profiler's Chrome trace, which `chrome://tracing` or Perfetto open with the CPU side beside it.

# %% nbgrader={"grade": false, "grade_id": "profile", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def rms(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def transformer_block(x, p, n_heads):
    B, T, D = x.shape
    q, k, v = (rms(x, p["norm1"]) @ p["wqkv"]).split(D, dim=-1)
    q, k, v = (t.view(B, T, n_heads, D // n_heads).transpose(1, 2) for t in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(B, T, D) @ p["wo"]
    h = rms(x, p["norm2"])
    return x + (F.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]


def kind_of(name):
    lowered = name.lower()
    if any(s in lowered for s in ("flash", "fmha", "attention", "sdpa")):
        return "attention"
    if any(s in lowered for s in ("gemm", "nvjet", "cutlass", "sm90_", "sm80_", "xmma", "matmul")):
        return "matrix products"
    return "everything else"


tables = {}
if ON_GPU and may_compile("the transformer block, compiled"):
    TB, TT, TD, THEADS, TF = 2, 2048, 2048, 16, 5632
    gen = torch.Generator(device="cuda").manual_seed(0)

    def param(*shape, scale=0.02):
        return (scale * torch.randn(*shape, device="cuda", generator=gen)).to(torch.bfloat16)

    p = {"norm1": 1 + param(TD), "norm2": 1 + param(TD), "wqkv": param(TD, 3 * TD), "wo": param(TD, TD),
         "w_gate": param(TD, TF), "w_up": param(TD, TF), "w_down": param(TF, TD)}
    xt = torch.randn(TB, TT, TD, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    block_compiled = torch.compile(transformer_block)
    for name, fn in (("eager", transformer_block), ("compiled", block_compiled)):
        tables[name] = gpu_kernel_table(fn, xt, p, THEADS)
        print_kernel_table(tables[name], f"\n{name}:")
    x_bytes = TB * TT * TD * 2
    # The floor of everything else: two RMSNorms (read, write), two residual adds (read 2, write 1), SwiGLU's
    # activation (read gate and up, write one): with the products' outputs counted as they come.
    floor_ms = model_ms(2 * 2 * x_bytes + 2 * 3 * x_bytes + 3 * TB * TT * TF * 2)
    KINDS = ("matrix products", "attention", "everything else")
    by_kind = {name: {kind: (sum(r.total_us for r in rows if kind_of(r.name) == kind) / 1e3,
                             sum(r.count for r in rows if kind_of(r.name) == kind)) for kind in KINDS}
               for name, rows in tables.items()}
    fig, ax = plt.subplots(figsize=(8, 2.8))
    left = np.zeros(len(tables))
    for kind, color in zip(KINDS, ("C0", "C1", "C2")):
        ms = np.array([by_kind[name][kind][0] for name in tables])
        counts = " / ".join(str(by_kind[name][kind][1]) for name in tables)
        ax.barh(list(tables), ms, left=left, color=color, label=f"{kind} ({counts} kernels)")
        left += ms
    libraries_ms = by_kind["compiled"]["matrix products"][0] + by_kind["compiled"]["attention"][0]
    ax.axvline(libraries_ms + floor_ms, color="k", ls="--", lw=1,
               label="compiled products + attention, + the model's floor for the rest")
    ax.set_xlabel("ms of GPU time, one forward pass")
    ax.set_title(f"transformer block {TB}x{TT}x{TD}, {peak_label}")
    ax.legend(fontsize=7, loc="lower right")
    plt.tight_layout()
    plt.show()
    for name in tables:
        ms, count = by_kind[name]["everything else"]
        print(f"{name}: everything else {count} kernels, {ms:.3f} ms; the model's floor for it {floor_ms:.3f} ms")

    from matplotlib.patches import Patch

    colors = dict(zip(KINDS, ("C0", "C1", "C2")))
    timelines = {"eager": gpu_timeline(transformer_block, xt, p, THEADS),
                 "compiled": gpu_timeline(block_compiled, xt, p, THEADS)}
    fig, ax = plt.subplots(figsize=(10, 2.2))
    for row, (name, spans) in enumerate(timelines.items()):
        ax.broken_barh([(s.start_us / 1e3, s.duration_us / 1e3) for s in spans], (row - 0.35, 0.7),
                       facecolors=[colors[kind_of(s.name)] for s in spans])
        end_us = max(s.start_us + s.duration_us for s in spans)
        busy_us = sum(s.duration_us for s in spans)
        print(f"{name} timeline: {len(spans)} GPU events over {end_us / 1e3:.3f} ms, "
              f"the GPU idle between them {(end_us - busy_us) / 1e3:.3f} ms")
    ax.set_yticks(range(len(timelines)), list(timelines))
    ax.set_xlabel("ms from the first kernel of one forward pass")
    ax.set_title(f"one call on the GPU, {peak_label}")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()], fontsize=7, loc="lower right")
    plt.tight_layout()
    plt.show()
    del xt, p
elif not ON_GPU:
    print("No GPU: torch.profiler's CUDA table needs one. On a CPU, torch.profiler.profile(activities=[CPU]) lists "
          "the operators instead.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ncu-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: the same matrix products and attention kernel in both tables; in the eager one, a long tail
# of elementwise and reduction kernels (the RMSNorms alone are several each); in the compiled one, a handful of
# `triton_…` kernels, and their time close to the model's floor. On the timeline, the compiled call is shorter by
# the kernels it no longer launches, and shows fewer gaps: each gap is a launch the host had to make.
#
# ### Nsight Compute: count the bytes
#
# Times can mislead (a cache, a clock). The hardware's counters say how many bytes crossed between DRAM and L2.
# Profile a kernel with `ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum` and compare with the model:
# if a fusion worked, the bytes dropped by what the model predicts. The cell profiles, in a subprocess, a SiLU
# written as `x * sigmoid(x)` (two kernels: `2|x|` then `3|x|`, `5|x|` in all) against PyTorch's fused
# `F.silu` (`2|x|`) on 2²⁶ float32 values, if `ncu` is installed. Reading the counters needs permission
# (on many machines only root, or a driver set to `NVreg_RestrictProfilingToAdminUsers=0`); without it ncu
# reports `ERR_NVGPUCTRPERM`, and the cell says so.

# %% nbgrader={"grade": false, "grade_id": "ncu", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
NCU_SCRIPT = """
import sys, torch, torch.nn.functional as F
x = torch.empty(2**26, device="cuda").uniform_(-4, 4)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("measured")
y = x * torch.sigmoid(x) if sys.argv[1] == "unfused" else F.silu(x)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
"""


def ncu_bytes(script_path, mode):
    """(bytes read + written by DRAM in the 'measured' range, a note); bytes None when it could not be counted."""
    cmd = ["ncu", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum", "--nvtx", "--nvtx-include", "measured/",
           "--csv", "--print-units", "base", sys.executable, script_path, mode]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"ncu did not run: {exc}"
    text = done.stdout + done.stderr
    if "ERR_NVGPUCTRPERM" in text:
        return None, ("ERR_NVGPUCTRPERM: this user may not read the GPU's performance counters (ask for "
                      "NVreg_RestrictProfilingToAdminUsers=0, or run ncu as root)")
    total, kernels = 0.0, set()
    lines = [line for line in done.stdout.splitlines() if line.startswith('"')]
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name", "").startswith("dram__bytes_"):
            total += float(row["Metric Value"].replace(",", ""))
            kernels.add((row.get("ID"), row.get("Kernel Name", "")[:60]))
    if not kernels:
        return None, "no counters in ncu's output; its last lines:\n" + "\n".join(text.splitlines()[-8:])
    return total, f"{len(kernels)} kernel(s)"


if not ON_GPU:
    print("No GPU: Nsight Compute profiles GPU kernels only.")
elif shutil.which("ncu") is None:
    print("ncu (Nsight Compute) is not on PATH: install the CUDA toolkit's nsight-compute to count DRAM bytes.")
elif runtime.small_demos():
    print("ncu: skipped while the grader runs this notebook (each profile takes seconds to minutes)")
else:
    n_bytes = 2**26 * 4
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/silu.py"
        with open(path, "w") as f:
            f.write(NCU_SCRIPT)
        for mode, model in (("unfused", 5), ("fused", 2)):
            counted, note = ncu_bytes(path, mode)
            if counted is None:
                print(f"{mode}: not counted. {note}")
                break
            print(f"{mode:<8} DRAM bytes {counted / 2**20:8.0f} MiB ({note}); model {model}|x| = "
                  f"{model * n_bytes / 2**20:.0f} MiB")

# %% [markdown] nbgrader={"grade": false, "grade_id": "when-not-md", "locked": true, "schema_version": 3, "solution": false}
# ## 8. When not to fuse
#
# Fusion removes traffic; it can add other costs, and then it loses:
#
# * **Register pressure.** Each op fused into a kernel keeps its values live in registers. Past the per-thread
#   ceiling the kernel spills (section 5), and before that, fewer warps fit on a multiprocessor to hide
#   memory latency. A kernel that fuses too much can run slower than two that each stream at full speed.
# * **Shared memory.** A GEMM's tiles already take most of a multiprocessor's shared memory; an epilogue or a
#   prologue that needs its own staging buffers can leave room for fewer blocks, or for smaller tiles.
# * **Tile shapes that do not match.** A producer tiled one way and a consumer tiled another cannot share
#   registers without a reshuffle. Inductor declines such fusions; by hand you pay for the shuffle or for the trip
#   through memory.
# * **Recomputation.** Training needs some intermediates again in the backward pass. A fused forward that never
#   writes one must either recompute it in the backward (cheap for pointwise ops, which is what
#   `torch.compile`'s partitioner chooses by default) or write it anyway, and then that write is not saved.
# * **Your time.** A hand-fused kernel must be written, tested, tuned per shape (section 6) and kept working. If
#   the compiler gets within a few percent, or the chain is a small fraction of the step, leave it to the
#   compiler.
#
# ## What to take away
#
# * Inductor fuses pointwise and reduction chains on its own; read what it did from the generated code
#   (`run_and_get_code`, `TORCH_LOGS="output_code"`) and check the result against the cost model.
# * It stops at graph breaks (host syncs, data-dependent shapes, untraceable calls) and at the boundary of a
#   library call such as a GEMM: nothing streams through a matrix product unless you write that kernel.
# * `triton_op` + `wrap_triton` + `register_autograd` put your own kernels inside a compiled graph, forward and
#   backward, with the compiler's fusions around them.
# * Launch settings belong to a shape; `triton.autotune` chooses them per key, and the key must name what
#   changes the answer.
# * Profile: the kernel list says whether fusion happened, the DRAM counters say whether it saved the bytes.
#
# **Not covered here.** Three other routes to fused kernels are left out on purpose:
#
# * **TensorRT, TensorRT-LLM and serving engines** (vLLM, SGLang). They fuse by shipping hand-written kernels and
#   graph rewrites for known model families; using them is configuration and a separate installation, not a
#   technique this notebook could measure against the cost model. What they ship is what notebooks 02 to 05
#   have you write.
# * **TorchScript's fuser.** The older PyTorch route to fused kernels, superseded by `torch.compile` and no longer
#   developed: what it fused, Inductor fuses.
# * **Nsight Systems** (`nsys profile python script.py`). Its timeline shows the same kernels and the same idle
#   gaps between them as section 7's `gpu_timeline`, recorded from outside the process, with the CPU threads
#   and the CUDA API calls beside them. The notebook uses the profiler that runs inside a cell.
#
# ## Further reading
#
# * PyTorch, [`torch.compile`](https://pytorch.org/docs/stable/generated/torch.compile.html) (its modes and
#   options) and the [troubleshooting guide](https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html)
#   (graph breaks, recompilations, `TORCH_LOGS`).
# * PyTorch, [`torch.library`](https://pytorch.org/docs/stable/library.html): `triton_op`, `wrap_triton`,
#   `custom_op`, `register_autograd`, `register_fake`; and the recipe
#   [Using user-defined Triton kernels with torch.compile](https://pytorch.org/tutorials/recipes/torch_compile_user_defined_triton_kernel_tutorial.html).
# * PyTorch, [`torch.profiler`](https://pytorch.org/docs/stable/profiler.html).
# * Ansel et al., *PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode Transformation and Graph
#   Compilation*, ASPLOS 2024 ([doi:10.1145/3620665.3640366](https://doi.org/10.1145/3620665.3640366)): Dynamo and
#   Inductor, by their authors.
# * Triton, [`triton.autotune`](https://triton-lang.org/main/python-api/generated/triton.autotune.html) and the
#   [tutorials](https://triton-lang.org/main/getting-started/tutorials/index.html).
# * NVIDIA, [Nsight Compute's profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
#   (the DRAM counters of section 7).
