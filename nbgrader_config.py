"""nbgrader configuration for the course. nbgrader reads this file from the directory it runs in: the
repository root. Source notebooks (with solutions) live in solutions/, the student release in course/.

It also adds one step to `nbgrader generate_assignment`, right after nbgrader's ClearSolutions: every answer
cell of the release runs as it is handed out (TopLevelStubsAsComments). The step lives here, not in the
autograder package, because importing that package starts torch and picks a device, which nbgrader's commands
and its Jupyter server extension need not do."""

import os

from nbgrader import utils
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions, NbGraderPreprocessor

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "kernel-fusion"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
# The notebooks' text sources (NN_name.py, jupytext) stay out of the release: they hold the solutions. So do
# the diagrams' files (figures/): the build embeds each diagram in the notebook that shows it.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py", "figures"]

# Grade with the kernel `make lab` / `make test` register, and give a cell time for GPU benchmarks and
# for the interpreter's slower correctness runs.
c.Execute.kernel_name = "fusion-course"
c.Execute.timeout = 900
c.Execute.interrupt_on_timeout = True

# The grader's settings for a class: performance must be measured (a CPU-only grading machine fails it
# rather than skipping it). Edit grading.toml, or point FUSION_COURSE_GRADING elsewhere before grading; the
# course's secret seed is read from .grading-secret.toml beside it (written by `make course`, git-ignored).
os.environ.setdefault("FUSION_COURSE_GRADING", os.path.join(os.path.dirname(os.path.abspath(__file__)), "grading.toml"))


def comment_top_level_stubs(source: str, stub: str) -> str:
    """source with every unindented copy of stub (whole lines) cut down to the stub's comment lines."""
    stub_lines = stub.split("\n")
    comments = [line for line in stub_lines if line.lstrip().startswith("#")]
    lines, out, i = source.split("\n"), [], 0
    while i < len(lines):
        if lines[i:i + len(stub_lines)] == stub_lines:
            out += comments
            i += len(stub_lines)
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


class TopLevelStubsAsComments(NbGraderPreprocessor):
    """ClearSolutions replaces each `### BEGIN SOLUTION ... ### END SOLUTION` region by its code stub,
    `# YOUR CODE HERE` and `raise NotImplementedError()`, indented as the region was. In a function's body that
    raise is the exercise's stub: the grader calls the function and reports "not started". At the top level of
    a cell it would stop the cell before the definitions after it, and a student would have to delete it before
    the cell ran. There, after ClearSolutions, only the stub's comment is kept: a top-level region (helpers, a
    table, kernels pasted from another notebook) is a place to write in, and the functions' own stubs raise."""

    def preprocess(self, nb, resources):
        language = nb.metadata.get("kernelspec", {}).get("language", "python")
        self.stub = ClearSolutions(parent=self).code_stub[language]
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_solution(cell):
            cell.source = comment_top_level_stubs(cell.source, self.stub)
        return cell, resources


def _with_top_level_stubs_as_comments(steps: list) -> list:
    if ClearSolutions not in steps:
        raise RuntimeError(f"nbgrader's generate_assignment no longer runs ClearSolutions ({steps}): "
                           "nbgrader_config.py must place TopLevelStubsAsComments after the step that writes stubs")
    at = steps.index(ClearSolutions) + 1
    return steps[:at] + [TopLevelStubsAsComments] + steps[at:]


c.GenerateAssignment.preprocessors = _with_top_level_stubs_as_comments(
    list(GenerateAssignment.class_traits()["preprocessors"].make_dynamic_default()))


def _feedback_page() -> None:
    """nbgrader generate_feedback: each graded cell in the page's table of contents named by the exercise and the
    criterion it grades, where nbgrader's own page says "Test cell" (a template over nbgrader's, in
    autograder/classroom/feedback). The package is found without importing it; without it, nbgrader's page."""
    import importlib.util

    import nbgrader

    spec = importlib.util.find_spec("autograder")
    where = list(spec.submodule_search_locations or []) if spec else []
    ours = os.path.join(where[0], "classroom", "feedback") if where else ""
    if not os.path.isfile(os.path.join(ours, "feedback", "page.html.j2")):
        return
    # nbgrader's template (its name, which nbgrader's formgrader also asks for), drawn by our page over its own.
    c.HTMLExporter.template_name = "feedback"
    c.HTMLExporter.template_file = "page.html.j2"
    nbgrader_pages = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")
    c.HTMLExporter.extra_template_basedirs = [nbgrader_pages, ours]


_feedback_page()
