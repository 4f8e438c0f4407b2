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
import math
import re
import sys
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

# ---------------------------------------------------------------------------------------------------------
# Style

HBM = {"face": "#fcd9b8", "edge": "#c8551b", "text": "#8a3a12"}
SRAM = {"face": "#d3e4f6", "edge": "#2f6db5", "text": "#1d4a80"}
REG = {"face": "#a9cbef", "edge": "#1f5596", "text": "#163d6b"}
COMPUTE = {"face": "#d5ecd0", "edge": "#3b7d2c", "text": "#285a1d"}
L2 = {"face": "#e4dbf2", "edge": "#6a4fa0", "text": "#4b3577"}
GHOST = {"face": "#ececec", "edge": "#9a9a9a", "text": "#6e6e6e"}
PLAIN = {"face": "#ffffff", "edge": "#444444", "text": "#222222"}

INK = "#222222"
FONT = 10  # body text, points; at ~10 inches wide this stays legible in a notebook

RC = {
    "svg.hashsalt": "fusion-course-diagrams",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": FONT,
    "mathtext.fontset": "dejavusans",
    "text.usetex": False,
    "path.simplify": False,
    "axes.unicode_minus": True,
}


def _canvas(width: float, height: float, title: str):
    """A Figure of width x height inches whose single axes uses inches as data units, origin bottom left."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    ax.text(0.25, height - 0.22, title, fontsize=14, fontweight="bold", color=INK, va="top", ha="left")
    return fig, ax


def _box(ax, x, y, w, h, text="", style=PLAIN, fontsize=FONT, bold=False, hatch=None, rounded=True, lw=1.4,
         ha="center", tcolor=None, z=2):
    """A rectangle with its lower left corner at (x, y) and centred (or left-aligned) text."""
    if rounded:
        patch = FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.06", fc=style["face"],
                               ec=style["edge"], lw=lw, hatch=hatch, zorder=z)
    else:
        patch = Rectangle((x, y), w, h, fc=style["face"], ec=style["edge"], lw=lw, hatch=hatch, zorder=z)
    ax.add_patch(patch)
    if text:
        tx = x + w / 2 if ha == "center" else x + 0.1
        ax.text(tx, y + h / 2, text, ha=ha, va="center", fontsize=fontsize, color=tcolor or style["text"],
                fontweight="bold" if bold else "normal", zorder=z + 1, linespacing=1.3)
    return patch


def _arrow(ax, start, end, color=INK, lw=1.6, text=None, tpos=0.5, toff=(0.0, 0.12), fontsize=FONT - 1,
           style="-|>", ls="-", rad=0.0, tcolor=None, ha="center", z=4):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=13, color=color, lw=lw,
                                 linestyle=ls, connectionstyle=f"arc3,rad={rad}", zorder=z, shrinkA=1, shrinkB=1))
    if text:
        tx = start[0] + (end[0] - start[0]) * tpos + toff[0]
        ty = start[1] + (end[1] - start[1]) * tpos + toff[1]
        ax.text(tx, ty, text, ha=ha, va="center", fontsize=fontsize, color=tcolor or color, zorder=z + 1)


def _text(ax, x, y, s, size=FONT, color=INK, ha="left", va="center", bold=False, italic=False, z=5, **kw):
    return ax.text(x, y, s, fontsize=size, color=color, ha=ha, va=va, zorder=z,
                   fontweight="bold" if bold else "normal", fontstyle="italic" if italic else "normal",
                   linespacing=1.35, **kw)


def _grid(ax, x, y, w, h, rows, cols, style, lw=0.6, z=3):
    """Thin lines dividing the rectangle (x, y, w, h) into rows x cols tiles."""
    for i in range(1, rows):
        ax.plot([x, x + w], [y + h * i / rows] * 2, color=style["edge"], lw=lw, zorder=z)
    for j in range(1, cols):
        ax.plot([x + w * j / cols] * 2, [y, y + h], color=style["edge"], lw=lw, zorder=z)


def _legend(ax, x, y, keys=("hbm", "sram", "compute")):
    """The colour key, one swatch per kind, left to right from (x, y)."""
    names = {"hbm": (HBM, "HBM (off-chip DRAM)"), "sram": (SRAM, "on-chip: shared memory / SRAM"),
             "reg": (REG, "registers"), "compute": (COMPUTE, "compute"), "l2": (L2, "L2 cache"),
             "ghost": (GHOST, "never stored / masked")}
    for key in keys:
        style, label = names[key]
        _box(ax, x, y - 0.09, 0.26, 0.18, style=style, rounded=False, lw=1.0)
        _text(ax, x + 0.34, y, label, size=FONT - 1.5, color="#333333")
        x += 0.34 + 0.068 * len(label) + 0.3
    return x


# ---------------------------------------------------------------------------------------------------------
# 01: the HBM cost model

_LEVELS = [  # name, style, box width, capacity lines, bandwidth lines
    ("Registers", REG, 1.7, "256 KB per SM\n~30 MB over 132 SMs", "~100s of TB/s in all\n~1 cycle away"),
    ("Shared memory / L1\n(SRAM), per SM", SRAM, 2.4, "up to 228 KB per SM\n~30 MB over 132 SMs",
     "~10s of TB/s in all\n~30 cycles away"),
    ("L2 cache", L2, 3.1, "~50 MB\nshared by all SMs", "~5-10 TB/s\n~200 cycles away"),
    ("HBM (DRAM)", HBM, 3.8, "80 GB (H100)\n141 GB (H200)", "~3.4 TB/s (H100)\n~4.8 TB/s (H200)"),
]


def _hierarchy(title: str, hbm_note: str | None = None, compute_note: str | None = None, note_color=INK,
               subtitle: str = "an H100-class GPU; sizes and speeds are orders of magnitude", sms: str = "132 SMs"):
    fig, ax = _canvas(10, 7.2, title)
    _text(ax, 0.25, 6.62, subtitle, size=FONT - 0.5,
          color="#555555", italic=True)
    cx = 2.15
    _text(ax, 4.35, 6.2, "capacity", bold=True)
    _text(ax, 6.45, 6.2, "bandwidth, latency", bold=True)
    # compute on top
    _box(ax, cx - 1.0, 5.25, 2.0, 0.62, "Compute\ntensor cores, ALUs", COMPUTE, bold=False)
    _text(ax, 4.35, 5.56, sms, color=COMPUTE["text"])
    _text(ax, 6.45, 5.56, compute_note or "~1,000 TFLOP/s dense bf16\n(matmul on tensor cores)",
          color=note_color if compute_note else COMPUTE["text"])
    ys = [4.25, 3.2, 2.15, 0.95]
    hs = [0.72, 0.72, 0.72, 0.9]
    for (name, style, w, cap, bw), y, h in zip(_LEVELS, ys, hs):
        _box(ax, cx - w / 2, y, w, h, name, style, bold=True)
        _text(ax, 4.35, y + h / 2, cap, color=style["text"])
        note = bw
        color = style["text"]
        if name.startswith("HBM") and hbm_note is not None:
            note, color = hbm_note, note_color
        _text(ax, 6.45, y + h / 2, note, color=color)
    for y0, y1 in [(5.25, 4.97), (4.25, 3.92), (3.2, 2.87), (2.15, 1.85)]:
        ax.plot([cx, cx], [y1 + 0.02, y0 - 0.02], color="#777777", lw=2.5, zorder=1)
    _text(ax, cx - 2.0, 3.5, "on chip", size=FONT - 1, color=SRAM["text"], rotation=90, ha="center", italic=True)
    _text(ax, cx - 2.0, 1.4, "off chip", size=FONT - 1, color=HBM["text"], rotation=90, ha="center", italic=True)
    ax.plot([0.05, 9.95], [2.0, 2.0], color="#999999", lw=0.8, ls=(0, (4, 3)), zorder=1)
    _text(ax, 0.3, 2.05, "chip edge", size=FONT - 2, color="#777777", va="bottom")
    # the kernel's round trip
    _arrow(ax, (8.95, 1.4), (8.95, 5.0), color=HBM["edge"], lw=2.6)
    _arrow(ax, (9.5, 5.0), (9.5, 1.4), color=HBM["edge"], lw=2.6)
    _text(ax, 8.8, 3.2, "load inputs", rotation=90, ha="center", color=HBM["text"], size=FONT - 0.5)
    _text(ax, 9.65, 3.2, "store outputs", rotation=90, ha="center", color=HBM["text"], size=FONT - 0.5)
    _text(ax, 9.22, 5.45, "kernel", ha="center", bold=True, color=COMPUTE["text"])
    _text(ax, 0.25, 0.45, "A kernel reads its inputs from HBM and writes its outputs back. Between the load "
          "and the store, data sits in\nregisters and shared memory: 10-100x faster but ~1000x smaller. "
          "Fusion = more work per round trip.", size=FONT - 0.5, va="center")
    return fig


def memory_hierarchy() -> Figure:
    return _hierarchy("The GPU memory hierarchy")


def memory_hierarchy_measured(profile) -> Figure:
    """The hierarchy with this device's measured copy bandwidth and matmul rate (from
    autograder.measure.device.DeviceProfile); on a machine without a GPU the labels say nothing was measured."""
    with matplotlib.rc_context(RC):
        has_gpu = getattr(profile, "copy_gbps", None) is not None
        if has_gpu:
            rates = getattr(profile, "matmul_tflops", None) or {}
            mm = ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()) or "not measured"
            return _hierarchy(f"Memory hierarchy of {profile.name}",
                              hbm_note=f"measured copy:\n{profile.copy_gbps:,.0f} GB/s (read + write)",
                              compute_note=f"measured matmul, TFLOP/s:\n{mm}", note_color="#b00020",
                              subtitle="red: measured on this device; the rest: H100-class orders of magnitude",
                              sms=f"{profile.sm_count} SMs" if getattr(profile, "sm_count", None) else "132 SMs (H100)")
        return _hierarchy("The GPU memory hierarchy (schematic)", hbm_note="not measured: no GPU\n(~3.4 TB/s on H100)",
                          compute_note="not measured: no GPU\n(~1,000 TFLOP/s bf16 on H100)", note_color="#666666")


def program_grid() -> Figure:
    fig, ax = _canvas(10, 7.6, "One program per block: the launch grid")
    # ---- 1-D
    n, block, cell, x0, y0 = 20, 8, 0.34, 0.9, 5.35
    _text(ax, 0.25, 6.85, "1-D: a tensor of N = 20 elements, BLOCK = 8, grid = (cdiv(N, BLOCK),) = (3,)", bold=True)
    for i in range(24):
        x = x0 + i * cell + (i // block) * 0.18
        masked = i >= n
        _box(ax, x, y0, cell, 0.42, str(i) if not masked else "", GHOST if masked else HBM, fontsize=FONT - 1.5,
             rounded=False, lw=0.9, hatch="///" if masked else None)
        if masked:
            _text(ax, x + cell / 2, y0 + 0.21, str(i), size=FONT - 1.5, color="#999999", ha="center")
    for p in range(3):
        xa = x0 + p * (block * cell + 0.18)
        xb = xa + block * cell
        ax.plot([xa, xa, xb, xb], [y0 + 0.52, y0 + 0.62, y0 + 0.62, y0 + 0.52], color=COMPUTE["edge"], lw=1.5)
        _text(ax, (xa + xb) / 2, y0 + 0.8, f"program pid = {p}", ha="center", color=COMPUTE["text"], bold=True)
    xe = x0 + 2 * (block * cell + 0.18) + 4 * cell
    ax.plot([xe, xe], [y0 - 0.12, y0 + 0.5], color="#b00020", lw=2)
    _text(ax, xe + 0.05, y0 - 0.2, "N", color="#b00020", bold=True)
    px = x0 + 2 * (block * cell + 0.18)
    _text(ax, 0.25, y0 - 0.48, "pid 2:", bold=True, color=COMPUTE["text"])
    _text(ax, 0.9, y0 - 0.48, "offsets = pid * BLOCK + arange(BLOCK)  =", family="DejaVu Sans Mono", size=FONT - 1)
    _text(ax, 0.9, y0 - 0.86, "mask = offsets < N                     =", family="DejaVu Sans Mono", size=FONT - 1)
    for k in range(block):
        xc = px + k * cell + cell / 2
        _text(ax, xc, y0 - 0.48, str(16 + k), ha="center", size=FONT - 1, color=INK if k < 4 else "#999999")
        _text(ax, xc, y0 - 0.86, "T" if k < 4 else "F", ha="center", size=FONT - 1,
              color=COMPUTE["text"] if k < 4 else "#b00020", bold=True)
    _text(ax, 0.9, y0 - 1.25, "tl.load(x + offsets, mask=mask) and tl.store(..., mask=mask) leave the greyed lanes "
          "alone: no read or write past N.", size=FONT - 1)
    # ---- 2-D
    top = 3.45
    ax.plot([0.2, 9.8], [top + 0.2, top + 0.2], color="#cccccc", lw=0.8)
    _text(ax, 0.25, top, "2-D: a matrix of M x N, tiles of BLOCK_M x BLOCK_N, grid = (cdiv(M, BLOCK_M), "
          "cdiv(N, BLOCK_N)) = (3, 4)", bold=True)
    mx, my, tw, th = 0.9, 0.35, 0.92, 0.8
    rows, cols, n_frac = 3, 4, 3.45  # the last tile column runs past N
    for r in range(rows):
        for c in range(cols):
            x, y = mx + c * tw, my + (rows - 1 - r) * th
            hot = (r, c) == (1, 2)
            _box(ax, x, y, tw, th, "", REG if hot else HBM, rounded=False, lw=1.6 if hot else 0.8)
            vis = tw if c < cols - 1 else (n_frac - c) * tw
            _text(ax, x + vis / 2, y + th / 2, f"({r}, {c})", ha="center", size=FONT - 1,
                  color=REG["text"] if hot else HBM["text"], bold=hot)
    gx = mx + n_frac * tw
    _box(ax, gx, my, (cols - n_frac) * tw, rows * th, "", GHOST, rounded=False, lw=0.8, hatch="///", z=3)
    ax.plot([gx, gx], [my - 0.08, my + rows * th + 0.08], color="#b00020", lw=2, zorder=6)
    _text(ax, gx, my + rows * th + 0.18, "N", color="#b00020", bold=True, ha="center")
    _text(ax, mx - 0.1, my + rows * th / 2, "M rows", rotation=90, ha="right", color=HBM["text"])
    _text(ax, mx + 1.5 * tw, my + rows * th + 0.18, "(pid_m, pid_n)", ha="center", size=FONT - 1,
          color=COMPUTE["text"])
    fx = 5.0
    lines = [
        ("the highlighted program: pid_m = 1, pid_n = 2", True, REG["text"]),
        ("rows = pid_m * BLOCK_M + arange(BLOCK_M)", False, INK),
        ("cols = pid_n * BLOCK_N + arange(BLOCK_N)", False, INK),
        ("ptrs = x + rows[:, None] * stride_m", False, INK),
        ("           + cols[None, :] * stride_n", False, INK),
        ("mask = (rows[:, None] < M) & (cols[None, :] < N)", False, INK),
    ]
    for i, (s, b, col) in enumerate(lines):
        _text(ax, fx, 2.95 - i * 0.36, s, size=FONT - 1, color=col, bold=b,
              family="DejaVu Sans" if b else "DejaVu Sans Mono")
    _text(ax, fx, 0.55, "The strides say how far apart consecutive rows and\ncolumns are in memory, so the same "
          "kernel reads a\ntransposed or sliced view without a copy.", size=FONT - 1, color="#444444")
    return fig


def unfused_vs_fused() -> Figure:
    fig, ax = _canvas(10, 6.4, "Three kernels or one: y = sin(x * 1.25 + 0.5)")
    hy, hh = 0.95, 0.75  # the HBM band
    for x0, label in [(0.25, "eager PyTorch: 3 kernels"), (5.25, "fused: 1 kernel")]:
        _box(ax, x0, hy, 4.5, hh, "", HBM, rounded=True)
        _text(ax, x0 + 0.08, hy + hh + 0.12, "HBM", color=HBM["text"], bold=True, size=FONT - 1)
        _text(ax, x0 + 2.25, 5.3, label, ha="center", bold=True, size=FONT + 1)
    # eager
    tensors = ["x", "a", "b", "y"]
    tx = [0.45 + i * 1.1 for i in range(4)]
    for x, t in zip(tx, tensors):
        _box(ax, x, hy + 0.15, 0.75, 0.45, t, PLAIN, bold=True)
    ops = ["a = x * 1.25", "b = a + 0.5", "y = sin(b)"]
    for i, op in enumerate(ops):
        kx = 0.35 + i * 1.45
        ky = 3.05 + (0.0 if i % 2 == 0 else 0.95)
        _box(ax, kx, ky, 1.35, 0.62, f"kernel {i + 1}\n{op}", COMPUTE, fontsize=FONT - 1.5)
        _arrow(ax, (tx[i] + 0.37, hy + 0.62), (kx + 0.35, ky - 0.02), color=HBM["edge"], text="|x|", tpos=0.55,
               toff=(-0.2, 0.0))
        _arrow(ax, (kx + 1.0, ky - 0.02), (tx[i + 1] + 0.37, hy + 0.62), color=HBM["edge"], text="|x|",
               tpos=0.45, toff=(0.2, 0.0))
    _text(ax, 2.5, 0.55, "read 3|x| + write 3|x| = 6|x|, three launches\na and b make a round trip through HBM",
          ha="center", size=FONT - 0.5, color=HBM["text"])
    # fused
    fx = 5.55
    _box(ax, fx, 2.85, 3.9, 2.35, "", COMPUTE)
    _text(ax, fx + 0.12, 5.0, "one kernel, one program per block of x", color=COMPUTE["text"], size=FONT - 1)
    steps = ["load x", "* 1.25", "+ 0.5", "sin", "store y"]
    for i, s in enumerate(steps):
        sx = fx + 0.15 + i * 0.74
        style = REG if 0 < i < 4 else PLAIN
        _box(ax, sx, 3.75, 0.62, 0.55, s, style, fontsize=FONT - 1.5)
        if i < 4:
            _arrow(ax, (sx + 0.63, 4.02), (sx + 0.73, 4.02), lw=1.0)
    _text(ax, fx + 1.95, 3.15, "a and b exist only in registers", ha="center", color=REG["text"], size=FONT - 1)
    _box(ax, 5.6, hy + 0.15, 0.75, 0.45, "x", PLAIN, bold=True)
    _box(ax, 8.6, hy + 0.15, 0.75, 0.45, "y", PLAIN, bold=True)
    _arrow(ax, (5.97, hy + 0.62), (fx + 0.46, 3.73), color=HBM["edge"], text="|x|", toff=(-0.25, 0))
    _arrow(ax, (fx + 3.5, 3.73), (8.97, hy + 0.62), color=HBM["edge"], text="|x|", toff=(0.25, 0))
    _text(ax, 7.5, 0.55, "read |x| + write |x| = 2|x|, one launch\n3x less traffic, the floor for this op",
          ha="center", size=FONT - 0.5, color=COMPUTE["text"])
    _legend(ax, 0.3, 5.8, keys=("hbm", "reg", "compute"))
    return fig


# ---------------------------------------------------------------------------------------------------------
# 02: vertical fusion


def rmsnorm_row_program() -> Figure:
    fig, ax = _canvas(10, 7.0, "RMSNorm: one program per row, y = x / sqrt(mean(x²) + eps) * w")
    # the matrix in HBM
    mx, my, mw, mh, rows = 0.35, 3.1, 2.6, 2.9, 8
    _box(ax, mx, my, mw, mh, "", HBM, rounded=False)
    _grid(ax, mx, my, mw, mh, rows, 1, HBM)
    hot = 3
    ry = my + mh - (hot + 1) * mh / rows
    _box(ax, mx, ry, mw, mh / rows, "row i", REG, rounded=False, bold=True, fontsize=FONT - 1)
    _text(ax, mx + mw / 2, my + mh + 0.18, "x (and y): M rows x N in HBM", ha="center", color=HBM["text"], bold=True)
    _text(ax, mx + mw / 2, my - 0.22, "grid = (M,): program i owns row i", ha="center", color=COMPUTE["text"],
          size=FONT - 1)
    # the program
    px, py, pw, ph = 3.6, 3.0, 6.1, 3.0
    _box(ax, px, py, pw, ph, "", COMPUTE)
    _text(ax, px + 0.15, py + ph - 0.22, "program i (one row fits in its registers)", color=COMPUTE["text"],
          bold=True)
    steps = [
        ("1  load the row", "x_i = tl.load(...)  (N values)", PLAIN),
        ("2  reduce in registers", "ss = sum(x_i * x_i)", REG),
        ("3  normalise", "y_i = x_i * rsqrt(ss / N + eps) * w", REG),
        ("4  store", "tl.store(y + ..., y_i)", PLAIN),
    ]
    for k, (a, b, st) in enumerate(steps):
        yy = py + ph - 0.75 - k * 0.55
        _box(ax, px + 0.2, yy, 2.2, 0.42, a, st, fontsize=FONT - 1, ha="left")
        _text(ax, px + 2.6, yy + 0.21, b, family="DejaVu Sans Mono", size=FONT - 1.5)
    _arrow(ax, (mx + mw + 0.02, ry + mh / rows / 2), (px + 0.18, py + ph - 0.55), color=HBM["edge"],
           text="read |row|", toff=(0.0, 0.15), fontsize=FONT - 1.5)
    _arrow(ax, (px + 0.18, py + ph - 2.15), (mx + mw + 0.02, ry + 0.08), color=HBM["edge"],
           text="write |row| (to y)", toff=(0.15, -0.3), fontsize=FONT - 1.5)
    # eager below
    ax.plot([0.2, 9.8], [2.4, 2.4], color="#cccccc", lw=0.8)
    _text(ax, 0.25, 2.15, "eager PyTorch: three full-size kernels", bold=True)
    eager = [("rsqrt(mean(x²) + eps)", "reads |x|, writes M values"), ("x * r", "reads |x|, writes |x|"),
             ("(x * r) * w", "reads |x|, writes |x|")]
    for k, (op, traffic) in enumerate(eager):
        ex = 0.35 + k * 2.35
        _box(ax, ex, 1.05, 2.15, 0.7, op, COMPUTE, fontsize=FONT - 1)
        _text(ax, ex + 1.07, 0.78, traffic, ha="center", size=FONT - 1.5, color=HBM["text"])
        if k < 2:
            _arrow(ax, (ex + 2.17, 1.4), (ex + 2.33, 1.4), lw=1.2)
    _box(ax, 7.55, 0.62, 2.2, 1.3, "eager: ~5|x|\nfused: 2|x|\n(the floor)", PLAIN, fontsize=FONT, bold=True)
    _text(ax, 0.35, 0.35, "Fused, x crosses HBM once in and once out; the statistic never leaves the chip.",
          size=FONT - 1, color=INK)
    return fig


# ---------------------------------------------------------------------------------------------------------
# 03: horizontal fusion


def qkv_stacking() -> Figure:
    fig, ax = _canvas(10, 6.2, "Horizontal fusion: one GEMM for Q, K and V")
    # left: three GEMMs
    _text(ax, 0.3, 5.55, "three GEMMs: x is read three times", bold=True)
    for k, (name, out) in enumerate([("Wq", "q"), ("Wk", "k"), ("Wv", "v")]):
        y = 4.35 - k * 1.35
        _box(ax, 0.3, y, 0.55, 1.0, "x", HBM, bold=True, rounded=False)
        _text(ax, 1.02, y + 0.5, "@", ha="center", size=FONT + 2)
        _box(ax, 1.2, y + 0.45, 0.55, 0.55, name, HBM, bold=True, rounded=False, fontsize=FONT - 1)
        _arrow(ax, (1.85, y + 0.5), (2.45, y + 0.5))
        _box(ax, 2.55, y, 0.55, 1.0, out, HBM, bold=True, rounded=False)
        _box(ax, 3.35, y + 0.25, 1.05, 0.5, f"launch {k + 1}", COMPUTE, fontsize=FONT - 1.5)
    _text(ax, 0.3, 0.75, "reads 3|x| + |Wq|+|Wk|+|Wv|\n3 launches, each a third of the work", size=FONT - 1,
          color=HBM["text"])
    ax.plot([4.75, 4.75], [0.4, 5.7], color="#cccccc", lw=0.8)
    # right: stacked
    _text(ax, 5.0, 5.55, "stacked: x is read once", bold=True)
    _box(ax, 5.0, 3.8, 0.55, 1.3, "", HBM, rounded=False)
    _text(ax, 5.27, 4.45, "x", ha="center", bold=True, color=HBM["text"])
    _text(ax, 5.27, 3.62, "M x d", ha="center", size=FONT - 2, color="#555555")
    _text(ax, 5.75, 4.45, "@", ha="center", size=FONT + 2)
    wx, wy, ws = 5.95, 4.55, 0.5
    for k, (name, st) in enumerate([("Wq", HBM), ("Wk", HBM), ("Wv", HBM)]):
        _box(ax, wx + k * ws, wy, ws, ws, name, st, bold=True, rounded=False, fontsize=FONT - 1)
    _text(ax, wx + 1.5 * ws, wy + ws + 0.17, "W_qkv = cat([Wq, Wk, Wv], dim=1): d x 3d", ha="center",
          size=FONT - 1.5, color=HBM["text"])
    _text(ax, wx, 3.95, "(concatenated once, at load time)", ha="left", size=FONT - 2,
          color="#555555")
    _arrow(ax, (wx + 3 * ws + 0.1, 4.45), (wx + 3 * ws + 0.55, 4.45))
    ox = wx + 3 * ws + 0.65
    for k, name in enumerate(["q", "k", "v"]):
        _box(ax, ox + k * 0.45, 3.8, 0.45, 1.3, name, HBM, bold=True, rounded=False)
    _text(ax, ox + 0.67, 3.62, "M x 3d: one output", ha="center", size=FONT - 2, color="#555555")
    _box(ax, 5.6, 2.45, 3.6, 0.6, "1 launch, 3x the work per launch", COMPUTE, fontsize=FONT - 1)
    _text(ax, 5.0, 1.65, "q, k, v = out.split(d, dim=-1): three views, no copy", family="DejaVu Sans Mono",
          size=FONT - 1.5)
    _text(ax, 5.0, 0.75, "reads |x| + |W_qkv|: saves 2|x| of reads,\nand one large GEMM keeps the tensor cores "
          "busier", size=FONT - 1, color=COMPUTE["text"])
    return fig


def horizontal_fusion() -> Figure:
    fig, ax = _canvas(10, 7.0, "Horizontal fusion: many small tensors, one launch")
    _text(ax, 0.3, 6.45, "an optimizer step over 5 parameter tensors of different sizes, scattered through HBM",
          size=FONT - 0.5, color="#444444")
    sizes = [3, 7, 2, 5, 4]  # in blocks
    # HBM layout of the tensors
    _box(ax, 0.3, 5.05, 9.4, 0.95, "", HBM)
    _text(ax, 9.6, 5.8, "HBM", color=HBM["text"], bold=True, size=FONT - 1.5, ha="right")
    cell = 0.27
    x = 0.5
    starts = []
    for t, s in enumerate(sizes):
        starts.append(x)
        for b in range(s):
            _box(ax, x + b * cell, 5.2, cell, 0.45, "", PLAIN, rounded=False, lw=0.7)
        _text(ax, x + s * cell / 2, 5.8, f"p{t}", ha="center", bold=True, size=FONT - 1, color=HBM["text"])
        x += s * cell + 0.35 + 0.1 * t
    # eager: one launch per tensor
    _text(ax, 0.3, 4.6, "eager / for-loop: one launch per tensor (often several per tensor)", bold=True)
    t0 = 0.5
    for t, s in enumerate(sizes):
        _box(ax, t0, 3.9, 0.85, 0.42, f"launch p{t}", COMPUTE, fontsize=FONT - 2)
        if t < len(sizes) - 1:
            _box(ax, t0 + 0.85, 3.9, 0.55, 0.42, "idle", GHOST, fontsize=FONT - 2.5, rounded=False, lw=0.6)
        t0 += 1.4
    _arrow(ax, (0.5, 3.75), (7.6, 3.75), lw=1.0, color="#777777")
    _text(ax, 7.7, 3.75, "time: 5 launch overheads,\nmost of the GPU idle each time", size=FONT - 1.5,
          color="#555555")
    # fused: address table and programs
    ax.plot([0.2, 9.8], [3.35, 3.35], color="#cccccc", lw=0.8)
    _text(ax, 0.3, 3.1, "fused: one launch, grid = (total blocks,) = (21,), and an address table", bold=True)
    tx, ty = 0.4, 0.45
    hdr = ["tensor", "pointer", "numel", "first block"]
    cw = [0.75, 0.95, 0.75, 1.0]
    for j, h in enumerate(hdr):
        _box(ax, tx + sum(cw[:j]), ty + 5 * 0.36, cw[j], 0.36, h, SRAM, rounded=False, fontsize=FONT - 2, bold=True,
             lw=0.8)
    first = 0
    for t, s in enumerate(sizes):
        row = [f"p{t}", f"&p{t}", f"{s} x B", str(first)]
        for j, v in enumerate(row):
            _box(ax, tx + sum(cw[:j]), ty + (4 - t) * 0.36, cw[j], 0.36, v, PLAIN, rounded=False,
                 fontsize=FONT - 2, lw=0.6)
        first += s
    _text(ax, tx + sum(cw) / 2, ty - 0.2, "B = BLOCK; a small table in HBM, passed as one pointer", ha="center",
          size=FONT - 2, color="#555555")
    # programs
    gx, gy = 4.2, 2.25
    pid = 0
    for t, s in enumerate(sizes):
        for b in range(s):
            hot = pid == 11
            _box(ax, gx + pid * 0.25, gy, 0.25, 0.36, "", REG if hot else COMPUTE, rounded=False, lw=0.6)
            pid += 1
        ax.plot([gx + pid * 0.25] * 2, [gy - 0.08, gy + 0.44], color=INK, lw=1.2, zorder=5)
    _text(ax, gx, gy + 0.56, "programs 0 .. 20, grouped by the tensor they serve", size=FONT - 1.5,
          color=COMPUTE["text"])
    _arrow(ax, (gx + 11.5 * 0.25, gy - 0.02), (gx + 11.5 * 0.25, 1.45), lw=1.2)
    _text(ax, gx - 0.05, 1.0, "program 11 looks itself up: first[p2] = 10 <= 11 < 12 = first[p3],\n"
          "so it updates block 11 - 10 = 1 of p2 at &p2 + 1 x B", size=FONT - 1.5)
    _text(ax, gx - 0.05, 0.35, "one launch overhead; every SM busy; each byte still moved once",
          size=FONT - 1, color=COMPUTE["text"], bold=True)
    return fig


# ---------------------------------------------------------------------------------------------------------
# 04: GEMM epilogue fusion


def gemm_tile_epilogue() -> Figure:
    fig, ax = _canvas(10, 7.0, "A GEMM tile and its epilogue, all in registers")
    kt = 4  # K tiles
    # A: M x K, B: K x N, C: M x N
    ax_, ay, aw, ah = 0.4, 2.9, 2.4, 2.4
    _box(ax, ax_, ay, aw, ah, "", HBM, rounded=False)
    _grid(ax, ax_, ay, aw, ah, 4, kt, HBM)
    bx, by, bw, bh = 3.4, 2.9, 2.4, 2.4
    _box(ax, bx, by, bw, bh, "", HBM, rounded=False)
    _grid(ax, bx, by, bw, bh, kt, 4, HBM)
    tr, tc = 1, 2  # the C tile's block row and column
    for k in range(kt):
        _box(ax, ax_ + k * aw / kt, ay + ah - (tr + 1) * ah / 4, aw / kt, ah / 4, f"A{k}", SRAM, rounded=False,
             fontsize=FONT - 1.5, lw=1.0)
        _box(ax, bx + tc * bw / 4, by + bh - (k + 1) * bh / kt, bw / 4, bh / kt, f"B{k}", SRAM, rounded=False,
             fontsize=FONT - 1.5, lw=1.0)
    _text(ax, ax_ + aw / 2, ay + ah + 0.2, "A: M x K (HBM)", ha="center", color=HBM["text"], bold=True)
    _text(ax, bx + bw / 2, by + bh + 0.2, "B: K x N (HBM)", ha="center", color=HBM["text"], bold=True)
    _text(ax, ax_ + aw + 0.3, ay + ah / 2, "@", ha="center", size=FONT + 4)
    # the loop
    lx, ly = 6.25, 3.0
    _box(ax, lx, ly, 3.45, 2.3, "", COMPUTE)
    _text(ax, lx + 0.12, ly + 2.08, "program (pid_m, pid_n) = (1, 2)", color=COMPUTE["text"], bold=True,
          size=FONT - 1)
    code = ["acc = zeros(BM, BN, float32)", "for k in range(K // BK):", "    a = load(A tile k)",
            "    b = load(B tile k)", "    acc += dot(a, b)"]
    for i, c in enumerate(code):
        _text(ax, lx + 0.15, ly + 1.72 - i * 0.3, c, family="DejaVu Sans Mono", size=FONT - 1.5)
    _box(ax, lx + 2.35, ly + 0.12, 0.95, 0.55, "acc", REG, bold=True)
    _text(ax, lx + 2.82, ly + 0.82, "registers", ha="center", size=FONT - 2, color=REG["text"])
    _arrow(ax, (bx + bw + 0.05, by + bh / 2), (lx - 0.05, ly + 1.15), color=HBM["edge"],
           text="tiles stream in\n(via SRAM)", toff=(0.0, -0.45), fontsize=FONT - 1.5)
    # epilogue
    _text(ax, 0.4, 2.35, "epilogue: applied to acc while it is still in registers, then one store", bold=True)
    ex, ey = 0.4, 1.2
    steps = [("acc", REG), ("+ bias", REG), ("GELU", REG), ("+ residual", REG), ("cast bf16", REG),
             ("store C tile", HBM)]
    for i, (s, st) in enumerate(steps):
        _box(ax, ex + i * 1.58, ey, 1.3, 0.62, s, st, fontsize=FONT - 1, bold=i in (0, 5))
        if i < len(steps) - 1:
            _arrow(ax, (ex + i * 1.58 + 1.32, ey + 0.31), (ex + (i + 1) * 1.58 - 0.02, ey + 0.31))
    _text(ax, ex + 1.58 + 0.65, ey - 0.2, "bias: N values", ha="center", size=FONT - 2, color=HBM["text"])
    _text(ax, ex + 3 * 1.58 + 0.65, ey - 0.2, "loads its tile once", ha="center", size=FONT - 2,
          color=HBM["text"])
    _text(ax, 0.4, 0.38, "Unfused, C (M x N) is written by the GEMM and read and written again by each of "
          "bias, GELU and residual: ~6 extra |C|.", size=FONT - 1, color="#444444")
    return fig


# ---------------------------------------------------------------------------------------------------------
# 05: streaming reductions


def online_softmax() -> Figure:
    fig, ax = _canvas(10, 6.4, "The online softmax: one pass, two running numbers")
    chunks = [[1.0, 3.0], [2.0, 5.0], [4.0, 0.5], [6.0, 1.0]]
    m, s = -math.inf, 0.0
    states = []
    for c in chunks:
        m_new = max(m, max(c))
        alpha = math.exp(m - m_new) if m > -math.inf else 0.0
        s = s * alpha + sum(math.exp(v - m_new) for v in c)
        states.append((m, m_new, alpha, s))
        m = m_new
    _text(ax, 0.3, 5.75, "a row of 8 scores, read in blocks of 2 (from HBM, once)", color=HBM["text"])
    for k, c in enumerate(chunks):
        x0 = 0.55 + k * 2.35
        for j, v in enumerate(c):
            _box(ax, x0 + j * 0.62, 4.85, 0.62, 0.52, f"{v:g}", HBM, rounded=False, fontsize=FONT)
        _text(ax, x0 + 0.62, 5.5, f"block {k + 1}", ha="center", size=FONT - 1.5, color="#555555")
        mo, mn, al, sk = states[k]
        _arrow(ax, (x0 + 0.62, 4.8), (x0 + 0.62, 4.2), color=HBM["edge"])
        _box(ax, x0 - 0.15, 2.65, 1.85, 1.5, "", REG)
        mold = "-inf" if mo == -math.inf else f"{mo:g}"
        _text(ax, x0 - 0.05, 3.92, f"m: {mold} -> {mn:g}", size=FONT - 1, color=REG["text"], bold=True)
        if mo > -math.inf:
            _text(ax, x0 - 0.05, 3.55, f"alpha = exp({mold} - {mn:g})", size=FONT - 1.5, color=REG["text"])
            _text(ax, x0 - 0.05, 3.25, f"      = {al:.3f}", size=FONT - 1.5, color=REG["text"])
        else:
            _text(ax, x0 - 0.05, 3.4, "first block:\nnothing to rescale", size=FONT - 1.5, color=REG["text"])
        _text(ax, x0 - 0.05, 2.87, f"s = {sk:.3f}", size=FONT - 1, color=REG["text"], bold=True)
        if k < len(chunks) - 1:
            _arrow(ax, (x0 + 1.72, 3.4), (x0 + 2.18, 3.4), color=REG["edge"], lw=1.8)
    _text(ax, 0.3, 2.25, "each block, in registers:", bold=True)
    rules = ["m_new = max(m, max(block))",
             "s = s * exp(m - m_new) + sum(exp(block - m_new))     # re-measure the old sum from the new max",
             "m = m_new"]
    for i, r in enumerate(rules):
        _text(ax, 0.5, 1.9 - i * 0.32, r, family="DejaVu Sans Mono", size=FONT - 1.5)
    _text(ax, 0.3, 0.65, f"after the last block: lse = m + log s = {m + math.log(s):.4f},  softmax(x)_j = "
          f"exp(x_j - m) / s.   The rescale factor is 1 when the max does not move (block 3).",
          size=FONT - 1)
    _text(ax, 0.3, 0.3, "s is often called l in FlashAttention papers. Nothing of the row's length is kept: "
          "one read of the row instead of two or three.", size=FONT - 1.5, color="#555555")
    return fig


def flash_attention_loop() -> Figure:
    fig, ax = _canvas(10, 7.2, "FlashAttention forward: a query block stays, key/value blocks stream past")
    # Q, K, V in HBM
    qx, qy = 0.35, 2.2
    _box(ax, qx, qy, 0.7, 3.6, "", HBM, rounded=False)
    _grid(ax, qx, qy, 0.7, 3.6, 6, 1, HBM)
    _box(ax, qx, qy + 3.6 - 2 * 0.6, 0.7, 0.6, "Q_i", SRAM, rounded=False, bold=True, fontsize=FONT - 1)
    _text(ax, qx + 0.35, qy + 3.8, "Q", ha="center", bold=True, color=HBM["text"])
    for name, kx in [("K", 1.35), ("V", 2.25)]:
        _box(ax, kx, qy, 0.7, 3.6, "", HBM, rounded=False)
        _grid(ax, kx, qy, 0.7, 3.6, 6, 1, HBM)
        _box(ax, kx, qy + 3.6 - 4 * 0.6, 0.7, 0.6, f"{name}_j", SRAM, rounded=False, bold=True, fontsize=FONT - 1)
        _text(ax, kx + 0.35, qy + 3.8, name, ha="center", bold=True, color=HBM["text"])
        _arrow(ax, (kx + 0.35, qy - 0.1), (kx + 0.35, qy - 0.5), color=HBM["edge"], lw=1.2)
    _text(ax, 1.8, qy - 0.72, "j = 0, 1, 2, ... streams", ha="center", size=FONT - 1.5, color=HBM["text"])
    _text(ax, 1.6, qy - 1.05, "all in HBM (N x d each)", ha="center", size=FONT - 1.5, color=HBM["text"])
    # the program
    px, py, pw, ph = 3.3, 1.3, 4.15, 4.7
    _box(ax, px, py, pw, ph, "", COMPUTE)
    _text(ax, px + 0.12, py + ph - 0.2, "program i (on one SM)", bold=True, color=COMPUTE["text"])
    _box(ax, px + 0.15, py + ph - 0.95, 1.7, 0.55, "Q_i  (loaded once)", SRAM, fontsize=FONT - 1)
    _box(ax, px + 1.95, py + ph - 0.95, 1.7, 0.55, "m_i, l_i, O_i acc", REG, fontsize=FONT - 1)
    _text(ax, px + 0.15, py + ph - 1.25, "for each key block j:", size=FONT - 1, bold=True)
    steps = ["S = Q_i K_jᵀ * scale   # BM x BN", "m_new = max(m_i, rowmax(S))",
             "P = exp(S - m_new)     # tile only", "alpha = exp(m_i - m_new)",
             "l_i = l_i * alpha + rowsum(P)", "O_i = O_i * alpha + P V_j", "m_i = m_new"]
    for k, st in enumerate(steps):
        _text(ax, px + 0.3, py + ph - 1.58 - k * 0.3, st, family="DejaVu Sans Mono", size=FONT - 1.5)
    _text(ax, px + 0.15, py + 0.55, "after the loop:", size=FONT - 1, bold=True)
    _text(ax, px + 0.3, py + 0.25, "store O_i / l_i, lse_i = m_i + log l_i", family="DejaVu Sans Mono",
          size=FONT - 1.5)
    _arrow(ax, (qx + 0.72, qy + 2.7), (px + 0.12, py + ph - 0.68), color=HBM["edge"], text="once",
           fontsize=FONT - 1.5, toff=(0, 0.15))
    _arrow(ax, (2.97, qy + 1.5), (px - 0.02, py + ph - 2.2), color=HBM["edge"], text="K_j, V_j", toff=(0.3, -0.3),
           fontsize=FONT - 1.5)
    # the ghost N x N
    gx, gy, gs, nb = 7.7, 2.2, 2.05, 6
    _box(ax, gx, gy, gs, gs, "", GHOST, rounded=False, hatch="//")
    _grid(ax, gx, gy, gs, gs, nb, nb, GHOST)
    t = gs / nb
    _box(ax, gx + 3 * t, gy + gs - 2 * t, t, t, "", REG, rounded=False, lw=1.6, z=4)
    _text(ax, gx + gs / 2, gy + gs + 0.45, "S and P: N x N", ha="center", bold=True, color=GHOST["text"])
    _text(ax, gx + gs / 2, gy + gs + 0.17, "never stored", ha="center", color=GHOST["text"], size=FONT - 1)
    _text(ax, gx + gs / 2, gy - 0.25, "one BM x BN tile at a time,", ha="center", size=FONT - 1.5,
          color=REG["text"])
    _text(ax, gx + gs / 2, gy - 0.52, "in registers (row i, column j)", ha="center", size=FONT - 1.5,
          color=REG["text"])
    _text(ax, 0.35, 0.72, "HBM traffic: read Q, K, V, write O and lse: O(N d) instead of O(N²). The rescale by "
          "alpha keeps O_i correct\nwhen a later block raises the row max.", size=FONT - 1)
    _legend(ax, 0.35, 0.22, keys=("hbm", "sram", "reg", "ghost"))
    return fig


def chunked_cross_entropy() -> Figure:
    fig, ax = _canvas(10, 7.0, "Chunked cross-entropy: logits one chunk of rows at a time")
    # hidden states
    hx, hy, hw, hh, nchunk = 0.35, 1.9, 0.9, 4.0, 4
    _box(ax, hx, hy, hw, hh, "", HBM, rounded=False)
    _grid(ax, hx, hy, hw, hh, nchunk, 1, HBM)
    _box(ax, hx, hy + hh - 2 * hh / nchunk, hw, hh / nchunk, "H_c", SRAM, rounded=False, bold=True)
    _text(ax, hx + hw / 2, hy + hh + 0.4, "hidden H", ha="center", bold=True, color=HBM["text"])
    _text(ax, hx + hw / 2, hy + hh + 0.15, "N x d", ha="center", size=FONT - 1.5, color="#555555")
    _text(ax, hx + hw + 0.25, hy + hh - 1.5 * hh / nchunk, "@", ha="center", size=FONT + 3)
    wx, wy, ww, wh = 1.7, hy + hh - 1.5 * hh / nchunk - 0.55, 3.0, 1.1
    _box(ax, wx, wy, ww, wh, "lm_head W\nd x V", HBM, rounded=False, bold=True)
    _arrow(ax, (wx + ww + 0.1, hy + hh - 1.5 * hh / nchunk), (wx + ww + 0.55, hy + hh - 1.5 * hh / nchunk))
    lx = wx + ww + 0.65
    _box(ax, lx, hy + hh - 2 * hh / nchunk, 3.9, hh / nchunk, "logits of chunk c: C x V", SRAM,
         rounded=False, bold=True)
    _text(ax, lx + 1.95, hy + hh - 2 * hh / nchunk - 0.22, "the only logits alive at any time", ha="center",
          size=FONT - 1.5, color=SRAM["text"], bbox={"fc": "white", "ec": "none", "pad": 2})
    # ghost full logits
    gy = hy
    _box(ax, lx, gy, 3.9, hh, "", GHOST, rounded=False, hatch="//", z=1, lw=1.0)
    _text(ax, lx + 1.95, gy + 0.55, "full N x V logits: never allocated\n"
          "e.g. 8192 x 128256 in fp32 = 4.2 GB", ha="center", size=FONT - 1, color="#555555", z=6,
          bbox={"fc": "white", "ec": "none", "pad": 3})
    # per-chunk work
    _text(ax, 1.7, 3.35, "for each chunk c of C rows:", bold=True)
    steps = ["z = H_c @ W               # C x V",
             "loss_c = logsumexp(z) - z[target]",
             "dz = (softmax(z) - onehot(target)) / N",
             "dH_c = dz @ Wᵀ;  dW += H_cᵀ @ dz",
             "free z and dz; next chunk"]
    for i, st in enumerate(steps):
        _text(ax, 1.7, 2.95 - i * 0.3, st, family="DejaVu Sans Mono", size=FONT - 1.5)
    _text(ax, 0.35, 1.2, "The loss and both gradients come out of the same chunk while its logits are on hand, so "
          "the backward\nnever needs them again: peak memory C x V instead of N x V, for the same FLOPs.",
          size=FONT - 1)
    _text(ax, 0.35, 0.45, "dH and dW are written chunk by chunk; dW accumulates across chunks.",
          size=FONT - 1.5, color="#555555")
    return fig


# ---------------------------------------------------------------------------------------------------------
# 06: the compiler


def compiler_pipeline() -> Figure:
    fig, ax = _canvas(10, 6.0, "torch.compile: from a Python function to Triton kernels")
    stages = [
        ("Python\nfunction", PLAIN, ["def f(x, w):", "  y = x @ w", "  return gelu(y)+1"], True),
        ("Dynamo", L2, ["traces the bytecode", "into an FX graph", "of torch ops;", "unsupported Python", "= graph break"],
         False),
        ("AOTAutograd", L2, ["forward + backward", "as one joint graph;", "the partitioner", "picks what to save",
                             "vs recompute"], False),
        ("Inductor", L2, ["lowers to loops,", "decides fusions,", "schedules kernels,", "picks GEMM templates",
                          "or cuBLAS"], False),
        ("Triton\nkernels", COMPUTE, ["generated source,", "compiled and cached;", "see it with", "TORCH_LOGS=",
                                      "output_code"], False),
    ]
    bw, gap, y = 1.62, 0.33, 3.6
    for i, (name, st, lines, mono) in enumerate(stages):
        x = 0.3 + i * (bw + gap)
        _box(ax, x, y, bw, 0.95, name, st, bold=True, fontsize=FONT + 0.5)
        for k, line in enumerate(lines):
            _text(ax, x + 0.02, y - 0.3 - k * 0.3, line, size=FONT - 1.5 if not mono else FONT - 2,
                  family="DejaVu Sans Mono" if mono else "DejaVu Sans")
        if i < len(stages) - 1:
            _arrow(ax, (x + bw + 0.02, y + 0.47), (x + bw + gap - 0.02, y + 0.47), lw=2)
    outs = ["bytecode", "FX graph(s)", "joint graph,\nfwd + bwd", "fused kernels"]
    for i, o in enumerate(outs):
        x = 0.3 + (i + 1) * (bw + gap) - gap / 2
        _text(ax, x, y + 1.2, o, ha="center", size=FONT - 2, color="#555555")
    # graph break illustration
    _text(ax, 0.3, 1.55, "a graph break:", bold=True, size=FONT - 0.5)
    _box(ax, 1.6, 1.3, 2.0, 0.5, "graph 1 (compiled)", L2, fontsize=FONT - 1.5)
    _box(ax, 3.75, 1.3, 2.1, 0.5, "print(y) / y.item()\nruns in Python", GHOST, fontsize=FONT - 2)
    _box(ax, 6.0, 1.3, 2.0, 0.5, "graph 2 (compiled)", L2, fontsize=FONT - 1.5)
    _text(ax, 1.6, 0.85, "nothing fuses across the break: y is written to HBM and read back.", size=FONT - 1.5,
          color=HBM["text"])
    _text(ax, 1.6, 0.5, "torch._dynamo.explain(f)(x, w) lists the breaks and their reasons.", size=FONT - 1.5,
          family="DejaVu Sans Mono")
    return fig


# ---------------------------------------------------------------------------------------------------------
# 07: training


def save_vs_recompute() -> Figure:
    fig, ax = _canvas(10, 6.8, "What the forward saves for the backward, per head")
    for x0, label in [(0.3, "eager attention"), (5.5, "FlashAttention")]:
        _text(ax, x0, 5.95, label, bold=True, size=FONT + 1)
    # eager: Q K V (N x d), P (N x N)
    s = 3.2 / 8  # inches per 'unit': N = 8 units, d = 1 unit (not to scale: d is much smaller than N)
    y0 = 1.95
    for k, name in enumerate(["Q", "K", "V", "O"]):
        _box(ax, 0.3 + k * 0.45, y0, s, 8 * s, name, HBM, rounded=False, bold=True, fontsize=FONT - 1)
    _box(ax, 2.2, y0, 8 * s, 8 * s, "P = softmax(QKᵀ)\nN x N\nsaved", HBM, rounded=False, bold=True)
    _text(ax, 0.3, 1.35, "saves 4 N d + N² values (not to scale): at N = 8192,\nd = 128, P alone is 16x Q, K, V and O together",
          size=FONT - 1, color=HBM["text"])
    # flash
    for k, name in enumerate(["Q", "K", "V", "O"]):
        _box(ax, 5.5 + k * 0.45, y0, s, 8 * s, name, HBM, rounded=False, bold=True, fontsize=FONT - 1)
    _box(ax, 7.32, y0, 0.14, 8 * s, "", HBM, rounded=False)
    _text(ax, 7.39, y0 + 8 * s + 0.15, "lse", ha="center", bold=True, color=HBM["text"], size=FONT - 1)
    _text(ax, 7.6, y0 + 8 * s - 0.1, "log-sum-exp of each row:\nN numbers", size=FONT - 1.5, color=HBM["text"],
          va="top")
    _box(ax, 7.85, y0, 1.8, 1.8, "", GHOST, rounded=False, hatch="//")
    _grid(ax, 7.85, y0, 1.8, 1.8, 4, 4, GHOST)
    _box(ax, 7.85 + 1.8 / 4, y0 + 1.8 / 2, 1.8 / 4, 1.8 / 4, "", REG, rounded=False, z=4)
    _text(ax, 8.75, y0 + 2.0, "P: not saved", ha="center", color=GHOST["text"], size=FONT - 1)
    _text(ax, 7.6, y0 + 2.55, "backward rebuilds each tile:\nP_ij = exp(Q_i K_jᵀ * scale - lse_i)",
          size=FONT - 1.5, color=REG["text"])
    _text(ax, 5.5, 1.35, "saves 4 N d + N values; the backward pays one extra\nQKᵀ per tile (FLOPs are cheap, "
          "HBM bytes are not)", size=FONT - 1, color=COMPUTE["text"])
    _text(ax, 0.3, 0.45, "Recompute instead of save: trade a little compute for O(N²) of memory and HBM traffic.",
          size=FONT - 0.5, bold=True)
    return fig


def flash_backward() -> Figure:
    fig, ax = _canvas(10, 7.4, "FlashAttention backward: two kernels, no atomics")
    _box(ax, 0.3, 6.0, 9.4, 0.5, "before both, a small kernel: delta_i = rowsum(dO_i * O_i), N numbers (it equals rowsum(P ∘ dP))",
         SRAM, fontsize=FONT - 0.5)
    nb, gs = 5, 2.0
    t = gs / nb
    for col, (x0, title, hot_col) in enumerate([(0.3, "kernel 1: key-parallel, dK and dV", True),
                                                (5.2, "kernel 2: query-parallel, dQ", False)]):
        _text(ax, x0, 5.6, title, bold=True, size=FONT + 0.5)
        gx, gy = x0 + 0.25, 3.05
        _box(ax, gx, gy, gs, gs, "", GHOST, rounded=False)
        _grid(ax, gx, gy, gs, gs, nb, nb, GHOST)
        for k in range(nb):
            if hot_col:
                cx, cy = gx + 2 * t, gy + gs - (k + 1) * t
            else:
                cx, cy = gx + k * t, gy + gs - 3 * t
            _box(ax, cx, cy, t, t, "", REG, rounded=False, lw=1.0, z=4)
        _text(ax, gx + gs / 2, gy + gs + 0.15, "keys j ->", ha="center", size=FONT - 1.5, color="#555555")
        _text(ax, gx - 0.1, gy + gs / 2, "queries i ->", ha="right", rotation=90, va="center", size=FONT - 1.5,
              color="#555555")
        if hot_col:
            _arrow(ax, (gx + 2.5 * t, gy + gs - 0.1), (gx + 2.5 * t, gy + 0.1), color=REG["edge"], lw=1.5)
            lines = ["program j keeps K_j, V_j; dK_j, dV_j", "accumulate in registers", "for each query block i:",
                     "  P  = exp(Q_i K_jᵀ s - lse_i)", "  dV_j += Pᵀ dO_i", "  dP = dO_i V_jᵀ",
                     "  dS = P ∘ (dP - delta_i)", "  dK_j += dSᵀ Q_i * s", "store dK_j, dV_j once"]
        else:
            _arrow(ax, (gx + 0.1, gy + gs - 2.5 * t), (gx + gs - 0.1, gy + gs - 2.5 * t), color=REG["edge"],
                   lw=1.5)
            lines = ["program i keeps Q_i, dO_i, lse_i,", "delta_i; dQ_i accumulates", "for each key block j:",
                     "  P  = exp(Q_i K_jᵀ s - lse_i)", "  dP = dO_i V_jᵀ", "  dS = P ∘ (dP - delta_i)",
                     "  dQ_i += dS K_j * s", "", "store dQ_i once"]
        for k, line in enumerate(lines):
            mono = line.startswith("  ")
            _text(ax, gx + gs + 0.12, 5.15 - k * 0.29, line.strip() if not mono else line,
                  size=FONT - 2 if mono else FONT - 1.5, family="DejaVu Sans Mono" if mono else "DejaVu Sans",
                  color=INK if mono else COMPUTE["text"])
    ax.plot([4.95, 4.95], [2.85, 5.75], color="#cccccc", lw=0.8)
    _text(ax, 0.3, 2.3, "Each program owns the gradient it writes, so no two programs add into the same "
          "memory. One kernel for all three\nwould need atomic adds into dQ (every key block "
          "touches every dQ_i), which are slow and not deterministic.", size=FONT - 1)
    _text(ax, 0.3, 1.35, "Both kernels rebuild P and dS tile by tile from Q, K, V, dO, lse and delta: the N x N "
          "matrices never reach HBM.", size=FONT - 1, color=REG["text"])
    _text(ax, 0.3, 0.7, "s = 1/sqrt(d), the softmax scale.  The cost: QKᵀ and dO Vᵀ are computed twice, once in "
          "each kernel.", size=FONT - 1.5, color="#555555")
    _legend(ax, 0.3, 0.3, keys=("sram", "reg", "ghost"))
    return fig


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
