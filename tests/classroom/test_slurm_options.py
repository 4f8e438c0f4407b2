"""grade-class's options for the size of a Slurm job (--slurm-cpus, --slurm-mem): read from the command line, refused
with a clear message when they make no sense, and passed through to the Slurm job submitit writes. No cluster is
needed: the class run is replaced by a recorder, and submitit's Slurm executor only writes its parameters."""

from __future__ import annotations

import shutil

import pytest

from autograder import __main__ as cli
from autograder.classroom import grade_class as class_module
from autograder.classroom import runners


@pytest.fixture
def recorded(monkeypatch):
    """Runs `python -m autograder ARGS` with the class run replaced: returns the arguments it was called with."""
    calls = []
    monkeypatch.setattr(class_module, "grade_class", lambda *args, **kwargs: calls.append(kwargs) or [])

    def run(*argv):
        assert cli.main(["grade-class", "01_hbm_cost_model", *argv]) == 0
        return calls[-1]

    return run


def test_cpus_and_memory_reach_the_cluster_options(recorded):
    options = recorded("--cluster", "slurm", "--slurm-cpus", "8", "--slurm-mem", "512M")["cluster_options"]
    assert options["cpus_per_task"] == 8 and options["mem_gb"] == 0.5
    assert options["gpus_per_task"] == 1 and options["time_min"] == 60  # the others as they were
    defaults = recorded("--cluster", "slurm")["cluster_options"]
    assert defaults["cpus_per_task"] == 4 and defaults["mem_gb"] == 32.0
    assert recorded("--slurm-cpus", "8")["cluster_options"] is None  # no cluster, no job to size


@pytest.mark.parametrize("size, gb", [("16G", 16), ("16GB", 16), ("16 g", 16), ("512M", 0.5), ("1.5T", 1536),
                                      ("2GiB", 2)])
def test_memory_sizes_are_read_as_slurm_reads_them(size, gb):
    assert cli.memory_gb(size) == gb


@pytest.mark.parametrize("argv, message", [
    (["--slurm-mem", "16"], "argument --slurm-mem: a memory size with its unit, such as 16G or 512M"),
    (["--slurm-mem", "lots"], "argument --slurm-mem: a memory size with its unit"),
    (["--slurm-mem", "0.5K"], "argument --slurm-mem: a memory size with its unit"),
    (["--slurm-mem", "0M"], "argument --slurm-mem: at least 1M of memory a job"),
    (["--slurm-cpus", "0"], "argument --slurm-cpus: at least 1, not 0"),
    (["--slurm-cpus", "two"], "argument --slurm-cpus: a whole number, not 'two'"),
])
def test_bad_sizes_are_refused_before_anything_runs(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(class_module, "grade_class", lambda *a, **k: pytest.fail("graded despite a bad option"))
    with pytest.raises(SystemExit) as stop:
        cli.main(["grade-class", "01_hbm_cost_model", "--cluster", "slurm", *argv])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_help_shows_both_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["grade-class", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help at the terminal's width
    assert "--slurm-cpus N" in shown and "CPUs per job (default 4)" in shown
    assert "--slurm-mem SIZE" in shown and "16G, 512M, 1T (default 32G)" in shown


def test_the_slurm_job_asks_for_them(tmp_path, monkeypatch):
    which = shutil.which
    monkeypatch.setattr(runners.shutil, "which", lambda name: "/usr/bin/sbatch" if name == "sbatch" else which(name))
    executor = runners.submitit_executor(tmp_path, "slurm", cpus_per_task=8, mem_gb=0.5)
    params = executor._executor.parameters  # what submitit writes as #SBATCH lines
    assert params["cpus_per_task"] == 8 and params["mem"] == "512MB"
    assert runners.submitit_executor(tmp_path, "slurm", mem_gb=16)._executor.parameters["mem"] == "16GB"
    with pytest.raises(ValueError, match="--slurm-cpus must be at least 1"):
        runners.submitit_executor(tmp_path, "slurm", cpus_per_task=0)
    with pytest.raises(ValueError, match="--slurm-mem must be at least 1M"):
        runners.submitit_executor(tmp_path, "slurm", mem_gb=0)
