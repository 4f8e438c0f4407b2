"""The cell ends the process (os._exit): the checker records the crash for every criterion."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness", "fusion"]
FAILS = {"correctness": ["exited with code 3", "before grading finished"], "fusion": ["exited with code 3"]}

import os

os._exit(3)
