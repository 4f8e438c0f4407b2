"""The Gluon FlashAttention forward (kernels/flash_attention_gluon.py), compiled for sm_90 without a GPU: Triton
compiles for the target it is told and carries its own ptxas. Every setting the launcher uses (head dims 64
and 128, bfloat16 and float16, causal or not) must give a cubin whose PTX uses Hopper's warp-group MMA and whose
shared memory fits a block. Its launcher's input checks run on the CPU too. Numbers and speed need a Hopper GPU:
python -m bench.gluon_attention."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper", reason="this Triton has no Gluon")
from kernels.flash_attention_gluon import check_gluon_inputs, flash_attention_gluon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_LIMIT = 232448  # bytes of shared memory one block may have on sm_90

# Run in a child with TRITON_INTERPRET=0 (the tests' process interprets kernels).
SCRIPT = r"""
import json
from triton.backends.compiler import GPUTarget
from triton.compiler import compile
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from kernels.flash_attention_gluon import BLOCK_M, NUM_WARPS, _flash_attention_gluon_kernel as fn, gluon_settings

out = []
for head_dim in (64, 128):
    for dtype in ("bf16", "fp16"):
        for causal in (False, True):
            cfg = gluon_settings(head_dim)
            element = gl.bfloat16 if dtype == "bf16" else gl.float16

            def desc(rows):
                layout = gl.NVMMASharedLayout.get_default_for([rows, head_dim], element)
                return f"tensordesc<{dtype}[{rows}, {head_dim}],{layout!r}>"

            meta = dict(BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=head_dim, STAGES=cfg["STAGES"], CAUSAL=causal,
                        num_warps=NUM_WARPS)
            signature = {"q_desc": desc(BLOCK_M), "k_desc": desc(cfg["BLOCK_N"]), "v_desc": desc(cfg["BLOCK_N"]),
                         "o_ptr": "*" + dtype, "lse_ptr": "*fp32", "N": "i32", "N_KV": "i32", "qk_scale": "fp32",
                         **{name: "constexpr" for name in meta}}
            attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
                     if signature[a].startswith("*")}
            k = compile(GluonASTSource(fn, signature, meta, attrs), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": NUM_WARPS})
            out.append({"head_dim": head_dim, "dtype": dtype, "causal": causal, "shared": k.metadata.shared,
                        "num_warps": k.metadata.num_warps, "cubin_bytes": len(k.asm["cubin"]),
                        "wgmma": "wgmma.mma_async" in k.asm["ptx"], "tma": "cp.async.bulk.tensor" in k.asm["ptx"],
                        "mbarrier": "mbarrier.try_wait" in k.asm["ptx"]})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_setting_compiles_to_a_cubin_with_warp_group_mma(compiled):
    assert {(k["head_dim"], k["dtype"], k["causal"]) for k in compiled} == {
        (d, t, c) for d in (64, 128) for t in ("bf16", "fp16") for c in (False, True)}
    for k in compiled:
        assert k["cubin_bytes"] > 0, k
        assert k["wgmma"], k  # Hopper's warp-group matrix instructions, not mma.sync
        assert k["tma"] and k["mbarrier"], k  # tiles moved by the copy engine, waited for on mbarriers
        assert k["num_warps"] == 8, k


@pytest.mark.slow
def test_the_ring_of_key_and_value_slots_fits_in_shared_memory(compiled):
    for k in compiled:
        # Q's tile and at least two K and two V slots; no more than one block may have.
        slots = 2 * 2 * 64 * k["head_dim"] * 2
        assert 128 * k["head_dim"] * 2 + slots <= k["shared"] <= SHARED_LIMIT, k


def _qkv(shape=(1, 2, 128, 64), dtype=torch.float16):
    return [torch.zeros(shape, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v: (q[0], k, v), "want q"),
    (lambda q, k, v: (q.float(), k.float(), v.float()), "float16 or bfloat16"),
    (lambda q, k, v: (q, k.bfloat16(), v), "float16 or bfloat16"),
    (lambda q, k, v: (q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous()), "head_dim 32"),
    (lambda q, k, v: (q.transpose(2, 3).contiguous().transpose(2, 3), k, v), "contiguous"),
])
def test_the_launcher_names_what_is_wrong_with_its_inputs(change, message):
    q, k, v = change(*_qkv())
    with pytest.raises(ValueError, match=message):
        flash_attention_gluon(q, k, v)


def test_causal_attention_needs_as_many_keys_as_queries():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="as many keys as queries"):
        check_gluon_inputs(q, k[:, :, :64], v[:, :, :64], causal=True)


def test_on_the_cpu_the_launcher_points_to_the_portable_kernel():
    with pytest.raises(RuntimeError, match="Hopper GPUs .* only.*kernels.flash_attention"):
        flash_attention_gluon(*_qkv(), causal=True)


def test_the_benchmark_refuses_without_a_gpu_and_its_reference_is_softmax_attention(capsys):
    from bench import gluon_attention as bench

    assert bench.main([]) == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 3, 40, 16, generator=g, dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        o, lse = bench.float32_reference(q, k, v, causal, heads_at_once=2)
        want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        s = q.double() @ k.double().transpose(-1, -2) / 4.0
        if causal:
            s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), -float("inf"))
        assert torch.allclose(o.double(), want, atol=1e-5) and torch.allclose(lse.double(), s.logsumexp(-1), atol=1e-5)
        assert bench.error_of((o.half(), lse), (o, lse))["max"] < 1e-3
        assert bench.error_of((o + 0.5, lse), (o, lse))["o"] > 0.1  # a wrong output is seen
    assert len(bench.rows_todo()) == 12 and all(len(bench.settings_for(d)) == 3 for d in (64, 128))


def test_the_benchmarks_page_leaves_the_gluon_runs_to_their_files():
    from bench import gluon_attention as bench
    from bench import report

    assert report.kind(bench.RESULTS / "gluon-nvidia-h100-80gb-hbm3.json") is None
    assert report.kind(bench.RESULTS / "hopper-nvidia-h100-80gb-hbm3.json") == "hopper"
