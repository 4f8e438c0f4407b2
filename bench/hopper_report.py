"""The Hopper benchmark's record read back: each family's best in a forward row, the goals met or not, and the
markdown table of a run (the forward and backward fractions of the best SDPA backend, the cross-entropy
versions, every warp-specialized setting the sweep checked). No GPU needed.
"""

from __future__ import annotations

import json

from bench import hopper_training as training
from bench.hopper_plan import FAMILIES, GOALS, PARTS, SWEEP
from kernels import attention_tuning as tuning


def family_best(row: dict) -> dict:
    """{family: its best fraction of the best SDPA backend} in a forward row. The ws family's twins compiled without
    the flag are the same loop with no producer warp group: not warp-specialized, so not counted as such."""
    out = {}
    for family in ("course", *FAMILIES):
        mine = [n for n in row.get("fraction_of_best_sdpa", {})
                if n.split(" ")[0] == family and "warp_specialize=False" not in n]
        if mine:
            out[family] = max(row["fraction_of_best_sdpa"][n] for n in mine)
    return out


def goals(rows: list[dict]) -> dict:
    out = {}
    fwd = [r for r in rows if r["part"] == "forward" and "best_fraction" in r]
    if fwd:
        worst = min(fwd, key=lambda r: r["best_fraction"])
        out["forward"] = {"min_fraction_of_best_sdpa": GOALS["forward"], "worst": worst["best_fraction"],
                          "worst_shape": worst["shape"], "met": worst["best_fraction"] >= GOALS["forward"],
                          "course_worst": min(r.get("family_best", {}).get("course", 0) for r in fwd),
                          "best_family_per_shape": {r["shape"]: r["best_triton"] for r in fwd}}
    return {**out, **training.goals(rows)}


def markdown(result: dict) -> str:
    head = (f"### Hopper ceiling: {result['device']['name']} ({result['date']}, torch {result['torch']}, "
            f"triton {result['triton']})")
    lines = [head, ""]
    fwd = [r for r in result["rows"] if r["part"] == "forward"]
    if fwd:
        lines += ["Forward, fraction of the best SDPA backend's speed (its TFLOP/s; each family's best):", "",
                  "| shape | best SDPA | course | portable swept | TMA swept | warp-specialized | best Triton |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r in fwd:
            fb = family_best(r)  # from the fractions: a run recorded before the twins were told apart counts them
            cells = [f"{fb[f]:.2f}" if f in fb else "-" for f in ("course", *FAMILIES)]
            sdpa = f"{r['best_sdpa']} {r['TFLOPs'][r['best_sdpa']]:.0f}" if "best_sdpa" in r else "-"
            best = f"{r['best_triton']} {r['best_fraction']:.2f}" if "best_triton" in r else "-"
            lines.append(f"| {r['shape']} | {sdpa} | " + " | ".join(cells) + f" | {best} |")
        lines += _warp_specialized_lines(result, fwd)
    bwd = [r for r in result["rows"] if r["part"] == "backward"]
    if bwd:
        lines += ["", "Backward, fraction of the best SDPA backend's speed:", "",
                  "| shape | best SDPA | course | re-tuned | one-pass |", "|---|---|---:|---:|---:|"]
        for r in bwd:
            fr = r.get("fraction_of_best_sdpa", {})
            cells = [f"{fr[n]:.2f}" if n in fr else "-" for n in ("course", "re-tuned", "one-pass")]
            sdpa = f"{r['best_sdpa']} {r['TFLOPs'][r['best_sdpa']]:.0f}" if "best_sdpa" in r else "-"
            lines.append(f"| {r['shape']} | {sdpa} | " + " | ".join(cells) + " |")
    for r in (r for r in result["rows"] if r["part"] == "cross_entropy"):
        lines += ["", f"Linear cross-entropy, {r['shape']} (ms, peak GiB beyond the inputs; / torch.compile):", "",
                  "| version | ms | GiB | time / compile | memory / compile |", "|---|---:|---:|---:|---:|"]
        for n, t in r["ms"].items():
            tc, mc = r.get("time_over_compile", {}).get(n), r.get("memory_over_compile", {}).get(n)
            lines.append(f"| {n} | {t:.1f} | {r['extra_GiB'].get(n, float('nan')):.2f} | "
                         f"{tc if tc is not None else '-'} | {mc if mc is not None else '-'} |")
        lines += [f"{n}: {why}" for n, why in r["missing"].items()]
    lines += [f"{part}: FAILED ({result[part]['error']})" for part in PARTS
              if isinstance(result.get(part), dict) and result[part].get("error")]
    lines += ["", "Goals:"] + [f"- {k}: {'met' if g['met'] else 'NOT met'} {json.dumps(g)}"
                               for k, g in result.get("goals", {}).items()]
    lines += ["", f"Seconds spent: {json.dumps(result.get('seconds', {}))}"]
    return "\n".join(lines) + "\n"


def _warp_specialized_lines(result: dict, fwd: list[dict]) -> list[str]:
    """Every setting the sweep compiled with the flag on and found warp-specialized: right or wrong at the sweep's
    shape, its first time there and that time against the best SDPA backend's in the row of the same shape."""
    sdpa_ms = {r["shape"]: r["ms"][r["best_sdpa"]] for r in fwd if "best_sdpa" in r}
    lines = []
    for key, records in result.get("forward", {}).get("sweeps", {}).items():
        family, d, causal, dt = key.split(" ")
        shape = f"{','.join(map(str, SWEEP))},{d.removeprefix('D=')} {dt} {causal}"
        for rec in records:
            if family != "ws" or not rec.get("warp_specialized"):
                continue
            ms = rec.get("ms")
            frac = f"{sdpa_ms[shape] / ms:.2f}" if ms and shape in sdpa_ms else "-"
            verdict = "right" if rec["status"] == "checked" else f"{rec['status']}: {rec.get('why', '')}"
            lines.append(f"| {shape} | {tuning.setting_name(rec['setting'])} | {verdict} | "
                         f"{ms if ms else '-'} | {frac} |")
    if not lines:
        return []
    note = ("The warp-specialized column counts only kernels compiled warp-specialized (the flag on); its twins "
            "without the flag are the same loop with no producer warp group. Every warp-specialized setting of the "
            "sweep, checked against the reference and timed once (not in turns with SDPA: a first ranking):")
    return ["", note, "", "| shape | setting | result | ms | best SDPA ms / ms |", "|---|---|---|---:|---:|", *lines]
