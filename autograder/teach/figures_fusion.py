"""Diagrams of notebooks 03, 04 and 06: stacked QKV weights, many small ops in one launch, a GEMM tile with its
epilogue, and the compiler's pipeline from Python to Triton."""

from __future__ import annotations

from matplotlib.figure import Figure

from autograder.teach.drawing import (
    COMPUTE,
    FONT,
    GHOST,
    HBM,
    INK,
    L2,
    PLAIN,
    REG,
    SRAM,
    draw_arrow,
    draw_box,
    draw_grid,
    draw_text,
    new_canvas,
)

# ---------------------------------------------------------------------------------------------------------
# 03: horizontal fusion


def qkv_stacking() -> Figure:
    fig, ax = new_canvas(10, 6.2, "Horizontal fusion: one GEMM for Q, K and V")
    # left: three GEMMs
    draw_text(ax, 0.3, 5.55, "three GEMMs: x is read three times", bold=True)
    for k, (name, out) in enumerate([("Wq", "q"), ("Wk", "k"), ("Wv", "v")]):
        y = 4.35 - k * 1.35
        draw_box(ax, 0.3, y, 0.55, 1.0, "x", HBM, bold=True, rounded=False)
        draw_text(ax, 1.02, y + 0.5, "@", ha="center", size=FONT + 2)
        draw_box(ax, 1.2, y + 0.45, 0.55, 0.55, name, HBM, bold=True, rounded=False, fontsize=FONT - 1)
        draw_arrow(ax, (1.85, y + 0.5), (2.45, y + 0.5))
        draw_box(ax, 2.55, y, 0.55, 1.0, out, HBM, bold=True, rounded=False)
        draw_box(ax, 3.35, y + 0.25, 1.05, 0.5, f"launch {k + 1}", COMPUTE, fontsize=FONT - 1.5)
    draw_text(ax, 0.3, 0.75, "reads 3|x| + |Wq|+|Wk|+|Wv|\n3 launches, each a third of the work", size=FONT - 1,
          color=HBM["text"])
    ax.plot([4.75, 4.75], [0.4, 5.7], color="#cccccc", lw=0.8)
    # right: stacked
    draw_text(ax, 5.0, 5.55, "stacked: x is read once", bold=True)
    draw_box(ax, 5.0, 3.8, 0.55, 1.3, "", HBM, rounded=False)
    draw_text(ax, 5.27, 4.45, "x", ha="center", bold=True, color=HBM["text"])
    draw_text(ax, 5.27, 3.62, "M x d", ha="center", size=FONT - 2, color="#555555")
    draw_text(ax, 5.75, 4.45, "@", ha="center", size=FONT + 2)
    wx, wy, ws = 5.95, 4.55, 0.5
    for k, (name, st) in enumerate([("Wq", HBM), ("Wk", HBM), ("Wv", HBM)]):
        draw_box(ax, wx + k * ws, wy, ws, ws, name, st, bold=True, rounded=False, fontsize=FONT - 1)
    draw_text(ax, wx + 1.5 * ws, wy + ws + 0.17, "W_qkv = cat([Wq, Wk, Wv], dim=1): d x 3d", ha="center",
          size=FONT - 1.5, color=HBM["text"])
    draw_text(ax, wx, 3.95, "(concatenated once, at load time)", ha="left", size=FONT - 2,
          color="#555555")
    draw_arrow(ax, (wx + 3 * ws + 0.1, 4.45), (wx + 3 * ws + 0.55, 4.45))
    ox = wx + 3 * ws + 0.65
    for k, name in enumerate(["q", "k", "v"]):
        draw_box(ax, ox + k * 0.45, 3.8, 0.45, 1.3, name, HBM, bold=True, rounded=False)
    draw_text(ax, ox + 0.67, 3.62, "M x 3d: one output", ha="center", size=FONT - 2, color="#555555")
    draw_box(ax, 5.6, 2.45, 3.6, 0.6, "1 launch, 3x the work per launch", COMPUTE, fontsize=FONT - 1)
    draw_text(ax, 5.0, 1.65, "q, k, v = out.split(d, dim=-1): three views, no copy", family="DejaVu Sans Mono",
          size=FONT - 1.5)
    draw_text(ax, 5.0, 0.75, "reads |x| + |W_qkv|: saves 2|x| of reads,\nand one large GEMM keeps the tensor cores "
          "busier", size=FONT - 1, color=COMPUTE["text"])
    return fig


def horizontal_fusion() -> Figure:
    fig, ax = new_canvas(10, 7.0, "Horizontal fusion: many small tensors, one launch")
    draw_text(ax, 0.3, 6.45, "an optimizer step over 5 parameter tensors of different sizes, scattered through HBM",
          size=FONT - 0.5, color="#444444")
    sizes = [3, 7, 2, 5, 4]  # in blocks
    # HBM layout of the tensors
    draw_box(ax, 0.3, 5.05, 9.4, 0.95, "", HBM)
    draw_text(ax, 9.6, 5.8, "HBM", color=HBM["text"], bold=True, size=FONT - 1.5, ha="right")
    cell = 0.27
    x = 0.5
    starts = []
    for t, s in enumerate(sizes):
        starts.append(x)
        for b in range(s):
            draw_box(ax, x + b * cell, 5.2, cell, 0.45, "", PLAIN, rounded=False, lw=0.7)
        draw_text(ax, x + s * cell / 2, 5.8, f"p{t}", ha="center", bold=True, size=FONT - 1, color=HBM["text"])
        x += s * cell + 0.35 + 0.1 * t
    # eager: one launch per tensor
    draw_text(ax, 0.3, 4.6, "eager / for-loop: one launch per tensor (often several per tensor)", bold=True)
    t0 = 0.5
    for t, s in enumerate(sizes):
        draw_box(ax, t0, 3.9, 0.85, 0.42, f"launch p{t}", COMPUTE, fontsize=FONT - 2)
        if t < len(sizes) - 1:
            draw_box(ax, t0 + 0.85, 3.9, 0.55, 0.42, "idle", GHOST, fontsize=FONT - 2.5, rounded=False, lw=0.6)
        t0 += 1.4
    draw_arrow(ax, (0.5, 3.75), (7.6, 3.75), lw=1.0, color="#777777")
    draw_text(ax, 7.7, 3.75, "time: 5 launch overheads,\nmost of the GPU idle each time", size=FONT - 1.5,
          color="#555555")
    # fused: address table and programs
    ax.plot([0.2, 9.8], [3.35, 3.35], color="#cccccc", lw=0.8)
    draw_text(ax, 0.3, 3.1, "fused: one launch, grid = (total blocks,) = (21,), and an address table", bold=True)
    tx, ty = 0.4, 0.45
    hdr = ["tensor", "pointer", "numel", "first block"]
    cw = [0.75, 0.95, 0.75, 1.0]
    for j, h in enumerate(hdr):
        draw_box(ax, tx + sum(cw[:j]), ty + 5 * 0.36, cw[j], 0.36, h, SRAM, rounded=False, fontsize=FONT - 2, bold=True,
             lw=0.8)
    first = 0
    for t, s in enumerate(sizes):
        row = [f"p{t}", f"&p{t}", f"{s} x B", str(first)]
        for j, v in enumerate(row):
            draw_box(ax, tx + sum(cw[:j]), ty + (4 - t) * 0.36, cw[j], 0.36, v, PLAIN, rounded=False,
                 fontsize=FONT - 2, lw=0.6)
        first += s
    draw_text(ax, tx + sum(cw) / 2, ty - 0.2, "B = BLOCK; a small table in HBM, passed as one pointer", ha="center",
          size=FONT - 2, color="#555555")
    # programs
    gx, gy = 4.2, 2.25
    pid = 0
    for t, s in enumerate(sizes):
        for b in range(s):
            hot = pid == 11
            draw_box(ax, gx + pid * 0.25, gy, 0.25, 0.36, "", REG if hot else COMPUTE, rounded=False, lw=0.6)
            pid += 1
        ax.plot([gx + pid * 0.25] * 2, [gy - 0.08, gy + 0.44], color=INK, lw=1.2, zorder=5)
    draw_text(ax, gx, gy + 0.56, "programs 0 .. 20, grouped by the tensor they serve", size=FONT - 1.5,
          color=COMPUTE["text"])
    draw_arrow(ax, (gx + 11.5 * 0.25, gy - 0.02), (gx + 11.5 * 0.25, 1.45), lw=1.2)
    draw_text(ax, gx - 0.05, 1.0, "program 11 looks itself up: first[p2] = 10 <= 11 < 12 = first[p3],\n"
          "so it updates block 11 - 10 = 1 of p2 at &p2 + 1 x B", size=FONT - 1.5)
    draw_text(ax, gx - 0.05, 0.35, "one launch overhead; every SM busy; each byte still moved once",
          size=FONT - 1, color=COMPUTE["text"], bold=True)
    return fig


# ---------------------------------------------------------------------------------------------------------
# 04: GEMM epilogue fusion


def gemm_tile_epilogue() -> Figure:
    fig, ax = new_canvas(10, 7.0, "A GEMM tile and its epilogue, all in registers")
    kt = 4  # K tiles
    # A: M x K, B: K x N, C: M x N
    ax_, ay, aw, ah = 0.4, 2.9, 2.4, 2.4
    draw_box(ax, ax_, ay, aw, ah, "", HBM, rounded=False)
    draw_grid(ax, ax_, ay, aw, ah, 4, kt, HBM)
    bx, by, bw, bh = 3.4, 2.9, 2.4, 2.4
    draw_box(ax, bx, by, bw, bh, "", HBM, rounded=False)
    draw_grid(ax, bx, by, bw, bh, kt, 4, HBM)
    tr, tc = 1, 2  # the C tile's block row and column
    for k in range(kt):
        draw_box(ax, ax_ + k * aw / kt, ay + ah - (tr + 1) * ah / 4, aw / kt, ah / 4, f"A{k}", SRAM, rounded=False,
             fontsize=FONT - 1.5, lw=1.0)
        draw_box(ax, bx + tc * bw / 4, by + bh - (k + 1) * bh / kt, bw / 4, bh / kt, f"B{k}", SRAM, rounded=False,
             fontsize=FONT - 1.5, lw=1.0)
    draw_text(ax, ax_ + aw / 2, ay + ah + 0.2, "A: M x K (HBM)", ha="center", color=HBM["text"], bold=True)
    draw_text(ax, bx + bw / 2, by + bh + 0.2, "B: K x N (HBM)", ha="center", color=HBM["text"], bold=True)
    draw_text(ax, ax_ + aw + 0.3, ay + ah / 2, "@", ha="center", size=FONT + 4)
    # the loop
    lx, ly = 6.25, 3.0
    draw_box(ax, lx, ly, 3.45, 2.3, "", COMPUTE)
    draw_text(ax, lx + 0.12, ly + 2.08, "program (pid_m, pid_n) = (1, 2)", color=COMPUTE["text"], bold=True,
          size=FONT - 1)
    code = ["acc = zeros(BM, BN, float32)", "for k in range(K // BK):", "    a = load(A tile k)",
            "    b = load(B tile k)", "    acc += dot(a, b)"]
    for i, c in enumerate(code):
        draw_text(ax, lx + 0.15, ly + 1.72 - i * 0.3, c, family="DejaVu Sans Mono", size=FONT - 1.5)
    draw_box(ax, lx + 2.35, ly + 0.12, 0.95, 0.55, "acc", REG, bold=True)
    draw_text(ax, lx + 2.82, ly + 0.82, "registers", ha="center", size=FONT - 2, color=REG["text"])
    draw_arrow(ax, (bx + bw + 0.05, by + bh / 2), (lx - 0.05, ly + 1.15), color=HBM["edge"],
           text="tiles stream in\n(via SRAM)", toff=(0.0, -0.45), fontsize=FONT - 1.5)
    # epilogue
    draw_text(ax, 0.4, 2.35, "epilogue: applied to acc while it is still in registers, then one store", bold=True)
    ex, ey = 0.4, 1.2
    steps = [("acc", REG), ("+ bias", REG), ("GELU", REG), ("+ residual", REG), ("cast bf16", REG),
             ("store C tile", HBM)]
    for i, (s, st) in enumerate(steps):
        draw_box(ax, ex + i * 1.58, ey, 1.3, 0.62, s, st, fontsize=FONT - 1, bold=i in (0, 5))
        if i < len(steps) - 1:
            draw_arrow(ax, (ex + i * 1.58 + 1.32, ey + 0.31), (ex + (i + 1) * 1.58 - 0.02, ey + 0.31))
    draw_text(ax, ex + 1.58 + 0.65, ey - 0.2, "bias: N values", ha="center", size=FONT - 2, color=HBM["text"])
    draw_text(ax, ex + 3 * 1.58 + 0.65, ey - 0.2, "loads its tile once", ha="center", size=FONT - 2,
          color=HBM["text"])
    draw_text(ax, 0.4, 0.38, "Unfused, C (M x N) is written by the GEMM and read and written again by each of "
          "bias, GELU and residual: ~6 extra |C|.", size=FONT - 1, color="#444444")
    return fig



# ---------------------------------------------------------------------------------------------------------
# 06: the compiler


def compiler_pipeline() -> Figure:
    fig, ax = new_canvas(10, 6.0, "torch.compile: from a Python function to Triton kernels")
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
        draw_box(ax, x, y, bw, 0.95, name, st, bold=True, fontsize=FONT + 0.5)
        for k, line in enumerate(lines):
            draw_text(ax, x + 0.02, y - 0.3 - k * 0.3, line, size=FONT - 1.5 if not mono else FONT - 2,
                  family="DejaVu Sans Mono" if mono else "DejaVu Sans")
        if i < len(stages) - 1:
            draw_arrow(ax, (x + bw + 0.02, y + 0.47), (x + bw + gap - 0.02, y + 0.47), lw=2)
    outs = ["bytecode", "FX graph(s)", "joint graph,\nfwd + bwd", "fused kernels"]
    for i, o in enumerate(outs):
        x = 0.3 + (i + 1) * (bw + gap) - gap / 2
        draw_text(ax, x, y + 1.2, o, ha="center", size=FONT - 2, color="#555555")
    # graph break illustration
    draw_text(ax, 0.3, 1.55, "a graph break:", bold=True, size=FONT - 0.5)
    draw_box(ax, 1.6, 1.3, 2.0, 0.5, "graph 1 (compiled)", L2, fontsize=FONT - 1.5)
    draw_box(ax, 3.75, 1.3, 2.1, 0.5, "print(y) / y.item()\nruns in Python", GHOST, fontsize=FONT - 2)
    draw_box(ax, 6.0, 1.3, 2.0, 0.5, "graph 2 (compiled)", L2, fontsize=FONT - 1.5)
    draw_text(ax, 1.6, 0.85, "nothing fuses across the break: y is written to HBM and read back.", size=FONT - 1.5,
          color=HBM["text"])
    draw_text(ax, 1.6, 0.5, "torch._dynamo.explain(f)(x, w) lists the breaks and their reasons.", size=FONT - 1.5,
          family="DejaVu Sans Mono")
    return fig
