"""Notebook 05's streaming reductions on one device: softmax, FlashAttention forward and fused linear
cross-entropy against eager PyTorch, torch.compile and SDPA, with peak extra memory where it matters.

    python -m kernels.bench_streaming            # the rows, printed
    python -m kernels.bench_streaming --sweep    # also time tile settings of the Triton kernels
"""

from __future__ import annotations

import sys

from kernels.bench_part import part_main

# Issue goals these rows are measured against (H200): softmax >= 0.85 of copy, FlashAttention forward >= 0.80
# of SDPA's TFLOP/s, linear cross-entropy <= 1.1x torch.compile's time with <= 0.5 GiB of extra memory.


def peak_extra_gib(fn) -> float:
    """GiB allocated at the peak of one call of fn, above what was allocated before it."""
    from autograder.timing import peak_extra_bytes

    return peak_extra_bytes(fn)[1] / 2**30


def rows(prof, progress):
    import torch
    import torch.nn.functional as F

    from autograder.timing import bench_interleaved
    from kernels import flash_attention as fa
    from kernels import linear_cross_entropy as lce
    from kernels import softmax as sm

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
            "triton": lambda: fa.flash_attention(q, k, v, causal)})
        flops = fa.attention_flops(q, k, v, causal)
        mem = {"naive": peak_extra_gib(lambda: fa.attention_naive(q, k, v, causal)),
               "triton": peak_extra_gib(lambda: fa.flash_attention(q, k, v, causal))}
        out.append({"kernel": "flash_attention", "shape": f"(4, 16, 4096, 128) bf16 causal={causal}", "ms": t,
                    "TFLOPs": {k_: flops / (v_ * 1e-3) / 1e12 for k_, v_ in t.items()},
                    "fraction_of_sdpa": t["SDPA"] / t["triton"], "extra_GiB": mem})
        q = k = v = None  # free them before the next allocation
    progress("linear_cross_entropy 8192 x 4096 -> 128256 bf16 (torch.compile takes a while)")
    h = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(128256, 4096, device="cuda") / 64).to(torch.bfloat16)
    tg = torch.randint(0, 128256, (8192,), device="cuda")
    compiled = torch.compile(lce.linear_cross_entropy_eager, dynamic=False)
    calls = {"eager": lambda: lce.linear_cross_entropy_eager(h, w, tg), "torch.compile": lambda: compiled(h, w, tg),
             "triton": lambda: lce.linear_cross_entropy(h, w, tg)}
    for f in calls.values():
        f()
    mem = {k_: peak_extra_gib(f) for k_, f in calls.items()}
    t = bench_interleaved(calls, rounds=3)
    out.append({"kernel": "linear_cross_entropy", "shape": "8192x4096 -> 128256 bf16", "ms": t,
                "TFLOPs": {k_: lce.linear_cross_entropy_flops(h, w) / (v_ * 1e-3) / 1e12 for k_, v_ in t.items()},
                "extra_GiB": mem})
    return out


def sweep(progress):
    """Tile settings of the attention and cross-entropy kernels, timed in turns against their baselines."""
    import torch
    import torch.nn.functional as F
    import triton

    from autograder.timing import bench_interleaved
    from kernels import flash_attention as fa
    from kernels import linear_cross_entropy as lce

    out = []
    q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    lse = torch.empty(4, 16, 4096, device="cuda")
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        calls = {"SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
        for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3),
                                      (128, 32, 4, 3), (128, 64, 8, 4), (64, 128, 4, 3), (128, 128, 8, 2)):
            def run(bm=bm, bn=bn, warps=warps, stages=stages):
                o = torch.empty_like(q)
                fa._flash_attention_kernel[(triton.cdiv(4096, bm), 64)](
                    q, k, v, o, lse, 16, 4096, 4096, *q.stride(), *k.stride(), *v.stride(), *o.stride()[:3],
                    fa.LOG2E / 128**0.5, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=128, CAUSAL=causal, PRECISION=None,
                    num_warps=warps, num_stages=stages)
                return o
            label = f"BLOCK_M={bm} BLOCK_N={bn} warps={warps} stages={stages}"
            try:
                err = float((run().float() - ref).norm() / ref.norm())
                if err < 1e-2:
                    calls[label] = run
                else:
                    progress(f"attention causal={causal} {label}: wrong ({err:.2g})")
            except Exception as exc:  # a setting this GPU cannot run
                progress(f"attention causal={causal} {label}: {type(exc).__name__}")
        flops = fa.attention_flops(q, k, v, causal)
        for label, ms in bench_interleaved(calls, rounds=3, rep=40).items():
            out.append({"problem": f"attention causal={causal}", "setting": label, "ms": ms,
                        "TFLOPs": flops / (ms * 1e-3) / 1e12})
            progress(f"attention causal={causal} | {label}: {ms:.3f} ms, {out[-1]['TFLOPs']:.0f} TFLOP/s")
    q = k = v = None
    h = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(128256, 4096, device="cuda") / 64).to(torch.bfloat16)
    tg = torch.randint(0, 128256, (8192,), device="cuda")
    ref = lce.linear_cross_entropy_eager(h, w, tg)
    calls = {"cuBLAS logits alone": lambda: h @ w.t()}
    for bm, bv, bk, warps, stages in ((128, 256, 64, 8, 4), (128, 256, 64, 8, 3), (128, 128, 64, 8, 4),
                                      (128, 256, 32, 8, 5), (256, 128, 64, 8, 3)):
        cfg = dict(BLOCK_M=bm, BLOCK_V=bv, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)

        def run(cfg=cfg):
            n_vt = triton.cdiv(128256, cfg["BLOCK_V"])
            pm = torch.empty(8192, n_vt, device="cuda")
            ps = torch.empty_like(pm)
            tgt = torch.empty(8192, device="cuda")
            loss = torch.empty(8192, device="cuda")
            lce._logit_tile_stats_kernel[(triton.cdiv(8192, cfg["BLOCK_M"]) * n_vt,)](
                h, w, tg, pm, ps, tgt, 8192, 128256, 4096, 4096, 1, 4096, 1, n_vt, PRECISION=None, **cfg)
            lce._combine_kernel[(8192,)](pm, ps, tgt, loss, 8192, n_vt, BLOCK_T=1024)
            return loss
        label = " ".join(f"{k_}={v_}" for k_, v_ in cfg.items())
        try:
            err = float((run() - ref).abs().max())
            if err < 0.05:
                calls[label] = run
            else:
                progress(f"cross-entropy {label}: wrong ({err:.2g})")
        except Exception as exc:
            progress(f"cross-entropy {label}: {type(exc).__name__}")
    flops = lce.linear_cross_entropy_flops(h, w)
    for label, ms in bench_interleaved(calls, rounds=3, rep=60).items():
        out.append({"problem": "linear cross-entropy", "setting": label, "ms": ms, "TFLOPs": flops / (ms * 1e-3) / 1e12})
        progress(f"cross-entropy | {label}: {ms:.3f} ms, {out[-1]['TFLOPs']:.0f} TFLOP/s")
    return out


def main(argv=None) -> int:
    return part_main(argv, __doc__, "bench_streaming", rows, sweep)


if __name__ == "__main__":
    sys.exit(main())
