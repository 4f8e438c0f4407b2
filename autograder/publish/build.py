"""Build the notebooks: text sources -> solution notebooks -> student release.

    python -m autograder.publish.build [--db URL] [--only-solutions] [NAME ...]

solutions/<name>/<name>.py (jupytext percent format) is the one source of each notebook. From it:
1. solutions/<name>/<name>.ipynb, without outputs, with stable cell ids (it diffs as text);
2. course/<name>/ via `nbgrader generate_assignment`, which strips the solutions.

A kernel is written once, in kernels/. A line of a cell such as
    # include: kernels/rmsnorm.py (_rmsnorm_kernel, rmsnorm)
becomes, in the solution notebook, the source of those top-level definitions, in that order, so the reader of
the solution notebook sees the whole kernel and the benchmarks time the very same code.

A line of a markdown cell
    <!-- graded: 02.rmsnorm -->
becomes a one-line summary and, folded, the table of that exercise's criteria and their bars
(autograder.publish.cards), read from its spec and the grading configuration, so the exercise card says what the
grader does. The cells that check an exercise are tagged so that Run All goes past them (autograder.publish.runall).

A diagram, linked in the text source as `![](figures/NAME.svg)` (the files autograder.teach.diagrams writes), is
embedded in the notebook as a data URI, with the alt text of its entry in autograder.teach.diagrams.DIAGRAMS (the
one place that says what a picture shows): the picture then travels with the notebook, into JupyterLab,
nbgrader's feedback pages (which are written without the notebook's folder) and the documentation site. A cell
attachment would not do: JupyterLab shows no SVG attachment.
"""

from __future__ import annotations

import argparse
import ast
import base64
import os
import re
import site
import subprocess
import sys
from pathlib import Path

from autograder.publish import cards, reference_table, runall
from autograder.teach import diagrams

ROOT = Path(__file__).resolve().parents[2]


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.py") if p.stem == p.parent.name)


INCLUDE = re.compile(r"^# include: (kernels/\w+\.py) \(([\w,\s#]+?)\)$", re.M)  # names may go on over "# " lines


def definition_source(path: Path, name: str) -> str:
    """The text of a top-level function, class (with its decorators) or assignment to name in a Python file."""
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(lines[first - 1 : node.end_lineno])
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == name for t in targets):
            return "\n".join(lines[node.lineno - 1 : node.end_lineno])
    raise LookupError(f"{path.name}: no top-level definition of {name!r} to include")


BODY_INCLUDE = re.compile(r"^([ \t]+)# include body: (kernels/\w+\.py) \((\w+)\)$", re.M)


def body_source(path: Path, name: str, stub: str) -> str:
    """The statements of a top-level function of a Python file, its docstring left out, for an exercise stub
    that keeps the signature (and its own docstring) outside the solution block. The stub's decorators and
    signature must read exactly as the file's, so that the two cannot drift apart."""
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            header = "\n".join(lines[first - 1 : node.body[0].lineno - 1]).rstrip()
            if header not in stub:
                raise ValueError(f"the stub of {name} must keep the signature of {path.name}:\n{header}")
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            return "\n".join(lines[body[0].lineno - 1 : node.end_lineno])
    raise LookupError(f"{path.name}: no top-level function {name!r} to include the body of")


def expand_includes(source: str, root: Path = ROOT) -> str:
    """Replace each include line by the definitions it names, separated as in a module (two blank lines).
    `    # include body: kernels/op.py (f)`, indented inside a stub `def f(...)`, becomes f's body."""
    def body(match: re.Match) -> str:
        path = root / match.group(2)
        if not path.is_file():
            raise FileNotFoundError(f"include names {match.group(2)}, which does not exist")
        text = body_source(path, match.group(3), source)
        # The file's body is indented by 4; re-indent it to the include line's own indentation.
        return "\n".join((match.group(1) + line[4:]) if line.strip() else "" for line in text.splitlines())

    source = BODY_INCLUDE.sub(body, source)

    def one(match: re.Match) -> str:
        path = root / match.group(1)
        if not path.is_file():
            raise FileNotFoundError(f"include names {match.group(1)}, which does not exist")
        names = [n.strip(" \n#") for n in match.group(2).split(",") if n.strip(" \n#")]
        return "\n\n\n".join(definition_source(path, n) for n in names)

    return INCLUDE.sub(one, source)


FIGURE = re.compile(r"!\[([^\]]*)\]\(figures/([\w.-]+\.svg)\)")


def figure_alt(name: str, notebook: str | None = None) -> str:
    """The alt text of diagram `name`, from its registry entry; an error if it has none, or (given the notebook
    that shows it) if it is registered for another notebook."""
    entry = diagrams.DIAGRAMS.get(name)
    if entry is None:
        raise LookupError(f"figures/{name} is not in autograder.teach.diagrams.DIAGRAMS: register it there")
    if notebook is not None and entry.notebook != notebook:
        raise LookupError(f"figures/{name} is registered for {entry.notebook}, not {notebook}")
    return entry.alt


def figure_links(markdown: str) -> list[tuple[str, str]]:
    """(alt text, file name) of each diagram a markdown text links from figures/, the alt text from the
    registry."""
    return [(figure_alt(name), name) for _alt, name in FIGURE.findall(markdown)]


def svg_data_uri(path: Path) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def embed_figures(markdown: str, folder: Path) -> str:
    """markdown with each `![](figures/NAME.svg)` made an image whose source is folder/NAME.svg itself and whose
    alt text is the registry's (folder: solutions/<notebook>/figures)."""
    def embed(match: re.Match) -> str:
        name = match.group(2)
        if match.group(1).strip():
            raise LookupError(f"write ![](figures/{name}): its alt text is kept in autograder.teach.diagrams")
        alt = figure_alt(name, folder.parent.name)
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run python -m autograder.teach.diagrams")
        return f"![{alt}]({svg_data_uri(path)})"

    return FIGURE.sub(embed, markdown)


def notebook_from_source(src: Path, root: Path = ROOT):
    import jupytext


    nb = jupytext.read(src, fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["language_info"] = {"name": "python"}
    points = cards.points_by_exercise(nb.cells)  # each card's summary gives its exercise's points
    for i, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell["id"] = grade_id or f"cell-{i}"
        cell.source = expand_includes(cell.source, root)
        if cell.cell_type == "markdown":
            try:
                cell.source = embed_figures(cards.expand_cards(cell.source, points=points),
                                            src.parent / "figures")
            except (LookupError, FileNotFoundError) as exc:
                raise type(exc)(f"{src.name}, cell {i}: {exc}") from None
        cell.metadata.pop("lines_to_next_cell", None)  # the text source's layout, meaningless in a notebook
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return runall.tag_cells_that_may_raise(nb)  # Run All goes on past a check that fails


def write_solution(src: Path) -> Path:
    import nbformat

    out = src.with_suffix(".ipynb")
    nbformat.write(notebook_from_source(src), out)
    return out


def tool_env() -> dict:
    """The environment for running nbgrader and the grader's other processes: nbgrader calls helpers (alembic) by
    name, so this Python's bin/ goes first on PATH even when the venv is not activated; and a child started in
    another folder imports this very autograder (package_path)."""
    env = package_path(dict(os.environ))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def package_path(env: dict) -> dict:
    """env, with the folder holding this autograder package first on PYTHONPATH. A checkout run from its root
    without `pip install` imports the package through the current folder only, which a child started in a course's
    or a student's folder does not have; an editable install elsewhere would give the child other code. Nothing
    changes where the package lies in one of this Python's site-packages (an ordinary install)."""
    root = str(Path(__file__).resolve().parents[2])  # the folder holding autograder/publish/build.py's package
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root in sites:
        return env
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and str(Path(p).resolve()) != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    return env


# `python -m nbgrader` without jsonschema's IRI grammars, left out as a student's grading process leaves them out
# (autograder/classroom/student.py says why): 1.1 s to start instead of 2.5 on two cores.
_NBGRADER = ("import sys; sys.modules.setdefault('rfc3987_syntax', None); "
             "from nbgrader.apps.nbgraderapp import main; main()")


def nbgrader_command(*args: str) -> list[str]:
    """The command line of `nbgrader ARGS...` with this Python, started without the IRI grammars."""
    return [sys.executable, "-c", _NBGRADER, *args]


def generate_release(name: str, root: Path = ROOT, db: str | None = None) -> None:
    cmd = nbgrader_command("generate_assignment", name, "--force", "--log-level=WARN")
    if db:
        cmd.append(f"--db={db}")
    subprocess.run(cmd, cwd=root, check=True, env=tool_env())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="nbgrader database URL (default: gradebook.db at the top)")
    parser.add_argument("--only-solutions", action="store_true", help="write the solution notebooks only")
    parser.add_argument("names", nargs="*", help="notebooks to build, e.g. 02_vertical_fusion (default: all)")
    args = parser.parse_args(argv)
    known = {src.stem: src for src in sources()}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"no notebook named {', '.join(unknown)}; the notebooks are {', '.join(known)}")

    print(f"fingerprints: {reference_table.write_table(ROOT)} course kernels -> "
          f"{reference_table.TABLE.relative_to(ROOT)}")
    for src in [known[n] for n in args.names] or known.values():
        print(f"solutions: {src.relative_to(ROOT)} -> {write_solution(src).relative_to(ROOT)}")
        if not args.only_solutions:
            generate_release(src.stem, db=args.db)
            print(f"release:   course/{src.stem}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
