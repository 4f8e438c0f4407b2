"""Is a reference's performance figure moved by the host's CPUs? One exercise's performance criterion graded
again and again in one process on one GPU: with the host quiet, then with every core busy (as when other
gradings compile beside it), plainly timed and (where the criterion can) inside CUDA graphs, at the benchmark
shape and at a larger one. A figure that the busy cores move is bound by the host's launches, not the GPU.

    python -m bench.noise [--reps 3] [--out DIR] [--deadline-s 480]

Saves noise-<gpu>.json (device, versions, date, every figure) in DIR; prints one line per setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

from autograder import config
from autograder import specs as registry
from autograder.criteria import compiled, training
from autograder.measure import device
from autograder.specs.exercise import Shape, TrainingCase
from bench import headroom
from bench.common import record, slug


class BusyCores:
    """Every core of the host kept busy by a spinning process, while inside the `with`. The spinners are left
    to the system (started by a shell that exits at once), not children of this process: the grader refuses to
    time while a process its caller started still runs."""

    def __enter__(self):
        import subprocess
        import tempfile

        self.pids = Path(tempfile.mkstemp(suffix=".pids")[1])
        n = os.cpu_count() or 1
        spin = f"{sys.executable} -c 'while True: pass'"
        subprocess.run(["sh", "-c", f"for i in $(seq {n}); do {spin} >/dev/null 2>&1 & echo $! >> {self.pids}; done"],
                       check=True)
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        import signal

        for pid in self.pids.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        self.pids.unlink()


def settings():
    """(label, grade()) of every setting: each returns the criterion's figures."""
    cfg = config.load()
    fns = {ex_id: fn for ex_id, role, _, fn in headroom.versions() if role == "solution"}
    fq = registry.get("06.fake_quant")
    big = dataclasses.replace(fq.timed, perf_shape=Shape((16384, 8192)))
    dec = registry.get("07.decoder")
    wide = dataclasses.replace(dec, perf_case=TrainingCase(dec.perf_case.config, 4 * dec.perf_case.batch,
                                                           dec.perf_case.seq_len))
    return [
        ("06.fake_quant", lambda: compiled.compiled_performance(fq, fns["06.fake_quant"], cfg)),
        ("06.fake_quant 16384x8192", lambda: compiled.compiled_performance(
            dataclasses.replace(fq, timed=big), fns["06.fake_quant"], cfg)),
        ("07.decoder", lambda: training.training_performance(dec, fns["07.decoder"], cfg)),
        ("07.decoder 4x batch", lambda: training.training_performance(wide, fns["07.decoder"], cfg)),
    ]


def figures_of(result) -> dict:
    keep = ("fraction_of_peak", "fraction_of_compiled", "speedup_over_eager")
    return {k: round(v, 4) for k, v in result.figures.items() if k.endswith(keep) and isinstance(v, (int, float))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--deadline-s", type=float, default=480)
    parser.add_argument("--only", nargs="*", help="settings whose label starts with one of these")
    args = parser.parse_args(argv)
    stop_at = time.monotonic() + args.deadline_s
    result = {**record(device.profile()), "reps": args.reps, "cores": os.cpu_count(), "rows": []}
    path = args.out / f"noise-{slug(result['device']['name'])}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    for label, grade in [s for s in settings() if not args.only or any(s[0].startswith(o) for o in args.only)]:
        if time.monotonic() > stop_at:
            break
        started = time.perf_counter()
        first = grade()  # compiles and autotunes: not counted
        row = {"setting": label, "first": figures_of(first), "status": first.status, "quiet": [], "busy": []}
        for phase in ("quiet", "busy"):
            with BusyCores() if phase == "busy" else open(os.devnull):
                for _ in range(args.reps):
                    r = grade()
                    row[phase].append({**figures_of(r), "status": r.status, "message": r.message.splitlines()[0][:200]})
        row["seconds"] = round(time.perf_counter() - started, 1)
        result["rows"].append(row)
        path.write_text(json.dumps(result, indent=1))
        for phase in ("quiet", "busy"):
            for key in row["first"]:
                vals = [r[key] for r in row[phase] if key in r]
                if vals:
                    print(f"{label:32s} {phase:5s} {key:28s} " + " ".join(f"{v:.3f}" for v in vals)
                          + f"  spread {max(vals) / min(vals):.2f}  median {statistics.median(vals):.3f}")
        print(f"{label}: {row['seconds']} s", flush=True)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
