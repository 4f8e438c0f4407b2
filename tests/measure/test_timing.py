"""The order in which the performance criterion times its versions (no GPU needed: the timer is replaced)."""

import pytest

from autograder.criteria import audit
from autograder.criteria import performance
from autograder.measure import timing


@pytest.fixture
def recorded(monkeypatch):
    calls = []

    def fake_bench(fn, warmup=25, rep=100):
        calls.append((fn(), warmup))
        return 1.0

    monkeypatch.setattr(timing, "grader_ms", fake_bench)  # the grader's timer
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
    assert performance.ROUNDS % 2 == 0


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
    monkeypatch.setattr(timing, "grader_ms", lambda fn, warmup=25, rep=100: seen.append((warmup, rep)) or 1.0)
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
    from autograder.specs import streaming_reduction_fusion

    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "0")
    q = torch.randn(1, 2, 16, 8)
    with pytest.raises(runtime.NotTimedHere, match="CUDNN_ATTENTION backend does not run here"):
        streaming_reduction_fusion.sdpa_with_backend("CUDNN_ATTENTION")(q, q, q, True)  # cuDNN: CUDA only
    monkeypatch.setenv(runtime.SMALL_DEMOS_ENV, "1")
    with pytest.raises(runtime.NotTimedHere, match="not timed apart while the grader runs"):
        streaming_reduction_fusion.sdpa_with_backend("MATH")(q, q, q, False)
    assert set(streaming_reduction_fusion.SDPA_BACKENDS.values()) <= {"CUDNN_ATTENTION", "FLASH_ATTENTION",
                                                                      "EFFICIENT_ATTENTION"}


# ---------------------------------------------------------------------------------------------------------------
# Timing that a submission cannot escape: the parts that need no GPU, with fakes of the profiler's events.


def test_busy_time_is_the_union_of_the_kernels_on_every_stream():
    # Two streams overlapping (0-10 and 5-20 us), a gap, then one kernel (30-35 us): 25 us busy.
    assert timing.busy_ms([(30, 35), (0, 10), (5, 20)]) == pytest.approx(0.025)
    assert timing.busy_ms([(0, 10), (2, 4)]) == pytest.approx(0.010)  # one inside another counts once
    assert timing.busy_ms([]) == 0.0


def test_device_intervals_take_every_gpu_event_whatever_its_name():
    import torch

    def event(kind, start, end, name):
        return type("E", (), {"device_type": kind, "name": name,
                              "time_range": type("R", (), {"start": start, "end": end})()})()

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [event(cuda, 0, 7, "triton_poi_fused_0"), event(cuda, 3, 9, "void at::native::vectorized_elementwise"),
              event(cuda, 20, 21, "Memcpy DtoD"), event(cpu, 0, 500, "aten::add")]
    assert timing.device_intervals(events) == [(0, 7), (3, 9), (20, 21)]
    assert timing.busy_ms(timing.device_intervals(events)) == pytest.approx(0.010)


def test_work_the_profiler_saw_beyond_the_timed_time_is_an_impossible_measurement():
    assert timing.escaped_work(timed_ms=0.100, work_ms=0.095) is None  # profiled warm, timed with L2 flushed
    assert timing.escaped_work(timed_ms=0.100, work_ms=0.118) is None  # noise
    why = timing.escaped_work(timed_ms=0.002, work_ms=0.100)  # a side stream the events did not see
    assert why.startswith("impossible measurement: work escaped the timer") and "0.1000 ms" in why


def test_timed_calls_rotate_the_input_sets_and_keep_a_few_outputs_at_random():
    seen = []

    def fn(x):
        seen.append(x)
        return [x]

    calls = timing.SampledCalls(fn, [(0,), (1,), (2,)], keep=3, seed=1)
    for _ in range(300):
        calls()
    assert seen[:6] == [0, 1, 2, 0, 1, 2]
    assert len(calls.kept) == 3 and calls.calls == 300
    picked = sorted(n for _, n, _ in calls.kept)
    assert picked[-1] > 3, "the reservoir keeps later calls, not only the first ones"
    assert all(out == [i] for i, _, out in calls.kept)  # each kept output with the set it was computed for


def test_a_call_that_does_less_when_timed_is_found_among_the_sampled_outputs():
    import torch

    state = {"n": 0}

    def lazy_when_repeated(x):  # right once (the grader's first check), garbage after
        state["n"] += 1
        return x * 2 if state["n"] == 1 else torch.empty_like(x).fill_(0)

    sets = [(torch.ones(4) * k,) for k in (1, 2, 3)]
    lazy_when_repeated(*sets[0])
    calls = timing.SampledCalls(lazy_when_repeated, sets, keep=3, seed=7)
    for _ in range(50):
        calls()

    def problem(i, out):
        return None if torch.equal(out, sets[i][0] * 2) else f"set {i} wrong"
    assert calls.verify(problem) is not None
    honest = timing.SampledCalls(lambda x: x * 2, sets, keep=3, seed=7)
    for _ in range(50):
        honest()
    assert honest.verify(problem) is None


def test_two_timed_calls_returning_one_storage_are_a_cache():
    import torch

    stored = {}

    def cached(x):
        return stored.setdefault(id(x), x * 2)

    sets = [(torch.ones(4),), (torch.zeros(4),)]
    calls = timing.SampledCalls(cached, sets, keep=3, seed=3)
    for _ in range(20):
        calls()
    why = calls.verify(lambda i, out: None)
    assert why is not None and "same output storage" in why


def test_rates_above_the_hardware_are_impossible_whatever_the_exercise_is_graded_against():
    import types

    ex = type("Ex", (), {"bytes": staticmethod(lambda x: 2 * 2**30), "flops": None})()
    prof = types.SimpleNamespace(copy_gbps=3000.0, matmul_tflops={"bf16": 700.0})  # a device profile's figures
    baseline = performance.Peak("baseline", None, 0, None, "")
    # 2 GiB in 0.75 ms is 2863 GB/s: below the ceiling. In 0.005 ms: 143x it.
    assert audit.impossible_rate(ex, (None,), 0.75, prof, "bf16", baseline, 1.0, 0.15) is None
    why = audit.impossible_rate(ex, (None,), 0.005, prof, "bf16", baseline, 1.0, 0.15)
    assert why.startswith("impossible measurement: work escaped the timer") and "copy bandwidth" in why
    compute = type("Ex", (), {"bytes": None, "flops": staticmethod(lambda x: 1e12)})()
    assert "matmul rate" in audit.impossible_rate(compute, (None,), 0.1, prof, "bf16", baseline, 1.0, 0.15)


def test_no_report_shows_a_fraction_of_a_physical_peak_above_one_as_a_pass():
    from autograder.report import FAILED, PASSED, CriterionResult

    r = CriterionResult("performance", PASSED, "fast", {"fraction_of_peak": 1.4, "peak_kind": "copy"})
    assert r.status == FAILED and r.message.startswith("impossible measurement")
    ok = CriterionResult("performance", PASSED, "fast", {"fraction_of_peak": 1.4, "peak_kind": "baseline"})
    assert ok.status == PASSED  # a baseline's speed (SDPA's, torch.argmax's) can be beaten


def test_a_result_torch_computed_beside_a_do_nothing_kernel_is_not_from_the_kernels():
    """The no-op check: with every Triton launch skipped, the honest kernel's output is poison; a result torch
    computed (here with the grader's dispatch modes switched off) is still right, and is named."""
    import torch
    import triton
    import triton.language as tl
    from torch.utils._python_dispatch import _disable_current_modes

    from autograder import specs
    from autograder.criteria.cases import case_inputs
    from autograder.criteria.outputs import as_tuple
    from kernels.fused_chain import fused_chain

    @triton.jit
    def _touch(x_ptr, n):
        pid = tl.program_id(0)
        tl.load(x_ptr + pid, mask=pid < n)

    def cheat(x, bias, alpha):
        with _disable_current_modes():
            y = (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
        _touch[(1,)](y, 1)
        return y

    ex = specs.get("01.fused_chain")
    inputs = case_inputs(ex, ex.shapes[0], torch.float32, 5)
    expected = as_tuple(ex.reference(**inputs))
    assert audit.from_your_kernels(ex, fused_chain, inputs, expected) is None
    why = audit.from_your_kernels(ex, cheat, inputs, expected)
    assert why is not None and "the result does not come from your kernels" in why
    # The launch entry points are back afterwards: the kernel runs again.
    assert as_tuple(fused_chain(**inputs))[0].sub(expected[0]).abs().max() < 1e-4


def test_tensor_subclasses_and_placeholders_are_refused_by_name():
    import torch

    class Lazy(torch.Tensor):
        pass

    ex = type("Ex", (), {"function": "rmsnorm"})()
    assert audit.not_plain(ex, (torch.ones(2),)) is None
    why = audit.not_plain(ex, (torch.ones(2).as_subclass(Lazy),))
    assert "not a plain torch.Tensor" in why and "Lazy" in why


def test_a_thread_the_submission_started_is_named_before_timing_library_threads_are_not():
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="library-like", daemon=True)  # stdlib code: not the submission's
    t.start()

    def loads_the_gpu_between_calls():
        stop.wait()

    mine = threading.Thread(target=loads_the_gpu_between_calls, name="worker", daemon=True)
    try:
        assert not any("library-like" in s for s in audit.submission_threads())
        mine.start()
        found = audit.submission_threads()
        assert any("loads_the_gpu_between_calls" in s for s in found)
        assert "a thread your code started is still running" in audit.submission_running()
    finally:
        stop.set()
        t.join()
        mine.join()
    assert audit.submission_threads() == []



def test_a_folder_pip_installed_into_holds_library_threads_a_plain_folder_does_not(tmp_path, monkeypatch):
    """`pip install --target DIR` with PYTHONPATH=DIR (a Python that cannot be written): tqdm's monitor thread
    started from there is a library's, not the submission's; a folder with no installed package is not a library's."""
    import importlib
    import threading

    installed, plain = tmp_path / "site", tmp_path / "notebook"
    for folder, name in ((installed, "pkg_installed"), (plain, "pkg_plain")):
        folder.mkdir()
        (folder / f"{name}.py").write_text("import threading\nstop = threading.Event()\ndef monitor():\n    stop.wait()\n")
    (installed / "pkg_installed-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(plain))
    monkeypatch.syspath_prepend(str(installed))
    assert str(installed) + "/" in audit._installed_folders()
    assert str(plain) + "/" not in audit._installed_folders()
    monkeypatch.setattr(audit, "_LIBRARY_ROOTS", audit._installed_folders())
    mods = [importlib.import_module(n) for n in ("pkg_installed", "pkg_plain")]
    threads = [threading.Thread(target=m.monitor, daemon=True) for m in mods]
    try:
        for t in threads:
            t.start()
        found = audit.submission_threads()
        assert any("pkg_plain.py" in s for s in found) and not any("pkg_installed.py" in s for s in found)
    finally:
        for m, t in zip(mods, threads):
            m.stop.set()
            t.join()

# ---------------------------------------------------------------------------------------------------------------
# A time limit per criterion.


def test_a_criterion_past_its_limit_is_interrupted_even_through_a_bare_except():
    import time

    from autograder.guard import deadline

    started = time.monotonic()
    with pytest.raises(deadline.CriterionTimeout):
        with deadline.time_limit(0.2):
            try:
                time.sleep(30)
            except BaseException:  # noqa: BLE001  a submission swallowing the first interruption
                pass
            time.sleep(30)  # the next one comes REPEAT_S later
    assert time.monotonic() - started < 5


def test_a_timed_out_criterion_is_recorded_and_the_others_still_graded(monkeypatch, tmp_path):
    import time

    from autograder import check
    from autograder.criteria import warmup
    from kernels.fused_chain import fused_chain

    monkeypatch.setattr(warmup, "compile_ahead", lambda ex, fn, chosen: ([], []))
    # The limit must cut the hang and leave fusion, which takes seconds in the interpreter and several times
    # longer on a loaded machine, room to finish: four times what fusion takes here and now, at least 8 s.
    took = time.monotonic()
    assert check("01.fused_chain", fused_chain, criteria=["fusion"])["fusion"].status == "passed"
    limit = max(8.0, 4 * (time.monotonic() - took))
    settings = tmp_path / "grading.toml"
    settings.write_text(f"criterion_timeout_s = {limit:.0f}\n")
    monkeypatch.setenv("FUSION_COURSE_GRADING", str(settings))
    calls = {"n": 0}

    def hangs_in_correctness(x, bias, alpha):
        calls["n"] += 1
        if calls["n"] == 1:
            time.sleep(600)  # stands for a hang (or a compile storm) in the first criterion graded
        return fused_chain(x, bias, alpha)

    started = time.monotonic()
    report = check("01.fused_chain", hangs_in_correctness, criteria=["correctness", "fusion"])
    assert time.monotonic() - started < 2 * limit + 60
    assert report["correctness"].status == "failed"
    assert report["correctness"].message.startswith("timed out in correctness")
    assert report["fusion"].status == "passed", report["fusion"].message


def test_a_stub_kernel_raising_through_the_interpreter_counts_as_not_written():
    from autograder.measure.timing import not_written

    class InterpreterError(Exception):  # what Triton's interpreter wraps a kernel's exception in
        pass

    InterpreterError.__module__ = "triton.runtime.errors"
    try:
        try:
            raise NotImplementedError()
        except NotImplementedError as inner:
            raise InterpreterError(repr(inner)) from inner
    except InterpreterError as wrapped:
        assert not_written(wrapped)
    assert not_written(InterpreterError("NotImplementedError()"))
    assert not not_written(ValueError("a real bug")) and not not_written(InterpreterError("IndexError"))


def test_the_samples_are_verified_one_input_set_after_another():
    """A verifier that keeps one set's reference at a time (the performance criterion, where three references
    beside the kept outputs are too many for a 16 GB card) computes each set's reference once."""
    for seed in range(20):
        calls = timing.SampledCalls(lambda x: [x], [(0,), (1,), (2,)], keep=3, seed=seed)
        for _ in range(50):
            calls()
        order = [i for i, _ in calls.samples()]
        assert order == sorted(order) and set(order) == {0, 1, 2}, order
        assert all(out == [i] for i, out in calls.samples())
        computed = []

        def problem(i, out, computed=computed):
            if not computed or computed[-1] != i:
                computed.append(i)  # a reference computed anew, as performance.reference does after another set's
            return None

        assert calls.verify(problem) is None
        assert computed == [0, 1, 2]
