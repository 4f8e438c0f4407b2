"""A static look at a submitted notebook for code that has no business in a kernel exercise.

The runtime defences (integrity, the grader's own checks) catch tampering as it happens; this scan reads the
student's cells without running them and names what an instructor should look at: assignments to the grader,
torch or triton, reaching into the interpreter, processes, signals and other students' files. It flags, it
does not score: legitimate code can match (``import subprocess`` in a side experiment), and code built at
run time (exec of a string) escapes it.
"""

from __future__ import annotations

import ast
import re

from autograder.guard.fingerprint import jit_functions, reference_named

# Names whose attributes a submission must not assign: the grader, the libraries it calls into, Python itself.
PROTECTED_ROOTS = {"autograder", "torch", "triton", "tl", "F", "np", "numpy", "builtins", "sys", "os", "time",
                   "math", "random", "IPython", "nbgrader", "kernels"}
PROTECTED_NAMES = {"check", "autograder", "runtime", "Report", "CriterionResult"}
# Calls worth a look, and why.
SUSPECT_CALLS = {
    "setattr": "setattr() on a module or class",
    "delattr": "delattr()",
    "exec": "exec() of code built at run time",
    "eval": "eval() of code built at run time",
    "compile": "compile() of code built at run time",
    "__import__": "__import__()",
    "importlib.reload": "reloads a module",
    "sys._getframe": "inspects the call stack (can tell when it is being graded or timed)",
    "inspect.stack": "inspects the call stack (can tell when it is being graded or timed)",
    "inspect.currentframe": "inspects the call stack (can tell when it is being graded or timed)",
    "gc.get_objects": "walks the garbage collector's objects (can reach the grader's records)",
    "gc.get_referrers": "walks the garbage collector's objects (can reach the grader's records)",
    "os.readlink": "follows links (in /proc: where other processes run)",
    "os.kill": "sends signals to processes",
    "os.killpg": "sends signals to processes",
    "os.fork": "starts processes",
    "os.setsid": "leaves its session",
    "os._exit": "ends the process without a trace",
    "os.abort": "aborts the process",
    "subprocess.Popen": "starts processes",
    "subprocess.run": "starts processes",
    "os.system": "starts processes",
    "ctypes.CDLL": "calls C code directly",
    "ctypes.string_at": "reads raw memory",
    "ctypes.memmove": "writes raw memory",
    "torch.cuda.Stream": "work on a side CUDA stream",
    "threading.Thread": "starts threads",
    "get_ipython().set_custom_exc": "changes how Jupyter reports errors",
}
# Names distinctive enough to flag when imported bare (from subprocess import Popen).
DISTINCT = {"Popen", "setsid", "_getframe", "string_at", "memmove", "CDLL", "killpg", "Stream", "get_referrers"}
ATTRIBUTE_FLAGS = {
    "__code__": "replaces a function's code",
    "events": "changes Jupyter's hooks around cells",
    "input_transformers_cleanup": "rewrites cells before Jupyter runs them",
    "input_transformers_post": "rewrites cells before Jupyter runs them",
    "ast_transformers": "rewrites cells before Jupyter runs them",
    "modules": None,  # sys.modules: flagged only as an assignment target
    "environ": None,
}
PATH_HINTS = re.compile(r"gradebook\.db|grading\.toml|nbgrader_config|submitted|autograded|\.\./\.\.|site-packages")


def _dotted(node) -> str:
    """a.b[i].c -> "a.b.c"; a call in the chain is kept as "f()"."""
    parts = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    else:
        return ""
    return ".".join(reversed(parts))


def _targets(node):
    if isinstance(node, (ast.Assign,)):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return node.targets
    return []


def _flatten(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flatten(t.elts)
        else:
            yield t


def scan_source(source: str) -> list[tuple[int, str]]:
    """(line, what) for every suspect construct in one cell's code."""
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError as e:
        return [(e.lineno or 0, "does not parse as Python (not scanned)")]
    found = []
    for node in ast.walk(tree):
        for t in _flatten(_targets(node)):
            name = _dotted(t.value) if isinstance(t, ast.Subscript) else _dotted(t)
            root = name.split(".")[0]
            if isinstance(t, ast.Name) and t.id in PROTECTED_NAMES:
                found.append((node.lineno, f"rebinds `{t.id}`, a name the graded cells use"))
            elif isinstance(t, ast.Attribute) and (root in PROTECTED_ROOTS | PROTECTED_NAMES or t.attr in ATTRIBUTE_FLAGS):
                why = ATTRIBUTE_FLAGS.get(t.attr)
                found.append((node.lineno, f"assigns {name}" + (f": {why}" if why else "")))
            elif isinstance(t, ast.Subscript) and (root in PROTECTED_ROOTS and "." in name or name == "builtins"):
                found.append((node.lineno, f"assigns an item of {name}"))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in PROTECTED_NAMES:
            found.append((node.lineno, f"defines `{node.name}`, a name the graded cells use"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.asname in PROTECTED_NAMES:
                    found.append((node.lineno, f"imports something as `{alias.asname}`, a name the graded cells use"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/proc/" in node.value:
            found.append((node.lineno, "reads /proc: other processes' state (the grader's, its folders)"))
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            for attr, why in ATTRIBUTE_FLAGS.items():
                if why and f".{attr}." in f".{name}.":
                    found.append((node.lineno, f"calls {name}: {why}"))
            for suspect, why in SUSPECT_CALLS.items():
                last = suspect.split(".")[-1]
                if name == suspect or name.endswith("." + suspect) or (name == last and last in DISTINCT):
                    found.append((node.lineno, f"calls {name}: {why}"))
                    break
            if name in ("open", "io.open", "os.open", "shutil.copy", "shutil.rmtree", "os.remove", "os.rename"):
                literal = " ".join(a.value for a in ast.walk(node) if isinstance(a, ast.Constant) and isinstance(a.value, str))
                if PATH_HINTS.search(literal):
                    found.append((node.lineno, f"calls {name} on {literal!r}: the course's files"))
    return sorted(set(found))


def _strip_magics(source: str) -> str:
    """Jupyter's %magics and !shell lines are not Python: blank them (keeping line numbers)."""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())


def scan_notebook(nb: dict) -> list[str]:
    """Flags for the code cells a student could edit (not locked), and cells added above the set-up cell."""
    flags = []
    seen_locked = False
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        label = meta.get("grade_id") or f"#{index + 1}"
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if meta.get("locked"):
            seen_locked = True
            continue
        if not seen_locked and source.strip():
            flags.append(f"cell {label}: code above the set-up cell (runs before the grader is imported)")
        flags += [f"cell {label} line {line}: {what}" for line, what in scan_source(source)]
        flags += [f"cell {label} line {line}: {note}" for line, note in reference_kernels_in(source)]
    return flags


def reference_kernels_in(source: str) -> list[tuple[int, str]]:
    """(line, note) for each @triton.jit function of a cell whose code is a course reference kernel's."""

    found = []
    for _name, line, code in jit_functions(_strip_magics(source)):
        note = reference_named(code)
        if note:
            found.append((line, note))
    return found
