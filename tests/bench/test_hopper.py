"""python -m bench.hopper without a GPU: its plan, its refusal, the sweep machinery (compiles cut at a
deadline, failures named, wrong results told from right ones) and the verdicts it writes from measured rows."""

import json
import time

import pytest
import torch
from triton.runtime import _async_compile

from autograder import runtime
from bench import hopper, hopper_training, sweep


def test_the_plan_names_every_family_and_why_settings_are_left_out(capsys):
    assert hopper.main(["--plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert set(plan) == {f"{f} D={d}" for f in hopper.FAMILIES for d in (128, 64)}
    assert plan["portable D=128"]["settings"][0] == "128x64 s3 w8"  # the course's own setting first
    assert "shared memory" in plan["tma D=128"]["left_out"]["128x128 s4 w8"]
    assert all("warp_specialize" in s for s in plan["ws D=128"]["settings"])


@pytest.mark.skipif(runtime.has_gpu(), reason="the refusal is what a machine without a GPU sees")
def test_without_a_gpu_the_run_is_refused(capsys):
    assert hopper.main(["--parts", "forward"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_an_unknown_part_is_named():
    with pytest.raises(SystemExit):
        hopper.main(["--parts", "forward,fwd"])


class _Kernel:
    """What compile_facts reads of a compiled kernel."""

    def __init__(self, shared=1024, warps=4, specialized=False):
        self.metadata = type("M", (), {"shared": shared, "num_warps": warps})()
        self.asm = {"ttgir": "ttg.warp_specialize" if specialized else "tt.func"}


def _fake_compile(seconds, key, fail=False, **kernel):
    """A compile submitted to the active triton.AsyncCompileMode, as a kernel's warmup does."""
    def work():
        time.sleep(seconds)
        if fail:
            raise RuntimeError("PassManager::run failed\n  pipeline: ...\nerror: unsupported load type")
        return _Kernel(**kernel)

    return lambda: _async_compile.active_mode.get().submit(key, work, lambda k: None)


def _raises(exc):
    def call():
        raise exc

    return call


def test_compiles_late_for_the_deadline_are_dropped_and_failures_named():
    cands = [sweep.Candidate("f", {"n": 1}, compile=_fake_compile(0.05, "a", fail=True), run=None),
             sweep.Candidate("f", {"n": 2}, compile=_fake_compile(0.5, "b", warps=12, specialized=True), run=None),
             sweep.Candidate("f", {"n": 3}, compile=_fake_compile(0.05, "c"), run=None),
             sweep.Candidate("f", {"n": 4}, compile=_raises(ValueError("not here")), run=None)]
    seconds = sweep.compile_all(cands, deadline=time.perf_counter() + 0.25, threads=1)
    assert 0.5 <= seconds < 2  # the running compile finishes; the queued one is not waited for
    assert (cands[0].status, cands[0].why) == ("not compiled", "RuntimeError: error: unsupported load type")
    assert cands[1].status == "compiled"
    assert cands[1].facts == {"shared_bytes": 1024, "num_warps": 12, "warp_specialized": True}
    assert (cands[2].status, cands[2].why) == ("not compiled", "time budget spent before its turn")
    assert (cands[3].status, cands[3].why) == ("not compiled", "ValueError: not here")


def test_a_check_tells_right_from_wrong_from_failed():
    ref = torch.ones(4)

    def make(run):
        return sweep.Candidate("f", {}, compile=None, run=run, status="compiled")

    right, wrong, nan, broken = (make(lambda: ref + 1e-4), make(lambda: ref + 1), make(lambda: ref * float("nan")),
                                 make(_raises(RuntimeError("out of resources: shared memory"))))
    for c in (right, wrong, nan, broken):
        sweep.check(c, lambda out: float((out - ref).abs().max()), 1e-2)
    assert right.ok and right.error == pytest.approx(1e-4, rel=1e-2)
    assert wrong.status == "wrong" and "above the tolerance 0.01" in wrong.why
    assert nan.status == "wrong"
    assert broken.status == "failed to run" and "shared memory" in broken.why
    right.ms, wrong.ms = 2.0, 1.0
    assert sweep.best([right, wrong, nan]) == [right]  # only what was checked right is ranked


def _forward(shape, course, best, sdpa=1.0):
    ms = {"course": sdpa / course, "tma 128x128 s3 w8": sdpa / best, "SDPA cudnn": sdpa, "SDPA flash": 2 * sdpa}
    return hopper._forward_row((4, 16, 4096, 128), "bf16", shape, ms, 1e12, {}, {}, {})


def test_goals_follow_the_worst_shape():
    rows = [_forward(False, 0.8, 0.97), _forward(True, 0.82, 0.93)]
    assert rows[0]["best_sdpa"] == "SDPA cudnn" and rows[0]["family_best"] == {"course": 0.8, "tma": 0.97}
    ce = {"part": "cross_entropy", "ms": {}, "time_over_compile": {"course triton": 1.7, "tma rows=1024": 0.98,
                                                                   "capstone cuBLAS": 0.95},
          "memory_over_compile": {"course triton": 0.45, "tma rows=1024": 0.43, "capstone cuBLAS": 0.51}}
    bwd = {"part": "backward", "shape": "x", "best_fraction": 0.86, "fraction_of_best_sdpa": {"course": 0.7}}
    goals = hopper.goals(rows + [ce, bwd])
    assert not goals["forward"]["met"] and goals["forward"]["worst"] == 0.93
    assert goals["forward"]["worst_shape"].endswith("causal=True") and goals["forward"]["course_worst"] == 0.8
    assert goals["cross_entropy"]["met"] and goals["cross_entropy"]["versions_meeting"] == ["tma rows=1024"]
    assert goals["backward"]["met"] and goals["backward"]["course_worst"] == 0.7
    slow = dict(ce, time_over_compile={"tma rows=1024": 1.02, "capstone cuBLAS": 0.95})
    assert not hopper_training.goals([slow])["cross_entropy"]["met"]  # cuBLAS does not count: Triton only


def test_the_report_says_which_goals_are_not_met():
    rows = [_forward(False, 0.8, 0.97)]
    result = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "date": "2026-11-26", "torch": "2.11", "triton": "3.6",
              "rows": rows, "goals": hopper.goals(rows), "seconds": {"forward": {"compile": 30.0}}}
    text = hopper.markdown(result)
    row = "| 4,16,4096,128 bf16 causal=False | SDPA cudnn 1000 | 0.80 | - | 0.97 | - | tma 128x128 s3 w8 0.97 |"
    assert row in text
    assert "- forward: met" in text


def test_only_kernels_compiled_warp_specialized_count_as_such():
    """The ws family's twins without the flag are the same loop with no producer warp group: the report's
    warp-specialized column leaves them out, and lists every warp-specialized setting the sweep checked."""
    twin, flagged = "ws 128x64 s3 w8 warp_specialize=False", "ws 64x128 s2 w4 warp_specialize=True"
    ms = {"course": 1.25, twin: 1.1, flagged: 2.0, "SDPA cudnn": 1.0}
    row = hopper._forward_row((4, 16, 4096, 128), "bf16", False, ms, 1e12, {}, {}, {})
    assert row["family_best"] == {"course": 0.8, "ws": 0.5}
    del ms[flagged]
    row = hopper._forward_row((4, 16, 4096, 128), "bf16", False, ms, 1e12, {}, {}, {})
    assert "ws" not in row["family_best"] and row["best_triton"] == twin  # still a Triton kernel, just not ws
    row["family_best"]["ws"] = 0.91  # as a run recorded before the twins were told apart: recomputed
    sweeps = {"ws D=128 causal=False bf16": [
        {"family": "ws", "setting": {"BLOCK_M": 64, "BLOCK_N": 128, "WARP_SPECIALIZE": True, "num_warps": 4,
                                     "num_stages": 2}, "status": "checked", "ms": 4.0, "warp_specialized": True},
        {"family": "ws", "setting": {"BLOCK_M": 128, "BLOCK_N": 128, "WARP_SPECIALIZE": True, "num_warps": 4,
                                     "num_stages": 2}, "status": "wrong", "why": "error 1 above the tolerance 0.03",
         "warp_specialized": True},
        {"family": "ws", "setting": {"BLOCK_M": 128, "BLOCK_N": 64, "WARP_SPECIALIZE": False, "num_warps": 8,
                                     "num_stages": 3}, "status": "checked", "ms": 1.1, "warp_specialized": False}]}
    text = hopper.markdown({"device": {"name": "NVIDIA H100"}, "date": "2026-11-26", "torch": "2.11",
                            "triton": "3.6", "rows": [row], "goals": hopper.goals([row]),
                            "forward": {"sweeps": sweeps}})
    assert "| 4,16,4096,128 bf16 causal=False | SDPA cudnn 1000 | 0.80 | - | - | - |" in text
    assert "| 4,16,4096,128 bf16 causal=False | 64x128 s2 w4 warp_specialize=True | right | 4.0 | 0.25 |" in text
    assert "| 128x128 s2 w4 warp_specialize=True | wrong: error 1 above the tolerance 0.03 | - | - |" in text
    assert "128x64 s3 w8 warp_specialize=False |" not in text


@pytest.fixture
def tiny_run(monkeypatch):
    """The three parts at tiny shapes on the CPU: kernels in the interpreter (float16), compiles skipped (Triton
    compiles nothing there), a clock for a timer and the child process run in this one."""
    if runtime.has_gpu():
        pytest.skip("the end-to-end run on a GPU is python -m bench.hopper itself")
    for module in (hopper, hopper_training):
        monkeypatch.setattr(module, "DEVICE", "cpu")
        monkeypatch.setattr(module, "DTYPES", ("fp16",))
        monkeypatch.setattr(module, "interleaved_times", lambda calls, rounds, rep: {n: [1.0, 1.1] for n in calls})
    monkeypatch.setattr(hopper, "SWEEP", (1, 2, 64))
    monkeypatch.setattr(hopper, "SWEEP_DTYPE", "fp16")
    monkeypatch.setattr(hopper, "ATTENTION_SHAPES", ((1, 2, 64, 64), (1, 1, 96, 128)))
    space = hopper.family_space
    monkeypatch.setattr(hopper, "family_space", lambda family, d: (space(family, d)[0][:2], space(family, d)[1]))
    monkeypatch.setattr(hopper, "_probe_in_child",
                        lambda family, clock, progress: {**hopper.sweep_forward((family,), clock, progress),
                                                         "probe": "ok"})
    monkeypatch.setattr(hopper_training, "SWEEP_DTYPE", "fp16")
    monkeypatch.setattr(hopper_training, "CE_DTYPE", "fp16")
    monkeypatch.setattr(hopper_training, "BACKWARD_SHAPES", ((1, 1, 64, 32),))
    monkeypatch.setattr(hopper_training, "CE_SHAPE", (64, 32, 200))
    monkeypatch.setattr(hopper_training, "TMA_ROWS", (32,))
    monkeypatch.setattr(hopper_training, "peak_extra_bytes", lambda fn: (fn(), 2**20))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)

    def compiled(cands, deadline, threads=None):
        for c in cands:
            c.status = "compiled" if c.status == "planned" else c.status
        return 0.0

    monkeypatch.setattr(sweep, "compile_all", compiled)
    monkeypatch.setattr(sweep, "grader_ms", lambda fn, warmup, rep: (fn(), 1.0)[1])


@pytest.mark.slow
def test_every_part_runs_end_to_end_and_its_record_is_json(tiny_run):
    clock, said = sweep.Clock(600), []
    rows, record = hopper.forward_part(clock, said.append)
    assert len(rows) == 2 * 2  # two shapes, causal and not, float16
    assert {r["best_sdpa"] for r in rows} == {"SDPA default"}  # the forced backends do not run on a CPU
    assert all(r["missing"]["SDPA cudnn"] for r in rows)
    assert {"course", "portable", "tma", "ws"} <= set(rows[0]["family_best"])
    assert record["ws_probe"] == "ok" and record["finalists"]
    b_rows, b_record = hopper_training.backward_part(clock, said.append)
    assert [set(r["fraction_of_best_sdpa"]) for r in b_rows] == [{"course", "re-tuned", "one-pass"}] * 2
    swept = b_record["sweeps"]["causal=False fp16"]
    assert any(c["status"] == "failed to run" for c in swept if c["setting"].get("atomic") == "tma")  # no GPU
    ce_rows, _ = hopper_training.cross_entropy_part(clock, said.append)
    timed = {"eager", "torch.compile", "course triton", "capstone cuBLAS", "tma rows=32"}
    assert set(ce_rows[0]["ms"]) >= timed, ce_rows[0]["missing"]
    assert max(ce_rows[0]["errors"].values()) < 1e-2
    result = {"device": {"name": "CPU"}, "date": "today", "torch": "x", "triton": "y",
              "rows": rows + b_rows + ce_rows, "goals": hopper.goals(rows + b_rows + ce_rows),
              "forward": record, "backward": b_record}
    json.loads(json.dumps(result))
    assert "Backward, fraction of the best SDPA backend's speed" in hopper.markdown(result)
