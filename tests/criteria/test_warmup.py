"""Compiling ahead: every small case of the criteria asked for, each once, called from a pool of threads on a
GPU; nothing on the CPU; an error in a warm-up call is left to the graded call of that case."""

import contextlib
import dataclasses
import sys
import threading

import pytest
import torch

from autograder import runtime
from autograder import specs as registry
from autograder.criteria import dry_run, warmup
from autograder import config
from autograder.criteria.cases import graded_dtypes, precision_shapes
from autograder.measure import capability


def test_the_cases_are_the_correctness_and_precision_shapes_once_per_graded_dtype():

    ex = registry.get("04.gemm_gelu_residual")
    both = warmup.cases(ex, ["correctness", "precision", "performance"])
    drawn = precision_shapes(ex, config.load().secret_seed)  # as the criteria draw them from the grading's seed
    shapes = list(dict.fromkeys(list(ex.shapes) + list(ex.extra_shapes) + list(drawn)))
    assert both == [(s, d) for s in shapes for d in graded_dtypes()]
    assert len(warmup.cases(ex, ["performance"])) == 0  # the benchmark size is compiled by the dry run alone
    # Correctness's secret case grades every shape precision measures: precision adds nothing to compile.
    assert warmup.cases(ex, ["correctness"]) == both
    assert len(warmup.cases(ex, ["precision"])) < len(both)


@pytest.mark.parametrize("exercise", ["04.gemm_gelu_residual", "07.flash_attention_backward", "02.rmsnorm"])
def test_every_shape_and_dtype_a_graded_call_uses_is_compiled_ahead_and_nothing_else(exercise):
    """The graded calls find every kernel compiled (side by side, ahead): none compiles again, alone, in between."""
    from autograder.criteria import correctness, precision

    ex, cfg = registry.get(exercise), config.load()
    graded = {(shape, dtype) for _, _, shape, dtype in correctness.Cases(ex, cfg).todo}
    graded |= {(shape, dtype) for dtype, _, shape in precision.Cases(ex, cfg).todo}
    assert set(warmup.cases(ex, ["correctness", "precision"])) == graded


def test_nothing_is_compiled_ahead_in_the_interpreter(monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    calls = []
    assert warmup.compile_ahead(registry.get("02.rmsnorm"), lambda *a: calls.append(a), ["correctness"]) == (0, [])
    assert calls == []


def test_warm_up_calls_run_in_threads_and_their_errors_are_swallowed(monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(dry_run, "available", lambda: False)  # the pool alone (the dry pass: test_dry_run.py)
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


H100 = capability.Capability("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, 79 * 2**30)


def _fake_gpu(monkeypatch):
    """A GPU as warmup sees one, on the CPU: benchmark inputs made as markers, not tensors of hundreds of MiB."""
    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(runtime, "device", lambda: torch.device("cpu"))
    monkeypatch.setattr(capability, "current", lambda: H100)
    monkeypatch.setattr(warmup, "gpu_case_inputs", lambda ex, shape, dtype, seed: {"at": ("benchmark", shape, dtype)})


def test_the_benchmark_sizes_are_compiled_in_the_dry_run_and_never_run_by_the_warm_up(monkeypatch):
    """Fusion and performance call a kernel at its benchmark size (a specialization no case has): that compile
    joins the dry run, beside the cases'; only the cases are then called for real."""
    _fake_gpu(monkeypatch)
    ex = registry.get("02.rmsnorm")
    dry = []
    monkeypatch.setattr(dry_run, "run_dry", lambda calls: dry.extend(calls) or len(calls))
    seen = []
    warmup.compile_ahead(ex, lambda *a: seen.append(a[0]), ["correctness", "performance", "fusion"])
    small = warmup.cases(ex, ["correctness"])
    assert len(dry) == len(small) + 1 and len(seen) == len(small)  # the pool: the small cases alone
    seen.clear()
    dry[-1]()
    assert seen == [("benchmark", ex.perf_shape, torch.bfloat16)]  # drawn as performance draws them
    for only in (["performance"], ["fusion"]):
        assert len(warmup.dry_calls(ex, lambda *a: None, only)) == 1
    assert len(warmup.dry_calls(ex, lambda *a: None, ["correctness", "precision"])) == len(small)


def test_a_notebooks_exercises_compile_side_by_side_in_one_dry_run(monkeypatch):
    """The checker compiles every exercise's kernels in one dry run before grading them one by one: the
    cases of all of them in one pool, exercises without kernels to compile left out."""
    _fake_gpu(monkeypatch)
    runs = []
    monkeypatch.setattr(dry_run, "run_dry", lambda calls: runs.append(list(calls)) or len(calls))
    graded = [(registry.get(i), lambda *a: None, registry.get(i).criteria)
              for i in ("02.rmsnorm", "02.layernorm", "02.predict_rmsnorm_bytes")]
    submitted = warmup.compile_side_by_side(graded)
    want = sum(len(warmup.dry_calls(ex, fn, c)) for ex, fn, c in graded[:2])
    assert len(runs) == 1 and submitted == len(runs[0]) == want > 2
    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    assert warmup.compile_side_by_side(graded) == 0  # the interpreter compiles nothing ahead


def test_compiling_a_notebook_ahead_never_fails_its_grading(monkeypatch):
    """check.compile_ahead skips what check() would not grade (a wrong signature, another kind of GPU) and turns
    any error into nothing compiled: each check() then compiles what it needs itself."""
    check_module = sys.modules["autograder.check"]  # the package names its function check

    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(check_module, "_untimed", contextlib.nullcontext)
    handed = []
    monkeypatch.setattr(warmup, "compile_side_by_side", lambda graded: handed.extend(graded) or 7)

    def rmsnorm(x, w, eps):
        return x

    def layernorm(too, few):
        return too

    hopper = registry.get("08.flash_attention_ws")
    monkeypatch.setattr(capability, "current", lambda: dataclasses.replace(H100, major=8))  # an A100's: no Hopper
    assert hopper.hardware and capability.missing_hardware(hopper.hardware, capability.current())
    got = check_module.compile_ahead([("02.rmsnorm", rmsnorm, ["correctness", "fusion"]),
                                      ("02.layernorm", layernorm, None), (hopper.id, rmsnorm, None)])
    assert got == 7 and [(ex.id, fn, c) for ex, fn, c in handed] == [("02.rmsnorm", rmsnorm, ["correctness", "fusion"])]

    def broken(graded):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(warmup, "compile_side_by_side", broken)
    assert check_module.compile_ahead([("02.rmsnorm", rmsnorm, None)]) == 0
    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    assert check_module.compile_ahead([("02.rmsnorm", rmsnorm, None)]) == 0


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


def _autotuned_kernel():
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
    @triton.jit
    def _double(x_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    return _double


def test_quick_tuning_times_one_call_a_configuration_then_gives_the_benchmark_back(monkeypatch):
    """Inside: the autotuner's benchmark is one timed call; a choice made there is forgotten at the end, one made
    before stays, and the autotuner's own benchmark is back (the same object where it had been looked up)."""
    tuned = _autotuned_kernel()

    def fn(x):
        return x

    fn.__globals__["_tuned_for_the_test"] = tuned
    try:
        monkeypatch.setattr(runtime, "has_gpu", lambda: True)
        own = tuned.do_bench  # looked up once: cached on the instance
        tuned.cache[("chosen before",)] = tuned.configs[1]
        with warmup.quick_tuning(fn) as n:
            assert n == 1
            assert tuned.do_bench is not own and tuned.do_bench.__name__ == "_one_timed_call"
            tuned.cache[("chosen for a small case",)] = tuned.configs[0]
        assert tuned.do_bench is own
        assert list(tuned.cache) == [("chosen before",)]
        fresh = _autotuned_kernel()  # never looked up: nothing is left on the instance afterwards
        fn.__globals__["_tuned_for_the_test"] = fresh
        with warmup.quick_tuning(fn):
            assert "do_bench" in fresh.__dict__
        assert "do_bench" not in fresh.__dict__
    finally:
        del fn.__globals__["_tuned_for_the_test"]


def test_quick_tuning_changes_nothing_in_the_interpreter():
    tuned = _autotuned_kernel()

    def fn(x):
        return x

    fn.__globals__["_tuned_for_the_test"] = tuned
    try:
        if runtime.has_gpu():
            return
        with warmup.quick_tuning(fn) as n:
            assert n == 0 and "do_bench" not in tuned.__dict__
    finally:
        del fn.__globals__["_tuned_for_the_test"]


def test_the_decoder_is_warmed_up_at_every_model_and_batch_its_criteria_run(monkeypatch):
    from autograder.criteria import training

    ex = registry.get("07.decoder")
    assert training.warm_cases(ex, ex.criteria) == [] or runtime.has_gpu()  # nothing compiles in the interpreter
    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    dtypes = [torch.float32, torch.bfloat16]
    want = [(c, d) for c in ex.cases_gpu for d in dtypes] + [(ex.training_gpu, torch.bfloat16),
                                                              (ex.perf_case, torch.bfloat16)]
    assert ex.memory_gpu == ex.perf_case  # timed and measured on one model and batch: warmed up once
    assert training.warm_cases(ex, ex.criteria) == want
    assert training.warm_cases(ex, ["correctness"]) == want[:4]
    seen = []

    def first_step(ex_, fn, case, dtype):
        seen.append((threading.current_thread().name, case, dtype))
        if case == ex.perf_case:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(training, "first_step", first_step)
    dry = []
    monkeypatch.setattr(dry_run, "run_dry", lambda calls: dry.append(len(calls)) or 0)
    n, broken = warmup.compile_ahead(ex, lambda *a: None, ex.criteria)
    assert dry == [len(want)]  # every case once dry first, then each for real from the pool
    assert n == len(seen) == len(want)
    assert sorted((c.batch, c.seq_len, str(d)) for _, c, d in seen) == sorted(
        (c.batch, c.seq_len, str(d)) for c, d in want)
    assert all(name.startswith("fusion-course-warmup") for name, _, _ in seen)
    assert broken == [f"model {ex.perf_case}, bfloat16"]


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.has_gpu(), reason="needs a CUDA GPU")
def test_after_the_warm_up_the_decoders_graded_steps_compile_nothing():
    """The capstone's first graded steps compiled its kernels one after the other (16 s of correctness on an
    H100); warmed up side by side, correctness and the training run find every kernel compiled."""
    import triton

    from autograder.config import load
    from autograder.criteria import training
    from kernels.decoder import decoder_loss

    compiled = []
    hook = triton.knobs.runtime.jit_post_compile_hook
    ex = registry.get("07.decoder")
    warmup.compile_ahead(ex, decoder_loss, ["correctness"])
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiled.append(a) or False
    try:
        result = training.training_correctness(ex, decoder_loss, load())
    finally:
        triton.knobs.runtime.jit_post_compile_hook = hook
    assert result.status == "passed", result.message
    assert compiled == []


def _fresh(name: str):
    """A kernels/ module loaded again under a name of its own: its @triton.jit functions compiled nothing yet."""
    import importlib.util

    import kernels

    spec = importlib.util.spec_from_file_location(f"_fresh_{name}", f"{kernels.__path__[0]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.has_gpu(), reason="needs a CUDA GPU")
def test_after_a_notebook_is_compiled_ahead_its_graded_calls_compile_nothing():
    """The checker compiles a notebook's kernels side by side, benchmark sizes included; each check() then warms
    its own cases up, and fusion and correctness, at the benchmark size too, find every kernel compiled."""
    import triton

    from autograder.config import load
    from autograder.criteria import correctness, fusion

    check_module = sys.modules["autograder.check"]
    fns = {"02.rmsnorm": _fresh("rmsnorm").rmsnorm, "02.layernorm": _fresh("layernorm").layernorm}
    assert check_module.compile_ahead([(i, fn, None) for i, fn in fns.items()]) > 0
    for i, fn in fns.items():
        warmup.compile_ahead(registry.get(i), fn, ["correctness", "precision"])  # as check() does
    compiled = []
    hook = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiled.append(a) or False
    try:
        results = [grade(registry.get(i), fn, load()) for i, fn in fns.items()
                   for grade in (correctness.correctness, fusion.fusion)]
    finally:
        triton.knobs.runtime.jit_post_compile_hook = hook
    assert all(r.status == "passed" for r in results), [r.message for r in results]
    assert compiled == []
