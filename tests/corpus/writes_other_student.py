"""Finds the class run among its own process's ancestors (the nearest whose command line says grade-class) and
replaces another student's submission in that run's course folder. Only its own ancestors: a scan of every
process on the machine would also find the grade-class runs of other tests going on beside it."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "tampered"
REASON = ["changed files outside its own workspace", "submitted/alice"]

# %% cell fused_chain
import glob
import os

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)

pid = os.getppid()
while pid > 1:
    with open(f"/proc/{pid}/cmdline", "rb") as cmd:
        if b"grade-class" in cmd.read().split(b"\0")[:4]:  # python -m autograder grade-class ...
            break
    with open(f"/proc/{pid}/stat") as stat:
        pid = int(stat.read().rsplit(")", 1)[1].split()[1])
folder = os.readlink(f"/proc/{pid}/cwd")
for path in glob.glob(os.path.join(folder, "submitted", "alice", "*", "*.ipynb")):
    with open(path, "w") as f:
        f.write('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
