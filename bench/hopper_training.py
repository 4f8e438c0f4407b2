"""The training half of python -m bench.hopper: FlashAttention's backward and the fused linear
cross-entropy's forward and backward, on a Hopper GPU.

- backward, at D = 128 ((4, 16, 4096, 128) and (1, 16, 16384, 128), bf16 and fp16, causal and not): the course's
  kernels as they are; re-tuned (kernels/attention_tuning.py: the dK/dV kernel over DKDV_SPACE with dQ at the
  course's setting, then dQ over DQ_SPACE, at (4, 16, 4096, 128) bf16; the best of each together); and the
  one-pass backward (kernels/flash_attention_backward_atomic.py: dQ by atomic adds, five products a tile instead
  of seven) over its settings, with the copy engine's bulk reductions and with one atomic add a float; in turns
  with SDPA's backward on each backend. Checked against SDPA's default backward: the largest relative error (norm of
  the difference over the norm) of dQ, dK and dV, 0.03 in bf16 and 0.01 in fp16.
- cross_entropy, 8192 x 4096 -> 128256 bf16 (Llama 3's vocabulary), loss and both gradients: the course's Triton
  version (pointer-load GEMMs), the capstone's (cuBLAS products; 2048-row chunks, and 1024), the TMA version
  (kernels/linear_cross_entropy_tma.py) at 1024, 1536 and 2048 rows a chunk, torch.compile of the eager loss
  (the loss compiled, its gradients by autograd through the compiled graph, as a training step does) and eager;
  time and peak memory allocated beyond the inputs (outputs included) each, and each checked against eager.
"""

from __future__ import annotations

import time
import zlib

from tqdm.auto import tqdm

from autograder.measure.timing import interleaved_times, peak_extra_bytes
from autograder.specs import fusion_for_training as fab
from autograder.specs.streaming_reduction_fusion import linear_cross_entropy_eager
from kernels import attention_tuning as tuning
from bench import sweep
from kernels.flash_attention import flash_attention_tma
from kernels.flash_attention_backward import attention_backward_settings, flash_attention_backward
from kernels.flash_attention_backward_atomic import ATOMIC_SETTINGS, flash_attention_backward_atomic
from kernels.linear_cross_entropy_backward import (
    linear_cross_entropy_forward_backward,
    linear_cross_entropy_forward_backward_cublas,
)
from kernels.linear_cross_entropy_tma import CE_GEMM_SETTINGS, linear_cross_entropy_forward_backward_tma

GOALS = {"backward": 0.85, "cross_entropy": {"max_time_over_compile": 1.0, "max_memory_over_compile": 0.5}}
BACKWARD_SHAPES = ((4, 16, 4096, 128), (1, 16, 16384, 128))  # the first is the re-tuning sweep's
DTYPES, SWEEP_DTYPE, CE_DTYPE = ("bf16", "fp16"), "bf16", "bf16"
DEVICE = "cuda"
TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2}
SDPA_BACKWARD = {"SDPA default": None, "SDPA cudnn": "CUDNN_ATTENTION", "SDPA flash": "FLASH_ATTENTION",
                 "SDPA efficient": "EFFICIENT_ATTENTION"}
CE_SHAPE = (8192, 4096, 128256)
TMA_ROWS = (1024, 1536, 2048)


def _dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _relative_error(got, ref) -> float:
    return max(float((g.float() - r.float()).norm() / r.float().norm().clamp(min=1e-30)) for g, r in zip(got, ref))


# ----------------------------------------------------------------------------------------------- backward


class _BackwardInputs:
    """q, k, v, dO of one row, the course's forward (o, lse) and SDPA's default backward as the reference."""

    def __init__(self, shape, dtype_name, causal, reference: bool = True):
        import torch

        g = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(repr((shape, dtype_name, causal)).encode()))
        q, k, v, do = (torch.randn(*shape, device=DEVICE, dtype=_dtype(dtype_name), generator=g) for _ in range(4))
        o, lse = flash_attention_tma(q, k, v, causal)
        self.args = (q, k, v, o, lse, do, causal)
        self.reference = fab.SdpaBackward()(*self.args) if reference else None

    def candidate(self, family, kv_cfg, q_cfg) -> sweep.Candidate:
        args = self.args
        return sweep.Candidate(
            family, {"dkdv": kv_cfg, "dq": q_cfg},
            compile=lambda: tuning.flash_attention_backward_with(*args, kv_cfg, q_cfg, warmup=True),
            run=lambda: tuning.flash_attention_backward_with(*args, kv_cfg, q_cfg))

    def one_pass(self, cfg, atomic) -> sweep.Candidate:
        args = self.args
        return sweep.Candidate(
            "one-pass", {**cfg, "atomic": atomic},
            compile=lambda: flash_attention_backward_atomic(*args, settings=(cfg,), atomic=atomic, warmup=True),
            run=lambda: flash_attention_backward_atomic(*args, settings=(cfg,), atomic=atomic))


def backward_part(clock: sweep.Clock, progress) -> tuple[list[dict], dict]:
    """(rows, the record of the re-tuning sweep)."""
    import torch

    kv0, q0 = attention_backward_settings(128, torch.bfloat16)
    sweeps, retuned, one_pass = {}, {}, {}
    per_causal = {}
    for causal in (False, True):
        inputs = _BackwardInputs(BACKWARD_SHAPES[0], SWEEP_DTYPE, causal)
        kv_side = [inputs.candidate("dkdv", kv, q0) for kv in tuning.DKDV_SPACE]
        q_side = [inputs.candidate("dq", kv0, q) for q in tuning.DQ_SPACE if q != q0]
        atomic = [inputs.one_pass(cfg, mode) for mode in ("tma", "pointer") for cfg in ATOMIC_SETTINGS]
        per_causal[causal] = (inputs, kv_side, q_side, atomic)
    todo = [c for _, kv_side, q_side, atomic in per_causal.values() for c in kv_side + q_side + atomic]
    seconds = sweep.compile_all(todo, clock.deadline(0.3))
    clock.add("backward", "compile", seconds)
    progress(f"backward sweep: {sum(c.status == 'compiled' for c in todo)} of {len(todo)} settings compiled in "
             f"{seconds:.0f} s")
    for causal, (inputs, kv_side, q_side, atomic) in per_causal.items():
        for c in tqdm(kv_side + q_side + atomic, desc=f"backward sweep causal={causal}", leave=False):
            sweep.check(c, lambda out, ref=inputs.reference: _relative_error(out, ref), TOLERANCE[SWEEP_DTYPE])
            sweep.quick_ms(c, rep_ms=30)
        best_kv = (sweep.best(kv_side) or [None])[0]
        q_timed = sweep.best(q_side + [c for c in kv_side if c.setting["dkdv"] == kv0])
        retuned[causal] = (best_kv.setting["dkdv"] if best_kv else kv0, q_timed[0].setting["dq"] if q_timed else q0)
        fastest = sweep.best(atomic)
        one_pass[causal] = dict(fastest[0].setting) if fastest else None
        sweeps[f"causal={causal} {SWEEP_DTYPE}"] = [c.record() for c in kv_side + q_side + atomic]
    per_causal.clear()  # the inputs' memory
    # The other dtype's compiles of the course's settings and the chosen ones, at once, before the rows need them
    other = [_BackwardInputs(BACKWARD_SHAPES[0], dt, c, reference=False)
             for dt in DTYPES if dt != SWEEP_DTYPE for c in (False, True)]
    todo = [x.candidate(name, *cfg) for x in other
            for name, cfg in (("course", (kv0, q0)), ("re-tuned", retuned[x.args[-1]]))]
    todo += [x.one_pass(*_split(one_pass[x.args[-1]])) for x in other if one_pass[x.args[-1]]]
    clock.add("backward", "compile", sweep.compile_all(todo, clock.deadline(0.2)))
    del other, todo
    rows = []
    todo = [(s, dt, c) for s in BACKWARD_SHAPES for dt in DTYPES for c in (False, True)]
    for shape, dt, causal in tqdm(todo, desc="backward rows"):
        inputs = _BackwardInputs(shape, dt, causal)
        kv_c, q_c = retuned[causal]  # 16-bit tiles: the same settings in bf16 and fp16, as the course's are
        cands = {"course": sweep.Candidate("course", {}, compile=lambda: None, status="compiled",
                                           run=lambda a=inputs.args: flash_attention_backward(*a)),
                 "re-tuned": inputs.candidate("re-tuned", kv_c, q_c)}
        if one_pass[causal]:
            cands["one-pass"] = inputs.one_pass(*_split(one_pass[causal]))
        for c in cands.values():
            c.status = "compiled"  # by the sweep, or by the fp16 compiles above
            sweep.check(c, lambda out, ref=inputs.reference: _relative_error(out, ref), TOLERANCE[dt])
        calls = {n: c.run for n, c in cands.items() if c.ok}
        missing = {n: f"{c.status}: {c.why}" for n, c in cands.items() if not c.ok}
        for name, backend in SDPA_BACKWARD.items():
            timed = fab.SdpaBackward() if backend is None else fab.sdpa_backward_with_backend(backend)
            try:
                timed(*inputs.args)
                calls[name] = lambda timed=timed, a=inputs.args: timed(*a)
            except Exception as exc:  # noqa: BLE001  a backend this GPU or build lacks is a named gap
                missing[name] = sweep.first_line(exc)
        begin = time.perf_counter()
        times = interleaved_times(calls, rounds=3, rep=30)
        clock.add("backward", "rows", time.perf_counter() - begin)
        ms = {n: round(sorted(t)[len(t) // 2], 4) for n, t in times.items()}
        flops = fab.attention_backward_flops(*inputs.args[:3], causal=causal)
        name = f"{','.join(map(str, shape))} {dt} causal={causal}"
        rows.append(sweep.comparison_row("backward", name, ms, flops, missing,
                                         {n: c.setting for n, c in cands.items() if c.setting},
                                         {n: c.error for n, c in cands.items()}))
        del inputs, cands, calls
        torch.cuda.empty_cache()
    return rows, {"sweeps": sweeps, "course_setting": {"dkdv": kv0, "dq": q0},
                  "retuned": {f"causal={c}": {"dkdv": kv, "dq": q} for c, (kv, q) in retuned.items()},
                  "one_pass": {f"causal={c}": s for c, s in one_pass.items()}}


def _split(setting: dict) -> tuple[dict, str]:
    """A one-pass candidate's setting as (launch setting, atomic mode)."""
    return {k: v for k, v in setting.items() if k != "atomic"}, setting["atomic"]


# ----------------------------------------------------------------------------------------------- cross-entropy


def _mean_loss(h, w, targets):
    return linear_cross_entropy_eager(h, w, targets).mean()


def _autograd_step(loss_fn, h, w, t):
    import torch

    def step():
        hl, wl = h.detach().requires_grad_(), w.detach().requires_grad_()
        loss = loss_fn(hl, wl, t)
        dh, dw = torch.autograd.grad(loss, (hl, wl))
        return loss.detach(), dh, dw

    return step


def cross_entropy_part(clock: sweep.Clock, progress) -> tuple[list[dict], dict]:
    """(one row, the compile times): every version's time, peak extra memory and error against eager."""
    import torch

    M, K, V = CE_SHAPE
    g = torch.Generator(device=DEVICE).manual_seed(0)
    h = torch.randn(M, K, device=DEVICE, generator=g).to(_dtype(CE_DTYPE))
    w = (torch.randn(V, K, device=DEVICE, generator=g) / K**0.5).to(_dtype(CE_DTYPE))
    t = torch.randint(0, V, (M,), device=DEVICE, generator=g)
    tma = [sweep.Candidate("tma", {"rows": r, **CE_GEMM_SETTINGS[0]},
                           compile=lambda r=r: linear_cross_entropy_forward_backward_tma(h, w, t, r, warmup=True),
                           run=lambda r=r: linear_cross_entropy_forward_backward_tma(h, w, t, r)) for r in TMA_ROWS]
    seconds = sweep.compile_all(tma[:1], clock.deadline(0.2))  # one chunk size compiles the kernels of all
    clock.add("cross_entropy", "compile", seconds)
    progress(f"cross-entropy TMA kernels: {tma[0].status} {tma[0].why} in {seconds:.0f} s")
    for c in tma[1:]:
        c.status, c.facts = tma[0].status, dict(tma[0].facts)
    compiled = torch.compile(_mean_loss, dynamic=False)
    versions = {"eager": _autograd_step(_mean_loss, h, w, t),
                "torch.compile": _autograd_step(compiled, h, w, t),
                "course triton": lambda: linear_cross_entropy_forward_backward(h, w, t),
                "capstone cuBLAS": lambda: linear_cross_entropy_forward_backward_cublas(h, w, t),
                "capstone cuBLAS rows=1024": lambda: linear_cross_entropy_forward_backward_cublas(h, w, t, 1024),
                **{f"tma rows={c.setting['rows']}": c.run for c in tma}}
    first_call = {}
    for name, fn in versions.items():
        begin = time.perf_counter()
        try:
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  reported below as not measured
            first_call[name] = sweep.first_line(exc)
            continue
        first_call[name] = round(time.perf_counter() - begin, 2)
    clock.add("cross_entropy", "compile", sum(v for v in first_call.values() if isinstance(v, float)))
    sweep.load_facts(tma[0])  # registers and spills, now that its kernels have run
    progress(f"cross-entropy first calls (compile included): {first_call}")
    reference = versions["eager"]()
    errors, memory, missing = {}, {}, {}
    for name, fn in versions.items():
        if not isinstance(first_call[name], float):
            missing[name] = first_call[name]
            continue
        out, extra = peak_extra_bytes(fn)
        errors[name] = round(max(float((out[0] - reference[0]).abs()) / max(1.0, float(reference[0].abs())),
                                 _relative_error(out[1:], reference[1:])), 5)
        memory[name] = round(extra / 2**30, 3)
        del out
    for name in list(errors):
        if not errors[name] <= TOLERANCE[CE_DTYPE]:
            missing[name] = f"wrong: error {errors[name]:.3g} above {TOLERANCE[CE_DTYPE]:g}"
    del reference
    calls = {n: fn for n, fn in versions.items() if n not in missing}
    begin = time.perf_counter()
    times = interleaved_times(calls, rounds=3, rep=200)
    clock.add("cross_entropy", "time", time.perf_counter() - begin)
    ms = {n: round(sorted(v)[len(v) // 2], 3) for n, v in times.items()}
    flops = fab.linear_cross_entropy_backward_flops(h, w)
    row = {"part": "cross_entropy", "shape": f"{M}x{K} -> {V} {CE_DTYPE}, forward and backward", "ms": ms,
           "TFLOPs": {n: round(flops / (v * 1e-3) / 1e12, 1) for n, v in ms.items()}, "extra_GiB": memory,
           "errors": errors, "missing": missing, "first_call_s": first_call}
    if "torch.compile" in ms and memory.get("torch.compile"):
        row["time_over_compile"] = {n: round(v / ms["torch.compile"], 3) for n, v in ms.items()}
        row["memory_over_compile"] = {n: round(v / memory["torch.compile"], 3) for n, v in memory.items()}
    return [row], {"tma_kernels": tma[0].record()}


def goals(rows: list[dict]) -> dict:
    """Each training goal: met or not, and the figures that say by how much."""
    out = {}
    bwd = [r for r in rows if r["part"] == "backward" and "best_fraction" in r]
    if bwd:
        worst = min(bwd, key=lambda r: r["best_fraction"])
        out["backward"] = {"min_fraction_of_best_sdpa": GOALS["backward"], "worst": worst["best_fraction"],
                           "worst_shape": worst["shape"], "met": worst["best_fraction"] >= GOALS["backward"],
                           "course_worst": min(r["fraction_of_best_sdpa"].get("course", 0) for r in bwd)}
    for r in rows:
        if r["part"] != "cross_entropy" or "time_over_compile" not in r:
            continue
        triton_only = [n for n in r["time_over_compile"] if n.startswith(("course", "tma"))]
        goal = GOALS["cross_entropy"]
        meets = [n for n in triton_only if r["time_over_compile"][n] <= goal["max_time_over_compile"]
                 and r["memory_over_compile"].get(n, 9) <= goal["max_memory_over_compile"]]
        fastest = min(triton_only, key=r["time_over_compile"].get, default=None)
        out["cross_entropy"] = {**GOALS["cross_entropy"], "met": bool(meets), "versions_meeting": meets,
                                "fastest_triton_only": fastest,
                                "its_time_over_compile": r["time_over_compile"].get(fastest),
                                "its_memory_over_compile": r["memory_over_compile"].get(fastest)}
    return out
