"""Schematic drawings of the course's ideas, one function per picture, each returning a matplotlib Figure.

DIAGRAMS maps (notebook folder, file name) to (function, alt text). `python -m autograder.teach.diagrams`
(re)writes every picture as an SVG into solutions/<notebook>/figures/, from which the student release copies
it; the notebooks show them with `![alt text](figures/NAME.svg)`. The SVGs are deterministic (fixed hash
salt, no date, matplotlib's bundled DejaVu Sans drawn as paths), so tests/test_diagrams.py can regenerate each
one and compare it with the committed file byte for byte.

One colour scheme throughout: HBM (off-chip DRAM) orange, on-chip memory (shared memory / SRAM and
registers) blue, compute green, the L2 cache violet, anything masked or never materialised grey.

memory_hierarchy_measured(profile) draws the hierarchy with the reader's measured copy bandwidth and matmul
rate, for notebook 01 to call at run time.
"""
from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from autograder.teach.drawing import RC
from autograder.teach.figures_fusion import (
    compiler_pipeline,
    gemm_tile_epilogue,
    horizontal_fusion,
    qkv_stacking,
)
from autograder.teach.figures_hopper import persistent_schedule, warp_schedules
from autograder.teach.figures_memory import (  # noqa: F401  (memory_hierarchy_measured: notebook 01 calls it from here)
    memory_hierarchy,
    memory_hierarchy_measured,
    program_grid,
    rmsnorm_row_program,
    unfused_vs_fused,
)
from autograder.teach.figures_streaming import (
    chunked_cross_entropy,
    flash_attention_loop,
    flash_backward,
    online_softmax,
    save_vs_recompute,
)

# ---------------------------------------------------------------------------------------------------------
# The table and the writer

DIAGRAMS = {
    ("01_hbm_cost_model", "memory_hierarchy.svg"): (
        memory_hierarchy,
        ("The GPU memory hierarchy: registers and shared memory on each SM, the L2 cache, then HBM, with their "
        "capacities and bandwidths; a kernel loads its inputs from HBM and stores its outputs back.")),
    ("01_hbm_cost_model", "program_grid.svg"): (
        program_grid,
        ("A 1-D tensor of 20 elements split into blocks of 8, one program per block with offsets pid*BLOCK + "
        "arange(BLOCK) and the lanes past N masked off; and a 2-D grid of programs over a matrix, tile by tile.")),
    ("01_hbm_cost_model", "unfused_vs_fused.svg"): (
        unfused_vs_fused,
        ("Eager PyTorch runs y = sin(x*1.25 + 0.5) as three kernels that move 6|x| through HBM; one fused kernel "
        "keeps the intermediates in registers and moves 2|x|.")),
    ("02_vertical_fusion", "rmsnorm_row_program.svg"): (
        rmsnorm_row_program,
        ("A fused RMSNorm runs one program per row: it loads the row, reduces the sum of squares in registers, "
        "normalises and stores, 2|x| of traffic against about 5|x| for eager PyTorch's three kernels.")),
    ("03_horizontal_fusion", "qkv_stacking.svg"): (
        qkv_stacking,
        ("Three GEMMs x@Wq, x@Wk, x@Wv read x three times; stacking the weights into one d x 3d matrix makes one "
        "GEMM that reads x once and writes q, k and v side by side.")),
    ("03_horizontal_fusion", "horizontal_fusion.svg"): (
        horizontal_fusion,
        ("A multi-tensor optimizer step: instead of one launch per parameter tensor, one launch whose programs "
        "look up their tensor and block in an address table.")),
    ("04_gemm_epilogue_fusion", "gemm_tile_epilogue.svg"): (
        gemm_tile_epilogue,
        ("A GEMM program accumulates one output tile over K from tiles of A and B in registers, then applies "
        "bias, GELU and the residual to that tile before its single store.")),
    ("05_streaming_reduction_fusion", "online_softmax.svg"): (
        online_softmax,
        ("The online softmax reads a row block by block and keeps a running max m and sum s, rescaling the sum "
        "by exp(m_old - m_new) whenever the max grows; worked through on eight numbers.")),
    ("05_streaming_reduction_fusion", "flash_attention_loop.svg"): (
        flash_attention_loop,
        ("FlashAttention's forward: one program keeps a query block on chip while key and value blocks stream "
        "past; scores and probabilities exist one tile at a time, and the output is rescaled as the max grows.")),
    ("05_streaming_reduction_fusion", "chunked_cross_entropy.svg"): (
        chunked_cross_entropy,
        ("Chunked cross-entropy multiplies the hidden states by the lm_head a chunk of rows at a time, computing "
        "each chunk's loss and gradients from its logits, so the full N x V logits are never allocated.")),
    ("06_compiler_fusion", "compiler_pipeline.svg"): (
        compiler_pipeline,
        ("torch.compile's pipeline: Dynamo captures an FX graph (splitting it at graph breaks), AOTAutograd builds "
        "the joint forward-backward graph and partitions it, Inductor fuses and schedules, and Triton kernels "
        "come out.")),
    ("07_fusion_for_training", "save_vs_recompute.svg"): (
        save_vs_recompute,
        ("Eager attention saves the N x N probabilities for the backward; FlashAttention saves only its output and "
        "one log-sum-exp per row, and recomputes the probabilities tile by tile in the backward.")),
    ("07_fusion_for_training", "flash_backward.svg"): (
        flash_backward,
        ("FlashAttention's backward as two kernels: a key-parallel one accumulating dK and dV and a query-parallel "
        "one accumulating dQ, both using delta = rowsum(dO * O) and rebuilding P per tile.")),
    ("08_hopper_attention", "warp_schedules.svg"): (
        warp_schedules,
        ("Three schedules of a FlashAttention key loop on one Hopper multiprocessor, as time lines: one group of "
        "warps that copies and computes and waits for its tiles; a producer warp group copying K and V while two "
        "consumer groups compute in step, so the tensor cores idle during both softmaxes; and ping-pong, where one "
        "consumer's softmax runs under the other's matrix products and the tensor cores stay busy.")),
    ("08_hopper_attention", "persistent_schedule.svg"): (
        persistent_schedule,
        ("Tiles of output on four multiprocessors over time: one program per tile loads, loops, stores and exits "
        "before the next starts; a persistent program per multiprocessor loops over its tiles and loads the next "
        "tile's queries while it stores the last tile's output, with the same partial last wave.")),
}

SVG_METADATA = {"Date": None, "Creator": None}


def render(func) -> Figure:
    """Call a drawing function under the module's fixed style."""
    with matplotlib.rc_context(RC):
        return func()


def svg_bytes(fig: Figure) -> bytes:
    """The figure as SVG, deterministic. Text is drawn as paths (it looks the same in every browser); the
    markup's indentation is dropped and each path's data put on one line, about a quarter off the size."""
    buf = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="svg", metadata=SVG_METADATA)
    data = re.sub(rb'd="([^"]*)"', lambda m: b'd="' + b" ".join(m.group(1).split()) + b'"', buf.getvalue())
    return re.sub(rb"\n[ \t]+", b"\n", data)


def save_svg(fig: Figure, path) -> None:
    Path(path).write_bytes(svg_bytes(fig))


def write_all(root=None) -> list[Path]:
    """(Re)write every diagram into <root>/<notebook>/figures/ (root: the repository's solutions/)."""
    root = Path(root) if root is not None else Path(__file__).resolve().parents[2] / "solutions"
    written = []
    for (notebook, name), (func, _alt) in DIAGRAMS.items():
        out = root / notebook / "figures"
        out.mkdir(parents=True, exist_ok=True)
        save_svg(render(func), out / name)
        written.append(out / name)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for path in write_all(argv[0] if argv else None):
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

