"""An error that stopped a Triton kernel, told the way a first-timer can act on it: the line inside the
@triton.jit function where it happened, and for the commonest mistakes one plain sentence with the fix.

Triton reports such errors at the launch line (``kernel[grid](...)``), wrapped: the interpreter raises
InterpreterError(repr(cause)) from the cause, whose traceback runs through the kernel's own source; a GPU raises
CompilationError, which carries the kernel's source and the AST node it stopped at (nested once per @triton.jit
function called). Both are read here; nothing is re-run.
"""

from __future__ import annotations

import os
import traceback

LIBRARY_PATHS = ("site-packages", "dist-packages", os.sep + "autograder" + os.sep, os.sep + "triton" + os.sep)

# (words in the error, what it means and the fix). The words are Triton's own, from 3.6 to 3.9, lower case.
_TRANSLATIONS = (
    (("arange's arguments must be of type tl.constexpr",),
     "the length of a tl.arange must be known when the kernel compiles, and a runtime argument such as n is not: "
     "give the kernel a `BLOCK: tl.constexpr` parameter, launch it with BLOCK=triton.next_power_of_2(n) (or a "
     "fixed block and a grid of triton.cdiv(n, BLOCK) programs), and mask the lanes at or past n."),
    (("must be a power of 2", "must be power of 2"),
     "a block's length must be a power of two (16, 32, ..., 1024): round it up with triton.next_power_of_2(n) "
     "and mask the lanes past the end."),
    (("k >= 16", "k >= 32"),
     "tl.dot needs an inner dimension K of at least 16 on a GPU (32 for 8-bit inputs): make BLOCK_K at least 16, "
     "loading the missing columns with a mask and other=0.0 when the matrix is narrower."),
    (("both operands must be same dtype", "operands must have the same dtype"),
     "tl.dot's two operands must have the same dtype: convert one of them (a.to(tl.float16), or both "
     ".to(tl.float32)) before the product."),
)
_TORCH_CALL = ("must be tensor, not tensor", "must be tensor, not constexpr", "not tensor)")


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of the chain of causes (the error itself, not Triton's wrappers)."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def _chain(exc: BaseException) -> list[BaseException]:
    found, seen = [], set()
    while exc is not None and id(exc) not in seen:
        found.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__
    return found


def _is_library(filename: str) -> bool:
    return any(part in filename for part in LIBRARY_PATHS)


def kernel_line(exc: BaseException) -> str:
    """' in kernel NAME at FILE:LINE: CODE' for the line of a @triton.jit function the error stopped at, or ''.

    A GPU: the innermost CompilationError's source and node. The interpreter: the innermost frame outside the
    libraries in a cause's traceback that is not in the exception's own (the launch)."""
    chain = _chain(exc)
    for cause in reversed(chain):
        src, node = getattr(cause, "src", None), getattr(cause, "node", None)
        lineno = getattr(node, "lineno", None)
        if isinstance(src, str) and isinstance(lineno, int) and 0 < lineno <= len(src.splitlines()):
            lines = src.splitlines()
            name = next((ln.split("def ", 1)[1].split("(", 1)[0].strip() for ln in lines
                         if ln.lstrip().startswith("def ")), "?")
            return f" in kernel {name}, line {lineno} of its source: {lines[lineno - 1].strip()}"
    if not any(type(e).__module__.startswith("triton") for e in chain):
        return ""  # not a kernel's error (a cause the student's own code chained)
    launch = {(fr.filename, fr.lineno) for fr in traceback.extract_tb(exc.__traceback__)}
    for cause in reversed(chain[1:]):
        for fr in reversed(traceback.extract_tb(cause.__traceback__)):
            if not _is_library(fr.filename) and (fr.filename, fr.lineno) not in launch:
                code = f": {fr.line.strip()}" if fr.line else ""
                return f" in kernel {fr.name} at {os.path.basename(fr.filename)}:{fr.lineno}{code}"
    return ""


def _called_directly(exc: BaseException) -> bool:
    """True when the interpreter ran a @triton.jit function called like a Python function (no launch, no grid):
    it enters the function's own __call__ with no launch (run) around it, and fails in whatever needs a program."""
    names = {fr.name for fr in traceback.extract_tb(exc.__traceback__)
             if fr.filename.endswith(os.path.join("runtime", "interpreter.py"))}
    return "__call__" in names and "run" not in names


def explain(exc: BaseException, line: str = "") -> str:
    """One plain sentence with the fix for a common first-timer error, or ''. `line` is the kernel's line."""
    text = " ".join(str(e) for e in _chain(exc)).lower()
    if any(words in text for words in _TORCH_CALL) or ("torch." in line and isinstance(root_cause(exc), TypeError)):
        return ("A torch function cannot run inside a @triton.jit kernel: there a value is a Triton block, not a "
                "torch.Tensor, and only triton.language operations (tl.exp, tl.sum, tl.where, ...) and other "
                "@triton.jit functions apply to it. Write the operation with tl (sigmoid(x) is 1 / (1 + tl.exp(-x)))"
                " and keep torch calls in the launcher.")
    if ("cannot call @triton.jit'd outside of the scope of a kernel" in text and not line) or _called_directly(exc):
        return ("A @triton.jit kernel is launched with a grid, not called: write kernel[grid](...), for example "
                "_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK).")
    for words, meaning in _TRANSLATIONS:
        if any(w in text for w in words):
            return meaning[0].upper() + meaning[1:]
    return ""
