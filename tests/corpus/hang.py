"""The function waits forever: the checker's time limit ends it and every criterion says so."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
TIMEOUT = 25
FAILS = {"correctness": ["timed out after 25 s"]}

import threading


def fused_chain(x, bias, alpha):
    threading.Event().wait()
