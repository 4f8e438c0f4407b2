"""The program-drawing helper: which program touched which elements, masked lanes, accesses out of bounds."""

import pytest
import torch
import triton
import triton.language as tl
from matplotlib.figure import Figure
from triton.runtime.jit import JITFunction

from autograder.teach.programs import draw_programs, record_programs


@triton.jit
def _scaled_add(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _unmasked_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def _double(v):
    return v * 2


def _tile_double(x_ptr, y_ptr, M, N, sxm, sxn, sym, syn, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask)
    tl.store(y_ptr + rows[:, None] * sym + cols[None, :] * syn, double(x), mask=mask)


double = JITFunction(_double)  # compiled-mode kernels, as @triton.jit makes them on a GPU machine


def test_each_program_reads_and_writes_its_block_and_masks_the_tail():
    x, y, out = torch.arange(10.0), torch.ones(10), torch.zeros(10)
    rec = record_programs(_scaled_add, (3,), x, y, out, 0.5, 10, BLOCK=4, num_warps=4)
    assert rec.cells("x_ptr", "load") == {(0,): {(i,) for i in range(4)}, (1,): {(i,) for i in range(4, 8)},
                                          (2,): {(8,), (9,)}}
    assert rec.cells("out_ptr", "store") == rec.cells("y_ptr", "load") == rec.cells("x_ptr", "load")
    assert rec.cells("out_ptr", "store", "masked") == {(0,): set(), (1,): set(), (2,): {(10,), (11,)}}
    assert not rec.out_of_bounds()
    assert torch.equal(rec.tensors["out_ptr"], 0.5 * x + y)
    assert torch.equal(out, torch.zeros(10)), "the caller's tensors are left alone"


def test_an_unmasked_tail_is_recorded_out_of_bounds_and_not_performed():
    x = torch.arange(10.0)
    rec = record_programs(_unmasked_copy, (3,), x, torch.zeros(10), 10, BLOCK=4)
    bad = rec.out_of_bounds()
    assert {(a.program, a.kind, a.tensor) for a in bad} == {((2,), "load", "x_ptr"), ((2,), "store", "out_ptr")}
    assert all(sorted(a.outside) == [(10,), (11,)] for a in bad)
    assert torch.equal(rec.tensors["out_ptr"], x)
    assert "OUT OF BOUNDS" in rec.summary()


def test_a_2d_launch_of_a_compiled_mode_kernel_on_a_strided_view():
    """What a GPU machine gives (a JITFunction calling a @triton.jit helper) runs in the interpreter for the call."""
    kernel = JITFunction(_tile_double)
    x = torch.arange(70.0).reshape(5, 14)[:, ::2]  # 5 x 7, every other column
    y = torch.empty(5, 7)
    rec = record_programs(kernel, (2, 2), x, y, 5, 7, *x.stride(), *y.stride(), BM=4, BN=4)
    assert torch.equal(rec.tensors["y_ptr"], 2 * x)
    assert rec.cells("x_ptr", "load")[(1, 1)] == {(4, 4), (4, 5), (4, 6)}
    assert rec.cells("x_ptr", "load")[(0, 0)] == {(r, c) for r in range(4) for c in range(4)}
    assert isinstance(globals()["double"], JITFunction), "the helper swapped in for the call is put back"


def test_drawing_returns_a_figure_with_the_recording():
    x = torch.arange(10.0)
    fig = draw_programs(_unmasked_copy, (3,), x, torch.zeros(10), 10, BLOCK=4)
    assert isinstance(fig, Figure) and len(fig.recording.out_of_bounds()) == 2
    fig = draw_programs(_scaled_add, (3,), x, x.clone(), torch.zeros(10), 1.0, 10, BLOCK=4)
    assert isinstance(fig, Figure) and len(fig.axes) == 3


def test_a_non_kernel_is_refused_clearly():
    with pytest.raises(TypeError, match="@triton.jit kernel"):
        record_programs(object(), (1,), torch.zeros(4))
