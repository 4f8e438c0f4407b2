"""Finds the course folder and replaces another student's submission with an empty notebook."""
EXERCISE = "01.fused_chain"
ROUTE = "class"
STATUS = "tampered"
REASON = ["changed files outside its own workspace", "submitted/alice"]

# %% cell fused_chain
import glob
import os

from kernels.fused_chain import fused_chain

found, pid = [], os.getpid()
while pid > 1:
    cwd = os.readlink(f"/proc/{pid}/cwd")
    if os.path.exists(os.path.join(cwd, "gradebook.db")) and os.path.isdir(os.path.join(cwd, "submitted")):
        found.append(cwd)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
for path in glob.glob(os.path.join(found[-1], "submitted", "alice", "*", "*.ipynb")):
    with open(path, "w") as f:
        f.write('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
