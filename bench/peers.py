"""The course's kernels against the kernels people use, timed in the same process and in turns: Liger-Kernel where
it has the same op, PyTorch's own op and torch.compile, and SDPA with each backend forced.

    python -m bench.peers [--out bench/results/peers]   (also part of python -m bench)

Liger-Kernel is optional (`pip install -e '.[bench]'`): without it every other column is measured and the table
says which are missing and why. A column a device cannot run (an SDPA backend it lacks) says so too. "vs best
peer" is the best peer's time over the course kernel's: above 1, the course is faster than every peer measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.measure import device
from autograder.measure.timing import bench_interleaved, extra_bytes
from autograder.specs import streaming_reduction_fusion
from autograder.specs import vertical_fusion
from autograder.specs.streaming_reduction_fusion import sdpa_with_backend
from kernels import add_rmsnorm, layernorm, linear_cross_entropy, rmsnorm, rmsnorm_backward, softmax
from bench.common import RESULTS, needs_gpu, record, save, slug
from kernels.flash_attention import flash_attention, flash_attention_tma
from kernels.linear_cross_entropy_backward import linear_cross_entropy_forward_backward

RESULTS = RESULTS / "peers"
COURSE = "course"
ROUNDS = 5  # rounds of turns per op (autograder.measure.timing.bench_interleaved)


def liger():
    """(liger_kernel.transformers.functional, "") or (None, why it is missing)."""
    try:
        from liger_kernel.transformers import functional
    except Exception as exc:  # noqa: BLE001  an optional dependency: any failure to import is a missing column
        return None, f"Liger-Kernel is not installed ({type(exc).__name__}: {exc}); pip install -e '.[bench]'"
    return functional, ""


def best_peer(times: dict) -> tuple[str, float] | None:
    """(name, ms) of the fastest version that is not the course's own; None when no peer ran."""
    peers = {k: v for k, v in times.items() if k != COURSE and v is not None}
    return min(peers.items(), key=lambda kv: kv[1]) if peers else None


def row(op: str, shape: str, times: dict, missing: dict, unit_work: float | None = None, unit: str = "GB/s",
        extra_gib: dict | None = None) -> dict:
    """One op's results: ms per version, the rate (unit_work per second in `unit`), the course against its best
    peer, and every column that could not be measured with the reason."""
    best = best_peer(times)
    scale = 1e9 if unit == "GB/s" else 1e12
    out = {"op": op, "shape": shape, "ms": {k: round(v, 4) for k, v in times.items()}, "missing": missing,
           "unit": unit, "vs_best_peer": None, "best_peer": None}
    if unit_work:
        out["rate"] = {k: round(unit_work / (v * 1e-3) / scale, 1) for k, v in times.items()}
    if best:
        out["best_peer"] = best[0]
        if COURSE in times:
            out["vs_best_peer"] = round(best[1] / times[COURSE], 3)
    if extra_gib:
        out["extra_GiB"] = {k: round(v, 3) for k, v in extra_gib.items()}
    return out


def _timed(calls: dict, progress, what: str) -> tuple[dict, dict]:
    """Median ms of each call that runs, in turns; the ones that raise are missing, with the error."""

    runnable, missing = {}, {}
    for name, call in calls.items():
        try:
            call()
        except Exception as exc:  # noqa: BLE001  a peer that cannot run here is a named gap, not a crash
            missing[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            continue
        runnable[name] = call
    progress(f"{what}: {', '.join(runnable)}")
    return bench_interleaved(runnable, rounds=ROUNDS, rep=60), missing


def norm_rows(progress, M: int = 32768, H: int = 4096) -> list[dict]:
    """RMSNorm forward and backward, add + RMSNorm, LayerNorm and softmax at M x H bf16 (32768 x 4096: 256 MiB
    a tensor, far past L2)."""
    import torch
    import torch.nn.functional as F


    lf, why = liger()
    eps = 1e-6
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    dy = torch.randn_like(x)
    w = 1 + 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    b = 0.1 * torch.randn(H, device="cuda", dtype=torch.bfloat16)
    shape = f"{M}x{H} bf16"
    no_liger = {"Liger-Kernel": why} if lf is None else {}

    def compiled(fn):
        return torch.compile(fn, dynamic=False)

    rms_c, add_c, ln_c, sm_c = (compiled(f) for f in (vertical_fusion.rmsnorm_eager,
                                                       vertical_fusion.add_rmsnorm_eager,
                                                       vertical_fusion.layernorm_eager,
                                                       streaming_reduction_fusion.softmax_eager))
    ops = {
        "rmsnorm": ({COURSE: lambda: rmsnorm.rmsnorm(x, w, eps), "torch.compile": lambda: rms_c(x, w, eps),
                     "F.rms_norm": lambda: F.rms_norm(x, (H,), w, eps),
                     **({"Liger-Kernel": lambda: lf.liger_rms_norm(x, w, eps, in_place=False)} if lf else {})},
                    vertical_fusion.rmsnorm_bytes(x, w)),
        "add_rmsnorm": ({COURSE: lambda: add_rmsnorm.add_rmsnorm(x, r, w, eps), "torch.compile": lambda: add_c(x, r, w, eps),
                         **({"Liger-Kernel": lambda: lf.liger_fused_add_rms_norm(x, r, w, eps, in_place=False)}
                            if lf else {})},
                        vertical_fusion.add_rmsnorm_bytes(x, r, w)),
        "layernorm": ({COURSE: lambda: layernorm.layernorm(x, w, b, eps), "torch.compile": lambda: ln_c(x, w, b, eps),
                       "F.layer_norm": lambda: F.layer_norm(x, (H,), w, b, eps),
                       **({"Liger-Kernel": lambda: lf.liger_layer_norm(x, w, b, eps)} if lf else {})},
                      vertical_fusion.layernorm_bytes(x, w, b)),
        "softmax": ({COURSE: lambda: softmax.softmax(x), "torch.compile": lambda: sm_c(x),
                     "torch.softmax": lambda: torch.softmax(x, dim=-1),
                     **({"Liger-Kernel": lambda: lf.liger_softmax(x)} if lf else {})},
                    streaming_reduction_fusion.softmax_bytes(x)),
    }
    rows = []
    for op, (calls, n_bytes) in ops.items():
        times, missing = _timed(calls, progress, op)
        rows.append(row(op, shape, times, {**no_liger, **missing}, n_bytes))

    # Backward (dx and dw): the course's kernel alone; the peers' autograd backward through a forward graph
    # recorded once (retain_graph), so that only the backward is timed.
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    backwards = {COURSE: lambda: rmsnorm_backward.rmsnorm_backward(x, w, dy, eps)}
    peers = {"torch.compile": lambda: compiled(vertical_fusion.rmsnorm_eager)(xg, wg, eps),
             "F.rms_norm": lambda: F.rms_norm(xg, (H,), wg, eps)}
    if lf:
        peers["Liger-Kernel"] = lambda: lf.liger_rms_norm(xg, wg, eps, in_place=False)
    missing = dict(no_liger)
    for name, forward in peers.items():
        try:
            y = forward()
            backwards[name] = lambda y=y: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
        except Exception as exc:  # noqa: BLE001
            missing[name] = f"{type(exc).__name__}: {exc}"
    times, failed = _timed(backwards, progress, "rmsnorm_backward")
    rows.append(row("rmsnorm_backward", shape, times, {**missing, **failed},
                    vertical_fusion.rmsnorm_backward_bytes(x, w, dy)))
    return rows


def linear_cross_entropy_rows(progress, M: int = 8192, K: int = 4096, V: int = 128256) -> list[dict]:
    """Linear + cross-entropy, M x K -> V bf16 (Llama 3's vocabulary by default): forward alone and forward +
    backward, time and the memory allocated beyond the inputs."""
    import torch


    lf, why = liger()
    h = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(V, K, device="cuda") / K**0.5).to(torch.bfloat16)
    t = torch.randint(0, V, (M,), device="cuda")
    shape = f"{M}x{K} -> {V} bf16"
    compiled = torch.compile(streaming_reduction_fusion.linear_cross_entropy_eager, dynamic=False)
    forward = {COURSE: lambda: linear_cross_entropy.linear_cross_entropy(h, w, t),
               "eager": lambda: streaming_reduction_fusion.linear_cross_entropy_eager(h, w, t),
               "torch.compile": lambda: compiled(h, w, t)}
    if lf:
        forward["Liger-Kernel"] = lambda: lf.liger_fused_linear_cross_entropy(h, w, t)
    rows = []
    times, missing = _timed(forward, progress, "linear_cross_entropy forward")
    mem = {name: extra_bytes(forward[name])[1] / 2**30 for name in times}
    rows.append(row("linear_cross_entropy forward", shape, times, {**({"Liger-Kernel": why} if not lf else {}), **missing},
                    2 * M * K * V, "TFLOP/s", mem))

    hg, wg = h.detach().requires_grad_(), w.detach().requires_grad_()

    def both(loss_fn):
        def step():
            hg.grad = wg.grad = None
            loss_fn(hg, wg, t).float().mean().backward()  # the course's eager returns per-row losses, Liger the mean
        return step

    # The course's computes the mean loss and both gradients in one call (notebook 07), chunk by chunk.
    train = {COURSE: lambda: linear_cross_entropy_forward_backward(h, w, t),
             "eager": both(streaming_reduction_fusion.linear_cross_entropy_eager),
             "torch.compile": both(compiled)}
    if lf:
        train["Liger-Kernel"] = both(lf.liger_fused_linear_cross_entropy)
    times, failed = _timed(train, progress, "linear_cross_entropy forward + backward")
    mem = {name: extra_bytes(train[name])[1] / 2**30 for name in times}
    rows.append(row("linear_cross_entropy forward + backward", shape, times,
                    {**({"Liger-Kernel": why} if not lf else {}), **failed},
                    6 * M * K * V, "TFLOP/s", mem))
    return rows


SDPA_BACKENDS = ("default", "CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
ATTENTION_SHAPES = ((4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64))


def attention_rows(progress, shapes=ATTENTION_SHAPES, dtypes=("bf16", "fp16")) -> list[dict]:
    """FlashAttention forward against SDPA with each backend forced (a backend this device or build lacks is a
    named gap), causal and not, in TFLOP/s."""
    import torch
    import torch.nn.functional as F


    def sdpa(backend, q, k, v, causal):
        if backend == "default":
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        forced = sdpa_with_backend(backend)  # a backend this device lacks raises, and _timed names it
        return lambda: forced(q, k, v, causal)

    rows = []
    for (b, heads, n, d) in shapes:
        for name in dtypes:
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[name]
            q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=dtype) for _ in range(3))
            for causal in (False, True):
                calls = {COURSE: lambda: flash_attention_tma(q, k, v, causal),
                         "course (portable)": lambda: flash_attention(q, k, v, causal)}
                calls.update({f"SDPA {be.lower().replace('_attention', '')}": sdpa(be, q, k, v, causal)
                              for be in SDPA_BACKENDS})
                what = f"attention {b},{heads},{n},{d} {name} causal={causal}"
                times, missing = _timed(calls, progress, what)
                flops = 4 * b * heads * n * n * d * (0.5 if causal else 1.0)
                peers = {k_: v_ for k_, v_ in times.items() if k_ != "course (portable)"}
                r = row("flash_attention forward", f"{b},{heads},{n},{d} {name} causal={causal}", peers, missing,
                        flops, "TFLOP/s")
                if "course (portable)" in times:
                    r["ms"]["course (portable)"] = round(times["course (portable)"], 4)
                    r["rate"]["course (portable)"] = round(flops / (times["course (portable)"] * 1e-3) / 1e12, 1)
                rows.append(r)
    return rows


SMALL = {"norm": {"M": 256, "H": 512}, "ce": {"M": 256, "K": 128, "V": 1000},
         "attention": {"shapes": ((1, 2, 256, 64),), "dtypes": ("bf16",)}}  # every column, in seconds (tests)


def rows(prof, progress, small: bool = False) -> list[dict]:
    size = SMALL if small else {"norm": {}, "ce": {}, "attention": {}}
    return (norm_rows(progress, **size["norm"]) + linear_cross_entropy_rows(progress, **size["ce"])
            + attention_rows(progress, **size["attention"]))


def markdown(peer_rows: list[dict]) -> list[str]:
    lines = ["", "The course against its peers, timed in turns in the same process (rate = the op's minimal bytes "
             "or flops over the median time; \"vs best peer\" = the fastest peer's time / the course's):", "",
             "| op | shape | course | peers (rate) | best peer | vs best peer | not measured |", "|---|---|---:|---|---|---:|---|"]
    for r in peer_rows:
        rate = r.get("rate", {})
        unit = r["unit"]
        course = f"{rate[COURSE]:.0f} {unit}" if COURSE in rate else "-"
        mem = r.get("extra_GiB", {})
        peers = ", ".join(f"{k} {v:.0f}" + (f" (+{mem[k]:.2f} GiB)" if k in mem else "")
                          for k, v in rate.items() if k != COURSE)
        if COURSE in mem:
            course += f" (+{mem[COURSE]:.2f} GiB)"
        gaps = "; ".join(f"{k}: {v}" for k, v in r["missing"].items()) or "-"
        vs = f"{r['vs_best_peer']:.2f}x" if r["vs_best_peer"] else "-"
        lines.append(f"| {r['op']} | {r['shape']} | {course} | {peers or '-'} | {r['best_peer'] or '-'} | {vs} | "
                     f"{gaps} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)
    if not needs_gpu("peers"):
        return 2

    prof = device.profile()
    result = {**record(prof), "rows": rows(prof, lambda m: print(f"[peers] {m}", flush=True))}
    stem = args.out / f"peers-{slug(prof.name)}"
    save(result, stem.with_suffix(".json"))
    text = (f"### Peers: {prof.name} ({result['date']}, torch {result['torch']}, triton {result['triton']})\n"
            + "\n".join(markdown(result["rows"])) + "\n")
    print(text)
    print(f"saved {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
