"""Meters a grading runs a student's function under.

- ``TritonLaunches`` wraps Triton's launch entry points, counting launches and marking the time spent inside
  them, and keeps what each launch compiled to (``CompiledFigures``). (Triton's launch hooks do not fire in the
  interpreter, so the entry points are wrapped instead.)
- ``AllocationMeter`` counts the bytes of every storage torch creates while it is active.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def storage_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@dataclasses.dataclass(frozen=True)
class CompiledFigures:
    """What a launched kernel compiled to: registers a thread and registers spilled to local memory (ptxas), the
    warps it runs (after warp specialization, the producer's and consumers' together), its shared memory, and
    whether Triton split a loop of it into warp groups (its TTGIR holds a ttg.warp_specialize region)."""

    name: str
    n_regs: int
    n_spills: int
    settings: str
    num_warps: int = 0
    shared_bytes: int = 0
    warp_specialized: bool = False

    @classmethod
    def of(cls, kernel, kwargs: dict) -> "CompiledFigures":
        meta = getattr(kernel, "metadata", None)
        warps = getattr(meta, "num_warps", None)
        blocks = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k.isupper() and isinstance(v, int))
        settings = ", ".join(x for x in (blocks, f"num_warps={warps}" if warps else "") if x)
        asm = getattr(kernel, "asm", None)
        ttgir = asm.get("ttgir", "") if hasattr(asm, "get") else ""
        return cls(getattr(kernel, "name", "kernel"), int(kernel.n_regs), int(kernel.n_spills), settings,
                   int(warps or 0), int(getattr(meta, "shared", 0) or 0), "ttg.warp_specialize" in str(ttgir))


class TritonLaunches:
    """Counts Triton launches, knows whether we are inside one, and which storages each launch was handed.

    Every kernel object launched under any instance is also kept in TritonLaunches.ran (until check() clears
    it), so that the kernels a graded function ran can be recognised afterwards (fingerprint.py).
    """

    ran: dict[int, object] = {}

    def __init__(self):
        self.count = 0
        self.names: list[str] = []
        self.depth = 0
        self.events = 0  # a clock shared with Watch: which came last, a torch op or a launch?
        self.handed: dict[int, int] = {}  # storage -> when a launch last received it
        self._saved = []
        self.compiled: list[CompiledFigures] = []  # what each launch compiled to (on a GPU; not the interpreter)

    def __enter__(self):
        from triton.runtime import autotuner, interpreter, jit

        classes = [jit.JITFunction, interpreter.InterpretedFunction, autotuner.Autotuner, autotuner.Heuristics]
        for cls in classes:
            if "run" not in cls.__dict__:
                continue
            original = cls.__dict__["run"]
            self._saved.append((cls, original))
            setattr(cls, "run", self._wrap(original))
        return self

    def _wrap(self, original):
        tracker = self

        def run(kernel, *args, **kwargs):
            outermost = tracker.depth == 0
            if outermost and not kwargs.get("warmup", False):
                tracker.count += 1
                fn = getattr(kernel, "fn", kernel)
                tracker.names.append(getattr(fn, "__name__", type(kernel).__name__))
                TritonLaunches.ran.setdefault(id(kernel), kernel)
                tracker.events += 1
                for a in list(args) + list(kwargs.values()):
                    if isinstance(a, torch.Tensor):
                        tracker.handed[storage_of(a)] = tracker.events
            tracker.depth += 1
            try:
                ret = original(kernel, *args, **kwargs)
            finally:
                tracker.depth -= 1
            if hasattr(ret, "n_spills") and not kwargs.get("warmup", False):  # a JITFunction's compiled kernel
                tracker.compiled.append(CompiledFigures.of(ret, kwargs))
            return ret

        return run

    def __exit__(self, *exc):
        for cls, original in reversed(self._saved):
            setattr(cls, "run", original)
        self._saved.clear()
        return False


class AllocationMeter(TorchDispatchMode):
    """The bytes of every new storage torch creates while active (Triton kernels allocate nothing).

    Their sum bounds the peak from above: it counts a tensor freed before the next was made as if it
    were still alive. On a GPU the caching allocator's peak is exact; this is for the interpreter."""

    def __init__(self, launches: TritonLaunches | None = None):
        super().__init__()
        self.launches = launches  # inside a launch the interpreter copies the arguments: not the kernel's doing
        self.bytes = 0
        self._seen: set[int] = set()
        self._keep: list[torch.Tensor] = []  # alive until the meter goes: no address is counted twice

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.launches is not None and self.launches.depth > 0:
            return func(*args, **(kwargs or {}))
        before = {storage_of(a) for a in args if isinstance(a, torch.Tensor)}
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = storage_of(t)
                if key not in self._seen and key not in before:
                    self._seen.add(key)
                    self._keep.append(t)
                    self.bytes += t.untyped_storage().nbytes()
        return result
