"""The torch side of each fused op (references, eager versions, bytes and flops): what grading needs."""
