"""Recording which elements each program of a Triton launch reads and writes, in the interpreter.

``record_programs(kernel, grid, *args, **kwargs)`` runs the launch once in Triton's interpreter with the
builder's masked load and store wrapped, and returns a ``Recording``: every ``Access`` of every program,
and the CPU copies of the tensors as the kernel left them. How it works and what it records is told in
``autograder.teach.programs``, which draws the record and is where notebooks import it from.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections import defaultdict

import numpy as np
import torch

__all__ = ["Access", "ProgramsUnavailable", "Recording", "program_label", "record_programs"]


def program_label(program: tuple[int, ...]) -> str:
    """A program's number as it is written on the drawing: "2", or "(1,0)" on a grid of several axes."""
    return str(program[0]) if len(program) == 1 else "(" + ",".join(map(str, program)) + ")"


class ProgramsUnavailable(RuntimeError):
    """This Triton's interpreter does not have the hooks the recorder uses."""


@dataclasses.dataclass
class Access:
    """One tl.load or tl.store executed by one program."""

    program: tuple[int, ...]  # tl.program_id along each axis of the grid
    kind: str  # "load" or "store"
    tensor: str  # the kernel parameter the tensor was passed as, e.g. "x_ptr"
    active: list[tuple[int, ...]]  # coordinates (in the tensor) of the lanes that were read or written
    masked: list[tuple[int, ...]]  # coordinates the masked-off lanes point at (past the tensor's end too)
    outside: list[tuple[int, ...]]  # active lanes outside the tensor, at coordinates past its edges
    outside_unplaced: int = 0  # active lanes outside the tensor where no coordinate fits (before it, say)


@dataclasses.dataclass
class Recording:
    """What a launch touched: the accesses in the order they ran, and the tensors as the kernel left them."""

    grid: tuple[int, ...]
    accesses: list[Access]
    tensors: dict[str, torch.Tensor]  # parameter name -> the CPU copy the kernel ran on

    def cells(self, tensor: str, kind: str | None = None, what: str = "active") -> dict[tuple, set[tuple]]:
        """{program: coordinates} of one tensor's `what` lanes ("active", "masked" or "outside"), over loads,
        stores, or both (kind None)."""
        out: dict[tuple, set[tuple]] = defaultdict(set)
        for a in self.accesses:
            if a.tensor == tensor and (kind is None or a.kind == kind):
                out[a.program] |= set(getattr(a, what))
        return dict(out)

    def out_of_bounds(self) -> list[Access]:
        """The accesses that had active lanes outside their tensor (each was recorded, not performed)."""
        return [a for a in self.accesses if a.outside or a.outside_unplaced]

    def summary(self) -> str:
        lines = []
        for (name, kind), progs in self._panels().items():
            n = sum(len(s) for s in progs["active"].values())
            m = sum(len(s) for s in progs["masked"].values())
            o = sum(len(s) for s in progs["outside"].values())
            verb = "read" if kind == "load" else "written"
            lines.append(f"{name}: {n} element accesses {verb} by {len(progs['active'])} programs, "
                         f"masked-off lanes: {m}" + (f", OUT OF BOUNDS: {o}" if o else ""))
        for a in self.out_of_bounds()[:3]:
            lines.append(f"  program {program_label(a.program)}: tl.{a.kind} outside {a.tensor} "
                         f"(lanes: {len(a.outside) + a.outside_unplaced}, e.g. at {a.outside[:3] or '?'})")
        return "\n".join(lines)

    def _panels(self) -> dict:
        panels: dict = {}
        for a in self.accesses:
            p = panels.setdefault((a.tensor, a.kind), {w: defaultdict(set) for w in ("active", "masked", "outside")})
            for w in ("active", "masked", "outside"):
                p[w][a.program] |= set(getattr(a, w))
        return panels


# ------------------------------------------------------------------ recording

def _interpreter():
    """The interpreter module and its builder, or a clear error when this Triton's differ from what we expect."""
    try:
        from triton.runtime import interpreter
    except Exception as exc:  # noqa: BLE001
        raise ProgramsUnavailable(f"draw_programs needs Triton's interpreter (triton.runtime.interpreter): {exc}")
    builder = getattr(interpreter, "interpreter_builder", None)
    missing = [n for n in ("create_masked_load", "create_masked_store") if not callable(getattr(builder, n, None))]
    if builder is None or missing or not hasattr(interpreter, "InterpretedFunction"):
        import triton

        raise ProgramsUnavailable(
            f"draw_programs cannot hook the interpreter of triton {triton.__version__} (it lacks "
            f"{', '.join(missing) or 'interpreter_builder / InterpretedFunction'}): the launch was not drawn. "
            "The kernel itself is unaffected; run it normally.")
    return interpreter, builder


def _python_function(kernel):
    """The plain Python function under @triton.jit (and under @triton.autotune / heuristics wrappers)."""
    fn = kernel
    for _ in range(8):
        if inspect.isfunction(fn):
            return fn
        fn = getattr(fn, "fn", None)
    raise TypeError(f"draw_programs wants a @triton.jit kernel, got {type(kernel).__name__}")


class _Place:
    """Turns addresses into coordinates of one tensor (its view, through its strides)."""

    def __init__(self, name: str, t: torch.Tensor):
        self.name, self.t = name, t
        storage = t.untyped_storage()
        self.lo, self.hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        self.base, self.esize = t.data_ptr(), t.element_size()
        shape = tuple(t.shape) or (1,)
        strides = tuple(t.stride()) or (1,)
        # Dimensions from the largest stride to the smallest: unravelling an offset along them finds the element.
        self.order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
        self.shape, self.strides = shape, strides

    def holds(self, addr: np.ndarray) -> np.ndarray:
        return (addr >= self.lo) & (addr + self.esize <= self.hi)

    def coords(self, addr: int) -> tuple[tuple[int, ...] | None, bool]:
        """(coordinates or None where none fits, inside the view)."""
        off, rem = divmod(int(addr) - self.base, self.esize)
        if rem:
            return None, False
        coord = [0] * len(self.shape)
        for d in self.order:  # the largest stride first
            if self.strides[d]:
                coord[d], off = divmod(off, self.strides[d])
        if off:
            return None, False
        outer = self.order[0]
        inner_ok = all(0 <= coord[d] < self.shape[d] for d in self.order[1:])
        if not inner_ok or coord[outer] < 0:
            return None, False
        return tuple(coord), coord[outer] < self.shape[outer]


def _cpu_copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU copies with the same strides and offsets, each in a copy of its whole storage (a sliced view keeps
    its gaps); tensors that share memory share it in the copies too."""
    storages: dict = {}
    out = {}
    for name, t in tensors.items():
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in storages:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            storages[key] = torch.empty(storage.nbytes(), dtype=torch.uint8)
            storages[key].copy_(raw)
        out[name] = torch.empty(0, dtype=t.dtype).set_(storages[key].untyped_storage(), t.storage_offset(),
                                                       t.shape, t.stride())
    return out


def record_programs(kernel, grid, *args, **kwargs) -> Recording:
    """Run kernel[grid](*args, **kwargs) once in Triton's interpreter, on CPU copies of the tensors, recording
    which elements each program loads and stores. Returns a Recording (see its `cells` and `summary`)."""
    interpreter, builder = _interpreter()
    fn = _python_function(kernel)
    grid = tuple(grid(kwargs) if callable(grid) else grid)
    params = list(inspect.signature(fn).parameters)
    if len(args) > len(params):
        raise TypeError(f"{fn.__name__} takes {len(params)} arguments, {len(args)} were given")
    named = {**dict(zip(params, args)), **{k: v for k, v in kwargs.items() if k in params}}
    copies = _cpu_copies({k: v for k, v in named.items() if isinstance(v, torch.Tensor)})
    args = tuple(copies.get(p, a) for p, a in zip(params, args))
    kwargs = {k: copies.get(k, v) for k, v in kwargs.items()}
    places = [_Place(name, t) for name, t in copies.items()]
    accesses: list[Access] = []

    def note(kind, ptrs, mask):
        addr = np.asarray(ptrs.data).astype(np.uint64).reshape(-1)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.asarray(ptrs.data).shape).reshape(-1)
        if not places:
            return None
        counts = [int((p.holds(addr) & on).sum()) for p in places]
        if max(counts) > 0:
            place = places[int(np.argmax(counts))]
        else:  # nothing active inside any tensor: the tensor starting nearest below the first address
            below = [p for p in places if p.lo <= int(addr.min())]
            place = max(below, key=lambda p: p.lo) if below else places[0]
        program = tuple(int(i) for i in (getattr(builder, "grid_idx", None) or (0, 0, 0))[: len(grid)])
        acc = Access(program, kind, place.name, [], [], [])
        inside = place.holds(addr)
        for a, active, ok in zip(addr.tolist(), on.tolist(), inside.tolist()):
            coord, in_view = place.coords(a)
            if not active:
                if coord is not None:
                    acc.masked.append(coord)
            elif ok and in_view:
                acc.active.append(coord)
            elif coord is not None:
                acc.outside.append(coord)
            else:
                acc.outside_unplaced += 1
        accesses.append(acc)
        return inside  # lanes outside the tensor's memory are not performed

    def masked_load(ptrs, mask, other, *rest):
        inside = note("load", ptrs, mask)
        return original_load(ptrs, _only(mask, inside), other, *rest)

    def masked_store(ptrs, value, mask, *rest):
        inside = note("store", ptrs, mask)
        return original_store(ptrs, value, _only(mask, inside), *rest)

    original_load, original_store = builder.create_masked_load, builder.create_masked_store
    globals_swapped = _interpret_helpers(fn, interpreter)
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    try:
        runner = kernel if isinstance(kernel, interpreter.InterpretedFunction) else interpreter.InterpretedFunction(fn)
        try:
            runner[grid](*args, **kwargs)
        except (RuntimeError, AssertionError) as exc:
            compiled_library = "outside of the scope of a kernel" in str(exc) or isinstance(exc, AssertionError)
            if runner is kernel or not compiled_library:
                raise
            raise ProgramsUnavailable(
                "this kernel calls Triton library functions (tl.sum, tl.max, ...) that were compiled for the GPU when "
                "Triton was imported, and cannot be drawn from this process: draw it on a CPU machine, or start the "
                "notebook with TRITON_INTERPRET=1") from None
    finally:
        del builder.create_masked_load, builder.create_masked_store  # the class's methods again
        for space, k, v in reversed(globals_swapped):
            space[k] = v
    return Recording(grid, accesses, copies)


def _only(mask, inside):
    """The mask with the lanes outside the tensor turned off (a copy; the original when all are inside)."""
    if inside is None or inside.all():
        return mask
    m = copy.copy(mask)
    shape = np.asarray(mask.data).shape
    m.data = np.broadcast_to(np.asarray(mask.data, dtype=bool), shape).copy().reshape(-1) & inside
    m.data = m.data.reshape(shape) if shape else m.data
    return m


def _interpret_helpers(fn, interpreter) -> dict:
    """On a GPU machine, the @triton.jit helpers the kernel calls (and theirs) are compiled-mode functions, which
    cannot run inside the interpreter: swap them for interpreted ones for the call. Returns [(namespace, name,
    original)] to restore. (triton.language's own @jit library functions, such as tl.sum's combine function, were
    made compiled-mode too; a kernel that reduces then fails, and record_programs says so.)"""
    from triton.runtime.jit import JITFunction

    saved, seen = [], {id(fn)}
    spaces = [fn.__globals__]
    while spaces:
        space = spaces.pop()
        for k, v in list(space.items()):
            if isinstance(v, JITFunction) and inspect.isfunction(getattr(v, "fn", None)) and id(v.fn) not in seen:
                seen.add(id(v.fn))
                saved.append((space, k, v))
                space[k] = interpreter.InterpretedFunction(v.fn)
                spaces.append(v.fn.__globals__)
    return saved
