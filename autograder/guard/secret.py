"""Cases students never see in a notebook: extra shapes (or tensor sizes) per exercise. The secret seed is in
grading.toml, which an instructor overrides on the grading machine (FUSION_COURSE_GRADING)."""

from autograder.specs.exercise import Shape

EXTRA_SHAPES = {
    "01.fused_chain": (Shape((3, 5003)), Shape((129, 1031), "transposed"), Shape((9, 2050), "strided"), Shape((1, 1))),
    "02.rmsnorm": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.add_rmsnorm": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.layernorm": (Shape((3, 12289)), Shape((5, 5121), "offset")),
    "02.rmsnorm_repair": (Shape((3, 12289)), Shape((6, 2047), "padded")),
    "02.rmsnorm_backward": (Shape((3, 12289)), Shape((70, 513))),
    "03.row_sum_sumsq": (Shape((2, 40961)), Shape((129, 3), "transposed"), Shape((7, 5001), "padded")),
    "03.qkv_projection": (Shape((33, 80, 24, 300)), Shape((3, 128, 64, 4097))),
    "04.gemm_gelu_residual": (Shape((65, 129, 1000)), Shape((2, 3000, 70), "linear"), Shape((257, 31, 33), "padded")),
    "04.swiglu": (Shape((65, 129, 1000)), Shape((3, 1000, 40), "linear"), Shape((129, 17, 65), "padded")),
    "04.lora": (Shape((65, 129, 40, 1000)), Shape((3, 1000, 8, 40), "transposed"), Shape((129, 17, 64, 65), "padded")),
    "05.softmax": (Shape((2, 16385), "masked"), Shape((3, 33000), "padded"), Shape((65, 3))),
    "05.flash_attention": (Shape((1, 1, 33, 16), "causal"), Shape((2, 2, 129, 64), "causal bnhd"),
                           Shape((1, 1, 257, 128))),
    "05.flash_attention_torch": (Shape((1, 1, 33, 16), "causal"), Shape((2, 2, 129, 64), "causal bnhd")),
    "05.moe_router": (Shape((65, 200, 8)), Shape((7, 128, 2), "ties padded"), Shape((1, 8, 8))),
    "05.linear_cross_entropy": (Shape((65, 48, 4097)), Shape((3, 72, 257), "confident int32"), Shape((2, 8, 2))),
    "05.sparse_head": (Shape((2, 65, 80, 1031)), Shape((5, 3, 16, 2), "empty"), Shape((1, 200, 24, 129), "full")),
    "08.flash_attention_ws": (Shape((1, 1, 33, 16), "causal"), Shape((2, 2, 129, 64), "causal"),
                              Shape((1, 1, 257, 128))),
}

# Step exercises: extra lists of tensor sizes.
EXTRA_SIZES = {
    "03.adamw_step": ((2048, 1, 2047, 6151), (5,) * 33),
}
