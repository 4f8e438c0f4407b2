"""Timing as the course does it everywhere: triton.testing.do_bench medians, warm-up, L2 flushed between
runs (do_bench does that), on random data the caller provides."""

from __future__ import annotations

import time

from . import runtime


def bench_ms(fn, warmup: int = 25, rep: int = 100) -> float:
    """Median GPU time of fn() in milliseconds. warmup and rep are in milliseconds, as do_bench takes them."""
    if not runtime.has_gpu():
        raise RuntimeError("timing needs a CUDA GPU; in Triton's interpreter speed means nothing")
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def synced_ms(fn, budget_s: float = 0.2) -> float:
    """Wall-clock time of fn() per call, the whole device synchronized before and after a batch of calls.

    Unlike CUDA events on the current stream, this counts work on every stream, whenever it finishes.
    """
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - start
    reps = max(3, min(100, int(budget_s / max(one, 1e-6))))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / reps


def gbps(n_bytes: float, ms: float) -> float:
    return n_bytes / (ms * 1e-3) / 1e9


def tflops(n_flops: float, ms: float) -> float:
    return n_flops / (ms * 1e-3) / 1e12
