"""Names that say what a module holds, each once: no two modules of one package share a file name, no
module is imported under an old nickname (`ce_ops` was one spec module in notebook 05 and another in 07,
`grade_kernel` was criteria/kernel.py), no comment or docstring names a module path that is gone
(`judge/session.py`, `autograder.ops`), and nothing in autograder/, kernels/ or bench/ is defined at a
module's top level that nothing uses.

A definition counts as used when its name appears, outside its own definition, in any of the project's Python
(the grader, the kernels, the benchmarks, the tests and their corpus, the docs' hooks), in any string there
(the registries and `getattr` find kernels and criteria by name: a spec's `kernel=`/`function=`, an exercise
id), in a notebook's text source (its code, and its `# include: kernels/x.py (names)` / `# include body:`
lines), or in pyproject.toml (the command's entry point). Names kept on purpose although nothing here uses
them are listed in KEPT with the reason.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autograder", "kernels", "bench")
# Files named alike in every package on purpose: a package's marker and its `python -m` entry.
SHARED_NAMES = {"__init__.py", "__main__.py"}
NICKNAME = re.compile(r"^(?:\w+_ops|grade_\w+)$")
WORD = re.compile(r"[A-Za-z_]\w*")
# Defined at a module's top level and used by nothing in the project, kept on purpose: name -> why.
KEPT: dict[str, str] = {
    # The plain GEMM's cost model beside its launcher, as every other kernel file has its op's bytes: what a
    # reader timing kernels.matmul.matmul compares it against.
    "matmul_flops": "the GEMM's flop count, public for a reader timing kernels.matmul",
    "matmul_bytes": "the GEMM's ideal bytes moved, public for a reader timing kernels.matmul",
}


def _package_files(pkg: str) -> list[Path]:
    return sorted(p for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def _python_files() -> list[Path]:
    """Every Python file of the project whose names count as uses (notebook text sources included)."""
    files = [p for pkg in PACKAGES + ("tests",) for p in _package_files(pkg)]
    files += sorted((ROOT / "docs").glob("*.py"))
    files += sorted(ROOT.glob("solutions/*/[0-9][0-9]_*.py"))
    return files


# --- the finders ----------------------------------------------------------------------------------------

def shared_file_names(packages=PACKAGES) -> dict[str, list[str]]:
    """{file name: its modules} for every file name two modules of one package share."""
    found = {}
    for pkg in packages:
        by_name = defaultdict(list)
        for path in _package_files(pkg):
            if path.name not in SHARED_NAMES:
                by_name[path.name].append(str(path.relative_to(ROOT)))
        found.update({f"{pkg}: {name}": paths for name, paths in by_name.items() if len(paths) > 1})
    return found


_IMPORT_AS = re.compile(r"\bimport\s+(?:\(([^)]*)\)|([^\n]*))")


def nicknames(text: str) -> list[str]:
    """The `*_ops` and `grade_*` names a text imports something as (code, or code inside a string)."""
    found = []
    for paren, line in _IMPORT_AS.findall(text):
        for name in re.findall(r"\bas\s+(\w+)", paren or line):
            if NICKNAME.match(name):
                found.append(name)
    return found


_SUBPACKAGES = sorted(p.name for p in (ROOT / "autograder").iterdir() if p.is_dir() and any(p.glob("*.py")))
_PATH = re.compile(r"(?<![\w/.])((?:autograder|kernels|bench|" + "|".join(_SUBPACKAGES)
                   + r")/[\w/<>.-]*[\w>])")
_DOTTED = re.compile(r"(?<![\w.])autograder((?:\.\w+)+)")
# Paths written as examples of a form, not as a file of the project.
EXAMPLE_PATHS = {"kernels/op.py"}


def _module_gone(parts: list[str]) -> bool:
    """Whether autograder.<parts> names nothing: each part a subpackage, a module, or a name its package's
    __init__ defines (what follows a module is its attributes, not checked)."""
    here = ROOT / "autograder"
    for part in parts:
        if (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").exists() or (part.startswith("__") and part.endswith("__")):
            return False
        init = here / "__init__.py"
        return not (init.exists() and re.search(rf"\b{part}\b", init.read_text()))
    return False


def gone_paths(text: str) -> list[str]:
    """The module paths a text names that the project does not have: `autograder/x/y.py`, `guard/y.py` (a
    subpackage of autograder), `kernels/z.py`, `bench/w.py` or `autograder.x.y`; templates (`<gpu>`) are
    skipped."""
    gone = []
    for rel in _PATH.findall(text):
        if "<" in rel or rel in EXAMPLE_PATHS:
            continue
        base = ROOT / rel if rel.split("/")[0] in PACKAGES else ROOT / "autograder" / rel
        if not (base.exists() or base.with_name(base.name + ".py").exists()):
            gone.append(rel)
    gone += [f"autograder{d}" for d in _DOTTED.findall(text) if _module_gone(d.strip(".").split("."))]
    return gone


def _definitions(tree: ast.Module) -> list[tuple[str, ast.stmt]]:
    """(name, statement) for each function, class and variable a module defines at its top level."""
    out = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((stmt.name, stmt))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        out.append((node.id, stmt))
    return [(name, stmt) for name, stmt in out if not (name.startswith("__") and name.endswith("__"))]


def _uses(node: ast.AST) -> set[str]:
    """Every name a piece of code reads, imports or spells in a string."""
    used = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Store):
            used.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            used.add(sub.attr)
        elif isinstance(sub, ast.alias):
            used.add(sub.name.split(".")[-1])
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            used.update(WORD.findall(sub.value))
        elif isinstance(sub, ast.keyword) and sub.arg:
            used.add(sub.arg)
    return used


def _comment_words(text: str) -> set[str]:
    """The names on a notebook's include lines (`# include: kernels/x.py (a, b)`, `# include body: (f)`)."""
    words = set()
    for line in re.findall(r"#\s*include(?: body)?:[^\n]*", text):
        words.update(WORD.findall(line))
    return words


def dead_definitions() -> list[str]:
    """`path: name` for each top-level definition in autograder/, kernels/ and bench/ that nothing uses."""
    uses_by_file: dict[Path, set[str]] = {}
    trees: dict[Path, ast.Module] = {}
    for path in _python_files():
        text = path.read_text()
        try:
            trees[path] = ast.parse(text)
            uses_by_file[path] = _uses(trees[path]) | _comment_words(text)
        except SyntaxError:  # a notebook source with a line magic: every word of it counts
            uses_by_file[path] = set(WORD.findall(text))
    elsewhere_text = (ROOT / "pyproject.toml").read_text()
    extra = set(WORD.findall(elsewhere_text))
    dead = []
    for pkg in PACKAGES:
        for path in _package_files(pkg):
            tree = trees[path]
            others = extra.union(*(u for p, u in uses_by_file.items() if p != path))
            for name, stmt in _definitions(tree):
                if name in others or name in KEPT:
                    continue
                if any(name in _uses(s) for s in tree.body if s is not stmt):
                    continue
                dead.append(f"{path.relative_to(ROOT)}: {name}")
    return dead


# --- the finders find what they should ------------------------------------------------------------------

def test_nicknames_are_found_in_every_import_form():
    text = ("from autograder.specs import vertical_fusion as rms_ops\n"
            "import autograder.criteria.kernel as grade_kernel\n"
            "from autograder.criteria import (kernel, performance as grade_perf)\n"
            "from autograder.specs import lora as lora_spec\n"
            "from autograder.classroom import grade_class\n")
    assert nicknames(text) == ["rms_ops", "grade_kernel", "grade_perf"]


def test_a_definition_used_only_by_itself_is_dead():
    tree = ast.parse("def f(n):\n    return f(n - 1)\n\ndef g():\n    return h()\n\nh = 1\n")
    names = dict(_definitions(tree))
    assert set(names) == {"f", "g", "h"}
    assert "f" in _uses(names["f"])  # recursion: a use inside its own definition, which the finder skips
    assert "h" in _uses(names["g"])
    lines = "# include: kernels/rmsnorm.py (rmsnorm_bytes)\n  # include body: kernels/rmsnorm.py (rmsnorm)\n"
    assert {"rmsnorm", "rmsnorm_bytes"} <= _comment_words(lines)


def test_gone_paths_are_found():
    text = ("see autograder/criteria.py, judge/session.py, guard/memcheck, kernels/bench/, autograder.ops's\n"
            "but not autograder/criteria/kernel.py, criteria/kernel.py, kernels/rmsnorm.py, bench/results/,\n"
            "bench/results/headroom/headroom-<gpu>.json, autograder.criteria.kernel.GRADERS, autograder.check"
            )
    assert gone_paths(text) == ["autograder/criteria.py", "judge/session.py", "guard/memcheck",
                                "kernels/bench", "autograder.ops"]


# --- the rules ------------------------------------------------------------------------------------------

def test_no_two_modules_of_a_package_share_a_file_name():
    assert not shared_file_names(), f"modules named alike: {shared_file_names()}"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# This file's own examples of nicknames left out.
@pytest.mark.parametrize("path", [p for p in _python_files() if p != Path(__file__).resolve()], ids=_rel)
def test_no_module_is_imported_under_a_nickname(path):
    found = nicknames(path.read_text())
    assert not found, f"{_rel(path)} imports under old nicknames {found}: import the module as itself"


CODE_AND_NOTEBOOKS = [p for p in _python_files() if _rel(p).split("/")[0] in PACKAGES + ("solutions",)]


@pytest.mark.parametrize("path", CODE_AND_NOTEBOOKS, ids=_rel)
def test_no_comment_names_a_module_that_is_gone(path):
    gone = gone_paths(path.read_text())
    assert not gone, f"{_rel(path)} names modules the project no longer has: {gone}"


def test_nothing_is_defined_that_nothing_uses():
    dead = dead_definitions()
    assert not dead, ("defined at a module's top level and used nowhere (delete it, or add it to KEPT with "
                      "why):\n" + "\n".join(dead))


def test_every_kept_name_still_exists():
    defined = set()
    for pkg in PACKAGES:
        for path in _package_files(pkg):
            defined.update(name for name, _ in _definitions(ast.parse(path.read_text())))
    assert set(KEPT) <= defined, f"KEPT names nothing defines any more: {set(KEPT) - defined}"
