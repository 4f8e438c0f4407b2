"""The drawing kit of the course's schematic diagrams: one palette (HBM orange, on-chip memory blue, compute green,
the L2 cache violet, anything masked or never materialised grey), a fixed matplotlib style, and boxes, arrows,
text and grids placed in inches on a canvas."""

from __future__ import annotations

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


def new_canvas(width: float, height: float, title: str):
    """A Figure of width x height inches whose single axes uses inches as data units, origin bottom left."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    ax.text(0.25, height - 0.22, title, fontsize=14, fontweight="bold", color=INK, va="top", ha="left")
    return fig, ax


def draw_box(ax, x, y, w, h, text="", style=PLAIN, fontsize=FONT, bold=False, hatch=None, rounded=True, lw=1.4,
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


def draw_arrow(ax, start, end, color=INK, lw=1.6, text=None, tpos=0.5, toff=(0.0, 0.12), fontsize=FONT - 1,
           style="-|>", ls="-", rad=0.0, tcolor=None, ha="center", z=4):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=13, color=color, lw=lw,
                                 linestyle=ls, connectionstyle=f"arc3,rad={rad}", zorder=z, shrinkA=1, shrinkB=1))
    if text:
        tx = start[0] + (end[0] - start[0]) * tpos + toff[0]
        ty = start[1] + (end[1] - start[1]) * tpos + toff[1]
        ax.text(tx, ty, text, ha=ha, va="center", fontsize=fontsize, color=tcolor or color, zorder=z + 1)


def draw_text(ax, x, y, s, size=FONT, color=INK, ha="left", va="center", bold=False, italic=False, z=5, **kw):
    return ax.text(x, y, s, fontsize=size, color=color, ha=ha, va=va, zorder=z,
                   fontweight="bold" if bold else "normal", fontstyle="italic" if italic else "normal",
                   linespacing=1.35, **kw)


def draw_grid(ax, x, y, w, h, rows, cols, style, lw=0.6, z=3):
    """Thin lines dividing the rectangle (x, y, w, h) into rows x cols tiles."""
    for i in range(1, rows):
        ax.plot([x, x + w], [y + h * i / rows] * 2, color=style["edge"], lw=lw, zorder=z)
    for j in range(1, cols):
        ax.plot([x + w * j / cols] * 2, [y, y + h], color=style["edge"], lw=lw, zorder=z)


def draw_legend(ax, x, y, keys=("hbm", "sram", "compute")):
    """The colour key, one swatch per kind, left to right from (x, y)."""
    names = {"hbm": (HBM, "HBM (off-chip DRAM)"), "sram": (SRAM, "on-chip: shared memory / SRAM"),
             "reg": (REG, "registers"), "compute": (COMPUTE, "compute"), "l2": (L2, "L2 cache"),
             "ghost": (GHOST, "never stored / masked")}
    for key in keys:
        style, label = names[key]
        draw_box(ax, x, y - 0.09, 0.26, 0.18, style=style, rounded=False, lw=1.0)
        draw_text(ax, x + 0.34, y, label, size=FONT - 1.5, color="#333333")
        x += 0.34 + 0.068 * len(label) + 0.3
    return x


