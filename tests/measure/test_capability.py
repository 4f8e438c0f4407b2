"""What the course does on each GPU generation, decided from the compute capability alone (no GPU needed):
the dtypes graded and timed, whether Triton's matrix products reach tensor cores, whether the TMA paths run."""

from pathlib import Path

import pytest
import torch

from autograder.measure import capability
from autograder.criteria import at_size
from autograder.measure.capability import Capability
from autograder.criteria.outputs import output_problem

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
GIB = 2**30


def gpu(major, minor, total_gib=16, free_gib=15, name="a GPU"):
    return Capability(name, major, minor, total_gib * GIB, free_gib * GIB)


# (compute capability, an example, graded dtypes, bf16 timed as, tensor-core tl.dot, TMA)
GENERATIONS = [
    ((7, 5), "Tesla T4 (Turing)", [F32, F16], F16, False, False),
    ((8, 0), "A100 (Ampere)", [F32, F16, BF16], BF16, True, False),
    ((8, 6), "RTX 3090 (Ampere)", [F32, F16, BF16], BF16, True, False),
    ((8, 9), "L4 (Ada)", [F32, F16, BF16], BF16, True, False),
    ((9, 0), "H100 (Hopper)", [F32, F16, BF16], BF16, True, True),
    ((10, 0), "B200 (Blackwell)", [F32, F16, BF16], BF16, True, True),
    ((12, 0), "RTX 5090 (Blackwell)", [F32, F16, BF16], BF16, True, True),
]


@pytest.mark.parametrize("cc, example, dtypes, bf16_as, dot, tma", GENERATIONS, ids=[g[1] for g in GENERATIONS])
def test_each_generation_gets_the_dtypes_and_paths_it_supports(cc, example, dtypes, bf16_as, dot, tma):
    cap = gpu(*cc, name=example)
    assert cap.supported
    assert capability.graded_dtypes(cap) == dtypes
    assert capability.timing_dtype(BF16, cap) == bf16_as
    assert capability.timing_dtype(F32, cap) == F32 and capability.timing_dtype(F16, cap) == F16
    assert cap.tensor_core_dot is dot and cap.tma is tma
    unreachable = capability.performance_unreachable(uses_dot=True, cap=cap)
    assert (unreachable is None) is dot
    assert capability.performance_unreachable(uses_dot=False, cap=cap) is None  # bandwidth-bound: graded anywhere


def test_the_interpreter_grades_float32_and_float16():
    assert capability.graded_dtypes(None) == [F32, F16]
    assert capability.timing_dtype(BF16, None) == BF16
    assert capability.performance_unreachable(True, None) is None


def test_older_than_turing_is_named_unsupported():
    assert not gpu(7, 0).supported and "not supported" in capability.describe(gpu(7, 0))[0]


def test_the_reason_a_gemm_is_not_timed_on_turing_names_the_card_and_the_cause():
    why = capability.performance_unreachable(True, gpu(7, 5, name="Tesla T4"))
    assert "Tesla T4" in why and "7.5" in why and "FMA" in why and "Correctness" in why


def test_device_lines_say_what_changes_on_a_small_turing_card():
    text = "\n".join(capability.describe(gpu(7, 5, total_gib=15, free_gib=14.5)))
    assert "15.0 GiB, 14.5 GiB free" in text
    assert "float32, float16 (bfloat16 is not native here)" in text
    assert "float16 (for bfloat16)" in text and "FMA" in text and "portable" in text
    hopper = "\n".join(capability.describe(gpu(9, 0, 80, 79)))
    assert "bfloat16" in hopper and "TMA" in hopper and "tensor cores" in hopper
    assert "interpreter" in capability.describe(None)[0]


def test_an_eager_version_that_does_not_fit_is_not_held_against_the_student(monkeypatch):
    """Naive attention's scores need 8 GiB at the benchmark shape: on a 16 GB card eager runs out of memory. The
    speed-up over it is then not measured (and not required), with a note that says why."""

    class Ex:
        @staticmethod
        def eager(*args):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (6 * GIB, 16 * GIB))
    call, note = at_size.eager_if_it_fits(Ex, ())
    assert call is None
    assert "does not fit" in note and "6.0 GiB free" in note and "not required" in note

    class Fits:
        @staticmethod
        def eager(*args):
            return sum(args)

    call, note = at_size.eager_if_it_fits(Fits, (1, 2))
    assert call() == 3 and note == ""


def test_a_float64_reference_that_does_not_fit_leaves_the_form_checked_and_says_so(monkeypatch):
    """The float64 reference of attention at the benchmark shape needs 8 GiB for its scores: on a 16 GB card the
    grader's own yardstick must not run out of memory in the student's name. Its shapes still come from the meta
    device, so a wrong output shape is still caught at the benchmark size."""
    from autograder import specs as registry

    import dataclasses

    real = registry.get("05.flash_attention").reference

    def big(**inputs):
        if any(isinstance(v, torch.Tensor) and v.device.type != "meta" for v in inputs.values()):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return real(**inputs)

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    ex = dataclasses.replace(registry.get("05.flash_attention"), reference=big)
    q, k, v = (torch.randn(1, 2, 16, 8, dtype=torch.float16) for _ in range(3))
    shapes, note = at_size.reference_at_size(ex, {"q": q, "k": k, "v": v, "causal": True})
    assert [tuple(s.shape) for s in shapes] == [(1, 2, 16, 8), (1, 2, 16)]  # the output and its log-sum-exp
    assert all(s.device.type == "meta" for s in shapes)
    assert "does not fit" in note and "correctness shapes" in note

    lse = torch.zeros(1, 2, 16, dtype=torch.float32)
    assert "output has shape (1, 2, 8, 8), expected (1, 2, 16, 8)" in output_problem(
        ex, (q[:, :, :8], lse), shapes, {"q": q}, torch.float16)


def test_the_device_command_names_the_sizes_notebook_05_will_use():
    """What `python -m autograder device` promises is what the notebook does: both read autograder.measure.sizes."""
    from autograder.measure import sizes

    small = "\n".join(capability.describe(Capability("Tesla T4", 7, 5, 15 * GIB, int(14.5 * GIB))))
    assert "naive up to N = 4096" in small and "N = 8192, 16384 would need 48+ GiB" in small
    assert sizes.naive_attention_lengths(14.5 * GIB) == [512, 1024, 2048, 4096]
    tiny = sizes.eager_cross_entropy_vocabs(4 * GIB)
    assert tiny == [16384, 32768] and "V = 65536, 128256 left out" in "\n".join(sizes.lines(4 * GIB))
    assert sizes.eager_cross_entropy_vocabs(0) == [16384]  # the smallest always runs
    source = (Path(__file__).resolve().parents[2] / "solutions" / "05_streaming_reduction_fusion"
              / "05_streaming_reduction_fusion.py").read_text()
    assert "sizes.ATTENTION_LENGTHS" in source and "sizes.eager_cross_entropy_bytes" in source


@pytest.mark.parametrize("gib, batch", [(80, 32), (141, 32), (40, 32), (24, 16), (16, 8), (12, 8), (8, 4), (1, 1)])
def test_the_capstones_timed_batch_is_sized_to_the_cards_memory(monkeypatch, gib, batch):
    """Eager PyTorch's step at 32 x 1024 tokens peaks above 16 GiB: a smaller card times and measures a batch in
    proportion to its memory, a power of two; the model and the sequence stay as they are."""
    from autograder import runtime
    from autograder.specs.decoder import DECODER

    monkeypatch.setattr(runtime, "memory_cap_bytes", lambda: gib * 2**30)
    case = at_size.for_this_card(DECODER.perf_case)
    assert case.batch == batch
    assert case.config == DECODER.perf_case.config and case.seq_len == DECODER.perf_case.seq_len
