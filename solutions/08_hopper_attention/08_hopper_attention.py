# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 08 · The last 20% on Hopper: TMA, warp specialization, and where Triton's ceiling is
#
# **Optional · Hopper GPUs only (H100, H200) · about 4 to 6 hours · difficulty ★★★ · prerequisites: notebook 05
# (FlashAttention's forward, and its optional TMA version) and notebook 04's section on TMA.**
#
# Notebook 05's FlashAttention kernel does the right arithmetic in the right order and never writes the scores,
# yet it stays short of PyTorch's own attention (SDPA) on a Hopper GPU. Both kernels do the same flops; the gap
# is how busy each keeps the tensor cores. This notebook looks for that gap with the tools an engineer uses
# (the profiler, the compiled kernel's registers, Nsight Compute's counters), then walks the steps that close
# it on Hopper, measuring each one on your GPU: the copy engine (TMA) moving the tiles, launch settings tuned on
# your GPU, and warp specialization, where one group of warps only copies while others only compute. Two more
# steps, ping-pong and persistent scheduling, are explained with diagrams: upstream Triton does not let you ask
# for them, and the notebook says where that leaves the ceiling.
#
# **Where it runs.** Every measurement here needs a Hopper GPU (compute capability 9.x). On any other GPU, and
# on a CPU, each measuring cell prints one line saying so and does nothing, the exercise reads "skip", and the
# notebook still runs top to bottom: you can read it, and write the exercise, anywhere.
#
# You will
# 1. put notebook 05's kernel beside the cost model's FLOP-bound ceiling and SDPA's backends, then look inside
#    it: the GPU kernels the profiler sees, the registers and spills of the compiled kernel, and Nsight
#    Compute's counters (how busy the tensor pipe was, why warps waited) where your machine allows them;
# 2. move the tiles with TMA descriptors, then tune the launch settings on your GPU;
# 3. read how warp specialization, ping-pong and persistent scheduling keep the tensor cores busy, and what
#    upstream Triton 3.6 and 3.7 let a kernel ask for;
# 4. warp-specialize your forward kernel (graded on Hopper, for feedback: 0 points);
# 5. plot every step from notebook 05's kernel to yours, against the ceiling, and read where it stops.
#
# | exercise | what | time · difficulty | points |
# |---|---|---|---|
# | 08.flash_attention_ws | FlashAttention's forward with a producer warp group and two consumer warp groups | 2 to 3 h · ★★★ | 0 (optional) |
#
# Terms are defined where they first appear; the course's [glossary](../../docs/glossary.md) has them all.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined

import inspect
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autograder import check, runtime
from autograder.measure import capability
from autograder.measure.meters import TritonLaunches
from autograder.measure.timing import bench_interleaved, bench_ms, not_written, written_versions
from autograder.specs import streaming_reduction_fusion
from autograder.teach import profiling
from autograder.teach.plots import peaks

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()
CAP = capability.current()
NOT_HOPPER = capability.missing_hardware("hopper", CAP)  # None on a Hopper GPU: why not, in one line, elsewhere
ON_HOPPER = NOT_HOPPER is None
WHY_NOT = "no GPU here" if CAP is None else f"{CAP.name}, compute capability {CAP.major}.{CAP.minor}, is not Hopper"
bw_gbps, peak_tflops, peak_label = peaks(profile)
SHAPE = (4, 16, 4096, 128)  # batch, heads, tokens, head dim: notebook 05's timed shape, bf16, not causal
FLOPS = 4 * SHAPE[0] * SHAPE[1] * SHAPE[2] ** 2 * SHAPE[3]  # two products of 2·N·N·D flops per head
print("A Hopper GPU: every measurement below runs, and exercise 08.flash_attention_ws is graded." if ON_HOPPER
      else f"Not a Hopper GPU ({WHY_NOT}): every measurement below prints one line and does nothing, and exercise "
           "08.flash_attention_ws reads skip (it counts no points).")


def hopper_only(what: str, run) -> None:
    """run() on a Hopper GPU; anywhere else, one line that says why not."""
    if ON_HOPPER:
        run()
    else:
        print(f"{what}: skipped ({WHY_NOT}).")


def qkv(shape=SHAPE, dtype=torch.bfloat16, seed=0):
    """q, k, v of shape (B, H, N, D), contiguous, drawn on the device."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return tuple(torch.randn(*shape, device=DEVICE, dtype=dtype, generator=gen) for _ in range(3))


def tflops(ms: float) -> float:
    return FLOPS / (ms * 1e-3) / 1e12


def sdpa_versions(causal: bool = False) -> dict:
    """f(q, k, v) for SDPA as it chooses, and with its cuDNN and FlashAttention-2 backends forced (a backend this
    GPU or build lacks is named and left out when timed)."""
    out = {"SDPA (its own choice)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
    for name, backend in streaming_reduction_fusion.SDPA_BACKENDS.items():
        forced = streaming_reduction_fusion.sdpa_with_backend(backend)
        out[name] = lambda q, k, v, forced=forced: forced(q, k, v, causal)
    return out


def compiled(fn) -> list:
    """What each Triton kernel one call of fn() launched compiled to. A launch `kernel[grid](...)` returns the
    compiled kernel, whose n_regs and n_spills ptxas reported and whose metadata holds its warps and shared
    memory; TritonLaunches keeps those of every launch, with whether Triton warp-specialized a loop of it."""
    launches = TritonLaunches()
    with launches:
        fn()
    torch.cuda.synchronize()
    return launches.compiled


def print_compiled(name: str, figures: list) -> None:
    for k in figures:
        print(f"{name}: {k.name} [{k.settings}] {k.n_regs} registers a thread, {k.n_spills} spilled, "
              f"{k.num_warps} warps, {k.shared_bytes / 1024:.0f} KB of shared memory, warp-specialized: "
              f"{'yes' if k.warp_specialized else 'no'}")


def largest_error(out, ref) -> float:
    """The largest difference from ref, relative to ref's largest magnitude (at least 1)."""
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1))


# %% [markdown] nbgrader={"grade": false, "grade_id": "paste-md", "locked": true, "schema_version": 3, "solution": false}
# ## Your kernels from notebook 05
#
# Every step below starts from your own kernels. Paste into the next cell your `flash_attention` from notebook 05
# (exercise 05.flash_attention) with the kernel and the helpers it calls, and, if you wrote it, your
# `flash_attention_tma` (the optional TMA version, with a `settings` argument) with its kernel. Nothing grades
# this cell; the measurements time what you paste and leave out, with a line that says so, what you have not.
# The exercise of this notebook falls back to your `flash_attention` wherever the warp-specialized kernel does
# not apply, and may reuse its helpers (`_online_softmax_step`, `_visible`, `LOG2E`, `_check_attention_inputs`).

# %% nbgrader={"grade": false, "grade_id": "notebook05_kernels", "locked": false, "schema_version": 3, "solution": true}
# Paste your notebook-05 kernels here: flash_attention with everything it calls, and flash_attention_tma (optional).
from kernels.tma import descriptor, first_that_compiles, hopper_or_newer, tma_ready

### BEGIN SOLUTION
# include: kernels/flash_attention.py (LOG2E, _online_softmax_step, _visible, _key_ranges, _attend,
#     _flash_attention_kernel, attention_launch_settings, _check_attention_inputs, _check_out, flash_attention,
#     _attend_tma, _flash_attention_tma_kernel, ATTENTION_TMA_SETTINGS, flash_attention_tma, _launch_attention_tma)
### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "ceiling-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. The ceiling, and where notebook 05's kernel stands
#
# At the shape notebook 05 timed, batch 4, 16 heads, 4096 tokens and heads of 128 dimensions, attention's forward
# is two matrix products per head, `S = Q·Kᵀ` and `O = P·V`, each `2·N·N·D` flops: `4·B·H·N²·D`, about 550
# GFLOP, against 256 MiB of `Q`, `K`, `V` and `O` in bf16. That is about 2000 flops per byte, far right of any
# GPU's ridge point: the time the cost model predicts is the flops at the GPU's matmul rate, which the device
# profile measured with a cuBLAS product (notebook 01). That time is the **FLOP-bound ceiling**: no kernel of
# this op runs faster on your GPU.
#
# No kernel reaches it either: besides the products, every score costs a scale, a subtraction, an `exp2` (on the
# special-function units, much slower per clock than the tensor cores), a max and a sum, about one exponential
# for every `4·D = 512` matrix flops; and the tiles must arrive in shared memory before the tensor cores can
# use them. What a kernel can do is keep the tensor cores busy while all of that happens. SDPA's best backend on
# your GPU is the practical mark: the cell below times your notebook-05 kernel against it, each SDPA backend
# forced in turn, and the ceiling.

# %% nbgrader={"grade": false, "grade_id": "standing", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def where_notebook_05_stands():
    q, k, v = qkv()
    calls = {"your flash_attention (notebook 05)": lambda: flash_attention(q, k, v)}
    calls.update({name: (lambda f=f: f(q, k, v)) for name, f in sdpa_versions().items()})
    ms = bench_interleaved(written_versions(calls, "notebook 05's kernel and SDPA"), rounds=3)
    best = min((t for name, t in ms.items() if name.startswith("SDPA")), default=None)
    print(f"\nthe ceiling: {FLOPS / 1e9:.0f} GFLOP at this GPU's measured bf16 matmul rate, {peak_tflops:.0f} TFLOP/s: "
          f"{1e3 * FLOPS / (peak_tflops * 1e12):.3f} ms")
    for name, t in ms.items():
        against = f", {best / t:.2f} of the best SDPA backend's speed" if best else ""
        print(f"{name:<36} {t:.3f} ms = {tflops(t):4.0f} TFLOP/s = {tflops(t) / peak_tflops:.2f} of the ceiling{against}")


hopper_only("Notebook 05's kernel against SDPA and the ceiling", where_notebook_05_stands)

# %% [markdown] nbgrader={"grade": false, "grade_id": "inside-md", "locked": true, "schema_version": 3, "solution": false}
# ### Inside the kernel: the profiler, registers and spills, Nsight Compute
#
# Three views, from the cheapest to the most detailed.
#
# **torch.profiler** lists the GPU kernels a call runs and their times. SDPA's names tell which library kernel
# it chose (cuDNN's, FlashAttention's); yours shows the one Triton kernel you launched, and nothing else: no
# copy, no cast, no second pass.
#
# **The compiled kernel.** A Triton launch `kernel[grid](...)` returns the compiled kernel: `kernel.n_regs` is
# the number of registers each thread holds (ptxas's figure), `kernel.n_spills` how many of them did not fit
# and went to local memory, a load and a store each time they are used; `kernel.metadata.num_warps` and
# `kernel.metadata.shared` give its warps and shared memory. A thread may hold 255 registers; an SM has 64K of
# them, so 8 warps (256 threads) at 255 leave room for only one such program per SM. Registers are where
# FlashAttention keeps its accumulator (`BLOCK_M × D` floats) and its score tile (`BLOCK_M × BLOCK_N`), so the
# tile sizes decide them. The second cell reads them for every kernel your functions launch.
#
# **Nsight Compute** (`ncu`) replays one launch many times and reads the GPU's hardware counters: how busy the
# tensor pipe was (the fraction of cycles the tensor cores worked), how many warps were resident (occupancy), and
# for each reason a warp could not issue its next instruction (waiting on a barrier, on memory, on a busy pipe),
# how many cycles it waited. It profiles a program it starts, so the third cell writes a small script holding
# the cell where your `flash_attention` is defined and runs `ncu` on it. It needs `ncu` on the `PATH` (it comes
# with the CUDA toolkit) and a driver that lets your user read the counters; where either is missing the cell
# says which, in one line.

# %% nbgrader={"grade": false, "grade_id": "kernel-table", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def kernel_tables():
    q, k, v = qkv()
    for name, fn in {"your flash_attention": lambda: flash_attention(q, k, v),
                     "SDPA (its own choice)": lambda: F.scaled_dot_product_attention(q, k, v)}.items():
        try:
            rows = profiling.kernel_table(fn)
        except Exception as exc:  # noqa: BLE001  only a kernel not pasted yet is passed over
            if not not_written(exc):
                raise
            print(f"{name}: not profiled, paste your notebook-05 kernels first ({type(exc).__name__}: {exc})")
            continue
        print(f"{name}, three calls, the GPU kernels they ran:")
        for kernel, launches, total in rows[:6]:
            print(f"  {total / launches:8.3f} ms a launch, {launches} launches  {kernel[:110]}")


hopper_only("The profiler's table of kernels", kernel_tables)

# %% nbgrader={"grade": false, "grade_id": "registers", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def registers_and_spills():
    q, k, v = qkv()
    for name, fn in {"your flash_attention": lambda: flash_attention(q, k, v),
                     "your flash_attention_tma": lambda: flash_attention_tma(q, k, v)}.items():
        try:
            print_compiled(name, compiled(fn))
        except Exception as exc:  # noqa: BLE001  only a kernel not pasted yet is passed over
            if not not_written(exc):
                raise
            print(f"{name}: not pasted or not written yet ({type(exc).__name__}: {exc})")


hopper_only("Registers and spills", registers_and_spills)

# %% nbgrader={"grade": false, "grade_id": "nsight", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def nsight_compute():
    why = profiling.ncu_why_not()
    if why:
        print(f"Nsight Compute: skipped, {why}.")
        return
    fn = globals().get("flash_attention")
    source = profiling.cell_source(fn) if fn is not None else None
    if source is None:
        print("Nsight Compute: skipped, paste your notebook-05 flash_attention first (its cell is what ncu runs).")
        return
    q, k, v = qkv()
    names = [k.name for k in compiled(lambda: fn(q, k, v))] or ["attention"]  # the Triton kernel it launches
    metrics, said = profiling.run_ncu(profiling.attention_script(source, "flash_attention", SHAPE), names[0])
    print(said)
    for line in profiling.summary(metrics) if metrics else []:
        print(line)


hopper_only("Nsight Compute", nsight_compute)

# %% [markdown] nbgrader={"grade": false, "grade_id": "inside-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for. The profiler shows one kernel for your call, and for SDPA's the kernels of the backend it
# chose (their names say which). A kernel that spills at its launch setting pays for each spilled register in the loop with
# memory traffic: tiles that are too large for the warps that hold them. Nsight Compute's tensor pipe figure is
# the direct measure of the gap with SDPA: a kernel whose pipe is busy a fraction of the time, and whose warps
# spend their stalls waiting on barriers and on the results of loads, leaves the tensor cores idle while the
# softmax runs and while the next tiles arrive. The rest of this notebook is about hiding exactly that.

# %% [markdown] nbgrader={"grade": false, "grade_id": "tma-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. The copy engine (TMA), then settings tuned on your GPU
#
# In notebook 05's portable kernel every thread computes addresses and loads its share of each `K` and `V`
# tile; registers hold the pointers and the masks. Hopper's tensor memory accelerator (TMA) moves a whole tile
# from one request: a **descriptor** tells it the tensor's base, shape and strides once, a program asks for the
# tile at given coordinates, and the engine writes it to shared memory while the warps do other work. Rows past
# the tensor's edge come back as zeros, so no mask is needed on the load. The engine needs a 16-byte-aligned
# base, unit stride along the last dimension and the other strides multiples of 16 bytes (`tma_ready`).
#
# A descriptor can be made in two places.
#
# * **On the host**, as notebook 05's `flash_attention_tma` does (`TensorDescriptor.from_tensor`): one
#   descriptor of the whole `(B·H·N, D)` matrix, passed to the kernel as an argument. Its tile shape is fixed
#   when it is made, and building it costs host time at every call (why notebook 05 falls back to pointers for
#   short sequences). A tile that runs past one head's keys reads the next head's, which the kernel must mask.
# * **In the kernel**, with `tl.make_tensor_descriptor(base, shape, strides, block_shape)`: one descriptor per
#   head (its base `q_ptr + bh·N·D`, its shape `(N, D)`), so the engine pads past the head's end with zeros and
#   never reads a neighbour. Triton then needs global scratch memory for the descriptors (`triton.set_allocator`).
#   Warp specialization requires this form, for a reason section 3 gives.
#
# Then the settings. A tile of `BLOCK_M × BLOCK_N` scores, `num_stages` buffers of `K` and `V` in flight and
# `num_warps` warps decide registers, shared memory (`2·D·(BLOCK_M + 2·stages·BLOCK_N)` bytes in bf16, at most
# 227 KB a block) and how much is in flight; the best ones on one GPU are not the best on another. The cell
# below runs your `flash_attention_tma` at a handful of settings around notebook 05's, checks each against SDPA,
# times the right ones (a first ranking, one after the other) and keeps the fastest as `TUNED` for the plot of
# section 4.

# %% nbgrader={"grade": false, "grade_id": "tma-settings", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
TMA_TRY = ((128, 128, 3, 8), (128, 64, 3, 8), (128, 64, 2, 4), (128, 64, 3, 4), (64, 64, 3, 4), (64, 128, 2, 4),
           (128, 128, 2, 8))  # (BLOCK_M, BLOCK_N, num_stages, num_warps), notebook 05's first two leading
TUNED = None


def tune_tma():
    global TUNED
    fn = globals().get("flash_attention_tma")
    if fn is None or "settings" not in inspect.signature(fn).parameters:
        print("your flash_attention_tma is not pasted, or takes no settings argument: nothing to tune (the tuned "
              "step of section 4 is left out)")
        return
    q, k, v = qkv()
    ref = F.scaled_dot_product_attention(q, k, v)
    right = {}
    for bm, bn, stages, warps in TMA_TRY:
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_stages": stages, "num_warps": warps}
        name = f"{bm} x {bn}, {stages} stages, {warps} warps"
        try:
            err = largest_error(fn(q, k, v, False, (cfg,))[0], ref)
            figures = compiled(lambda cfg=cfg: fn(q, k, v, False, (cfg,)))
        except Exception as exc:  # noqa: BLE001  a setting this GPU cannot hold is named and passed over
            if not_written(exc):
                print(f"your flash_attention_tma is not written yet ({type(exc).__name__}): nothing to tune")
                return
            print(f"{name:<28} did not compile or run here: {type(exc).__name__}: {str(exc).strip()[:120]}")
            continue
        if err > 3e-2:
            print(f"{name:<28} wrong: largest error {err:.2g} (not timed)")
            continue
        ms = bench_ms(lambda cfg=cfg: fn(q, k, v, False, (cfg,)))
        right[name] = (ms, cfg)
        regs = ", ".join(f"{f.n_regs} registers, {f.n_spills} spilled" for f in figures)
        print(f"{name:<28} {ms:.3f} ms = {tflops(ms):4.0f} TFLOP/s ({regs})")
    if right:
        best = min(right, key=lambda n: right[n][0])
        TUNED = right[best][1]
        print(f"\nfastest here: {best}, kept as TUNED")


hopper_only("Tuning your TMA kernel's settings", tune_tma)

# %% [markdown] nbgrader={"grade": false, "grade_id": "tma-discuss-md", "locked": true, "schema_version": 3, "solution": false}
# What to look for: the settings that spill are seldom the fastest, and the fastest differ between head sizes and
# between GPUs (an H100 and an H200 have the same multiprocessors but not the same memory). A setting that fails
# to compile asked for more shared memory than a block may have. Tuning moves a kernel as far as your table
# shows and no further; the schedule of its loop, the subject of the next section, is what the rest is made of.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ws-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Warp specialization, ping-pong and persistent scheduling
#
# Hopper's matrix instructions (`wgmma`) are issued by a **warp group**, four warps, and run asynchronously:
# the warps can do other work until they need the result. The copy engine is asynchronous too. A kernel whose
# warps all do everything (diagram, A) still serializes within each warp: issue the copies for the next tiles,
# wait for this tile's, multiply, compute the softmax, multiply again; software pipelining (`num_stages`) keeps
# copies in flight, but the same warps issue them, hold their registers and stall when one is late.
#
# **Warp specialization** gives the jobs to different warp groups (B). A **producer** group only asks the copy
# engine for `K` and `V` tiles, into a ring of `num_stages` shared-memory buffers, and waits on barriers for a
# buffer to be free; **consumer** groups only compute, each on its share of the query rows, and wait on barriers
# for a tile to land. The producer needs few registers, so the consumers can have more (Hopper lets a kernel move
# registers between warp groups as it runs).
#
# **Ping-pong** (C) orders the two consumers so that one computes its softmax while the other's matrix products
# run: the tensor cores, shared by every warp of the SM, never wait for an exponential. FlashAttention-3 and
# cuDNN's Hopper kernels are built this way, and so are CUTLASS's ping-pong GEMMs.
#
# ![](figures/warp_schedules.svg)
#
# **Persistent scheduling** launches one program per multiprocessor, each looping over many output tiles,
# instead of one program per tile. It saves a launch and a prologue per tile and, with a producer group, lets
# the next tile's loads start while the last tile's output is stored; it does not remove the tail of a partial
# last wave, which the order of the tiles (longest first, as notebook 05's causal TMA kernel does) shortens.
#
# ![](figures/persistent_schedule.svg)
#
# **What upstream Triton lets you ask for.** In Triton 3.6 and 3.7 the one knob is a flag on a loop,
# `for start in tl.range(0, end, BLOCK_N, warp_specialize=True)`: the compiler's Hopper pass splits that loop
# into a producer group and two consumer groups that share the query tile (schedule B, 12 warps), and chooses
# the barriers and buffers itself. It does so only when
# * the kernel is launched with `num_warps=4` (with 8 the flag is accepted and silently ignored: the kernel
#   compiles as if it were not there);
# * every load the loop schedules goes through a TMA descriptor, `Q`'s included, and `Q`'s descriptor is made in
#   the kernel (the pass re-blocks it for the two consumers; a host descriptor's tile is fixed);
# * the loop is the kernel's only loop, with nothing loaded after it: notebook 05's two loops (tiles wholly
#   visible, then those on the diagonal under a mask) are refused, so the mask is applied to every tile.
#
# It offers no control over the consumers' order (no ping-pong), over how registers are split between the
# groups, or over a persistent loop around the key loop. Those live in **Gluon**
# (`triton.experimental.gluon`), Triton's lower-level language, where a kernel names its warp partitions
# (`gl.warp_specialize`, with the warps and registers of each), its shared-memory buffers and its barriers
# (`mbarrier`), and issues `wgmma` and TMA copies itself: the schedule is written by hand, as in CUDA. Whether
# the flag pays on your GPU is what section 4 measures.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ws-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 08.flash_attention_ws · warp-specialize your forward kernel (about 2 to 3 hours · ★★★ · optional, 0 points)
#
# **Spec.** `flash_attention_ws(q, k, v, causal=False, settings=None, warmup=False) -> (o, lse)`: notebook 05's
# op (`o = softmax(q·kᵀ / √D) · v` of shape `(B, H, N, D)` in `q`'s dtype; `lse (B, H, N)` float32). Where it
# applies (a Hopper GPU; `q`, `k`, `v` 16-bit and `tma_ready`; `D ≤ 128`) it launches **one** kernel,
# `_flash_attention_ws_kernel`, one program per (query block, batch × head), whose key loop is
# `tl.range(0, end, BLOCK_N, warp_specialize=WARP_SPECIALIZE)`; anywhere else it returns your notebook-05
# `flash_attention(q, k, v, causal)`. `settings`: dicts of `BLOCK_M`, `BLOCK_N`, `WARP_SPECIALIZE`, `num_warps`,
# `num_stages` to try in order (`None`: your own list). `warmup=True` compiles the first setting without running
# it and returns Triton's compiled kernel.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The algorithm is notebook 05's; what changes is who loads. With `warp_specialize=True` Triton splits the key
# loop between a producer warp that issues the copies and consumer warp groups that compute, so the loop must be
# one the compiler can split: its loads through descriptors, one loop, the mask inside it.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Start from notebook 05's TMA kernel. Make the three descriptors in the kernel, each over one head's rows. With
# a causal mask, launch the last query blocks first and stop the loop at the diagonal; apply the mask
# (`MASKED`: causal, or keys not a multiple of `BLOCK_N`) inside the one loop. The launcher checks where the
# kernel applies and falls back otherwise.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# `acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])` lets the product accumulate into the rescaled `acc`.
# `first_that_compiles` (imported in the cell) tries settings in order and skips one this Triton refuses.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Try 64 × 128 tiles and two stages first; the last measuring cell of section 4 shows what the others do on your
# GPU.
#
# </details>
#
# **Graded.** On a Hopper GPU, 0 points, for feedback: contiguous 16-bit cases through your warp-specialized
# kernel, float32 and one strided layout through your fallback.
#
# <!-- graded: 08.flash_attention_ws -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention_ws", "locked": false, "schema_version": 3, "solution": true}
# Helpers your kernel and launcher call (the settings, where the kernel applies, the allocator for descriptors
# made in a kernel, the launch) go here; or write everything inside the two functions below.
from kernels.tma import first_that_compiles, hopper_or_newer, tma_ready

### BEGIN SOLUTION
# include: kernels/flash_attention_ws.py (WS_SETTINGS, MAX_HEAD_DIM, ws_applies, _scratch, _launch_attention_ws)
### END SOLUTION


@triton.jit
def _flash_attention_ws_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, N, N_KV, qk_scale, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                               MASKED: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """One program computes o for BLOCK_M queries of one (batch, head), and their log-sum-exp, in one key loop that
    Triton warp-specializes when WARP_SPECIALIZE is set (and num_warps is 4).

    q (B, H, N, D), k and v (B, H, N_KV, D), o like q: contiguous, 16-bit; lse (B, H, N) float32. qk_scale =
    log2(e) / sqrt(D). MASKED: causal, or N_KV not a multiple of BLOCK_N. Grid (cdiv(N, BLOCK_M), B * H)."""
    # block_m = (last first when CAUSAL); bh = tl.program_id(1).to(tl.int64)
    # q_desc = tl.make_tensor_descriptor(q_ptr + bh * N * HEAD_DIM, shape=[N, HEAD_DIM], strides=[HEAD_DIM, 1],
    #                                    block_shape=[BLOCK_M, HEAD_DIM])      # k_desc, v_desc over N_KV rows
    # q = q_desc.load([block_m * BLOCK_M, 0]); m_i, l_i, acc as in notebook 05
    # for start in tl.range(0, end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):   # end: the diagonal when CAUSAL
    #     ...  # s = q kᵀ from k_desc.load([start, 0]); the mask if MASKED; the online step; acc += p v
    # ...  # store o = acc / l_i and lse (rows past N masked)
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_ws.py (_flash_attention_ws_kernel)
    ### END SOLUTION


def flash_attention_ws(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       settings: tuple | None = None, warmup: bool = False):
    """(o, lse) as flash_attention returns them, from the warp-specialized kernel where it applies and from your
    notebook-05 flash_attention elsewhere. settings: launch settings to try in order (None: your own). warmup=True
    compiles the first setting without running it and returns the compiled kernel."""
    # 1. check the inputs as flash_attention does
    # 2. where the kernel applies (Hopper, 16-bit, contiguous, tma_ready, D <= 128): o and lse; set Triton's
    #    allocator; launch, trying the settings in order (first_that_compiles); return o, lse
    #    (warmup: _flash_attention_ws_kernel.warmup(..., grid=grid, ...) of the first setting, returned)
    # 3. anywhere else: return flash_attention(q, k, v, causal)
    ### BEGIN SOLUTION
    # include body: kernels/flash_attention_ws.py (flash_attention_ws)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "flash_attention_ws-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("08.flash_attention_ws", flash_attention_ws)

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_ws_correctness", "locked": true, "points": 0, "schema_version": 3, "solution": false}
check("08.flash_attention_ws", flash_attention_ws, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_ws_precision", "locked": true, "points": 0, "schema_version": 3, "solution": false}
check("08.flash_attention_ws", flash_attention_ws, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_ws_performance", "locked": true, "points": 0, "schema_version": 3, "solution": false}
check("08.flash_attention_ws", flash_attention_ws, criteria=["performance"]).assert_passed("performance")

# %% [markdown] nbgrader={"grade": false, "grade_id": "steps-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. Every step on one plot
#
# The cell below runs each step once at notebook 05's shape (bf16, not causal), checks it against SDPA's
# output, then times the right ones in turns with SDPA's backends (a GPU that heats up lowers its clocks, and
# taking turns gives every version the same mix of clock states):
#
# 1. your notebook-05 `flash_attention` (pointer loads);
# 2. your `flash_attention_tma` (host descriptors) at its own settings;
# 3. the same at `TUNED`, the fastest setting section 2 found on this GPU;
# 4. your `flash_attention_ws` at its own settings.
#
# On the left, TFLOP/s, with the cost model's FLOP-bound ceiling (the flops at this GPU's measured matmul rate)
# and SDPA's best backend drawn across; on the right, the fraction of the best SDPA backend's speed, with the
# ceiling's. Under each step, what its kernel compiled to.

# %% nbgrader={"grade": false, "grade_id": "steps", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
def steps_plot():
    q, k, v = qkv()
    ref = F.scaled_dot_product_attention(q, k, v)
    tuned = globals().get("TUNED")
    steps = {"1. notebook 05 (pointers)": lambda: flash_attention(q, k, v),
             "2. TMA descriptors": lambda: flash_attention_tma(q, k, v)}
    if tuned:
        steps["3. TMA, tuned settings"] = lambda: flash_attention_tma(q, k, v, False, (tuned,))
    else:
        print("3. TMA, tuned settings: left out (run the tuning cell of section 2 first)")
    steps["4. warp-specialized (yours)"] = lambda: flash_attention_ws(q, k, v)
    runnable = written_versions(steps, "the steps")
    for name in list(runnable):
        err = largest_error(runnable[name]()[0], ref)
        if err > 3e-2:
            print(f"{name}: wrong, largest error {err:.2g} against SDPA: left out of the plot")
            del runnable[name]
    sdpa = {name: (lambda f=f: f(q, k, v)) for name, f in sdpa_versions().items()}
    ms = bench_interleaved({**runnable, **written_versions(sdpa, "SDPA's backends")}, rounds=3)
    sdpa_ms = {n: t for n, t in ms.items() if n.startswith("SDPA")}
    best_name = min(sdpa_ms, key=sdpa_ms.get) if sdpa_ms else None
    best_tf = tflops(sdpa_ms[best_name]) if best_name else None
    names = [n for n in ms if not n.startswith("SDPA")]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.6))
    ax.bar(range(len(names)), [tflops(ms[n]) for n in names], color="C0")
    ax.axhline(peak_tflops, color="k", ls="--", label=f"ceiling: the flops at the measured matmul rate ({peak_tflops:.0f})")
    if best_tf:
        ax.axhline(best_tf, color="C3", ls=":", label=f"best SDPA backend: {best_name} ({best_tf:.0f})")
    ax.set_ylabel("TFLOP/s")
    if best_tf:
        bx.bar(range(len(names)), [sdpa_ms[best_name] / ms[n] for n in names], color="C0")
        bx.axhline(1.0, color="C3", ls=":", label=f"{best_name}")
        bx.axhline(peak_tflops / best_tf, color="k", ls="--", label="ceiling")
        bx.set_ylabel("fraction of the best SDPA backend's speed")
    for a in (ax, bx):
        a.set_xticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=8)
        a.grid(True, axis="y", alpha=0.3)
        a.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{SHAPE} bf16, not causal: {peak_label}")
    plt.tight_layout()
    plt.show()
    for name in names:
        against = f" = {sdpa_ms[best_name] / ms[name]:.2f} of {best_name}" if best_name else ""
        print(f"{name:<30} {ms[name]:.3f} ms, {tflops(ms[name]):4.0f} TFLOP/s{against}")
        print_compiled("    ", compiled(steps[name]))
    for name, t in sdpa_ms.items():
        print(f"{name:<30} {t:.3f} ms, {tflops(t):4.0f} TFLOP/s")


hopper_only("The steps from notebook 05 to warp specialization", steps_plot)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ws-settings-md", "locked": true, "schema_version": 3, "solution": false}
# ### What the flag did to your kernel, setting by setting
#
# The cell below runs your `flash_attention_ws` at each warp-specialized setting that fits in shared memory at
# this head size, and at two settings with the flag off and 8 warps (the same loop, no producer group): for
# each, whether the compiled kernel was warp-specialized and with how many warps, whether its result is right,
# and, when it is, its time. It runs last because a setting the compiler gets wrong can also leave the GPU
# unusable for this process; if that happens, restart the kernel.

# %% nbgrader={"grade": false, "grade_id": "ws-settings", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
WS_TRY = tuple({"BLOCK_M": bm, "BLOCK_N": bn, "num_stages": s, "num_warps": w, "WARP_SPECIALIZE": ws}
               for bm, bn, s, w, ws in ((64, 128, 2, 4, True), (128, 128, 2, 4, True), (128, 64, 2, 4, True),
                                        (128, 64, 3, 4, True), (64, 64, 3, 4, True), (128, 128, 2, 8, False),
                                        (128, 64, 3, 8, False)))


def ws_settings():
    q, k, v = qkv()
    ref = F.scaled_dot_product_attention(q, k, v)
    for cfg in WS_TRY:
        name = (f"{cfg['BLOCK_M']} x {cfg['BLOCK_N']}, {cfg['num_stages']} stages, {cfg['num_warps']} warps, "
                f"flag {'on' if cfg['WARP_SPECIALIZE'] else 'off'}")
        try:
            err = largest_error(flash_attention_ws(q, k, v, False, (cfg,))[0], ref)
            figures = compiled(lambda cfg=cfg: flash_attention_ws(q, k, v, False, (cfg,)))
        except Exception as exc:  # noqa: BLE001  a setting this GPU cannot hold is named and passed over
            if not_written(exc):
                print(f"flash_attention_ws is not written yet ({type(exc).__name__}): nothing to try")
                return
            print(f"{name:<46} did not compile or run here: {type(exc).__name__}: {str(exc).strip()[:120]}")
            continue
        split = any(f.warp_specialized for f in figures)
        warps = max((f.num_warps for f in figures), default=0)
        built = f"{'warp-specialized' if split else 'not specialized'}, {warps} warps"
        regs = ", ".join(f"{f.n_regs} registers, {f.n_spills} spilled" for f in figures)
        if err > 3e-2:
            print(f"{name:<46} {built}: WRONG, largest error {err:.2g}")
            continue
        ms = bench_ms(lambda cfg=cfg: flash_attention_ws(q, k, v, False, (cfg,)))
        print(f"{name:<46} {built}: right, {ms:.3f} ms = {tflops(ms):4.0f} TFLOP/s, {regs}")


hopper_only("Your warp-specialized kernel at each setting", ws_settings)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ceiling-found-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. Where the ceiling was found
#
# Read your two cells above together. The flag builds schedule B, and on Hopper that is not enough: both
# consumers run their softmax at the same time, so the tensor cores wait exactly as they did in one warp group,
# and the producer's barriers add work of their own. If your step 4 sits below steps 2 and 3, that is what you
# measured; a setting whose result is wrong with the flag on and right with it off is the compiler's schedule,
# not your algorithm. The course measured the same on an H200 with Triton 3.6 (the Benchmarks page of the
# documentation, [docs/benchmarks.md](../../docs/benchmarks.md), its section on how far Triton gets on Hopper,
# lists every warp-specialized setting its sweep compiled, right or wrong, with its time against SDPA's best
# backend): its warp-specialized kernel was slower than its plain TMA kernel, and the best Triton kernel of
# each shape, the TMA one or notebook 05's, stayed below SDPA's best backend at heads of 128 dimensions. That
# is the ceiling the course found with upstream Triton: not the hardware's, which SDPA shows is higher, but the
# schedule a kernel can ask Triton for.
#
# **Why some settings come back wrong.** Nothing in the documentation of `tl.range` rules the kernel out: the
# flag asks the compiler to split the loop, and the loop meets every condition listed in section 3. The record
# upstream points at the compiler. Hopper's warp specialization is a pass (`NVGPUWarpSpecialization`) that Triton
# took from Meta's automatic warp specialization in mid-2025 (triton-lang/triton pull request 7136) and switched
# on for a few of its tests (pull requests 7623 and 7658: the tutorial's attention, not causal, with descriptors
# made in the kernel and no sub-tiling). Wrong results from the flag on another kernel were reported in September
# 2025 and are open (issue 8311, a matrix product that mixes pointer and descriptor loads), beside failures of the
# same pass to compile (issues 8260, 9728, 11587). The course saw wrong results from Triton 3.6 on an H100 at six
# of the eight settings it tried, and `python -m bench.ws_repro` in the course's repository reproduces them with
# one loop in about sixty lines. On an H200 with Triton 3.6 that script found 22 of the 30 warp-specialized
# settings that compiled wrong (not a number at every setting with three pipeline stages; errors of half the
# result's largest value or more with query tiles of 128 rows), and all 32 without the flag right: only tiles of
# 64 rows with two stages came back right with it (`bench/results/hopper/ws-repro-nvidia-h200.json`). The same loop, the same
# inputs, right without the flag and wrong with it: a compiler defect, in the releases that carry the Hopper pass
# (3.4 to 3.6 at least), not a misuse; the course's kernel takes only a setting it has checked (`WS_SETTINGS`), and
# every cell above compares each setting's result with SDPA's before it times it.
#
# The rest of the gap is the part of FlashAttention-3 that upstream Triton's flag cannot express: the consumers
# in ping-pong, the softmax of one tile overlapped with the products of the next inside one warp group, and
# registers moved from the producer to the consumers. Gluon can express all three, written by hand, warp group by
# warp group; so can CUDA with CUTLASS. That is where a next step would go, and it is no longer a one-flag change.
#
# ## What to take away
#
# * On Hopper the time of attention is the tensor cores' time, and what a kernel controls is how much of it they
#   spend waiting: for tiles (the copy engine and a producer warp group hide that) and for the softmax (only an
#   explicit schedule such as ping-pong hides that).
# * Measure before and after every step, against a real mark (SDPA's best backend) and the cost model's
#   ceiling, and look inside: registers and spills from the compiled kernel, tensor pipe and stalls from Nsight
#   Compute.
# * A compiler flag is a request. Check that the compiled kernel did what you asked (warps, a
#   `ttg.warp_specialize` region, registers) and that its results are still right.
#
# ## Further reading
#
# * Shah et al., *FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision* (2024):
#   https://arxiv.org/abs/2407.08608
# * Triton's `tl.range` and its `warp_specialize` argument:
#   https://triton-lang.org/main/python-api/generated/triton.language.range.html
# * Gluon's tutorials, warp specialization among them:
#   https://triton-lang.org/main/getting-started/tutorials/gluon/warp-specialization.html
# * NVIDIA's Hopper tuning guide: https://docs.nvidia.com/cuda/hopper-tuning-guide/
# * Nsight Compute's kernel profiling guide (sections, metrics, stall reasons):
#   https://docs.nvidia.com/nsight-compute/ProfilingGuide/
