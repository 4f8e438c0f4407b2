"""The table of the course's kernels by fingerprint (autograder/reference_kernels.json), rewritten from kernels/ by
`make course` (publish.build). While grading, guard.fingerprint reads it to name a course kernel that a
submission pasted or called.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from autograder import specs as registry
from autograder.guard.fingerprint import TABLE, fingerprint, jit_functions, references
from autograder.publish.handout import TEACHING_KERNELS, answer_modules

# Answer modules whose op is graded only as part of a larger exercise (no spec names them as its kernel), or that
# answer an exercise another way (Hopper-only variants, timed by python -m bench.hopper).
PARTS_OF_ANSWERS = {"silu_mul": "07.decoder", "flash_attention_ws": "05.flash_attention",
                    "flash_attention_gluon": "05.flash_attention",
                    "flash_attention_backward_atomic": "07.flash_attention_backward",
                    "linear_cross_entropy_tma": "07.linear_cross_entropy_backward"}


def table_from(root: Path) -> list[dict]:
    """The rows of reference_kernels.json: every kernel a module of kernels/ launches (kernel[grid](...)), the
    reference solutions' and the teaching modules' (students have those: calling one instead of writing a
    kernel is named too). Small @triton.jit helpers are left out: a student's own can be the same few lines."""

    def exercises_of(module: str) -> str:  # the exercises graded against this op's torch side
        if module in PARTS_OF_ANSWERS:
            return PARTS_OF_ANSWERS[module]
        return ", ".join(ex.id for ex in registry.all_exercises() if ex.kernel == module)

    teaching = [root / "kernels" / f"{m}.py" for m in TEACHING_KERNELS if m != "__init__"]
    rows = []
    for path in answer_modules(root) + teaching:
        text = path.read_text()
        answers = exercises_of(path.stem) if path.stem not in TEACHING_KERNELS else ""
        for name, _line, source in jit_functions(text):
            if re.search(rf"\b{re.escape(name)}\[", text):
                rows.append({"fingerprint": fingerprint(source), "file": f"kernels/{path.name}", "kernel": name,
                             "exercises": answers})
    return rows


def write_table(root: Path) -> int:
    """Rewrite reference_kernels.json from kernels/ under root; the number of kernels."""
    rows = table_from(root)
    TABLE.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    references.cache_clear()
    return len(rows)
