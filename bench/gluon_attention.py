"""The Gluon FlashAttention forward (kernels/flash_attention_gluon.py) against the best SDPA backend, on Hopper.

    python -m bench.gluon_attention [--out DIR] [--rounds 3]

At every peer shape of the Hopper benchmark (bench.peers.ATTENTION_SHAPES, bf16 and fp16, causal and not) each
Gluon setting (the launcher's choice and a few neighbours: key tile, ring depth) is first compiled, run and
checked against float32 math (the largest error of o relative to the reference's largest value, and of lse), in
a child process with a time limit: a setting that fails to compile, faults or hangs is recorded with why, and the
run goes on. The right ones are then timed in turns with every SDPA backend (cuDNN, FlashAttention-2, memory-
efficient, the default choice): do_bench medians with the L2 cache flushed before each call, a long warm-up in
the first round (docs/testing.md, METHOD). Fraction = the best SDPA time / the Gluon time.
Results: bench/results/hopper/gluon-<gpu>.json (device, versions, date, per row: errors, ms, fractions), a table
printed. About two minutes on an H100; refused off Hopper.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import subprocess
import sys
import time
import zlib
from pathlib import Path

from autograder import runtime
from autograder.measure.timing import interleaved_times
from autograder.specs.streaming_reduction_fusion import attention_flops, sdpa_with_backend
from bench.common import RESULTS, needs_gpu, save, slug
from bench.peers import ATTENTION_SHAPES
from kernels.flash_attention_gluon import flash_attention_gluon, gluon_settings

RESULTS = RESULTS / "hopper"
DTYPES = ("bf16", "fp16")
TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2}  # as bench.hopper: largest error over the reference's largest value
SDPA = {"SDPA default": None, "SDPA cudnn": "CUDNN_ATTENTION", "SDPA flash": "FLASH_ATTENTION",
        "SDPA efficient": "EFFICIENT_ATTENTION"}
CHECK_LIMIT_S = 150  # the child that compiles and checks every setting; a hang costs this, not the run
ROOT = Path(__file__).resolve().parents[1]


def settings_for(head_dim: int) -> list[dict]:
    """The launcher's setting first, then neighbours worth knowing about for the next round."""
    first = gluon_settings(head_dim)
    others = ([dict(BLOCK_N=128, STAGES=2), dict(BLOCK_N=64, STAGES=3)] if head_dim <= 64
              else [dict(BLOCK_N=64, STAGES=2), dict(BLOCK_N=128, STAGES=2)])
    return [first] + [s for s in others if s != first]


def setting_name(cfg: dict) -> str:
    return f"gluon n{cfg['BLOCK_N']} s{cfg['STAGES']}"


def rows_todo() -> list[tuple]:
    return [(shape, dt_, causal) for shape in ATTENTION_SHAPES for dt_ in DTYPES for causal in (False, True)]


def row_key(shape: tuple, dtype_name: str, causal: bool) -> str:
    return f"{','.join(map(str, shape))} {dtype_name} causal={causal}"


def qkv(shape: tuple, dtype_name: str):
    import torch

    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((shape, dtype_name)).encode()))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    return tuple(torch.randn(*shape, device="cuda", dtype=dtype, generator=g) for _ in range(3))


def float32_reference(q, k, v, causal: bool, heads_at_once: int = 4):
    """(o, lse) in float32 math, a few heads at a time (a 16384² score matrix is 1 GiB a head)."""
    import torch

    B, H, N, D = q.shape
    o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    mask = torch.ones(N, k.shape[2], dtype=torch.bool, device=q.device).tril() if causal else None
    for b in range(B):
        for h in range(0, H, heads_at_once):
            sl = (b, slice(h, h + heads_at_once))
            s = q[sl].float() @ k[sl].float().transpose(-1, -2) / math.sqrt(D)
            if mask is not None:
                s = s.masked_fill(~mask, -float("inf"))
            lse[sl] = torch.logsumexp(s, dim=-1)
            o[sl] = torch.softmax(s, dim=-1) @ v[sl].float()
            del s
    return o, lse


def error_of(out, ref) -> dict:
    """Largest errors of o and lse, each over its reference's largest magnitude (at least 1)."""
    (o, lse), (ro, rl) = out, ref
    e_o = float((o.float() - ro).abs().max() / ro.abs().max().clamp(min=1))
    e_l = float((lse - rl).abs().max() / rl.abs().max().clamp(min=1))
    return {"o": e_o, "lse": e_l, "max": max(e_o, e_l)}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]


def check_all() -> None:
    """In the child: compile, run and check every setting at every row, one JSON line each, as they come."""
    import torch

    for shape, dt_, causal in rows_todo():
        q, k, v = qkv(shape, dt_)
        ref = float32_reference(q, k, v, causal)
        for cfg in settings_for(shape[3]):
            line = {"row": row_key(shape, dt_, causal), "setting": setting_name(cfg)}
            begin = time.perf_counter()
            try:
                out = flash_attention_gluon(q, k, v, causal, settings=cfg)
                torch.cuda.synchronize()
                line["error"] = error_of(out, ref)
                line["status"] = "right" if line["error"]["max"] <= TOLERANCE[dt_] else "wrong"
            except Exception as exc:  # noqa: BLE001  a setting that fails is a finding, not the end of the run
                line.update(status="failed", why=first_line(exc))
                if runtime.cuda_context_broken(exc):
                    print(json.dumps(line), flush=True)
                    return
            line["first_call_s"] = round(time.perf_counter() - begin, 2)
            print(json.dumps(line), flush=True)
        del ref
        torch.cuda.empty_cache()


def run_checks(progress) -> dict:
    """{(row, setting): check line}, from a child process with a time limit."""
    cmd = [sys.executable, "-m", "bench.gluon_attention", "--check-child"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=CHECK_LIMIT_S, check=False)
        stdout, note = done.stdout, (done.stderr.strip().splitlines() or [""])[-1] if done.returncode else ""
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        stdout, note = raw.decode() if isinstance(raw, bytes) else raw, f"the checks hung past {CHECK_LIMIT_S} s"
    lines = [json.loads(s) for s in stdout.splitlines() if s.startswith("{")]
    if note:
        progress(f"checks: {note}")
    found = {(c["row"], c["setting"]): c for c in lines}
    for shape, dt_, causal in rows_todo():
        for cfg in settings_for(shape[3]):
            key = (row_key(shape, dt_, causal), setting_name(cfg))
            found.setdefault(key, {"row": key[0], "setting": key[1], "status": "not run",
                                   "why": note or "the check child stopped before it"})
    return found


def sdpa_call(backend, q, k, v, causal):
    import torch.nn.functional as F

    if backend is None:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    forced = sdpa_with_backend(backend)
    return lambda: forced(q, k, v, causal)


def time_row(shape, dt_, causal, checks: dict, rounds: int) -> dict:
    """One row: the right Gluon settings and every SDPA backend, timed in turns."""
    key = row_key(shape, dt_, causal)
    q, k, v = qkv(shape, dt_)
    calls, missing = {}, {}
    for cfg in settings_for(shape[3]):
        name = setting_name(cfg)
        c = checks[(key, name)]
        if c["status"] == "right":
            calls[name] = lambda cfg=cfg: flash_attention_gluon(q, k, v, causal, settings=cfg)
        else:
            missing[name] = f"{c['status']}: {c.get('why') or c.get('error')}"
    for name, backend in SDPA.items():
        try:
            call = sdpa_call(backend, q, k, v, causal)
            call()
            calls[name] = call
        except Exception as exc:  # noqa: BLE001  a backend this GPU or build lacks is a named gap
            missing[name] = first_line(exc)
    times = interleaved_times(calls, rounds=rounds, rep=25) if calls else {}
    ms = {n: round(sorted(t)[len(t) // 2], 4) for n, t in times.items()}
    flops = attention_flops(q, k, v, causal)
    row = {"shape": list(shape), "dtype": dt_, "causal": causal, "key": key, "ms": ms,
           "TFLOPs": {n: round(flops / t / 1e9, 1) for n, t in ms.items()}, "missing": missing,
           "errors": {n: checks[(key, n)].get("error") for n in (setting_name(c) for c in settings_for(shape[3]))}}
    sdpa = {n: t for n, t in ms.items() if n.startswith("SDPA")}
    gluon = {n: t for n, t in ms.items() if n.startswith("gluon")}
    if sdpa:
        row["best_sdpa"] = min(sdpa, key=sdpa.get)
        row["fraction_of_best_sdpa"] = {n: round(sdpa[row["best_sdpa"]] / t, 3) for n, t in gluon.items()}
    if gluon:
        row["best_gluon"] = min(gluon, key=gluon.get)
        row["launcher_setting"] = setting_name(gluon_settings(shape[3]))
    return row


def table(rows: list[dict]) -> str:
    lines = ["| row | best SDPA (TFLOP/s) | Gluon, launcher's setting | best Gluon setting | fraction | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        sdpa = f"{r['best_sdpa']} {r['TFLOPs'][r['best_sdpa']]:.0f}" if "best_sdpa" in r else "-"
        fr = r.get("fraction_of_best_sdpa", {})
        mine = r.get("launcher_setting")
        launcher = f"{r['TFLOPs'][mine]:.0f} TFLOP/s" if mine in r["ms"] else "not timed"
        best = r.get("best_gluon")
        errs = [e["max"] for e in r["errors"].values() if e]
        lines.append(f"| {r['key']} | {sdpa} | {launcher} | {best or '-'} | "
                     f"{fr.get(best, float('nan')):.3f} | {max(errs) if errs else float('nan'):.1e} |")
    return "\n".join(lines)


def head(name: str) -> dict:
    import torch
    import triton

    now = dt.datetime.now(dt.timezone.utc)
    return {"date": now.date().isoformat(), "time_utc": now.strftime("%H:%M:%S"),
            "device": {"name": name, "capability": ".".join(map(str, torch.cuda.get_device_capability()))},
            "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "tolerance": TOLERANCE, "settings": {d: settings_for(d) for d in (64, 128)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, versions in turns")
    parser.add_argument("--check-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not needs_gpu("gluon_attention"):
        return 2
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        print(f"python -m bench.gluon_attention measures Hopper GPUs (compute capability 9.x), not "
              f"{torch.cuda.get_device_name()}.", file=sys.stderr)
        return 2
    if args.check_child:
        check_all()
        return 0
    begin = time.perf_counter()

    def progress(msg):
        print(f"[gluon {time.perf_counter() - begin:5.0f} s] {msg}", flush=True)

    name = torch.cuda.get_device_name()
    result = {**head(name), "part": "gluon attention forward", "rows": []}
    path = args.out / f"gluon-{slug(name)}.json"
    progress("compiling and checking every setting (child process)")
    checks = run_checks(progress)
    result["checks"] = list(checks.values())
    bad = [c for c in checks.values() if c["status"] != "right"]
    progress(f"{len(checks) - len(bad)} of {len(checks)} settings right; timing")
    for shape, dt_, causal in rows_todo():
        try:
            result["rows"].append(time_row(shape, dt_, causal, checks, args.rounds))
        except Exception as exc:  # noqa: BLE001  one row's failure is recorded; the others still run
            result["rows"].append({"key": row_key(shape, dt_, causal), "error": first_line(exc)})
            if runtime.cuda_context_broken(exc):
                break
        progress(result["rows"][-1]["key"])
        save(result, path)  # after every row: a run cut short keeps what it measured
    timed = [r for r in result["rows"] if "fraction_of_best_sdpa" in r and r.get("best_gluon")]
    fractions = [r["fraction_of_best_sdpa"][r["best_gluon"]] for r in timed]
    result["summary"] = {"rows_timed": len(timed), "rows": len(rows_todo()),
                         "worst_fraction": min(fractions) if fractions else None,
                         "best_fraction": max(fractions) if fractions else None, "goal": 0.95,
                         "seconds": round(time.perf_counter() - begin, 1)}
    save(result, path)
    print(table([r for r in result["rows"] if "ms" in r]))
    print(f"saved {path} ({result['summary']['seconds']:.0f} s); worst fraction of the best SDPA backend "
          f"{result['summary']['worst_fraction']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
