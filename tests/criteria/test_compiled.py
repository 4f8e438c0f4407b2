"""Notebook 06's exercises graded on the CPU: functions inside torch.compile (Dynamo alone here), the graph
criterion, and launch settings per shape. The GPU criteria (kernels, performance) run in
tests/criteria/test_gpu.py."""

import pytest
import torch
import torch.nn.functional as F

from autograder import check, runtime
from autograder import specs as registry
from autograder.config import load
from autograder.criteria.compiled import _compile_error
from autograder.specs.compiler_fusion import fake_quant_broken
from kernels.fake_quant import fake_quant
from kernels.rmsnorm import rmsnorm
from kernels.rmsnorm_op import rmsnorm_op
from kernels.row_argmax_tuned import row_argmax
from autograder.criteria.cases import case_inputs as _inputs
from autograder.criteria.outputs import as_tuple as _as_tuple, compare as _compare, tolerance


def _status(report, criterion):
    return next(r for r in report.results if r.name == criterion)


@pytest.mark.parametrize("exercise_id, fn", [("06.rmsnorm_op", rmsnorm_op), ("06.fake_quant", fake_quant),
                                             ("06.row_argmax", row_argmax)])
def test_the_solutions_pass(exercise_id, fn):
    report = check(exercise_id, fn)
    for r in report.results:
        assert r.status in ("passed", "skipped"), f"{exercise_id} {r.name}: {r.message}"
    if not runtime.has_gpu():
        assert _status(report, "correctness").status == "passed"


def test_the_broken_fake_quant_is_correct_but_breaks_the_graph_at_item():
    report = check("06.fake_quant", fake_quant_broken, criteria=["correctness", "graph"])
    assert _status(report, "correctness").status == "passed"
    graph = _status(report, "graph")
    assert graph.status == "failed"
    assert "item()" in graph.message and "2 graphs" in graph.message
    assert graph.figures["graph_breaks"] == 1


def test_pytorch_alone_meets_the_compiled_exercises_bounds():
    """Every bound must be reachable by PyTorch: RMSNorm written in torch passes correctness and the graph (the
    kernels criterion, which asks for a kernel of one's own, is what it fails, on a GPU)."""
    def torch_rmsnorm(x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    report = check("06.rmsnorm_op", torch_rmsnorm, criteria=["correctness", "graph"])
    assert report.passed, report


def test_an_operator_without_a_backward_is_named():
    def no_autograd(x, weight, eps):
        with torch.no_grad():
            return rmsnorm(x.detach(), weight.detach(), eps)

    result = _status(check("06.rmsnorm_op", no_autograd, criteria=["correctness"]), "correctness")
    assert result.status == "failed"
    # On a GPU Dynamo traces the raw launch and the result has no gradient; in the interpreter it cannot trace the
    # launch at all. Either way the message names what to use.
    assert ("does not require grad" in result.message and "register_autograd" in result.message) or \
        "wrap_triton" in result.message


def test_a_float_argument_turned_float64_by_inductor_is_explained():
    exc = RuntimeError("CompilationError: at 8:4: AssertionError(\"Loop-carried variable dw has initial type "
                       "<['4096'], fp32> but is re-assigned to <['4096'], fp64> in loop!\")")
    message = _compile_error(exc, "rmsnorm_op")
    assert "float64" in message and "tl.cast(eps, tl.float32)" in message


def test_a_kernel_launched_on_fake_tensors_is_explained():
    exc = RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor, FunctionalTensor)")
    assert "wrap_triton" in _compile_error(exc, "rmsnorm_op")


def test_torch_argmax_meets_the_row_argmax_tolerance():
    ex = registry.get("06.row_argmax")
    for dtype in (torch.float32, torch.float16):
        for shape in ex.shapes:
            inputs = _inputs(ex, shape, dtype, 2024)
            out = torch.argmax(inputs["x"], dim=-1)
            ref = _as_tuple(ex.reference(**inputs))[0]
            assert _compare(out, ref, torch.int64, *tolerance(ex, inputs, dtype)) is None, shape


def test_the_last_of_equal_maxima_is_named():
    from kernels.row_argmax import _row_argmax_kernel  # noqa: F401  (the given kernel, imported for the device)

    def last_of_equals(x):
        m, n = x.shape
        flipped = row_argmax(x.flip(-1).contiguous())
        return (n - 1) - flipped

    result = _status(check("06.row_argmax", last_of_equals, criteria=["correctness"]), "correctness")
    assert result.status == "failed"
    assert "last position" in result.message


def test_thresholds_per_benchmark_shape_come_from_their_sub_tables(tmp_path):
    path = tmp_path / "grading.toml"
    path.write_text('[performance."06.row_argmax"]\nmin_fraction_of_peak = 0.9\nmin_speedup_over_eager = 0.0\n\n'
                    '[performance."06.row_argmax".decode]\nmin_fraction_of_peak = 0.5\n')
    cfg = load(path)
    assert cfg.perf_setting("06.row_argmax", "min_fraction_of_peak", 0.1, "decode") == pytest.approx(0.5)
    assert cfg.perf_setting("06.row_argmax", "min_fraction_of_peak", 0.1, "training") == pytest.approx(0.9)
    assert cfg.perf_setting("06.row_argmax", "min_speedup_over_eager", 1.0, "decode") == 0.0
    assert cfg.perf_setting("06.row_argmax", "min_fraction_of_peak", 0.1) == pytest.approx(0.9)


@pytest.mark.skipif(runtime.has_gpu(), reason="the interpreter's stand-ins")
def test_autotune_and_triton_op_work_in_the_interpreter():
    """Without a GPU driver, @triton.autotune still runs (each configuration once), and torch.compile traces a
    triton_op whose kernel Triton interprets (the launch is skipped on fake tensors)."""
    x = torch.randn(5, 3000)
    assert torch.equal(row_argmax(x), torch.argmax(x, -1))
    xs = torch.randn(4, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    compiled = torch.compile(lambda a, b: rmsnorm_op(a, b, 1e-5), fullgraph=True, backend="eager")
    y = compiled(xs, w)
    ref = xs * torch.rsqrt(xs.square().mean(-1, keepdim=True) + 1e-5) * w
    assert torch.allclose(y, ref, atol=1e-5, rtol=1e-5)
    y.sum().backward()
    assert xs.grad is not None and w.grad is not None


# --- On a GPU: what the CPU cannot grade ---------------------------------------------------------------------

@pytest.mark.gpu
def test_on_a_gpu_the_broken_fake_quant_fails_graph_and_kernels():
    """The graph and kernel criteria, not the speed bar, fail the broken version: compiled, it read 0.46-0.54 of copy
    bandwidth on an H100, and the bar that every cold run of the repaired version clears by 1.2x is 0.52."""
    report = check("06.fake_quant", fake_quant_broken)
    assert _status(report, "correctness").status == "passed"
    for criterion, says in (("graph", "item()"), ("kernels", "Memcpy DtoH")):
        result = _status(report, criterion)
        assert result.status == "failed" and says in result.message, (criterion, result.message)


@pytest.mark.gpu
def test_on_a_gpu_rmsnorm_in_torch_passes_but_for_its_own_kernels():
    def torch_rmsnorm(x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    report = check("06.rmsnorm_op", torch_rmsnorm)
    assert _status(report, "correctness").status == "passed"
    assert _status(report, "graph").status == "passed"
    kernels = _status(report, "kernels")
    assert kernels.status == "failed" and "no Triton kernel of its own" in kernels.message


@pytest.mark.gpu
def test_on_a_gpu_the_solution_op_runs_inside_the_compiled_block():
    kernels = _status(check("06.rmsnorm_op", rmsnorm_op, criteria=["kernels"]), "kernels")
    assert kernels.status == "passed", kernels.message
    assert kernels.figures["own_kernels"] == 3 and kernels.figures["other_kernels"] <= 3


@pytest.mark.gpu
@pytest.mark.parametrize("block, warps, fails, says", [(1024, 4, "decode", "needs 0.90"),
                                                      (32768, 4, "training", "Registers spilled")])
def test_on_a_gpu_one_launch_setting_for_both_shapes_is_named(block, warps, fails, says):
    from kernels.row_argmax import _row_argmax_kernel

    def one_setting(x):
        m, n = x.shape
        out = torch.empty(m, dtype=torch.int64, device=x.device)
        _row_argmax_kernel[(m,)](x, out, n, x.stride(0), 1, BLOCK_N=block, num_warps=warps)
        return out

    result = _status(check("06.row_argmax", one_setting, criteria=["performance"]), "performance")
    assert result.status == "failed"
    assert says in result.message and f"{fails} shape" in result.message
