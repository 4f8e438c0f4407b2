"""Points the grader at settings of its own: no performance needed, one trial, a known secret seed."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["the grading configuration (grading.toml or $FUSION_COURSE_GRADING) was changed"]}

import os
import tempfile

import torch

settings = os.path.join(tempfile.mkdtemp(), "easy.toml")
with open(settings, "w") as f:
    f.write("trials = 1\nsecret_seed = 1\nrequire_performance = false\n")
os.environ["FUSION_COURSE_GRADING"] = settings


def fused_chain(x, bias, alpha):
    return torch.zeros_like(x)
