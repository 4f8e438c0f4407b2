"""Leaves a daemon behind (double fork, own session) that would rewrite the gradebook once grading is over.
grade-class ends it with the notebook: the gradebook is untouched and the student is graded normally."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "graded"
FULL = ["test_cost_model", "test_fused_chain_correctness", "test_fused_chain_fusion"]
FLAGS = ["starts processes", "leaves its session"]

# %% cell fused_chain
import os
import time

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.environ["CORPUS_DAEMON_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)  # long after this notebook is graded
        for folder in ("..", "../..", "../../.."):
            if os.path.exists(os.path.join(folder, "gradebook.db")):
                with open(os.path.join(folder, "gradebook.db"), "ab") as db:
                    db.write(b"too late")
    os._exit(0)
