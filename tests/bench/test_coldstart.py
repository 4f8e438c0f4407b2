"""The cold-start headroom benchmark (bench/coldstart.py) without a GPU: its summaries, merge and table
(bench/coldstart_summary.py)
from made-up runs, its child's result line on the CPU, and the rule it exists for: no bar of this commit sits
above the worst committed cold run divided by the margin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import coldstart, coldstart_summary

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((coldstart.RESULTS).glob("coldstart-*.json"))


def _run(round_, frac, speedup, status="passed", bar=0.6, min_speedup=1.1):
    return {"round": round_, "status": status, "gpu": "0", "wall_s": 30.0,
            "bars": {"fraction_of_peak": [frac, bar], "speedup_over_eager": [speedup, min_speedup]}}


def test_summary_takes_the_worst_run_and_names_a_safe_bar():
    s = coldstart_summary.summarise([_run(0, 0.80, 3.0), _run(1, 0.70, 2.9), _run(2, 0.84, 3.1)])
    frac = s["bars"]["fraction_of_peak"]
    assert (frac["min"], frac["median"], frac["max"]) == (0.70, 0.80, 0.84)
    assert frac["spread"] == pytest.approx(0.84 / 0.70)
    assert frac["margin"] == pytest.approx(0.70 / 0.6)
    assert frac["safe_bar"] == 0.58  # 0.70 / 1.2 = 0.583, rounded down
    assert not frac["ok"]  # 0.70 / 0.6 = 1.17 < 1.2: this bar is too high for the worst cold run
    assert s["bars"]["speedup_over_eager"]["ok"]
    assert not s["ok"] and s["passed"] == 3


def test_a_failed_run_or_a_failed_criterion_is_never_ok():
    assert not coldstart_summary.summarise([_run(0, 0.9, 3.0), _run(1, 0.9, 3.0, status="failed")])["ok"]
    failing = {**_run(0, 0.9, 3.0), "failed": ["correctness: 3 elements wrong"]}
    s = coldstart_summary.summarise([failing, _run(1, 0.9, 3.0)])
    assert not s["ok"] and s["failed"] == ["correctness: 3 elements wrong"]
    assert coldstart_summary.summarise([_run(0, 0.9, 3.0), _run(1, 0.88, 3.0)])["ok"]


def _notebook_result(name, n_runs, fracs):
    results = {name: []}
    for r in range(n_runs):
        results[name].append({"round": r, "gpu": str(r % 2), "wall_s": 50.0, "seconds": 40.0 + r, "exercises": [
            {"exercise": "02.rmsnorm", "status": "passed", "failed": [], "seconds": 5.0,
             "bars": {"fraction_of_peak": [fracs[r], 0.8], "speedup_over_eager": [4.0, 1.2]}},
            {"exercise": "02.predict_rmsnorm_bytes", "status": "not graded on performance", "failed": [],
             "bars": {}, "seconds": 0.0}]})
    return results


def _result(rows, name="NVIDIA H100 80GB HBM3"):
    return {"date": "2026-11-28", "torch": "2.11.0", "triton": "3.6.0", "device": {"name": name}, "runs": 3,
            "gpus": ["0", "1"], "unit": "notebook", "rows": rows}


def test_notebook_runs_become_one_row_per_exercise_with_the_notebook_seconds():
    rows = coldstart_summary.rows_of(_notebook_result("02_vertical_fusion", 3, [0.97, 0.99, 0.98]),
                                     notebook_mode=True)
    by = {r["exercise"]: r for r in rows}
    assert by["02.rmsnorm"]["summary"]["ok"] and by["02.rmsnorm"]["summary"]["runs"] == 3
    assert by["02.predict_rmsnorm_bytes"]["summary"]["runs"] == 0  # not graded on speed: nothing to bar
    assert coldstart_summary.notebook_seconds(rows) == {"02_vertical_fusion": [40.0, 41.0, 42.0]}
    text = coldstart_summary.table(_result(rows))
    assert "| 02.rmsnorm | fraction_of_peak | 3/3 | 0.970 | 0.980 | 0.990 |" in text
    assert "| 02_vertical_fusion | 3 | 40 / 41 / 42 |" in text


def test_a_crashed_notebook_is_a_row_that_fails():
    results = {"07_fusion_for_training": [{"round": 0, "status": "crashed", "gpu": "0", "wall_s": 900,
                                           "message": "timed out after 900 s", "bars": {}, "exercises": []}]}
    rows = coldstart_summary.rows_of(results, notebook_mode=True)
    assert len(rows) == 1 and not rows[0]["summary"]["ok"]
    assert "NOT OK: timed out" in coldstart_summary.table(_result(rows))


def test_merge_puts_the_runs_of_several_calls_together():
    one = _result(coldstart_summary.rows_of(_notebook_result("02_vertical_fusion", 2, [0.97, 0.99]), True))
    two = _result(coldstart_summary.rows_of(_notebook_result("02_vertical_fusion", 2, [0.70, 0.98]), True))
    merged = coldstart_summary.merge([one, two])
    row = next(r for r in merged["rows"] if r["exercise"] == "02.rmsnorm")
    assert len(row["runs"]) == 4 and len({r["round"] for r in row["runs"]}) == 4
    assert row["summary"]["bars"]["fraction_of_peak"]["min"] == 0.70
    assert not row["summary"]["ok"]  # 0.70 / 0.8 is under the margin
    with pytest.raises(SystemExit, match="one device"):
        coldstart_summary.merge([one, _result(one["rows"], name="NVIDIA H200")])
    with pytest.raises(SystemExit, match="not cold-start headroom"):  # a shared GPU's runs stay apart
        coldstart_summary.merge([one, {**two, "per_gpu": 2}])


def test_a_merge_scores_every_run_against_the_bars_of_today():
    """A run measured when its bar was higher (and failed it) reads against today's bar after a merge, as the
    benchmark page reads it: the merged table printed NOT OK for bars lowered since."""
    part = lambda fracs: _result(coldstart_summary.rows_of(_notebook_result("02_vertical_fusion", 2, fracs), True))
    old, new = part([0.79, 0.97]), part([0.96, 0.98])
    old_row = next(r for r in old["rows"] if r["exercise"] == "02.rmsnorm")
    old_row["runs"][0].update(status="failed", failed=["performance: 0.79 of the copy bandwidth; needs 0.80"])
    bar_now = lambda exercise, name, then: 0.6 if name == "fraction_of_peak" else then
    row = next(r for r in coldstart_summary.merge([old, new], bar_now)["rows"] if r["exercise"] == "02.rmsnorm")
    s = row["summary"]
    assert s["bars"]["fraction_of_peak"]["bar"] == 0.6 and s["passed"] == s["runs"] == 4 and s["ok"]
    assert "NOT OK" not in coldstart_summary.table({**new, "rows": [row]})
    unchanged = next(r for r in coldstart_summary.merge([old, new])["rows"] if r["exercise"] == "02.rmsnorm")
    assert not unchanged["summary"]["ok"]  # without today's bars: the bar of the first run's day


def test_the_child_prints_one_result_line_on_the_cpu():
    """A cold run's process reports what it graded (on a CPU: performance not measured, said so)."""
    index = next(i for i, (ex_id, _, _) in enumerate(coldstart.solutions()) if ex_id == "01.fused_chain")
    p = subprocess.run([sys.executable, "-m", "bench.coldstart", "--child", str(index)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stdout.splitlines() if line.startswith(coldstart.TAG)]
    assert p.returncode == 0 and len(lines) == 1, p.stderr[-2000:]
    result = json.loads(lines[0][len(coldstart.TAG):])
    assert result["exercise"] == "01.fused_chain" and result["status"] in ("skipped", "failed")
    assert "no GPU" in result["message"]


def test_bad_arguments_are_refused_by_name():
    for args, said in ((["--runs", "0"], "--runs"), (["--shape", "06.fake_quant=a,b", "--exercises"], "--shape"),
                       (["--shape", "06.fake_quant=8,8"], "--exercises"), (["--table", "nowhere.json"], "no such"),
                       (["--per-gpu", "0"], "--per-gpu")):
        p = subprocess.run([sys.executable, "-m", "bench.coldstart", *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2 and said in p.stderr, (args, p.stderr)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_no_bar_sits_above_the_worst_cold_run_over_the_margin(path):
    """Every committed cold-start table, scored against this commit's bars: a reference that a table says could
    fail its bar (worst cold run under bar x MARGIN), or failed another criterion cold, fails here."""
    from autograder import specs as registry
    from bench import coldstart_summary

    result = json.loads(path.read_text())
    assert {"date", "torch", "triton", "device"} <= set(result)
    known = {ex.id for ex in registry.all_exercises()}
    for row in result["rows"]:
        assert row["exercise"] in known or row["what"] == "the notebook", row["exercise"]
        assert row["what"] != "the notebook", f"{row['exercise']} crashed in a cold check"
        s = coldstart_summary.rescored(row, coldstart.bar_now)
        assert not s["failed"], f"{row['exercise']} failed cold on {result['device']['name']}: {s['failed']}"
        for name, b in s["bars"].items():
            assert b["min"] >= b["bar"] * coldstart.MARGIN, (
                f"{row['exercise']} {name}: worst cold run {b['min']:.3f} on {result['device']['name']} is under "
                f"{coldstart.MARGIN} x the bar {b['bar']:.3f}; set the bar at most {b['min'] / coldstart.MARGIN:.2f}")
        assert s["passed"] == s["runs"], f"{row['exercise']}: {s['passed']} of {s['runs']} cold runs pass today's bars"


def test_the_benchmark_imports_where_nbgrader_is_not_installed():
    """A bare GPU machine runs the cold checks: the font list it seeds must not come through the class run's
    modules, which import nbgrader."""
    import subprocess
    import sys

    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] == 'nbgrader':\n"
               "            raise ImportError('nbgrader is not installed here')\n"
               "sys.meta_path.insert(0, Block())\n"
               "import bench.coldstart, bench.grading_profile\n"
               "print('imported')\n")
    p = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=120)
    assert "imported" in p.stdout, p.stderr[-2000:]


def test_a_merge_of_a_merge_keeps_every_check_of_a_notebook():
    """Rounds are renumbered past every round before them: a merged table merged again with a new call's run
    lost the checks whose rounds collided (01's three checks read as two)."""
    part = lambda fracs: _result(coldstart_summary.rows_of(_notebook_result("02_vertical_fusion", 2, fracs), True))
    first = coldstart_summary.merge([part([0.97, 0.99]), part([0.96, 0.98])])
    again = coldstart_summary.merge([first, part([0.95, 0.99])])
    assert len(coldstart_summary.notebook_seconds(again["rows"])["02_vertical_fusion"]) == 6
    row = next(r for r in again["rows"] if r["exercise"] == "02.rmsnorm")
    assert len({r["round"] for r in row["runs"]}) == 6


def test_notebook_seconds_are_those_of_a_machine_as_installed_where_there_are_some():
    bare = _notebook_result("02_vertical_fusion", 2, [0.97, 0.99])
    installed = _notebook_result("02_vertical_fusion", 1, [0.98])
    for run in installed["02_vertical_fusion"]:
        run.update(machine=coldstart_summary.INSTALLED, seconds=30.0)
    rows = coldstart_summary.merge([_result(coldstart_summary.rows_of(bare, True)),
                                    _result(coldstart_summary.rows_of(installed, True))])["rows"]
    assert coldstart_summary.notebook_seconds(rows) == {"02_vertical_fusion": [30.0]}
    assert coldstart_summary.notebook_seconds(coldstart_summary.rows_of(bare, True)) == {
        "02_vertical_fusion": [40.0, 41.0]}
