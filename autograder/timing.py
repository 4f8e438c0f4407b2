"""Timing as the course does it everywhere: triton.testing.do_bench medians, warm-up, L2 flushed between
runs (do_bench does that), on random data the caller provides."""

from __future__ import annotations

from . import runtime


def bench_ms(fn, warmup: int = 25, rep: int = 100) -> float:
    """Median GPU time of fn() in milliseconds. warmup and rep are in milliseconds, as do_bench takes them."""
    if not runtime.has_gpu():
        raise RuntimeError("timing needs a CUDA GPU; in Triton's interpreter speed means nothing")
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def gbps(n_bytes: float, ms: float) -> float:
    return n_bytes / (ms * 1e-3) / 1e9


def tflops(n_flops: float, ms: float) -> float:
    return n_flops / (ms * 1e-3) / 1e12
