"""nbgrader's autograde for one student, in a workspace of its own (the child side of grade_class).

    python -m autograder.classroom.student WORKSPACE ASSIGNMENT STUDENT

WORKSPACE is a private course folder that grade_class prepared: nbgrader_config.py, the source assignment,
this student's submission and a gradebook with no other student in it. This process makes itself a
subreaper, runs nbgrader in-process, and ends every process the notebook left behind before nbgrader
writes anything (see StudentExecute). Its last line of output is a JSON object: success, and the reason
when the notebook's kernel died.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# nbformat checks notebooks with jsonschema, which builds rfc3987-syntax's Earley grammars (for the "iri" format)
# as it is imported: about 2 of the 5-6 seconds this process took to start on two cores, once per student, for a
# format that no notebook schema uses. An import that finds None in sys.modules fails, and jsonschema goes on
# without it.
sys.modules.setdefault("rfc3987_syntax", None)

from nbgrader.preprocessors import Execute  # noqa: E402

from autograder.guard import procs  # noqa: E402

_death: dict = {}  # how the kernel died, when it did


class StudentExecute(Execute):
    """nbgrader's Execute, plus: say which cell was running when the kernel died, and how it died; and end
    every process the notebook started (daemons included) once the kernel is shut down."""

    def preprocess(self, nb, resources=None, km=None):
        try:
            return super().preprocess(nb, resources, km)
        finally:
            procs.end_children()

    def preprocess_cell(self, cell, resources, index):
        try:
            return super().preprocess_cell(cell, resources, index)
        except Exception as exc:
            if type(exc).__name__ == "DeadKernelError":
                _death.update(cell=cell.metadata.get("nbgrader", {}).get("grade_id") or f"number {index + 1}",
                              status=self._kernel_status())
            raise

    def _kernel_status(self):
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return process.poll() if process is not None else None


def describe_death(death: dict) -> str:
    status = death.get("status")
    if status is None:
        how = "died"
    elif status < 0:
        how = f"was ended by {procs.signal_meaning(-status)}"
    else:
        how = f"exited with code {status} (os._exit or sys.exit in the notebook?)"
    return f"the notebook's kernel {how} while running cell {death.get('cell', '?')}"


def _config(workspace: Path):
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(workspace)).load_config()
    cfg.CourseDirectory.root = str(workspace)
    cfg.CourseDirectory.db_url = f"sqlite:///{workspace / 'gradebook.db'}"
    from nbgrader.converters import Autograde

    steps = Autograde.class_traits()["autograde_preprocessors"].default()
    cfg.Autograde.autograde_preprocessors = [StudentExecute if step is Execute else step for step in steps]
    return cfg


def main(argv: list[str]) -> int:
    workspace, assignment, student = Path(argv[0]).resolve(), argv[1], argv[2]
    procs.become_subreaper()
    from nbgrader.apps import NbGraderAPI

    api = NbGraderAPI(config=_config(workspace))
    result = api.autograde(assignment, student, force=True, create=True)
    procs.end_children()
    reason = describe_death(_death) if _death else ""
    print(json.dumps({"success": bool(result.get("success")), "reason": reason,
                      "log": (result.get("log") or "")[-4000:], "error": (result.get("error") or "")[-2000:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
