"""The notebook kills the process that grades it (its kernel's parent)."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "crashed"
REASON = ["the grading process was ended by SIGKILL"]
FLAGS = ["sends signals to processes"]

# %% cell fused_chain
import os
import signal

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

os.kill(os.getppid(), signal.SIGKILL)
