"""The command line of one part of the benchmark (python -m kernels.bench.gemm, kernels.bench.streaming):
its rows printed, or with --sweep its tile settings timed; --json keeps what was measured."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def part_main(argv, doc: str, name: str, rows, sweep, report=None) -> int:
    """rows(profile, progress) -> result; sweep(progress) -> result; report(result) -> text printed after rows."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="time tile settings instead of the rows")
    parser.add_argument("--json", type=Path, help="also write what was measured to this file")
    args = parser.parse_args(argv)
    import kernels  # noqa: F401  (device set-up)
    from autograder import runtime
    from autograder.measure import device

    if not runtime.has_gpu():
        print(f"kernels.{name} needs a CUDA GPU.", file=sys.stderr)
        return 2

    def progress(msg):
        print(f"[{name}] {msg}", flush=True)

    if args.sweep:
        result = sweep(progress)
    else:
        prof = device.measure(progress=False)
        progress(f"copy {prof.copy_gbps:.0f} GB/s, bf16 matmul {prof.matmul_tflops['bf16']:.0f} TFLOP/s")
        result = rows(prof, progress)
        print(report(result) if report else json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0
