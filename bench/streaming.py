"""Notebook 05's streaming reductions on one device: softmax, FlashAttention forward and fused linear
cross-entropy against eager PyTorch, torch.compile and SDPA, with peak extra memory where it matters.

    python -m bench.streaming            # the rows, printed
    python -m bench.streaming --sweep    # also time tile settings of the Triton kernels
"""

from __future__ import annotations

import sys

from autograder.measure.timing import bench_interleaved, peak_extra_bytes
from kernels import flash_attention as fa
from kernels import linear_cross_entropy as lce
from kernels import softmax as sm
from bench.common import part_main

# The goals these rows are measured against: softmax at least 0.85 of copy bandwidth, FlashAttention forward
# (not causal) at least 0.80 of SDPA's speed, linear cross-entropy in at most 1.1x torch.compile's time with at
# most 0.5 GiB of extra memory.
GOALS = {"softmax": {"min_fraction_of_copy": 0.85},
         "flash_attention": {"min_fraction_of_sdpa": 0.80},
         "linear_cross_entropy": {"max_time_over_compile": 1.1, "max_extra_GiB": 0.5}}


def peak_extra_gib(fn) -> float:
    """GiB allocated at the peak of one call of fn, above what was allocated before it."""

    return peak_extra_bytes(fn)[1] / 2**30


def rows(prof, progress):
    import torch
    import torch.nn.functional as F


    out = []
    progress("softmax 32768 x 4096 bf16")
    x = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(sm.softmax_eager, dynamic=False)
    t = bench_interleaved({"eager": lambda: sm.softmax_eager(x), "torch.compile": lambda: compiled(x),
                           "torch.softmax": lambda: torch.softmax(x, -1), "triton": lambda: sm.softmax(x)})
    n_bytes = sm.softmax_bytes(x)
    out.append({"kernel": "softmax", "shape": "32768x4096 bf16", "ms": t,
                "GBps": {k: n_bytes / (v * 1e-3) / 1e9 for k, v in t.items()},
                "fraction_of_copy": n_bytes / (t["triton"] * 1e-3) / 1e9 / prof.copy_gbps})
    x = None
    for causal in (False, True):
        progress(f"flash_attention (4, 16, 4096, 128) bf16 causal={causal}")
        q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        t = bench_interleaved({
            "SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            "naive": lambda: fa.attention_naive(q, k, v, causal),
            "triton portable": lambda: fa.flash_attention(q, k, v, causal),
            "triton": lambda: fa.flash_attention_tma(q, k, v, causal)})
        flops = fa.attention_flops(q, k, v, causal)
        mem = {"naive": peak_extra_gib(lambda: fa.attention_naive(q, k, v, causal)),
               "triton": peak_extra_gib(lambda: fa.flash_attention_tma(q, k, v, causal))}
        out.append({"kernel": "flash_attention", "shape": f"(4, 16, 4096, 128) bf16 causal={causal}", "ms": t,
                    "TFLOPs": {k_: flops / (v_ * 1e-3) / 1e12 for k_, v_ in t.items()},
                    "fraction_of_sdpa": t["SDPA"] / t["triton"],
                    "portable_fraction_of_sdpa": t["SDPA"] / t["triton portable"], "extra_GiB": mem})
        q = k = v = None  # free them before the next allocation
    progress("linear_cross_entropy 8192 x 4096 -> 128256 bf16 (torch.compile takes a while)")
    h = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(128256, 4096, device="cuda") / 64).to(torch.bfloat16)
    tg = torch.randint(0, 128256, (8192,), device="cuda")
    compiled = torch.compile(lce.linear_cross_entropy_eager, dynamic=False)
    calls = {"eager": lambda: lce.linear_cross_entropy_eager(h, w, tg), "torch.compile": lambda: compiled(h, w, tg),
             "triton portable": lambda: lce.linear_cross_entropy(h, w, tg),
             "triton": lambda: lce.linear_cross_entropy_tma(h, w, tg)}
    for f in calls.values():
        f()
    mem = {k_: peak_extra_gib(f) for k_, f in calls.items()}
    t = bench_interleaved(calls, rounds=3)
    out.append({"kernel": "linear_cross_entropy", "shape": "8192x4096 -> 128256 bf16", "ms": t,
                "TFLOPs": {k_: lce.linear_cross_entropy_flops(h, w) / (v_ * 1e-3) / 1e12 for k_, v_ in t.items()},
                "extra_GiB": mem, "time_over_compile": t["triton"] / t["torch.compile"]})
    return out


def _timed_settings(calls: dict, settings: dict, check, progress, what: str) -> dict:
    """Add to calls each setting whose result check() accepts; a setting this GPU or Triton cannot run is
    reported and left out."""
    for label, run in settings.items():
        try:
            err = check(run())
        except Exception as exc:  # a setting this GPU cannot compile or run
            progress(f"{what} {label}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
            continue
        if err < 1e-2:
            calls[label] = run
        else:
            progress(f"{what} {label}: wrong ({err:.2g})")
    return calls


def goals(result_rows) -> dict:
    met = {}
    for r in result_rows:
        if r["kernel"] == "softmax":
            met["softmax"] = {**GOALS["softmax"], "met": r["fraction_of_copy"] >= 0.85}
        elif r["kernel"] == "flash_attention" and "causal=False" in r["shape"]:
            met["flash_attention"] = {**GOALS["flash_attention"], "met": r["fraction_of_sdpa"] >= 0.80}
        elif r["kernel"] == "linear_cross_entropy":
            met["linear_cross_entropy"] = {**GOALS["linear_cross_entropy"],
                                           "met": r["time_over_compile"] <= 1.1 and r["extra_GiB"]["triton"] <= 0.5}
    return met


def markdown(result_rows) -> list[str]:
    lines = ["", "Streaming reductions (median ms; extra = peak GiB allocated beyond the inputs; Triton = the "
             "TMA path on Hopper, portable = the exercise's pointer kernel):", "",
             "| kernel | shape | eager | torch.compile | library | Triton portable | Triton | Triton rate | goal |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result_rows:
        ms = r["ms"]
        if r["kernel"] == "softmax":
            lines.append(f"| softmax | {r['shape']} | {ms['eager']:.3f} | {ms['torch.compile']:.3f} | "
                         f"torch.softmax {ms['torch.softmax']:.3f} | - | {ms['triton']:.3f} | "
                         f"{r['GBps']['triton']:.0f} GB/s = {r['fraction_of_copy']:.2f} of copy | >= 0.85 of copy |")
        elif r["kernel"] == "flash_attention":
            x = r["extra_GiB"]
            lines.append(f"| flash_attention | {r['shape']} | naive {ms['naive']:.3f} (extra {x['naive']:.2f}) | - | "
                         f"SDPA {ms['SDPA']:.3f} | {ms['triton portable']:.3f} ({r['portable_fraction_of_sdpa']:.2f} "
                         f"of SDPA) | {ms['triton']:.3f} (extra {x['triton']:.2f}) | {r['TFLOPs']['triton']:.0f} "
                         f"TFLOP/s = {r['fraction_of_sdpa']:.2f} of SDPA | >= 0.80 of SDPA (not causal) |")
        else:
            x = r["extra_GiB"]
            lines.append(f"| linear_cross_entropy | {r['shape']} | {ms['eager']:.3f} (extra {x['eager']:.2f}) | "
                         f"{ms['torch.compile']:.3f} (extra {x['torch.compile']:.2f}) | - | "
                         f"{ms['triton portable']:.3f} | {ms['triton']:.3f} (extra {x['triton']:.2f}) | "
                         f"{r['TFLOPs']['triton']:.0f} TFLOP/s, {r['time_over_compile']:.2f}x torch.compile's time | "
                         "<= 1.1x compile, <= 0.5 GiB extra |")
    return lines


def sweep(progress):
    """Tile settings of the attention and cross-entropy kernels (portable and TMA), timed in turns against
    their baselines."""
    import torch
    import torch.nn.functional as F
    import triton


    out = []
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    lse = torch.empty(4, 16, 4096, device="cuda")
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        settings = {}
        for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 64, 8, 4)):
            def run(bm=bm, bn=bn, warps=warps, stages=stages):
                o = torch.empty_like(q)
                fa._flash_attention_kernel[(triton.cdiv(4096, bm), 64)](
                    q, k, v, o, lse, 16, 4096, 4096, *q.stride(), *k.stride(), *v.stride(), *o.stride()[:3],
                    fa.LOG2E / 128**0.5, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=128, CAUSAL=causal, PRECISION=None,
                    num_warps=warps, num_stages=stages)
                return o
            settings[f"pointer {bm}x{bn} w{warps} s{stages}"] = run
        for bm, bn, warps, stages in ((128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2),
                                      (128, 64, 4, 3), (64, 64, 4, 4)):
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)
            settings[f"tma {bm}x{bn} w{warps} s{stages}"] = (
                lambda cfg=cfg: fa._launch_attention_tma(q, k, v, causal, (cfg,))[0])
        calls = _timed_settings({"SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)},
                                settings, lambda o: float((o.float() - ref).norm() / ref.norm()), progress,
                                f"attention causal={causal}")
        flops = fa.attention_flops(q, k, v, causal)
        for label, ms in bench_interleaved(calls, rounds=3, rep=40).items():
            out.append({"problem": f"attention causal={causal}", "setting": label, "ms": ms,
                        "TFLOPs": flops / (ms * 1e-3) / 1e12, "fraction_of_sdpa": None})
            progress(f"attention causal={causal} | {label}: {ms:.3f} ms, {out[-1]['TFLOPs']:.0f} TFLOP/s")
        base = next(r["ms"] for r in out if r["problem"] == f"attention causal={causal}" and r["setting"] == "SDPA")
        for r in out:
            if r["problem"] == f"attention causal={causal}":
                r["fraction_of_sdpa"] = base / r["ms"]
    q = k = v = None
    h = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(128256, 4096, device="cuda") / 64).to(torch.bfloat16)
    tg = torch.randint(0, 128256, (8192,), device="cuda")
    ref = lce.linear_cross_entropy_reference(h, w, tg).float()
    compiled = torch.compile(lce.linear_cross_entropy_eager, dynamic=False)
    settings = {"pointer (default)": lambda: lce.linear_cross_entropy(h, w, tg)}
    for bm, bv, bk, group, sub, flat, warps, stages in (
            (128, 256, 64, 16, 2, True, 8, 3), (128, 256, 64, 8, 2, True, 8, 3), (128, 256, 64, 8, 1, False, 8, 3),
            (128, 256, 64, 8, 1, False, 8, 4), (128, 256, 64, 16, 2, False, 8, 4), (128, 256, 64, 16, 1, True, 8, 3),
            (128, 128, 64, 8, 1, True, 8, 4), (128, 128, 64, 8, 1, False, 4, 4), (256, 128, 64, 8, 2, True, 8, 3)):
        cfg = dict(BLOCK_M=bm, BLOCK_V=bv, BLOCK_K=bk, GROUP_M=group, SUBTILES=sub, FLATTEN=flat, num_warps=warps,
                   num_stages=stages)
        label = f"tma {bm}x{bv}x{bk} g{group} sub{sub}{' flat' if flat else ''} w{warps} s{stages}"
        settings[label] = lambda cfg=cfg: lce._launch_ce_tma(h, w, tg, (cfg,))
    calls = _timed_settings({"cuBLAS logits alone": lambda: h @ w.t(), "torch.compile": lambda: compiled(h, w, tg)},
                            settings, lambda loss: float((loss - ref).abs().max()), progress, "cross-entropy")
    flops = lce.linear_cross_entropy_flops(h, w)
    for label, ms in bench_interleaved(calls, rounds=3, rep=60).items():
        out.append({"problem": "linear cross-entropy", "setting": label, "ms": ms, "TFLOPs": flops / (ms * 1e-3) / 1e12})
        progress(f"cross-entropy | {label}: {ms:.3f} ms, {out[-1]['TFLOPs']:.0f} TFLOP/s")
    return out


def _report(result) -> str:
    return "\n".join(markdown(result) + [f"goal {k}: {'MET' if g['met'] else 'NOT MET'}"
                                         for k, g in goals(result).items()])


def main(argv=None) -> int:
    return part_main(argv, __doc__, "streaming", rows, sweep, _report)


if __name__ == "__main__":
    sys.exit(main())
