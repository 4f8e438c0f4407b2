"""Schematic drawings of the course's ideas, one function per picture, each returning a matplotlib Figure.

DIAGRAMS is the one place that says what each picture is: its file name maps to its drawing function, its alt
text, the notebook and the section(s) that show it (words of their `#`/`##` headings) and its subject as key
words, each of which the alt text, the drawing and the prose of the section that shows it all name
(autograder.teach.placement checks that, tests/teach/test_placement.py runs it over every notebook).
A notebook's text source shows a picture as `![](figures/NAME.svg)`, without alt text: the build
(autograder.publish.build) writes the alt text from here.

`python -m autograder.teach.diagrams` (re)writes every picture as an SVG into solutions/<notebook>/figures/. The
SVGs are deterministic (fixed hash salt, no date, matplotlib's bundled DejaVu Sans drawn as paths), so
tests/teach/test_diagrams.py can regenerate each one and compare it with the committed file byte for byte.

One colour scheme throughout: HBM (off-chip DRAM) orange, on-chip memory (shared memory / SRAM and
registers) blue, compute green, the L2 cache violet, anything masked or never materialised grey.

memory_hierarchy_measured(profile) draws the hierarchy with the reader's measured copy bandwidth and matmul
rate, for notebook 01 to call at run time.
"""
from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib
from matplotlib.figure import Figure

from autograder.teach.drawing import RC
from autograder.teach.figures_fusion import (
    compiler_pipeline,
    gemm_tile_epilogue,
    multi_tensor_launch,
    qkv_stacking,
    shared_input_siblings,
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
    vocab_tile_cross_entropy,
)

# ---------------------------------------------------------------------------------------------------------
# The registry and the writer


@dataclass(frozen=True)
class Diagram:
    notebook: str  # the folder under solutions/ whose figures/ holds it
    draw: Callable[[], Figure]
    alt: str  # what the picture shows, for a reader who cannot see it; the notebook takes it from here
    sections: tuple[str, ...]  # words of the heading of each section that shows it
    keywords: tuple[str, ...]  # its subject: named by the alt text, the drawing and the section's prose


DIAGRAMS: dict[str, Diagram] = {
    "memory_hierarchy.svg": Diagram(
        "01_hbm_cost_model", memory_hierarchy,
        ("The GPU memory hierarchy: registers and shared memory on each SM, the L2 cache shared by all SMs, then "
         "HBM, each level larger and slower than the one above; a kernel loads its inputs from HBM and stores "
         "its outputs back."),
        ("Two ceilings",), ("registers", "shared memory", "L2", "HBM")),
    "program_grid.svg": Diagram(
        "01_hbm_cost_model", program_grid,
        ("A 1-D tensor of 20 elements split into blocks of 8, one program per block with offsets pid*BLOCK + "
         "arange(BLOCK) and the lanes past N masked off; and a 2-D grid of programs over a matrix, tile by tile."),
        ("Reading a Triton kernel",), ("program", "block", "lanes", "grid")),
    "unfused_vs_fused.svg": Diagram(
        "01_hbm_cost_model", unfused_vs_fused,
        ("Eager PyTorch runs y = sin(x*1.25 + 0.5) as three kernels that move 6|x| through HBM; one fused kernel "
         "reads x once, keeps the intermediates in registers, writes y once and moves 2|x|."),
        ("first fused kernel",), ("three kernels", "HBM", "6|x|", "2|x|")),
    "rmsnorm_row_program.svg": Diagram(
        "02_vertical_fusion", rmsnorm_row_program,
        ("A fused RMSNorm runs one program per row: it loads the row, reduces the sum of squares in registers, "
         "normalises and stores, 2|x| of traffic against about 5|x| for eager PyTorch's three kernels."),
        ("RMSNorm three ways",), ("RMSNorm", "row", "eager")),
    "shared_input_siblings.svg": Diagram(
        "03_horizontal_fusion", shared_input_siblings,
        ("Two operations that read the same X. Unfused: two kernels each read all of X from HBM and write their "
         "own output, 2|X| of reads. Fused: one kernel reads each tile of X once into registers and computes "
         "both outputs from it, |X| of reads and one launch."),
        ("Siblings that share an input",), ("each tile of X", "HBM", "outputs")),
    "qkv_stacking.svg": Diagram(
        "03_horizontal_fusion", qkv_stacking,
        ("nn.Linear's weights Wq (n_q x K), Wk and Wv (n_kv x K each, narrower with grouped-query attention) "
         "stacked by rows into W_qkv of n_q + 2·n_kv rows; one GEMM X @ W_qkvᵀ reads X once, and Q, K and V are "
         "column slices of its output, the K and V slices n_kv wide: views of one buffer."),
        ("Q, K and V",), ("W_qkv", "n_kv", "rows", "column")),
    "multi_tensor_launch.svg": Diagram(
        "03_horizontal_fusion", multi_tensor_launch,
        ("An AdamW step over five tensors of different sizes: eagerly one launch per tensor, the GPU mostly idle; "
         "fused, one launch whose programs read from a table the tensor they update and its offset, and "
         "the tensor's address from a table of addresses."),
        ("Many small tensors",), ("AdamW", "one launch", "address", "table")),
    "gemm_tile_epilogue.svg": Diagram(
        "04_gemm_epilogue_fusion", gemm_tile_epilogue,
        ("A GEMM program accumulates one output tile over K from tiles of A and B in a float32 accumulator in "
         "registers; its epilogue then adds the bias, applies GELU and adds the residual to that tile before its "
         "single store."),
        ("epilogue",), ("epilogue", "GELU", "residual", "bias")),
    "online_softmax.svg": Diagram(
        "05_streaming_reduction_fusion", online_softmax,
        ("The online softmax reads a row block by block and keeps a running max m and sum s, rescaling the sum "
         "by exp(m_old - m_new) whenever the max grows; worked through on eight numbers."),
        ("online softmax",), ("running", "max", "rescal")),
    "flash_attention_loop.svg": Diagram(
        "05_streaming_reduction_fusion", flash_attention_loop,
        ("FlashAttention's forward: one program keeps a query block in registers while key and value blocks "
         "stream past; scores and probabilities exist one tile at a time, and the output is rescaled as the max "
         "grows; only O and the log-sum-exp are written."),
        ("FlashAttention",), ("query", "key", "tile", "registers")),
    "vocab_tile_cross_entropy.svg": Diagram(
        "05_streaming_reduction_fusion", vocab_tile_cross_entropy,
        ("Cross-entropy without the logits: the vocabulary is split into tiles of BLOCK_V words; each program "
         "computes its tile of logits for a block of rows, in registers, reduces each row to a max and a sum of "
         "exponentials and picks the target's logit if the target falls in its tile; only these pairs, rows x "
         "tiles, go to HBM, and a second kernel, the combine, merges each row's pairs into its log-sum-exp and "
         "loss. The M x V logits are never stored."),
        ("cross-entropy without the logits",), ("vocabulary", "tile", "target", "combine", "logits")),
    "compiler_pipeline.svg": Diagram(
        "06_compiler_fusion", compiler_pipeline,
        ("torch.compile's pipeline: Dynamo captures an FX graph (splitting it at graph breaks), AOTAutograd builds "
         "the joint forward-backward graph and partitions it, Inductor fuses and schedules, and Triton kernels "
         "come out."),
        ("What Inductor fuses",), ("Inductor", "Triton")),
    "save_vs_recompute.svg": Diagram(
        "07_fusion_for_training", save_vs_recompute,
        ("Eager attention saves the N x N probabilities for the backward; FlashAttention saves only its output and "
         "one log-sum-exp per row, and recomputes the probabilities tile by tile in the backward."),
        ("save or recompute",), ("save", "recompute", "log-sum-exp")),
    "flash_backward.svg": Diagram(
        "07_fusion_for_training", flash_backward,
        ("FlashAttention's backward as two kernels: a key-parallel one accumulating dK and dV and a query-parallel "
         "one accumulating dQ, both using delta = rowsum(dO * O) and rebuilding P per tile."),
        ("FlashAttention's backward",), ("dK", "dV", "dQ", "delta")),
    "chunked_cross_entropy.svg": Diagram(
        "07_fusion_for_training", chunked_cross_entropy,
        ("Linear + cross-entropy forward and backward a chunk of rows at a time: logits_c = h_c Wᵀ (C x V, "
         "float32), then the chunk's loss and dlogits_c, dh_c = dlogits_c W and dW += dlogits_cᵀ h_c, before the "
         "next chunk reuses the buffer, so the full M x V logits are never allocated."),
        ("Linear + cross-entropy",), ("chunk of rows", "dlogits", "dW", "dh")),
    "warp_schedules.svg": Diagram(
        "08_hopper_attention", warp_schedules,
        ("Three schedules of a FlashAttention key loop on one Hopper multiprocessor, as time lines: one group of "
         "warps that copies and computes and waits for its tiles; a producer warp group copying K and V while two "
         "consumer groups compute in step, so the tensor cores idle during both softmaxes; and ping-pong, where "
         "one consumer's softmax runs under the other's matrix products and the tensor cores stay busy."),
        ("Warp specialization",), ("producer", "consumer", "ping-pong", "tensor cores")),
    "persistent_schedule.svg": Diagram(
        "08_hopper_attention", persistent_schedule,
        ("Tiles of output on four multiprocessors over time: one program per tile loads, loops, stores and exits "
         "before the next starts; a persistent program per multiprocessor loops over its tiles and loads the next "
         "tile's queries while it stores the last tile's output, with the same partial last wave."),
        ("persistent scheduling",), ("persistent", "tile", "multiprocessor")),
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


def drawn_text(func) -> str:
    """Every string a drawing function writes on its picture, one line each."""
    return "\n".join(t.get_text() for ax in render(func).axes for t in ax.texts)


def save_svg(fig: Figure, path) -> None:
    Path(path).write_bytes(svg_bytes(fig))


def write_all(root=None) -> list[Path]:
    """(Re)write every diagram into <root>/<notebook>/figures/ (root: the repository's solutions/)."""
    root = Path(root) if root is not None else Path(__file__).resolve().parents[2] / "solutions"
    written = []
    for name, diagram in DIAGRAMS.items():
        out = root / diagram.notebook / "figures"
        out.mkdir(parents=True, exist_ok=True)
        save_svg(render(diagram.draw), out / name)
        written.append(out / name)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for path in write_all(argv[0] if argv else None):
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

