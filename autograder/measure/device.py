"""The device profile: peaks measured on this GPU, which every roofline and grade is set against.

Datasheet numbers are not what a kernel can reach, so the course measures its ceilings once per
(GPU, driver, torch) and caches them with the date:
- copy bandwidth: a device-to-device copy of a buffer far larger than L2, counting bytes read + written;
- matmul rate: dense 8192^3 products in bf16 and fp16 on random data.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import subprocess
from pathlib import Path

from autograder import runtime
from autograder.measure import gpu_share
from autograder.measure.timing import grader_ms as bench_ms  # the grader's timer, not the demonstrations'

# Peaks measured on an NVIDIA H200 (torch 2.11, triton 3.6, bench/results/nvidia-h200.json). Used only to
# illustrate the cost model on a machine with no GPU; every plot that uses them says so.
REFERENCE_H200 = {
    "name": "NVIDIA H200 (reference figures)",
    "copy_gbps": 4243.0,
    "matmul_tflops": {"bf16": 686.0},
    "launch_us": 4.0,
}


@dataclasses.dataclass
class DeviceProfile:
    name: str
    driver: str
    torch_version: str
    triton_version: str
    measured_on: str  # ISO date
    copy_gbps: float | None = None  # bytes read + written per second / 1e9
    matmul_tflops: dict = dataclasses.field(default_factory=dict)  # dtype name -> TFLOP/s
    l2_bytes: int | None = None
    sm_count: int | None = None
    launch_us: float | None = None  # GPU time of a launch that moves ~nothing

    @property
    def has_gpu(self) -> bool:
        return self.copy_gbps is not None

    def ridge_point(self, dtype: str = "bf16") -> float | None:
        """Arithmetic intensity (FLOP/byte) where the roofline's two ceilings meet."""
        if not self.has_gpu or dtype not in self.matmul_tflops:
            return None
        return self.matmul_tflops[dtype] * 1e12 / (self.copy_gbps * 1e9)

    def describe(self) -> str:
        if not self.has_gpu:
            return (
                f"{self.name}: Triton interpreter on the CPU; no peaks to measure "
                f"(torch {self.torch_version}, triton {self.triton_version})"
            )
        mm = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in self.matmul_tflops.items())
        lines = [
            f"device        {self.name} ({self.sm_count} SMs, L2 {self.l2_bytes / 2**20:.0f} MiB)",
            f"driver        {self.driver}",
            f"versions      torch {self.torch_version}, triton {self.triton_version}",
            f"measured on   {self.measured_on}",
            f"copy          {self.copy_gbps:.0f} GB/s (read + write)",
            f"matmul        {mm}",
            f"launch        {self.launch_us:.1f} us (GPU time of a near-empty kernel)",
        ]
        if self.ridge_point():
            lines.append(f"ridge point   {self.ridge_point():.0f} FLOP/byte (bf16)")
        return "\n".join(lines)


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def cache_dir() -> Path:
    root = os.environ.get("FUSION_COURSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fusion-course"
    )
    return Path(root)


def _versions() -> tuple[str, str]:
    import torch
    import triton

    return torch.__version__, triton.__version__


def _cache_path(name: str, driver: str, torch_version: str) -> Path:
    key = hashlib.sha1(f"{name}|{driver}|{torch_version}".encode()).hexdigest()[:12]
    return cache_dir() / f"device-{key}.json"


def _l2_bytes() -> int:
    import torch

    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)


def copy_probe():
    """(call, bytes it moves): the device-to-device copy the profile's bandwidth is measured with, 1 GiB or 16x
    L2 if that is more, so that no part of it is served from cache. The grader times it alongside a student's
    kernel, so that a fraction of the copy bandwidth compares two measurements taken under the same clocks."""
    import torch

    n_bytes = max(2**30, 16 * _l2_bytes())
    src = torch.randn(n_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * n_bytes


def matmul_probe(dtype_name: str = "bf16", n: int = 8192):
    """(call, flops it does): the dense n^3 product on random data the profile's matmul rate is measured with."""
    import torch

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    return (lambda: a @ b), 2 * n**3


def measure(progress: bool = True) -> DeviceProfile:
    """Measure the current GPU's ceilings (about 10 s)."""
    import torch

    torch_version, triton_version = _versions()
    props = torch.cuda.get_device_properties(0)
    say = print if progress else (lambda *a, **k: None)

    say("measuring copy bandwidth ...")
    copy, n_bytes = copy_probe()
    ms = bench_ms(copy, warmup=50, rep=300)
    copy_gbps = n_bytes / (ms * 1e-3) / 1e9
    del copy

    tflops = {}
    for name in ("bf16", "fp16"):
        say(f"measuring {name} matmul rate ...")
        product, flops = matmul_probe(name)
        ms = bench_ms(product, warmup=100, rep=300)
        tflops[name] = flops / (ms * 1e-3) / 1e12
        del product

    say("measuring launch overhead ...")
    tiny = torch.randn(16, device="cuda")
    launch_ms = bench_ms(lambda: tiny.add_(0.0), warmup=50, rep=200)
    torch.cuda.empty_cache()
    return DeviceProfile(
        name=props.name,
        driver=_driver_version(),
        torch_version=torch_version,
        triton_version=triton_version,
        measured_on=_dt.date.today().isoformat(),
        copy_gbps=round(copy_gbps, 1),
        matmul_tflops={k: round(v, 1) for k, v in tflops.items()},
        l2_bytes=_l2_bytes(),
        sm_count=props.multi_processor_count,
        launch_us=round(launch_ms * 1e3, 2),
    )


_profile: DeviceProfile | None = None


def _measured_alone(path: Path, progress: bool, reuse: bool) -> DeviceProfile:
    """measure() and cache it at path, holding the GPU's timing lock (measure/gpu_share.py): a profile measured
    beside another grading's work is low, and every ceiling and floor read from it for as long as it is cached.
    A grading that waited for the lock finds the profile another one just measured and cached."""
    if gpu_share.holding():  # the grader's own hold: alone already when timing, and no better to be had otherwise
        return _cached(path, measure(progress=progress))
    try:
        with gpu_share.timing_lock() as held:
            if held and reuse and path.exists():
                try:
                    return DeviceProfile(**json.loads(path.read_text()))
                except (ValueError, TypeError):
                    pass
            gpu_share.wait_until_free()  # and no other process computing there, as far as NVML can tell
            return _cached(path, measure(progress=progress))
    except gpu_share.LockedBySubmission:  # the performance criterion names it; the profile is measured all the same
        return _cached(path, measure(progress=progress))


def _cached(path: Path, prof: DeviceProfile) -> DeviceProfile:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(prof), indent=1))
    except OSError:
        pass  # a read-only home still gets a profile, just not a cached one
    return prof


def profile(refresh: bool = False, progress: bool = True) -> DeviceProfile:
    """This machine's profile: from the cache when (GPU, driver, torch) match, measured otherwise."""
    global _profile
    if _profile is not None and not refresh:
        return _profile
    torch_version, triton_version = _versions()
    if not runtime.has_gpu():
        _profile = DeviceProfile(
            name="CPU (no CUDA GPU)",
            driver="none",
            torch_version=torch_version,
            triton_version=triton_version,
            measured_on=_dt.date.today().isoformat(),
        )
        return _profile
    import torch

    name, driver = torch.cuda.get_device_name(0), _driver_version()
    path = _cache_path(name, driver, torch_version)
    if path.exists() and not refresh:
        try:
            _profile = DeviceProfile(**json.loads(path.read_text()))
            return _profile
        except (ValueError, TypeError):
            pass  # an unreadable cache is measured again
    _profile = _measured_alone(path, progress, reuse=not refresh)
    return _profile
