"""The device layer: interpreter fallback on the CPU, the profile and its cache."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from autograder import runtime
from autograder.measure import device


def test_interpreter_is_chosen_without_a_gpu():
    if runtime.has_gpu():
        pytest.skip("this machine has a GPU")
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert runtime.device() == "cpu" and runtime.interpreted()


def test_importing_kernels_first_sets_the_interpreter_and_says_so_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = "import kernels, autograder, os; print('TI=' + os.environ.get('TRITON_INTERPRET', ''))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if runtime.has_gpu():
        assert "TI=" in out.stdout
    else:
        assert "TI=1" in out.stdout
        assert out.stdout.count("speed is NOT measured") == 1
        assert out.stderr == ""  # notebooks graded by nbgrader: nothing on stderr


def test_in_the_interpreter_a_jit_helper_is_patched_once_per_launch(monkeypatch):
    """Every program of an interpreted grid calls tl.cdiv and tl.sigmoid (@triton.jit helpers): Triton patched
    the language again at each call; runtime patches each helper once per launch, with the same results."""
    if not runtime.interpreted():
        pytest.skip("about Triton's interpreter")
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    @triton.jit
    def silu_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        tiles = tl.cdiv(n, BLOCK)
        offs = (tl.program_id(0) // tiles) * n + (tl.program_id(0) % tiles) * BLOCK + tl.arange(0, BLOCK)
        mask = (tl.program_id(0) % tiles) * BLOCK + tl.arange(0, BLOCK) < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)

    scans = []
    original = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: scans.append(a[0]) or original(*a))
    counts = {}
    for rows in (1, 1, 9):  # the first launch imports and patches for good what later launches find done
        x = torch.randn(rows, 40)
        y = torch.empty_like(x)
        scans.clear()
        silu_rows[(rows * 3,)](x, y, 40, BLOCK=16)
        counts[rows] = len(scans)
        torch.testing.assert_close(y, torch.nn.functional.silu(x))
    assert counts[9] == counts[1] > 0  # 27 programs scan as often as 3: for the kernel, and once per helper



def test_cpu_profile_has_no_peaks():
    if runtime.has_gpu():
        pytest.skip("this machine has a GPU")
    prof = device.profile(refresh=True)
    assert not prof.has_gpu and prof.ridge_point() is None
    assert "interpreter" in prof.describe()


def test_cache_is_keyed_by_gpu_driver_and_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COURSE_CACHE", str(tmp_path))
    a = device._cache_path("NVIDIA H200", "580.1", "2.11.0")
    assert a.parent == tmp_path
    assert a != device._cache_path("NVIDIA H100", "580.1", "2.11.0")
    assert a != device._cache_path("NVIDIA H200", "580.2", "2.11.0")
    assert a != device._cache_path("NVIDIA H200", "580.1", "2.12.0")


def test_profile_round_trips_through_json():
    prof = device.DeviceProfile("G", "d", "t", "tr", "2026-11-21", 3000.0, {"bf16": 700.0}, 50 << 20, 132, 2.5)
    again = device.DeviceProfile(**json.loads(json.dumps(dataclasses.asdict(prof))))
    assert again == prof
    assert again.ridge_point() == pytest.approx(700e12 / 3000e9)
    assert "3000 GB/s" in again.describe()


def test_device_command_prints_the_profile():
    out = subprocess.run([sys.executable, "-m", "autograder", "device"], capture_output=True, text=True)
    assert out.returncode == 0
    assert ("interpreter" in out.stdout) != runtime.has_gpu()


@pytest.mark.gpu
def test_measured_profile_is_plausible_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_COURSE_CACHE", str(tmp_path))
    prof = device.profile(refresh=True, progress=False)
    assert 500 < prof.copy_gbps < 10_000
    assert 50 < prof.matmul_tflops["bf16"] < 3_000 and 50 < prof.matmul_tflops["fp16"] < 3_000
    assert 0 < prof.launch_us < 100
    cached = list(tmp_path.glob("device-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["copy_gbps"] == prof.copy_gbps
    device._profile = None
    assert device.profile() == prof  # read back from the cache, not measured again


def test_the_once_per_launch_patch_is_left_off_where_a_helper_undoes_its_own_patches():
    """A Triton whose helper call restores the language when it returns (a `with` around its patches) would run
    a second call of the helper unpatched: the speed-up is then not installed."""
    from autograder import runtime

    class Kept:
        class InterpretedFunction:
            def __call__(self, *args, **kwargs):
                _patch_lang(self.fn)  # noqa: F821  read, never run
                return self.fn(*args, **kwargs)

    class Undone:
        class InterpretedFunction:
            def __call__(self, *args, **kwargs):
                with _patch_lang(self.fn):  # noqa: F821  read, never run
                    return self.fn(*args, **kwargs)

    assert runtime._helper_patches_are_kept(Kept)
    assert not runtime._helper_patches_are_kept(Undone)
    assert not runtime._helper_patches_are_kept(object())
