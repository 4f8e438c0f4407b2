"""Cases students never see in a notebook: extra shapes per exercise. The secret seed is in grading.toml,
which an instructor overrides on the grading machine (FUSION_COURSE_GRADING)."""

from .specs import Shape

EXTRA_SHAPES = {
    "01.fused_chain": (Shape((3, 5003)), Shape((129, 1031), "transposed"), Shape((9, 2050), "strided"), Shape((1, 1))),
    "02.rmsnorm": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.add_rmsnorm": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.layernorm": (Shape((3, 12289)), Shape((5, 5121), "offset")),
    "02.rmsnorm_repair": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.rmsnorm_backward": (Shape((3, 12289)), Shape((70, 513))),
}
