"""autograder/measure/inductor.py: reading Inductor's generated code, Dynamo's graph breaks, the GPU's kernel table.

The parsing tests run on code in the layout Inductor writes (a GPU module and a CPU one, cut down); Dynamo is
run with explain only (no code generated), so the file stays fast. One test compiles with Inductor on the CPU.
"""

from __future__ import annotations

import logging

import pytest
import torch

from autograder.measure import inductor

GPU_CODE = '''
triton_red_fused_pow_sum_0 = async_compile.triton('triton_red_fused_pow_sum_0', \'\'\'
import triton
@triton.jit
def triton_red_fused_pow_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
\'\'\', device_str='cuda')

_rmsnorm_kernel_0 = async_compile.triton('_rmsnorm_kernel', \'\'\'
@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr):
    pass
\'\'\', device_str='cuda')


class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, arg1_1 = args
        buf0 = empty_strided_cuda((64, 64), (64, 1), torch.float32)
        extern_kernels.mm(arg0_1, arg1_1, out=buf0)
        stream0 = get_raw_stream(0)
        triton_red_fused_pow_sum_0.run(buf0, buf1, 64, 64, stream=stream0)
        _rmsnorm_kernel_0.run(buf0, arg1_1, buf2, grid=grid(64), stream=stream0)
        triton_red_fused_pow_sum_0.run(buf2, buf3, 64, 64, stream=stream0)
        return (buf3, )

runner = Runner(partitions=[])
call = runner.call


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
    return fn
'''

CPU_CODE = '''
cpp_fused_add_gelu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}
\'\'\')


def call(args):
    arg0_1, = args
    buf0 = empty_strided_cpu((64, 128), (128, 1), torch.float32)
    cpp_fused_add_gelu_0(arg0_1, buf0)
    return (buf0, )
'''


def test_launches_in_gpu_code_in_order_with_repeats():
    assert inductor.launches_in_code(GPU_CODE) == [
        "extern_kernels.mm", "triton_red_fused_pow_sum_0", "_rmsnorm_kernel_0", "triton_red_fused_pow_sum_0"]


def test_launches_in_cpu_code():
    assert inductor.launches_in_code(CPU_CODE) == ["cpp_fused_add_gelu_0"]


def test_launches_of_several_modules_and_of_a_fragment():
    assert len(inductor.launches_in_code(GPU_CODE + "\n\n" + CPU_CODE)) == 5
    assert inductor.launches_in_code("    triton_poi_fused_mul_1.run(a, b)\n") == ["triton_poi_fused_mul_1"]


def test_kernel_source():
    src = inductor.kernel_source(GPU_CODE, "triton_red_fused_pow_sum_0")
    assert src.startswith("import triton") and "def triton_red_fused_pow_sum_0(" in src and "'''" not in src
    assert "extern \"C\"" in inductor.kernel_source(CPU_CODE, "cpp_fused_add_gelu_0")
    assert inductor.kernel_source(GPU_CODE, "no_such_kernel") == ""


def _item_branch(x):
    amax = x.abs().max().item()
    if amax == 0:
        return x.clone()
    return x / amax


def _data_dependent_shape(x):
    return x[x > 0].sum()


def _clean(x):
    return torch.where(x > 0, x, 0.5 * x).sum()


def test_graph_report_breaks_quietly(capfd):
    torch._dynamo.config.capture_scalar_outputs  # noqa: B018  the default (False) is what breaks the graph
    level = logging.getLogger("torch._dynamo").level
    report = inductor.graph_report(_item_branch, torch.randn(16))
    assert report.graphs >= 2 and report.breaks >= 1
    assert any("item" in r for r in report.reasons), report.reasons
    assert "break 1:" in str(report)
    assert capfd.readouterr().err == ""
    assert logging.getLogger("torch._dynamo").level == level


def test_graph_report_data_dependent_shape():
    report = inductor.graph_report(_data_dependent_shape, torch.randn(16))
    assert report.breaks >= 1 and report.reasons


def test_graph_report_no_break():
    report = inductor.graph_report(_clean, torch.randn(16))
    assert (report.graphs, report.breaks, report.reasons) == (1, 0, [])


def test_quiet_restores_logging_and_warnings():
    before = {name: logging.getLogger(name).level for name in inductor._NOISY_LOGGERS}
    with inductor.quiet():
        assert logging.getLogger("torch._dynamo").level == logging.CRITICAL
    assert {name: logging.getLogger(name).level for name in inductor._NOISY_LOGGERS} == before


@pytest.mark.slow
def test_generated_code_on_the_cpu():
    """The one Inductor compile of this file: a C++ kernel on the CPU, bias + GELU + residual fused into it."""
    torch._dynamo.reset()
    x, b, r = torch.randn(8, 32), torch.randn(32), torch.randn(8, 32)
    out, code = inductor.generated_code(lambda x, b, r: torch.nn.functional.gelu(x + b) + r, x, b, r)
    torch.testing.assert_close(out, torch.nn.functional.gelu(x + b) + r)
    launches = inductor.launches_in_code(code)
    assert len(launches) == 1 and launches[0].startswith("cpp_fused"), launches
    assert inductor.kernel_source(code, launches[0])


@pytest.mark.gpu
def test_gpu_kernel_table():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(1024, 1024, device="cuda")
    rows = inductor.gpu_kernel_table(lambda: torch.exp(x * 2))  # two elementwise kernels, one after the other
    assert sum(r.count for r in rows) == 2 and all(r.total_us > 0 for r in rows)


@pytest.mark.gpu
def test_gpu_timeline_orders_the_kernels_of_one_call(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(1024, 1024, device="cuda")
    spans = inductor.gpu_timeline(lambda: torch.exp(x * 2), trace=str(tmp_path / "trace.json"))
    assert len(spans) == 2 and spans[0].start_us == 0 and spans[1].start_us >= spans[0].duration_us
    assert all(s.duration_us > 0 for s in spans) and (tmp_path / "trace.json").stat().st_size > 0


def test_profiling_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for helper in (inductor.gpu_kernel_table, inductor.gpu_timeline):
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            helper(lambda: None)


def test_aten_fallbacks_are_launches():
    code = "def call(args):\n    buf1 = torch.ops.aten._scaled_dot_product_flash_attention.default(q, k, v)\n    return buf1\n"
    assert inductor.launches_in_code(code) == ["aten._scaled_dot_product_flash_attention"]
