"""The judge: grading for credit keeps the course's seed, the expected values, the tolerances and the bars in a
process of their own. A submission that hunts for them finds nothing, and one that patches the grader in its own
process does not change the verdict; the same submissions graded without a judge show that the hunt and the
patches work where those things live in the graded process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import autograder  # noqa: F401  first: picks the interpreter before any kernel is defined
from autograder import config, specs
from autograder.checker import notebook as checker
from autograder.judge import bars
from autograder.judge.launch import JudgeProcess, judge_said, overrule
from autograder.link import wire
from autograder.link.session import ENV_VAR as JUDGE_ENV
from autograder.report import FAILED, PASSED, SKIPPED, CriterionResult, Report

SEED = 1357924680
BAR = 0.8765

# Hunts for what must stay out of reach, knowing only its digests: in every object the collector tracks (during
# the graded calls and after), the environment, the files of its folder, /proc/self/environ; and for float64
# tensors shaped like the output (a reference) alive while it is called.
HUNT = '''
import functools, gc, hashlib, json, os, re, sys
from pathlib import Path

import torch

from autograder import check
from kernels.rmsnorm import rmsnorm

WANTED = json.loads(sys.argv[1])
found, calls = set(), [0]


@functools.cache  # each scan meets mostly the strings of the one before: each is read and hashed once
def wanted_in(text):
    parts = {p for token in re.findall(r"[\\w./-]+", text) for p in (token, *re.findall(r"[0-9.]+", token))}
    digests = {hashlib.sha256(part.encode()).hexdigest() for part in parts}
    return frozenset(what for what, d in WANTED.items() if d in digests)


def look(text):
    found.update(wanted_in(text))


def scan(shape=None):
    for obj in gc.get_objects():
        if shape is not None and isinstance(obj, torch.Tensor) and obj.dtype == torch.float64 \\
                and tuple(obj.shape) == shape:
            found.add("expected values")
        if isinstance(obj, dict):
            values = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            values = list(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            values = list(getattr(obj, "__dict__", {}).values())
        else:
            continue
        values_in(values, 3)


def values_in(values, depth):
    """Look at every number and string in values, and in the containers among them (the collector does not
    track a dict holding only numbers and strings)."""
    for v in values:
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            look(str(v))
        elif depth and isinstance(v, dict):
            values_in(list(v.values()), depth - 1)
        elif depth and isinstance(v, (list, tuple)):
            values_in(list(v), depth - 1)


def hunter(x, weight, eps):
    calls[0] += 1
    if calls[0] % 16 == 1:
        scan(tuple(x.shape))
    return rmsnorm(x, weight, eps)


report = check("02.rmsnorm", hunter, criteria=["correctness", "precision"])
scan()
look(" ".join(f"{k}={v}" for k, v in os.environ.items()))
look(open("/proc/self/environ", "rb").read().decode(errors="replace").replace("\\0", " "))
for p in Path(".").rglob("*"):
    if p.is_file() and p.stat().st_size < 10**7:
        look(p.read_bytes().decode(errors="replace"))
print(json.dumps({"found": sorted(found), "passed": report.passed, "calls": calls[0]}))
'''

# Beats the in-process defences (integrity's check) while it is graded, loosens every tolerance, the precision
# bound and the bars in its own process, and computes 1.5 times the right output with the course's kernel.
PATCHED = """
from autograder import specs
from autograder.guard import integrity
from kernels.rmsnorm import rmsnorm as _kernel


def _loosen():
    integrity.verify = lambda: None
    ex = specs.get("02.rmsnorm")
    for dtype in list(ex.tolerance):
        ex.tolerance[dtype] = (1e9, 1e9)
    object.__setattr__(ex, "precision_factor", 1e9)
    object.__setattr__(ex, "bars", {"min_fraction_of_peak": 0.0, "min_speedup_over_eager": 0.0})


def rmsnorm(x, weight, eps):
    _loosen()
    return _kernel(x, weight * 1.5, eps)
"""

# ... graded by check(), and reporting a timing below the course's bar as passed.
TAMPER = PATCHED + """
import json

from autograder import check
from autograder.link import session
from autograder.report import CriterionResult

report = check("02.rmsnorm", rmsnorm, criteria=["correctness", "precision"])
timed = session.confirm(specs.get("02.rmsnorm"), CriterionResult("performance", "passed", "timed",
                                                                  {"fraction_of_peak": 0.85, "speedup_over_eager": 3.0}))
print(json.dumps({**{r.name: r.status for r in report.results}, "performance": timed.status}))
"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def course(tmp_path):
    """A course's grading file (a secret seed, one trial, a bar of its own) and a student's empty folder."""
    grading = tmp_path / "course" / "grading.toml"
    grading.parent.mkdir()
    grading.write_text(f'trials = 1\nsecret_seed = {SEED}\nrequire_performance = false\n'
                       f'[performance."02.rmsnorm"]\nmin_fraction_of_peak = {BAR}\n')
    work = tmp_path / "work"
    work.mkdir()
    return grading, work


def _student(work, script: str, env: dict, *args) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _without_judge(grading) -> dict:
    env = dict(os.environ, **{config.ENV_VAR: str(grading)})
    env.pop(JUDGE_ENV, None)
    return env


# On an H200 (torch 2.11) the hunting process died of SIGSEGV before it reported, most likely in its walk through the
# __dict__ of every object the collector tracks, CUDA-backed ones among them (not traced further). What the judge keeps
# out of reach does not depend on the device, so the hunt runs where it can finish: without a GPU.
@pytest.mark.skipif(torch.cuda.is_available(), reason="the hunting process itself died of SIGSEGV on a CUDA machine")
def test_a_hunt_for_the_grading_secrets_finds_nothing_in_a_judged_process(course):
    grading, work = course
    wanted = json.dumps({"seed": _digest(str(SEED)), "bar": _digest(str(BAR)), "grading file": _digest(str(grading))})
    with JudgeProcess(work / ".judge.sock", grading) as judge:
        judged = _student(work, HUNT, judge.student_env(_without_judge(grading)), wanted)
        verdicts = judge.close()
    assert judged["passed"] and judged["calls"] > 20, judged
    assert judged["found"] == [], judged
    assert judge_said(verdicts, "02.rmsnorm", "correctness") == PASSED
    assert judge_said(verdicts, "02.rmsnorm", "precision") == PASSED
    # The same hunt where the grading file is the process's own (a check before the judge): it finds them all.
    local = _student(work, HUNT, _without_judge(grading), wanted)
    assert {"seed", "bar", "grading file"} <= set(local["found"]), local


def test_patches_in_the_graded_process_do_not_change_the_judges_verdict(course):
    grading, work = course
    with JudgeProcess(work / ".judge.sock", grading) as judge:
        judged = _student(work, TAMPER, judge.student_env(_without_judge(grading)))
        verdicts = judge.close()
    assert judged == {"correctness": FAILED, "precision": FAILED, "performance": FAILED}, judged
    assert [judge_said(verdicts, "02.rmsnorm", c) for c in ("correctness", "precision", "performance")] == [FAILED] * 3
    # Without a judge the patches win: the same wrong kernel passes.
    assert _student(work, TAMPER, _without_judge(grading)) == {"correctness": PASSED, "precision": PASSED,
                                                              "performance": PASSED}


def test_the_checker_given_a_course_file_takes_the_judges_verdict(course, monkeypatch):
    grading, work = course
    cells = [("import autograder\nfrom autograder import check\n", {}),
             (PATCHED, {}),
             ('check("02.rmsnorm", rmsnorm).assert_passed("correctness")\n',
              {"nbgrader": {"grade": True, "solution": False, "grade_id": "test_rmsnorm_correctness", "points": 1}})]
    nb = {"cells": [{"cell_type": "code", "source": src, "metadata": meta, "outputs": [], "execution_count": None}
                    for src, meta in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = work / "tampered.ipynb"
    path.write_text(json.dumps(nb))
    monkeypatch.setenv(config.ENV_VAR, str(grading))
    result = checker.run(path, criteria=["correctness"], timeout=900)
    [report] = result["reports"]
    assert report["correctness"].status == FAILED, report  # the judge's verdict, shown by the notebook's process
    assert "differ from the reference" in report["correctness"].message
    monkeypatch.setenv(config.ENV_VAR, str(config.DEFAULT_PATH))  # a self-learner's check: no judge, the patch wins
    [report] = checker.run(path, criteria=["correctness"], timeout=900)["reports"]
    assert report["correctness"].status == PASSED, report


def test_a_view_crosses_the_wire_as_the_same_view_and_nothing_is_unpickled():
    import socket

    a, b = socket.socketpair()
    base = torch.arange(600, dtype=torch.float16).reshape(20, 30)
    views = [base.t(), base[:, ::2], base[3:, 5:], torch.tensor(7, dtype=torch.int64), torch.empty(0, 5)]
    wire.send(a, {"names": ["x"]}, views)
    header, got = wire.recv(b)
    assert header == {"names": ["x"]}
    for sent, came in zip(views, got):
        assert came.dtype == sent.dtype and came.stride() == sent.stride() and torch.equal(came, sent)
    forged = {"dtype": "float32", "shape": [4], "stride": [1], "offset": 2, "nbytes": 16}  # past its storage's end
    head = json.dumps({"tensors": [forged]}).encode()
    a.sendall(len(head).to_bytes(8, "big") + head + bytes(16))
    with pytest.raises(wire.WireError, match="past the end"):
        wire.recv(b)


def test_the_bars_are_the_courses_whatever_the_result_says(course):
    grading, _ = course
    cfg = config.load(grading)
    ex = specs.get("02.rmsnorm")

    def timed(frac, speedup=3.0, status=PASSED):
        return CriterionResult("performance", status, "timed", {"fraction_of_peak": frac, "speedup_over_eager": speedup})

    assert bars.confirm(ex, cfg, timed(0.9)).status == PASSED
    low = bars.confirm(ex, cfg, timed(0.85))
    assert low.status == FAILED and f"the course's bar is {BAR:.2f}" in low.message
    assert bars.confirm(ex, cfg, timed(0.9, speedup=1.0)).status == FAILED
    assert bars.confirm(ex, cfg, timed(0.9, status=FAILED)).status == FAILED
    assert bars.confirm(ex, cfg, CriterionResult("performance", PASSED, "timed", {})).status == FAILED
    required = config.GradingConfig(require_performance=True)
    skipped = CriterionResult("performance", SKIPPED, "not measured (no GPU)")
    assert bars.confirm(ex, required, skipped).status == FAILED
    assert bars.confirm(ex, cfg, skipped).status == SKIPPED


def test_a_pass_the_judge_did_not_make_is_overruled():
    verdicts = [{"exercise": "02.rmsnorm", "criterion": "correctness", "status": FAILED},
                {"exercise": "02.rmsnorm", "criterion": "correctness", "status": PASSED},
                {"exercise": "02.rmsnorm", "criterion": "precision", "status": FAILED}]
    report = Report("02.rmsnorm", [CriterionResult(c, PASSED, "fine") for c in ("correctness", "precision", "fusion")]
                    + [CriterionResult("performance", SKIPPED, "no GPU")])
    overrule([report], verdicts)
    assert [r.status for r in report.results] == [PASSED, FAILED, PASSED, FAILED]
    assert "the judge failed this criterion" in report["precision"].message
    assert "the judge made no verdict on this criterion" in report["performance"].message


def test_a_graded_cell_that_passed_without_the_judge_scores_nothing():
    nbformat = pytest.importorskip("nbformat")
    utils = pytest.importorskip("nbgrader.utils")
    from autograder.classroom.gradebook import judge_disagrees

    def graded(criterion):
        cell = nbformat.v4.new_code_cell(f'check("01.fused_chain", fused_chain).assert_passed("{criterion}")')
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2,
                                     "grade_id": f"test_fused_chain_{criterion}", "schema_version": 3}
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                               text=f"01.fused_chain {criterion}: PASS - all cases match\n")]
        return cell

    nb = nbformat.v4.new_notebook(cells=[graded(c) for c in ("correctness", "precision", "fusion")])
    verdicts = [{"exercise": "01.fused_chain", "criterion": "correctness", "status": PASSED}]
    flags = judge_disagrees(nb, verdicts)
    said = "cell test_fused_chain_precision passed, but the judge made no verdict on 01.fused_chain precision"
    assert flags == [f"{said}: scored 0"]
    scores = [utils.determine_grade(cell)[0] for cell in nb.cells]
    assert scores == [2, 0, 2]  # fusion is counted in the notebook's process: no verdict of the judge's to need
    assert nb.cells[1].outputs[-1]["ename"] == "NoJudgeVerdict"
