"""Per-tensor int8 fake quantization that torch.compile captures whole (notebook 06, exercise 2).

The broken version (autograder/specs/compiler_fusion.py) reads the maximum back to the host with .item() and branches
on it in Python: two graphs, a device-to-host copy that waits for the GPU, and a recompilation for each
distinct branch. Here the scale stays a 0-d tensor on the device and the branch is a torch.where, so Inductor
compiles one graph: a (split) reduction for the maximum and one pointwise kernel that scales, rounds, clamps
and scales back: three kernels and 3|x| of traffic on a GPU.
"""

from __future__ import annotations

import torch

from autograder.specs.compiler_fusion import LEVELS, fake_quant_bytes, fake_quant_reference  # noqa: F401


def fake_quant(x: torch.Tensor) -> torch.Tensor:
    """clamp(round(x / s), -127, 127) * s with s = max|x| / 127 (x itself where it is all zeros), in x's dtype."""
    amax = x.abs().amax().float()
    scale = torch.where(amax > 0, amax / LEVELS, torch.ones_like(amax))  # all zeros: any scale returns x
    return ((x.float() / scale).round().clamp(-LEVELS, LEVELS) * scale).to(x.dtype)
