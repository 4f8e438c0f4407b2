"""Reference fused kernels, one op per module: the jit kernel and a plain launcher, with the op's torch side (the
float64 reference, the eager version, the bytes or flops it must move) imported from autograder/specs, which the
grader shares without needing these solutions. Importing this package picks the device first (interpreter
without a GPU).
"""

from autograder import runtime as _runtime

_runtime.configure()
