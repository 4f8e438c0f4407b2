"""Triton's interpreter made as strict as a GPU while the grader runs a student's kernel.

Two mistakes that a GPU punishes pass unnoticed in the interpreter:

- a masked load without ``other=``: the interpreter fills the masked-off lanes with 0, so a row sum over a padded
  block comes out right; on a GPU those lanes hold whatever the registers held. Inside ``strict()`` the
  masked-off lanes of a floating-point load without ``other=`` are NaN, so a reduction over them fails on the CPU
  as it can on a GPU. A load with ``other=`` behaves as written; integer loads (index tables) keep the
  interpreter's 0, since a sentinel there would be reported as an access out of bounds, not as the missing
  ``other=``.
- ``tl.dot`` with an inner dimension below 16: the interpreter multiplies any tile; Triton's NVIDIA back end
  refuses K < 16 (K < 32 for 8-bit operands). Inside ``strict()`` the interpreter refuses it too, with the
  compiler's own message.

Nothing is patched on a GPU, and outside ``strict()`` the interpreter behaves as Triton ships it (the
notebooks' own demonstrations included). The seams are InterpreterBuilder.create_masked_load and the builder's
``codegen_fns["min_dot_size"]``, as in triton 3.6 to 3.9; where one is missing that half is left out.

One change holds everywhere on the CPU, since it changes nothing but time: the interpreter's check of 32-bit
integer overflow, which it computes on every add, sub and mul and then drops outside debug mode, is not computed
unless its options say debug (``_unchecked``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect

from autograder import runtime

_depth = 0  # how many strict() blocks are open (graders nest: check() around a criterion's own calls)
_installed: bool | None = None


def _gpu_min_dot_size(lhs_type, rhs_type):
    """(M, N, K) lower bounds of tl.dot on NVIDIA GPUs (triton's back end): K >= 16, K >= 32 for 8-bit."""
    bits = getattr(getattr(lhs_type, "scalar", None), "primitive_bitwidth", 16)
    return (1, 1, 32) if bits == 8 else (1, 1, 16)


def _filling(original):
    params = list(inspect.signature(original).parameters)[1:]  # after self
    ptr_at, mask_at, other_at = params.index("ptrs"), params.index("mask"), params.index("other")

    def create_masked_load(self, *args, **kwargs):
        if _depth:
            other = args[other_at] if len(args) > other_at else kwargs.get("other")
            mask = args[mask_at] if len(args) > mask_at else kwargs.get("mask")
            if other is None and mask is not None and not mask.data.all():
                filled = _nan_other(args[ptr_at] if len(args) > ptr_at else kwargs["ptrs"])
                if filled is not None:
                    if len(args) > other_at:
                        args = (*args[:other_at], filled, *args[other_at + 1:])
                    else:
                        kwargs["other"] = filled
        return original(self, *args, **kwargs)

    create_masked_load.__wrapped__ = original
    return create_masked_load


def _nan_other(ptrs):
    import numpy as np
    from triton.runtime import interpreter

    element = ptrs.get_element_ty()
    np_dtype = interpreter._get_np_dtype(element)
    if getattr(element, "is_bf16", lambda: False)():
        return interpreter.TensorHandle(np.full_like(ptrs.data, 0x7FC0, dtype=np_dtype), element)
    if not np.issubdtype(np_dtype, np.floating):
        return None  # integer data (and fp8, stored as bytes): the interpreter's 0 stays
    return interpreter.TensorHandle(np.full_like(ptrs.data, np.nan, dtype=np_dtype), element)


def install() -> bool:
    """Put the wrappers in place (once; they do nothing outside strict()). False where this Triton lacks a seam."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        from triton.runtime import interpreter

        builder = interpreter.InterpreterBuilder
        current = builder.__dict__["create_masked_load"]
        wrapped = _filling(current)
        interpreter.TensorHandle  # noqa: B018  the fill is built from it
    except (ImportError, AttributeError, KeyError, ValueError):
        _installed = False
        return False
    builder.create_masked_load = wrapped
    for b in _builders():
        b.options = _unchecked(b.options)
    _installed = True
    return True


def _builders():
    """The interpreter's builder objects whose codegen_fns a tl.dot consults."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return []
    found = getattr(interpreter, "interpreter_builder", None)
    return [found] if found is not None and isinstance(getattr(found, "codegen_fns", None), dict) else []


def _unchecked(options):
    """The builder's options without the overflow check, unless debug is on. The interpreter recomputes every
    32-bit add, sub and mul of a kernel in int64 and builds the assertion that it fits (a third of its time on an
    elementwise kernel), then drops that assertion unless its options say debug (as a GPU build drops it without
    TRITON_DEBUG=1): outside debug the check costs time and changes nothing."""
    if options is None or not dataclasses.is_dataclass(options) or not hasattr(options, "sanitize_overflow") \
            or getattr(options, "debug", True):
        return options
    return dataclasses.replace(options, sanitize_overflow=False)


@contextlib.contextmanager
def strict():
    """While open, interpreted kernels see NaN in masked-off lanes loaded without other= and tl.dot's GPU bounds.
    A no-op on a GPU."""
    global _depth
    if not runtime.interpreted():
        yield
        return
    install()
    builders = _builders()
    saved = [b.codegen_fns.get("min_dot_size") for b in builders]
    _depth += 1
    for b in builders:
        b.codegen_fns["min_dot_size"] = _gpu_min_dot_size
    try:
        yield
    finally:
        _depth -= 1
        if not _depth:
            for b, fn in zip(builders, saved):
                if fn is None:
                    b.codegen_fns.pop("min_dot_size", None)
                else:
                    b.codegen_fns["min_dot_size"] = fn


if runtime.interpreted():
    install()  # at import, before the grader records its own state (guard/integrity.py): nothing changes later
