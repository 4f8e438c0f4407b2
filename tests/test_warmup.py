"""Compiling ahead: every small case of the criteria asked for, each once, called from a pool of threads on a
GPU; nothing on the CPU; an error in a warm-up call is left to the graded call of that case."""

import threading

import torch

from autograder import runtime
from autograder import specs as registry
from autograder.criteria import warmup
from autograder.guard.secret import EXTRA_SHAPES
from autograder.criteria.cases import graded_dtypes


def test_the_cases_are_the_correctness_and_precision_shapes_once_per_graded_dtype():

    ex = registry.get("04.gemm_gelu_residual")
    both = warmup.cases(ex, ["correctness", "precision", "performance"])
    shapes = list(dict.fromkeys(list(ex.shapes) + list(EXTRA_SHAPES.get(ex.id, ())) + list(ex.precision_shapes)))
    assert both == [(s, d) for s in shapes for d in graded_dtypes()]
    assert len(warmup.cases(ex, ["performance"])) == 0  # the benchmark size compiles once, in its own criterion
    # Correctness's secret case grades every shape precision measures: precision adds nothing to compile.
    assert warmup.cases(ex, ["correctness"]) == both
    assert len(warmup.cases(ex, ["precision"])) < len(both)


def test_nothing_is_compiled_ahead_in_the_interpreter(monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    calls = []
    assert warmup.compile_ahead(registry.get("02.rmsnorm"), lambda *a: calls.append(a), ["correctness"]) == (0, [])
    assert calls == []


def test_warm_up_calls_run_in_threads_and_their_errors_are_swallowed(monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(runtime, "device", lambda: torch.device("cpu"))
    monkeypatch.setattr(warmup, "graded_dtypes", lambda: [torch.float32, torch.float16])
    ex = registry.get("02.rmsnorm")
    seen = []

    def fn(x, w, eps):
        seen.append((threading.current_thread().name, tuple(x.shape), x.dtype))
        if x.shape[-1] == 7 and x.dtype == torch.float16:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        raise RuntimeError("a student's bug: the graded call of this case reports it")

    n, broken = warmup.compile_ahead(ex, fn, ["correctness", "precision"])
    assert n == len(seen) == len(warmup.cases(ex, ["correctness", "precision"])) > 1
    # Only the call that broke the CUDA context is named (the graded calls after it all fail the same way).
    assert broken and broken == [f"shape {s}, float16" for s, d in warmup.cases(ex, ["correctness"])
                                 if s.dims[-1] == 7 and d == torch.float16]
    assert all(name.startswith("fusion-course-warmup") for name, _, _ in seen)
    assert not [t for t in threading.enumerate() if t.name.startswith("fusion-course-warmup")]  # all joined


def test_autotuning_choices_made_during_the_warm_up_are_forgotten(monkeypatch):
    """Configurations timed while other warm-up calls shared the GPU would be noisy picks; a shape the benchmark
    shares with a small case would keep one. The compiled kernels stay, the choices go."""
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
    @triton.jit
    def _scale(x_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    def fn(x, w, eps):
        _scale.cache[("picked during the warm-up", threading.current_thread().name)] = _scale.configs[0]
        return x

    fn.__globals__["_scale_for_the_test"] = _scale  # as a notebook's globals hold a student's kernel
    try:
        _scale.cache[("chosen before",)] = _scale.configs[1]
        monkeypatch.setattr(runtime, "has_gpu", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(runtime, "device", lambda: torch.device("cpu"))
        monkeypatch.setattr(warmup, "graded_dtypes", lambda: [torch.float32])
        assert _scale in warmup.autotuners(fn)
        warmup.compile_ahead(registry.get("02.rmsnorm"), fn, ["correctness"])
        assert list(_scale.cache) == [("chosen before",)]
    finally:
        del fn.__globals__["_scale_for_the_test"]


def test_the_report_names_the_warm_up_call_that_broke_the_cuda_context(monkeypatch):
    from autograder import check

    monkeypatch.setattr(warmup, "compile_ahead", lambda ex, fn, criteria: (12, ["shape (1, 7), float16"]))

    def rmsnorm(x, w, eps):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    report = check("02.rmsnorm", rmsnorm, criteria=["correctness"])
    assert not report.passed
    assert any("broke the GPU's CUDA context on its first call at shape (1, 7), float16" in n for n in report.notes)
