"""FlashAttention forward in Gluon for Hopper (sm_90): TMA copies, mbarriers and warp-group MMA, spelled out.

Same contract as kernels.flash_attention: q, k, v contiguous (B, H, N, D) float16 or bfloat16 (k and v may have
N_kv rows), o = softmax(Q Kᵀ / sqrt(D)) V like q, and lse (B, H, N) float32, each row's natural log-sum-exp.

Algorithm. One program owns BLOCK_M = 128 query rows of one head and 8 warps (two warp groups, 64 rows each).
1. Q's tile is brought into shared memory once by the TMA copy engine; K and V tiles of BLOCK_N keys stream
   through a ring of STAGES shared-memory slots, each slot with its own mbarrier for K and for V. The copy of
   tile j + STAGES - 1 is issued before tile j is consumed, so the engine works while the tensor cores do.
2. S = Q Kᵀ: one `warpgroup_mma` with both operands in shared memory (Kᵀ is a permuted view of the K slot,
   no copy), the float32 result in registers in the MMA layout.
3. Online softmax in base 2: scores are scaled by log2(e) / sqrt(D) so that exp becomes exp2 (one MUFU
   instruction, and scale-and-subtract one FMA); the running max m and sum l are rescaled by exp2(m_old - m_new).
4. O += P V: P is cast to 16 bits and handed to the second `warpgroup_mma` from registers (the A operand may
   live there), V from its shared-memory slot.
5. Masking only where needed: a key tile that crosses the causal diagonal or the end of K/V gets -inf scores
   (a runtime branch taken by at most two tiles per program); tiles above the diagonal are never visited.
   Causal programs start with the last query blocks (the longest rows), which shortens the tail.
Flops: 4 B H N N_kv D (about half with the causal mask). Bytes: at least 2 B H (N + 2 N_kv + N) D for q, k, v, o
in 16 bits plus 4 B H N for lse; K and V are re-read once per query block, mostly from L2.

The road of issue 49, item 5 (notebook 08), and what each step adds:
- `tl` kernel of notebook 05: pointer loads, the compiler picks layouts, pipelining and MMA instructions.
- TMA descriptors in `tl`: the copy engine moves the tiles, no address arithmetic in the warps.
- THIS STEP, TMA + wgmma in Gluon: the same pipeline written by hand: explicit layouts, an explicit ring of
  shared-memory slots behind mbarriers, explicit asynchronous warp-group MMAs with P from registers. It
  removes the compiler's guesses (layout conversions, stage count) but still runs copy-wait, MMA, softmax and
  MMA in order within each warp group: the tensor cores idle during the softmax.
- Next, a producer warp and mbarriers (`gl.warp_specialize`): one warp of the program only issues TMA copies,
  with "ready" and "empty" barriers per slot, and the two consumer warp groups get most of the registers
  (setmaxnreg). Plan: move step 1 into a worker partition of 1 warp, replace the thread barrier that guards
  slot reuse by an "empty" mbarrier each consumer arrives on after its P V MMA.
- Then ping-pong: consumer group 0 runs its softmax while group 1's MMAs run, handed over by a pair of named
  barriers; and within a group, S_{j+1} = Q K_{j+1}ᵀ is issued before the softmax of tile j.
- Then persistent scheduling: one program per multiprocessor walking (head, query block) tiles, longest
  causal tiles first, so the copy of the next tile's Q overlaps the epilogue of the current one.

Compiled for sm_90 (no GPU needed) with Triton 3.6.0 and 3.7.1: tests/kernels/test_flash_attention_gluon.py.
Measured with bench/gluon_attention.py on a Hopper GPU.
"""

from __future__ import annotations

import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels.tma import hopper_or_newer, tma_ready

LOG2E = 1.4426950408889634
NUM_WARPS = 8  # two warp groups; the MMA layout gives each warp 16 query rows
BLOCK_M = 128
# The barrier across all warps of a program: gl.thread_barrier in Triton 3.6, gl.barrier from 3.7 on.
cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier


@gluon.jit
def _visible_scores(s, rows, cols, n_kv, CAUSAL: gl.constexpr):
    # -inf for keys past the end of K/V (the next head's rows in the flat view) and, causal, after the query.
    keep = cols[None, :] < n_kv
    if CAUSAL:
        keep = keep & (rows[:, None] >= cols[None, :])
    return gl.where(keep, s, -float("inf"))


@gluon.jit
def _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, tile, kv_row, n_tiles,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # Ask the copy engine for K and V of key tile `tile` into slot tile % STAGES (nothing past the last tile).
    slot = tile % STAGES
    go = tile < n_tiles
    row = kv_row + tile * BLOCK_N
    mbarrier.expect(k_bars.index(slot), k_desc.block_type.nbytes, pred=go)
    tma.async_copy_global_to_shared(k_desc, [row, 0], k_bars.index(slot), k_smem.index(slot), pred=go)
    mbarrier.expect(v_bars.index(slot), v_desc.block_type.nbytes, pred=go)
    tma.async_copy_global_to_shared(v_desc, [row, 0], v_bars.index(slot), v_smem.index(slot), pred=go)


@gluon.jit
def _flash_attention_gluon_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, N, N_KV, qk_scale,
                                  BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                                  CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    BLOCK: gl.constexpr = q_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    # Accumulator layouts of the two MMAs: warps stacked along the rows, instruction N = the whole tile width.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    block_m = gl.num_programs(0) - 1 - gl.program_id(0) if CAUSAL else gl.program_id(0)
    bh = gl.program_id(1)
    q_row = bh * N + block_m * BLOCK  # rows past N (the next head's) are computed, never stored
    kv_row = bh * N_KV

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    if CAUSAL:
        end = gl.minimum((block_m + 1) * BLOCK, N_KV)
    else:
        end = N_KV
    n_tiles = gl.cdiv(end, BLOCK_N)
    first_masked = N_KV // BLOCK_N  # tiles from here on reach past the end of K/V
    if CAUSAL:
        first_masked = gl.minimum(first_masked, (block_m * BLOCK) // BLOCK_N)  # ... or cross the diagonal

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for t in gl.static_range(STAGES - 1):
        _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, t, kv_row, n_tiles, BLOCK_N, STAGES)

    rows = block_m * BLOCK + gl.arange(0, BLOCK, layout=row_s)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    m_i = gl.full([BLOCK], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bar, 0)

    for j in range(n_tiles):
        # Every warp is done with tile j - 1 (its MMAs waited for), so its slot may be refilled.
        cta_barrier()
        _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, j + STAGES - 1, kv_row, n_tiles, BLOCK_N, STAGES)
        slot = j % STAGES
        phase = (j // STAGES) & 1
        k_tile = k_smem.index(slot)
        v_tile = v_smem.index(slot)
        mbarrier.wait(k_bars.index(slot), phase)
        s = warpgroup_mma(q_smem, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        if j >= first_masked:
            s = _visible_scores(s, rows, j * BLOCK_N + offs_n, N_KV, CAUSAL)
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, axis=1)
        m_i = m_new
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(v_bars.index(slot), phase)
        acc = warpgroup_mma(p16, v_tile, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))

    o = acc / gl.convert_layout(l_i, row_o)[:, None]
    o_rows = block_m * BLOCK + gl.arange(0, BLOCK, layout=row_o)
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    flat = bh.to(gl.int64) * N + o_rows
    gl.store(o_ptr + flat[:, None] * HEAD_DIM + o_cols[None, :], o.to(dtype), mask=(o_rows < N)[:, None])
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453  # base 2 back to natural log
    gl.store(lse_ptr + bh.to(gl.int64) * N + rows, lse, mask=rows < N)


def gluon_settings(head_dim: int) -> dict:
    """Key tile and ring depth by head size: 128 x 128 score tiles at D = 64 (three slots: 112 KB of shared
    memory), 128 x 64 at D = 128 (three slots: 128 KB), keeping the float32 S and O accumulators at 96 registers
    a thread or less. First guesses, not yet timed: bench/gluon_attention.py times them and their neighbours."""
    if head_dim <= 64:
        return dict(BLOCK_N=128, STAGES=3)
    return dict(BLOCK_N=64, STAGES=3)


def shared_layout(block: list[int], dtype: torch.dtype):
    """The swizzled shared-memory layout a TMA tile of `block` 16-bit elements lands in (and wgmma reads)."""
    return gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)


def check_gluon_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    """Clear errors for what this kernel does not take; the device is checked last."""
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"want q (B, H, N, D) and k, v (B, H, N_kv, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"the Gluon kernel takes float16 or bfloat16 q, k, v of one dtype, got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    if q.shape[3] not in (64, 128):
        raise ValueError(f"head_dim {q.shape[3]} is not supported by the Gluon kernel: use 64 or 128")
    if causal and k.shape[2] != q.shape[2]:
        raise ValueError(f"causal attention here needs as many keys as queries, got N={q.shape[2]}, "
                         f"N_kv={k.shape[2]}")
    if not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError("q, k and v must be contiguous (B, H, N, D) tensors: call .contiguous() first")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not hopper_or_newer(q.device) or torch.cuda.get_device_capability(q.device)[0] != 9:
        raise RuntimeError(f"flash_attention_gluon runs on Hopper GPUs (compute capability 9.x) only, not on "
                           f"{q.device}: use kernels.flash_attention.flash_attention elsewhere")
    if not all(tma_ready(t) for t in (q, k, v)):
        raise ValueError("q, k and v must start at 16-byte-aligned addresses for the copy engine")


def flash_attention_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                          settings: dict | None = None):
    """(o, lse) as kernels.flash_attention.flash_attention, through the Gluon kernel (Hopper only)."""
    check_gluon_inputs(q, k, v, causal)
    B, H, N, D = q.shape
    n_kv = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if N == 0 or n_kv == 0 or B * H == 0:
        return o, lse
    cfg = {**gluon_settings(D), **(settings or {})}
    def desc(t, rows):
        flat = t.view(-1, D)
        return TensorDescriptor.from_tensor(flat, [rows, D], shared_layout([rows, D], t.dtype))

    grid = (triton.cdiv(N, BLOCK_M), B * H)
    _flash_attention_gluon_kernel[grid](
        desc(q, BLOCK_M), desc(k, cfg["BLOCK_N"]), desc(v, cfg["BLOCK_N"]), o, lse, N, n_kv,
        LOG2E / math.sqrt(D), BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=D, STAGES=cfg["STAGES"], CAUSAL=causal,
        num_warps=NUM_WARPS)
    return o, lse
