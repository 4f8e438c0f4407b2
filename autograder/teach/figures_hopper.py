"""Diagrams of notebook 08: how a FlashAttention key loop can be scheduled on a Hopper multiprocessor (one warp
group, a producer and two consumers, the consumers in ping-pong) and what a persistent grid changes. Schematic
time lines, not measurements: the lengths are chosen to show the overlap, not taken from a GPU."""

from __future__ import annotations

from matplotlib.figure import Figure

from autograder.teach.drawing import (
    COMPUTE,
    FONT,
    GHOST,
    HBM,
    INK,
    SRAM,
    draw_box,
    draw_text,
    new_canvas,
)

# The softmax runs on the CUDA cores (exp, max, sums), not on the tensor cores: its own colour here.
SOFTMAX = {"face": "#fff1b8", "edge": "#b08a00", "text": "#6b5400"}
U = 0.3  # inches per time unit of the time lines
X0 = 2.55  # where the time lines start


def _span(ax, row_y, start, length, text, style, h=0.34, size=FONT - 2.5):
    draw_box(ax, X0 + start * U, row_y, length * U, h, text, style, rounded=False, fontsize=size, lw=1.0)


def _label(ax, y, text, h=0.34):
    draw_text(ax, X0 - 0.1, y + h / 2, text, ha="right", size=FONT - 1.5)


def _tensor_row(ax, y, busy, end):
    """The tensor cores of the multiprocessor: busy spans green, the rest hatched grey."""
    _label(ax, y, "tensor cores", h=0.22)
    draw_box(ax, X0, y, end * U, 0.22, "", GHOST, rounded=False, hatch="//", lw=0.8)
    for start, length in busy:
        draw_box(ax, X0 + start * U, y, length * U, 0.22, "", COMPUTE, rounded=False, lw=0.8, z=3)


def _consumer(ax, y, spans, named=False):
    """(start, length, kind) spans of one warp group: "g" the tile's two products, "s" its online softmax (named
    in the first time line; the colour key names them after)."""
    for start, length, kind in spans:
        if kind == "g":
            _span(ax, y, start, length, "QKᵀ, PV" if named else "", COMPUTE)
        else:
            _span(ax, y, start, length, "softmax" if named else "", SOFTMAX)


def _producer(ax, y, starts):
    _label(ax, y, "producer (2 stages)")
    for j, start in enumerate(starts):
        _span(ax, y, start, 1.4, f"K,V {j + 1}", SRAM)


def _key(ax, y, entries):
    x = 0.3
    for style, what in entries:
        draw_box(ax, x, y - 0.09, 0.26, 0.18, "", style, rounded=False, lw=1.0)
        draw_text(ax, x + 0.34, y, what, size=FONT - 1.5, color="#333333")
        x += 0.34 + 0.068 * len(what) + 0.3


def warp_schedules() -> Figure:
    fig, ax = new_canvas(10, 8.4, "Three schedules of the same key loop on one Hopper multiprocessor")
    end, first = 22, 1.6  # the consumers start once the first K and V tiles have landed
    # A: the warps that compute also ask the copy engine for the next tiles, and wait when they are late.
    draw_text(ax, 0.3, 7.75, "A. No specialization, software-pipelined (notebook 05's kernels, 8 warps in step)",
              bold=True)
    y = 7.1
    _label(ax, y, "copies (TMA)")
    tiles_a = [first + k * 7 for k in range(3)]
    for j, start in enumerate([0.0] + [t + 4 for t in tiles_a[:2]]):
        _span(ax, y, start, 1.4, f"K,V {j + 1}", SRAM)
    _label(ax, y - 0.45, "all warps (128 rows)")
    _consumer(ax, y - 0.45, [(t + o, 4 if k == "g" else 2, k) for t in tiles_a for o, k in ((0, "g"), (4, "s"))],
              named=True)
    for t in tiles_a[1:]:
        draw_text(ax, X0 + (t - 0.5) * U, y - 0.28, "wait", ha="center", size=FONT - 3.5, color="#777777")
    _tensor_row(ax, y - 0.8, [(t, 4) for t in tiles_a], end)
    # B: a producer warp group; two consumers that share the tensor cores in step, then both do their softmax.
    draw_text(ax, 0.3, 6.0, "B. Warp-specialized: a producer and two consumers in step "
              "(tl.range(..., warp_specialize=True))", bold=True)
    y = 5.35
    tiles_b = [first + k * 6 for k in range(3)]
    _producer(ax, y, [0.0, 1.5] + [t + 6 for t in tiles_b[:2]])
    for k, yy in enumerate((y - 0.45, y - 0.9)):
        _label(ax, yy, f"consumer {k + 1} (rows {64 * k}-{64 * k + 63})")
        _consumer(ax, yy, [(t + o, 4 if kind == "g" else 2, kind) for t in tiles_b for o, kind in ((0, "g"), (4, "s"))])
    _tensor_row(ax, y - 1.25, [(t, 4) for t in tiles_b], end)
    draw_text(ax, X0 + 19.8 * U, y - 0.67, "both softmaxes at\nonce: the tensor\ncores wait", size=FONT - 2.5,
              color=SOFTMAX["text"])
    # C: ping-pong; each consumer's products run at the full rate while the other computes its softmax.
    draw_text(ax, 0.3, 3.75, "C. Ping-pong: the consumers take turns (FlashAttention-3; written by hand in Gluon)",
              bold=True)
    y = 3.1
    _producer(ax, y, [0.0, 1.5, first + 4, first + 8])
    for k, yy in enumerate((y - 0.45, y - 0.9)):
        _label(ax, yy, f"consumer {k + 1} (rows {64 * k}-{64 * k + 63})")
        t0 = first + 2 * k
        _consumer(ax, yy, [(t0 + 4 * i + o, 2, kind) for i in range(3) for o, kind in ((0, "g"), (2, "s"))])
    _tensor_row(ax, y - 1.25, [(first, 12)], end)
    draw_text(ax, X0 + 19.8 * U, y - 0.67, "one softmax hides\nunder the other\ngroup's products", size=FONT - 2.5,
              color=COMPUTE["text"])
    _key(ax, 1.4, ((SRAM, "K and V tiles copied into shared memory"), (COMPUTE, "QKᵀ and PV on the tensor cores"),
                    (SOFTMAX, "the online softmax on the CUDA cores")))
    draw_text(ax, 0.3, 0.75, "Three key tiles of 128 query rows each. Upstream Triton 3.6 and 3.7 build B from one "
              "flag and give no control over C;\nGluon (triton.experimental.gluon) writes warp groups and barriers "
              "by hand. Schematic lengths, not measured.", size=FONT - 1.5, color=INK)
    return fig


def _tile(ax, y, start, length, n, h=0.3, load=True, store=True):
    """One output tile on one multiprocessor: load Q, the key loop, store O (a half-height load or store where
    it shares its time with the tile before or after)."""
    if load:
        _span(ax, y, start, 0.6, "", SRAM, h=h)
    else:  # loaded while the tile before stores: the top half of that slot
        _span(ax, y + h / 2, start, 0.6, "", SRAM, h=h / 2)
    _span(ax, y, start + 0.6, length - 1.2, f"tile {n}", COMPUTE, h=h, size=FONT - 2.5)
    if store:
        _span(ax, y, start + length - 0.6, 0.6, "", HBM, h=h)
    else:
        _span(ax, y, start + length - 0.6, 0.6, "", HBM, h=h / 2)


def persistent_schedule() -> Figure:
    fig, ax = new_canvas(10, 6.6, "Persistent scheduling: one program per multiprocessor, looping over tiles")
    sms, tiles, length = 4, 10, 4.0
    # Above: a program per tile; each starts after the one before it on that multiprocessor has left.
    draw_text(ax, 0.3, 5.8, "a program per tile (grid = tiles): each loads, loops, stores, exits; the next is "
              "scheduled after it", bold=True, size=FONT - 0.5)
    for sm in range(sms):
        y = 5.05 - sm * 0.42
        _label(ax, y, f"SM {sm}", h=0.3)
        for wave, n in enumerate(range(sm, tiles, sms)):
            _tile(ax, y, wave * (length + 0.5), length, n + 1)
    draw_text(ax, X0 + 10 * U, 3.95, "idle: the last wave is partial", size=FONT - 2.5, color="#555555")
    # Below: a persistent program per multiprocessor; the next tile's loads overlap this tile's store.
    draw_text(ax, 0.3, 3.2, "persistent (grid = multiprocessors): tiles t, t + 4, t + 8 ... in one program; the next "
              "Q is loaded while O is stored", bold=True, size=FONT - 0.5)
    for sm in range(sms):
        y = 2.45 - sm * 0.42
        _label(ax, y, f"program {sm} on SM {sm}", h=0.3)
        mine = list(range(sm, tiles, sms))
        for k, n in enumerate(mine):
            _tile(ax, y, k * (length - 0.6), length, n + 1, load=k == 0, store=k == len(mine) - 1)
    _key(ax, 1.0, ((SRAM, "load Q (copy engine)"), (COMPUTE, "the key loop"), (HBM, "store O")))
    draw_text(ax, 0.3, 0.4, "Saved: a launch and a prologue per tile, and with a producer warp group the store of one "
              "tile overlaps the loads of the next.\nNot saved: the tail (SM 2 and 3 finish early); ordering the "
              "tiles, longest first, shortens it. Schematic lengths, not measured.", size=FONT - 1.5, color=INK)
    return fig
