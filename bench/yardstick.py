"""What 07.decoder's yardstick costs a cold check, and what a cheaper one would give up: torch.compile of the eager
decoder compiled whole (today's yardstick) against the same model compiled a region at a time (one decoder layer,
compiled once and called for every layer, and the final norm, head and loss), each in a fresh process with empty
Inductor, Triton, CUDA and course caches (bench.coldstart.fresh_env), then once more with the caches the first
process left (what grade-class's students meet after classroom.compile_cache has compiled ahead).

    python -m bench.yardstick [--runs 3] [--out DIR]          (a GPU; saves yardstick-<gpu>.json)

Per variant and run: the seconds to the first step's gradients (compilation included), the median step in ms
(triton.testing.do_bench: warm-up, L2 flushed between calls), the step's ratio to eager's measured in the same
process, and the loss's relative difference from eager's. A cold check of notebook 07 spent about 15 of its
23 s of 07.decoder's performance compiling the whole-model yardstick (bench/results/grading/): a regional
compile lowers one layer instead of four, so the question this answers is how much of that it saves and whether
its step is as fast (a yardstick that is slower would lower the bar a student's step is held to).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from triton.testing import do_bench

from autograder.criteria.at_size import for_this_card
from autograder.criteria.training import compiled_eager
from autograder.measure import device
from autograder.specs.decoder import DECODER, rmsnorm
from bench.coldstart import fresh_env
from bench.common import RESULTS, needs_gpu, record, save, slug

VARIANTS = ("whole", "regional")
TAG = "yardstick-result: "


def _layer(x, attn_norm, wqkv, wo, mlp_norm, w_gate_up, w_down, heads: int, eps: float):
    """One layer of specs.decoder.decoder_hidden, as a function of its own weights (one compiled graph for all)."""
    b, t, d = x.shape
    qkv = rmsnorm(x, attn_norm, eps) @ wqkv.t()
    q, k, v = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(b, t, d) @ wo.t()
    g, u = (rmsnorm(x, mlp_norm, eps) @ w_gate_up.t()).chunk(2, dim=-1)
    return x + (F.silu(g) * u) @ w_down.t()


def _head(x, norm, lm_head, targets, eps: float):
    h = rmsnorm(x, norm, eps).reshape(-1, x.shape[-1])
    return F.cross_entropy((h @ lm_head.t()).float(), targets.reshape(-1))


def regional_loss(compile_fn=torch.compile):
    """specs.decoder.decoder_loss_eager with each layer and the head compiled as regions of their own."""
    layer, head = compile_fn(_layer), compile_fn(_head)

    def loss(params: dict, tokens, targets, cfg):
        x = params["embed"][tokens]
        for i in range(cfg.layers):
            p = f"layers.{i}."
            x = layer(x, *(params[p + n] for n in ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down")),
                      cfg.heads, cfg.eps)
        return head(x, params["norm"], params["lm_head"], targets, cfg.eps)
    return loss


def child(variant: str) -> dict:
    """One variant in this process: seconds to the first gradients, then the step against eager's."""
    case = for_this_card(DECODER.perf_case)  # the case performance times, as this card's memory allows
    cfg = case.config
    params = DECODER.init(cfg, torch.bfloat16, "cuda", 0)
    tokens = torch.randint(0, cfg.vocab, (case.batch, case.seq_len), device="cuda")
    targets = torch.roll(tokens, -1, 1)
    if variant == "whole":
        loss_fn = compiled_eager(DECODER)
    else:
        loss_fn = regional_loss(lambda f: torch.compile(f, dynamic=False))
    leaves = list(params.values())

    def step_of(fn):
        return lambda: torch.autograd.grad(fn(params, tokens, targets, cfg), leaves)

    step, eager = step_of(loss_fn), step_of(DECODER.eager)
    torch.cuda.synchronize()
    started = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    ms = do_bench(step, warmup=25, rep=200, return_mode="median")
    eager_ms = do_bench(eager, warmup=25, rep=200, return_mode="median")
    ours = loss_fn(params, tokens, targets, cfg).detach().float()  # the graphs already compiled, grad mode on
    theirs = DECODER.eager(params, tokens, targets, cfg).detach().float()
    return {"variant": variant, "first_step_s": first_s, "step_ms": ms, "eager_ms": eager_ms,
            "speedup_over_eager": eager_ms / ms, "loss_rel_diff": float((ours - theirs).abs() / theirs.abs())}


def _run(variant: str, caches: Path) -> dict:
    """One variant in a fresh process whose caches are the folder's (empty at first, then what runs left there)."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    p = subprocess.run([sys.executable, "-m", "bench.yardstick", "--child", variant], env=fresh_env(caches, gpu),
                       capture_output=True, text=True, timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(TAG)]
    if p.returncode or not lines:
        return {"variant": variant, "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1][len(TAG):])


def summary(runs: list[dict]) -> dict:
    """Per variant and cache state: the median of each figure over the runs that gave one."""
    out = {}
    for key in sorted({(r["variant"], r["caches"]) for r in runs}):
        ok = [r for r in runs if (r["variant"], r["caches"]) == key and "error" not in r]
        figures = ("first_step_s", "step_ms", "eager_ms", "speedup_over_eager", "loss_rel_diff")
        out[f"{key[0]}, {key[1]} caches"] = {"runs": len(ok), **{f: statistics.median(r[f] for r in ok) for f in figures
                                                                if ok}}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh-cache runs per variant (default 3)")
    parser.add_argument("--out", type=Path, default=RESULTS / "yardstick")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not needs_gpu("yardstick"):
        return 2
    if args.child:
        print(TAG + json.dumps(child(args.child)), flush=True)
        return 0
    runs = []
    with tqdm(total=args.runs * len(VARIANTS) * 2, desc="yardstick compiles") as bar:
        for i in range(args.runs):  # interleaved, so that each variant meets the machine at several moments
            for variant in VARIANTS:
                with tempfile.TemporaryDirectory() as tmp:
                    for state in ("empty", "warm"):  # the second process finds what the first compiled
                        runs.append({**_run(variant, Path(tmp)), "run": i, "caches": state})
                        bar.write(json.dumps(runs[-1]))  # each run as it ends: a cut-off run keeps what it measured
                        bar.update()
    result = {**record(device.profile(progress=False)), "runs": runs, "summary": summary(runs)}
    path = save(result, args.out / f"yardstick-{slug(result['device']['name'])}.json")
    for name, row in result["summary"].items():
        print(f"{name}: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
