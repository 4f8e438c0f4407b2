"""What python -m bench.hopper covers: its parts and their goals, the dtypes, the shape its forward families are
swept at and the tolerance a variant must meet, the SDPA backends it compares against, and each family's space of
tile settings, with the plan of a run (what it would compile, and what it leaves out and why). No GPU needed.
"""

from __future__ import annotations

from bench import hopper_training as training
from kernels import attention_tuning as tuning
from kernels.flash_attention import ATTENTION_TMA_SETTINGS, attention_launch_settings
from kernels.flash_attention_ws import WS_SPACE

GOALS = {"forward": 0.95, **training.GOALS}  # forward: every peer shape at >= 0.95 of the best SDPA backend
DTYPES = ("bf16", "fp16")
SWEEP, SWEEP_DTYPE = (4, 16, 4096), "bf16"  # the families are swept at (*SWEEP, D) in SWEEP_DTYPE
TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2}
FAMILIES = ("portable", "tma", "ws")
SDPA = {"SDPA default": None, "SDPA cudnn": "CUDNN_ATTENTION", "SDPA flash": "FLASH_ATTENTION",
        "SDPA efficient": "EFFICIENT_ATTENTION"}
PARTS = ("forward", "backward", "cross_entropy")


def family_space(family: str, head_dim: int) -> tuple[list[dict], dict[str, str]]:
    """(settings, {setting: why left out}) of a forward family at this head size, in the order they are tried."""
    if family == "portable":
        return tuning.forward_space(head_dim, attention_launch_settings(4096, head_dim, None))
    if family == "tma":
        return tuning.forward_space(head_dim, ATTENTION_TMA_SETTINGS[0])
    return list(WS_SPACE), {}


def plan() -> dict:
    """What a forward run compiles and times, per family and head size, and the settings it leaves out."""
    out = {}
    for family in FAMILIES:
        for d in (128, 64):
            kept, left_out = family_space(family, d)
            out[f"{family} D={d}"] = {"settings": [tuning.setting_name(c) for c in kept], "left_out": left_out}
    return out
