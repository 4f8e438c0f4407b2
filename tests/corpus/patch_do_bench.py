"""triton.testing.do_bench replaced by a stopwatch that always reads a microsecond."""
EXERCISE = "01.fused_chain"
ROUTE = "checker"
CRITERIA = ["correctness"]
FAILS = {"correctness": ["triton.testing.do_bench was replaced by fast_bench"]}

import triton.testing

from kernels.fused_chain import fused_chain  # noqa: F401  (the answer: the course's kernel)


def fast_bench(fn, *args, **kwargs):
    fn()
    return 1e-3


triton.testing.do_bench = fast_bench
