"""Out-of-bounds loads and stores in Triton's interpreter, raised as errors instead of corrupting the process.

On a CPU, Triton's interpreter computes every lane's address as a numpy array and then reads or writes host
memory there, unchecked: a store without its mask writes over the heap, and the process aborts later (in a
notebook, "the kernel appears to have died"). ``install()`` (run by ``import autograder`` when kernels are
interpreted) checks each address first, against the memory of the launch's tensor arguments, recorded as the
interpreter converts them to pointers; an access outside all of them raises ``OutOfBoundsError`` (an
IndexError) naming the kernel, the program and the tensor it came nearest to. The process lives on.

The seams (InterpreterBuilder's masked load and store, GridExecutor.__call__, _implicit_cvt) are those of
triton 3.6 to 3.9. Where one is missing nothing is patched: ``installed()`` is False, and the grader relies on
its guard-padded buffers alone (one line says so).

A kernel that makes pointers from integers (tl.load of an address table, then .to(tl.pointer_type(...))) reaches
tensors it was not given: its accesses go unchecked from then on, and the guard buffers alone watch its stores.

The grader's guard-padded tensors (guard/watch.py: Guarded) register their inner extent: a load from a guard
is out of bounds too (it reads a value no input holds), while a store into a guard is left for the guard check
to describe after the call.
"""

from __future__ import annotations

import inspect
import sys
import weakref

_installed: bool | None = None
_launches: list[_Launch] = []  # the interpreted launches in progress, innermost last
_extents: dict[int, tuple[int, int]] = {}  # storage address -> (first byte, end byte) of a guarded tensor


class OutOfBoundsError(IndexError):
    """A Triton kernel, run by the interpreter, loaded or stored outside every tensor it was given."""


class _Launch:
    def __init__(self, name: str, labels: dict[int, str]):
        self.name = name
        self.labels = labels  # storage address -> argument name
        self.ranges: list[tuple[int, int, int, int]] = []  # (store from, store to, load from, load to), bytes
        # Pointers made from integers (a table of tensor addresses, as a multi-tensor optimizer step reads) point
        # into tensors the launch was not given: past the first, its accesses cannot be checked.
        self.opaque = False


def installed() -> bool:
    """True when interpreted loads and stores are bounds-checked in this process."""
    return bool(_installed)


def limit_loads(buffer, first_element: int, n_elements: int) -> None:
    """Loads from buffer's storage must stay within n_elements from first_element (a guarded tensor's inside).
    Forgotten when buffer is freed, so that no later storage at the same address inherits the limit."""
    key = buffer.untyped_storage().data_ptr()
    size = buffer.element_size()
    _extents[key] = (key + first_element * size, key + (first_element + n_elements) * size)
    weakref.finalize(buffer, _extents.pop, key, None)


def install() -> bool:
    """Check the interpreter's loads and stores from now on. Returns whether the check is in place."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        from triton.runtime import interpreter

        builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
        convert = interpreter.__dict__["_implicit_cvt"]
        run = executor.__dict__["__call__"]
        accesses = {name: builder.__dict__[name] for name in ("create_masked_load", "create_masked_store")}
        for name in ("create_atomic_rmw", "create_atomic_cas"):
            if name in builder.__dict__:
                accesses[name] = builder.__dict__[name]
        wrapped = {name: _checked(original, "load" if "load" in name else "store")
                   for name, original in accesses.items()}
    except (ImportError, AttributeError, KeyError, ValueError) as exc:
        _installed = False
        print(f"fusion-course: this Triton's interpreter could not be bounds-checked ({type(exc).__name__}: {exc}); "
              "out-of-bounds accesses are caught by the grader's guard buffers only.", file=sys.stdout)
        return False
    for name, fn in wrapped.items():
        setattr(builder, name, fn)
    if "create_int_to_ptr" in builder.__dict__:
        builder.create_int_to_ptr = _opaque(builder.__dict__["create_int_to_ptr"])
    interpreter._implicit_cvt = _recording(convert)
    executor.__call__ = _scoped(run)
    _installed = True
    return True


def _checked(original, what: str):
    params = list(inspect.signature(original).parameters)[1:]  # after self
    ptr_at = next(i for i, p in enumerate(params) if p.startswith("ptr"))
    mask_at = params.index("mask") if "mask" in params else None

    def access(self, *args, **kwargs):
        if _launches and _launches[-1].ranges:
            ptrs = args[ptr_at] if len(args) > ptr_at else kwargs.get(params[ptr_at])
            mask = None
            if mask_at is not None:
                mask = args[mask_at] if len(args) > mask_at else kwargs.get("mask")
            _check(self, ptrs, mask, what)
        return original(self, *args, **kwargs)

    access.__wrapped__ = original
    return access


def _opaque(original):
    def int_to_ptr(self, *args, **kwargs):
        if _launches:
            _launches[-1].opaque = True
        return original(self, *args, **kwargs)

    int_to_ptr.__wrapped__ = original
    return int_to_ptr


def _recording(convert):
    def implicit_cvt(arg):
        if _launches and hasattr(arg, "data_ptr"):
            base = getattr(arg, "base", arg)  # a TensorWrapper (a reinterpreted dtype) around its tensor
            try:
                storage = base.untyped_storage()
                start, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
            except (AttributeError, RuntimeError):
                start = end = None
            if start is not None and end > start:
                load_from, load_to = _extents.get(start, (start, end))
                _launches[-1].ranges.append((start, end, load_from, load_to))
        return convert(arg)

    implicit_cvt.__wrapped__ = convert
    return implicit_cvt


def _scoped(run):
    def __call__(self, *args, **kwargs):
        labels = {}
        names = getattr(self, "arg_names", None) or []
        for name, value in list(zip(names, args)) + list(kwargs.items()):
            if hasattr(value, "untyped_storage"):
                labels[value.untyped_storage().data_ptr()] = name
        _launches.append(_Launch(getattr(getattr(self, "fn", None), "__name__", "kernel"), labels))
        try:
            return run(self, *args, **kwargs)
        except Exception as exc:
            found, hops = exc, 0
            while found is not None and not isinstance(found, OutOfBoundsError) and hops < 16:
                found, hops = found.__cause__ or found.__context__, hops + 1
            if not isinstance(found, OutOfBoundsError):
                found = None
            if found is None or found is exc:
                raise
            raise found from None  # the interpreter wraps it in InterpreterError(repr(...)): show it as it is
        finally:
            _launches.pop()

    __call__.__wrapped__ = run
    return __call__


def _check(builder, ptrs, mask, what: str) -> None:
    import numpy as np

    launch = _launches[-1]
    if launch.opaque:
        return
    addrs = np.asarray(getattr(ptrs, "data", ptrs))
    lanes = None
    if mask is not None:
        lanes = np.asarray(getattr(mask, "data", mask))
        lanes = np.broadcast_to(lanes if lanes.dtype == bool else lanes.astype(bool), addrs.shape)
        if not lanes.any():
            return
    try:
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    except AttributeError:
        size = 1
    if addrs.size == 0:
        return
    if lanes is None:
        lo, hi = int(addrs.min()), int(addrs.max()) + size
    else:  # the active lanes' extremes, without copying them out
        lo = int(addrs.min(initial=np.iinfo(addrs.dtype).max, where=lanes))
        hi = int(addrs.max(initial=0, where=lanes)) + size
    bounds = [(r[2], r[3]) if what == "load" else (r[0], r[1]) for r in launch.ranges]
    if any(start <= lo and hi <= end for start, end in bounds):
        return  # the usual case: every lane inside one tensor
    addrs = (addrs if lanes is None else addrs[lanes]).astype(np.uint64, copy=False).ravel()
    ok = np.zeros(addrs.shape, dtype=bool)
    for start, end in bounds:
        ok |= (addrs >= np.uint64(start)) & (addrs <= np.uint64(end - size))
    if ok.all():
        return
    bad = addrs[~ok]
    raise OutOfBoundsError(_message(builder, launch, what, int(bad[0]), len(bad), addrs.size, size))


def _message(builder, launch: _Launch, what: str, addr: int, n_bad: int, n_lanes: int, size: int) -> str:
    pid = tuple(getattr(builder, "grid_idx", ()))
    nearest = None
    for start, end, load_from, load_to in launch.ranges:
        lo, hi = (load_from, load_to) if what == "load" else (start, end)
        gap = (lo - addr) if addr < lo else (addr + size - hi)
        side = "before the start" if addr < lo else "past the end"
        if nearest is None or gap < nearest[0]:
            nearest = (gap, side, launch.labels.get(start, "a tensor argument"))
    where = ""
    if nearest is not None:
        elements = max(1, -(-nearest[0] // size))
        where = f" (the first {elements} element(s) {nearest[1]} of {nearest[2]})"
    return (f"out-of-bounds {what} in {launch.name} at program {pid}: {n_bad} of {n_lanes} lanes outside every "
            f"tensor it was given{where}: a {what} without a correct mask (or a wrong index or stride)?")
