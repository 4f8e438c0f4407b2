"""Does `tl.range(..., warp_specialize=True)` compute attention right on Hopper? One FlashAttention forward loop,
non-causal, N a multiple of every tile, each setting checked against float32 math; RESCALE picks where the
running sum is rescaled (inside tl.dot's accumulator, or before it). Needs sm_90 and Triton 3.6+.
    python -m bench.ws_repro        (prints one line per setting: its max error, or why it did not run)
Upstream's record of the same (notebook 08, section 5): triton-lang/triton issue 8311, open."""
import itertools

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd(q_ptr, k_ptr, v_ptr, o_ptr, N, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
         WS: tl.constexpr, RESCALE: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    qd = tl.make_tensor_descriptor(q_ptr + bh * N * D, shape=[N, D], strides=[D, 1], block_shape=[BM, D])
    kd = tl.make_tensor_descriptor(k_ptr + bh * N * D, shape=[N, D], strides=[D, 1], block_shape=[BN, D])
    vd = tl.make_tensor_descriptor(v_ptr + bh * N * D, shape=[N, D], strides=[D, 1], block_shape=[BN, D])
    q = qd.load([tl.program_id(0) * BM, 0])
    m = tl.full([BM], -float("inf"), tl.float32)
    l = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in tl.range(0, N, BN, warp_specialize=WS):
        s = tl.dot(q, kd.load([start, 0]).T) * scale
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        v = vd.load([start, 0])
        if RESCALE == 0:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        else:
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc)
        m = m_new
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(o_ptr + (bh * N + rows)[:, None] * D + tl.arange(0, D)[None, :], (acc / l[:, None]).to(tl.bfloat16))

def run(D, BM, BN, warps, stages, ws, rescale, B=2, H=8, N=2048):
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    o = torch.empty_like(q)
    _fwd[(N // BM, B * H)](q, k, v, o, N, D ** -0.5 * 1.4426950408889634, BM, BN, D, ws, rescale,
                           num_warps=warps, num_stages=stages)
    ref = torch.softmax(q.float() @ k.float().transpose(-1, -2) * D ** -0.5, -1) @ v.float()
    return ((o.float() - ref).abs().max() / ref.abs().max()).item()

if __name__ == "__main__":
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    for D, (BM, BN), stages, ws, rescale in itertools.product((64, 128), ((64, 128), (128, 64), (128, 128), (64, 64)),
                                                              (2, 3), (True, False), (0, 1)):
        warps = 4 if ws else 8
        try:
            err = f"{run(D, BM, BN, warps, stages, ws, rescale):.2e}"
        except Exception as exc:  # a setting this GPU or Triton cannot build: say so and go on
            err = f"not run ({type(exc).__name__}: {str(exc).splitlines()[0][:60]})"
        print(f"D={D:3} {BM:3}x{BN:<3} stages={stages} warps={warps} warp_specialize={ws!s:5} rescale={rescale}: {err}")
