"""The order in which the performance criterion times its versions (no GPU needed: the timer is replaced)."""

import pytest

from autograder.criteria import performance as grade_perf
from autograder.measure import timing


@pytest.fixture
def recorded(monkeypatch):
    calls = []

    def fake_bench(fn, warmup=25, rep=100):
        calls.append((fn(), warmup))
        return 1.0

    monkeypatch.setattr(timing, "_do_bench", fake_bench)  # the grader's timer
    return calls


def test_the_peak_leads_every_round_and_the_others_swap_places(recorded):
    fns = {"peak": lambda: "peak", "yours": lambda: "yours", "eager": lambda: "eager"}
    times = timing.interleaved_times(fns, rounds=4, rep=1, lead="peak")
    order = [name for name, _ in recorded]
    assert order == ["peak", "yours", "eager", "peak", "eager", "yours"] * 2
    assert all(len(t) == 4 for t in times.values())
    # Only the first round warms up at length.
    assert [w for _, w in recorded[:3]] == [25, 25, 25] and {w for _, w in recorded[3:]} == {5}


def test_without_a_lead_every_version_takes_every_place(recorded):
    fns = {k: (lambda k=k: k) for k in "abc"}
    timing.interleaved_times(fns, rounds=3, rep=1)
    rounds = [[name for name, _ in recorded[i:i + 3]] for i in range(0, 9, 3)]
    assert rounds == [list("abc"), list("bca"), list("cab")]
    for place in range(3):
        assert {r[place] for r in rounds} == set("abc")


def test_an_even_number_of_rounds_keeps_yours_and_eager_even():
    # Each follows the peak (whose clocks it inherits) in as many rounds as the other.
    assert grade_perf.ROUNDS % 2 == 0


def test_bench_interleaved_returns_medians(monkeypatch):
    it = iter([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    monkeypatch.setattr(timing, "bench_ms", lambda fn, warmup=25, rep=100: next(it))
    med = timing.bench_interleaved({"a": lambda: None, "b": lambda: None}, rounds=3, rep=1)
    # Rounds: (a, b), (b, a), (a, b): a gets 3, 5, 4 and b gets 1, 2, 6.
    assert med == {"a": 4.0, "b": 2.0}


def test_the_demonstrations_switch_shortens_demo_timing_not_the_graders(monkeypatch):
    """FUSION_COURSE_SMALL_DEMOS (set by the checker and grade-class) gives the notebooks' own timings a quarter
    of their warm-up and repetitions; the performance criterion's timer keeps its own."""
    seen = []
    monkeypatch.setattr(timing, "_do_bench", lambda fn, warmup=25, rep=100: seen.append((warmup, rep)) or 1.0)
    monkeypatch.setenv("FUSION_COURSE_SMALL_DEMOS", "1")
    timing.bench_ms(lambda: None)
    timing.interleaved_times({"peak": lambda: None, "yours": lambda: None}, rounds=1, rep=40, lead="peak")
    assert seen == [(6, 25), (25, 40), (25, 40)]
    monkeypatch.setenv("FUSION_COURSE_SMALL_DEMOS", "0")
    timing.bench_ms(lambda: None)
    assert seen[-1] == (25, 100)


def test_demo_points_keep_the_ends_of_a_sweep_under_the_switch(monkeypatch):
    from autograder import runtime

    sweep = [2**k for k in range(12, 29, 2)]
    monkeypatch.delenv("FUSION_COURSE_SMALL_DEMOS", raising=False)
    assert runtime.demo_points(sweep) == sweep
    monkeypatch.setenv("FUSION_COURSE_SMALL_DEMOS", "1")
    assert runtime.demo_points(sweep) == [2**12, 2**20, 2**28]
    assert runtime.demo_points(sweep, keep=1) == [2**28]
    assert runtime.demo_points([1, 2]) == [1, 2]


def test_a_compiled_column_is_left_out_and_named_when_the_grader_runs_the_notebook(monkeypatch, capsys):
    from autograder import runtime
    from autograder.measure import timing

    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
    compiled = runtime.demo_compile(lambda x: x + 1)
    with pytest.raises(runtime.NotTimedHere):
        compiled(1)
    runnable = timing.written_versions({"eager": lambda: 1, "torch.compile": lambda: compiled(1)})
    assert list(runnable) == ["eager"]
    assert "torch.compile: not timed (torch.compile is not timed while the grader runs" in capsys.readouterr().out
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    assert runtime.demo_compile(lambda x: x + 1).__name__ != compiled.__name__  # torch.compile's, for a reader


def test_an_sdpa_backend_this_machine_lacks_is_named_and_left_out(monkeypatch):
    import torch

    from autograder import runtime
    from autograder.specs import streaming_reduction_fusion as attn_ops

    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    q = torch.randn(1, 2, 16, 8)
    with pytest.raises(runtime.NotTimedHere, match="CUDNN_ATTENTION backend does not run here"):
        attn_ops.sdpa_with_backend("CUDNN_ATTENTION")(q, q, q, True)  # cuDNN: CUDA only
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
    with pytest.raises(runtime.NotTimedHere, match="not timed apart while the grader runs"):
        attn_ops.sdpa_with_backend("MATH")(q, q, q, False)
    assert set(attn_ops.SDPA_BACKENDS.values()) <= {"CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"}
