"""Takes the grader's per-GPU timing lock itself, so that the performance criterion would wait for "another
grading" and then skip. The holder is the graded process: performance fails at once, naming the lock."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["the grader's timing lock", "held by this process itself"]}

import fcntl
import os

from autograder.measure import gpu_share
from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

_fd = os.open(gpu_share._lock_path(), os.O_RDONLY | os.O_CREAT)
fcntl.flock(_fd, fcntl.LOCK_EX)
