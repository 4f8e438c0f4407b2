# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (fusion course)
#     language: python
#     name: fusion-course
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # 02 · Vertical fusion: normalisations and precision discipline
#
# About 6 hours · difficulty ★★☆ · prerequisites: notebook 01 (the HBM cost model, your first Triton kernel)
#
# Notebook 01 fused a chain of elementwise operations: every output element needed only its own input
# element. A normalisation breaks that: each output element needs a **statistic of its whole row** (the
# root mean square, or a mean and a variance) before it can be written. This notebook fuses across that
# dependency.
#
# You will
# 1. learn which producer → consumer pairs fuse, and what a reduction in the middle demands;
# 2. predict RMSNorm's traffic three ways (unfused, two passes, one pass), write the one-pass kernel, and time
#    yours against the other two;
# 3. see why LayerNorm's variance must not be computed as `E[x²] − E[x]²` in fp32;
# 4. watch a low-precision accumulator's error grow like `√H`, next to your kernel's flat fp32 one;
# 5. write fused **RMSNorm**, **add + RMSNorm** and **LayerNorm** kernels, **repair** a kernel with a
#    precision bug, and (stretch) write RMSNorm's **backward** pass, all graded on correctness, precision,
#    measured bandwidth and fusion, each timed against the bytes you predicted for it;
# 6. see why a single token's RMSNorm (the decode shape) is all launch overhead, and how a CUDA graph removes it;
# 7. fuse **dropout** into add + RMSNorm, its mask drawn in the kernel from a seed and never stored.
#
# | exercise | time | difficulty | points |
# |---|---|---|---|
# | 02.predict_rmsnorm_bytes | 10 min | ★☆☆ | 2 |
# | 02.rmsnorm | 45 min | ★★☆ | 10 |
# | 02.add_rmsnorm (and its byte prediction) | 25 min | ★☆☆ | 7 + 1 |
# | 02.layernorm (and its byte prediction) | 50 min | ★★☆ | 10 + 1 |
# | 02.rmsnorm_repair (and its byte prediction) | 25 min | ★☆☆ | 5 + 1 |
# | 02.rmsnorm_backward (stretch; and its byte prediction) | 95 min | ★★★ | 12 + 1 |
# | 02.dropout_add_rmsnorm (and its byte prediction) | 45 min | ★★☆ | 8 + 1 |
# | seven written questions | 45 min | ★☆☆ | 7 |
#
# Without a GPU, kernels run in Triton's interpreter: graded for correctness there, not for speed.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import autograder  # first: picks GPU or interpreter before any kernel is defined
import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from autograder import check, runtime
from autograder.specs import fused_dropout
from autograder.specs import vertical_fusion
from autograder.teach.plots import bars_against_model, peaks, print_against_model
from autograder.teach.programs import ProgramsUnavailable, draw_programs
from autograder.measure.timing import bench_versions, not_written
from kernels import rmsnorm_variants

profile = autograder.device_profile()
print(profile.describe())
ON_GPU = runtime.has_gpu()
DEVICE = runtime.device()

# %% [markdown] nbgrader={"grade": false, "grade_id": "rules-md", "locked": true, "schema_version": 3, "solution": false}
# ## 1. What fuses with what
#
# Vertical (producer → consumer) fusion keeps the producer's output in registers and hands it straight to
# the consumer. Whether that is possible depends on how the consumer reads what the producer wrote:
#
# | producer → consumer | example | fuses? |
# |---|---|---|
# | pointwise → pointwise | `silu(x + b)` | always: element *i* needs element *i* |
# | pointwise → reduction | `sum(x * x)` | yes: square each element as it is loaded, add it to the running sum |
# | reduction → pointwise (broadcast) | `x * rsqrt(mean(x²) + eps)` | only once the statistic is known: every element of the row waits for the whole row |
#
# The third row is the normalisation pattern. A kernel can meet it in two ways. **Two passes**: read the row
# once to compute the statistic, then read it again to normalise and store (3 trips of the row through HBM
# if the second read misses the cache). **One pass**: keep the whole row in registers, reduce, then
# normalise the registers and store (2 trips: the floor).
#
# Where does a row live while a program works on it? A GPU is made of **SMs** (streaming multiprocessors:
# an H100 has 132), each running many programs at once. A Triton program runs on one SM as a few **warps**,
# groups of 32 threads that execute the same instruction together; each thread has its own **registers**,
# the fastest storage there is (an SM has 256 KiB of them). A row of 4096 values spread over 8 warps is 16
# values a thread: it fits. Rows of a few thousand elements fit in one program's registers, which is why one
# pass is the usual answer for RMSNorm and LayerNorm in transformers (the [glossary](../../docs/glossary.md)
# has these terms and more).
#
# Eager PyTorch pays more: a straightforward RMSNorm is three full-size kernels (the norm of each row; `x`
# times the inverse RMS; times the weight), about `5|x|` of traffic.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rms3-md", "locked": true, "schema_version": 3, "solution": false}
# ## 2. RMSNorm three ways
#
# `y = x / sqrt(mean(x²) + eps) · w`, for `x` of 32768 × 4096 in bf16 (256 MiB). Three versions:
#
# | version | kernels | what each kernel reads and writes |
# |---|---|---|
# | eager (`autograder/specs/vertical_fusion.py: rmsnorm_eager`) | 3 | the norm of each row; `x · rstd` into a temporary; the temporary times `w` into `y` |
# | fused, two passes (`kernels/rmsnorm_variants.py: rmsnorm_two_pass`) | 1 | `x` for the statistic, `x` again to normalise, `y` |
# | fused, one pass (`rmsnorm`, your exercise below) | 1 | `x` once into registers, `y` |
#
# Before anything is timed, count the bytes.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_rmsnorm_bytes · Predict RMSNorm's traffic   (about 10 min · ★☆☆)
#
# **Spec.** `predicted_rmsnorm_bytes(rows, cols, elem_bytes) -> (eager, two_pass, one_pass)`: the bytes each
# version of the table above moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an
# element, as three integers. Count only tensors of `x`'s size (the weight is one row: negligible), and assume
# every read misses the cache.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Write `|x| = rows · cols · elem_bytes` first: each version is a small multiple of it.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Go down the table kernel by kernel and count the x-sized tensors each one reads and writes: a read and a
# write are one trip each. Sum the trips per version and return three integers, `(eager, two_pass, one_pass)`.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_rmsnorm_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_rmsnorm_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_rmsnorm_bytes(rows: int, cols: int, elem_bytes: int) -> tuple[int, int, int]:
    """HBM bytes of (eager, two-pass, one-pass) RMSNorm of x (rows, cols), x-sized tensors only."""
    ### BEGIN SOLUTION
    x = rows * cols * elem_bytes
    return 5 * x, 3 * x, 2 * x  # eager: read x; read x, write t; read t, write y
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_rmsnorm_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.predict_rmsnorm_bytes", predicted_rmsnorm_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "rmsnorm-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.rmsnorm · RMSNorm in one kernel   (about 45 min · ★★☆)
#
# **Spec.** `rmsnorm(x, weight, eps) -> y`: `x` of shape `(M, H)` in float32, float16 or bfloat16, `H` from 1 to
# 16384 (any value, not only powers of two); the last dimension is contiguous, but rows may be further apart
# in memory than `H` (use `x.stride(0)`, the number of elements between the starts of two rows). `weight` has
# shape `(H,)`, `eps` is a float. Returns a new `(M, H)` tensor of `x`'s dtype, `y = x / sqrt(mean(x²) + eps) ·
# weight`, computed by **one** kernel launch: one program per row, the row held in registers (one read of `x`,
# one write of `y`), the statistic in float32.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# One program owns one row and holds all of it at once: a block as wide as the row, rounded up to a power of
# two, with the lanes past `H` switched off by a mask.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `BLOCK_H = triton.next_power_of_2(H)` covers the row. In the kernel: the row index, `cols = tl.arange(0,
# BLOCK_H)` and `mask = cols < H`; one masked load of the row, upcast to float32; `tl.sum(v, axis=0)` reduces a
# block to a scalar; then one masked load of the weight and one masked store.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Load with `other=0.0` so the padding lanes add nothing to the sum of squares, but divide by `H`, not by
# `BLOCK_H`. Make the row index int64 (`tl.program_id(0).to(tl.int64)`) before multiplying by the stride, pass
# `x.stride(0)` and `y.stride(0)` separately, and cast to `y_ptr.dtype.element_ty` at the store.
#
# </details>
# <details><summary>Make it fast</summary>
#
# About 16 values a thread is a good start: `num_warps = BLOCK_H // 512`, at least 1 and at most 16.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.rmsnorm -->

# %% nbgrader={"grade": false, "grade_id": "rmsnorm", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    """One program normalises one row: row tl.program_id(0) of x (H values, rows stride_xm elements apart) into
    the same row of y (stride_ym apart), with weight w (H,). BLOCK_H is a power of two >= H."""
    # 1. which row is mine: tl.program_id(0) (as int64, so row * stride cannot overflow); the column offsets
    #    0 .. BLOCK_H - 1 and a mask for the tail past H
    # 2. load the row (masked, padding 0) and upcast to float32
    # 3. the statistic: rstd = 1 / sqrt(sum(x * x) / H + eps), in float32
    # 4. load the weight (masked), multiply, cast to y's dtype (y_ptr.dtype.element_ty) and store (masked)
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm.py (_rmsnorm_kernel)
    ### END SOLUTION


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight for x (M, H), H <= 16384, rows possibly strided (x.stride(1) == 1).
    Returns a new (M, H) tensor of x's dtype, from one launch of _rmsnorm_kernel."""
    # 1. check the shapes: x 2-D with a contiguous last dimension, weight (H,), H <= 16384
    # 2. allocate y (M, H) of x's dtype (torch.empty: the kernel writes every element)
    # 3. choose BLOCK_H (a power of two >= H) and num_warps
    # 4. launch one program per row: _rmsnorm_kernel[(M,)](...), passing both row strides; return y
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm.py (rmsnorm)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "rmsnorm-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("02.rmsnorm", rmsnorm)

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.rmsnorm", rmsnorm, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.rmsnorm", rmsnorm, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.rmsnorm", rmsnorm, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.rmsnorm", rmsnorm, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "rmsnorm-ref-run", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** The course's one-pass kernel (8 warps a row at H = 4096, 16 values a thread) reached 0.97
# of copy bandwidth on an H200 and 0.99 on an H100; `F.rms_norm` 0.81 and `torch.compile` 0.87 on the H200. A
# correct two-pass kernel reached 0.70 (H100) and 0.80 (H200), unfused eager 0.17-0.22 (torch 2.11, triton 3.6).

# %% [markdown] nbgrader={"grade": false, "grade_id": "programs-md", "locked": true, "schema_version": 3, "solution": false}
# ### One program per row, drawn
#
# ![](figures/rmsnorm_row_program.svg)
#
# The cell below runs your `_rmsnorm_kernel` on a launch small enough to look at (3 rows of 6 values, a block of
# 8) in Triton's interpreter, and draws which elements each program loaded and stored. Each row of `x` and of
# `y` should be one colour; the weight, read by every program, is striped in all three; the lanes past `H` are
# masked off (drawn hatched where they point past the tensor's end); and no cell is red (an access outside the
# tensor).

# %% nbgrader={"grade": false, "grade_id": "programs", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
x_small = torch.randn(3, 6)
w_small = torch.ones(6)
y_small = torch.empty(3, 6)
try:
    draw_programs(_rmsnorm_kernel, (3,), x_small, w_small, y_small, 6, 6, 6, 1e-5, BLOCK_H=8)
    plt.show()
except ProgramsUnavailable as exc:  # a GPU machine's Triton cannot interpret its library's reductions
    print(f"not drawn here: {exc}")
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print(f"your _rmsnorm_kernel: not written yet ({type(exc).__name__}); nothing to draw")

# %% nbgrader={"grade": false, "grade_id": "measure-helper", "locked": true, "schema_version": 3, "solution": false}
def time_against_model(versions: dict, model_bytes: dict, n_bytes: float, title: str, size: str) -> dict:
    """Time each version (a name -> a function of no arguments) on this GPU and draw its time against the model,
    bytes / copy bandwidth, for the versions model_bytes gives bytes for; print each one's effective bandwidth
    over n_bytes, the op's fewest bytes. Without a GPU nothing is timed (the interpreter's times say nothing
    about a GPU): the model alone is drawn, and the title says so. Returns {name: measured ms}."""
    bw, _, label = peaks(profile)
    model_ms = {name: b / (bw * 1e6) for name, b in model_bytes.items()}
    measured = bench_versions(versions, desc=f"timing {title}") if ON_GPU else {}
    if not ON_GPU:
        print(f"No GPU here: {title} is not timed (Triton's interpreter runs on the CPU); the bars are the model only.")
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.45 * max(len(measured), len(model_ms))))
    names = bars_against_model(ax, measured, model_ms, f"ms ({size})", f"{title}, {label}", ON_GPU)
    plt.show()
    print_against_model(names, measured, model_ms, n_bytes, bw)
    return measured


def your_prediction(predict, exercise, *args) -> int:
    """predict(), your prediction; while it is not written yet, the grader's model for it (the line says so)."""
    try:
        return predict()
    except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
        if not not_written(exc):
            raise
        print(f"{exercise.function} is not written yet: the grader's model stands in for it")
        return exercise.reference(*args)


M, H, EPS = 32768, 4096, 1e-5  # the training shape every measurement below uses, in bf16

# %% [markdown] nbgrader={"grade": false, "grade_id": "rms3-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernel against your prediction
#
# The cell below turns your byte counts into times at this GPU's measured copy bandwidth (`bytes / bandwidth`),
# times your `rmsnorm` next to the eager version, the two-pass kernel, `F.rms_norm` and `torch.compile`, and
# draws each time against its prediction (a dashed tick). Without a GPU it draws the predictions alone; until
# your kernel runs, it is left out and the cell says so.

# %% nbgrader={"grade": false, "grade_id": "rms3-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
x_bytes = M * H * 2
predicted_bytes = your_prediction(lambda: predicted_rmsnorm_bytes(M, H, 2), vertical_fusion.PREDICT_RMSNORM_BYTES, M, H, 2)
labels = ("eager (3 kernels)", "two-pass Triton", "your one-pass kernel")
versions = {}
if ON_GPU:
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(vertical_fusion.rmsnorm_eager)
    versions = {
        "eager (3 kernels)": lambda: vertical_fusion.rmsnorm_eager(x, w, EPS),
        "two-pass Triton": lambda: rmsnorm_variants.rmsnorm_two_pass(x, w, EPS),
        "your one-pass kernel": lambda: rmsnorm(x, w, EPS),  # left out until it is written
        "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (H,), w, EPS),
        "torch.compile": lambda: compiled(x, w, EPS),
    }
time_against_model(versions, dict(zip(labels, predicted_bytes)), 2 * x_bytes, "RMSNorm", "32768 x 4096 bf16")
versions.clear()
x = None  # its 256 MiB go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "rms3-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for: your one-pass kernel should land close to its line, at the copy bandwidth; if it sits
# well above, compare its effective GB/s with the copy bandwidth printed above. Eager PyTorch lands above even
# its 5|x| line: the model assumes every kernel streams at the copy bandwidth, and not all of PyTorch's generic
# kernels do (time the three of them separately to find the slow one). The model is a floor for a given amount
# of traffic. And the two-pass kernel? Look at its bar, then answer the question below.

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-two-pass-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** The two-pass kernel reads every row twice, yet on a GPU it usually beats its `3|x|`
# prediction. Why? Would it still, for rows of 16384 float32 values and a GPU with a small L2 cache?
# (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-two-pass", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# A row of 4096 bf16 values is 8 KiB, and the second read comes right after the first, while the program is
# still on that row: it finds the row in L2 (tens of MB on an H100/H200), so most of the second pass never
# reaches HBM, and the traffic is closer to 2|x| than 3|x|. The model counts HBM trips assuming every read misses;
# a cache can only make things better. With 64 KiB rows and many programs in flight on a small L2, rows are
# evicted before the second read and the kernel moves toward its 3|x| line.

# %% [markdown] nbgrader={"grade": false, "grade_id": "decode-md", "locked": true, "schema_version": 3, "solution": false}
# ### The decode shape: 1 × 4096
#
# Training normalises 32768 rows at a time; a model generating text normalises **one** token's row per step.
# At 1 × 4096 in bf16 the kernel moves 24 KiB: at a few TB/s that is about ten **nano**seconds of HBM traffic.
# But every launch from Python costs the host **micro**seconds (notebook 01's cost model has it as a term of its
# own, `launch`), and the GPU sits idle while the next launch is prepared. The model for one call is then
# `launches · launch + bytes / bandwidth`, and the first term is a thousand times the second.
#
# The cure is to stop launching from Python: record the calls once in a **CUDA graph** (`torch.cuda.CUDAGraph`),
# then **replay** the graph; a replay hands the GPU the whole recorded sequence at once. The cell below times
# your kernel and eager PyTorch at the decode shape as plain calls and as graph replays (wall-clock time a call,
# the GPU synchronised, so that the host's cost counts), next to the model with and without the launch term.

# %% nbgrader={"grade": false, "grade_id": "decode", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
from autograder.measure.timing import cuda_graph, synced_ms
from autograder.teach.plots import launch_seconds


def replayed(fn):
    """fn recorded in a CUDA graph at its first call (so that an unwritten exercise is found as such), then
    replayed."""
    graph = []

    def call():
        if not graph:
            graph.append(cuda_graph(fn))
        return graph[0]()
    return call


bw_gbps, _, peak_label = peaks(profile)
decode_bytes = 2 * 4096 * 2 + 4096 * 2  # read x and w, write y: 24 KiB
bytes_us, launch_us = decode_bytes / (bw_gbps * 1e3), launch_seconds(profile) * 1e6
print(f"the bytes: {bytes_us * 1e3:.0f} ns at {bw_gbps:.0f} GB/s; one launch: {launch_us:.1f} us ({peak_label})")
# Eager at one row launches a kernel per operation: the norm, square, divide, add eps, rsqrt, cast, two multiplies.
# Its bytes are still about twice the fused kernel's (5|x| against 2|x| and the weight).
EAGER_LAUNCHES = 8
model_us = {"your kernel, plain calls": launch_us + bytes_us, "your kernel, graph replay": bytes_us,
            "eager, plain calls": EAGER_LAUNCHES * launch_us + 2 * bytes_us, "eager, graph replay": 2 * bytes_us}
if ON_GPU:
    x1 = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w1 = 1 + 0.1 * torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    versions = {
        "your kernel, plain calls": lambda: rmsnorm(x1, w1, EPS),
        "your kernel, graph replay": replayed(lambda: rmsnorm(x1, w1, EPS)),
        "eager, plain calls": lambda: vertical_fusion.rmsnorm_eager(x1, w1, EPS),
        "eager, graph replay": replayed(lambda: vertical_fusion.rmsnorm_eager(x1, w1, EPS)),
    }
    decode_us = {k: 1e3 * ms for k, ms in bench_versions(versions, desc="timing 1 x 4096", bench=synced_ms).items()}
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bars_against_model(ax, decode_us, model_us, "microseconds a call (1 x 4096 bf16)",
                       f"RMSNorm at decode, {peak_label}", ON_GPU)
    plt.show()
    for name, us in decode_us.items():
        print(f"{name:<28} {us:6.1f} us a call   model {model_us[name]:6.2f} us")
else:
    print("No GPU here: the decode shape is about the cost of launching GPU kernels from Python, which Triton's "
          "interpreter does not have; nothing is timed or drawn.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "decode-discuss", "locked": true, "schema_version": 3, "solution": false}
# What to look for: the plain calls sit near the launch term, whatever the kernel does, and eager's small kernels
# pay it once each (at a training shape the same kernels were invisible next to the bytes); the replays drop far
# below, to what the GPU needs to start a graph and run its kernels, still well above the nanoseconds of traffic.
# At the decode shape a fused kernel wins by the launches it removes, not the bytes, and capturing a whole
# layer's kernels in one graph removes most of what is left.

# %% [markdown] nbgrader={"grade": false, "grade_id": "add-md", "locked": true, "schema_version": 3, "solution": false}
# ## 3. Residual add + RMSNorm
#
# A pre-norm transformer block ends each sub-layer with `s = x + residual` and starts the next with
# `rmsnorm(s)`. Both `s` (the new residual stream) and the normalised output are needed later. Unfused that is
# an add (read 2, write 1) and an RMSNorm (≈ 5): about `8|x|`. Fused: read `x` and `residual`, write the
# normalised output and `s`: `4|x|`, the floor, since both outputs must exist.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-add_rmsnorm-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_add_rmsnorm_bytes · Predict add + RMSNorm's traffic   (about 5 min · ★☆☆)
#
# **Spec.** `predicted_add_rmsnorm_bytes(rows, cols, elem_bytes) -> int`: the fewest bytes your fused `add_rmsnorm` moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an element. Count every tensor the kernel reads or writes once, the
# one-row ones included, as an integer number of bytes. The measurement below draws your kernel's time against
# `bytes / copy bandwidth`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Which tensors must come in from HBM, and which must go out? Each crosses once.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# An x-sized tensor is `rows · cols · elem_bytes` bytes, the weight `cols · elem_bytes`. Two come in at full size and two go out; add the weight.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_add_rmsnorm_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_add_rmsnorm_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_add_rmsnorm_bytes(rows: int, cols: int, elem_bytes: int) -> int:
    """HBM bytes of the fused add + RMSNorm for x (rows, cols), weight included."""
    ### BEGIN SOLUTION
    return (4 * rows + 1) * cols * elem_bytes  # read x, residual; write normed, new residual; read weight
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_add_rmsnorm_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.predict_add_rmsnorm_bytes", predicted_add_rmsnorm_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "add-card-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.add_rmsnorm · Residual add + RMSNorm in one kernel   (about 20 min · ★☆☆)
#
# **Spec.** `add_rmsnorm(x, residual, weight, eps) -> (normed, new_residual)`: `x` and `residual` of shape
# `(M, H)` and one dtype (rows possibly strided, last dimension contiguous), `weight (H,)`, `H ≤ 16384`.
# Returns two new `(M, H)` tensors of `x`'s dtype: `new_residual = x + residual` and `normed =
# rmsnorm(new_residual, weight, eps)`, from **one** kernel launch.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Your `rmsnorm` kernel is most of the answer: one more load before the statistic, one more store.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Load `x` and `residual` (masked), add them in float32, round the sum to the storage dtype and store it as the
# new residual; then upcast that stored value and carry on exactly as in `rmsnorm`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Normalise **the value you stored** (cast down, then back up to float32), not the float32 sum: in fp16 and bf16
# they differ, and `normed` must be the RMSNorm of the residual the next layer will read. Four tensors, four row
# strides.
#
# </details>
# <details><summary>Make it fast</summary>
#
# The launch settings of `rmsnorm` carry over; 32 values a thread (`num_warps = BLOCK_H // 1024`) measured best
# at H = 4096 with two tensors in flight.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.add_rmsnorm -->

# %% nbgrader={"grade": false, "grade_id": "add_rmsnorm", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, out_r_ptr, H, stride_xm, stride_rm, stride_ym, stride_om,
                        eps, BLOCK_H: tl.constexpr):
    """One program per row: s = x + r (stored to out_r in the input dtype), y = rmsnorm(s) * w. Each of the
    four (M, H) tensors has its own row stride."""
    # 1. my row, the column offsets and the tail mask (as in _rmsnorm_kernel)
    # 2. load x and r (masked); add them in float32 and round the sum to the storage dtype
    # 3. store that rounded sum as the new residual
    # 4. upcast it again, compute rstd in float32, load w, store the normalised row to y
    ### BEGIN SOLUTION
    # include body: kernels/add_rmsnorm.py (_add_rmsnorm_kernel)
    ### END SOLUTION


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """(rmsnorm(x + residual) * weight, x + residual) for x, residual (M, H), weight (H,): two new (M, H)
    tensors of x's dtype, from one launch (2 reads, 2 writes)."""
    # 1. check the shapes and that the last dimension of x and residual is contiguous
    # 2. allocate both outputs
    # 3. launch one program per row with all four row strides; return (normed, new_residual)
    ### BEGIN SOLUTION
    # include body: kernels/add_rmsnorm.py (add_rmsnorm)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_add_rmsnorm_correctness", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.add_rmsnorm", add_rmsnorm, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_add_rmsnorm_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.add_rmsnorm", add_rmsnorm, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_add_rmsnorm_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.add_rmsnorm", add_rmsnorm, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_add_rmsnorm_fusion", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.add_rmsnorm", add_rmsnorm, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "add-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your add + RMSNorm against your prediction
#
# The cell below times your `add_rmsnorm` at 32768 × 4096 in bf16 next to eager PyTorch (an add, then the
# three-kernel RMSNorm) and `torch.compile` of the same, and draws your kernel against your byte count and eager
# against its `8|x|`.

# %% nbgrader={"grade": false, "grade_id": "add-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
add_bytes = your_prediction(lambda: predicted_add_rmsnorm_bytes(M, H, 2), vertical_fusion.PREDICT_ADD, M, H, 2)
versions = {}
if ON_GPU:
    x, r = torch.randn(2, M, H, device="cuda", dtype=torch.bfloat16).unbind(0)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(vertical_fusion.add_rmsnorm_eager)
    versions = {
        "eager (add + 3 kernels)": lambda: vertical_fusion.add_rmsnorm_eager(x, r, w, EPS),
        "your add_rmsnorm": lambda: add_rmsnorm(x, r, w, EPS),
        "torch.compile": lambda: compiled(x, r, w, EPS),
    }
model_bytes = {
    "your add_rmsnorm": add_bytes,
    "eager (add + 3 kernels)": 8 * M * H * 2,
}
time_against_model(versions, model_bytes, 4 * M * H * 2, "add + RMSNorm", "32768 x 4096 bf16")
versions.clear()
x = r = None  # the benchmark's tensors go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-add-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** Your fused kernel writes the new residual `s` to HBM although the next line of the
# model could recompute it from `x` and `residual`. Why is storing it the right call, in bytes, for a transformer
# block? Which of the `4|x|` could a kernel drop if the residual stream were not needed again? (Two or three
# sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-add", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# The next block needs `s` as its residual input and the backward pass needs it too: recomputing it later
# would read `x` and `residual` again (2|x|) to save one write (1|x|), a loss. Only if nothing read `s` again, the
# last layer's residual say, could the kernel skip that write and move 3|x|.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ln-md", "locked": true, "schema_version": 3, "solution": false}
# ## 4. LayerNorm, and a formula that cancels
#
# LayerNorm needs two statistics of each row, the mean and the variance:
# `y = (x − mean) / sqrt(var + eps) · w + b`. The tempting one-pass formula
# `var = E[x²] − E[x]²` subtracts two large, nearly equal numbers when the mean is large compared with the
# spread. fp32 carries 24 significant bits, about 7 decimal digits: for a row with mean 300 and standard deviation 1,
# `E[x²] ≈ 90001` and `E[x]² ≈ 90000`, and the variance is left with the last couple of digits of each.
#
# Fusion does not force that formula on us. The row is already in registers, so take the mean first and
# the variance of the centred values second: still one read of `x` from HBM. (Welford's update does the same
# job when a row has to be streamed in pieces; shifting every value by one element of the row before
# summing helps either way.) The cell below computes both formulas with PyTorch in fp32 on rows of growing
# mean and measures each against a float64 reference. The naive error grows like the square of the mean;
# the centred one only like the mean, from the rounding of the mean itself (more on that below).

# %% nbgrader={"grade": false, "grade_id": "ln-cancel", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
offsets = [0, 1, 3, 10, 30, 100, 300, 1000]
gen = torch.Generator().manual_seed(0)
base = torch.randn(64 if ON_GPU else 16, 4096, generator=gen)  # fewer rows in the interpreter: the same curves
w64, b64 = torch.ones(4096), torch.zeros(4096)


def rel_err(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


naive_err, centred_err = [], []
for off in offsets:
    x32 = base + off  # fp32 rows with mean `off` and spread 1
    ref = vertical_fusion.layernorm_reference(x32, w64, b64, 1e-5)
    mean = x32.mean(-1, keepdim=True)
    var_naive = (x32 * x32).mean(-1, keepdim=True) - mean * mean  # the formula that cancels
    naive_err.append(rel_err((x32 - mean) * torch.rsqrt(var_naive.clamp_min(0) + 1e-5), ref))
    xc = x32 - mean  # centre first, then the variance of the centred values
    centred_err.append(rel_err(xc * torch.rsqrt((xc * xc).mean(-1, keepdim=True) + 1e-5), ref))


def plot_ln_errors(curves):
    fig, ax = plt.subplots(figsize=(7, 4))
    for (label, errs), marker in zip(curves.items(), "os^"):
        ax.loglog([max(o, 0.3) for o in offsets], errs, marker + "-", label=label)
    ax.set_xlabel("row mean (spread 1); 0 drawn at 0.3")
    ax.set_ylabel("||y − y_fp64|| / ||y_fp64||")
    ax.set_title("LayerNorm in fp32: ways to get the variance")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plt.show()


ln_curves = {"E[x²] − E[x]², fp32": naive_err, "centred first, fp32": centred_err}
plot_ln_errors(ln_curves)
for off, a, c in zip(offsets, naive_err, centred_err):
    print(f"mean {off:>5}: E[x²] − E[x]² {a:.1e}   centred first {c:.1e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-layernorm-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_layernorm_bytes · Predict LayerNorm's traffic   (about 5 min · ★☆☆)
#
# **Spec.** `predicted_layernorm_bytes(rows, cols, elem_bytes) -> int`: the fewest bytes your fused `layernorm` moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an element. Count every tensor the kernel reads or writes once, the
# one-row ones included, as an integer number of bytes. The measurement below draws your kernel's time against
# `bytes / copy bandwidth`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Two statistics do not mean two reads when the row stays in registers.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Count `x` in and `y` out at `rows · cols · elem_bytes` each, then the two one-row parameters at `cols · elem_bytes` each.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_layernorm_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_layernorm_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_layernorm_bytes(rows: int, cols: int, elem_bytes: int) -> int:
    """HBM bytes of the fused LayerNorm for x (rows, cols), weight and bias included."""
    ### BEGIN SOLUTION
    return (2 * rows + 2) * cols * elem_bytes  # read x, write y; read weight and bias
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_layernorm_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.predict_layernorm_bytes", predicted_layernorm_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ln-ex-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.layernorm · LayerNorm in one kernel   (about 45 min · ★★☆)
#
# **Spec.** `layernorm(x, weight, bias, eps) -> y`: `x (M, H)` with `H ≤ 16384` (rows possibly strided, last
# dimension contiguous), `weight` and `bias (H,)`. Returns a new `(M, H)` tensor of `x`'s dtype,
# `(x − mean) / sqrt(var + eps) · weight + bias` with the biased variance (divide by `H`, as
# `torch.nn.functional.layer_norm` does), from one launch: both statistics from the row held in registers.
# The grader feeds it rows centred on 300 with a spread of 1: the statistics must keep their precision there.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The row is in registers: take the mean first and the variance of the centred values second, still one read
# of `x`.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `mean = tl.sum(x, axis=0) / H`; centre, zero the padding lanes, `var = tl.sum(xc * xc, axis=0) / H`;
# `rstd = 1 / sqrt(var + eps)`; then `xc * rstd * w + b`, cast and stored with the mask.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# After centring, the padding lanes hold `−mean`: zero them with `tl.where(mask, x − mean, 0.0)` or each adds
# `mean²` to the variance. Better still: subtract one element of the row (a scalar `tl.load` of the row's start)
# from every value before both sums; it is exact for values this close together.
#
# </details>
# <details><summary>Make it fast</summary>
#
# The same launch settings as `rmsnorm`; the scalar load of the row's first element is cheaper than picking it
# out of the loaded block with a reduction.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.layernorm -->

# %% nbgrader={"grade": false, "grade_id": "layernorm", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr):
    """One program per row of x (H values, stride_xm apart) into y: (x - mean) * rstd * w + b."""
    # 1. my row, the column offsets and the tail mask
    # 2. load the row (masked) and upcast to float32
    # 3. the mean in float32; the centred values, zeroed past H; the biased variance; rstd
    # 4. load w and b (masked), normalise, scale and shift, cast and store (masked)
    ### BEGIN SOLUTION
    # include body: kernels/layernorm.py (_layernorm_kernel)
    ### END SOLUTION


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over rows of x (M, H), H <= 16384: a new (M, H) tensor of x's
    dtype, from one launch of _layernorm_kernel."""
    # 1. check the shapes; 2. allocate y; 3. one program per row, BLOCK_H a power of two >= H; return y
    ### BEGIN SOLUTION
    # include body: kernels/layernorm.py (layernorm)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_layernorm_correctness", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.layernorm", layernorm, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_layernorm_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.layernorm", layernorm, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_layernorm_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.layernorm", layernorm, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_layernorm_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.layernorm", layernorm, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ln-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your LayerNorm against your prediction
#
# Timed at 32768 × 4096 in bf16: your `layernorm`, the unfused eager version (mean, centre, variance, normalise,
# scale, shift), `F.layer_norm` and `torch.compile`; your kernel against your byte count.

# %% nbgrader={"grade": false, "grade_id": "ln-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
ln_bytes = your_prediction(lambda: predicted_layernorm_bytes(M, H, 2), vertical_fusion.PREDICT_LAYERNORM, M, H, 2)
versions = {}
if ON_GPU:
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16) + 3
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    b = 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(vertical_fusion.layernorm_eager)
    versions = {
        "eager (unfused)": lambda: vertical_fusion.layernorm_eager(x, w, b, EPS),
        "your layernorm": lambda: layernorm(x, w, b, EPS),
        "F.layer_norm": lambda: torch.nn.functional.layer_norm(x, (H,), w, b, EPS),
        "torch.compile": lambda: compiled(x, w, b, EPS),
    }
model_bytes = {
    "your layernorm": ln_bytes,
    "F.layer_norm": ln_bytes,
    "torch.compile": ln_bytes,
}
time_against_model(versions, model_bytes, 2 * M * H * 2, "LayerNorm", "32768 x 4096 bf16")
versions.clear()
x = None  # the benchmark's tensors go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-layernorm-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** LayerNorm computes two statistics and RMSNorm one, yet your two kernels should take
# about the same time at this shape. Why? What would have to change for the second statistic to cost a second read
# of `x`? (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-layernorm", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Both kernels move 2|x| and are memory bound: the extra reduction and subtraction are a few arithmetic
# instructions an element, far below what the SMs can do while the bytes stream in. The second statistic would cost
# a second read only if the row did not fit in one program's registers (rows streamed in blocks) and the centred
# variance needed the mean first: Welford's update or a shift avoids even that.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ln-why-md", "locked": true, "schema_version": 3, "solution": false}
# **Why these bars.** A floating-point format's **unit roundoff** `u` is half the gap between 1 and the next
# number it can hold: the largest relative error one rounding can make. A format with `p` significant bits (the
# stored mantissa bits and the implicit leading one) has `u = 2⁻ᵖ`: `2⁻²⁴` for float32 (24 bits), `2⁻¹¹` for float16
# and tf32 (11), `2⁻⁸` for bfloat16 (8). The textbook two-pass order in float32 (the mean first, then the variance of the
# centred values) keeps one rounding that matters: the row's mean, stored in float32, is off by up to
# `u · |mean|`, and every centred value carries that error. Relative to the row's spread it is
# `u · |mean| / std` ≈ 2·10⁻⁵ at mean 300, about what `F.layer_norm` itself measures. The precision bar allows
# four times that (LayerNorm's own `eps` argument, 10⁻⁵ here, is a different thing: it only keeps the square
# root away from zero), so the two-pass order passes; the cancelling formula above misses it by a factor of
# about a hundred. Subtracting one element of the row from every element before the sums, exact in float32 for
# values this close together, removes even the remaining error: the reference solution does.
#
# **Reference run.** Reading that element out of the already loaded row with
# `tl.sum(tl.where(cols == 0, x, 0))` instead of a scalar `tl.load` is one more reduction across the warps: it
# cost 5% of the kernel's time on an H200.

# %% [markdown] nbgrader={"grade": false, "grade_id": "ln-yours-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernel on the same rows
#
# The cell below runs your `layernorm` on the rows of the experiment above and adds its error to the two
# formulas. A kernel that centres first should sit on or below the centred line; one that shifts each row by
# one of its own elements before summing can stay flat at the level of fp32 rounding. A kernel on the
# `E[x²] − E[x]²` line cancels, and the precision test above says so.

# %% nbgrader={"grade": false, "grade_id": "ln-yours", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
yours_err = []
try:
    for off in offsets:
        x32 = base + off
        y = layernorm(x32.to(DEVICE), w64.to(DEVICE), b64.to(DEVICE), 1e-5).cpu()
        yours_err.append(rel_err(y, vertical_fusion.layernorm_reference(x32, w64, b64, 1e-5)))
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print(f"your layernorm: not written yet ({type(exc).__name__}: {exc}); the plot shows the two formulas only")
    yours_err = []
plot_ln_errors({**ln_curves, "your layernorm": yours_err} if yours_err else ln_curves)
for off, e in zip(offsets, yours_err):
    print(f"mean {off:>5}: your layernorm {e:.1e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "prec-md", "locked": true, "schema_version": 3, "solution": false}
# ## 5. Precision discipline: where the accumulator lives
#
# The rule of every fused kernel in this course: **load in the storage dtype, compute and accumulate in
# fp32, round once at the store.** The experiment below shows what breaking it costs. An RMSNorm
# (`rmsnorm_lowp_accumulator` of `kernels/rmsnorm_variants.py`) runs with its running sum of squares rounded
# to bf16 or fp16 after every addition, next to your fp32 `rmsnorm` from its exercise, all compared with a
# float64 reference for growing H. Inputs and outputs are fp32 here, so that the only low-precision step is
# the accumulator.
#
# An **ulp** (unit in the last place) of a number is the gap between it and the next number the format can
# hold: for a bf16 value near 1000 it is 4, for an fp32 one about 6·10⁻⁵. Each rounding of the running sum adds
# an error of up to half an ulp of the sum, in a random direction; after `n` additions those errors add up like
# a random walk, to about `√n` of them. So the relative error of the statistic grows at least like `√H`. Once
# the running sum is a few hundred times larger than the terms added to it, bf16 (8 significant bits: 7 stored
# and the implicit leading one) starts rounding the terms away altogether and the growth gets steeper than `√H`. An fp32 accumulator's error, your
# kernel's, stays flat at the level of fp32 rounding. (The casts this needs work in Triton's interpreter too,
# so the experiment runs without a GPU, on shorter rows.)

# %% nbgrader={"grade": false, "grade_id": "prec-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# The interpreter runs the low-precision kernel's loop one block of 32 at a time: rows up to 4096 there.
HS = [256, 512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [256, 512, 1024, 2048, 4096]
ROWS = 16 if ON_GPU else 4
acc_dtypes = [torch.bfloat16, torch.float16]
errors = {str(d): [] for d in acc_dtypes}
YOURS = "your rmsnorm (fp32 accumulator)"
errors[YOURS] = []
for h in tqdm(HS, desc="error against fp64"):
    gen = torch.Generator().manual_seed(h)
    x = torch.randn(ROWS, h, generator=gen).to(DEVICE)
    w = torch.ones(h, device=DEVICE)
    ref = vertical_fusion.rmsnorm_reference(x, w, 1e-5)
    for d in acc_dtypes:
        out = rmsnorm_variants.rmsnorm_lowp_accumulator(x, w, 1e-5, acc_dtype=d)
        errors[str(d)].append(((out.double() - ref).norm() / ref.norm()).item())
    if YOURS in errors:
        try:
            out = rmsnorm(x, w, 1e-5)
        except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
            if not not_written(exc):
                raise
            print(f"your rmsnorm: not written yet ({type(exc).__name__}: {exc}); its fp32 line is left out")
            del errors[YOURS]
        else:
            errors[YOURS].append(((out.double() - ref).norm() / ref.norm()).item())

fig, ax = plt.subplots(figsize=(7, 4.5))
for name, errs in errors.items():
    label = name.replace("torch.", "") + (" accumulator" if name.startswith("torch.") else "")
    line, = ax.loglog(HS, errs, "o-", label=label)
    if name.startswith("torch."):
        c = vertical_fusion.sqrt_fit(HS, errs)
        ax.loglog(HS, [c * h**0.5 for h in HS], "--", color=line.get_color(), alpha=0.6, label=f"√H fit ({label})")
ax.set_xlabel("H (elements reduced per row)")
ax.set_ylabel("||y − y_fp64|| / ||y_fp64||")
ax.set_title("RMSNorm, fp32 in and out: only the accumulator differs")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-accumulator-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** Your kernel stores `y` in bf16 when `x` is bf16: every output element is rounded to
# 8 significant bits. Why does that rounding not make the error grow with `H`, when rounding the accumulator to
# bf16 does? (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-accumulator", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Rounding at the store happens once per element, independently: each output carries at most half an ulp of
# its own value, a relative error of u whatever H is. The accumulator is rounded H times in a chain, and every
# rounding's error stays in the sum that all of the row's outputs are then scaled by: those errors add up (like
# √H at least, faster once small terms are rounded away), so the statistic, and every element of the row,
# gets worse as the row gets longer.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-repair-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_repair_bytes · Predict the repaired kernel's traffic   (about 5 min · ★☆☆)
#
# **Spec.** `predicted_repair_bytes(rows, cols, elem_bytes) -> int`: the bytes the repaired two-pass kernel moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an element, **assuming every read misses the cache**. Count every tensor the kernel reads or writes once, the
# one-row ones included, as an integer number of bytes. The measurement below draws your kernel's time against
# `bytes / copy bandwidth`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The repaired kernel loops over each row twice: what does each loop read, and what does it write?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# The first loop reads `x` for the statistic; the second reads `x` again, reads the weight and writes `y`. Sizes: `rows · cols · elem_bytes` for `x` and `y`, `cols · elem_bytes` for the weight.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_repair_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_repair_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_repair_bytes(rows: int, cols: int, elem_bytes: int) -> int:
    """HBM bytes of the two-pass RMSNorm for x (rows, cols), every read a miss, weight included."""
    ### BEGIN SOLUTION
    return (3 * rows + 1) * cols * elem_bytes  # read x twice, write y; read weight
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_repair_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.predict_repair_bytes", predicted_repair_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "repair-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.rmsnorm_repair · Repair a precision bug   (about 20 min · ★☆☆)
#
# The kernel below is someone's RMSNorm. It passes a quick test in fp32, but its error grows with `H` in
# fp16 and bf16.
#
# **Spec.** `rmsnorm_repaired(x, weight, eps) -> y`, the same arguments and result as `rmsnorm`: a repaired copy
# of the kernel below, with its bug found and fixed, launched once. Keep its loop over the row in blocks (that
# is what makes it work for any `H`); repair what it computes.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Read the kernel for the dtype each value has: what is squared, and what is the running sum kept in?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Upcast each block to float32 right after its load, in both loops; start the running sum as a float32 block
# (`tl.zeros([BLOCK], dtype=tl.float32)`); normalise in float32 and cast only at the store.
#
# </details>
# <details><summary>Make it fast</summary>
#
# The buggy launcher's 64 columns a step are few: 1024 keep more loads in flight.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.rmsnorm_repair -->

# %% nbgrader={"grade": false, "grade_id": "buggy", "locked": true, "schema_version": 3, "solution": false}
# include: kernels/rmsnorm_variants.py (_buggy_rmsnorm_kernel, rmsnorm_buggy)

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_repaired", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _rmsnorm_two_pass_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    """The repaired _buggy_rmsnorm_kernel, with the same arguments: one program per row, the row in blocks of
    BLOCK columns, a first loop for the statistic and a second that normalises and stores."""
    # Start from the buggy kernel's body, and give every value the dtype the precision rule asks for: load in
    # the storage dtype, compute and accumulate in float32, round once at the store.
    ### BEGIN SOLUTION
    # The buggy kernel squares x in its storage dtype and keeps the running sum of squares in that dtype too, so
    # in fp16 or bf16 every addition rounds to 11 or 8 significant bits. The repair converts x to fp32 before
    # squaring and accumulates in fp32: that is the two-pass kernel of kernels/rmsnorm_variants.py.
    # include body: kernels/rmsnorm_variants.py (_rmsnorm_two_pass_kernel)
    ### END SOLUTION


def rmsnorm_repaired(x, weight, eps):
    """rmsnorm(x, weight, eps) for x (M, H), any H: a new (M, H) tensor of x's dtype from one launch of your
    repaired kernel."""
    # allocate y; launch the repaired kernel, one program per row, with both row strides; return y
    ### BEGIN SOLUTION
    M, H = x.shape
    y = torch.empty_like(x)
    # 1024 columns a step, as rmsnorm_two_pass launches it, rather than the buggy launcher's 64.
    _rmsnorm_two_pass_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK=1024, num_warps=4)
    return y
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_repair_correctness", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.rmsnorm_repair", rmsnorm_repaired, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_repair_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.rmsnorm_repair", rmsnorm_repaired, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_repair_performance", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.rmsnorm_repair", rmsnorm_repaired, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_repair_fusion", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.rmsnorm_repair", rmsnorm_repaired, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "repair-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### The repair against your prediction
#
# Timed at 32768 × 4096 in bf16: eager PyTorch, the buggy kernel as given, your repair, your one-pass `rmsnorm`
# and `torch.compile`. The repair's model is your prediction (every read a miss), the one-pass kernel's `2|x|`.

# %% nbgrader={"grade": false, "grade_id": "repair-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
repair_bytes = your_prediction(lambda: predicted_repair_bytes(M, H, 2), vertical_fusion.PREDICT_REPAIR, M, H, 2)
versions = {}
if ON_GPU:
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(vertical_fusion.rmsnorm_eager)
    versions = {
        "eager (3 kernels)": lambda: vertical_fusion.rmsnorm_eager(x, w, EPS),
        "buggy (as given)": lambda: rmsnorm_buggy(x, w, EPS),
        "your repair": lambda: rmsnorm_repaired(x, w, EPS),
        "your one-pass rmsnorm": lambda: rmsnorm(x, w, EPS),
        "torch.compile": lambda: compiled(x, w, EPS),
    }
model_bytes = {
    "buggy (as given)": repair_bytes,
    "your repair": repair_bytes,
    "your one-pass rmsnorm": 2 * M * H * 2 + H * 2,
    "eager (3 kernels)": 5 * M * H * 2,
}
time_against_model(versions, model_bytes, 2 * M * H * 2, "repaired RMSNorm", "32768 x 4096 bf16")
versions.clear()
x = None  # the benchmark's tensors go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-repair-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** The repair changed only dtypes, not the bytes. Did it change the time? Where does your
# repair sit against its `3|x|` line, and what does that say about the second pass's reads? (Two or three
# sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-repair", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Upcasting costs nothing measurable: the kernel is memory bound either way, so the repair and the buggy kernel
# (with the same block size) take about the same time. Both land below the 3|x| line, near 2|x|, because each row
# (8 KiB) is still in L2 when the second loop reads it again: the second pass mostly misses HBM. The launcher's
# block of 1024 columns instead of 64 is what makes the repair faster than the kernel as given.

# %% [markdown] nbgrader={"grade": false, "grade_id": "bwd-md", "locked": true, "schema_version": 3, "solution": false}
# ## 6. Stretch: RMSNorm backward
#
# Training needs gradients. With `rstd = 1/sqrt(mean(x²) + eps)`, `x̂ = x · rstd`, `y = x̂ · w` and the
# upstream gradient `dy`, write `g = dy · w`. Then, per row,
#
# $$dx = \text{rstd} \cdot \left(g - \hat x \cdot \operatorname{mean}(g \cdot \hat x)\right), \qquad
# dw = \sum_\text{rows} dy \cdot \hat x .$$
#
# `dx` is one more row reduction followed by elementwise work: the same shape as the forward pass. `dw` is a
# reduction **across rows**, which no single program sees. A common answer, and the one the grader allows
# (two launches): each program takes a band of rows, writes their `dx`, and keeps a running fp32 sum of
# `dy · x̂` for its band; it stores that partial sum, and a second small kernel adds the partial sums.
#
# A program that walks its band row by row waits, for every row, the whole latency of its loads before it can
# reduce. With about two programs an SM, the SM's **occupancy** (how many warps it has resident, ready to run
# while others wait on memory) is low: a few rows in flight, far too few to keep HBM busy. Ask the compiler to
# **pipeline** the loop, `for i in tl.range(rows, num_stages=3):`: it then issues the loads of the next rows
# into **shared memory** (a fast on-chip scratchpad of each SM, 228 KiB on an H100, that the warps of a program
# share) while the current one is reduced.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-backward-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_backward_bytes · Predict the backward pass's traffic   (about 5 min · ★☆☆)
#
# **Spec.** `predicted_backward_bytes(rows, cols, elem_bytes) -> int`: the fewest bytes your `rmsnorm_backward` moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an element, leaving out the small float32 partial sums of `dweight`. Count every tensor the kernel reads or writes once, the
# one-row ones included, as an integer number of bytes. The measurement below draws your kernel's time against
# `bytes / copy bandwidth`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# The backward recomputes `rstd` from `x` instead of reading a saved one: which full-size tensors does it read, which does it write?
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Full size: `x` and `dy` in, `dx` out, `rows · cols · elem_bytes` each. One row: `weight` in, `dweight` out, `cols · elem_bytes` each.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_backward_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_backward_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_backward_bytes(rows: int, cols: int, elem_bytes: int) -> int:
    """HBM bytes of RMSNorm's backward for x (rows, cols): x, dy, dx, weight and dweight, no partial sums."""
    ### BEGIN SOLUTION
    return (3 * rows + 2) * cols * elem_bytes  # read x, dy; write dx; read weight, write dweight
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_backward_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.predict_backward_bytes", predicted_backward_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "bwd-card-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.rmsnorm_backward · RMSNorm's backward pass (stretch)   (about 90 min · ★★★)
#
# **Spec.** `rmsnorm_backward(x, weight, dy, eps) -> (dx, dweight)`: `x` and `dy (M, H)` of one dtype (rows
# possibly strided, last dimension contiguous), `weight (H,)`, `H ≤ 16384`. Returns `dx`, a new `(M, H)` tensor
# of `x`'s dtype, and `dweight`, a new `(H,)` tensor of `weight`'s dtype: the gradients of
# `rmsnorm(x, weight, eps)` for the upstream gradient `dy`, recomputing `rstd` from `x`. At most two launches.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# `dx` is a row reduction and elementwise work, like the forward pass. `dweight` sums over rows that no single
# program sees: let each program add up its own band of rows, and a second kernel add the bands.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Give the first kernel a fixed number of programs (a few per SM on a GPU, 8 in the interpreter), each a band of
# `cdiv(M, programs)` rows, and a float32 `(programs, H)` buffer for the partial sums of `dweight`. The second
# kernel sums the buffer's rows, a block of columns per program.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Per row: `xhat = x · rstd`, `g = dy · w`, `dx = rstd · (g − xhat · sum(g · xhat) / H)`, and the accumulator
# gains `dy · xhat`. Skip rows `≥ M` in the last band, load with `other=0.0` so the padding lanes add nothing,
# and keep `rstd` and every sum in float32.
#
# </details>
# <details><summary>Make it fast</summary>
#
# Pipeline the loop over rows: `for i in tl.range(rows, num_stages=3)`.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.rmsnorm_backward -->

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_backward", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _rmsnorm_bwd_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, partial_ptr, M, H, stride_xm, stride_dym, stride_dxm, eps,
                        ROWS_PER_PROGRAM: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program p takes rows p * ROWS_PER_PROGRAM .. (p + 1) * ROWS_PER_PROGRAM - 1 (those below M): writes their dx
    and stores the fp32 sum over them of dy * xhat as row p of partial (programs, H)."""
    # 1. the column offsets and mask; load w once (float32); a float32 accumulator for dy * xhat
    # 2. for each of my rows (a pipelined loop; skip rows >= M): load x and dy in float32, rstd, xhat, g = dy * w
    # 3.   dx = rstd * (g - xhat * mean(g * xhat)); store it; add dy * xhat to the accumulator
    # 4. store the accumulator as row p of partial
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_backward.py (_rmsnorm_bwd_kernel)
    ### END SOLUTION


@triton.jit
def _sum_partials_kernel(partial_ptr, dw_ptr, P, H, BLOCK_P: tl.constexpr, BLOCK: tl.constexpr):
    # Each program owns BLOCK columns and adds BLOCK_P partial rows per step: many loads in flight.
    """dw[cols] = the sum over the P rows of partial (P, H, float32) of its columns cols, cast to dw's dtype."""
    # 1. my columns: tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # 2. a float32 (BLOCK_P, BLOCK) accumulator; loop over the rows of partial BLOCK_P at a time (masked)
    # 3. reduce the accumulator over its rows, cast and store (masked)
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_backward.py (_sum_partials_kernel)
    ### END SOLUTION


def _programs(M: int, device) -> int:
    """How many programs the first kernel runs: enough to fill the GPU, few enough that the partial sums of
    dweight stay small (and at most M)."""
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_backward.py (_programs)
    ### END SOLUTION


def rmsnorm_backward(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float):
    """(dx, dweight) for y = rmsnorm(x, weight, eps) and upstream gradient dy: dx (M, H) of x's dtype, dweight (H,)
    of weight's dtype. Two launches."""
    # 1. check the shapes; allocate dx, dweight and the float32 partial sums (programs, H)
    # 2. launch _rmsnorm_bwd_kernel with `programs` programs
    # 3. launch the kernel that sums the partial rows into dweight; return (dx, dweight)
    ### BEGIN SOLUTION
    # include body: kernels/rmsnorm_backward.py (rmsnorm_backward)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_backward_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("02.rmsnorm_backward", rmsnorm_backward, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_backward_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.rmsnorm_backward", rmsnorm_backward, criteria=["precision"]).assert_passed("precision")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_backward_performance", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("02.rmsnorm_backward", rmsnorm_backward, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_rmsnorm_backward_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.rmsnorm_backward", rmsnorm_backward, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "bwd-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your backward against your prediction
#
# Timed at 32768 × 4096 in bf16: your two kernels, and eager PyTorch's autograd through the unfused forward (its
# forward included: autograd has no backward without one). Your kernels against your byte count.

# %% nbgrader={"grade": false, "grade_id": "bwd-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
bwd_bytes = your_prediction(lambda: predicted_backward_bytes(M, H, 2), vertical_fusion.PREDICT_BACKWARD, M, H, 2)
versions = {}
if ON_GPU:
    x, dy = torch.randn(2, M, H, device="cuda", dtype=torch.bfloat16).unbind(0)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    versions = {
        "eager autograd (forward + backward)": lambda: vertical_fusion.rmsnorm_backward_eager(x, w, dy, EPS),
        "your rmsnorm_backward": lambda: rmsnorm_backward(x, w, dy, EPS),
    }
model_bytes = {
    "your rmsnorm_backward": bwd_bytes,
}
time_against_model(versions, model_bytes, 3 * M * H * 2, "RMSNorm backward", "32768 x 4096 bf16")
versions.clear()
x = dy = None  # the benchmark's tensors go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-backward-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** Your backward recomputes `rstd` from `x` rather than having the forward pass save it.
# Count what saving it would change in bytes, and say why recomputing is the usual choice. (Two or three
# sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-backward", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# Saving rstd costs the forward one float32 per row (4M bytes) and the backward reads it back: next to the 3|x| of
# x, dy and dx that is about 1/2000 at H = 4096, so in bytes the two are even. Recomputing needs no saved tensor
# to keep alive between the passes (activation memory) and costs one reduction over a row already in registers:
# free in a memory-bound kernel.

# %% [markdown] nbgrader={"grade": false, "grade_id": "bwd-ref-run", "locked": true, "schema_version": 3, "solution": false}
# **Reference run.** On an H200, pipelining the loop over rows (`num_stages=3`) alone took the course's backward
# kernel from 0.64 to 0.90 of copy bandwidth, with two programs an SM.

# %% [markdown] nbgrader={"grade": false, "grade_id": "autograd-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your kernels under autograd
#
# The cell below wraps your forward `rmsnorm` and your `rmsnorm_backward` in a `torch.autograd.Function`,
# back-propagates a random upstream gradient through it, and compares `dx` and `dw` with float64 autograd
# through the reference RMSNorm. Both relative errors should be at the level of fp32 rounding (about 1e-7).

# %% nbgrader={"grade": false, "grade_id": "autograd", "locked": true, "schema_version": 3, "solution": false}
# include: kernels/rmsnorm_backward.py (RMSNormFunction)


x = torch.randn(64, 1000, device=DEVICE, requires_grad=True)
w = (1 + 0.1 * torch.randn(1000, device=DEVICE)).requires_grad_()
dy = torch.randn(64, 1000, device=DEVICE)
try:
    RMSNormFunction.apply(x, w, 1e-5).backward(dy)
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print(f"not written yet: this needs your rmsnorm and rmsnorm_backward ({type(exc).__name__}: {exc})")
else:
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    vertical_fusion.rmsnorm_reference(xd, wd, 1e-5).backward(dy.double())
    print(f"dx: relative error {((x.grad.double() - xd.grad).norm() / xd.grad.norm()).item():.2e}")
    print(f"dw: relative error {((w.grad.double() - wd.grad).norm() / wd.grad.norm()).item():.2e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "dropout-md", "locked": true, "schema_version": 3, "solution": false}
# ## 7. Dropout in the kernel
#
# Training applies dropout to a sub-layer's output before the residual add: `h = x + dropout(y, p)`, then the
# next norm. Unfused, PyTorch's dropout kernel draws the mask and writes it out beside the result (for the
# backward), then come the add and the norm: about `10|x|` of traffic, plus the mask. Fused, the mask never
# exists in memory. Triton's `tl.rand(seed, offsets)` computes a random number in `[0, 1)` from a seed and an integer offset alone (the Philox generator: ten rounds of multiplications and
# xors, integer work in registers), so each element's draw is a pure function of `(seed, offset)`. The forward
# pass draws it, and a backward pass draws exactly the same number again from the same seed and offset: it needs
# the seed, not a stored mask. What is left is the traffic of add + RMSNorm, `4|x|`.
#
# The offsets decide which elements share a draw. Number the elements of the whole `(M, H)` tensor, `row · H +
# col`, and every element gets its own; number only the columns, and every row gets the same mask, which is not
# dropout.

# %% [markdown] nbgrader={"grade": false, "grade_id": "predict-dropout_add_rmsnorm-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.predict_dropout_add_rmsnorm_bytes · Predict fused dropout's traffic   (about 5 min · ★☆☆)
#
# **Spec.** `predicted_dropout_add_rmsnorm_bytes(rows, cols, elem_bytes) -> int`: the fewest bytes your fused `dropout_add_rmsnorm` moves through HBM for `x` of shape `(rows, cols)` with `elem_bytes` bytes an element. Count every tensor the kernel reads or writes once, the
# one-row ones included, as an integer number of bytes. The measurement below draws your kernel's time against
# `bytes / copy bandwidth`.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Where does the mask live? Then the count is one you have made before.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# `x` and `y` in, `out` and `h` out at `rows · cols · elem_bytes` each; the weight at `cols · elem_bytes`; the mask nowhere.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.predict_dropout_add_rmsnorm_bytes -->

# %% nbgrader={"grade": false, "grade_id": "predicted_dropout_add_rmsnorm_bytes", "locked": false, "schema_version": 3, "solution": true}
def predicted_dropout_add_rmsnorm_bytes(rows: int, cols: int, elem_bytes: int) -> int:
    """HBM bytes of the fused dropout + add + RMSNorm for x (rows, cols), weight included, no mask tensor."""
    ### BEGIN SOLUTION
    return (4 * rows + 1) * cols * elem_bytes  # read x, y; write out, h; read weight; no mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_predict_dropout_add_rmsnorm_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("02.predict_dropout_add_rmsnorm_bytes", predicted_dropout_add_rmsnorm_bytes).assert_passed("correctness")

# %% [markdown] nbgrader={"grade": false, "grade_id": "dropout-card-md", "locked": true, "schema_version": 3, "solution": false}
# ### Exercise 02.dropout_add_rmsnorm · Dropout, residual add and RMSNorm in one kernel   (about 40 min · ★★☆)
#
# **Spec.** `dropout_add_rmsnorm(x, y, weight, p, seed, eps) -> (out, h)`: `x` and `y (M, H)` of one dtype (rows
# possibly strided, last dimension contiguous), `weight (H,)`, `H ≤ 16384`, `0 ≤ p < 1`, an integer `seed` in
# `[0, 2³¹)`. Element `(i, j)` of `y` is kept where `tl.rand(seed, i · H + j) > p` and scaled by `1 / (1 − p)`,
# else dropped; `h = x + dropout(y)`, stored in `x`'s dtype; `out` is the RMSNorm of that stored `h`. Two new
# `(M, H)` tensors from **one** launch, the mask in registers only. Correctness first reads back the mask your
# kernel drew (from a call with `x = 0`, `y = 1`): the kept fraction must be within a binomial bound of `1 − p`,
# neighbouring rows and columns must agree no more than independent draws do, and the same seed must give the
# same mask, another seed a different one.
#
# **Hints**
#
# <details><summary>Hint 1 · the idea</summary>
#
# Your `add_rmsnorm` with `y` passed through a mask first; the mask is a function of the seed and of each element's index, so there is nothing to load for it.
#
# </details>
# <details><summary>Hint 2 · the shape of the code</summary>
#
# Offsets `row * H + cols` (the element's index in the logical tensor, not its address: strides do not enter);
# `keep = tl.rand(seed, offsets) > p`; `h = x + tl.where(keep, y * (1 / (1 - p)), 0)` in float32, cast and stored;
# then the RMSNorm of the stored `h`, as in `add_rmsnorm`.
#
# </details>
# <details><summary>Hint 3 · close to the answer</summary>
#
# Traps: offsets from `cols` alone give every row the same mask; `>=` instead of `>`, or forgetting the
# `1 / (1 − p)`, fails the values; drawing the mask in PyTorch (`torch.rand`) and loading it is a mask tensor, extra
# traffic and a torch operation outside the kernel. Pass `p` as a float and `seed` as an int.
#
# </details>
# <details><summary>Make it fast</summary>
#
# The launch settings of `add_rmsnorm` are a start. Ten Philox rounds are some forty integer instructions an
# element, not far from what the SMs can issue while an element's bytes stream in: keep everything else in the
# kernel to one pass, and compare your bandwidth with `add_rmsnorm`'s in the measurement below.
#
# </details>
#
# **Graded.**
# <!-- graded: 02.dropout_add_rmsnorm -->

# %% nbgrader={"grade": false, "grade_id": "dropout_add_rmsnorm", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def _dropout_add_rmsnorm_kernel(x_ptr, y_ptr, w_ptr, out_ptr, h_ptr, H, stride_xm, stride_ym, stride_om,
                                stride_hm, p, seed, eps, BLOCK_H: tl.constexpr):
    """One program per row: h = x + dropout(y) (kept where tl.rand(seed, row * H + col) > p, scaled by 1 / (1 - p)),
    stored to h in its dtype; out = rmsnorm(h) * w. Each of the four (M, H) tensors has its own row stride."""
    # 1. my row (int64), the column offsets and the tail mask
    # 2. load x and y (masked) in float32
    # 3. the random offsets row * H + cols; keep = tl.rand(seed, offsets) > p
    # 4. h = x + (y / (1 - p) where kept, else 0), rounded to the storage dtype and stored
    # 5. upcast the stored h, rstd in float32, load w, store the normalised row to out
    ### BEGIN SOLUTION
    # include body: kernels/dropout_add_rmsnorm.py (_dropout_add_rmsnorm_kernel)
    ### END SOLUTION


def dropout_add_rmsnorm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, p: float, seed: int, eps: float):
    """(rmsnorm(h) * weight, h) with h = x + dropout(y, p) for x, y (M, H), weight (H,): the mask drawn in the kernel
    from seed, two new (M, H) tensors of x's dtype, from one launch."""
    # 1. check the shapes, 0 <= p < 1 and 0 <= seed < 2**31
    # 2. allocate out and h
    # 3. launch one program per row with all four row strides, p and seed; return (out, h)
    ### BEGIN SOLUTION
    # include body: kernels/dropout_add_rmsnorm.py (dropout_add_rmsnorm)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "dropout-try", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
check("02.dropout_add_rmsnorm", dropout_add_rmsnorm)

# %% nbgrader={"grade": true, "grade_id": "test_dropout_add_rmsnorm_correctness", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("02.dropout_add_rmsnorm", dropout_add_rmsnorm, criteria=["correctness"]).assert_passed("correctness")

# %% nbgrader={"grade": true, "grade_id": "test_dropout_add_rmsnorm_performance", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.dropout_add_rmsnorm", dropout_add_rmsnorm, criteria=["performance"]).assert_passed("performance")

# %% nbgrader={"grade": true, "grade_id": "test_dropout_add_rmsnorm_fusion", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("02.dropout_add_rmsnorm", dropout_add_rmsnorm, criteria=["fusion"]).assert_passed("fusion")

# %% [markdown] nbgrader={"grade": false, "grade_id": "dropout-mask-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your mask, drawn again
#
# The cell below calls your kernel twice with the same seed on `x = 0`, `y = 1`, where `h` is `1 / (1 − p)` on the
# kept elements and 0 on the dropped ones, and draws a corner of the mask. The two calls must agree element for
# element: that is what lets a backward pass draw the mask again from the seed instead of storing it (the
# gradient reaching `y` is `dh · keep / (1 − p)`).

# %% nbgrader={"grade": false, "grade_id": "dropout-mask", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
zeros, ones = torch.zeros(64, 256, device=DEVICE), torch.ones(64, 256, device=DEVICE)
try:
    _, h_first = dropout_add_rmsnorm(zeros, ones, ones[0], 0.3, 1234, 1e-5)
    _, h_again = dropout_add_rmsnorm(zeros, ones, ones[0], 0.3, 1234, 1e-5)
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print(f"your dropout_add_rmsnorm: not written yet ({type(exc).__name__}); nothing to draw")
else:
    kept = (h_first != 0).cpu()
    print(f"kept {kept.float().mean():.3f} of the elements (1 - p = 0.7); the same seed again gives the same mask: "
          f"{torch.equal(h_first, h_again)}")
    plt.figure(figsize=(8, 2.4))
    plt.imshow(kept[:16, :64], cmap="gray_r", interpolation="nearest")
    plt.title("kept (dark) in rows 0-15, columns 0-63: no two rows alike")
    plt.xlabel("column")
    plt.ylabel("row")
    plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "dropout-backward-md", "locked": true, "schema_version": 3, "solution": false}
# ### A backward that stores no mask (not graded)
#
# The gradient that reaches `y` through `h = x + dropout(y)` is `dh · keep / (1 − p)`: it needs the mask again.
# Instead of saving it, the backward below draws it again with the same `tl.rand(seed, row · H + col)`, in a small
# kernel of its own, and gets `dh` from your `rmsnorm_backward` (run on the saved `h`) plus the gradient of `h`
# itself, the residual stream. The cell back-propagates through it and compares every gradient with float64
# autograd through the reference, which draws the spec's mask: the errors should be at the level of fp32 rounding.

# %% nbgrader={"grade": false, "grade_id": "dropout-backward", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
# include: kernels/dropout_add_rmsnorm.py (_dropout_backward_kernel, dropout_backward, DropoutAddRMSNormFunction)


gen = torch.Generator().manual_seed(3)
x_d, y_d = (torch.randn(32, 1000, generator=gen).to(DEVICE).requires_grad_() for _ in range(2))
w_d = (1 + 0.1 * torch.randn(1000, generator=gen)).to(DEVICE).requires_grad_()
d_out, d_h = torch.randn(2, 32, 1000, generator=gen).to(DEVICE).unbind(0)
try:
    torch.autograd.backward(DropoutAddRMSNormFunction.apply(x_d, y_d, w_d, 0.2, 99, 1e-5), (d_out, d_h))
except Exception as exc:  # noqa: BLE001  only a missing exercise is skipped
    if not not_written(exc):
        raise
    print(f"not written yet: this needs your dropout_add_rmsnorm and rmsnorm_backward ({type(exc).__name__}: {exc})")
else:
    leaves = [t.detach().double().requires_grad_() for t in (x_d, y_d, w_d)]
    reference = fused_dropout.dropout_add_rmsnorm_reference(*leaves, 0.2, 99, 1e-5)
    torch.autograd.backward(reference, (d_out.double(), d_h.double()))
    for name, mine, ref in zip(("dx", "dy", "dweight"), (x_d, y_d, w_d), leaves):
        print(f"{name}: relative error {((mine.grad.double() - ref.grad).norm() / ref.grad.norm()).item():.2e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "drop-measure-md", "locked": true, "schema_version": 3, "solution": false}
# ### Your fused dropout against your prediction
#
# Timed at 32768 × 4096 in bf16: your kernel, your `add_rmsnorm` on the same tensors (the same bytes without the
# random numbers), eager PyTorch (`F.dropout`, which draws and stores a mask, then add and RMSNorm) and
# `torch.compile` of it; your kernel against your byte count, eager against its `10|x|` plus
# the one-byte-an-element mask.

# %% nbgrader={"grade": false, "grade_id": "drop-measure", "locked": true, "schema_version": 3, "solution": false}
# demonstration (not graded; the grader skips this cell)
drop_bytes = your_prediction(lambda: predicted_dropout_add_rmsnorm_bytes(M, H, 2), fused_dropout.PREDICT_DROPOUT, M, H, 2)
versions = {}
if ON_GPU:
    x, y = torch.randn(2, M, H, device="cuda", dtype=torch.bfloat16).unbind(0)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    compiled = runtime.demo_compile(fused_dropout.dropout_add_rmsnorm_eager)
    versions = {
        "eager (mask, dropout, add, 3 kernels)": lambda: fused_dropout.dropout_add_rmsnorm_eager(x, y, w, 0.1, 0, EPS),
        "your dropout_add_rmsnorm": lambda: dropout_add_rmsnorm(x, y, w, 0.1, 1234, EPS),
        "your add_rmsnorm (no dropout)": lambda: add_rmsnorm(x, y, w, EPS),
        "torch.compile": lambda: compiled(x, y, w, 0.1, 0, EPS),
    }
model_bytes = {
    "your dropout_add_rmsnorm": drop_bytes,
    "your add_rmsnorm (no dropout)": drop_bytes,
    "eager (mask, dropout, add, 3 kernels)": M * H + 10 * M * H * 2,
}
time_against_model(versions, model_bytes, 4 * M * H * 2, "dropout + add + RMSNorm", "32768 x 4096 bf16")
versions.clear()
x = y = None  # the benchmark's tensors go back before the next measurement

# %% [markdown] nbgrader={"grade": false, "grade_id": "q-dropout-md", "locked": true, "schema_version": 3, "solution": false}
# **Question (1 point).** Your kernel runs ten rounds of Philox for every element. Did it reach `add_rmsnorm`'s
# bandwidth in the measurement above? Estimate the integer instructions an element against what your GPU can
# issue while that element's bytes stream in, and say whether the random numbers or the bytes set the time.
# (Two or three sentences.)

# %% [markdown] nbgrader={"grade": true, "grade_id": "q-dropout", "locked": false, "points": 1, "schema_version": 3, "solution": true}
# A round is about four instructions an element (a wide multiply gives both halves of a product, a three-input
# xor merges the others; the keys depend on the seed alone), so some forty to fifty with the conversion to a
# float. In bf16 an element moves 8 bytes (x, y, out, h): at about 3 TB/s that is some 400 billion elements a
# second, and forty instructions each is a large share of what an H100's 132 SMs issue (4 schedulers each, a warp
# instruction a cycle). The random numbers come close to setting the time: the kernel is expected to land somewhat
# below add_rmsnorm's bandwidth, more so with fewer bytes an element (fp8) and less with fp32.

# %% [markdown] nbgrader={"grade": false, "grade_id": "summary", "locked": true, "schema_version": 3, "solution": false}
# ## What to take away
#
# * A reduction in a fused chain is fine; a broadcast of its result back over the row needs the statistic
#   first. Holding the row in registers meets that with one HBM read: 2|x| instead of eager's ≈ 5|x|.
# * Fusing adjacent ops that share data (add + RMSNorm) removes whole tensors from the traffic, not just
#   launches.
# * Fused kernels keep statistics in fp32 and round only at the store. A low-precision accumulator's error
#   grows like √H; a one-line variance formula cancels when the mean is large. Neither is fixed by more
#   bandwidth.
#
# * Randomness can be fused too: a mask drawn in registers from `(seed, offset)` is never written, and the backward
#   pass draws it again.
# * At the decode shape the bytes take nanoseconds and a launch microseconds: there, fusion pays in launches, and
#   CUDA graphs take the rest.
#
# **Not covered here.** **BatchNorm**, the other normalisation that compilers fuse, is left out on purpose. At
# inference its scale and shift fold into the weights of the convolution or linear layer before it, so no kernel
# is left to fuse; in training its statistics are the sum and sum of squares of notebook 03, taken down each
# column (over the batch) instead of along a row. The transformers this course builds have none.
#
# Next, notebook 03 fuses siblings rather than producer and consumer: operations that share an input.
#
# ## Further reading
#
# * Triton's tutorials, [fused softmax](https://triton-lang.org/main/getting-started/tutorials/02-fused-softmax.html)
#   and [layer normalization](https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html) (forward
#   and backward, with the partial sums of the weight's gradient).
# * Zhang and Sennrich, [Root Mean Square Layer Normalization](https://arxiv.org/abs/1910.07467) (2019): RMSNorm.
# * Ba, Kiros and Hinton, [Layer Normalization](https://arxiv.org/abs/1607.06450) (2016).
# * [Liger-Kernel](https://github.com/linkedin/Liger-Kernel): production Triton kernels for RMSNorm, LayerNorm and
#   their backward passes.
# * Welford's online variance, and why `E[x²] − E[x]²` cancels:
#   [Algorithms for calculating variance](https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance).
# * Goldberg, [What every computer scientist should know about floating-point arithmetic](https://docs.oracle.com/cd/E19957-01/806-3568/ncg_goldberg.html):
#   ulps, unit roundoff and how rounding errors add up.
