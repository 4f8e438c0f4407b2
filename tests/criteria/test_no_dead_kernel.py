"""A kernel that loads or stores out of bounds, run in Triton's interpreter, raises an error that names the bug
and leaves the process alive: called directly (as from a notebook cell) and graded by check() on every
criterion. Each bug runs in a subprocess, so that a crash fails its test instead of killing pytest."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from autograder import runtime

pytestmark = pytest.mark.skipif(not runtime.interpreted(), reason="the interpreter's bounds check (CPU only)")

# RMSNorm with one bug picked by BUG: 1 forgets the load masks, 2 the store mask, 3 indexes one row too far,
# 4 steps through x with a wrong row stride (rows of BLOCK_H more than x's).
KERNEL = '''
import json
import sys

import torch
import triton
import triton.language as tl

import autograder


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, H, stride_xm, stride_ym, eps, BLOCK_H: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if BUG == 3:
        row = row + 1
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    stride = stride_xm + BLOCK_H if BUG == 4 else stride_xm
    if BUG == 1:
        x = tl.load(x_ptr + row * stride + cols).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * (1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)) * w).to(y_ptr.dtype.element_ty)
    if BUG == 2:
        tl.store(y_ptr + row * stride_ym + cols, y)
    else:
        tl.store(y_ptr + row * stride_ym + cols, y, mask=mask)


BUG = int(sys.argv[1])


def rmsnorm(x, weight, eps):
    M, H = x.shape
    y = torch.empty((M, H), dtype=x.dtype, device=x.device)
    _rmsnorm_kernel[(M,)](x, weight, y, H, x.stride(0), y.stride(0), eps, BLOCK_H=triton.next_power_of_2(H), BUG=BUG)
    return y


direct = []
for M, H in ((4, 3), (37, 1000), (64, 4099)):
    try:
        rmsnorm(torch.randn(M, H), torch.ones(H), 1e-6)
        direct.append("no error")
    except IndexError as exc:
        direct.append(f"{type(exc).__name__}: {exc}")
report = autograder.check("02.rmsnorm", rmsnorm)
print("RESULT " + json.dumps({"direct": direct, "criteria": {r.name: [r.status, r.message] for r in report.results}}))
'''

BUGS = {1: ("load", "forgotten load mask"), 2: ("store", "forgotten store mask"),
        3: ("load", "out-of-range row index"), 4: ("load", "wrong row stride")}


@pytest.mark.parametrize("bug", sorted(BUGS), ids=[BUGS[b][1].replace(" ", "_") for b in sorted(BUGS)])
def test_out_of_bounds_is_named_and_the_process_lives(bug, tmp_path):
    script = tmp_path / "broken_rmsnorm.py"
    script.write_text(textwrap.dedent(KERNEL))
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(script), str(bug)], check=False, capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, f"the process died (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    what, _ = BUGS[bug]
    # Called directly: a clear IndexError naming the access, the kernel and the likely cause.
    for outcome in result["direct"]:
        assert outcome.startswith("OutOfBoundsError: out-of-bounds " + what), outcome
        assert "_rmsnorm_kernel" in outcome and "without a correct mask" in outcome, outcome
    # Graded: every criterion ran to its verdict, and each that failed names the bug; none reports a crash.
    # (A criterion whose shapes need no mask, a power-of-two row for precision, may pass a kernel that forgot it.)
    criteria = result["criteria"]
    assert criteria["correctness"][0] == "failed", criteria
    assert {"correctness", "precision", "fusion"} <= set(criteria), criteria
    for name, (status, message) in criteria.items():
        if status == "failed":
            assert "out-of-bounds" in message, (name, message)
        assert "SIG" not in message and "grader itself failed" not in message, (name, message)


UNHOOK = '''
from triton.runtime import interpreter

from autograder import memcheck

# As on a Triton whose interpreter lacks the seams: the original load, store and launch, no check in place.
for name in ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas"):
    method = interpreter.InterpreterBuilder.__dict__.get(name)
    if hasattr(method, "__wrapped__"):
        setattr(interpreter.InterpreterBuilder, name, method.__wrapped__)
interpreter._implicit_cvt = interpreter._implicit_cvt.__wrapped__
interpreter.GridExecutor.__call__ = interpreter.GridExecutor.__call__.__wrapped__
memcheck._installed = False
'''


def test_without_the_check_the_plain_calls_are_preceded_by_a_guarded_one(tmp_path):
    """Where the interpreter cannot be bounds-checked, the fusion criterion (which calls on plain tensors) first
    calls on guard-padded ones, and fails on the out-of-bounds store it sees there instead of crashing."""
    source = textwrap.dedent(KERNEL)
    head = source.split("direct = []", 1)[0]
    script = tmp_path / "unhooked.py"
    script.write_text(head + UNHOOK + 'report = autograder.check("02.rmsnorm", rmsnorm, criteria=["fusion"])\n'
                      'print("RESULT " + json.dumps([report["fusion"].status, report["fusion"].message]))\n')
    proc = subprocess.run([sys.executable, str(script), "2"], check=False, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, f"the process died (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    status, message = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert status == "failed" and "out-of-bounds write" in message and "past the end of the output" in message, message
