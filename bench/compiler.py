"""Notebook 06's patterns on one device: what torch.compile makes of them, next to eager PyTorch and the
course's kernels, with the GPU kernels each version launches.

    python -m bench.compiler     # the rows, printed (python -m bench runs them with the rest)

- fake quantization with a host sync and a Python branch (the exercise's broken version) against the repaired
  one, each eager and compiled: the graph break costs a device-to-host copy and a second graph;
- row argmax at a decode and a training shape: torch.argmax, its compiled version, the autotuned kernel;
- a pre-norm block's RMSNorm, forward and backward: written op by op (eager and compiled) against the Triton
  kernels as a custom op inside torch.compile, which Inductor cannot fuse into the ops around them.
"""

from __future__ import annotations

import sys

from autograder.criteria.cases import count_gpu_kernels
from autograder.criteria.compiled import compiler_quiet
from autograder.measure.timing import bench_interleaved
from autograder.specs import compiler_fusion as fq
from bench.common import part_main
from kernels.fake_quant import fake_quant
from kernels.rmsnorm_op import rmsnorm_op
from kernels.row_argmax_tuned import row_argmax

# fake_quant compiled at least 0.8 of copy bandwidth; the tuned argmax no slower than torch.argmax at both shapes.
GOALS = {"fake_quant": {"min_fraction_of_copy": 0.8}, "row_argmax": {"no_slower_than": "torch.argmax"}}


def _kernels(fn) -> list[str]:
    import torch


    fn()
    torch.cuda.synchronize()
    return count_gpu_kernels(fn)[1]


def rows(prof, progress):
    import torch
    import torch.nn.functional as F


    out = []
    with compiler_quiet():
        progress("fake quantization 8192 x 8192 bf16")
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        versions = {"broken, eager": lambda: fq.fake_quant_broken(x), "repaired, eager": lambda: fake_quant(x)}
        broken_c, repaired_c = torch.compile(fq.fake_quant_broken), torch.compile(fake_quant, fullgraph=True)
        versions.update({"broken, compiled": lambda: broken_c(x), "repaired, compiled": lambda: repaired_c(x)})
        launched = {k: _kernels(f) for k, f in versions.items()}
        t = bench_interleaved(versions)
        n_bytes = fq.fake_quant_bytes(x)
        out.append({"kernel": "fake_quant", "shape": "8192x8192 bf16", "ms": t,
                    "kernels": {k: len(v) for k, v in launched.items()},
                    "fraction_of_copy": {k: n_bytes / (v * 1e-3) / 1e9 / prof.copy_gbps for k, v in t.items()}})
        del x
        for part, (m, n) in (("decode", (64, 128256)), ("training", (16384, 32000))):
            progress(f"row argmax {m} x {n} bf16 ({part})")
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            compiled = torch.compile(lambda a: torch.argmax(a, -1))
            t = bench_interleaved({"torch.argmax": lambda: torch.argmax(x, -1), "torch.compile": lambda: compiled(x),
                                   "triton": lambda: row_argmax(x)})
            n_bytes = x.numel() * x.element_size() + 8 * m
            out.append({"kernel": "row_argmax", "shape": f"{m}x{n} bf16 ({part})", "ms": t,
                        "fraction_of_copy": {k: n_bytes / (v * 1e-3) / 1e9 / prof.copy_gbps for k, v in t.items()}})
            del x
        progress("RMSNorm block forward + backward 16384 x 4096 bf16")
        m, h = 16384, 4096
        x, r = (torch.randn(m, h, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        w = (1 + 0.1 * torch.randn(h, device="cuda", dtype=torch.bfloat16)).requires_grad_()
        dy = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)

        def by_hand(a, weight, eps):
            af = a.float()
            return (af * torch.rsqrt(af.square().mean(-1, keepdim=True) + eps)).to(a.dtype) * weight

        def block(norm):
            return lambda: torch.autograd.grad(F.silu(norm(x + r, w, 1e-5)), (x, r, w), dy)

        compiled_hand = torch.compile(lambda a, b, c: F.silu(by_hand(a + b, c, 1e-5)))
        compiled_op = torch.compile(lambda a, b, c: F.silu(rmsnorm_op(a + b, c, 1e-5)), fullgraph=True)
        versions = {"op by op, eager": block(by_hand),
                    "op by op, compiled": lambda: torch.autograd.grad(compiled_hand(x, r, w), (x, r, w), dy),
                    "custom op, compiled": lambda: torch.autograd.grad(compiled_op(x, r, w), (x, r, w), dy)}
        launched = {k: _kernels(f) for k, f in versions.items()}
        t = bench_interleaved(versions)
        out.append({"kernel": "rmsnorm_block", "shape": f"{m}x{h} bf16, forward + backward", "ms": t,
                    "kernels": {k: len(v) for k, v in launched.items()}})
    return out


def goals(result_rows) -> dict:
    met = {}
    for r in result_rows:
        if r["kernel"] == "fake_quant":
            met["fake_quant"] = {**GOALS["fake_quant"],
                                 "met": r["fraction_of_copy"]["repaired, compiled"] >= 0.8}
        elif r["kernel"] == "row_argmax":
            ok = r["ms"]["triton"] <= r["ms"]["torch.argmax"] and met.get("row_argmax", {}).get("met", True)
            met["row_argmax"] = {**GOALS["row_argmax"], "met": ok}
    return met


def markdown(result_rows) -> list[str]:
    lines = ["", "Compiler-driven fusion (notebook 06; median ms, GPU kernels launched per call in brackets, "
             "fraction of copy bandwidth from the bytes the op must move):", "",
             "| pattern | shape | versions | goal |", "|---|---|---|---|"]
    for r in result_rows:
        ms, kern = r["ms"], r.get("kernels", {})
        frac = r.get("fraction_of_copy", {})
        cells = "; ".join(f"{k} {v:.3f}" + (f" [{kern[k]}]" if k in kern else "") +
                          (f" = {frac[k]:.2f} of copy" if k in frac else "") for k, v in ms.items())
        goal = {"fake_quant": ">= 0.8 of copy, compiled", "row_argmax": "no slower than torch.argmax"}.get(r["kernel"], "-")
        lines.append(f"| {r['kernel']} | {r['shape']} | {cells} | {goal} |")
    return lines


def _report(result_rows) -> str:
    return "\n".join(markdown(result_rows) + [f"goal {k}: {'MET' if g['met'] else 'NOT MET'}"
                                              for k, g in goals(result_rows).items()])


def main(argv=None) -> int:
    return part_main(argv, __doc__, "compiler", rows, lambda progress: [], _report)


if __name__ == "__main__":
    sys.exit(main())
