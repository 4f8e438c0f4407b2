"""The house rules of the code, read from its imports: the grader and the kernels stay a tree a newcomer can read.

- no import circle among the modules of autograder/ and kernels/ (counting the imports at a module's top, where
  a circle would break an import, and those inside functions, where it only hides);
- no module imports a private name (`_x`) of another;
- imports of the project's own modules sit at a module's top, not inside functions;
- no module is much longer than one sitting's reading.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autograder", "kernels", "bench")
MAX_LINES = 460
# Modules that may import the project lazily, and why.
LAZY_ALLOWED = {
    # Imported first by every notebook: pulling the criteria in here would slow `import autograder` for nothing.
    "autograder",
    # The command line loads only what the chosen subcommand needs (grade-class needs nbgrader, check does not).
    "autograder.__main__",
    # A notebook's code is run only after the grader has been recorded as it was (integrity.protect).
    "autograder.checker.execute",
}


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path):
    """(target module, imported name or None, at top?, line) of every import of the project's own code."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    top = {id(n) for n in tree.body}
    # Imports under `if TYPE_CHECKING:` are for the type checker only.
    typing_only = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield alias.name, None, id(node) in top, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if sub in MODULES:
                    yield sub, None, id(node) in top, node.lineno
                else:
                    yield module, alias.name, id(node) in top, node.lineno


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {target for target, _, _, _ in _imports(name, path) if target in MODULES and target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _is_ancestor_package(a: str, b: str) -> bool:
    """A package's __init__ importing one of its own submodules (or being imported by it) is how Python loads
    packages, not a circle between two responsibilities."""
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_no_import_circles():
    graph = _graph()
    pruned = {v: {w for w in ws if not _is_ancestor_package(v, w)} for v, ws in graph.items()}
    assert _cycles(pruned) == []


def _shares_an_ops_helpers(name: str, target: str) -> bool:
    """kernels/<op>.py files are reference solutions read like Triton's tutorials: an op's backward or its
    torch.library wrapper reuses the forward's private @triton.jit kernels and checks, and notebooks include
    those by name. The grader and the benchmarks get no such licence."""
    return name.startswith("kernels.") and target.startswith("kernels.") and ".bench" not in name + target


def test_no_private_name_is_imported_from_another_module():
    bad = [f"{name}:{line} imports {target}.{what}" for name, path in MODULES.items()
           for target, what, _, line in _imports(name, path)
           if what and what.startswith("_") and not _shares_an_ops_helpers(name, target)]
    assert bad == []


def test_the_projects_own_modules_are_imported_at_the_top():
    """The package itself (`import autograder`, whose __init__ imports these modules) may be reached for lazily:
    that is how a module records the package after it has finished loading."""
    bad = [f"{name}:{line} imports {target} inside a function" for name, path in MODULES.items()
           if name not in LAZY_ALLOWED for target, _, at_top, line in _imports(name, path)
           if not at_top and target != "autograder"]
    assert bad == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_reads_in_one_sitting(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)} has {lines} lines: split it along a seam"
