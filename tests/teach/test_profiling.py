"""Notebook 08's looks inside a kernel (autograder.teach.profiling), without a GPU: each says in one line why it
did nothing; Nsight Compute's raw CSV is read and summed up; the cell a function came from is read back."""

import ast

import pytest

from autograder import runtime
from autograder.teach import profiling

# What `ncu --csv --page raw` prints: its own lines, then metric names, units, one row per profiled kernel.
RAW = """==PROF== Connected to process 4242 (python)
==PROF== Profiling "_flash_attention_kernel": 0%....50%....100% - 38 passes
"ID","Kernel Name","gpu__time_duration.sum","launch__registers_per_thread","sm__warps_active.avg.pct_of_peak_sustained_active","sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_not_issued_per_issue_active.ratio"
"","","nsecond","register/thread","%","%","ratio","ratio","ratio","ratio"
"0","_flash_attention_kernel","1,180,544","244","12.41","61.3","3.20","0.45","1.75","9.0"
==PROF== Disconnected from process 4242
"""


def test_the_raw_page_is_read_and_summed_up():
    metrics = profiling.parse_raw_csv(RAW)
    assert metrics["Kernel Name"] == "_flash_attention_kernel" and metrics["launch__registers_per_thread"] == "244"
    text = "\n".join(profiling.summary(metrics))
    assert "registers a thread" in text and "244" in text and "1,180,544" in text
    assert "tensor pipe busy, % of its peak (pipe_tensor_op_gmma)" in text and "61.3" in text
    # Stalls by cycles, largest first; the "not issued" twin of a reason is not a reason of its own.
    assert "barrier 3.20, math_pipe_throttle 1.75, long_scoreboard 0.45" in text and "not_issued" not in text


def test_a_raw_page_without_a_kernel_or_those_metrics_is_said_so():
    assert profiling.parse_raw_csv("==PROF== No kernels were profiled.\n") == {}
    text = "\n".join(profiling.summary({"Kernel Name": "k"}))
    assert "reported no sm__pipe_tensor" in text and "no stall breakdown" in text


def test_why_nsight_compute_cannot_run_is_one_line(monkeypatch, tmp_path):
    if not runtime.has_gpu():
        assert profiling.ncu_why_not() == "no GPU here"
    monkeypatch.setattr(runtime, "has_gpu", lambda: True)
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    assert "(ncu) is not on PATH" in profiling.ncu_why_not()
    monkeypatch.setattr(profiling.shutil, "which", lambda name: "/usr/local/cuda/bin/ncu")
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    monkeypatch.setattr(profiling, "DRIVER_PARAMS", params)
    monkeypatch.setattr(profiling.os, "geteuid", lambda: 1000)
    assert "RmProfilingAdminOnly=1" in profiling.ncu_why_not()
    monkeypatch.setattr(profiling.os, "geteuid", lambda: 0)
    assert profiling.ncu_why_not() is None
    params.write_text("RmProfilingAdminOnly: 0\n")
    monkeypatch.setattr(profiling.os, "geteuid", lambda: 1000)
    assert profiling.ncu_why_not() is None


def _defined_here(q, k, v):
    return q


def test_the_cell_that_defined_a_function_becomes_a_script():
    source = profiling.cell_source(_defined_here)
    assert "def _defined_here(q, k, v):" in source and "def test_the_cell_that_defined" in source
    assert profiling.cell_source(len) is None  # a builtin has no cell
    script = profiling.attention_script(source, "_defined_here", (1, 2, 64, 32))
    ast.parse(script)
    assert "torch.randn(*(1, 2, 64, 32), device='cuda', dtype=torch.bfloat16)" in script
    assert "    _defined_here(q, k, v)" in script


@pytest.mark.gpu
def test_the_profilers_table_names_the_kernels_a_call_ran():
    import torch

    x = torch.randn(1024, 1024, device="cuda")
    rows = profiling.kernel_table(lambda: x @ x, calls=2)
    assert rows and rows[0][1] == 2 and rows[0][2] > 0
