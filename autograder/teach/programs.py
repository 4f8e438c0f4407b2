"""Which elements each program of a Triton launch reads and writes, recorded in the interpreter and drawn.

    from autograder.teach.programs import draw_programs, record_programs

    fig = draw_programs(_scaled_add_kernel, (3,), x, y, out, 0.5, n, BLOCK=4)

runs ``_scaled_add_kernel[(3,)](x, y, out, 0.5, n, BLOCK=4)`` once in Triton's interpreter and draws every
tensor argument as a grid of cells: a cell is filled with the colour (and number) of the program that loaded
or stored it, a lane that was masked off is hatched where its address would have been, and an access outside
the tensor is a red cell with a cross. ``record_programs`` (same arguments) returns the record without drawing.

How it works: the interpreter runs the programs one after another and sends every ``tl.load`` and
``tl.store`` to one builder object, as arrays of addresses and a mask. For the one call, the builder's masked
load and store are wrapped: the wrapper notes the program id and which addresses were touched or masked off,
then lets the access happen. An access that falls outside every tensor argument is recorded and *not*
performed (its lanes are masked off before the interpreter reads or writes memory), so a broken kernel cannot
corrupt the process while it is being drawn.

Good to know:
* Use small launches: a handful of programs and tensors of tens to hundreds of elements.
* The kernel runs on CPU copies of the tensors you pass; your tensors are not changed. The copies, as the
  kernel left them, are in ``Recording.tensors`` (compare them with a torch reference).
* It works on a GPU machine too: the one launch is forced through the interpreter, whatever TRITON_INTERPRET
  says. Pass every ``tl.constexpr`` (BLOCK sizes) explicitly; launch options such as ``num_warps`` are accepted
  and ignored, as the interpreter ignores them. For an autotuned kernel, pass one config's values by hand.
* Recorded: ``tl.load`` and ``tl.store`` on pointer tensors (the kind of kernels notebooks 01-03 write). Block
  pointers, tensor descriptors and atomics are run but not drawn.
* Each access is attributed to the tensor argument that holds most of its active lanes; lanes of the same
  ``tl.load`` that fall elsewhere are "outside" that tensor (drawn red), even when they happen to land in
  another argument's memory.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from autograder.teach.recording import (Access, ProgramsUnavailable, Recording, program_label,
                                        record_programs)

__all__ = ["Access", "ProgramsUnavailable", "Recording", "draw_programs", "record_programs"]


# ------------------------------------------------------------------ drawing

def _cell(coord: tuple[int, ...], shape: tuple[int, ...], wrap: int) -> tuple[int, int]:
    """(row, column) of a coordinate in the drawing: the last dimension across, the others down."""
    if len(shape) <= 1:
        k = coord[0] if coord else 0
        return divmod(k, wrap) if shape and shape[0] > wrap else (0, k)
    row = 0
    for c, n in zip(coord[:-1], shape[:-1]):
        row = row * n + c
    return row, coord[-1]


def draw_programs(kernel, grid, *args, wrap: int = 32, title: str | None = None, **kwargs):
    """Run kernel[grid](*args, **kwargs) once in Triton's interpreter and draw which elements each program
    read (tl.load) and wrote (tl.store): one panel per tensor and direction, a cell coloured and numbered by the
    program that touched it (striped when several did), masked-off lanes hatched where they point, accesses
    outside the tensor red with a cross (recorded, not performed), cells past the tensor's end dashed.

    kernel: a @triton.jit function (not a launcher); grid: a tuple, as in kernel[grid]; args and kwargs: exactly
    what you would launch it with, every tl.constexpr included. 1-D tensors longer than `wrap` are drawn in rows
    of `wrap` cells; tensors of 3 or more dimensions with their leading dimensions stacked down the page.
    Returns the matplotlib Figure; the Recording is on it as `fig.recording`. Raises ProgramsUnavailable, with
    the reason, where this Triton's interpreter cannot be hooked.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rec = record_programs(kernel, grid, *args, **kwargs)
    panels = rec._panels()
    programs = sorted({a.program for a in rec.accesses})
    cmap = plt.get_cmap("tab10" if len(programs) <= 10 else "tab20")
    colour = {p: cmap(i % cmap.N) for i, p in enumerate(programs)}
    if not panels:
        fig, ax = plt.subplots(figsize=(6, 1))
        ax.axis("off")
        ax.text(0.5, 0.5, "no tl.load or tl.store was recorded", ha="center", va="center")
        fig.recording = rec
        return fig

    layouts = []
    for (name, kind), p in panels.items():
        shape = tuple(rec.tensors[name].shape) or (1,)
        cells = {w: {p_: {_cell(c, shape, wrap) for c in cs} for p_, cs in p[w].items()} for w in p}
        in_view = {_cell(c, shape, wrap) for c in np.ndindex(*shape)} if math.prod(shape) <= 4096 else set()
        every = set(in_view).union(*[s for w in cells.values() for s in w.values()])
        rows = max(r for r, _ in every) + 1
        cols = max(c for _, c in every) + 1
        layouts.append((name, kind, shape, cells, in_view, rows, cols))
    width = min(14, max(5, 0.42 * max(c for *_, c in layouts) + 1.5))
    heights = [max(r, 1) + 1.2 for *_, r, _ in layouts]
    fig, axes = plt.subplots(len(layouts), 1, figsize=(width, min(40, 0.42 * sum(heights) + 0.6)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, kind, shape, cells, in_view, rows, cols) in zip(axes[:, 0], layouts):
        small = rows * cols <= 600
        for (r, c) in in_view:
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor="#eeeeee", edgecolor="#bbbbbb", lw=0.5))
        touched: dict[tuple, list] = defaultdict(list)
        for prog, cs in cells["active"].items():
            for rc in cs:
                touched[rc].append(prog)
        for (r, c), progs in touched.items():
            progs = sorted(progs)
            for i, prog in enumerate(progs):
                ax.add_patch(Rectangle((c + i / len(progs), r), 1 / len(progs), 1, facecolor=colour[prog],
                                       edgecolor="none", alpha=0.85))
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor="none", edgecolor="white", lw=0.8))
            if small and len(progs) == 1:
                ax.text(c + 0.5, r + 0.5, program_label(progs[0]), ha="center", va="center", fontsize=7,
                        color="white")
        for prog, cs in cells["masked"].items():
            # A masked-off lane past a row's end points into the next row (memory is flat): it is drawn only
            # where it falls outside the tensor, so the tensor's own cells show who really touched them.
            for (r, c) in cs - in_view:
                ax.add_patch(Rectangle((c + 0.06, r + 0.06), 0.88, 0.88, facecolor="none", hatch="////",
                                       edgecolor=colour[prog], lw=0.8))
        for prog, cs in cells["outside"].items():
            for (r, c) in cs:
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor="#ffcccc", edgecolor="red", lw=1.5))
                ax.plot([c + 0.15, c + 0.85], [r + 0.15, r + 0.85], color="red", lw=1.2)
                ax.plot([c + 0.15, c + 0.85], [r + 0.85, r + 0.15], color="red", lw=1.2)
        for (r, c) in {rc for w in cells.values() for s in w.values() for rc in s} - in_view:
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor="none", edgecolor="#888888", lw=0.6, ls="--"))
        ax.set_xlim(-0.1, cols + 0.1)
        ax.set_ylim(rows + 0.1, -0.1)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for s in ax.spines.values():
            s.set_visible(False)
        n_out = sum(len(s) for s in cells["outside"].values())
        what = "read (tl.load)" if kind == "load" else "written (tl.store)"
        ax.set_title(f"{name} {tuple(shape)}: {what}" + (f" — {n_out} accesses OUT OF BOUNDS" if n_out else ""),
                     fontsize=9, loc="left", color="red" if n_out else "black")
    handles = [Rectangle((0, 0), 1, 1, facecolor=colour[p]) for p in programs[:20]]
    labels = [f"program {program_label(p)}" for p in programs[:20]]
    handles += [Rectangle((0, 0), 1, 1, facecolor="none", hatch="////", edgecolor="gray"),
                Rectangle((0, 0), 1, 1, facecolor="#ffcccc", edgecolor="red")]
    labels += ["masked-off lane", "outside the tensor"]
    fig.legend(handles, labels, loc="upper right", fontsize=7, frameon=False, bbox_to_anchor=(1.0, 1.0))
    grid_txt = "x".join(map(str, rec.grid))
    fig.suptitle(title or f"{getattr(kernel, '__name__', 'kernel')}[grid=({grid_txt})]: who touches what",
                 fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 0.82, 0.95))
    fig.recording = rec
    plt.close(fig)  # shown when the notebook displays it, not twice
    return fig
