import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

import autograder  # noqa: E402, F401  (picks GPU or interpreter before any test module defines a kernel)
from autograder import runtime  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if runtime.has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Device profiles measured by tests go to a private cache, not the user's.
    if "FUSION_COURSE_CACHE" not in os.environ:
        monkeypatch.setenv("FUSION_COURSE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
