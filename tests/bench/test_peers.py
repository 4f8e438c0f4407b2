"""The peer comparison's bookkeeping (no GPU needed): the best peer, the course against it, and every column that
could not be measured named with its reason."""

import builtins

import pytest

from bench import peers as bench_peers


def test_the_best_peer_is_the_fastest_version_that_is_not_the_course():
    times = {"course": 1.0, "torch.compile": 1.2, "Liger-Kernel": 1.1, "F.rms_norm": 2.0}
    assert bench_peers.best_peer(times) == ("Liger-Kernel", 1.1)
    r = bench_peers.row("rmsnorm", "32768x4096 bf16", times, {}, unit_work=2 * 32768 * 4096 * 2)
    assert r["best_peer"] == "Liger-Kernel" and r["vs_best_peer"] == 1.1
    assert r["rate"]["course"] > r["rate"]["Liger-Kernel"] > r["rate"]["F.rms_norm"]
    assert bench_peers.best_peer({"course": 1.0}) is None


def test_a_missing_course_kernel_or_peer_is_named_in_the_table():
    r = bench_peers.row("linear_cross_entropy forward + backward", "8192x4096 -> 128256 bf16",
                        {"eager": 56.0, "torch.compile": 42.0},
                        {"course": "failed: RuntimeError: out of memory", "Liger-Kernel": "Liger-Kernel is not installed"},
                        6 * 8192 * 4096 * 128256, "TFLOP/s", {"eager": 11.7, "torch.compile": 3.0})
    assert r["vs_best_peer"] is None and r["best_peer"] == "torch.compile"
    [line] = [l for l in bench_peers.markdown([r]) if l.startswith("| linear_cross_entropy")]
    assert "course: failed: RuntimeError: out of memory" in line and "Liger-Kernel: Liger-Kernel is not installed" in line
    assert "torch.compile" in line and "(+3.00 GiB)" in line


def test_without_liger_the_reason_says_how_to_install_it(monkeypatch):
    real_import = builtins.__import__

    def no_liger(name, *args, **kwargs):
        if name.startswith("liger_kernel"):
            raise ModuleNotFoundError("No module named 'liger_kernel'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_liger)
    module, why = bench_peers.liger()
    assert module is None and "not installed" in why and ".[bench]" in why


def test_the_benchmark_includes_the_peer_section_when_it_has_rows():
    from bench import suite as bench

    r = bench_peers.row("softmax", "32768x4096 bf16", {"course": 0.14, "torch.softmax": 0.42}, {}, 2 * 2**28)
    text = bench.markdown({"device": {"name": "GPU", "driver": "x", "torch_version": "t", "triton_version": "y",
                                      "copy_gbps": 4000.0, "matmul_tflops": {"bf16": 700.0}},
                           "date": "2026-11-23", "rows": [], "peer_rows": [r]})
    assert "vs best peer" in text and "| softmax |" in text and "3.00x" in text


def _small_rows(monkeypatch, with_liger: bool) -> list[dict]:
    from autograder.measure import device

    if not with_liger:
        monkeypatch.setattr(bench_peers, "liger", lambda: (None, "Liger-Kernel is not installed (pip install -e '.[bench]')"))
    return bench_peers.rows(device.profile(), lambda m: None, small=True)


def _check(rows: list[dict], with_liger: bool):
    ops = {r["op"] for r in rows}
    assert ops == {"rmsnorm", "add_rmsnorm", "layernorm", "softmax", "rmsnorm_backward",
                   "linear_cross_entropy forward", "linear_cross_entropy forward + backward",
                   "flash_attention forward"}
    for r in rows:
        assert all(ms > 0 for ms in r["ms"].values()), r
        # Only what may be absent is: Liger when not installed, an SDPA backend this device lacks. A peer (or the
        # course's kernel) that fails to run is a bug of the benchmark.
        may_miss = ({"Liger-Kernel"} if not with_liger else set()) | {
            k for k in r["missing"] if k.startswith("SDPA ") and k != "SDPA default"}
        assert set(r["missing"]) <= may_miss, r["missing"]
        measured_or_named = set(r["ms"]) | set(r["missing"])
        if r["op"] != "flash_attention forward":
            assert ("Liger-Kernel" in r["ms"]) == with_liger, r
            assert "Liger-Kernel" in measured_or_named, r  # measured, or named with its reason
        else:  # every SDPA backend is a column or a named gap
            assert {"SDPA default", "SDPA cudnn", "SDPA flash", "SDPA efficient"} <= measured_or_named, r
    text = "\n".join(bench_peers.markdown(rows))
    assert ("Liger-Kernel is not installed" in text) != with_liger


@pytest.mark.gpu
def test_every_peer_column_runs_at_small_sizes_with_liger(monkeypatch):
    pytest.importorskip("liger_kernel", reason="Liger-Kernel is the optional bench extra")
    _check(_small_rows(monkeypatch, True), True)


@pytest.mark.gpu
def test_every_peer_column_runs_at_small_sizes_without_liger(monkeypatch):
    _check(_small_rows(monkeypatch, False), False)
