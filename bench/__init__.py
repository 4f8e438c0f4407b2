"""The benchmarks: every reference kernel timed against eager PyTorch, torch.compile and its peers on one GPU, and
what grading costs. A tool of the repository, run from its root; not part of the course's wheel.

    python -m bench                # the whole suite (bench.suite)
    python -m bench.peers          # one part alone: peers, gemm, streaming, compiler, training, capstone
    python -m bench.headroom       # how far every reference solution clears its grading bars, warm
    python -m bench.coldstart      # the same, every grading cold (a fresh process, empty caches)
    python -m bench.grading        # seconds to grade each notebook
    python -m bench.scale          # grade-class on one GPU, then one student per GPU
    python -m bench.hopper         # how far Triton gets on Hopper: attention and cross-entropy variants

Results are data: one JSON file a run in bench/results/, with its device, versions and date
(bench/common.py says where each part's runs go). From them alone, without a GPU:

    python -m bench.report         # docs/benchmarks.md: the newest run of each benchmark on each device
    python -m bench.plots          # the figures, next to the runs they are drawn from
"""
