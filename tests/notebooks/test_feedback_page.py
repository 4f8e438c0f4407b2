"""The feedback page (nbgrader generate_feedback, with the course's nbgrader_config.py) names each graded cell by
the exercise and criterion it grades, where nbgrader's own page says "Test cell"."""

import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _exporter():
    import nbgrader
    from nbconvert import HTMLExporter
    from traitlets.config.loader import PyFileConfigLoader

    # The course's config file names its grading file for the processes nbgrader starts (os.environ.setdefault):
    # loaded here, it must not leave that setting to the other tests of this process.
    before = os.environ.get("FUSION_COURSE_GRADING")
    try:
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    finally:
        if before is None:
            os.environ.pop("FUSION_COURSE_GRADING", None)
        else:
            os.environ["FUSION_COURSE_GRADING"] = before
    assert cfg.HTMLExporter.template_file == "page.html.j2"
    # What GenerateFeedback adds itself: the style sheet its page inlines.
    cfg.HTMLExporter.extra_template_paths = [os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions",
                                                          "formgrader", "static", "node_modules", "bootstrap", "dist",
                                                          "css")]
    return HTMLExporter(config=cfg)


def _graded(source: str, grade_id: str, score: float):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                 "points": 2, "score": score}
    return cell


@pytest.fixture(scope="module")
def contents():
    nb = nbformat.v4.new_notebook()
    nb.cells += [_graded('check("02.rmsnorm", rmsnorm, criteria=["precision"]).assert_passed("precision")',
                         "test_rmsnorm_precision", 0.0),
                 _graded("assert total_bytes == 3 * n", "test_bytes", 2.0)]
    html, _ = _exporter().from_notebook_node(nb, resources={"nbgrader": {"notebook": "02_vertical_fusion",
                                                                         "score": 2, "max_score": 4,
                                                                         "late_penalty": 0}})
    return re.findall(r'<li><a href="#([^"]*)">([^<]*)</a> \(Score: ([^)]*)\)', html)


def test_each_graded_cell_is_named_by_its_exercise_and_criterion(contents):
    assert ("test_rmsnorm_precision", "02.rmsnorm · precision", "0.0 / 2.0") in contents


def test_a_cell_that_grades_no_exercise_keeps_nbgraders_words(contents):
    assert ("test_bytes", "Test cell", "2.0 / 2.0") in contents
