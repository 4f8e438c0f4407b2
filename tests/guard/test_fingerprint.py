"""The grader recognises a course reference kernel by its code: renamed, re-commented and re-indented alike."""

import json
import linecache
import re
import textwrap

import pytest
import torch

from autograder import check
from autograder.guard import fingerprint
from autograder.guard import scan
from autograder.publish import build, reference_table
from autograder.publish.handout import answer_modules

KERNEL = build.definition_source(build.ROOT / "kernels" / "fused_chain.py", "_fused_chain_kernel")


def _disguised(source: str) -> str:
    """The reference kernel as a student might paste it: every name changed, comments gone, layout changed."""
    renames = {"_fused_chain_kernel": "my_kernel", "x_ptr": "a", "bias_ptr": "bb", "y_ptr": "out", "pid": "p",
               "rows": "r", "cols": "c", "mask": "ok", "tiles_per_row": "t"}
    text = re.sub(r"#.*", "", source)
    for old, new in renames.items():
        text = re.sub(rf"\b{old}\b(?!=)", new, text)  # not keyword names: mask=mask -> mask=ok
    return textwrap.indent(text, "    ")  # indented, as if inside an if-block: dedented before parsing


def test_the_table_is_made_from_the_answer_modules(root):
    rows = json.loads(fingerprint.TABLE.read_text())
    assert rows == reference_table.table_from(root), "reference_kernels.json is stale: run `make course`"
    reference = {r["file"] for r in rows if r["exercises"]}
    # Every answer that defines a kernel launches it (notebook 06's answers wrap or tune kernels defined elsewhere,
    # or are plain PyTorch for torch.compile: nothing of their own to recognise).
    assert reference == {f"kernels/{p.name}" for p in answer_modules(root) if fingerprint.jit_functions(p.read_text())}
    teaching = {(r["file"], r["kernel"]) for r in rows if not r["exercises"]}
    assert ("kernels/rmsnorm_variants.py", "_rmsnorm_two_pass_kernel") in teaching
    assert ("kernels/matmul.py", "_matmul_kernel") in teaching


def test_a_renamed_and_reformatted_copy_has_the_same_fingerprint():
    assert fingerprint.fingerprint(_disguised(KERNEL)) == fingerprint.fingerprint(KERNEL)
    assert "reference kernel for 01.fused_chain" in fingerprint.reference_named(_disguised(KERNEL))


def test_a_different_kernel_is_not_named():
    changed = KERNEL.replace("tl.sigmoid(z)", "tl.sigmoid(z * 1.0)")
    assert fingerprint.reference_named(changed) is None
    assert fingerprint.reference_named("def f(x):\n    return x\n") is None
    assert fingerprint.reference_named("not python (") is None


def test_check_names_a_pasted_reference_kernel_and_keeps_the_score():
    namespace = {}
    code = "import torch, triton\nimport triton.language as tl\n\n" + textwrap.dedent(_disguised(KERNEL))
    code += "\n" + build.definition_source(build.ROOT / "kernels" / "fused_chain.py", "fused_chain").replace(
        "_fused_chain_kernel", "my_kernel")
    # A notebook's cells are in linecache (IPython puts them there): that is where a kernel's source is read.
    linecache.cache["<student cell>"] = (len(code), None, code.splitlines(True), "<student cell>")
    exec(compile(code, "<student cell>", "exec"), namespace)
    report = check("01.fused_chain", namespace["fused_chain"], criteria=["correctness"])
    assert report["correctness"].status == "passed", report["correctness"].message
    assert len(report.notes) == 1 and "course's reference kernel for 01.fused_chain (kernels/fused_chain.py: _fused_chain_kernel)" in report.notes[0]
    assert "note:" in report.summary() and "note" in str(report)


def test_check_names_a_teaching_kernel_called_instead_of_an_own_one():
    from kernels.rmsnorm_variants import rmsnorm_two_pass

    report = check("02.rmsnorm_repair", lambda x, weight, eps: rmsnorm_two_pass(x, weight, eps),
                   criteria=["correctness"])
    assert report.notes and "course's teaching kernel kernels/rmsnorm_variants.py" in report.notes[0], report.notes
    assert "_rmsnorm_two_pass_kernel" in report.notes[0]


def test_check_of_an_own_kernel_has_no_note():
    report = check("01.fused_chain", lambda x, bias, alpha: (alpha * torch.nn.functional.silu(x + bias)),
                   criteria=["correctness"])
    assert report.notes == []


def test_the_static_scan_flags_a_pasted_reference_kernel_in_an_answer_cell():
    nb = {"cells": [
        {"cell_type": "code", "metadata": {"nbgrader": {"locked": True}}, "source": "import autograder"},
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": "fused_chain"}},
         "source": "import triton\n\n" + textwrap.dedent(_disguised(KERNEL))},
    ]}
    flags = scan.scan_notebook(nb)
    assert len(flags) == 1 and flags[0].startswith("cell fused_chain line 4: this is the course's reference kernel")


@pytest.mark.parametrize("source, why", [("def a():\n    pass\ndef b():\n    pass\n", "two functions"),
                                         ("x = 1\n", "no function")])
def test_fingerprint_wants_one_function(source, why):
    with pytest.raises(ValueError, match="one function"):
        fingerprint.fingerprint(source)
