"""Notebook 08's exercise (08.flash_attention_ws): graded on a Hopper GPU alone and skipped elsewhere with the
reason, never failed for the hardware; optional (0 points); its performance asks for a warp-specialized kernel.
On a Hopper GPU the solution notebook passes through the checker, the release's stub reads "not done yet", and
notebook 05's kernel, right and fast but not warp-specialized, fails performance for that reason alone."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from autograder import check, config, runtime
from autograder import specs as registry
from autograder.criteria import codegen
from autograder.measure.meters import CompiledFigures
from autograder.measure import capability
from autograder.measure.capability import Capability
from autograder.publish import cards
from autograder.report import SKIPPED

EX = "08.flash_attention_ws"
NB = "08_hopper_attention"
GIB = 2**30


def _gpu(major, minor, name):
    return Capability(name, major, minor, 80 * GIB, 79 * GIB)


def test_the_exercise_is_notebook_05s_op_bound_to_hopper_and_optional():
    ex, op = registry.get(EX), registry.get("05.flash_attention")
    assert (ex.notebook, ex.function, ex.hardware, ex.optional, ex.warp_specialized) == (
        NB, "flash_attention_ws", "hopper", True, True)
    assert ex.reference is op.reference and ex.tolerance == op.tolerance and ex.perf_baseline is op.perf_baseline
    assert ex.criteria == ("correctness", "precision", "performance") and ex.n_params == 4
    # The copy engine reads contiguous tensors: the 16-bit cases go through the warp-specialized kernel; one
    # strided shape keeps the fallback honest.
    assert [s.layout for s in ex.shapes].count("bnhd") == 1
    assert ex.bars["min_fraction_of_peak"] <= 1.0  # SDPA itself passes: it is at 1.0 of its own speed


@pytest.mark.parametrize("cap, words", [
    (None, "no GPU: Triton's interpreter"),
    (_gpu(8, 0, "NVIDIA A100-SXM4-80GB"), "NVIDIA A100-SXM4-80GB, compute capability 8.0"),
    (_gpu(8, 9, "NVIDIA L4"), "NVIDIA L4, compute capability 8.9"),
    (_gpu(10, 0, "NVIDIA B200"), "another path that the course has not measured"),
], ids=["cpu", "ampere", "ada", "blackwell"])
def test_off_hopper_the_reason_names_the_machine(cap, words):
    why = capability.missing_hardware("hopper", cap)
    assert words in why and "compute capability 9.x" in why and "Nothing is held against you" in why
    assert capability.missing_hardware("hopper", _gpu(9, 0, "NVIDIA H100 80GB HBM3")) is None
    assert capability.missing_hardware("", cap) is None


def test_a_hopper_with_its_paths_switched_off_says_so(monkeypatch):
    # what tests/notebooks/test_small_gpu.py simulates: capability reads 8.9
    monkeypatch.setenv(runtime.NO_TMA_ENV, "1")
    why = capability.missing_hardware("hopper", _gpu(8, 9, "NVIDIA H100 80GB HBM3"))
    assert "switched off by FUSION_COURSE_NO_TMA" in why
    with pytest.raises(ValueError, match="unknown hardware 'tpu'"):
        capability.missing_hardware("tpu", None)


@pytest.mark.parametrize("cap", [None, _gpu(8, 0, "NVIDIA A100-SXM4-80GB")], ids=["cpu", "ampere"])
def test_off_hopper_every_criterion_is_skipped_not_failed(monkeypatch, capsys, cap):
    monkeypatch.setattr(capability, "current", lambda: cap)

    def flash_attention_ws(q, k, v, causal=False):
        raise NotImplementedError()  # not even written: still nothing held against the student

    report = check(EX, flash_attention_ws)
    assert [r.status for r in report.results] == [SKIPPED] * 3 and report.passed
    assert all(r.message == capability.missing_hardware("hopper", cap) for r in report.results)
    report.assert_passed("correctness")  # what a graded cell runs: it prints one line and raises nothing
    assert capsys.readouterr().out.startswith(f"{EX} correctness: skip - not graded here")
    assert check(EX, flash_attention_ws, criteria="performance")["performance"].status == SKIPPED


def test_the_card_says_where_it_is_graded_that_it_counts_no_points_and_what_performance_asks():
    table = cards.graded_table(registry.get(EX), config.load(config.DEFAULT_PATH))
    assert "Graded only on a Hopper GPU (compute capability 9.x" in table
    assert "carry 0 points" in table and "must be warp-specialized by Triton" in table
    assert "skipped in the CPU interpreter" not in table  # the hardware line says it for every criterion
    other = cards.graded_table(registry.get("05.flash_attention"), config.load(config.DEFAULT_PATH))
    assert "Graded only on" not in other and "0 points" not in other and "warp-specialized" not in other


def _kernel(ttgir: str, warps: int):
    return SimpleNamespace(name="_flash_attention_ws_kernel", n_regs=168, n_spills=0, asm={"ttgir": ttgir},
                           metadata=SimpleNamespace(num_warps=warps, shared=164112))


def test_the_compiled_code_says_whether_a_loop_was_warp_specialized():
    split = CompiledFigures.of(_kernel("%0 = ttg.warp_specialize(%a) ...", 12), {"BLOCK_M": 64, "BLOCK_N": 128})
    plain = CompiledFigures.of(_kernel("scf.for ...", 8), {"BLOCK_M": 128})
    assert split.warp_specialized and (split.num_warps, split.shared_bytes) == (12, 164112)
    assert not plain.warp_specialized and "num_warps=8" in plain.settings
    assert codegen.not_warp_specialized([plain, split]) is None
    why = codegen.not_warp_specialized([plain])
    assert "BLOCK_M=128, num_warps=8" in why and "warp_specialize=True" in why and "num_warps=4" in why
    assert "no compiled Triton kernel" in codegen.not_warp_specialized([])
    interpreted = SimpleNamespace(name="k", n_regs=0, n_spills=0)  # no metadata nor asm: nothing claimed
    assert not CompiledFigures.of(interpreted, {}).warp_specialized


# ----------------------------------------------------------------------------------------------- on Hopper


def _on_hopper():
    if not runtime.has_gpu():
        pytest.skip("needs a CUDA GPU")
    why = capability.missing_hardware("hopper", capability.current())
    if why:
        pytest.skip(why)


def _checked(path):
    out = subprocess.run([sys.executable, "-m", "autograder", "check", str(path), "--json"], capture_output=True,
                         text=True, timeout=1800, check=False)
    [result] = json.loads(out.stdout)
    return out.returncode, result


@pytest.mark.gpu
@pytest.mark.slow
def test_the_solution_notebook_passes_on_hopper(root):
    _on_hopper()
    code, result = _checked(root / "solutions" / NB / f"{NB}.ipynb")
    assert not result["cell_errors"], result["cell_errors"]
    [report] = [r for r in result["reports"] if r["exercise"] == EX]
    statuses = {c["name"]: (c["status"], c["message"][:400]) for c in report["results"]}
    assert all(status == "passed" for status, _ in statuses.values()), statuses
    assert code == 0 and result["passed"]


@pytest.mark.gpu
@pytest.mark.slow
def test_the_release_stub_is_reported_as_not_written_on_hopper(root):
    _on_hopper()
    code, result = _checked(root / "course" / NB / f"{NB}.ipynb")
    # A stub is "not started": named once in the result's list, not graded as a failure (as test_checker.py's).
    assert code == 1 and EX in result["not_started"], result
    assert not [r for r in result["reports"] if r["exercise"] == EX]
    assert not result["passed"]


@pytest.mark.gpu
def test_notebook_05s_kernel_is_right_but_fails_performance_for_want_of_warp_specialization():
    _on_hopper()
    from kernels.flash_attention import flash_attention_tma

    def flash_attention_ws(q, k, v, causal=False):
        return flash_attention_tma(q, k, v, causal)

    report = check(EX, flash_attention_ws, criteria=["correctness", "performance"])
    assert report["correctness"].status == "passed", report["correctness"].message
    perf = report["performance"]
    assert perf.status == "failed" and "was warp-specialized by Triton" in perf.message, perf.message
    assert perf.figures["warp_specialized"] is False and perf.figures["fraction_of_peak"] >= perf.figures["threshold"]
