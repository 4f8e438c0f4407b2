"""The house rules of the code, read from its imports: the grader and the kernels stay a tree a newcomer can read.

The layers, lowest first (LAYERS below says which modules each holds). A module imports only from its own
layer or one below it, never back up, and nowhere is there an import circle:

    base       config, runtime, memcheck, report, progress: what every layer may use
    measure    the device, its peaks, the timers and the meters (launches counted, bytes allocated)
    guard      what keeps a grading honest: guarded buffers, the sandbox, the integrity record, fingerprints
    specs      the exercises: their data, their torch references, the registry
    link       the student's side of judged grading: the session with the judge and the wire both speak
    criteria   what grades one criterion of one exercise
    judge      the judge process, its bars and how it is started
    check      check(): an exercise's criteria run and reported
    package    `import autograder`, what a notebook's first cell gives it
    apps       the notebook side (demonstrations), the checker, grade-class, the build, the diagrams, the
               reference kernels in kernels/ (each takes its torch side from specs)
    tools      the command line and the benchmarks

The only exemption: a package's `__init__` may import its own modules (that is how it re-exports them). A
module that needs something of a layer above it (the package's `check`, the course's root folder) is handed it
by the layer above, or finds it from its own file. Imports under `if TYPE_CHECKING:` never run and are not
counted.

And:
- no module imports a private name (`_x`) of another;
- imports of the project's own modules sit at a module's top, not inside functions;
- no module is much longer than one sitting's reading.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The benchmarks' own folder, once they have one at the top level.
PACKAGES = ("autograder", "kernels") + (("bench",) if (ROOT / "bench").is_dir() else ())
MAX_LINES = 400
# Lowest first. "x.*" is the package x and every module under it; a plain name is that module alone. A module
# belongs to the layer of the longest name that covers it.
LAYERS = (
    ("base", ("autograder.config", "autograder.runtime", "autograder.memcheck", "autograder.report",
              "autograder.progress")),
    ("measure", ("autograder.measure.*",)),
    ("guard", ("autograder.guard.*",)),
    ("specs", ("autograder.specs.*",)),
    ("link", ("autograder.link.*",)),
    ("criteria", ("autograder.criteria.*",)),
    ("judge", ("autograder.judge.*",)),
    ("check", ("autograder.check",)),
    ("package", ("autograder",)),
    ("apps", ("autograder.demonstrations", "autograder.checker.*", "autograder.classroom.*",
              "autograder.publish.*", "autograder.teach.*", "kernels.*")),
    ("tools", ("autograder.__main__", "bench.*")),
)
# Imports that still run back up while a move lands in steps: (importer, imported) -> "moving: what moves".
UPWARD_FOR_NOW: dict[tuple[str, str], str] = {}
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


def test_no_import_circles():
    """Every import counts, a package's __init__ too: a module that imports its own package closes a circle
    through the __init__ that imports it."""
    assert _cycles(_graph()) == []


def _layer(name: str) -> int | None:
    """The index in LAYERS of the layer that holds module name, None when no layer does."""
    best, found = -1, None
    for i, (_, members) in enumerate(LAYERS):
        for member in members:
            package = member.removesuffix(".*")
            covers = name == package or (member.endswith(".*") and name.startswith(package + "."))
            if covers and len(package) > best:
                best, found = len(package), i
    return found


def test_every_module_has_a_layer_and_every_layer_a_module():
    assert [name for name in MODULES if _layer(name) is None] == [], "add the module to LAYERS"
    held = {member: [name for name in MODULES if name == member.removesuffix(".*")
                     or (member.endswith(".*") and name.startswith(member.removesuffix("*")))]
            for _, members in LAYERS for member in members}
    assert [member for member, names in held.items() if not names] == [], "a name in LAYERS names nothing"


def _upward(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target.startswith(name + ".") or (name, target) in UPWARD_FOR_NOW:
                continue  # a package's __init__ re-exporting its own module, or a move under way
            low, high = _layer(name), _layer(target)
            if low is not None and high is not None and high > low:
                found.append(f"{name} ({LAYERS[low][0]}) imports {target} ({LAYERS[high][0]})")
    return found


def test_imports_point_down_the_layers():
    assert _upward(_graph()) == []


def test_the_rules_see_an_import_back_up_and_a_circle_through_a_package():
    assert _upward({"autograder.runtime": {"autograder.guard.watch"},
                    "autograder.specs": {"autograder.specs.exercise"},
                    "autograder.guard.integrity": {"autograder"}}) == [
        "autograder.guard.integrity (guard) imports autograder (package)",
        "autograder.runtime (base) imports autograder.guard.watch (guard)",
    ]
    assert _cycles({"autograder": {"autograder.check"}, "autograder.check": {"autograder"}}) == [
        ["autograder", "autograder.check"]]


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
    bad = [f"{name}:{line} imports {target} inside a function" for name, path in MODULES.items()
           if name not in LAZY_ALLOWED for target, _, at_top, line in _imports(name, path) if not at_top]
    assert bad == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_reads_in_one_sitting(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)} has {lines} lines: split it along a seam"
