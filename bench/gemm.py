"""Notebook 04's GEMMs on one device: the fused epilogue and SwiGLU against cuBLAS alone, cuBLAS + eager
PyTorch, and torch.compile; and the fused QKV projection (qkv_rows, run by the suite only). Part of
`python -m bench`; alone:

    python -m bench.gemm            # the rows, printed
    python -m bench.gemm --sweep    # also time tile settings of the Triton kernels (to choose them)

Times are do_bench medians on random data, the versions of one row timed in turns (bench_interleaved); decode
shapes (a few rows) are timed as CUDA-graph replays, as inference engines run them, so that the host's launch cost
stays out.
"""

from __future__ import annotations

import json
import sys

from autograder.measure.timing import bench_interleaved, bench_ms, cuda_graph
from autograder.specs.gemm_epilogue_fusion import random_epilogue_inputs
from kernels import gemm_epilogue as ge
from kernels import qkv_projection as qkv
from kernels import swiglu as sw
from bench.common import part_main

# kernel -> (the PyTorch versions it must be no slower than, slack): "cuBLAS matmul alone" with slack 1.05
# means at most 1.05x the time of the bare product, epilogue included.
GOALS = {
    "gemm_gelu_residual prefill": {"cuBLAS matmul alone": 1.05},
    "gemm_gelu_residual decode": {"torch.compile": 1.0, "eager": 1.0},
    "swiglu prefill": {"torch.compile": 1.0},
}


def _swiglu_inputs(m, k, n):
    import torch

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    wg, wu = ((torch.randn(k, n, device="cuda") / k**0.5).to(torch.bfloat16) for _ in range(2))
    return x, wg, wu


def _row(kernel, shape, flops, times, prof):
    ms = times["triton"]
    return {
        "kernel": kernel, "shape": shape, "flops": flops, "ms": {k: round(v, 4) for k, v in times.items()},
        "TFLOPs": {k: round(flops / (v * 1e-3) / 1e12, 1) for k, v in times.items()},
        "fraction_of_matmul": round(flops / (ms * 1e-3) / 1e12 / prof.matmul_tflops["bf16"], 3),
        "vs": {k: round(v / ms, 3) for k, v in times.items() if k != "triton"},
    }


def rows(prof, progress):
    import torch


    out = []
    for label, (m, k, n) in (("prefill", (8192, 8192, 8192)), ("decode", (16, 8192, 8192))):
        progress(f"gemm_gelu_residual {label} M={m} K={k} N={n} (torch.compile takes a while)")
        args = random_epilogue_inputs(m, k, n)
        compiled = torch.compile(ge.gemm_gelu_residual_eager, dynamic=False)
        versions = {"cuBLAS matmul alone": lambda x, w, b, r: x @ w, "eager": ge.gemm_gelu_residual_eager,
                    "torch.compile": compiled, "triton portable": ge.gemm_gelu_residual,
                    "triton": ge.gemm_gelu_residual_tma}
        calls = {key: (lambda f=f: f(*args)) for key, f in versions.items()}
        if m <= 256:
            calls = {key: cuda_graph(c) for key, c in calls.items()}
        times = bench_interleaved(calls)
        out.append(_row(f"gemm_gelu_residual {label}", f"M={m} K={k} N={n} bf16",
                        ge.gemm_gelu_residual_flops(*args), times, prof))
        del args
    progress("swiglu prefill M=8192 K=4096 N=11008")
    args = _swiglu_inputs(8192, 4096, 11008)
    compiled = torch.compile(sw.swiglu_eager, dynamic=False)
    versions = {"cuBLAS two GEMMs alone": lambda x, g, u: (x @ g, x @ u), "eager": sw.swiglu_eager,
                "torch.compile": compiled, "triton portable": sw.swiglu, "triton": sw.swiglu_tma}
    times = bench_interleaved({key: (lambda f=f: f(*args)) for key, f in versions.items()})
    out.append(_row("swiglu prefill", "M=8192 K=4096 N=11008 bf16", sw.swiglu_flops(*args), times, prof))
    return out


def goals(result_rows) -> dict:
    met = {}
    for r in result_rows:
        if r["kernel"] in GOALS:
            limits = GOALS[r["kernel"]]
            met[r["kernel"]] = {"at_most": {k: f"{v}x" for k, v in limits.items()},
                                "met": all(r["ms"]["triton"] <= v * r["ms"][k] for k, v in limits.items())}
    return met


def markdown(result_rows) -> list[str]:
    lines = [
        "",
        "GEMM epilogues (median ms; decode as CUDA-graph replays; `portable` = the pointer kernel of the "
        "exercise, Triton = the TMA path):",
        "",
        "| kernel | shape | cuBLAS alone | eager | torch.compile | Triton portable | Triton | Triton TFLOP/s "
        "(/ matmul) | vs cuBLAS alone | vs eager | vs compile |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result_rows:
        ms = r["ms"]
        alone = next(k for k in ms if k.startswith("cuBLAS"))
        lines.append(
            f"| {r['kernel']} | {r['shape']} | {ms[alone]:.3f} | {ms['eager']:.3f} | {ms['torch.compile']:.3f} | "
            f"{ms['triton portable']:.3f} | {ms['triton']:.3f} | {r['TFLOPs']['triton']:.0f} "
            f"({r['fraction_of_matmul']:.2f}) | {ms['triton'] / ms[alone]:.2f}x the time | {r['vs']['eager']:.2f}x | "
            f"{r['vs']['torch.compile']:.2f}x |"
        )
    return lines


def qkv_rows(prof, progress):
    """Fused QKV projections at decode and prefill: three cuBLAS GEMMs, one over the concatenated weight,
    torch.compile of the three, and the Triton kernel."""
    import torch


    rows = []
    for model, (k, n_q, kv), m in (("8B-class", (4096, 4096, 1024), 16), ("8B-class", (4096, 4096, 1024), 8192),
                                   ("70B-class", (8192, 8192, 1024), 16)):
        progress(f"qkv_projection {model} M={m}")
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n_q + 2 * kv, k, device="cuda") / k**0.5).to(torch.bfloat16)
        compiled = torch.compile(qkv.qkv_projection_eager, dynamic=False)
        compiled(x, w, kv)
        versions = {"eager": qkv.qkv_projection_eager, "cuBLAS concatenated": qkv.qkv_projection_concat,
                    "torch.compile": compiled, "triton": qkv.qkv_projection}
        # CUDA-graph replays, as decode runs in inference engines: the host's launch cost stays out.
        times = {key: bench_ms(cuda_graph(lambda: f(x, w, kv))) for key, f in versions.items()}
        n_bytes, flops = qkv.qkv_projection_bytes(x, w), qkv.qkv_projection_flops(x, w)
        ms = times["triton"]
        rows.append({
            "kernel": "qkv_projection", "shape": f"{model} M={m} K={k} N={n_q}+2x{kv} bf16",
            "bytes": n_bytes, "flops": flops, "ms": {key: round(v, 4) for key, v in times.items()},
            "GBps": round(n_bytes / (ms * 1e-3) / 1e9, 1), "TFLOPs": round(flops / (ms * 1e-3) / 1e12, 1),
            "fraction_of_copy": round(n_bytes / (ms * 1e-3) / 1e9 / prof.copy_gbps, 3),
            "fraction_of_matmul": round(flops / (ms * 1e-3) / 1e12 / prof.matmul_tflops["bf16"], 3),
            "speedup_vs_eager": round(times["eager"] / ms, 2),
            "speedup_vs_compile": round(times["torch.compile"] / ms, 3),
        })
    return rows


def qkv_markdown(result_rows) -> list[str]:
    lines = ["", "GEMMs (median microseconds of CUDA-graph replays; eager = one GEMM per projection):", "",
             "| kernel | shape | eager us | one cuBLAS GEMM us | torch.compile us | Triton us | Triton GB/s (/ copy) "
             "| Triton TFLOP/s (/ matmul) | vs eager | vs compile |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result_rows:
        us = {k: v * 1e3 for k, v in r["ms"].items()}
        lines.append(
            f"| {r['kernel']} | {r['shape']} | {us['eager']:.1f} | {us['cuBLAS concatenated']:.1f} | "
            f"{us['torch.compile']:.1f} | {us['triton']:.1f} | {r['GBps']:.0f} ({r['fraction_of_copy']:.2f}) | "
            f"{r['TFLOPs']:.0f} ({r['fraction_of_matmul']:.2f}) | {r['speedup_vs_eager']:.2f}x | "
            f"{r['speedup_vs_compile']:.2f}x |"
        )
    return lines


def _settings_label(cfg: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def _sweep_one(problem, baselines: dict, candidates: dict, ref, flops, progress, graphs=False) -> list[dict]:
    """Check every candidate against ref, then time the baselines and the candidates that compile and compute
    it right, in turns."""

    rows, runnable = [], {k: cuda_graph(f) if graphs else f for k, f in baselines.items()}
    for label, fn in candidates.items():
        try:
            out = fn()
            err = float((out.float() - ref).norm() / ref.norm())
            why = None if err < 1e-2 else f"wrong result (relative error {err:.2g})"
        except Exception as exc:  # a setting this Triton or this GPU cannot run: record why and go on
            lines = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {lines[-1][:160] if lines else ''}"
        if why:
            rows.append({"problem": problem, "setting": label, "ms": None, "TFLOPs": None, "error": why})
            progress(f"{problem} | {label}: {why}")
        else:
            runnable[label] = cuda_graph(fn) if graphs else fn
    for label, ms in bench_interleaved(runnable, rounds=3, rep=40).items():
        rows.append({"problem": problem, "setting": label, "ms": round(ms, 4),
                     "TFLOPs": round(flops / (ms * 1e-3) / 1e12, 1), "error": None})
        progress(f"{problem} | {label}: {ms:.4f} ms, {rows[-1]['TFLOPs']:.0f} TFLOP/s")
    return rows


def sweep(progress):
    """Time tile settings of the GEMM kernels against cuBLAS; each row: a setting, its time or why it failed."""
    import torch
    import triton


    def tma_epilogue(cfg, w=None):
        return lambda: ge._launch_epilogue_tma(x, w if w is not None else wk, b, r, (cfg,))

    def pointer_epilogue(cfg, m, n, k):
        def run():
            o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
            ge._gemm_gelu_residual_kernel[grid](x, wk, b, r, o, m, n, k, k, 1, n, 1, 1, n, 1, n, PRECISION=None,
                                            APPROX_TANH=ge.approx_tanh_applies(o), **cfg)
            return o
        return run

    def settings(keys, *values):
        return [dict(zip(keys, v)) for v in values]

    out = []
    tma_keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SUBTILES", "FLATTEN", "WARP_SPECIALIZE", "num_warps",
                "num_stages")
    ptr_keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "HALVES", "num_warps", "num_stages")
    swiglu_keys = ptr_keys[:4] + ptr_keys[5:]
    x, wk, b, r = random_epilogue_inputs(8192, 8192, 8192)
    wt = wk.t().contiguous().t()  # nn.Linear's layout: (N, K) row-major, read transposed
    base = {"cuBLAS matmul alone": lambda: x @ wk, "eager": lambda: ge.gemm_gelu_residual_eager(x, wk, b, r)}
    cands = {}
    for cfg in settings(tma_keys, (128, 256, 64, 16, 2, False, False, 8, 4), (128, 256, 64, 8, 1, False, False, 8, 3),
                        (128, 256, 64, 16, 2, True, False, 8, 4), (128, 256, 64, 16, 2, True, False, 8, 3),
                        (128, 256, 64, 8, 1, True, False, 8, 3), (128, 256, 64, 8, 2, True, False, 8, 3),
                        (128, 256, 64, 16, 2, True, True, 8, 3), (256, 128, 64, 16, 2, True, False, 8, 3)):
        cands["tma " + _settings_label(cfg)] = tma_epilogue(cfg)
    cands["tma TMA_SETTINGS[0], w = nn.Linear.weight.t()"] = tma_epilogue(ge.TMA_SETTINGS[0], wt)
    cands["pointer gemm_launch_settings"] = pointer_epilogue(ge.gemm_launch_settings(8192, 8192, 8192), 8192, 8192, 8192)
    out += _sweep_one("epilogue 8192^3", base, cands, ge.gemm_gelu_residual_eager(x, wk, b, r).float(),
                      ge.gemm_gelu_residual_flops(x, wk), progress)
    base = cands = wt = None  # free the 8192^3 operands before the next problem

    # The exercise's graded shape: a d_model = 256 model's MLP up-projection over 32768 tokens. HALVES: the
    # epilogue one column half at a time (a whole 128 x 256 one spills registers).
    m, k, n = 32768, 256, 2048
    x, wk, b, r = random_epilogue_inputs(m, k, n)
    base = {"cuBLAS matmul alone": lambda: x @ wk, "eager": lambda: ge.gemm_gelu_residual_eager(x, wk, b, r)}
    cands = {"tma TMA_SETTINGS": lambda: ge.gemm_gelu_residual_tma(x, wk, b, r)}
    for cfg in settings(ptr_keys, (64, 128, 64, 8, False, 4, 2), (64, 128, 64, 8, False, 4, 3),
                        (64, 128, 32, 8, False, 4, 4), (128, 256, 64, 8, True, 8, 4), (128, 256, 64, 8, False, 8, 4),
                        (128, 256, 32, 8, True, 8, 5), (128, 256, 32, 8, False, 8, 5), (128, 128, 64, 8, False, 8, 4),
                        (256, 128, 64, 8, True, 8, 3), (64, 256, 64, 8, True, 4, 4), (128, 256, 64, 16, True, 8, 4)):
        cands["pointer " + _settings_label(cfg)] = pointer_epilogue(cfg, m, n, k)
    out += _sweep_one(f"epilogue M={m} K={k} N={n}", base, cands, ge.gemm_gelu_residual_eager(x, wk, b, r).float(),
                      ge.gemm_gelu_residual_flops(x, wk), progress)

    x, wk, b, r = random_epilogue_inputs(16, 8192, 8192)
    base = {"cuBLAS matmul alone": lambda: x @ wk, "eager": lambda: ge.gemm_gelu_residual_eager(x, wk, b, r)}
    cands = {}
    for cfg in settings(ptr_keys, (16, 64, 256, 1, False, 4, 3), (16, 64, 128, 1, False, 4, 4),
                        (16, 64, 128, 1, False, 4, 6), (16, 32, 256, 1, False, 4, 4), (16, 128, 128, 1, False, 4, 4)):
        cands["pointer " + _settings_label(cfg)] = pointer_epilogue(cfg, 16, 8192, 8192)
    out += _sweep_one("epilogue decode M=16 K=N=8192", base, cands, ge.gemm_gelu_residual_eager(x, wk, b, r).float(),
                      ge.gemm_gelu_residual_flops(x, wk), progress, graphs=True)

    for m, k, n, tma_sets, ptr_sets in (
            (8192, 4096, 11008, ((128, 128, 64, 16, False, True, 8, 3), (128, 128, 64, 16, False, False, 8, 4),
                                 (128, 128, 64, 16, True, False, 8, 3), (128, 128, 64, 16, True, False, 8, 4),
                                 (128, 128, 64, 16, True, True, 8, 3)),
             ((128, 128, 32, 8, 8, 5), (128, 128, 64, 8, 8, 4))),
            (16, 4096, 11008, (), ((16, 32, 128, 1, 4, 4), (16, 64, 256, 1, 4, 3), (16, 64, 128, 1, 4, 4),
                                   (16, 32, 256, 1, 4, 3), (16, 128, 128, 1, 4, 3), (16, 64, 128, 1, 4, 6)))):
        x, wg, wu = _swiglu_inputs(m, k, n)
        base = {"cuBLAS two GEMMs alone": lambda: (x @ wg, x @ wu), "eager": lambda: sw.swiglu_eager(x, wg, wu)}
        cands = {}
        for cfg in settings(tma_keys[:4] + tma_keys[5:], *tma_sets):  # no SUBTILES
            cands["tma " + _settings_label(cfg)] = lambda cfg=cfg: sw._launch_swiglu_tma(x, wg, wu, (cfg,))
        for cfg in settings(swiglu_keys, *ptr_sets):
            def run(cfg=cfg, m=m, k=k, n=n):
                h = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
                sw._swiglu_kernel[grid](x, wg, wu, h, m, n, k, k, 1, n, 1, n, 1, n, PRECISION=None, **cfg)
                return h
            cands["pointer " + _settings_label(cfg)] = run
        out += _sweep_one(f"swiglu M={m} K={k} N={n}", base, cands, sw.swiglu_eager(x, wg, wu).float(),
                          sw.swiglu_flops(x, wg), progress, graphs=m <= 256)
    return out


def _rows_and_goals(prof, progress) -> dict:
    result = {"rows": rows(prof, progress)}
    result["goals"] = goals(result["rows"])
    return result


def _report(result) -> str:
    return "\n".join(markdown(result["rows"])) + "\n" + json.dumps(result["goals"], indent=1)


def main(argv=None) -> int:
    return part_main(argv, __doc__, "gemm", _rows_and_goals, sweep, _report)


if __name__ == "__main__":
    sys.exit(main())
