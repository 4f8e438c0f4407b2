"""Every notebook on a 16 GB GPU without Hopper's copy engine, simulated on a larger one: PyTorch's allocator
capped at 16 GiB (FUSION_COURSE_MEMORY_GB) and the TMA paths switched off (FUSION_COURSE_NO_TMA), as on an L4 or
an RTX 4080. Every exercise must pass, and no demonstration may stop on an out-of-memory error."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import runtime

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))


def test_a_bad_memory_cap_is_named():
    with pytest.raises(ValueError, match="FUSION_COURSE_MEMORY_GB='sixteen': expected a number of GiB"):
        runtime._cap_memory("sixteen")


def test_without_a_gpu_everything_fits_in_host_memory(monkeypatch):
    monkeypatch.setattr(runtime, "has_gpu", lambda: False)
    assert runtime.fits(2**40) and runtime.free_gpu_bytes() == 0


def test_the_tma_switch_reads_the_environment(monkeypatch):
    monkeypatch.setenv("FUSION_COURSE_NO_TMA", "1")
    assert not runtime.tma_allowed()
    monkeypatch.setenv("FUSION_COURSE_NO_TMA", "0")
    assert runtime.tma_allowed()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solution_notebook_passes_on_a_16_gb_card_without_tma(path):
    import torch

    if torch.cuda.get_device_properties(0).total_memory < 16 * 2**30:
        pytest.skip("the GPU has less than the 16 GiB simulated")
    env = dict(os.environ, FUSION_COURSE_MEMORY_GB="16", FUSION_COURSE_NO_TMA="1")
    out = subprocess.run([sys.executable, "-m", "autograder", "check", str(path), "--json"], env=env,
                         capture_output=True, text=True, timeout=1800)
    [result] = json.loads(out.stdout)
    assert not result["cell_errors"], result["cell_errors"]
    failed = [(r["exercise"], c["name"], c["message"][:300]) for r in result["reports"] for c in r["results"]
              if c["status"] == "failed"]
    assert result["passed"] and not failed, failed
