"""What Triton makes of the Hopper kernels, compiled for sm_90 on any machine (no GPU needed: Triton compiles for a
target it is told, and carries its own ptxas). The warp-specialized FlashAttention kernel's key loop is split into
a producer and two consumer warp groups (12 warps) at num_warps=4, and left alone at num_warps=8; every setting
the new kernels try first fits in the 227 KB of shared memory a block may have. Established with Triton 3.6 and
3.7; a later Triton that schedules differently fails the structural checks, which is the cue to time it again
(python -m bench.hopper)."""

import json
import os
import subprocess
import sys

import pytest
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KNOWN = triton.__version__.startswith(("3.6.", "3.7."))

# Run with TRITON_INTERPRET=0 (the tests' own process interprets kernels): compile each kernel for sm_90 and print
# what the compiler made of it.
SCRIPT = r"""
import json
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from kernels.flash_attention_ws import WS_SETTINGS, _flash_attention_ws_kernel
from kernels.linear_cross_entropy_tma import ACCUMULATE, CE_GEMM_SETTINGS, STATS, STORE, _gemm_tma_kernel

def build(fn, signature, constexprs, cfg):
    signature = {**signature, **{k: "constexpr" for k in constexprs}}
    pointers = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if signature[a].startswith("*")}
    k = compile(ASTSource(fn, signature, constexprs, pointers), target=GPUTarget("cuda", 90, 32),
                options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    return {"shared": k.metadata.shared, "num_warps": k.metadata.num_warps,
            "warp_specialized": "ttg.warp_specialize" in k.asm["ttgir"], "wgmma": "wgmma.mma_async" in k.asm["ptx"]}

out = []
attention = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
             "N": "i32", "N_KV": "i32", "qk_scale": "fp32"}
for cfg in WS_SETTINGS + (dict(WS_SETTINGS[0], num_warps=8),):
    for causal in (False, True):
        meta = {k: v for k, v in cfg.items() if k.isupper()}
        meta.update(HEAD_DIM=128, CAUSAL=causal, MASKED=causal)
        got = build(_flash_attention_ws_kernel, attention, meta, cfg)
        out.append({"kernel": "ws", "cfg": cfg, "causal": causal, **got})
cfg = CE_GEMM_SETTINGS[0]
bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
for a_t, b_t, epilogue in ((False, True, STATS), (False, False, STORE), (True, False, ACCUMULATE)):
    gemm = {"a_desc": f"tensordesc<bf16[{bk}, {bm}]>" if a_t else f"tensordesc<bf16[{bm}, {bk}]>",
            "b_desc": f"tensordesc<bf16[{bn}, {bk}]>" if b_t else f"tensordesc<bf16[{bk}, {bn}]>",
            "c_desc": f"tensordesc<bf16[{bm}, {bn // 2}]>", "M": "i32", "N": "i32", "K": "i32", "t_ptr": "*i64",
            "part_m_ptr": "*fp32", "part_s_ptr": "*fp32", "tgt_ptr": "*fp32", "n_parts": "i32"}
    meta = {k: v for k, v in cfg.items() if k.isupper()}
    got = build(_gemm_tma_kernel, gemm, dict(meta, PROGRAMS=132, A_TRANSPOSED=a_t, B_TRANSPOSED=b_t,
                                             EPILOGUE=epilogue), cfg)
    out.append({"kernel": "ce", "epilogue": epilogue, **got})
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
def test_every_setting_tried_first_fits_in_shared_memory(compiled):
    for k in compiled:
        if k["kernel"] == "ce" or k["num_warps"] == 12:
            assert k["shared"] <= 232448, k
    assert all(k["wgmma"] for k in compiled)  # the warp-group matrix instructions of Hopper


@pytest.mark.slow
@pytest.mark.skipif(not KNOWN, reason=f"established with Triton 3.6 and 3.7, not {triton.__version__}")
def test_the_key_loop_is_warp_specialized_at_four_warps_and_not_at_eight(compiled):
    attention = [k for k in compiled if k["kernel"] == "ws"]
    for k in attention:
        if k["cfg"]["num_warps"] == 4:
            assert k["warp_specialized"] and k["num_warps"] == 12, k  # a producer and two consumer warp groups
        else:
            assert not k["warp_specialized"] and k["num_warps"] == 8, k  # the flag accepted, and ignored
