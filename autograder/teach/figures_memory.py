"""Diagrams of notebooks 01 and 02: the memory hierarchy, a grid of programs over a tensor, unfused against fused
data flow, and one RMSNorm program per row."""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure

from autograder.teach.drawing import (
    COMPUTE,
    FONT,
    GHOST,
    HBM,
    INK,
    L2,
    PLAIN,
    RC,
    REG,
    SRAM,
    draw_arrow,
    draw_box,
    draw_grid,
    draw_legend,
    draw_text,
    new_canvas,
)

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
    fig, ax = new_canvas(10, 7.2, title)
    draw_text(ax, 0.25, 6.62, subtitle, size=FONT - 0.5,
          color="#555555", italic=True)
    cx = 2.15
    draw_text(ax, 4.35, 6.2, "capacity", bold=True)
    draw_text(ax, 6.45, 6.2, "bandwidth, latency", bold=True)
    # compute on top
    draw_box(ax, cx - 1.0, 5.25, 2.0, 0.62, "Compute\ntensor cores, ALUs", COMPUTE, bold=False)
    draw_text(ax, 4.35, 5.56, sms, color=COMPUTE["text"])
    draw_text(ax, 6.45, 5.56, compute_note or "~1,000 TFLOP/s dense bf16\n(matmul on tensor cores)",
          color=note_color if compute_note else COMPUTE["text"])
    ys = [4.25, 3.2, 2.15, 0.95]
    hs = [0.72, 0.72, 0.72, 0.9]
    for (name, style, w, cap, bw), y, h in zip(_LEVELS, ys, hs):
        draw_box(ax, cx - w / 2, y, w, h, name, style, bold=True)
        draw_text(ax, 4.35, y + h / 2, cap, color=style["text"])
        note = bw
        color = style["text"]
        if name.startswith("HBM") and hbm_note is not None:
            note, color = hbm_note, note_color
        draw_text(ax, 6.45, y + h / 2, note, color=color)
    for y0, y1 in [(5.25, 4.97), (4.25, 3.92), (3.2, 2.87), (2.15, 1.85)]:
        ax.plot([cx, cx], [y1 + 0.02, y0 - 0.02], color="#777777", lw=2.5, zorder=1)
    draw_text(ax, cx - 2.0, 3.5, "on chip", size=FONT - 1, color=SRAM["text"], rotation=90, ha="center", italic=True)
    draw_text(ax, cx - 2.0, 1.4, "off chip", size=FONT - 1, color=HBM["text"], rotation=90, ha="center", italic=True)
    ax.plot([0.05, 9.95], [2.0, 2.0], color="#999999", lw=0.8, ls=(0, (4, 3)), zorder=1)
    draw_text(ax, 0.3, 2.05, "chip edge", size=FONT - 2, color="#777777", va="bottom")
    # the kernel's round trip
    draw_arrow(ax, (8.95, 1.4), (8.95, 5.0), color=HBM["edge"], lw=2.6)
    draw_arrow(ax, (9.5, 5.0), (9.5, 1.4), color=HBM["edge"], lw=2.6)
    draw_text(ax, 8.8, 3.2, "load inputs", rotation=90, ha="center", color=HBM["text"], size=FONT - 0.5)
    draw_text(ax, 9.65, 3.2, "store outputs", rotation=90, ha="center", color=HBM["text"], size=FONT - 0.5)
    draw_text(ax, 9.22, 5.45, "kernel", ha="center", bold=True, color=COMPUTE["text"])
    draw_text(ax, 0.25, 0.45, "A kernel reads its inputs from HBM and writes its outputs back. Between the load "
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
    fig, ax = new_canvas(10, 7.6, "One program per block: the launch grid")
    # ---- 1-D
    n, block, cell, x0, y0 = 20, 8, 0.34, 0.9, 5.35
    draw_text(ax, 0.25, 6.85, "1-D: a tensor of N = 20 elements, BLOCK = 8, grid = (cdiv(N, BLOCK),) = (3,)", bold=True)
    for i in range(24):
        x = x0 + i * cell + (i // block) * 0.18
        masked = i >= n
        draw_box(ax, x, y0, cell, 0.42, str(i) if not masked else "", GHOST if masked else HBM, fontsize=FONT - 1.5,
             rounded=False, lw=0.9, hatch="///" if masked else None)
        if masked:
            draw_text(ax, x + cell / 2, y0 + 0.21, str(i), size=FONT - 1.5, color="#999999", ha="center")
    for p in range(3):
        xa = x0 + p * (block * cell + 0.18)
        xb = xa + block * cell
        ax.plot([xa, xa, xb, xb], [y0 + 0.52, y0 + 0.62, y0 + 0.62, y0 + 0.52], color=COMPUTE["edge"], lw=1.5)
        draw_text(ax, (xa + xb) / 2, y0 + 0.8, f"program pid = {p}", ha="center", color=COMPUTE["text"], bold=True)
    xe = x0 + 2 * (block * cell + 0.18) + 4 * cell
    ax.plot([xe, xe], [y0 - 0.12, y0 + 0.5], color="#b00020", lw=2)
    draw_text(ax, xe + 0.05, y0 - 0.2, "N", color="#b00020", bold=True)
    px = x0 + 2 * (block * cell + 0.18)
    draw_text(ax, 0.25, y0 - 0.48, "pid 2:", bold=True, color=COMPUTE["text"])
    draw_text(ax, 0.9, y0 - 0.48, "offsets = pid * BLOCK + arange(BLOCK)  =", family="DejaVu Sans Mono", size=FONT - 1)
    draw_text(ax, 0.9, y0 - 0.86, "mask = offsets < N                     =", family="DejaVu Sans Mono", size=FONT - 1)
    for k in range(block):
        xc = px + k * cell + cell / 2
        draw_text(ax, xc, y0 - 0.48, str(16 + k), ha="center", size=FONT - 1, color=INK if k < 4 else "#999999")
        draw_text(ax, xc, y0 - 0.86, "T" if k < 4 else "F", ha="center", size=FONT - 1,
              color=COMPUTE["text"] if k < 4 else "#b00020", bold=True)
    draw_text(ax, 0.9, y0 - 1.25, "tl.load(x + offsets, mask=mask) and tl.store(..., mask=mask) leave the greyed lanes "
          "alone: no read or write past N.", size=FONT - 1)
    # ---- 2-D
    top = 3.45
    ax.plot([0.2, 9.8], [top + 0.2, top + 0.2], color="#cccccc", lw=0.8)
    draw_text(ax, 0.25, top, "2-D: a matrix of M x N, tiles of BLOCK_M x BLOCK_N, grid = (cdiv(M, BLOCK_M), "
          "cdiv(N, BLOCK_N)) = (3, 4)", bold=True)
    mx, my, tw, th = 0.9, 0.35, 0.92, 0.8
    rows, cols, n_frac = 3, 4, 3.45  # the last tile column runs past N
    for r in range(rows):
        for c in range(cols):
            x, y = mx + c * tw, my + (rows - 1 - r) * th
            hot = (r, c) == (1, 2)
            draw_box(ax, x, y, tw, th, "", REG if hot else HBM, rounded=False, lw=1.6 if hot else 0.8)
            vis = tw if c < cols - 1 else (n_frac - c) * tw
            draw_text(ax, x + vis / 2, y + th / 2, f"({r}, {c})", ha="center", size=FONT - 1,
                  color=REG["text"] if hot else HBM["text"], bold=hot)
    gx = mx + n_frac * tw
    draw_box(ax, gx, my, (cols - n_frac) * tw, rows * th, "", GHOST, rounded=False, lw=0.8, hatch="///", z=3)
    ax.plot([gx, gx], [my - 0.08, my + rows * th + 0.08], color="#b00020", lw=2, zorder=6)
    draw_text(ax, gx, my + rows * th + 0.18, "N", color="#b00020", bold=True, ha="center")
    draw_text(ax, mx - 0.1, my + rows * th / 2, "M rows", rotation=90, ha="right", color=HBM["text"])
    draw_text(ax, mx + 1.5 * tw, my + rows * th + 0.18, "(pid_m, pid_n)", ha="center", size=FONT - 1,
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
        draw_text(ax, fx, 2.95 - i * 0.36, s, size=FONT - 1, color=col, bold=b,
              family="DejaVu Sans" if b else "DejaVu Sans Mono")
    draw_text(ax, fx, 0.55, "The strides say how far apart consecutive rows and\ncolumns are in memory, so the same "
          "kernel reads a\ntransposed or sliced view without a copy.", size=FONT - 1, color="#444444")
    return fig


def unfused_vs_fused() -> Figure:
    fig, ax = new_canvas(10, 6.4, "Three kernels or one: y = sin(x * 1.25 + 0.5)")
    hy, hh = 0.95, 0.75  # the HBM band
    for x0, label in [(0.25, "eager PyTorch: 3 kernels"), (5.25, "fused: 1 kernel")]:
        draw_box(ax, x0, hy, 4.5, hh, "", HBM, rounded=True)
        draw_text(ax, x0 + 0.08, hy + hh + 0.12, "HBM", color=HBM["text"], bold=True, size=FONT - 1)
        draw_text(ax, x0 + 2.25, 5.3, label, ha="center", bold=True, size=FONT + 1)
    # eager
    tensors = ["x", "a", "b", "y"]
    tx = [0.45 + i * 1.1 for i in range(4)]
    for x, t in zip(tx, tensors):
        draw_box(ax, x, hy + 0.15, 0.75, 0.45, t, PLAIN, bold=True)
    ops = ["a = x * 1.25", "b = a + 0.5", "y = sin(b)"]
    for i, op in enumerate(ops):
        kx = 0.35 + i * 1.45
        ky = 3.05 + (0.0 if i % 2 == 0 else 0.95)
        draw_box(ax, kx, ky, 1.35, 0.62, f"kernel {i + 1}\n{op}", COMPUTE, fontsize=FONT - 1.5)
        draw_arrow(ax, (tx[i] + 0.37, hy + 0.62), (kx + 0.35, ky - 0.02), color=HBM["edge"], text="|x|", tpos=0.55,
               toff=(-0.2, 0.0))
        draw_arrow(ax, (kx + 1.0, ky - 0.02), (tx[i + 1] + 0.37, hy + 0.62), color=HBM["edge"], text="|x|",
               tpos=0.45, toff=(0.2, 0.0))
    draw_text(ax, 2.5, 0.55, "read 3|x| + write 3|x| = 6|x|, three launches\na and b make a round trip through HBM",
          ha="center", size=FONT - 0.5, color=HBM["text"])
    # fused
    fx = 5.55
    draw_box(ax, fx, 2.85, 3.9, 2.35, "", COMPUTE)
    draw_text(ax, fx + 0.12, 5.0, "one kernel, one program per block of x", color=COMPUTE["text"], size=FONT - 1)
    steps = ["load x", "* 1.25", "+ 0.5", "sin", "store y"]
    for i, s in enumerate(steps):
        sx = fx + 0.15 + i * 0.74
        style = REG if 0 < i < 4 else PLAIN
        draw_box(ax, sx, 3.75, 0.62, 0.55, s, style, fontsize=FONT - 1.5)
        if i < 4:
            draw_arrow(ax, (sx + 0.63, 4.02), (sx + 0.73, 4.02), lw=1.0)
    draw_text(ax, fx + 1.95, 3.15, "a and b exist only in registers", ha="center", color=REG["text"], size=FONT - 1)
    draw_box(ax, 5.6, hy + 0.15, 0.75, 0.45, "x", PLAIN, bold=True)
    draw_box(ax, 8.6, hy + 0.15, 0.75, 0.45, "y", PLAIN, bold=True)
    draw_arrow(ax, (5.97, hy + 0.62), (fx + 0.46, 3.73), color=HBM["edge"], text="|x|", toff=(-0.25, 0))
    draw_arrow(ax, (fx + 3.5, 3.73), (8.97, hy + 0.62), color=HBM["edge"], text="|x|", toff=(0.25, 0))
    draw_text(ax, 7.5, 0.55, "read |x| + write |x| = 2|x|, one launch\n3x less traffic, the floor for this op",
          ha="center", size=FONT - 0.5, color=COMPUTE["text"])
    draw_legend(ax, 0.3, 5.8, keys=("hbm", "reg", "compute"))
    return fig


# ---------------------------------------------------------------------------------------------------------
# 02: vertical fusion


def rmsnorm_row_program() -> Figure:
    fig, ax = new_canvas(10, 7.0, "RMSNorm: one program per row, y = x / sqrt(mean(x²) + eps) * w")
    # the matrix in HBM
    mx, my, mw, mh, rows = 0.35, 3.1, 2.6, 2.9, 8
    draw_box(ax, mx, my, mw, mh, "", HBM, rounded=False)
    draw_grid(ax, mx, my, mw, mh, rows, 1, HBM)
    hot = 3
    ry = my + mh - (hot + 1) * mh / rows
    draw_box(ax, mx, ry, mw, mh / rows, "row i", REG, rounded=False, bold=True, fontsize=FONT - 1)
    draw_text(ax, mx + mw / 2, my + mh + 0.18, "x (and y): M rows x N in HBM", ha="center", color=HBM["text"], bold=True)
    draw_text(ax, mx + mw / 2, my - 0.22, "grid = (M,): program i owns row i", ha="center", color=COMPUTE["text"],
          size=FONT - 1)
    # the program
    px, py, pw, ph = 3.6, 3.0, 6.1, 3.0
    draw_box(ax, px, py, pw, ph, "", COMPUTE)
    draw_text(ax, px + 0.15, py + ph - 0.22, "program i (one row fits in its registers)", color=COMPUTE["text"],
          bold=True)
    steps = [
        ("1  load the row", "x_i = tl.load(...)  (N values)", PLAIN),
        ("2  reduce in registers", "ss = sum(x_i * x_i)", REG),
        ("3  normalise", "y_i = x_i * rsqrt(ss / N + eps) * w", REG),
        ("4  store", "tl.store(y + ..., y_i)", PLAIN),
    ]
    for k, (a, b, st) in enumerate(steps):
        yy = py + ph - 0.75 - k * 0.55
        draw_box(ax, px + 0.2, yy, 2.2, 0.42, a, st, fontsize=FONT - 1, ha="left")
        draw_text(ax, px + 2.6, yy + 0.21, b, family="DejaVu Sans Mono", size=FONT - 1.5)
    draw_arrow(ax, (mx + mw + 0.02, ry + mh / rows / 2), (px + 0.18, py + ph - 0.55), color=HBM["edge"],
           text="read |row|", toff=(0.0, 0.15), fontsize=FONT - 1.5)
    draw_arrow(ax, (px + 0.18, py + ph - 2.15), (mx + mw + 0.02, ry + 0.08), color=HBM["edge"],
           text="write |row| (to y)", toff=(0.15, -0.3), fontsize=FONT - 1.5)
    # eager below
    ax.plot([0.2, 9.8], [2.4, 2.4], color="#cccccc", lw=0.8)
    draw_text(ax, 0.25, 2.15, "eager PyTorch: three full-size kernels", bold=True)
    eager = [("rsqrt(mean(x²) + eps)", "reads |x|, writes M values"), ("x * r", "reads |x|, writes |x|"),
             ("(x * r) * w", "reads |x|, writes |x|")]
    for k, (op, traffic) in enumerate(eager):
        ex = 0.35 + k * 2.35
        draw_box(ax, ex, 1.05, 2.15, 0.7, op, COMPUTE, fontsize=FONT - 1)
        draw_text(ax, ex + 1.07, 0.78, traffic, ha="center", size=FONT - 1.5, color=HBM["text"])
        if k < 2:
            draw_arrow(ax, (ex + 2.17, 1.4), (ex + 2.33, 1.4), lw=1.2)
    draw_box(ax, 7.55, 0.62, 2.2, 1.3, "eager: ~5|x|\nfused: 2|x|\n(the floor)", PLAIN, fontsize=FONT, bold=True)
    draw_text(ax, 0.35, 0.35, "Fused, x crosses HBM once in and once out; the statistic never leaves the chip.",
          size=FONT - 1, color=INK)
    return fig
