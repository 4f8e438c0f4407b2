"""Diagrams of notebooks 05 and 07: the online softmax, the FlashAttention loop, the cross-entropy over vocabulary
tiles, what autograd saves against what FlashAttention recomputes, its backward's two kernels, and the chunked
linear cross-entropy backward."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from autograder.teach.drawing import (
    COMPUTE,
    FONT,
    GHOST,
    HBM,
    INK,
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
# 05: streaming reductions


def online_softmax() -> Figure:
    fig, ax = new_canvas(10, 6.4, "The online softmax: one pass, two running numbers")
    chunks = [[1.0, 3.0], [2.0, 5.0], [4.0, 0.5], [6.0, 1.0]]
    m, s = -math.inf, 0.0
    states = []
    for c in chunks:
        m_new = max(m, max(c))
        alpha = math.exp(m - m_new) if m > -math.inf else 0.0
        s = s * alpha + sum(math.exp(v - m_new) for v in c)
        states.append((m, m_new, alpha, s))
        m = m_new
    draw_text(ax, 0.3, 5.75, "a row of 8 scores, read in blocks of 2 (from HBM, once)", color=HBM["text"])
    for k, c in enumerate(chunks):
        x0 = 0.55 + k * 2.35
        for j, v in enumerate(c):
            draw_box(ax, x0 + j * 0.62, 4.85, 0.62, 0.52, f"{v:g}", HBM, rounded=False, fontsize=FONT)
        draw_text(ax, x0 + 0.62, 5.5, f"block {k + 1}", ha="center", size=FONT - 1.5, color="#555555")
        mo, mn, al, sk = states[k]
        draw_arrow(ax, (x0 + 0.62, 4.8), (x0 + 0.62, 4.2), color=HBM["edge"])
        draw_box(ax, x0 - 0.15, 2.65, 1.85, 1.5, "", REG)
        mold = "-inf" if mo == -math.inf else f"{mo:g}"
        draw_text(ax, x0 - 0.05, 3.92, f"m: {mold} -> {mn:g}", size=FONT - 1, color=REG["text"], bold=True)
        if mo > -math.inf:
            draw_text(ax, x0 - 0.05, 3.55, f"alpha = exp({mold} - {mn:g})", size=FONT - 1.5, color=REG["text"])
            draw_text(ax, x0 - 0.05, 3.25, f"      = {al:.3f}", size=FONT - 1.5, color=REG["text"])
        else:
            draw_text(ax, x0 - 0.05, 3.4, "first block:\nnothing to rescale", size=FONT - 1.5, color=REG["text"])
        draw_text(ax, x0 - 0.05, 2.87, f"s = {sk:.3f}", size=FONT - 1, color=REG["text"], bold=True)
        if k < len(chunks) - 1:
            draw_arrow(ax, (x0 + 1.72, 3.4), (x0 + 2.18, 3.4), color=REG["edge"], lw=1.8)
    draw_text(ax, 0.3, 2.25, "each block, in registers:", bold=True)
    rules = ["m_new = max(m, max(block))",
             "s = s * exp(m - m_new) + sum(exp(block - m_new))     # re-measure the old sum from the new max",
             "m = m_new"]
    for i, r in enumerate(rules):
        draw_text(ax, 0.5, 1.9 - i * 0.32, r, family="DejaVu Sans Mono", size=FONT - 1.5)
    draw_text(ax, 0.3, 0.65, f"after the last block: lse = m + log s = {m + math.log(s):.4f},  softmax(x)_j = "
          f"exp(x_j - m) / s.   The rescale factor is 1 when the max does not move (block 3).",
          size=FONT - 1)
    draw_text(ax, 0.3, 0.3, "s is often called l in FlashAttention papers. Nothing of the row's length is kept: "
          "one read of the row instead of two or three.", size=FONT - 1.5, color="#555555")
    return fig


def flash_attention_loop() -> Figure:
    fig, ax = new_canvas(10, 7.2, "FlashAttention forward: a query block stays, key/value blocks stream past")
    # Q, K, V in HBM
    qx, qy = 0.35, 2.2
    draw_box(ax, qx, qy, 0.7, 3.6, "", HBM, rounded=False)
    draw_grid(ax, qx, qy, 0.7, 3.6, 6, 1, HBM)
    draw_box(ax, qx, qy + 3.6 - 2 * 0.6, 0.7, 0.6, "Q_i", SRAM, rounded=False, bold=True, fontsize=FONT - 1)
    draw_text(ax, qx + 0.35, qy + 3.8, "Q", ha="center", bold=True, color=HBM["text"])
    for name, kx in [("K", 1.35), ("V", 2.25)]:
        draw_box(ax, kx, qy, 0.7, 3.6, "", HBM, rounded=False)
        draw_grid(ax, kx, qy, 0.7, 3.6, 6, 1, HBM)
        draw_box(ax, kx, qy + 3.6 - 4 * 0.6, 0.7, 0.6, f"{name}_j", SRAM, rounded=False, bold=True, fontsize=FONT - 1)
        draw_text(ax, kx + 0.35, qy + 3.8, name, ha="center", bold=True, color=HBM["text"])
        draw_arrow(ax, (kx + 0.35, qy - 0.1), (kx + 0.35, qy - 0.5), color=HBM["edge"], lw=1.2)
    draw_text(ax, 1.8, qy - 0.72, "j = 0, 1, 2, ... streams", ha="center", size=FONT - 1.5, color=HBM["text"])
    draw_text(ax, 1.6, qy - 1.05, "all in HBM (N x d each)", ha="center", size=FONT - 1.5, color=HBM["text"])
    # the program
    px, py, pw, ph = 3.3, 1.3, 4.15, 4.7
    draw_box(ax, px, py, pw, ph, "", COMPUTE)
    draw_text(ax, px + 0.12, py + ph - 0.2, "program i (on one SM)", bold=True, color=COMPUTE["text"])
    draw_box(ax, px + 0.15, py + ph - 0.95, 1.7, 0.55, "Q_i  (loaded once)", SRAM, fontsize=FONT - 1)
    draw_box(ax, px + 1.95, py + ph - 0.95, 1.7, 0.55, "m_i, l_i, O_i acc", REG, fontsize=FONT - 1)
    draw_text(ax, px + 0.15, py + ph - 1.25, "for each key block j:", size=FONT - 1, bold=True)
    steps = ["S = Q_i K_jᵀ * scale   # BM x BN", "m_new = max(m_i, rowmax(S))",
             "P = exp(S - m_new)     # tile only", "alpha = exp(m_i - m_new)",
             "l_i = l_i * alpha + rowsum(P)", "O_i = O_i * alpha + P V_j", "m_i = m_new"]
    for k, st in enumerate(steps):
        draw_text(ax, px + 0.3, py + ph - 1.58 - k * 0.3, st, family="DejaVu Sans Mono", size=FONT - 1.5)
    draw_text(ax, px + 0.15, py + 0.55, "after the loop:", size=FONT - 1, bold=True)
    draw_text(ax, px + 0.3, py + 0.25, "store O_i / l_i, lse_i = m_i + log l_i", family="DejaVu Sans Mono",
          size=FONT - 1.5)
    draw_arrow(ax, (qx + 0.72, qy + 2.7), (px + 0.12, py + ph - 0.68), color=HBM["edge"], text="once",
           fontsize=FONT - 1.5, toff=(0, 0.15))
    draw_arrow(ax, (2.97, qy + 1.5), (px - 0.02, py + ph - 2.2), color=HBM["edge"], text="K_j, V_j", toff=(0.3, -0.3),
           fontsize=FONT - 1.5)
    # the ghost N x N
    gx, gy, gs, nb = 7.7, 2.2, 2.05, 6
    draw_box(ax, gx, gy, gs, gs, "", GHOST, rounded=False, hatch="//")
    draw_grid(ax, gx, gy, gs, gs, nb, nb, GHOST)
    t = gs / nb
    draw_box(ax, gx + 3 * t, gy + gs - 2 * t, t, t, "", REG, rounded=False, lw=1.6, z=4)
    draw_text(ax, gx + gs / 2, gy + gs + 0.45, "S and P: N x N", ha="center", bold=True, color=GHOST["text"])
    draw_text(ax, gx + gs / 2, gy + gs + 0.17, "never stored", ha="center", color=GHOST["text"], size=FONT - 1)
    draw_text(ax, gx + gs / 2, gy - 0.25, "one BM x BN tile at a time,", ha="center", size=FONT - 1.5,
          color=REG["text"])
    draw_text(ax, gx + gs / 2, gy - 0.52, "in registers (row i, column j)", ha="center", size=FONT - 1.5,
          color=REG["text"])
    draw_text(ax, 0.35, 0.72, "HBM traffic: read Q, K, V, write O and lse: O(N d) instead of O(N²). The rescale by "
          "alpha keeps O_i correct\nwhen a later block raises the row max.", size=FONT - 1)
    draw_legend(ax, 0.35, 0.22, keys=("hbm", "sram", "reg", "ghost"))
    return fig


def vocab_tile_cross_entropy() -> Figure:
    fig, ax = new_canvas(10, 7.2, "Cross-entropy without the logits: vocabulary tiles, then a combine")
    rows, tiles = 4, 8  # row blocks of BLOCK_M, vocabulary tiles of BLOCK_V
    lx, ly, lw, lh = 1.55, 2.35, 4.8, 2.4  # the M x V logits, never stored
    hr, ht = 1, 5  # the highlighted program: row block, vocabulary tile
    # h and W in HBM; the tile's operands loaded by its program
    draw_box(ax, 0.35, ly, 0.8, lh, "", HBM, rounded=False)
    draw_grid(ax, 0.35, ly, 0.8, lh, rows, 1, HBM)
    draw_box(ax, 0.35, ly + lh - (hr + 1) * lh / rows, 0.8, lh / rows, "h rows", SRAM, rounded=False,
             fontsize=FONT - 2)
    draw_text(ax, 0.75, ly - 0.2, "h: M x K", ha="center", size=FONT - 1.5, color=HBM["text"], bold=True)
    wy, wh = ly + lh + 0.25, 0.6
    draw_box(ax, lx, wy, lw, wh, "", HBM, rounded=False)
    draw_grid(ax, lx, wy, lw, wh, 1, tiles, HBM)
    draw_box(ax, lx + ht * lw / tiles, wy, lw / tiles, wh, "W tile", SRAM, rounded=False, fontsize=FONT - 2.5)
    draw_text(ax, lx, wy + wh + 0.22, "Wᵀ: K x V, the vocabulary split into tiles of BLOCK_V words", size=FONT - 1,
              color=HBM["text"], bold=True)
    # the logits: a grid of programs, each tile only in registers
    draw_box(ax, lx, ly, lw, lh, "", GHOST, rounded=False, hatch="//", z=1, lw=1.0)
    draw_grid(ax, lx, ly, lw, lh, rows, tiles, GHOST, lw=0.8)
    tx, ty = lx + ht * lw / tiles, ly + lh - (hr + 1) * lh / rows
    draw_box(ax, tx, ty, lw / tiles, lh / rows, "z", REG, rounded=False, bold=True, z=4)
    draw_text(ax, lx + 1.9, ly + 0.3, "M x V logits: never written to HBM", ha="center", size=FONT - 1,
              color="#555555", z=6, bbox={"fc": "white", "ec": "none", "pad": 2})
    draw_text(ax, lx + lw / 2, ly - 0.2, "kernel 1: one program per (row block, vocabulary tile)", ha="center",
              size=FONT - 1.5, color=COMPUTE["text"], bold=True)
    # the epilogue of one program
    ex, ey = 6.8, 3.35
    draw_box(ax, ex, ey, 2.95, 1.75, "", COMPUTE)
    draw_text(ax, ex + 0.12, ey + 1.52, "epilogue, each row of its tile:", size=FONT - 1.5, color=COMPUTE["text"],
              bold=True)
    for i, line in enumerate(["m = max(z)", "s = sum(exp(z - m))", "z_target, if the target", "  falls in this tile"]):
        draw_text(ax, ex + 0.15, ey + 1.17 - i * 0.3, line, family="DejaVu Sans Mono", size=FONT - 2)
    draw_arrow(ax, (tx + lw / tiles + 0.02, ty + lh / rows / 2), (ex - 0.02, ey + 0.9), lw=1.3)
    # the (max, sum) pairs in HBM, rows x tiles
    px, py, pw, ph = 6.8, 1.95, 2.95, 0.9
    draw_box(ax, px, py, pw, ph, "", HBM, rounded=False)
    draw_grid(ax, px, py, pw, ph, rows, tiles, HBM)
    draw_box(ax, px + ht * pw / tiles, py + ph - (hr + 1) * ph / rows, pw / tiles, ph / rows, "", SRAM,
             rounded=False, lw=1.0)
    draw_text(ax, px, py - 0.22, "(m, s) pairs: rows x tiles, in HBM", size=FONT - 1.5, color=HBM["text"], bold=True)
    draw_arrow(ax, (ex + 1.47, ey - 0.02), (ex + 1.47, py + ph + 0.02), color=HBM["edge"], lw=1.3)
    # kernel 2: combine
    draw_box(ax, 0.35, 0.55, 5.9, 0.95, "", COMPUTE)
    draw_text(ax, 0.47, 1.3, "kernel 2, combine: one program per row merges its V / BLOCK_V pairs", size=FONT - 1.5,
              color=COMPUTE["text"], bold=True)
    draw_text(ax, 0.5, 0.85, "m = max_j m_j;  s = sum_j s_j exp(m_j - m);  loss = m + log s - z_target",
              family="DejaVu Sans Mono", size=FONT - 2.5)
    draw_arrow(ax, (px + 0.3, py - 0.4), (6.3, 1.05), color=HBM["edge"], lw=1.3)
    draw_box(ax, 6.8, 0.7, 1.3, 0.6, "loss: M", HBM, rounded=False, bold=True, fontsize=FONT - 1)
    draw_arrow(ax, (6.27, 0.85), (6.78, 0.95), color=HBM["edge"], lw=1.3)
    draw_text(ax, 0.35, 0.2, "HBM traffic: h and W in; 2·M·V/BLOCK_V floats of pairs out and back; M losses out.",
              size=FONT - 1.5, color="#444444")
    draw_legend(ax, 0.3, 6.5, keys=("hbm", "sram", "reg", "ghost"))
    return fig


# ---------------------------------------------------------------------------------------------------------
# 07: training


def chunked_cross_entropy() -> Figure:
    fig, ax = new_canvas(10, 7.0, "Linear + cross-entropy, forward and backward: a chunk of rows at a time")
    # hidden states
    hx, hy, hw, hh, nchunk = 0.35, 1.9, 0.9, 4.0, 4
    draw_box(ax, hx, hy, hw, hh, "", HBM, rounded=False)
    draw_grid(ax, hx, hy, hw, hh, nchunk, 1, HBM)
    draw_box(ax, hx, hy + hh - 2 * hh / nchunk, hw, hh / nchunk, "h_c", SRAM, rounded=False, bold=True)
    draw_text(ax, hx + hw / 2, hy + hh + 0.4, "hidden h", ha="center", bold=True, color=HBM["text"])
    draw_text(ax, hx + hw / 2, hy + hh + 0.15, "M x K", ha="center", size=FONT - 1.5, color="#555555")
    draw_text(ax, hx + hw + 0.25, hy + hh - 1.5 * hh / nchunk, "@", ha="center", size=FONT + 3)
    wx, wy, ww, wh = 1.7, hy + hh - 1.5 * hh / nchunk - 0.55, 3.0, 1.1
    draw_box(ax, wx, wy, ww, wh, "Wᵀ (W: V x K)", HBM, rounded=False, bold=True)
    draw_arrow(ax, (wx + ww + 0.1, hy + hh - 1.5 * hh / nchunk), (wx + ww + 0.55, hy + hh - 1.5 * hh / nchunk))
    lx = wx + ww + 0.65
    draw_box(ax, lx, hy + hh - 2 * hh / nchunk, 3.9, hh / nchunk, "logits_c: C x V, float32", SRAM,
         rounded=False, bold=True)
    draw_text(ax, lx + 1.95, hy + hh - 2 * hh / nchunk - 0.22, "the only logits alive at any time", ha="center",
          size=FONT - 1.5, color=SRAM["text"], bbox={"fc": "white", "ec": "none", "pad": 2})
    # ghost full logits
    gy = hy
    draw_box(ax, lx, gy, 3.9, hh, "", GHOST, rounded=False, hatch="//", z=1, lw=1.0)
    draw_text(ax, lx + 1.95, gy + 0.55, "full M x V logits: never allocated\n"
          "e.g. 8192 x 128256 in float32 = 4 GiB", ha="center", size=FONT - 1, color="#555555", z=6,
          bbox={"fc": "white", "ec": "none", "pad": 3})
    # per-chunk work
    draw_text(ax, 1.7, 3.35, "for each chunk of C rows:", bold=True)
    steps = ["1. logits_c = h_c @ Wᵀ                 # C x V",
             "2. lse, loss; dlogits_c = (p - y) / M",
             "3. dh_c = dlogits_c @ W                # rows done",
             "4. dW += dlogits_cᵀ @ h_c",
             "   free logits_c and dlogits_c; next chunk"]
    for i, st in enumerate(steps):
        draw_text(ax, 1.7, 2.95 - i * 0.3, st, family="DejaVu Sans Mono", size=FONT - 1.5)
    draw_text(ax, 0.35, 1.2, "The loss and both gradients come out of the same chunk while its logits are on hand, so "
          "the backward\nnever needs them again: memory C x V instead of M x V, the same flops (three products).",
          size=FONT - 1)
    draw_text(ax, 0.35, 0.45, "dh is written chunk by chunk; dW (V x K) is read and written once per chunk.",
          size=FONT - 1.5, color="#555555")
    return fig


def save_vs_recompute() -> Figure:
    fig, ax = new_canvas(10, 6.8, "What the forward saves for the backward, per head")
    for x0, label in [(0.3, "eager attention"), (5.5, "FlashAttention")]:
        draw_text(ax, x0, 5.95, label, bold=True, size=FONT + 1)
    # eager: Q K V (N x d), P (N x N)
    s = 3.2 / 8  # inches per 'unit': N = 8 units, d = 1 unit (not to scale: d is much smaller than N)
    y0 = 1.95
    for k, name in enumerate(["Q", "K", "V", "O"]):
        draw_box(ax, 0.3 + k * 0.45, y0, s, 8 * s, name, HBM, rounded=False, bold=True, fontsize=FONT - 1)
    draw_box(ax, 2.2, y0, 8 * s, 8 * s, "P = softmax(QKᵀ)\nN x N\nsaved", HBM, rounded=False, bold=True)
    draw_text(ax, 0.3, 1.35, "saves 4 N d + N² values (not to scale): at N = 8192,\nd = 128, P alone is 16x Q, K, V and O together",
          size=FONT - 1, color=HBM["text"])
    # flash
    for k, name in enumerate(["Q", "K", "V", "O"]):
        draw_box(ax, 5.5 + k * 0.45, y0, s, 8 * s, name, HBM, rounded=False, bold=True, fontsize=FONT - 1)
    draw_box(ax, 7.32, y0, 0.14, 8 * s, "", HBM, rounded=False)
    draw_text(ax, 7.39, y0 + 8 * s + 0.15, "lse", ha="center", bold=True, color=HBM["text"], size=FONT - 1)
    draw_text(ax, 7.6, y0 + 8 * s - 0.1, "log-sum-exp of each row:\nN numbers", size=FONT - 1.5, color=HBM["text"],
          va="top")
    draw_box(ax, 7.85, y0, 1.8, 1.8, "", GHOST, rounded=False, hatch="//")
    draw_grid(ax, 7.85, y0, 1.8, 1.8, 4, 4, GHOST)
    draw_box(ax, 7.85 + 1.8 / 4, y0 + 1.8 / 2, 1.8 / 4, 1.8 / 4, "", REG, rounded=False, z=4)
    draw_text(ax, 8.75, y0 + 2.0, "P: not saved", ha="center", color=GHOST["text"], size=FONT - 1)
    draw_text(ax, 7.6, y0 + 2.55, "backward rebuilds each tile:\nP_ij = exp(Q_i K_jᵀ * scale - lse_i)",
          size=FONT - 1.5, color=REG["text"])
    draw_text(ax, 5.5, 1.35, "saves 4 N d + N values; the backward pays one extra\nQKᵀ per tile (FLOPs are cheap, "
          "HBM bytes are not)", size=FONT - 1, color=COMPUTE["text"])
    draw_text(ax, 0.3, 0.45, "Recompute instead of save: trade a little compute for O(N²) of memory and HBM traffic.",
          size=FONT - 0.5, bold=True)
    return fig


def flash_backward() -> Figure:
    fig, ax = new_canvas(10, 7.4, "FlashAttention backward: two kernels, no atomics")
    draw_box(ax, 0.3, 6.0, 9.4, 0.5, "before both, a small kernel: delta_i = rowsum(dO_i * O_i), N numbers (it equals rowsum(P ∘ dP))",
         SRAM, fontsize=FONT - 0.5)
    nb, gs = 5, 2.0
    t = gs / nb
    for col, (x0, title, hot_col) in enumerate([(0.3, "kernel 1: key-parallel, dK and dV", True),
                                                (5.2, "kernel 2: query-parallel, dQ", False)]):
        draw_text(ax, x0, 5.6, title, bold=True, size=FONT + 0.5)
        gx, gy = x0 + 0.25, 3.05
        draw_box(ax, gx, gy, gs, gs, "", GHOST, rounded=False)
        draw_grid(ax, gx, gy, gs, gs, nb, nb, GHOST)
        for k in range(nb):
            if hot_col:
                cx, cy = gx + 2 * t, gy + gs - (k + 1) * t
            else:
                cx, cy = gx + k * t, gy + gs - 3 * t
            draw_box(ax, cx, cy, t, t, "", REG, rounded=False, lw=1.0, z=4)
        draw_text(ax, gx + gs / 2, gy + gs + 0.15, "keys j ->", ha="center", size=FONT - 1.5, color="#555555")
        draw_text(ax, gx - 0.1, gy + gs / 2, "queries i ->", ha="right", rotation=90, va="center", size=FONT - 1.5,
              color="#555555")
        if hot_col:
            draw_arrow(ax, (gx + 2.5 * t, gy + gs - 0.1), (gx + 2.5 * t, gy + 0.1), color=REG["edge"], lw=1.5)
            lines = ["program j keeps K_j, V_j; dK_j, dV_j", "accumulate in registers", "for each query block i:",
                     "  P  = exp(Q_i K_jᵀ s - lse_i)", "  dV_j += Pᵀ dO_i", "  dP = dO_i V_jᵀ",
                     "  dS = P ∘ (dP - delta_i)", "  dK_j += dSᵀ Q_i * s", "store dK_j, dV_j once"]
        else:
            draw_arrow(ax, (gx + 0.1, gy + gs - 2.5 * t), (gx + gs - 0.1, gy + gs - 2.5 * t), color=REG["edge"],
                   lw=1.5)
            lines = ["program i keeps Q_i, dO_i, lse_i,", "delta_i; dQ_i accumulates", "for each key block j:",
                     "  P  = exp(Q_i K_jᵀ s - lse_i)", "  dP = dO_i V_jᵀ", "  dS = P ∘ (dP - delta_i)",
                     "  dQ_i += dS K_j * s", "", "store dQ_i once"]
        for k, line in enumerate(lines):
            mono = line.startswith("  ")
            draw_text(ax, gx + gs + 0.12, 5.15 - k * 0.29, line.strip() if not mono else line,
                  size=FONT - 2 if mono else FONT - 1.5, family="DejaVu Sans Mono" if mono else "DejaVu Sans",
                  color=INK if mono else COMPUTE["text"])
    ax.plot([4.95, 4.95], [2.85, 5.75], color="#cccccc", lw=0.8)
    draw_text(ax, 0.3, 2.3, "Each program owns the gradient it writes, so no two programs add into the same "
          "memory. One kernel for all three\nwould need atomic adds into dQ (every key block "
          "touches every dQ_i), which are slow and not deterministic.", size=FONT - 1)
    draw_text(ax, 0.3, 1.35, "Both kernels rebuild P and dS tile by tile from Q, K, V, dO, lse and delta: the N x N "
          "matrices never reach HBM.", size=FONT - 1, color=REG["text"])
    draw_text(ax, 0.3, 0.7, "s = 1/sqrt(d), the softmax scale.  The cost: QKᵀ and dO Vᵀ are computed twice, once in "
          "each kernel.", size=FONT - 1.5, color="#555555")
    draw_legend(ax, 0.3, 0.3, keys=("sram", "reg", "ghost"))
    return fig
