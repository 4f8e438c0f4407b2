"""The timing audit every timed criterion goes through (criteria/audit.py), on the CPU: the device's meters are
stood in for, the order and verdicts of the checks are the audit's own. The GPU side is the corpus's
(tests/corpus/gpu_step_done_once.py, gpu_decoder_cached_when_repeated.py, gpu_skip_when_timed.py, ...)."""

import ast
from pathlib import Path

import pytest

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder.criteria import audit
from autograder.criteria.audit import Audited, Ceiling, audit_timing

CRITERIA = Path(audit.__file__).parent


def _meters(monkeypatch, work_ms: float, synced: float):
    calls = []
    monkeypatch.setattr(audit, "device_work_ms", lambda call: calls.append("profiled") or work_ms)
    monkeypatch.setattr(audit, "synced_ms", lambda call: calls.append("synced") or synced)
    return calls


def test_a_rate_above_the_ceiling_beyond_the_noise_is_impossible():
    copy = Ceiling(3e9, 3000.0, "GB/s", "bytes a step must move", "copy bandwidth")  # 3 GB: 1 ms at the ceiling
    assert copy.beaten(1.0, 0.15) is None and copy.beaten(0.9, 0.15) is None
    why = copy.beaten(0.5, 0.15)
    assert why.startswith("impossible measurement: work escaped the timer") and "2.0x this GPU's copy bandwidth" in why
    flops = Ceiling(4.4e12, 700.0, "TFLOP/s", "flops a forward and backward must do", "bf16 matmul rate")
    assert flops.beaten(10.0, 0.15) is None and "flops a forward and backward must do" in flops.beaten(1.0, 0.15)
    assert Ceiling(3e9, None, "GB/s", "x", "y").beaten(1e-6, 0.0) is None  # no ceiling known: nothing checked
    assert "impossible measurement" in copy.beaten(0.0, 0.15)  # events around calls that launched nothing


def test_an_honest_time_passes_the_audit_unchanged(monkeypatch):
    calls = _meters(monkeypatch, work_ms=0.95, synced=1.05)
    got = audit_timing(lambda: None, 1.0, 0.05, [Ceiling(2e9, 3000.0, "GB/s", "bytes", "copy bandwidth")])
    assert got == Audited(1.0, None, "") and calls == ["profiled", "synced"]


def test_work_the_timer_did_not_see_fails_before_anything_else(monkeypatch):
    calls = _meters(monkeypatch, work_ms=4.0, synced=4.0)
    got = audit_timing(lambda: None, 1.0, 0.0)
    assert "The profiler saw 4.0000 ms of GPU work a call" in got.failure and calls == ["profiled"]


def test_a_synchronized_time_far_above_the_timed_one_is_graded_and_then_checked(monkeypatch):
    _meters(monkeypatch, work_ms=0.1, synced=5.0)
    honest = audit_timing(lambda: None, 1.0, 0.0, [Ceiling(2e9, 3000.0, "GB/s", "bytes", "copy bandwidth")])
    assert honest.failure is None and honest.ms == 5.0 and "Graded on the synchronized time" in honest.note
    _meters(monkeypatch, work_ms=0.001, synced=0.002)
    fast = audit_timing(lambda: None, 0.001, 0.5, [Ceiling(2e9, 3000.0, "GB/s", "bytes a step must move", "c")])
    assert "bytes a step must move" in fast.failure  # the noise allowed is capped at MAX_SPREAD


def test_timed_outputs_are_verified_first(monkeypatch):
    calls = _meters(monkeypatch, work_ms=1.0, synced=1.0)

    class Sampled:
        def verify(self, problem):
            return problem(2, "output")

    got = audit_timing(lambda: None, 1.0, 0.0, (), Sampled(), lambda i, out: f"set {i} returned a wrong {out}")
    assert got.failure == "set 2 returned a wrong output: the timing means nothing" and calls == []


@pytest.mark.parametrize("module", ["step.py", "training.py"])
def test_step_and_training_performance_go_through_the_audit(module):
    """Each kind's timed criterion calls audit_timing after measuring, with a ceiling (not its own timing code)."""
    tree = ast.parse((CRITERIA / module).read_text())
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert {"measure", "audit_timing", "Ceiling"} <= called
