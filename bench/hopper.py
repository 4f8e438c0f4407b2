"""How far upstream Triton gets on Hopper: FlashAttention forward and backward and the fused linear cross-entropy,
every variant the course has or could have, against the best library kernel, in one run of about five minutes.

    python -m bench.hopper [--out DIR] [--parts forward,backward,cross_entropy] [--budget 285]
    python -m bench.hopper --plan      # what a run would compile and time (no GPU needed)

On a Hopper GPU (compute capability 9.x; anything else is refused) it measures
- forward, at every shape of the peer benchmark (bench/peers.py: bf16 and fp16, D 64 and 128, causal and
  not): the course's kernels as they are (its TMA path, as the peer benchmark times it, and the portable kernel);
  the portable and the TMA kernel over a wider space of tile settings (kernels/attention_tuning.py); and the
  warp-specialized kernel (kernels/flash_attention_ws.py) over its own. Each family is swept at (4, 16, 4096, D)
  bf16: the whole space not causal, its four fastest causal, the two fastest of each in fp16; the two fastest of
  each family are then timed at every shape, in turns with every SDPA backend (cuDNN, FlashAttention-2, memory-
  efficient, and the default choice). Ratio = the best SDPA time / the variant's time.
- backward and cross_entropy: bench/hopper_training.py.
Every variant is checked against the reference at every shape before it is timed (the largest error relative to
the reference's largest value: 0.03 in bf16, 0.01 in fp16); a wrong one is reported with its error, not timed.
The warp-specialized family is swept first in a child process, so that a kernel that hangs or faults the GPU
costs that family, not the run.

Compile time is counted apart from timing (bench.sweep compiles a family's settings at once on the
machine's cores). Results: bench/results/hopper/hopper-<gpu>.json, a table printed. The JSON keeps,
for every setting tried, what the compiler made of it (shared memory, warps, registers, spills, whether the key
loop was warp-specialized) and why it was left out, not run, wrong or slower: the evidence for where the
ceiling is when a goal is not met. What a run covers (its shapes, families and goals) is bench/hopper_plan.py;
how its record is read back (the goals, the table) is bench/hopper_report.py.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import subprocess
import sys
import time
import traceback
import zlib
from pathlib import Path

from tqdm.auto import tqdm

from autograder import runtime
from autograder.measure import device
from autograder.measure.timing import interleaved_times
from autograder.specs.streaming_reduction_fusion import attention_flops, sdpa_with_backend
from kernels import attention_tuning as tuning
from bench import hopper_training as training
from bench import sweep
from bench.common import RESULTS, needs_gpu, record, save, slug
from bench.hopper_plan import DTYPES, FAMILIES, PARTS, SDPA, SWEEP, SWEEP_DTYPE, TOLERANCE
from bench.hopper_plan import family_space, plan
from bench.hopper_report import family_best, goals, markdown
from bench.peers import ATTENTION_SHAPES
from kernels.flash_attention import (
    ATTENTION_TMA_SETTINGS,
    attention_launch_settings,
    flash_attention,
    flash_attention_tma,
)
from kernels.flash_attention_ws import flash_attention_ws

RESULTS = RESULTS / "hopper"
DEVICE = "cuda"
ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------- inputs


@functools.cache
def _qkv(shape: tuple, dtype_name: str):
    import torch

    g = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(repr((shape, dtype_name)).encode()))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    return tuple(torch.randn(*shape, device=DEVICE, dtype=dtype, generator=g) for _ in range(3))


@functools.cache
def _reference(shape: tuple, dtype_name: str, causal: bool):
    """(o from SDPA's default backend, lse from the course's portable kernel, which the tests check in float64)."""
    import torch.nn.functional as F

    q, k, v = _qkv(shape, dtype_name)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal), flash_attention(q, k, v, causal)[1]


def _attention_error(out, ref) -> float:
    """The largest error of o and of lse, each relative to its reference's largest magnitude (at least 1)."""
    (o, lse), (ro, rl) = out, ref
    e_o = (o.float() - ro.float()).abs().max() / ro.float().abs().max().clamp(min=1)
    e_l = (lse - rl).abs().max() / rl.abs().max().clamp(min=1)
    return float(max(e_o, e_l))


def _ws_with(q, k, v, causal, cfg, warmup=False):
    return flash_attention_ws(q, k, v, causal, (cfg,), warmup)


def _launcher(family: str):
    return {"portable": tuning.flash_attention_with, "tma": tuning.flash_attention_tma_with, "ws": _ws_with}[family]


def candidate(family: str, cfg: dict, shape: tuple, dtype_name: str, causal: bool) -> sweep.Candidate:
    launch = _launcher(family)
    q, k, v = _qkv(shape, dtype_name)
    return sweep.Candidate(family, cfg, compile=lambda: launch(q, k, v, causal, cfg, warmup=True),
                           run=lambda: launch(q, k, v, causal, cfg))


# ----------------------------------------------------------------------------------------------- sweeps


def _check_and_rank(groups: dict, keys: list, clock: sweep.Clock, progress) -> None:
    """Check every compiled candidate of these groups at (*SWEEP, D), and time those that are right."""
    begin = time.perf_counter()
    for family, d, causal, dtype_name in keys:
        cands = groups[(family, d, causal, dtype_name)]
        ref = _reference((*SWEEP, d), dtype_name, causal)
        what = f"{family} D={d} causal={causal} {dtype_name}"
        for c in tqdm(cands, desc=what, leave=False):
            sweep.check(c, lambda out, ref=ref: _attention_error(out, ref), TOLERANCE[dtype_name])
            sweep.quick_ms(c)
        progress(f"{what}: {sum(c.ok for c in cands)} of {len(cands)} settings checked and timed")
    clock.add("forward", "sweep checks and timing", time.perf_counter() - begin)


def sweep_forward(families: tuple, clock: sweep.Clock, progress, share: float = 0.5) -> dict:
    """Each family swept at (4, 16, 4096, D): the whole space not causal (bf16), its four fastest causal, the two
    fastest of each group in fp16. {"finalists": [{family, D, causal, dtype, setting}], "sweeps": records}."""
    groups = {}  # (family, D, causal, dtype) -> [Candidate]
    left = {}

    def compile_batch(name, share_now):
        # Rank by rank across the groups: a batch cut short by its deadline has each group's nearest settings.
        ranks = itertools.zip_longest(*[[c for c in cs if c.status == "planned"] for cs in groups.values()])
        todo = [c for rank in ranks for c in rank if c is not None]
        seconds = sweep.compile_all(todo, clock.deadline(share_now))
        clock.add("forward", "compile", seconds)
        progress(f"{name}: {sum(c.status == 'compiled' for c in todo)} of {len(todo)} kernels compiled in "
                 f"{seconds:.0f} s")

    for family in families:
        for d in (128, 64):
            kept, left[f"{family} D={d}"] = family_space(family, d)
            groups[(family, d, False, SWEEP_DTYPE)] = [candidate(family, c, (*SWEEP, d), SWEEP_DTYPE, False)
                                                       for c in kept]
    compile_batch("forward sweep, not causal", share * 0.5)
    _check_and_rank(groups, list(groups), clock, progress)
    for (family, d, _, _), cands in list(groups.items()):
        top = [c.setting for c in sweep.best(cands, 4)]
        groups[(family, d, True, SWEEP_DTYPE)] = [candidate(family, c, (*SWEEP, d), SWEEP_DTYPE, True) for c in top]
    compile_batch("forward sweep, causal", share * 0.3)
    _check_and_rank(groups, [k for k in groups if k[2]], clock, progress)
    others = [dt for dt in DTYPES if dt != SWEEP_DTYPE]
    for (family, d, causal, _), cands in list(groups.items()):
        top = [c.setting for c in sweep.best(cands, 2)]
        for dt in others:
            groups[(family, d, causal, dt)] = [candidate(family, c, (*SWEEP, d), dt, causal) for c in top]
    compile_batch(f"forward sweep, {', '.join(others)}", share * 0.3)
    _check_and_rank(groups, [k for k in groups if k[3] in others], clock, progress)
    finalists = [{"family": f, "D": d, "causal": c, "dtype": dt, "setting": x.setting}
                 for (f, d, c, dt), cands in groups.items() for x in sweep.best(cands, 2)]
    records = {f"{f} D={d} causal={c} {dt}": [x.record() for x in cands] for (f, d, c, dt), cands in groups.items()}
    return {"finalists": finalists, "sweeps": records, "left_out": left}


def _probe_in_child(family: str, clock: sweep.Clock, progress) -> dict:
    """sweep_forward((family,)) in a child process, with a time limit: a kernel that hangs or faults the GPU
    ends the child, and the run goes on without that family."""
    budget = max(30.0, 0.3 * clock.left())
    cmd = [sys.executable, "-m", "bench.hopper", "--probe", family, "--budget", f"{budget:.0f}"]
    progress(f"sweeping the {family} family in a child process ({budget:.0f} s at most)")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget + 60, check=False, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        return {"finalists": [], "sweeps": {}, "left_out": {}, "probe": f"hung: no answer in {exc.timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith('{"finalists"')]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"finalists": [], "sweeps": {}, "left_out": {},
                "probe": f"child exited with status {done.returncode}: {' | '.join(tail)[-400:]}"}
    return {**json.loads(lines[-1]), "probe": "ok"}


# ----------------------------------------------------------------------------------------------- rows


def _sdpa_call(backend, q, k, v, causal):
    import torch.nn.functional as F

    if backend is None:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    forced = sdpa_with_backend(backend)
    return lambda: forced(q, k, v, causal)


def forward_rows(finalists: list[dict], clock: sweep.Clock, progress, rounds: int = 3) -> list[dict]:
    """Every peer shape: the course's kernels, each family's finalists and every SDPA backend, in turns."""
    rows = []
    todo = [(s, dt, c) for s in ATTENTION_SHAPES for dt in DTYPES for c in (False, True)]
    for shape, dt, causal in tqdm(todo, desc="forward rows"):
        q, k, v = _qkv(shape, dt)
        ref = _reference(shape, dt, causal)
        course = {"course": lambda q=q, k=k, v=v, c=causal: flash_attention_tma(q, k, v, c),
                  "course portable": lambda q=q, k=k, v=v, c=causal: flash_attention(q, k, v, c)}
        cands = [sweep.Candidate("course", {}, compile=lambda: None, run=fn, status="compiled")
                 for fn in course.values()]
        names = list(course)
        for f in finalists:
            if (f["D"], f["causal"], f["dtype"]) == (shape[3], causal, dt):
                cands.append(candidate(f["family"], f["setting"], shape, dt, causal))
                cands[-1].status = "compiled"  # compiled by the sweep; the first run here loads it
                names.append(f"{f['family']} {tuning.setting_name(f['setting'])}")
        for c in cands:
            sweep.check(c, lambda out, ref=ref: _attention_error(out, ref), TOLERANCE[dt])
        calls = {n: c.run for n, c in zip(names, cands) if c.ok}
        missing = {n: f"{c.status}: {c.why}" for n, c in zip(names, cands) if not c.ok}
        for name, backend in SDPA.items():
            try:
                call = _sdpa_call(backend, q, k, v, causal)
                call()
                calls[name] = call
            except Exception as exc:  # noqa: BLE001  a backend this GPU or build lacks is a named gap
                missing[name] = sweep.first_line(exc)
        budget_late = clock.left() < 60
        begin = time.perf_counter()
        times = interleaved_times(calls, rounds=2 if budget_late else rounds, rep=15 if budget_late else 25)
        clock.add("forward", "rows", time.perf_counter() - begin)
        ms = {n: round(sorted(t)[len(t) // 2], 4) for n, t in times.items()}
        flops = attention_flops(q, k, v, causal)
        rows.append(_forward_row(shape, dt, causal, ms, flops, missing,
                                 {n: c.setting for n, c in zip(names, cands)},
                                 {n: c.error for n, c in zip(names, cands)}))
    return rows


def _forward_row(shape, dt, causal, ms, flops, missing, settings, errors) -> dict:
    row = sweep.comparison_row("forward", f"{','.join(map(str, shape))} {dt} causal={causal}", ms, flops, missing,
                               {n: s for n, s in settings.items() if s}, errors)
    best = family_best(row)
    if best:
        row["family_best"] = best
    return row


# ----------------------------------------------------------------------------------------------- run


def forward_part(clock: sweep.Clock, progress) -> tuple[list[dict], dict]:
    """(rows, the record of the sweeps): the warp-specialized family in a child process, the others here."""
    ws = _probe_in_child("ws", clock, progress)
    progress(f"ws family: {ws['probe']}, {len(ws['finalists'])} finalists")
    here = sweep_forward(("portable", "tma"), clock, progress, share=0.35)
    finalists = here["finalists"] + ws["finalists"]
    # Compiled here at once before the rows need them: the child's finalists (from Triton's disk cache, which the
    # child filled) and the course's own settings in every dtype and mask (the same kernels its launchers run).
    again = [candidate(f["family"], f["setting"], (*SWEEP, f["D"]), f["dtype"], f["causal"])
             for f in ws["finalists"]]
    again += [candidate(family, cfg, (*SWEEP, d), dt, causal)
              for d in (128, 64) for dt in DTYPES for causal in (False, True)
              for family, cfg in (("portable", attention_launch_settings(4096, d, None)),
                                  ("tma", ATTENTION_TMA_SETTINGS[0]))
              if family == "portable" or d >= 128]
    clock.add("forward", "compile", sweep.compile_all(again, clock.deadline(0.1)))
    rows = forward_rows(finalists, clock, progress)
    _qkv.cache_clear()  # the next parts need the memory
    _reference.cache_clear()
    return rows, {"finalists": finalists, "sweeps": {**here["sweeps"], **ws["sweeps"]},
                  "left_out": {**here["left_out"], **ws["left_out"]}, "ws_probe": ws["probe"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--budget", type=float, default=285.0, help="seconds the whole run should take")
    parser.add_argument("--plan", action="store_true", help="print what a run compiles and times, then stop")
    parser.add_argument("--probe", choices=FAMILIES, help=argparse.SUPPRESS)  # one family's sweep, as a child
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown part(s) {sorted(unknown)}: choose from {', '.join(PARTS)}")
    if args.plan:
        print(json.dumps(plan(), indent=1))
        return 0
    if not needs_gpu("hopper"):
        return 2
    import torch

    capability = torch.cuda.get_device_capability()
    if capability[0] != 9:
        print(f"python -m bench.hopper measures Hopper GPUs (compute capability 9.x); this one, "
              f"{torch.cuda.get_device_name()}, is {capability[0]}.{capability[1]}.", file=sys.stderr)
        return 2
    clock = sweep.Clock(args.budget)

    def progress(msg):
        print(f"[hopper {clock.elapsed():5.0f} s] {msg}", file=sys.stderr if args.probe else sys.stdout, flush=True)

    if args.probe:
        print(json.dumps(sweep_forward((args.probe,), clock, progress, share=0.8)), flush=True)
        return 0
    prof = device.profile(progress=False)
    result = {**record(prof), "part": "hopper", "capability": f"{capability[0]}.{capability[1]}",
              "budget_s": args.budget, "parts": parts, "rows": []}
    stem = args.out / f"hopper-{slug(prof.name)}"
    failed = []
    for part in parts:
        progress(f"{part} ({clock.left():.0f} s of the budget left)")
        run = {"forward": forward_part, "backward": training.backward_part,
               "cross_entropy": training.cross_entropy_part}[part]
        try:
            rows, result[part] = run(clock, progress)
        except Exception as exc:  # noqa: BLE001  one part's failure is recorded; the others still run
            traceback.print_exc()
            rows, result[part] = [], {"error": sweep.first_line(exc), "traceback": traceback.format_exc()[-4000:]}
            failed.append(part)
            if runtime.cuda_context_broken(exc):
                progress("the GPU is unusable after that error: the parts after it are not run")
                break
        result["rows"] += rows
        result["seconds"] = {**clock.spent, "total": round(clock.elapsed(), 1)}
        result["goals"] = goals(result["rows"])
        save(result, stem.with_suffix(".json"))  # after every part: a run cut short keeps what it measured
    print(markdown(result))
    print(f"saved {stem}.json ({clock.elapsed():.0f} s, budget {args.budget:.0f} s)"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
