"""The GPU's lock between gradings on one machine (measure/gpu_share.py): a timing holds it alone, compiling and
untimed criteria hold it shared, a waiting timing stops new untimed work, untimed work never fails for the lock
(nor waits for a hold of the submission's: test_gpu_share.py), and the device profile is measured alone. Another
grading is played here by a thread of this process holding the lock through the same functions (the lock is
taken per open file, so two holders in one process still exclude each other)."""

import contextlib
import json
import stat
import threading
import time

import pytest

from autograder.measure import device, gpu_share


class _Holder:
    """Another grading: holds `lock` (a context manager of gpu_share) in a thread until released."""

    def __init__(self, lock):
        self.got, self.release, self.held = threading.Event(), threading.Event(), None
        self.thread = threading.Thread(target=self._run, args=(lock,), daemon=True)
        self.thread.start()

    def _run(self, lock):
        with lock as held:
            self.held = held
            self.got.set()
            self.release.wait(30)
        self.got.set()

    def end(self):
        self.release.set()
        self.thread.join(30)


def test_a_timing_waits_for_another_gradings_untimed_work(tmp_path):
    lock = tmp_path / "gpu.lock"
    other = _Holder(gpu_share.untimed_work(path=lock))
    assert other.got.wait(10) and other.held
    slept = []
    with gpu_share.timing_lock(wait_s=0.05, path=lock, sleep=slept.append) as timed:
        assert not timed and slept  # it waited; the caller says "not measured", never a time met by that work
    other.end()
    with gpu_share.timing_lock(wait_s=0, path=lock) as timed:
        assert timed


def test_untimed_work_waits_for_a_timing_then_runs_without_the_lock(tmp_path):
    lock = tmp_path / "gpu.lock"
    timing = _Holder(gpu_share.timing_lock(path=lock))
    assert timing.got.wait(10) and timing.held
    ran, slept = [], []
    with gpu_share.untimed_work(wait_s=0.05, path=lock, sleep=slept.append) as held:
        ran.append(held)
    assert ran == [False] and slept  # waited its turn, then ran all the same: only timings need the GPU alone
    timing.end()


def test_untimed_work_of_two_gradings_runs_at_once(tmp_path):
    lock = tmp_path / "gpu.lock"
    other = _Holder(gpu_share.untimed_work(path=lock))
    assert other.got.wait(10) and other.held
    with gpu_share.untimed_work(wait_s=0, path=lock) as held:
        assert held
    other.end()


def test_a_waiting_timing_lets_no_new_untimed_work_start(tmp_path):
    lock = tmp_path / "gpu.lock"
    first = _Holder(gpu_share.untimed_work(path=lock))
    assert first.got.wait(10)
    timing = _Holder(gpu_share.timing_lock(wait_s=30, path=lock))
    for _ in range(200):  # until the timing holds the turnstile and waits for the lock
        if str(gpu_share._turn_path(lock)) in gpu_share._HELD_HERE:
            break
        time.sleep(0.01)
    assert not timing.got.is_set()
    with gpu_share.untimed_work(wait_s=0.05, path=lock, sleep=lambda s: None) as held:
        assert not held  # queued behind the timing, not beside the work it waits for
    first.end()
    assert timing.got.wait(10) and timing.held  # the first work ended: the timing's turn
    timing.end()
    assert gpu_share._HELD_HERE == {}


class _Gpus:
    """A stand-in for pynvml listing two GPUs."""

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-0000000{handle}-aaaa-bbbb-cccc-dddddddddddd".encode()


def test_lock_files_are_made_for_every_gpu_under_the_names_a_grading_uses(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = gpu_share.make_lock_files(_Gpus())
    assert len(made) == 4 and all(p.parent == tmp_path for p in made)
    for p in made:
        assert stat.S_IMODE(p.stat().st_mode) == 0o666, p  # another user's grading locks them too
    # torch gives the UUID without "GPU-": the lock a grading takes is the file made here
    assert tmp_path / "fusion-course-timing-00000001-aaaa-bbbb-cccc-dddddddddddd.lock" in made
    assert gpu_share._turn_path(made[0]) in made
    assert gpu_share.make_lock_files(_NoNvml()) == []


class _NoNvml:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def _profile(**kw):
    return device.DeviceProfile(name="GPU", driver="1", torch_version="t", triton_version="t",
                                measured_on="2026-11-29", **kw)


def test_the_device_profile_is_measured_holding_the_gpu_alone(tmp_path, monkeypatch):
    lock, cache = tmp_path / "gpu.lock", tmp_path / "profile.json"
    monkeypatch.setattr(gpu_share, "_lock_path", lambda: lock)
    monkeypatch.setattr(gpu_share, "wait_until_free", lambda: gpu_share.Sharing(True))
    seen = []

    def measure(progress):
        seen.append(str(lock) in gpu_share._HELD_HERE)
        return _profile()

    monkeypatch.setattr(device, "measure", measure)
    assert device._measured_alone(cache, progress=False, reuse=True) == _profile()
    assert seen == [True]
    assert json.loads(cache.read_text())["name"] == "GPU"  # cached before the lock is let go


def test_a_grading_that_waited_for_the_profile_reads_the_one_just_measured(tmp_path, monkeypatch):
    lock, cache = tmp_path / "gpu.lock", tmp_path / "profile.json"
    monkeypatch.setattr(gpu_share, "_lock_path", lambda: lock)
    monkeypatch.setattr(device, "measure", lambda progress: pytest.fail("measured twice"))
    monkeypatch.setattr(gpu_share, "holding", lambda: False)  # the thread's hold stands for another process's
    other = _Holder(gpu_share.timing_lock(path=lock))  # the other grading, measuring
    assert other.got.wait(10)
    cache.write_text(json.dumps(device.dataclasses.asdict(_profile(copy_gbps=4000.0))))
    threading.Timer(0.2, other.end).start()
    assert device._measured_alone(cache, progress=False, reuse=True).copy_gbps == 4000.0


def test_check_holds_the_lock_shared_for_every_criterion_but_the_timed_one(monkeypatch):
    import importlib

    from autograder.criteria import kernel
    from kernels.fused_chain import fused_chain

    check_mod = importlib.import_module("autograder.check")  # the module: the package exports its function
    inside, ran = [], []

    @contextlib.contextmanager
    def untimed():
        inside.append(True)
        yield True
        inside.pop()

    def recorder(name):
        def grade(ex, fn, cfg, *a, **k):
            ran.append((name, bool(inside)))
            return check_mod.CriterionResult(name, "passed", "")
        return grade

    monkeypatch.setattr(check_mod, "_untimed", untimed)
    for name in ("correctness", "fusion", "performance"):
        monkeypatch.setitem(kernel.GRADERS, name, recorder(name))
    check_mod.check("01.fused_chain", fused_chain, criteria=["correctness", "fusion", "performance"])
    assert ran == [("correctness", True), ("fusion", True), ("performance", False)]
