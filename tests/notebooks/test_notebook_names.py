"""A solution notebook runs every included kernel file's helpers in one namespace: two helpers of one name from
two files leave the later one in place, and the earlier exercise calls the wrong function (05.linear_cross_entropy
once called the sparse head's `_check_inputs` and failed every case on a GPU). Every name a notebook includes, or
defines at its top level, is defined once; and no later cell rebinds a function the notebook grades (a loop's
`logits_bytes = ...` once left 07.predict_logits_bytes an int when the checker graded it after the last cell)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(ROOT.glob("solutions/*/[0-9][0-9]_*.py"))
INCLUDE = re.compile(r"^# include: (kernels/\w+\.py) \(([^)]*)\)$", re.M)
INCLUDE_BODY = re.compile(r"^[ \t]+# include body: (kernels/\w+\.py) \((\w+)\)$", re.M)
TOP_DEF = re.compile(r"^(?:def|class) (\w+)", re.M)


def origins(text: str) -> dict[str, set[str]]:
    """{name: where each definition of it comes from} for one notebook's text source."""
    found: dict[str, set[str]] = defaultdict(set)
    for path, names in INCLUDE.findall(text):
        for name in names.split(","):
            found[name.strip()].add(path)
    for path, name in INCLUDE_BODY.findall(text):
        found[name].add(path)
    included = set(found)
    for name in TOP_DEF.findall(text):
        if name not in included:  # a stub `def f` whose body is included is that same definition
            found[name].add("the notebook")
    return found


def clashes(text: str) -> dict[str, set[str]]:
    return {name: where for name, where in origins(text).items() if len(where) > 1}


def test_finds_a_clash():
    text = ("# include: kernels/a.py (_check_inputs, a)\n# include: kernels/b.py (_check_inputs)\n"
            "def f():\n    # include body: kernels/c.py (f)\n")
    assert clashes(text) == {"_check_inputs": {"kernels/a.py", "kernels/b.py"}}


def test_notebook_def_against_include():
    text = "# include: kernels/a.py (helper)\ndef helper():\n    pass\n"
    assert origins(text)["helper"] == {"kernels/a.py"}  # the include's own stub is not a second definition
    assert clashes("# include: kernels/a.py (helper)\n# include: kernels/b.py (helper)\n")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_each_name_defined_once(source):
    assert SOURCES, "no notebook sources found"
    found = clashes(source.read_text())
    assert not found, f"{source.name}: names defined in more than one place: {found}"


def graded_names(tree: ast.Module) -> set[str]:
    """The names handed to check(...) as the function to grade."""
    return {call.args[1].id for call in ast.walk(tree) if isinstance(call, ast.Call)
            and getattr(call.func, "id", None) == "check" and len(call.args) > 1 and isinstance(call.args[1], ast.Name)}


def module_bindings(tree: ast.Module) -> list[tuple[str, int, str]]:
    """(name, line, how) of every binding made at a notebook's top level (loops, ifs, withs and trys included;
    the bodies of functions and classes not)."""
    found = []

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((node.name, node.lineno, "def"))
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append((node.id, node.lineno, "assignment"))
        elif isinstance(node, ast.alias):
            found.append(((node.asname or node.name).split(".")[0], getattr(node, "lineno", 0), "import"))
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                visit(child)

    for statement in tree.body:
        visit(statement)
    return found


def rebound(text: str) -> list[str]:
    tree = ast.parse(text)
    graded = graded_names(tree)
    out = []
    for name in sorted(graded):
        bindings = [b for b in module_bindings(tree) if b[0] == name]
        if len(bindings) > 1:
            out.append(f"{name}: " + ", ".join(f"{how} at line {line}" for _, line, how in bindings))
    return out


def test_finds_a_rebinding():
    text = ("def f(n):\n    return n\ncheck('01.x', f)\nfor d in (1, 2):\n    f = d * 2\n"
            "def g():\n    f = 3\n    return f\ncheck('01.y', g)\n")
    assert rebound(text) == ["f: def at line 1, assignment at line 5"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_graded_functions_not_rebound(source):
    found = rebound(source.read_text())
    assert not found, f"{source.name}: a graded function is bound again at the top level: {found}"
