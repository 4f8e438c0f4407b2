"""The corpus of bad submissions, graded in this process (check) or by the checker in a fresh one.

Every case in tests/corpus/ must be graded as it expects: the criterion it names fails with the words it names.
The nbgrader cases (route "class") are in test_corpus_class.py. No Jupyter package is imported here, so a GPU
machine without Jupyter runs the gpu-marked cases: ``python -m pytest -m gpu tests/hostile/test_corpus.py``.
"""

import pytest

import corpus_cases as corpus


def test_the_corpus_is_complete():
    cases = corpus.load()
    assert len(cases) >= 20
    assert {"check", "checker", "class"} == {case.ROUTE for case in cases}


@pytest.mark.parametrize("case", corpus.params("check"))
def test_graded_in_process(case):
    corpus.assert_graded_as_expected(case, corpus.grade_in_process(case))


@pytest.mark.parametrize("case", corpus.params("checker"))
def test_graded_by_the_checker(case, tmp_path):
    corpus.assert_graded_as_expected(case, corpus.grade_in_checker(case, tmp_path))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gpu_memory_hoard", "gpu_illegal_address"])
def test_a_notebook_that_wrecks_the_gpu_leaves_the_next_one_unharmed(name, tmp_path):
    """A fresh process per notebook: memory held or a CUDA context broken by one does not reach the next."""
    [bad] = [c for c in corpus.load("checker") if c.name == name]
    corpus.assert_graded_as_expected(bad, corpus.grade_in_checker(bad, tmp_path))
    good = corpus.Case("next", bad.path, "from kernels.fused_chain import fused_chain\n",
                       dict(bad.settings, CRITERIA=["correctness", "performance", "fusion"]))
    report = corpus.grade_in_checker(good, tmp_path)
    assert report.passed and report["performance"].status == "passed", str(report)
