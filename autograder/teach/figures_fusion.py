"""Diagrams of notebooks 03, 04 and 06: siblings sharing an input, QKV weights stacked by rows, many small
tensors in one launch, a GEMM tile with its epilogue, and the compiler's pipeline from Python to Triton."""

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
    draw_legend,
    draw_text,
    new_canvas,
)

# ---------------------------------------------------------------------------------------------------------
# 03: horizontal fusion


def shared_input_siblings() -> Figure:
    fig, ax = new_canvas(10, 6.4, "Siblings that share an input: X read twice, or once")
    hy, hh = 0.95, 0.8  # the HBM band
    for x0, label in [(0.25, "unfused: two kernels, each reads all of X"),
                      (5.25, "fused: one kernel reads each tile of X once")]:
        draw_box(ax, x0, hy, 4.5, hh, "", HBM)
        draw_text(ax, x0 + 0.08, hy + hh + 0.13, "HBM", color=HBM["text"], bold=True, size=FONT - 1)
        draw_text(ax, x0 + 2.25, 5.25, label, ha="center", bold=True, size=FONT + 0.5)
    ax.plot([5.0, 5.0], [0.3, 5.4], color="#cccccc", lw=0.8)

    def tensors(x0, hot=None):
        """X as four tiles, then Y1 and Y2, in the HBM band; returns the centres of X, Y1, Y2."""
        for t in range(4):
            draw_box(ax, x0 + t * 0.42, hy + 0.17, 0.42, 0.46, "", SRAM if t == hot else PLAIN, rounded=False,
                     lw=0.8)
        draw_text(ax, x0 + 0.84, hy + 0.4, "X", ha="center", bold=True, size=FONT + 1)
        draw_box(ax, x0 + 2.25, hy + 0.17, 0.7, 0.46, "Y1", PLAIN, bold=True, rounded=False)
        draw_box(ax, x0 + 3.2, hy + 0.17, 0.7, 0.46, "Y2", PLAIN, bold=True, rounded=False)
        return x0 + 0.84, x0 + 2.6, x0 + 3.55

    # unfused: kernel 1 and kernel 2 each stream all of X
    cx, c1, c2 = tensors(0.45)
    for k, (kx, out, f) in enumerate([(0.45, c1, "f1"), (2.55, c2, "f2")]):
        draw_box(ax, kx, 3.2, 1.75, 0.8, f"kernel {k + 1}\nY{k + 1} = {f}(X)", COMPUTE, fontsize=FONT - 1)
        draw_arrow(ax, (cx - 0.3 + 0.6 * k, hy + 0.65), (kx + 0.6, 3.18), color=HBM["edge"], text="all of X",
                   tpos=0.55, toff=(-0.45 + 1.0 * k, 0.0), fontsize=FONT - 1.5)
        draw_arrow(ax, (kx + 1.3, 3.18), (out, hy + 0.65), color=HBM["edge"], tpos=0.5)
    draw_text(ax, 2.5, 0.5, "traffic 2|X| + |Y1| + |Y2|, two launches", ha="center", size=FONT - 0.5,
              color=HBM["text"])
    # fused: one program per tile of X; the tile is loaded once and feeds both outputs
    cx, c1, c2 = tensors(5.45, hot=1)
    draw_box(ax, 5.45, 2.75, 4.1, 2.05, "", COMPUTE)
    draw_text(ax, 5.58, 4.57, "one kernel, one program per tile of X", color=COMPUTE["text"], size=FONT - 1)
    draw_box(ax, 5.7, 3.3, 1.15, 0.75, "tile of X\nin registers", REG, fontsize=FONT - 1.5)
    for k, (y, f) in enumerate([(3.85, "f1(tile)"), (2.95, "f2(tile)")]):
        draw_box(ax, 7.45, y, 1.2, 0.5 if k == 0 else 0.5, f, COMPUTE, fontsize=FONT - 1.5)
        draw_arrow(ax, (6.87, 3.68), (7.43, y + 0.25), lw=1.2)
    draw_arrow(ax, (5.45 + 0.63, hy + 0.65), (6.2, 3.28), color=HBM["edge"], text="each tile of X, once",
               tpos=0.5, toff=(0.95, 0.0), fontsize=FONT - 1.5)
    draw_arrow(ax, (8.7, 4.1), (c1 + 0.3, hy + 0.65), color=HBM["edge"], rad=-0.25)
    draw_arrow(ax, (8.67, 3.2), (c2 + 0.1, hy + 0.65), color=HBM["edge"])
    draw_text(ax, 7.5, 0.5, "traffic |X| + |Y1| + |Y2|, one launch:\nboth outputs from one read of X", ha="center",
              size=FONT - 0.5, color=COMPUTE["text"])
    draw_legend(ax, 0.3, 5.8, keys=("hbm", "reg", "compute"))
    return fig


def qkv_stacking() -> Figure:
    fig, ax = new_canvas(10, 7.0, "The QKV projection: weights stacked by rows, one GEMM")
    kw, nq, nkv, m = 1.2, 1.6, 0.4, 0.8  # inches for K, n_q, n_kv (4 : 1, as with 32 and 8 heads), M
    # 1. nn.Linear's weights, (out features, K), stacked by rows
    draw_text(ax, 0.3, 6.3, "1. nn.Linear keeps each weight as (out features, K); stack them by rows, once, "
              "at load time", bold=True, size=FONT - 0.5)
    top = 5.85
    for k, (name, h, x) in enumerate([("Wq", nq, 0.5), ("Wk", nkv, 2.2), ("Wv", nkv, 3.9)]):
        draw_box(ax, x, top - h, kw, h, name, HBM, bold=True, rounded=False, fontsize=FONT - 1)
        size = "n_q x K" if k == 0 else "n_kv x K"
        draw_text(ax, x + kw / 2, top - h - 0.2, size, ha="center", size=FONT - 1.5, color="#555555")
    draw_arrow(ax, (5.35, top - 0.9), (6.05, top - 0.9), lw=1.8)
    sx = 6.2
    y = top
    for name, h in [("Wq", nq), ("Wk", nkv), ("Wv", nkv)]:
        y -= h
        draw_box(ax, sx, y, kw, h, name, HBM, bold=True, rounded=False, fontsize=FONT - 1.5)
    draw_text(ax, sx + kw + 0.15, top - 0.55, "W_qkv:\n(n_q + 2·n_kv) rows x K", size=FONT - 1,
              color=HBM["text"], bold=True)
    draw_text(ax, sx + kw + 0.15, top - 1.55, "torch.cat([Wq, Wk, Wv], dim=0)\n(GQA: n_kv < n_q)",
              size=FONT - 1.5, family="DejaVu Sans Mono")
    # 2. one GEMM, the output split by columns
    ax.plot([0.2, 9.8], [3.15, 3.15], color="#cccccc", lw=0.8)
    draw_text(ax, 0.3, 2.9, "2. one GEMM, out = X @ W_qkvᵀ: X is read once; Q, K and V are column slices of out",
              bold=True, size=FONT - 0.5)
    gy = 0.85  # bottom of X and out
    draw_box(ax, 0.5, gy + 0.2, kw, m, "X", HBM, bold=True, rounded=False)
    draw_text(ax, 0.5 + kw / 2, gy, "M x K", ha="center", size=FONT - 1.5, color="#555555")
    draw_text(ax, 1.95, gy + 0.6, "@", ha="center", size=FONT + 3)
    wx = 2.2
    x = wx
    for name, w in [("Wqᵀ", nq), ("Wkᵀ", nkv), ("Wvᵀ", nkv)]:
        draw_box(ax, x, gy, w, kw, name, HBM, bold=True, rounded=False, fontsize=FONT - 2)
        x += w
    draw_text(ax, wx + (nq + 2 * nkv) / 2, gy - 0.2, "W_qkvᵀ: K x (n_q + 2·n_kv)", ha="center", size=FONT - 1.5,
              color="#555555")
    draw_text(ax, x + 0.25, gy + 0.6, "=", ha="center", size=FONT + 3)
    ox = x + 0.5
    x = ox
    for name, w, cols in [("Q", nq, "n_q columns"), ("K", nkv, "n_kv"), ("V", nkv, "n_kv")]:
        draw_box(ax, x, gy + 0.2, w, m, name, HBM, bold=True, rounded=False)
        draw_text(ax, x + w / 2, gy, cols, ha="center", size=FONT - 2, color="#555555")
        x += w
    draw_text(ax, (ox + x) / 2, gy + m + 0.38, "out: M x (n_q + 2·n_kv)", ha="center", size=FONT - 1.5,
              color="#555555")
    draw_text(ax, x + 0.3, gy + 1.05, "q = out[:, :n_q]\nk = out[:, n_q:n_q+n_kv]\nv = out[:, n_q+n_kv:]",
              size=FONT - 2, family="DejaVu Sans Mono", va="top")
    draw_text(ax, x + 0.3, gy + 0.05, "views of one buffer,\nno copy", size=FONT - 1.5, color="#555555")
    draw_box(ax, 0.5, 0.1, 4.2, 0.45, "1 launch; unfused, three GEMMs read X three times", COMPUTE,
             fontsize=FONT - 1.5)
    draw_text(ax, 4.95, 0.32, "K and V are n_kv wide: alone, their GEMMs are too narrow to fill the GPU",
              size=FONT - 1.5, color="#555555")
    return fig


def multi_tensor_launch() -> Figure:
    fig, ax = new_canvas(10, 7.0, "Horizontal fusion: many small tensors, one launch")
    draw_text(ax, 0.3, 6.45, "an AdamW step over 5 parameter tensors of different sizes, scattered through HBM",
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
    draw_text(ax, 0.3, 3.1, "fused: one launch, grid = (total blocks,) = (21,), and a table of addresses", bold=True)
    tx, ty = 0.4, 0.45
    hdr = ["tensor t", "address", "numel"]
    cw = [0.8, 1.15, 0.85]
    for j, h in enumerate(hdr):
        draw_box(ax, tx + sum(cw[:j]), ty + 5 * 0.36, cw[j], 0.36, h, SRAM, rounded=False, fontsize=FONT - 2, bold=True,
             lw=0.8)
    first = 0
    for t, s in enumerate(sizes):
        row = [f"{t}: p{t}", f"&p{t}", f"{s} x B"]
        for j, v in enumerate(row):
            draw_box(ax, tx + sum(cw[:j]), ty + (4 - t) * 0.36, cw[j], 0.36, v, PLAIN, rounded=False,
                 fontsize=FONT - 2, lw=0.6)
        first += s
    draw_text(ax, tx + sum(cw) / 2, ty - 0.2, "(and the addresses of its g, m, v); B = BLOCK", ha="center",
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
    draw_text(ax, gx, gy + 0.56, "programs 0 .. 20, and the per-block table: the tensor t each one updates",
          size=FONT - 1.5, color=COMPUTE["text"])
    pid = 0
    for t, s in enumerate(sizes):
        for b in range(s):
            draw_text(ax, gx + pid * 0.25 + 0.125, gy + 0.18, str(t), ha="center", size=FONT - 2.5, z=6)
            pid += 1
    draw_arrow(ax, (gx + 11.5 * 0.25, gy - 0.02), (gx + 11.5 * 0.25, 1.6), lw=1.2)
    draw_text(ax, gx - 0.05, 1.15, "program 11 reads t = block_tensor[11] = 2 and start = block_start[11] = B,\n"
          "loads the address &p2 from the table and updates p2[B : 2B]", size=FONT - 1.5)
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
