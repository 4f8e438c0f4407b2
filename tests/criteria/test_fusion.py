"""Where and how the fusion criterion counts: in every graded dtype, at the benchmark size on a GPU, and every
kernel the GPU ran during the call whatever its name. The hostile submissions it answers are in tests/corpus/
(fusion_two_launches_in_half, fusion_torch_in_half, fusion_kernels_named_like_fills and, on a GPU,
gpu_fusion_extra_launch_above_size and gpu_adamw_per_tensor_above_size)."""

import dataclasses
import importlib

import corpus_cases as corpus
import pytest
import torch.profiler

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import check, runtime, specs
from autograder.criteria import fusion
from autograder.criteria.cases import count_gpu_kernels, graded_dtypes
from autograder.measure.capability import Capability
from autograder.specs.exercise import Shape, StepExercise

H100 = Capability("H100", 9, 0, 80 << 30, 70 << 30)
T4 = Capability("T4", 7, 5, 16 << 30, 14 << 30)  # bfloat16 not native: neither graded nor timed


def _plan(points) -> list[tuple[str, str, bool]]:
    return [(str(p.shape), str(p.dtype).removeprefix("torch."), p.benchmark) for p in points]


def test_every_graded_dtype_is_counted_and_on_a_gpu_the_benchmark_size_in_its_timed_dtype():
    ex = specs.get("01.fused_chain")  # largest case 37x4099, timed at 16384x8192 in bfloat16
    assert _plan(fusion.counting_points(ex, None)) == [("37x4099", "float32", False), ("37x4099", "float16", False)]
    assert _plan(fusion.counting_points(ex, H100)) == [
        ("37x4099", "float32", False), ("37x4099", "float16", False), ("37x4099", "bfloat16", False),
        ("16384x8192", "bfloat16", True)]
    assert _plan(fusion.counting_points(ex, T4))[-1] == ("16384x8192", "float16", True)  # as performance times it


def test_each_named_benchmark_shape_is_counted_by_its_name():
    ex = dataclasses.replace(specs.get("05.softmax"), perf_shapes={"decode": Shape((64, 4096)),
                                                                    "training": Shape((8192, 4096))})
    bench = [p for p in fusion.counting_points(ex, H100) if p.benchmark]
    assert [(p.key, str(p)) for p in bench] == [
        ("benchmark_decode", "the benchmark size 64x4096 (decode) in bfloat16"),
        ("benchmark_training", "the benchmark size 8192x4096 (training) in bfloat16")]


def test_every_kernel_copy_and_memset_of_the_call_counts_whatever_its_name(monkeypatch):
    """A Triton kernel may be named like the library's fills; the grader's own queued work is finished before
    the profiler starts instead of being told apart by name."""
    order = []
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    gpu_names = ["memset_d32_kernel", "Memset (Device)", "fill_kernel",
                 "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                 "Memcpy HtoD (Pageable -> Device)", "_fused_chain_kernel"]

    class Profile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            order.append("profiler on")
            return self

        def __exit__(self, *exc):
            order.append("profiler off")
            return False

        def events(self):
            return [type("E", (), {"device_type": kind, "name": name})()
                    for kind, name in [(cuda, n) for n in gpu_names] + [(cpu, "aten::empty_like")]]

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: order.append("synchronize"))
    n, names = count_gpu_kernels(lambda: order.append("the student's call"))
    assert (n, names) == (len(gpu_names), gpu_names)
    assert order == ["synchronize", "profiler on", "the student's call", "synchronize", "profiler off"]


def _reference(ex):
    module = importlib.import_module(f"kernels.{ex.kernel}")
    return getattr(module, ex.function, None) or getattr(module, ex.kernel)


FUSED = [ex for ex in specs.all_exercises() if "fusion" in ex.criteria and ex.kernel]


@pytest.mark.parametrize("ex", FUSED, ids=lambda ex: ex.id)
def test_every_reference_solution_passes_fusion_wherever_it_is_counted(ex):
    r = check(ex.id, _reference(ex), criteria=["fusion"])["fusion"]
    assert r.status == "passed", r.message
    dtypes = ex.dtypes if isinstance(ex, StepExercise) else graded_dtypes()
    assert all(str(d).removeprefix("torch.") in r.message for d in dtypes), r.message
    counted_at_benchmark = "; the benchmark size " in r.message or "for the benchmark's " in r.message
    assert counted_at_benchmark == runtime.has_gpu(), r.message


@pytest.mark.skipif(runtime.has_gpu(), reason="about Triton's interpreter")
@pytest.mark.parametrize("name", ["gpu_fusion_extra_launch_above_size", "gpu_adamw_per_tensor_above_size"])
def test_a_size_threshold_above_every_case_is_seen_on_a_gpu_only(name):
    """The interpreter counts at the case shapes; what only the benchmark size triggers passes here, and the
    message says where the benchmark size is counted."""
    [case] = [c for c in corpus.load("check") if c.name == name]
    r = corpus.grade_in_process(case)["fusion"]
    assert r.status == "passed", r.message
    assert "benchmark size counted on GPU only" in r.message, r.message
