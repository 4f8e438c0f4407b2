"""What every benchmark script shares: the file name of a device, the record of a run (device, versions, date),
saving it, and the command line of one part (python -m bench.gemm, .streaming, .training, ...).

A run is one JSON file under bench/results/<part>/<part>-<device>[-<tag>].json (the whole suite's at
bench/results/<device>.json, earlier suite runs in results/runs/): a dict with "date", "torch",
"triton", "device" (at least its "name") and "rows". docs/benchmarks.md (python -m bench.report) and
the figures (python -m bench.plots) are made from these files alone.

Nothing here imports torch or a GPU library at module level: the report and the tests read the committed results on
machines without a GPU, so what a measurement needs is imported inside the function that measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import re
import sys
from pathlib import Path

from autograder import runtime
from autograder.measure import device

RESULTS = Path(__file__).resolve().parent / "results"
STANDARD = ("eager", "torch.compile", "triton")  # the versions every row of the suite has; others go by name


def slug(name: str) -> str:
    """A device's name as a file name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def record(prof) -> dict:
    """The head of a run's result: date, versions and the device profile it was measured on."""
    import torch  # imported here: this module must import on a machine without a GPU (see the docstring)
    import triton

    return {"date": dt.date.today().isoformat(), "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__, "device": dataclasses.asdict(prof)}


def versions(result: dict) -> tuple[str, str]:
    """(torch, triton) of a run; the suite's runs keep them in the device profile only."""
    d = result.get("device", {})
    return (result.get("torch") or d.get("torch_version") or "?",
            result.get("triton") or d.get("triton_version") or "?")


def save(result: dict, path: Path) -> Path:
    """Write one run as JSON (the folder made if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def needs_gpu(name: str) -> bool:
    """True where a GPU is present; otherwise says so on stderr (speed means nothing in Triton's interpreter)."""

    if runtime.has_gpu():
        return True
    print(f"python -m bench.{name} needs a CUDA GPU: speed means nothing in Triton's interpreter.",
          file=sys.stderr)
    return False


def part_main(argv, doc: str, name: str, rows, sweep, report=None) -> int:
    """One part's command line: its rows printed (report(result) -> text) or, with --sweep, its tile settings
    timed; --json keeps the run (rows(profile, progress) or sweep(progress) under "rows", with date and versions)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="time tile settings instead of the rows")
    parser.add_argument("--json", type=Path, help="also write the run to this file")
    args = parser.parse_args(argv)
    if not needs_gpu(name):
        return 2

    def progress(msg):
        print(f"[{name}] {msg}", flush=True)

    prof = device.measure(progress=False)
    progress(f"copy {prof.copy_gbps:.0f} GB/s, bf16 matmul {prof.matmul_tflops['bf16']:.0f} TFLOP/s")
    if args.sweep:
        result = sweep(progress)
    else:
        result = rows(prof, progress)
        print(report(result) if report else json.dumps(result, indent=1))
    if args.json:
        print(f"saved {save({**record(prof), 'part': name, 'sweep': args.sweep, 'rows': result}, args.json)}")
    return 0
