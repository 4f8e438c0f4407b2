"""Progress bars for grading inside a notebook: a widget (tqdm.notebook) where the cell runs in a Jupyter kernel
with ipywidgets, nothing elsewhere. Never text on stderr: nbgrader scores a graded cell that writes to stderr 0."""

from __future__ import annotations


def _in_jupyter_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def steps(items, desc: str):
    """items, drawn as a progress bar while a graded cell works through them (the interpreter takes seconds a
    case); the plain items outside a notebook (the checker, scripts, tests)."""
    if not _in_jupyter_kernel():
        return items
    try:
        import ipywidgets  # noqa: F401  tqdm.notebook falls back to text on stderr without it
        from tqdm.notebook import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, leave=True)
