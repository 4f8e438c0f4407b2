"""The torch side of fake_quant (notebook 06): per-tensor symmetric int8 fake quantization, as a training
script for quantization-aware training writes it, with the float64 reference and the bytes it must move.

y = clamp(round(x / s), -127, 127) * s with s = max|x| / 127, in x's dtype; y = x where x is all zeros.
"""

from __future__ import annotations

import torch

LEVELS = 127.0


def fake_quant_broken(x: torch.Tensor) -> torch.Tensor:
    """The version notebook 06 asks the students to repair: the scale goes through the host (.item(): a graph
    break and a device-to-host copy that waits for the GPU), and a Python branch depends on its value."""
    amax = x.abs().max().item()
    if amax == 0:
        return x.clone()
    scale = amax / LEVELS
    return ((x.float() / scale).round().clamp(-LEVELS, LEVELS) * scale).to(x.dtype)


def fake_quant_reference(x: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    amax = xd.abs().max()
    if amax == 0:
        return xd.clone()
    scale = amax / LEVELS
    return (xd / scale).round().clamp(-LEVELS, LEVELS) * scale


def fake_quant_step(x: torch.Tensor) -> float:
    """One step of the quantization grid (the largest error rounding at a different boundary can cause)."""
    return float(x.double().abs().max()) / LEVELS


def fake_quant_bytes(x: torch.Tensor) -> int:
    """Read x twice (the maximum must be known before the first value is scaled) and write y once."""
    return 3 * x.numel() * x.element_size()
