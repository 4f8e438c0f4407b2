"""The grader stands apart from the answers: autograder/ needs only the torch side of each op (autograder/specs/),
never a Triton solution in kernels/, so a student's environment can hold the grader without the solutions."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Run in a fresh interpreter in which `import kernels` fails, as where only the grader is installed.
BLOCK_KERNELS = """
import importlib.abc, sys
class _NoSolutions(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "kernels" or name.startswith("kernels."):
            raise ImportError(f"{name}: the reference solutions are not installed here")
sys.meta_path.insert(0, _NoSolutions())
"""


def _run(code: str, root, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "standalone.py"  # a file: Triton compiles a kernel from its source file on a GPU
    script.write_text(BLOCK_KERNELS + code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=600,
                          env=env)


def test_autograder_and_every_exercise_spec_load_without_kernels(root, tmp_path):
    out = _run("import autograder, json\n"
               "print(json.dumps([ex.id for ex in autograder.exercises()]))\n"
               "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'kernels')))\n", root, tmp_path)
    assert out.returncode == 0, out.stderr
    ids, loaded = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert len(ids) >= 13 and loaded == []


def test_a_student_kernel_is_graded_without_kernels(root, tmp_path):
    """A student's own fused_chain, graded on correctness and fusion with the solutions out of reach."""
    student = '''
import triton, triton.language as tl, torch
from autograder import check

@triton.jit
def _k(x_ptr, b_ptr, y_ptr, N, alpha, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    z = tl.load(x_ptr + row * N + cols, mask=m).to(tl.float32) + tl.load(b_ptr + cols, mask=m).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (alpha * z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty), mask=m)

def fused_chain(x, bias, alpha):
    x = x.contiguous()
    y = torch.empty_like(x)
    _k[(x.shape[0],)](x, bias, y, x.shape[1], alpha, BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

report = check("01.fused_chain", fused_chain, criteria=["correctness", "fusion"])
print("RESULT", report.passed, [r.status for r in report.results])
'''
    out = _run(student, root, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "RESULT True ['passed', 'passed']" in out.stdout, out.stdout


GRADER = Path(__file__).resolve().parent.parent / "autograder"


@pytest.mark.parametrize("path", sorted(str(p.relative_to(GRADER)) for p in GRADER.rglob("*.py")))
def test_no_grader_module_imports_kernels(root, path):
    file = GRADER / path
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            assert node.module.split(".")[0] != "kernels", f"{file.relative_to(root)} imports {node.module}"
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] != "kernels" for a in node.names), f"{file.relative_to(root)}"
