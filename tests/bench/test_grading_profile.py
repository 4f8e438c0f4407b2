"""bench.grading_profile: the profile's ranking of the grader's own functions, and its command line."""

import cProfile

import pytest

from bench import grading_profile


def _busy(n):
    return sum(i * i for i in range(n))


def test_the_ranking_lists_the_graders_functions_by_cumulative_seconds(tmp_path):
    from autograder.criteria import cases

    prof = tmp_path / "x.prof"
    profiler = cProfile.Profile()
    profiler.enable()
    _busy(200_000)
    cases.graded_dtypes()
    profiler.disable()
    profiler.dump_stats(str(prof))
    text, rows = grading_profile.ranked(prof, 10)
    assert "== autograder/ and kernels/ by cumulative seconds" in text
    assert rows and all(r["function"].startswith(("autograder/", "kernels/")) for r in rows)
    assert any("graded_dtypes" in r["function"] for r in rows)
    assert [r["cumulative_s"] for r in rows] == sorted((r["cumulative_s"] for r in rows), reverse=True)
    assert "_busy" in text  # the whole program's top functions come first


def test_the_child_writes_its_profile_before_leaving_through_os_exit():
    assert "dump_stats" in grading_profile._CHILD and grading_profile._CHILD.index("dump_stats") < \
        grading_profile._CHILD.index("os._exit")


def test_a_bad_top_is_refused_and_no_gpu_is_said(capsys):
    with pytest.raises(SystemExit):
        grading_profile.main(["--top", "0"])
    assert "--top 0" in capsys.readouterr().err
    assert grading_profile.main(["--only", "01"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
