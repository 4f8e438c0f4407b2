"""Looking inside a kernel from a notebook: torch.profiler's table of the GPU kernels a call runs, and Nsight
Compute's counters (tensor pipe busy, occupancy, registers, why warps stall) for one launch of the reader's own
kernel, where `ncu` is installed and the driver lets this user read the counters.

Nsight Compute profiles a process it starts, so the kernel goes to it as a small script: the source of the
notebook cell that defines the reader's function (read back from Python's line cache, where Jupyter and the
checker keep every cell) and a few calls of it. `ncu --page raw --csv` prints every metric its sections
collected; the ones a reader needs are picked by name (summary), whatever this version of ncu calls the rest.
Everything here says in one line why it did nothing rather than raising: a notebook cell prints that line.
"""

from __future__ import annotations

import csv
import inspect
import io
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import runtime

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis", "WarpStateStats")
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")


def kernel_table(fn, calls: int = 3) -> list[tuple[str, int, float]]:
    """(kernel name, launches, total ms) of every GPU kernel `calls` calls of fn ran, longest first."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()  # compiled and warm before the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, list] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start:
            entry = totals.setdefault(e.name, [0, 0.0])
            entry[0] += 1
            entry[1] += (e.time_range.end - e.time_range.start) / 1e3
    return sorted(((name, n, ms) for name, (n, ms) in totals.items()), key=lambda r: -r[2])


def ncu_why_not() -> str | None:
    """Why Nsight Compute cannot profile here, in words; None when it can try."""
    if not runtime.has_gpu():
        return "no GPU here"
    if shutil.which("ncu") is None:
        return "Nsight Compute's command line (ncu) is not on PATH; it comes with the CUDA toolkit"
    try:
        admin_only = re.search(r"RmProfilingAdminOnly:\s*1\b", DRIVER_PARAMS.read_text()) is not None
    except OSError:
        admin_only = False  # no such file (a container, another OS): ncu itself will say
    if admin_only and os.geteuid() != 0:
        return ("the NVIDIA driver here lets only administrators read the performance counters "
                "(RmProfilingAdminOnly=1); an administrator can allow them (see NVIDIA's page on ERR_NVGPUCTRPERM)")
    return None


def cell_source(fn) -> str | None:
    """The whole source of the notebook cell (or file) that defined fn, or None when it cannot be read back."""
    target = getattr(fn, "fn", fn)  # a @triton.jit function wraps the Python one
    try:
        filename = inspect.getsourcefile(target) or inspect.getfile(target)
    except (TypeError, OSError):
        return None
    lines = linecache.getlines(filename)
    return "".join(lines) or None


def attention_script(source: str, function: str, shape: tuple, calls: int = 3) -> str:
    """A program that defines what the cell defined, then calls function(q, k, v) on bf16 inputs of shape."""
    return "\n".join([
        "import math", "import torch", "import triton", "import triton.language as tl", "", source, "",
        f"q, k, v = (torch.randn(*{tuple(shape)!r}, device='cuda', dtype=torch.bfloat16) for _ in range(3))",
        f"for _ in range({calls}):", f"    {function}(q, k, v)", "torch.cuda.synchronize()", ""])


def parse_raw_csv(text: str) -> dict[str, str]:
    """The first profiled kernel's metrics {name: value} from `ncu --csv --page raw`: a header row of metric
    names, a row of units, then a row per kernel; ncu's own "==PROF==" lines are skipped."""
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if ln.startswith('"')))))
    if len(rows) < 3:
        return {}
    return dict(zip(rows[0], rows[2]))


def run_ncu(script: str, kernel: str, timeout_s: float = 600) -> tuple[dict[str, str], str]:
    """({metric: value} of the second launch of a kernel whose name contains `kernel`, one line on what happened);
    the metrics are empty when nothing was measured, and the line says why."""
    folder = Path(tempfile.mkdtemp(prefix="ncu-"))
    (folder / "run.py").write_text(script)
    cmd = ["ncu", "--csv", "--page", "raw", "--target-processes", "all", "--kernel-name", f"regex:{re.escape(kernel)}",
           "--launch-skip", "1", "--launch-count", "1", *[a for s in SECTIONS for a in ("--section", s)],
           sys.executable, str(folder / "run.py")]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=folder)
    except subprocess.TimeoutExpired:
        return {}, f"Nsight Compute did not finish in {timeout_s:.0f} s; nothing measured"
    (folder / "ncu.csv").write_text(done.stdout)
    said = done.stdout + done.stderr
    if "ERR_NVGPUCTRPERM" in said:
        return {}, ("Nsight Compute: skipped, this user may not read the GPU's performance counters "
                    "(ERR_NVGPUCTRPERM); an administrator can allow them (see NVIDIA's page on that error)")
    metrics = parse_raw_csv(done.stdout)
    if not metrics:
        errors = [ln.strip() for ln in said.splitlines() if "ERROR" in ln or "Error" in ln]
        why = errors[-1] if errors else f"no kernel whose name contains {kernel!r} was profiled"
        return {}, f"Nsight Compute measured nothing ({why[:300]}); its output is in {folder}"
    return metrics, f"Nsight Compute, one launch of {metrics.get('Kernel Name', kernel)} (every metric: {folder / 'ncu.csv'}):"


def _number(value: str) -> float | None:
    try:
        return float(value.replace(",", ""))
    except (AttributeError, ValueError):
        return None


WANTED = (  # (what a reader calls it, the raw metric's name)
    ("time of the launch (ns)", "gpu__time_duration.sum"),
    ("registers a thread", "launch__registers_per_thread"),
    ("threads a block", "launch__block_size"),
    ("warps active, % of the most an SM can hold (achieved occupancy)", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("SM throughput, % of peak", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("memory throughput, % of peak", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
)
TENSOR_PIPE = re.compile(r"sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_active")
# Cycles a warp spent stalled for each reason, per instruction issued (the Warp State section's breakdown).
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")


def summary(metrics: dict[str, str], stalls: int = 5) -> list[str]:
    """The lines a reader needs from a raw metric table: time, registers, occupancy, throughputs, how busy each
    tensor pipe was, and the reasons warps waited most (cycles a warp spent stalled, per instruction issued)."""
    lines = [f"  {what:<66} {metrics[name]}" for what, name in WANTED if name in metrics]
    pipes = [(name, _number(v)) for name, v in metrics.items() if TENSOR_PIPE.fullmatch(name)]
    lines += [f"  tensor pipe busy, % of its peak ({name.split('__')[1].split('_cycles')[0]})".ljust(69) + f"{v:.1f}"
              for name, v in pipes if v is not None]
    if not pipes:
        lines.append("  tensor pipe busy: this version of ncu reported no sm__pipe_tensor*_cycles_active metric")
    found = {m.group(1): _number(v) for name, v in metrics.items() if (m := STALL.fullmatch(name))}
    top = sorted(((why, v) for why, v in found.items() if v and not why.endswith("not_issued")), key=lambda r: -r[1])
    top = top[:stalls]
    if top:
        lines.append("  warps stalled, cycles per issued instruction, by reason: "
                     + ", ".join(f"{why} {v:.2f}" for why, v in top))
    else:
        lines.append("  warp stalls: this version of ncu reported no stall breakdown in its raw page")
    return lines
