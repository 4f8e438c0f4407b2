"""Benchmark every reference kernel against eager PyTorch and torch.compile, on one device, in one run.

    python -m bench            # measure, print the table, save bench/results/<gpu>.{json,png}
    python -m bench --sweep    # also time block-size variants of the reference kernels
    python -m bench.report     # then: docs/benchmarks.md from the newest committed runs (no GPU needed)

Peaks are measured in the same run (autograder.measure.device.measure). Effective bandwidth is always the op's
minimal bytes over the median time, so an unfused version shows as a smaller fraction of the copy peak.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.measure import device
from autograder.measure.timing import bench_ms
from kernels import add_rmsnorm as addn
from kernels import fused_chain as fc
from kernels import layernorm as ln
from kernels import multi_tensor_adamw as mta
from kernels import op_chain as oc
from kernels import rmsnorm as rn
from kernels import rmsnorm_backward as rb
from kernels import row_sum_sumsq as rss
from bench import compiler as bench_compiler
from bench import gemm as bench_gemm
from bench import peers as bench_peers
from bench import plots
from bench import streaming as bench_streaming
from bench import training as bench_training
from bench.common import RESULTS, STANDARD, needs_gpu, record, save, slug
from kernels.fused_chain import fused_chain, fused_chain_bytes, fused_chain_eager
from kernels.op_chain import MAX_OPS, op_chain_bytes, time_versions
from kernels.rmsnorm_variants import rmsnorm_two_pass

GOALS = {  # kernel -> (min fraction of copy bandwidth, the PyTorch version it must be no slower than)
    "fused_chain": (0.95, "torch.compile"),
    "rmsnorm": (0.90, "torch.compile"),
    "add_rmsnorm": (0.0, "torch.compile"),  # the goal: no slower than torch.compile (which reaches ~0.94 of copy)
    "layernorm": (0.85, "torch.compile"),
    "row_sum_sumsq": (0.85, "torch.compile"),
    "multi_tensor_adamw": (0.80, "torch fused=True"),
}


def _rows_fused_chain(prof):
    import torch


    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(fused_chain_eager, dynamic=False)
    compiled(x, bias, 0.8)
    n_bytes = fused_chain_bytes(x, bias)
    times = {
        "eager": bench_ms(lambda: fused_chain_eager(x, bias, 0.8)),
        "torch.compile": bench_ms(lambda: compiled(x, bias, 0.8)),
        "triton": bench_ms(lambda: fused_chain(x, bias, 0.8)),
    }
    return [_row("fused_chain", "16384x8192 bf16", n_bytes, times, prof)]


def _rows_op_chain(prof, progress):
    import torch


    x = torch.randn(2**26, device="cuda")
    rows = []
    for n in range(1, MAX_OPS + 1):
        progress(f"op_chain n={n}")
        t = time_versions(x, n)
        times = {"eager": t["eager"], "torch.compile": t["compiled"], "triton": t["triton"]}
        rows.append(_row(f"op_chain n={n}", "2^26 fp32", op_chain_bytes(x, n), times, prof))
    return rows


def _rows_norms(prof, progress):
    """Notebook 02's kernels at 32768 x 4096 bf16 (256 MiB per activation)."""
    import torch
    import torch.nn.functional as F


    M, H, eps = 32768, 4096, 1e-5
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    b = 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    shape = f"{M}x{H} bf16"
    rows = []

    def timed(eager, triton_fn, functional=None, extra=None):
        compiled = torch.compile(eager, dynamic=False)
        compiled()
        times = {"eager": bench_ms(eager), "torch.compile": bench_ms(compiled), "triton": bench_ms(triton_fn)}
        if functional is not None:
            times["torch.nn.functional"] = bench_ms(functional)
        for k, f in (extra or {}).items():
            times[k] = bench_ms(f)
        return times

    progress("rmsnorm")
    rows.append(_row("rmsnorm", shape, rn.rmsnorm_bytes(x, w), timed(
        lambda: rn.rmsnorm_eager(x, w, eps), lambda: rn.rmsnorm(x, w, eps),
        lambda: F.rms_norm(x, (H,), w, eps), {"triton two-pass": lambda: rmsnorm_two_pass(x, w, eps)}), prof))
    progress("add_rmsnorm")
    rows.append(_row("add_rmsnorm", shape, addn.add_rmsnorm_bytes(x, r, w), timed(
        lambda: addn.add_rmsnorm_eager(x, r, w, eps), lambda: addn.add_rmsnorm(x, r, w, eps)), prof))
    progress("layernorm")
    rows.append(_row("layernorm", shape, ln.layernorm_bytes(x, w, b), timed(
        lambda: ln.layernorm_eager(x, w, b, eps), lambda: ln.layernorm(x, w, b, eps),
        lambda: F.layer_norm(x, (H,), w, b, eps)), prof))
    progress("rmsnorm_backward")
    times = {"eager": bench_ms(lambda: rb.rmsnorm_backward_eager(x, w, dy, eps)),
             "triton": bench_ms(lambda: rb.rmsnorm_backward(x, w, dy, eps))}
    xc = x.detach().requires_grad_()
    wc = w.detach().requires_grad_()
    fwd = torch.compile(lambda a, c: rn.rmsnorm_eager(a, c, eps), dynamic=False)

    def compiled_backward():
        xc.grad = wc.grad = None
        fwd(xc, wc).backward(dy)

    compiled_backward()
    # Forward + backward for torch.compile (it does not expose the backward alone): generous to torch.
    times["torch.compile"] = bench_ms(compiled_backward) - bench_ms(lambda: fwd(x, w))
    rows.append(_row("rmsnorm_backward", shape, rb.rmsnorm_backward_bytes(x, w, dy), times, prof))
    return rows


def _rows_horizontal(prof, progress):
    """Notebook 03's memory-bound kernels: sibling reductions, and AdamW over a model-sized list of tensors."""
    import torch


    progress("row_sum_sumsq")
    x = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(rss.row_sum_sumsq_eager, dynamic=False)
    compiled(x)
    times = {"eager": bench_ms(lambda: rss.row_sum_sumsq_eager(x)), "torch.compile": bench_ms(lambda: compiled(x)),
             "triton": bench_ms(lambda: rss.row_sum_sumsq(x))}
    rows = [_row("row_sum_sumsq", "32768x4096 bf16", rss.row_sum_sumsq_bytes(x), times, prof)]
    del x

    sizes = mta.model_like_sizes(torch.Generator().manual_seed(0), total=100_000_000, n=200)
    progress(f"multi_tensor_adamw: {len(sizes)} tensors, {sum(sizes):,} fp32 parameters")

    hyper = (5, 1e-3, 0.9, 0.999, 1e-8, 0.01)
    lists = mta.random_adamw_state(sizes)
    times = {"triton": bench_ms(lambda: mta.adamw_step(*lists, *hyper))}
    for label, impl in (("eager", dict(foreach=False)), ("torch foreach=True", dict(foreach=True)),
                        ("torch fused=True", dict(fused=True))):
        step = mta.torch_adamw(*mta.random_adamw_state(sizes), *hyper, **impl)
        times[label] = bench_ms(step)
        del step
    progress("multi_tensor_adamw: torch.compile of the per-tensor loop (compiling takes about a minute)")
    compiled = torch.compile(mta.adamw_step_eager, dynamic=False)
    compiled(*lists, *hyper)
    times["torch.compile"] = bench_ms(lambda: compiled(*lists, *hyper))
    rows.append(_row("multi_tensor_adamw", f"{sum(sizes) / 1e6:.0f}M fp32 in {len(sizes)} tensors",
                     mta.adamw_bytes(lists[0]), times, prof))
    return rows


def _row(kernel, shape, n_bytes, times, prof):
    gbps = {k: n_bytes / (ms * 1e-3) / 1e9 for k, ms in times.items()}
    return {
        "kernel": kernel,
        "shape": shape,
        "bytes": n_bytes,
        "ms": {k: round(v, 4) for k, v in times.items()},
        "GBps": {k: round(v, 1) for k, v in gbps.items()},
        "fraction_of_copy": round(gbps["triton"] / prof.copy_gbps, 3),
        "speedup_vs_eager": round(times["eager"] / times["triton"], 2),
        "speedup_vs_compile": round(times["torch.compile"] / times["triton"], 3),
    }


def sweep(progress):
    """Time block-size variants of the reference kernels (to choose their launch settings)."""
    import torch
    import triton


    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    n_bytes = fc.fused_chain_bytes(x, bias)
    out = []
    for bm, bn, w in [(1, 1024, 4), (1, 2048, 4), (2, 1024, 4), (1, 2048, 8), (4, 1024, 4), (2, 2048, 8)]:
        grid = (triton.cdiv(16384, bm) * triton.cdiv(8192, bn),)

        def run():
            fc._fused_chain_kernel[grid](x, bias, y, 16384, 8192, 8192, 1, 8192, 1, 0.8,
                                         BLOCK_M=bm, BLOCK_N=bn, num_warps=w)

        ms = bench_ms(run)
        out.append(("fused_chain", f"BLOCK_M={bm} BLOCK_N={bn} warps={w}", n_bytes / (ms * 1e-3) / 1e9))
        progress(f"{out[-1][1]}: {out[-1][2]:.0f} GB/s")

    xn = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16)
    rn_ = torch.randn_like(xn)
    yn, sn = torch.empty_like(xn), torch.empty_like(xn)
    wn = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    for warps in (4, 8, 16, 32):
        ms = bench_ms(lambda: rn._rmsnorm_kernel[(32768,)](xn, wn, yn, 4096, 4096, 4096, 1e-5, BLOCK_H=4096,
                                                           num_warps=warps))
        out.append(("rmsnorm", f"BLOCK_H=4096 warps={warps}", rn.rmsnorm_bytes(xn, wn) / (ms * 1e-3) / 1e9))
        ms = bench_ms(lambda: addn._add_rmsnorm_kernel[(32768,)](xn, rn_, wn, yn, sn, 4096, 4096, 4096, 4096, 4096,
                                                                 1e-5, BLOCK_H=4096, num_warps=warps))
        out.append(("add_rmsnorm", f"BLOCK_H=4096 warps={warps}", addn.add_rmsnorm_bytes(xn, rn_, wn) / (ms * 1e-3) / 1e9))
        ms = bench_ms(lambda: ln._layernorm_kernel[(32768,)](xn, wn, wn, yn, 4096, 4096, 4096, 1e-5, BLOCK_H=4096,
                                                             num_warps=warps))
        out.append(("layernorm", f"BLOCK_H=4096 warps={warps}", ln.layernorm_bytes(xn, wn, wn) / (ms * 1e-3) / 1e9))
        progress(f"norms warps={warps}: " + ", ".join(f"{k} {g:.0f}" for k, _, g in out[-3:]))
    del xn, rn_, yn, sn
    xf = torch.randn(2**26, device="cuda")
    for block, w in [(512, 2), (1024, 4), (2048, 8), (4096, 8)]:
        ms = bench_ms(lambda: oc.op_chain(xf, 8, BLOCK=block, num_warps=w))
        out.append(("op_chain n=8", f"BLOCK={block} warps={w}", oc.op_chain_bytes(xf, 8) / (ms * 1e-3) / 1e9))
        progress(f"{out[-1][0]} {out[-1][1]}: {out[-1][2]:.0f} GB/s")
    del xf
    out += _sweep_horizontal(progress)
    return out


def _sweep_horizontal(progress):
    import torch
    import triton
    import triton.language as tl


    out = []
    for m, n in ((32768, 4096), (262144, 512), (4096, 32768)):
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        s, ss = torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        for bm, bn, w in [(1, 512, 4), (1, 1024, 4), (1, 2048, 8), (2, 512, 4), (4, 512, 8), (1, 256, 2)]:
            if bn > n:
                continue
            ms = bench_ms(lambda: rss._row_sum_sumsq_kernel[(triton.cdiv(m, bm),)](
                x, s, ss, m, n, n, 1, BLOCK_M=bm, BLOCK_N=bn, num_warps=w))
            out.append((f"row_sum_sumsq {m}x{n}", f"BLOCK_M={bm} BLOCK_N={bn} warps={w}",
                        rss.row_sum_sumsq_bytes(x) / (ms * 1e-3) / 1e9))
            progress(f"{out[-1][0]} {out[-1][1]}: {out[-1][2]:.0f} GB/s")
        del x
    sizes = [1 << 20] * 50 + [4099] * 50
    lists = [[torch.randn(k, device="cuda") for k in sizes] for _ in range(4)]
    t = mta._tables(lists, 1)
    for block, w in [(512, 4), (1024, 4), (2048, 8), (4096, 8)]:
        bt, bs = [], []
        for i, k in enumerate(sizes):
            starts = range(0, k, block)
            bt += [i] * len(starts)
            bs += starts
        bt, bs = torch.tensor(bt, device="cuda"), torch.tensor(bs, device="cuda")
        ms = bench_ms(lambda: mta._adamw_kernel[(len(bt),)](t.addr, t.numel, bt, bs, t.n_tensors, 1e-3, 0.9, 0.999,
                                                            1e-8, 0.99999, 1e-3, 1.0, DTYPE=tl.float32, BLOCK=block,
                                                            num_warps=w))
        out.append(("multi_tensor_adamw", f"BLOCK={block} warps={w}", mta.adamw_bytes(lists[0]) / (ms * 1e-3) / 1e9))
        progress(f"{out[-1][0]} {out[-1][1]}: {out[-1][2]:.0f} GB/s")
    return out


def markdown(result: dict) -> str:
    d = result["device"]
    lines = [
        f"Measured on {d['name']} (driver {d['driver']}), torch {d['torch_version']}, triton {d['triton_version']}, "
        f"{result['date']}. Copy bandwidth {d['copy_gbps']:.0f} GB/s, bf16 matmul {d['matmul_tflops']['bf16']:.0f} "
        f"TFLOP/s, both measured in the same run. GB/s = the op's minimal bytes / median time.",
        "",
        "| kernel | shape | eager GB/s | torch.compile GB/s | other GB/s | Triton GB/s | Triton / copy | vs eager "
        "| vs compile |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        g = r["GBps"]
        others = ", ".join(f"{k.replace('torch.nn.functional', 'F')} {v:.0f}" for k, v in g.items() if k not in STANDARD)
        lines.append(
            f"| {r['kernel']} | {r['shape']} | {g['eager']:.0f} | {g['torch.compile']:.0f} | {others or '-'} | "
            f"{g['triton']:.0f} | {r['fraction_of_copy']:.2f} | {r['speedup_vs_eager']:.2f}x | "
            f"{r['speedup_vs_compile']:.2f}x |"
        )
    if result.get("gemm_rows"):
        lines += bench_gemm.qkv_markdown(result["gemm_rows"])
    if result.get("epilogue_rows"):
        lines += bench_gemm.markdown(result["epilogue_rows"])
    if result.get("streaming_rows"):
        lines += bench_streaming.markdown(result["streaming_rows"])
    if result.get("training_rows"):
        lines += bench_training.markdown(result["training_rows"])
    if result.get("compiler_rows"):
        lines += bench_compiler.markdown(result["compiler_rows"])
    if result.get("peer_rows"):
        lines += bench_peers.markdown(result["peer_rows"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="also time block-size variants")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="folder for the results (default bench/results)")
    args = parser.parse_args(argv)
    if not needs_gpu("suite"):
        return 2

    def progress(msg):
        print(f"[bench] {msg}", flush=True)

    progress("measuring this GPU's peaks")
    prof = device.measure(progress=False)
    progress(f"copy {prof.copy_gbps:.0f} GB/s, bf16 matmul {prof.matmul_tflops['bf16']:.0f} TFLOP/s")
    progress("fused_chain")
    rows = (_rows_fused_chain(prof) + _rows_op_chain(prof, progress) + _rows_norms(prof, progress)
            + _rows_horizontal(prof, progress))
    result = {
        **record(prof),
        "rows": rows,
        "gemm_rows": bench_gemm.qkv_rows(prof, progress),
        "epilogue_rows": bench_gemm.rows(prof, progress),
        "streaming_rows": bench_streaming.rows(prof, progress),
        "training_rows": bench_training.rows(prof, progress),
        "peer_rows": bench_peers.rows(prof, progress),
        "compiler_rows": bench_compiler.rows(prof, progress),
        "goals": {},
    }
    for r in rows:
        if r["kernel"] in GOALS:
            min_frac, baseline = GOALS[r["kernel"]]
            ok = r["fraction_of_copy"] >= min_frac and r["ms"][baseline] >= r["ms"]["triton"]
            result["goals"][r["kernel"]] = {"min_fraction_of_copy": min_frac, "no_slower_than": baseline, "met": ok}
    result["goals"].update(bench_gemm.goals(result["epilogue_rows"]))
    result["goals"].update(bench_streaming.goals(result["streaming_rows"]))
    result["goals"].update(bench_training.goals(result["training_rows"]))
    result["goals"].update(bench_compiler.goals(result["compiler_rows"]))
    if args.sweep:
        result["sweep"] = [{"kernel": k, "config": c, "GBps": round(g, 1)} for k, c, g in sweep(progress)]
    stem = args.out / slug(prof.name)
    save(result, stem.with_suffix(".json"))
    plots.figures(stem.with_suffix(".json"))
    print(markdown(result))
    for k, g in result["goals"].items():
        copy = f">= {g['min_fraction_of_copy']} of copy and " if "min_fraction_of_copy" in g else ""
        want = (f"at most {', '.join(f'{v} {name}' for name, v in g['at_most'].items())}" if "at_most" in g else
                f"{copy}no slower than {g['no_slower_than']}"
                if "no_slower_than" in g else ", ".join(f"{name} {v}" for name, v in g.items() if name != "met"))
        print(f"goal {k}: {want}: {'MET' if g['met'] else 'NOT MET'}")
    for s in result.get("sweep", []):
        print(f"sweep {s['kernel']:<14} {s['config']:<34} {s['GBps']:8.0f} GB/s")
    print(f"saved {stem}.json, .png (python -m bench.report puts it in docs/benchmarks.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
