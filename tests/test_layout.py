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
- no module is much longer than one sitting's reading;
- tests/ is laid out like the code, each module's tests in a file named after it in its package's folder, or
  TESTED_IN says where they are ("where the tests are", below).
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


# --- where the tests are ---------------------------------------------------------------------------------------
# tests/ is laid out like the code: the tests of a module of autograder/ sit in the folder named after its
# package, in a file named after it (autograder/criteria/precision.py in tests/criteria/test_precision.py). A
# module whose tests are elsewhere (through a module above it, or as one part of a larger test) says where in
# TESTED_IN, and one with nothing of its own to test says why. The reference kernels' tests are in
# tests/kernels/, the benchmarks' in tests/bench/; tests of the course as a whole rather than of one package are
# in a folder of COURSE_WIDE. At the top of tests/ stay only the project-wide rules (HOUSE_RULES), the helpers
# the test files share and import (conftest.py, corpus_cases.py, classroom.py, ...), and the corpus of hostile
# submissions (tests/corpus/).

TESTS = ROOT / "tests"
NOT_ALONE = "not tested alone: "
HOUSE_RULES = {
    "test_layout.py": "the layers of the code, and this layout of its tests",
    "test_names.py": "names that say what a module holds, each once",
    "test_docs.py": "the documentation site and the README",
    "test_setup.py": "the set-up files agree with each other",
    "test_contributing.py": "docs/contributing.md's recipe for an exercise still works",
    "test_grader_standalone.py": "autograder/ never needs a solution from kernels/",
}
COURSE_WIDE = {
    "notebooks": "the notebooks as a whole: sources and release, their cells, the round trip, the browser",
    "hostile": "the corpus of hostile submissions (tests/corpus/) graded the ways each case asks",
}
# Folders of tests/ that hold data, not test files.
DATA = {"corpus"}
# Modules of autograder/ without a test file named after them: where their tests are.
TESTED_IN = {
    "autograder": "tests/checker/test_checker.py",  # a notebook's first cell, in the checker's Jupyter kernel
    "autograder.__main__": "tests/checker/test_check_cli.py",
    "autograder.check": "tests/criteria/test_grade_malformed.py",
    "autograder.config": "tests/specs/test_instructor_bars.py",
    "autograder.demonstrations": "tests/notebooks/test_demonstrations.py",
    "autograder.memcheck": "tests/criteria/test_no_dead_kernel.py",
    "autograder.progress": NOT_ALONE + "a progress widget shown only inside a Jupyter kernel, nothing elsewhere",
    "autograder.report": "tests/classroom/test_leaderboard.py",
    "autograder.runtime": "tests/measure/test_device.py",
    "autograder.checker.execute": "tests/checker/test_checker.py",
    "autograder.checker.notebook": "tests/checker/test_checker.py",
    "autograder.classroom.course": "tests/classroom/test_grade_class.py",
    "autograder.classroom.gradebook": "tests/classroom/test_unmeasurable_here.py",
    "autograder.classroom.loop": "tests/classroom/test_grade_class.py",
    "autograder.classroom.process": "tests/classroom/test_grade_class.py",
    "autograder.classroom.fonts": "tests/classroom/test_grade_class.py",
    "autograder.classroom.runners": "tests/classroom/test_grade_class_parallel.py",
    "autograder.classroom.secret": "tests/classroom/test_grade_class.py",
    "autograder.classroom.student": "tests/classroom/test_grade_class.py",
    "autograder.criteria.at_size": "tests/measure/test_capability.py",
    "autograder.criteria.codegen": "tests/criteria/test_hopper_attention.py",
    "autograder.criteria.correctness": "tests/criteria/test_grade_fused_chain.py",
    "autograder.criteria.keep_mask": "tests/criteria/test_grade_dropout.py",
    "autograder.criteria.kernel": "tests/criteria/test_kinds.py",
    "autograder.criteria.numeric": "tests/criteria/test_grade_lora.py",
    "autograder.criteria.performance": "tests/measure/test_timing.py",
    "autograder.criteria.performance_verdict": "tests/measure/test_timing.py",
    "autograder.criteria.precision": "tests/criteria/test_precision_shapes.py",
    "autograder.criteria.step": "tests/criteria/test_grade_horizontal.py",
    "autograder.guard.deadline": "tests/measure/test_timing.py",
    "autograder.guard.footprint": "tests/guard/test_isolation.py",
    "autograder.guard.integrity": "tests/hostile/test_corpus.py",
    "autograder.guard.integrity_record": "tests/hostile/test_corpus.py",
    "autograder.guard.largest": "tests/criteria/test_grade_router_tiles.py",
    "autograder.guard.procs": "tests/guard/test_isolation.py",
    "autograder.guard.scan": "tests/guard/test_isolation.py",
    "autograder.guard.watch": "tests/criteria/test_fusion.py",
    "autograder.judge": "tests/judge/test_judge.py",
    "autograder.judge.bars": "tests/judge/test_judge.py",
    "autograder.judge.launch": "tests/judge/test_judge.py",
    "autograder.judge.server": "tests/judge/test_judge.py",
    "autograder.link.session": "tests/judge/test_judge.py",
    "autograder.link.wire": "tests/judge/test_judge.py",
    "autograder.measure.meters": "tests/criteria/test_memory.py",
    "autograder.measure.sizes": "tests/measure/test_capability.py",
    "autograder.publish.build": "tests/notebooks/test_notebooks.py",
    "autograder.publish.reference_table": "tests/guard/test_fingerprint.py",
    # The registry, and each notebook's specs: graded through the planted-bug test of the notebook's topic.
    "autograder.specs": "tests/test_contributing.py",
    "autograder.specs.exercise": "tests/criteria/test_kinds.py",
    "autograder.specs.hbm_cost_model": "tests/criteria/test_grade_fused_chain.py",
    "autograder.specs.vertical_fusion": "tests/criteria/test_grade_norms.py",
    "autograder.specs.vertical_torch": "tests/specs/test_bounds.py",
    "autograder.specs.fused_dropout": "tests/kernels/test_kernels_dropout.py",
    "autograder.specs.horizontal_fusion": "tests/criteria/test_grade_horizontal.py",
    "autograder.specs.horizontal_torch": "tests/specs/test_bounds.py",
    "autograder.specs.gemm_epilogue_fusion": "tests/criteria/test_grade_gemm.py",
    "autograder.specs.lora": "tests/criteria/test_grade_lora.py",
    "autograder.specs.streaming_reduction_fusion": "tests/criteria/test_grade_streaming.py",
    "autograder.specs.streaming_softmax": "tests/criteria/test_grade_router_tiles.py",
    "autograder.specs.streaming_torch": "tests/criteria/test_grade_router_tiles.py",
    "autograder.specs.tiled_attention": "tests/criteria/test_grade_router_tiles.py",
    "autograder.specs.sparse_head": "tests/criteria/test_grade_sparse_head.py",
    "autograder.specs.compiler_fusion": "tests/criteria/test_compiled.py",
    "autograder.specs.fusion_for_training": "tests/kernels/test_training_kernels.py",
    "autograder.specs.training_predictions": "tests/notebooks/test_nbgrader_roundtrip.py",
    "autograder.specs.decoder": "tests/kernels/test_capstone.py",
    "autograder.specs.text_corpus": "tests/kernels/test_capstone.py",
    "autograder.specs.hopper_attention": "tests/criteria/test_hopper_attention.py",
    "autograder.specs.rounding": "tests/criteria/test_grade_gemm.py",
    # The diagrams' drawing kit and figures: every committed SVG drawn again and compared byte for byte.
    "autograder.teach.drawing": "tests/teach/test_diagrams.py",
    "autograder.teach.figures_fusion": "tests/teach/test_diagrams.py",
    "autograder.teach.figures_hopper": "tests/teach/test_diagrams.py",
    "autograder.teach.figures_memory": "tests/teach/test_diagrams.py",
    "autograder.teach.figures_streaming": "tests/teach/test_diagrams.py",
    "autograder.teach.plots": "tests/notebooks/test_nbgrader_roundtrip.py",  # alice runs every demonstration
    "autograder.teach.recording": "tests/teach/test_programs.py",
}


def _own_test_file(module: str) -> str | None:
    """tests/<package>/test_<module>.py for a module of a package of autograder/; None for the package's own
    top-level modules and __init__ files, which have no folder of their own."""
    parts = module.split(".")
    if parts[0] != "autograder" or len(parts) < 3:
        return None
    return "/".join(["tests", *parts[1:-1], f"test_{parts[-1]}.py"])


def _exists(path: str) -> bool:
    return (ROOT / path).is_file()


def _test_files() -> list[Path]:
    return sorted(p.relative_to(ROOT) for p in TESTS.rglob("test_*.py")
                  if "__pycache__" not in p.parts and p.relative_to(TESTS).parts[0] not in DATA)


def test_the_test_file_of_a_module_is_named_after_it_in_its_packages_folder():
    assert _own_test_file("autograder.criteria.precision") == "tests/criteria/test_precision.py"
    assert _own_test_file("autograder.check") is None and _own_test_file("autograder.judge") is None
    assert _own_test_file("kernels.rmsnorm") is None


def test_every_grader_module_has_a_test_file_or_says_where_its_tests_are():
    grader = [name for name in MODULES if name.split(".")[0] == "autograder"]
    missing = [f"{name} (no {_own_test_file(name) or 'test file of its own'})" for name in grader
               if name not in TESTED_IN and not (_own_test_file(name) and _exists(_own_test_file(name)))]
    assert missing == [], "write the test file named, or say in TESTED_IN where the module's tests are"


def test_tested_in_names_real_modules_and_real_test_files():
    assert [name for name in TESTED_IN if name not in MODULES] == [], "a module in TESTED_IN is gone"
    own = [name for name in TESTED_IN if _own_test_file(name) and _exists(_own_test_file(name))]
    assert own == [], "these modules have a test file of their own now: take them out of TESTED_IN"
    bad = [f"{name}: {where}" for name, where in TESTED_IN.items()
           if not where.startswith(NOT_ALONE) and not (where.startswith("tests/") and _exists(where))]
    assert bad == [], "a path in TESTED_IN names no test file"


def test_every_test_file_sits_in_the_folder_of_what_it_tests():
    packages = {p.name for p in (ROOT / "autograder").iterdir() if p.is_dir() and any(p.glob("*.py"))}
    folders = packages | {"kernels", "bench"} | set(COURSE_WIDE)
    files = _test_files()
    at_top = [str(f) for f in files
              if len(f.parts) == 2 and f.name not in HOUSE_RULES]
    assert at_top == [], "move these into the folder of the package they test (or of COURSE_WIDE)"
    stray = sorted({f.parts[1] for f in files if len(f.parts) > 2} - folders)
    assert stray == [], "a folder of tests/ is named after no package of the code and is not in COURSE_WIDE"
    assert [name for name in HOUSE_RULES if not (TESTS / name).is_file()] == []


def test_no_two_test_files_share_a_name():
    """Without __init__.py files pytest imports each test file by its name alone: two alike would clash."""
    by_name = {}
    for f in _test_files():
        by_name.setdefault(f.name, []).append(str(f))
    assert [paths for paths in by_name.values() if len(paths) > 1] == []
