"""Notebook 04's GEMM kernels against float64 references: the plain tiled matmul, the fused epilogue and the
fused SwiGLU, through the pointer kernels and the TMA path (the interpreter runs both; on a GPU the TMA path
runs compiled on Hopper, in bf16 too)."""

import pytest
import torch

from autograder import runtime
from kernels import gemm_epilogue as ge
from kernels import matmul as mm
from kernels import swiglu as sw

DEVICE = runtime.device()
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _rel(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


def _epilogue_args(m, k, n, dtype, weight_layout="kn", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(k, n, generator=g) / k**0.5
    b = 0.5 * torch.randn(n, generator=g)
    r = torch.randn(m, n, generator=g)
    x, w, b, r = (t.to(dtype).to(DEVICE) for t in (x, w, b, r))
    if weight_layout == "nk":  # nn.Linear.weight.t(): a transposed view of a row-major (N, K)
        w = w.t().contiguous().t()
    return x, w, b, r


def _assert_epilogue_close(out, args, dtype):
    ref = ge.gemm_gelu_residual_reference(*args)
    assert out.dtype == dtype and out.shape == ref.shape
    # Within a few roundings of the output dtype of the exact result (the kernel rounds once).
    assert _rel(out, ref) <= 3 * _rel(ref.to(dtype), ref) + TOL[torch.float32]


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 7, 5), (37, 100, 70), (130, 257, 96), (300, 64, 264)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gemm_gelu_residual_matches_reference(m, k, n, dtype):
    args = _epilogue_args(m, k, n, dtype)
    _assert_epilogue_close(ge.gemm_gelu_residual(*args), args, dtype)


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_gemm_epilogue_tma_kernel_matches_reference_in_both_weight_layouts(layout):
    """The TMA kernel itself, at tiles small enough for the interpreter: ragged edges in M, N and K."""
    args = _epilogue_args(300, 72, 264, torch.float16, layout)
    for subtiles in (1, 2):
        cfg = dict(ge.TMA_SETTINGS[0], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, SUBTILES=subtiles)
        _assert_epilogue_close(ge._launch_epilogue_tma(*args, (cfg,)), args, torch.float16)


def test_gemm_epilogue_handles_strided_views():
    x, w, b, r = _epilogue_args(40, 48, 24, torch.float32)
    x_padded = torch.zeros(40, 64, device=DEVICE)[:, :48]
    x_padded.copy_(x)
    r_t = r.t().contiguous().t()  # column-major residual
    b_strided = torch.zeros(48, device=DEVICE)[::2]
    b_strided.copy_(b)
    args = (x_padded, w, b_strided, r_t)
    _assert_epilogue_close(ge.gemm_gelu_residual(*args), args, torch.float32)
    _assert_epilogue_close(ge.gemm_gelu_residual_tma(*args), args, torch.float32)  # falls back


def test_gelu_is_the_tanh_form_and_the_epilogue_is_more_precise_than_eager():
    args = _epilogue_args(64, 512, 128, torch.float16, seed=3)
    ref = ge.gemm_gelu_residual_reference(*args)
    exact_gelu = torch.nn.functional.gelu(args[0].double() @ args[1].double() + args[2].double()) + args[3].double()
    assert _rel(exact_gelu, ref) > 1e-4  # the erf form differs measurably: the reference is the tanh one
    fused = _rel(ge.gemm_gelu_residual(*args), ref)
    eager = _rel(ge.gemm_gelu_residual_eager(*(t.float() for t in args)).half(), ref)  # rounds once too (fp32)
    assert fused <= 1.05 * eager


@pytest.mark.parametrize("bad,message", [
    (lambda x, w, b, r: (x, w[:-1], b, r), "weights must all be"),
    (lambda x, w, b, r: (x, w, b[:-1], r), "want b"),
    (lambda x, w, b, r: (x, w, b, r[:-1]), "want b"),
    (lambda x, w, b, r: (x, w.double(), b, r), "share a floating dtype"),
    (lambda x, w, b, r: (x, w, b.double(), r), "must have x's dtype"),
    (lambda x, w, b, r: (x[0], w, b, r), "want x"),
])
def test_gemm_epilogue_refuses_bad_inputs_clearly(bad, message):
    args = bad(*_epilogue_args(8, 16, 8, torch.float32))
    for fn in (ge.gemm_gelu_residual, ge.gemm_gelu_residual_tma):
        with pytest.raises(ValueError, match=message):
            fn(*args)


def test_gemm_epilogue_counts():
    x, w = torch.empty(10, 20, dtype=torch.bfloat16), torch.empty(20, 30, dtype=torch.bfloat16)
    assert ge.gemm_gelu_residual_flops(x, w) == 2 * 10 * 20 * 30
    assert ge.gemm_gelu_residual_bytes(x, w) == 2 * (200 + 600 + 30 + 2 * 300)
    assert ge.gemm_gelu_residual_bytes(x, w, fused=False) - ge.gemm_gelu_residual_bytes(x, w) == 2 * 4 * 300


def _swiglu_args(m, k, n, dtype, layout="kn", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    ws = [(torch.randn(k, n, generator=g) / k**0.5).to(dtype).to(DEVICE) for _ in range(2)]
    if layout == "nk":
        ws = [w.t().contiguous().t() for w in ws]
    return (x, *ws)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 33, 17), (130, 257, 96)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_swiglu_matches_reference(m, k, n, dtype):
    args = _swiglu_args(m, k, n, dtype)
    ref = sw.swiglu_reference(*args)
    out = sw.swiglu(*args)
    assert out.dtype == dtype and out.shape == (m, n)
    assert _rel(out, ref) <= 3 * _rel(ref.to(dtype), ref) + TOL[torch.float32]


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_swiglu_tma_kernel_matches_reference(layout):
    args = _swiglu_args(300, 72, 136, torch.float16, layout)
    cfg = dict(sw.SWIGLU_TMA_SETTINGS[0], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    ref = sw.swiglu_reference(*args)
    assert _rel(sw._launch_swiglu_tma(*args, (cfg,)), ref) <= 3 * _rel(ref.half(), ref)


def test_swiglu_refuses_mismatched_weights():
    x, wg, wu = _swiglu_args(4, 8, 6, torch.float32)
    with pytest.raises(ValueError, match="weights must all be"):
        sw.swiglu(x, wg, wu[:, :-1])
    with pytest.raises(ValueError, match="share a floating dtype"):
        sw.swiglu(x, wg, wu.half())


def test_swiglu_bytes_count_x_once_and_no_intermediates_fused():
    x, w = torch.empty(10, 20, dtype=torch.float16), torch.empty(20, 30, dtype=torch.float16)
    assert sw.swiglu_bytes(x, w, w) == 2 * (200 + 2 * 600 + 300)
    assert sw.swiglu_bytes(x, w, w, fused=False) == 2 * (400 + 2 * 600 + 7 * 300)
    assert sw.swiglu_flops(x, w, w) == 4 * 10 * 20 * 30


@pytest.mark.parametrize("tile", [dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1),
                                  dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=16, GROUP_M=4)])
def test_plain_matmul_any_tile_and_order(tile):
    x = torch.randn(70, 45, device=DEVICE)
    w = torch.randn(45, 90, device=DEVICE)
    got = mm.matmul(x, w, num_warps=4, num_stages=2, **tile)
    assert _rel(got, x.double() @ w.double()) < 1e-6


def test_grouped_order_visits_every_tile_once():
    """grouped_tile, run as a kernel over every tile index, is a permutation of the tiles."""
    import triton
    import triton.language as tl

    @triton.jit
    def visit(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
        pid_m, pid_n = mm.grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
        tl.store(out_ptr + tl.program_id(0) * 2, pid_m)
        tl.store(out_ptr + tl.program_id(0) * 2 + 1, pid_n)

    tiles_m, tiles_n = 7, 5  # 7 tile-rows: the last group is short
    out = torch.full((tiles_m * tiles_n, 2), -1, dtype=torch.int32, device=DEVICE)
    visit[(tiles_m * tiles_n,)](out, tiles_m * 16, tiles_n * 16, BLOCK_M=16, BLOCK_N=16, GROUP_M=3)
    seen = {tuple(p) for p in out.tolist()}
    assert seen == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}
    assert out[:3].tolist() == [[0, 0], [1, 0], [2, 0]]  # down the first group's column first


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n,layout", [(1000, 520, 776, "kn"), (4096, 1024, 2048, "nk"), (16, 4096, 4096, "kn"),
                                          (513, 4104, 264, "kn")])
def test_gemm_epilogue_bf16_on_gpu_both_paths(m, k, n, layout):
    args = _epilogue_args(m, k, n, torch.bfloat16, layout)
    for fn in (ge.gemm_gelu_residual, ge.gemm_gelu_residual_tma):
        _assert_epilogue_close(fn(*args), args, torch.bfloat16)


@pytest.mark.gpu
def test_tma_path_applies_on_hopper_only_where_it_can():
    from kernels.tma import hopper_or_newer, tma_path_applies

    x, w, b, r = _epilogue_args(4096, 1024, 2048, torch.bfloat16)
    assert tma_path_applies(x, w) == hopper_or_newer(x.device)
    assert not tma_path_applies(x[:16], w)  # decode: the pointer kernel
    assert not tma_path_applies(x.float(), w.float())  # fp32: tl.dot in ieee, no wgmma path here
    assert tma_path_applies(x[:, :1001], w[:1001])  # a ragged K is fine: rows still start 16-byte aligned
    odd = torch.randn(4096, 1001, device="cuda", dtype=torch.bfloat16)  # rows 2002 bytes apart
    assert not tma_path_applies(odd, w[:1001])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_swiglu_bf16_on_gpu_both_paths(layout):
    args = _swiglu_args(2048, 1024, 1376, torch.bfloat16, layout)
    ref = sw.swiglu_reference(*args)
    for fn in (sw.swiglu, sw.swiglu_tma):
        assert _rel(fn(*args), ref) <= 3 * _rel(ref.to(torch.bfloat16), ref)


@pytest.mark.gpu
def test_matmul_tile_resources_are_read_from_the_compiled_kernel():
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    small = mm.tile_resources(x, x, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    big = mm.tile_resources(x, x, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    assert 0 < small["registers"] <= 255 and small["threads"] == 128 and big["threads"] == 256
    assert big["shared_bytes"] > small["shared_bytes"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 100, 300])
def test_every_regime_compiles_for_float32_on_gpu(m):
    """float32 tiles take twice the shared memory: each regime's settings must still fit the GPU."""
    args = _epilogue_args(m, 1024, 512, torch.float32)
    _assert_epilogue_close(ge.gemm_gelu_residual(*args), args, torch.float32)
    x, wg, wu = _swiglu_args(m, 1024, 512, torch.float32)
    ref = sw.swiglu_reference(x, wg, wu)
    assert _rel(sw.swiglu(x, wg, wu), ref) <= 3 * _rel(ref.float(), ref) + TOL[torch.float32]
