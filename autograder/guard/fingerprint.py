"""Recognise the course's reference kernels by their code, whatever they are called.

A student's environment holds no reference solution, but a solution notebook can still be read and its kernel
pasted into a submission. The grader keeps a fingerprint of every reference Triton kernel (reference_kernels.json,
rewritten from kernels/ by `make course`: publish/reference_table.py): a hash of the kernel's syntax tree with its
names, comments, docstring and layout taken out, so renaming the kernel, its arguments and its variables, or
re-indenting it, leaves the fingerprint as it was. A match is named in the report and flagged for the
instructor; it does not change a score (the solution notebooks themselves are graded with full marks). The
teaching kernels students are given (kernels/rmsnorm_variants.py, kernels/matmul.py, ...) are named the same
way when a submission launches one instead of a kernel of its own.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import textwrap
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "reference_kernels.json"
# Names that mean the same in every kernel: the modules and builtins a kernel calls. Everything else is renamed.
_KEPT = {"tl", "triton", "torch", "math", "range", "min", "max", "abs", "len", "int", "float", "bool", "True",
         "False", "None", "libdevice"}


class _Anonymise(ast.NodeTransformer):
    """Names become n0, n1, ... in order of first appearance; docstrings and decorators go."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        if name in _KEPT:
            return name
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_FunctionDef(self, node):
        node.name = self._name(node.name)
        node.decorator_list = []
        node.returns = None
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_arg(self, node):
        node.arg = self._name(node.arg)
        node.annotation = self.visit(node.annotation) if node.annotation is not None else None
        return node

    def visit_Name(self, node):
        node.id = self._name(node.id)
        return node


def fingerprint(source: str) -> str:
    """The fingerprint of one function's source (a def, with or without decorators)."""
    tree = ast.parse(textwrap.dedent(source))
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(functions) != 1:
        raise ValueError(f"expected the source of one function, found {len(functions)}")
    return hashlib.sha256(_canonical(_Anonymise().visit(functions[0])).encode()).hexdigest()[:20]


def _canonical(node) -> str:
    """The tree as text, the same on every Python the course runs on: ast.dump is not (3.12 added fields such
    as FunctionDef.type_params), so empty fields and the ones that carry no meaning here are left out."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node)
                  if value not in (None, []) and name not in {"ctx", "kind", "type_comment"}]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(v) for v in node) + "]"
    return repr(node)


def kernel_source(kernel) -> str | None:
    """The Python source of a Triton kernel object (jit function, interpreted function, autotuner), if any."""
    seen = set()
    while kernel is not None and id(kernel) not in seen:
        seen.add(id(kernel))
        src = getattr(kernel, "src", None)
        if isinstance(src, str) and "def " in src:
            return src
        inner = getattr(kernel, "fn", None)
        if inner is None:
            break
        kernel = inner
    try:
        return inspect.getsource(kernel)
    except (OSError, TypeError):
        return None


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr in {"jit", "autotune", "heuristics"}) or \
        (isinstance(target, ast.Name) and target.id in {"jit", "autotune", "heuristics"})


def jit_functions(code: str) -> list[tuple[str, int, str]]:
    """(name, line, source) of each top-level @triton.jit function in a piece of code (a cell or a file)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [(n.name, n.lineno, ast.get_source_segment(code, n) or "") for n in tree.body
            if isinstance(n, ast.FunctionDef) and any(_is_jit(d) for d in n.decorator_list)]


@functools.lru_cache(maxsize=1)
def references() -> dict[str, str]:
    """{fingerprint: "what it is"} of the reference kernels; empty (and harmless) when the table is missing."""
    if not TABLE.is_file():
        return {}
    named = {}
    for row in json.loads(TABLE.read_text()):
        where = f"{row['file']}: {row['kernel']}"
        named[row["fingerprint"]] = (f"reference kernel for {row['exercises']} ({where})" if row["exercises"]
                                     else f"teaching kernel {where}")
    return named


def reference_named(source: str | None) -> str | None:
    """"this is the course's reference kernel for ..." (or teaching kernel) when source is one, else None."""
    if not source:
        return None
    try:
        what = references().get(fingerprint(source))
    except (SyntaxError, ValueError):
        return None
    return f"this is the course's {what}, up to names, comments and layout" if what else None


def notes_for_kernels(kernels) -> list[str]:
    """One note per distinct reference kernel among kernel objects that ran."""
    notes = []
    for k in kernels:
        note = reference_named(kernel_source(k))
        if note and note not in notes:
            notes.append(f"{note}: submit a kernel of your own")
    return notes
