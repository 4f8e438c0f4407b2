"""Starts a process that outlives the call (it could load the GPU while the kernel is timed, and pass for a
neighbour). A process the submission started is the submission's: performance fails, naming it."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["a process your code started is still running", "sleep"]}

import subprocess
import sys

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
