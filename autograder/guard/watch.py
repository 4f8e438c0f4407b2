"""Watching a student's function run.

- ``Watch`` is a TorchDispatchMode that, outside Triton launches (counted by measure.meters.TritonLaunches),
  (a) hands out every new tensor as a view into a poisoned, guard-padded buffer, so unwritten elements and
  out-of-bounds stores can be named, and (b) records any torch operation that computes, as opposed to
  allocating or taking a view.
- ``quiet`` keeps the grader off stderr (nbgrader scores any stderr output as a failure).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autograder import memcheck
from autograder.measure.meters import TritonLaunches, storage_of

GUARD = 1 << 16  # elements of guard on each side of a watched buffer


def poison_value(dtype: torch.dtype):
    """A value no sane kernel produces: the most negative finite number of the dtype."""
    if dtype.is_floating_point:
        return torch.finfo(dtype).min
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).min


def guard_value(dtype: torch.dtype):
    if dtype.is_floating_point:
        return torch.finfo(dtype).max
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def storage_span(t: torch.Tensor) -> int:
    """Elements from a tensor's first to its last element, inclusive."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def to_device_keeping_layout(t: torch.Tensor, device) -> torch.Tensor:
    """t on device with the same strides: a transposed, sliced or padded view stays one (.to() would not)."""
    if t.is_contiguous() or torch.device(device) == t.device:
        return t.to(device)
    base = torch.empty(storage_span(t), dtype=t.dtype, device=device)
    view = torch.as_strided(base, t.shape, t.stride())
    view.copy_(t)
    return view


class Guarded:
    """A tensor living inside a larger buffer whose borders are filled with a known pattern."""

    def __init__(self, shape, stride, dtype, device, fill=None, what="output"):
        self.what = what
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(s > 0 for s in shape) else 0
        self.span = span
        self.buffer = torch.empty(span + 2 * GUARD, dtype=dtype, device=device)
        self.buffer.fill_(guard_value(dtype))
        self.tensor = torch.as_strided(self.buffer, tuple(shape), tuple(stride), GUARD)
        if self.buffer.device.type == "cpu":
            memcheck.limit_loads(self.buffer, GUARD, span)  # the interpreter: a load from a guard raises
        if fill is not None:
            self.buffer[GUARD : GUARD + span].fill_(fill)

    @classmethod
    def copy_of(cls, t: torch.Tensor, what: str) -> "Guarded":
        g = cls(t.shape, t.stride(), t.dtype, t.device, what=what)
        g.tensor.copy_(t)
        return g

    def guard_damage(self) -> str | None:
        """Describe writes into the guards, or None if they are intact."""
        gv = guard_value(self.buffer.dtype)
        before = self.buffer[:GUARD]
        after = self.buffer[GUARD + self.span :]
        msgs = []
        for name, part, sign in (("before the start", before, -1), ("past the end", after, 1)):
            bad = part != gv  # NaN != anything, so a NaN written into a guard counts too
            n = int(bad.sum())
            if n:
                idx = torch.nonzero(bad).flatten()
                dist = (GUARD - int(idx[-1])) if sign < 0 else int(idx[0]) + 1
                msgs.append(f"{n} element(s) written {name} of the {self.what} (nearest {dist} element(s) away)")
        return "; ".join(msgs) or None


_ALLOC = {
    "empty.memory_format",
    "empty_like.default",
    "empty_strided.default",
    "new_empty.default",
    "new_empty_strided.default",
}
# Operations that allocate, take views or read metadata: allowed in a fused function.
_ALLOWED = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "zero_", "fill_", "full", "full_like", "ones", "ones_like",
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "expand", "slice", "select", "alias", "detach", "lift_fresh", "unbind", "split", "chunk", "narrow",
    "view_as_real", "view_as_complex", "flatten", "unflatten", "movedim", "diagonal", "_reshape_alias",
    "is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_local_scalar_dense",
    "is_nonzero", "item", "set_", "resize_",
}


def _moves_integers(name: str, args) -> bool:
    """A copy of integer tensors only: uploading a kernel's metadata (pointer or index tables), not compute."""
    if name not in {"_to_copy", "copy_", "_copy_from", "lift_fresh_copy", "clone"}:
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(not (t.is_floating_point() or t.is_complex()) for t in tensors)


class Watch(TorchDispatchMode):
    """Guard-pads new tensors and records computing torch ops, outside Triton launches."""

    def __init__(self, launches: TritonLaunches, poison: bool = True):
        super().__init__()
        self.launches = launches
        self.poison = poison
        self.allocations: list[Guarded] = []
        self.torch_ops: list[str] = []
        self.written: dict[int, tuple[int, str]] = {}  # storage -> (when, which torch op) of the last compute
        self._results: list[torch.Tensor] = []  # kept alive, so that no later tensor reuses their storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.launches.depth > 0:
            return func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        full = f"{name}.{func._overloadname}"
        if self.poison and full in _ALLOC:
            real = func(*args, **kwargs)
            g = Guarded(real.shape, real.stride(), real.dtype, real.device, fill=poison_value(real.dtype))
            self.allocations.append(g)
            return g.tensor
        if name in _ALLOWED or _moves_integers(name, args):
            return func(*args, **kwargs)
        self.torch_ops.append(f"torch {name}")
        result = func(*args, **kwargs)
        self.launches.events += 1
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                self.written[storage_of(t)] = (self.launches.events, name)
                self._results.append(t)
        return result

    def computed_by_torch(self, t: torch.Tensor) -> str | None:
        """The torch op that last wrote t's storage, when no Triton launch was handed it afterwards."""
        when, name = self.written.get(storage_of(t), (0, None))
        return name if when > self.launches.handed.get(storage_of(t), 0) else None

    def owner(self, t: torch.Tensor) -> Guarded | None:
        for g in self.allocations:
            if storage_of(t) == storage_of(g.buffer):
                return g
        return None


@contextlib.contextmanager
def quiet():
    """Send everything written to stderr (Python or C level) and every warning into a list of strings.

    Yields the list; it is filled when the block ends (empty when nothing was written).
    """
    captured: list[str] = []
    sys.stderr.flush()
    try:
        saved_fd, tmp = os.dup(2), tempfile.TemporaryFile(mode="w+b")
        os.dup2(tmp.fileno(), 2)
    except OSError:  # no real fd 2 (some embedded interpreters): Python-level capture only
        saved_fd, tmp = None, None
    buf = io.StringIO()
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(buf):
            warnings.simplefilter("always")
            yield captured
    finally:
        parts = [buf.getvalue()]
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            tmp.seek(0)
            parts.append(tmp.read().decode(errors="replace"))
            tmp.close()
        parts += [f"{w.category.__name__}: {w.message}" for w in caught]
        captured.extend(p.strip() for p in parts if p.strip())
