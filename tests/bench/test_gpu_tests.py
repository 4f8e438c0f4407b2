"""The gpu tests' summary (bench/gpu_tests.py) read from a JUnit file like pytest writes."""

from __future__ import annotations

import pytest

from bench import gpu_tests

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_gpu" name="test_a" time="1.0"/>
<testcase classname="tests.test_gpu.TestSandbox" name="test_b" time="1.0">
  <failure message="AssertionError: 3 != 4&#10;more">trace</failure></testcase>
<testcase classname="tests.test_sandbox" name="test_c" time="0.1">
  <skipped type="pytest.skip" message="bubblewrap is not installed">skip</skipped></testcase>
<testcase classname="tests.test_sandbox" name="test_d" time="0.1"/>
</testsuite></testsuites>"""


def test_counts_per_file():
    files = gpu_tests.per_file(JUNIT)
    assert set(files) == {"tests/test_gpu.py", "tests/test_sandbox.py"}
    assert (files["tests/test_gpu.py"]["passed"], files["tests/test_gpu.py"]["failed"]) == (1, 1)
    assert files["tests/test_gpu.py"]["failures"] == ["test_b: AssertionError: 3 != 4"]
    assert files["tests/test_sandbox.py"]["skips"] == ["bubblewrap is not installed"]
    assert files["tests/test_sandbox.py"]["passed"] == 1


def test_a_module_that_failed_to_collect_is_named_by_its_file():
    """pytest writes a collection error as a case with no classname, named by the module's dotted path."""
    junit = """<testsuites><testsuite><testcase classname="" name="tests.bench.test_scale" time="0">
      <error message="collection failure">ModuleNotFoundError: No module named 'jupytext'</error></testcase>
      </testsuite></testsuites>"""
    files = gpu_tests.per_file(junit)
    assert list(files) == ["tests/bench/test_scale.py"] and files["tests/bench/test_scale.py"]["failed"] == 1


def test_table_totals():
    result = {"device": {"name": "GPU"}, "date": "2026-11-28", "torch": "2.11", "triton": "3.6",
              "files": gpu_tests.per_file(JUNIT)}
    assert "| all | 2 | 1 | 1 |" in gpu_tests.table(result)


def test_empty_run_is_an_error():
    with pytest.raises(SystemExit, match="no <testcase>"):
        gpu_tests.per_file("<testsuites><testsuite/></testsuites>")


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_tests.main([str(tmp_path / "none.xml")])
    assert "no such file" in capsys.readouterr().err
