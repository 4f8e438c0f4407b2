"""The largest single tensor a call creates: what tells a tiled loop in plain torch from one that materialises
a whole intermediate, where the sum of every allocation cannot (a loop's tiles add up to the intermediate's size
although no more than one of them is alive at a time)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autograder.measure.meters import storage_of


class LargestAllocation(TorchDispatchMode):
    """While active, the bytes of the largest new storage any torch operation returns (views make none)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = {storage_of(a) for a in args if isinstance(a, torch.Tensor)}
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta" and storage_of(t) not in before:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return result


def largest_allocation(fn):
    """(fn(), the bytes of the largest tensor torch created during the call), on a GPU as in the interpreter."""
    with LargestAllocation() as meter:
        result = fn()
    return result, meter.largest
