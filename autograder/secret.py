"""Cases students never see in a notebook: extra shapes per exercise. The secret seed is in grading.toml,
which an instructor overrides on the grading machine (FUSION_COURSE_GRADING)."""

from .specs import Shape

EXTRA_SHAPES = {
    "01.fused_chain": (Shape((3, 5003)), Shape((129, 1031), "transposed"), Shape((9, 2050), "strided"), Shape((1, 1))),
}
