"""Removes the grader's before-cell hook, then an IPython input transformer turns every later graded cell into
`pass`: no check() runs at all. The graded cells "pass" without the grader's verdict, which grade-class
requires."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "graded"
ZERO = ["test_fused_chain_correctness", "test_fused_chain_fusion"]
FULL = ["test_cost_model"]
FLAGS = ["rewrites cells before Jupyter runs them", "changes Jupyter's hooks around cells",
         "cell test_fused_chain_correctness passed without the grader's verdict in its output: scored 0"]
SHOWS = ["NoVerdict"]

# %% cell fused_chain
import torch


def _skip_grading(lines):
    return ["pass\n"] if any("assert_passed" in line for line in lines) else lines


get_ipython().events.callbacks["pre_run_cell"].clear()
get_ipython().input_transformers_cleanup.append(_skip_grading)


def fused_chain(x, bias, alpha):
    return torch.zeros_like(x)
