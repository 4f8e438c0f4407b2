"""Committed benchmark results: complete, dated, quoted in docs/benchmarks.md as they are."""

import json

import pytest

from bench import coldstart, coldstart_summary, plots, report
from bench import suite as bench

RESULTS = sorted(bench.RESULTS.glob("*.json"))


def test_there_are_committed_results():
    assert RESULTS, "run `python -m bench` on a GPU and commit bench/results/"


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_results_record_device_versions_and_date(path):
    r = json.loads(path.read_text())
    d = r["device"]
    for key in ("name", "driver", "torch_version", "triton_version", "copy_gbps", "matmul_tflops"):
        assert d[key], key
    assert r["date"] and r["rows"]
    text = bench.markdown(r)  # the table is made from the JSON alone: no markdown twin is kept
    assert all(row["kernel"] in text for row in r["rows"])
    assert path.with_suffix(".png").exists()


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_fused_chain_goal_is_met(path):
    r = json.loads(path.read_text())
    goal = r["goals"]["fused_chain"]
    row = next(x for x in r["rows"] if x["kernel"] == "fused_chain")
    assert goal["met"] and row["fraction_of_copy"] >= 0.95 and row["speedup_vs_compile"] >= 1.0


def test_results_are_json_with_figures_drawn_from_them():
    """One JSON file a run; beside it only the figures python -m bench.plots draws from it (no tables, no logs:
    the page is generated, the history is git's)."""
    others = [p.relative_to(bench.RESULTS).as_posix() for p in bench.RESULTS.rglob("*")
              if p.is_file() and p.suffix not in (".json", ".png")]
    assert others == []
    orphans = [p.name for p in bench.RESULTS.rglob("*.png") if not p.with_suffix(".json").is_file()]
    assert orphans == []


def test_benchmarks_page_quotes_the_committed_results(root):
    text = (root / "docs" / "benchmarks.md").read_text()
    assert report.render() == text, "docs/benchmarks.md is stale: run `python -m bench.report`"


ALL_RUNS = sorted(bench.RESULTS.rglob("*.json"))


@pytest.mark.parametrize("path", ALL_RUNS, ids=lambda p: p.relative_to(bench.RESULTS).as_posix())
def test_every_committed_run_records_its_device_versions_and_date(path):
    from bench.common import versions

    r = json.loads(path.read_text())
    assert r["device"]["name"] and r["date"] and (r.get("rows") or r.get("files") or r.get("runs"))  # per file: gpu tests
    assert "?" not in versions(r)


PAGE_MAX_LINES = 200


def test_the_page_shows_the_newest_run_of_each_benchmark_on_each_device_and_no_other():
    every, text = report.runs(), report.render()
    shown = report.newest(every)
    assert len(text.splitlines()) <= PAGE_MAX_LINES
    for device, device_runs in every.items():
        for kind in report.KINDS:
            mine = [(name, r) for k, name, r in device_runs if k == kind]
            if not mine:
                assert device not in shown.get(kind, {})
                continue
            name, run = shown[kind][device]
            assert run["date"] == max(r["date"] for _, r in mine) and f"`{name}`" in text
            assert all(f"`{other}`" not in text for other, _ in mine if other != name), (kind, device)
    # Of one day's two suite runs, the one under the device's own name; the other (in runs/) is git's history.
    assert shown["suite"]["NVIDIA H200"][0] == "nvidia-h200.json"
    assert "runs/nvidia-h200-2026-11-24-late.json" in {n for _, n, _ in every["NVIDIA H200"]}


def test_cold_start_runs_are_shown_beside_the_warm_ones(tmp_path, monkeypatch):
    """A merged cold-start table (python -m bench.coldstart --merge) lands in bench/results/coldstart/: its
    exercises get a cold column per device, with the worst cold run's margin over the nearer bar."""
    cold = bench.RESULTS / "coldstart" / "explore" / "coldstart-nvidia-h100-80gb-hbm3-fake-quant-2026-11-28.json"
    run = json.loads(cold.read_text())
    warm = json.loads((bench.RESULTS / "headroom" / "headroom-nvidia-h100-80gb-hbm3.json").read_text())
    device = run["device"]["name"]
    lines = report.headroom_section({"headroom": {device: ("h.json", warm)}, "coldstart": {device: ("c.json", run)}})
    header = next(line for line in lines if line.startswith("| exercise"))
    assert header == f"| exercise | {device} warm | {device} cold |"
    row = next(line for line in lines if line.startswith("| 06.fake_quant"))
    bars = coldstart_summary.rescored(run["rows"][0], coldstart.bar_now)["bars"]  # against today's bars
    worst = min(b["margin"] for b in bars.values())
    spread = max(b["spread"] for b in bars.values())
    assert spread > coldstart.MAX_SPREAD  # that run was taken before the measurement settled the clocks
    wide = ", ".join(name for name, b in bars.items() if b["spread"] > coldstart.MAX_SPREAD)
    assert wide and row.endswith(f"| 8/8, {worst:.2f}x, spread {spread:.2f} NOT OK (spread of {wide}) |")
    assert report.kind(bench.RESULTS / "coldstart" / "coldstart-nvidia-h200.json") == "coldstart"
    assert report.kind(cold) is None and report.kind(bench.RESULTS / "coldstart" / "coldstart-x-partial.json") is None


def test_each_notebooks_cold_check_seconds_are_shown_against_the_minute():
    """The committed cold-start table's check seconds per notebook, the slowest flagged over the goal."""
    path = bench.RESULTS / "coldstart" / "coldstart-nvidia-h200.json"
    run = json.loads(path.read_text())
    seconds = coldstart_summary.notebook_seconds(run["rows"])
    lines = report.cold_seconds_section({"coldstart": {run["device"]["name"]: (path.name, run)}})
    assert "| notebook | NVIDIA H200 |" in lines
    for nb, v in seconds.items():
        row = next(line for line in lines if line.startswith(f"| {nb} |"))
        assert f"{min(v):.0f} / " in row and f"/ {max(v):.0f} s" in row
        assert ("over 60 s" in row) == (max(v) > report.CHECK_TARGET_S)
    assert report.cold_seconds_section({}) == []


def test_the_figures_are_drawn_from_the_committed_data(tmp_path):
    pytest.importorskip("matplotlib")
    suite_png = plots.figures(bench.RESULTS / "nvidia-h200.json", tmp_path)
    capstone_png = plots.figures(bench.RESULTS / "training" / "capstone-nvidia-h200.json", tmp_path)
    assert [p.name for p in suite_png + capstone_png] == ["nvidia-h200.png", "capstone-nvidia-h200.png"]
    assert all(p.stat().st_size > 10_000 for p in suite_png + capstone_png)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("kernel", ["row_sum_sumsq", "multi_tensor_adamw"])
def test_notebook_03_goals_are_met(path, kernel):
    r = json.loads(path.read_text())
    goal = r["goals"][kernel]
    row = next(x for x in r["rows"] if x["kernel"] == kernel)
    assert goal["met"] and row["fraction_of_copy"] >= goal["min_fraction_of_copy"]
    assert row["ms"]["triton"] <= row["ms"][goal["no_slower_than"]]


# A committed run can miss a GEMM or attention goal by the run-to-run spread of timings near their bars (the
# prefill epilogue has measured 1.03x and 1.05x the bare product, attention 0.77 and 0.80 of SDPA on one H200):
# the verdict is recorded as measured, and a miss beyond NOISE fails.
NOISE = 1.05


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("kernel", list(bench.bench_gemm.GOALS))
def test_notebook_04_goals_are_met(path, kernel):
    r = json.loads(path.read_text())
    row = next(x for x in r["epilogue_rows"] if x["kernel"] == kernel)
    met = True
    for baseline, slack in bench.bench_gemm.GOALS[kernel].items():
        assert row["ms"]["triton"] <= NOISE * slack * row["ms"][baseline], f"{kernel}: slower than {slack}x {baseline}"
        met = met and row["ms"]["triton"] <= slack * row["ms"][baseline]
    assert r["goals"][kernel]["met"] == met


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("kernel", ["softmax", "flash_attention", "linear_cross_entropy"])
def test_notebook_05_goals_are_met(path, kernel):
    r = json.loads(path.read_text())
    row = next(x for x in r["streaming_rows"] if x["kernel"] == kernel)
    if kernel == "softmax":
        assert row["fraction_of_copy"] >= 0.85
    elif kernel == "flash_attention":
        assert "causal=False" in row["shape"] and row["fraction_of_sdpa"] >= 0.80 / NOISE
        assert r["goals"][kernel]["met"] == (row["fraction_of_sdpa"] >= 0.80)
        return
    else:
        assert row["ms"]["triton"] <= 1.1 * row["ms"]["torch.compile"] and row["extra_GiB"]["triton"] <= 0.5
        assert row["extra_GiB"]["eager"] > 10 * row["extra_GiB"]["triton"]  # the logits, which fusion never holds
    assert r["goals"][kernel]["met"]


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_attention_is_measured_causal_and_not_against_naive_memory(path):
    r = json.loads(path.read_text())
    rows = [x for x in r["streaming_rows"] if x["kernel"] == "flash_attention"]
    assert {("causal=True" in x["shape"]) for x in rows} == {False, True}
    for row in rows:
        assert row["ms"]["triton"] < row["ms"]["naive"] / 10
        assert row["extra_GiB"]["triton"] < row["extra_GiB"]["naive"] / 50  # O(N) against S and P's O(N^2)


HEADROOM = sorted((bench.RESULTS / "headroom").glob("*.json"))


@pytest.mark.parametrize("path", HEADROOM, ids=lambda p: p.stem)
def test_headroom_results_record_device_versions_date_and_every_run(path):
    from bench import headroom as bench_headroom

    r = json.loads(path.read_text())
    assert r["device"]["name"] and r["date"] and r["torch"] and r["triton"] and r["rounds"] >= 1
    naive_rounds = r.get("naive_rounds", r["rounds"])
    assert r["rows"] and all(len(row["runs"]) == (r["rounds"] if row["role"] == "solution" else naive_rounds)
                             for row in r["rows"])
    text = bench_headroom.markdown(r)
    assert all(row["exercise"] in text for row in r["rows"])


# A naive version that no fair speed bar fails, with the criterion that fails it instead: 06.fake_quant's broken
# version, compiled, read up to 0.524 of copy bandwidth on an H100, and the repaired one's worst cold run on an
# H200 allows a bar of 0.52 at most; it is two graphs with a device-to-host copy (tests/criteria/test_compiled.py).
NAIVE_FAILED_BY = {"06.fake_quant": "graph"}


@pytest.mark.parametrize("path", HEADROOM, ids=lambda p: p.stem)
def test_headroom_verdicts_follow_the_committed_thresholds(path):
    """Each run's pass or fail is the criterion's rule applied to the figures it measured and the thresholds in
    grading.toml: a threshold changed without measuring again shows here. A naive version never passes."""
    from autograder import config
    from autograder import specs as registry
    from bench import headroom as bench_headroom

    cfg = config.load()
    r = json.loads(path.read_text())
    for row in r["rows"]:
        threshold, min_speedup = bench_headroom.thresholds(registry.get(row["exercise"]), cfg)
        for run in row["runs"]:
            assert bench_headroom.rescore(run, threshold, min_speedup)["status"] == run["status"], row["what"]
        if row["role"] == "naive" and row["exercise"] not in NAIVE_FAILED_BY:
            assert row["summary"]["passed"] == 0, (row["exercise"], row["what"])
        if row["exercise"] in NAIVE_FAILED_BY:
            assert NAIVE_FAILED_BY[row["exercise"]] in registry.get(row["exercise"]).criteria


def test_headroom_finds_a_solution_and_a_naive_version_for_every_exercise_graded_on_speed():
    from autograder import specs as registry
    from bench import headroom

    rows = headroom.versions()
    graded = {ex.id for ex in registry.all_exercises() if "performance" in getattr(ex, "criteria", ())}
    assert {r[0] for r in rows if r[1] == "solution"} == graded
    assert {r[0] for r in rows if r[1] == "naive"} == graded
    assert all(callable(r[3]) for r in rows)


def test_the_benchmarks_and_their_results_stay_out_of_the_course_wheel(root):
    """bench/ is run from a checkout: the wheel's packages (pyproject's find rule) are the grader and the kernels,
    and no package data reaches into the results."""
    import tomllib

    from setuptools import find_packages

    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(root), include=tool["packages"]["find"]["include"])
    assert "autograder" in packages and "kernels" in packages
    assert not [p for p in packages if "bench" in p.split(".")]
    assert not [k for k in tool.get("package-data", {}) if "bench" in k.split(".")]
